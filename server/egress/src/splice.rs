//! The byte pump of the network path: both directions of one connection between two sockets,
//! moved by `splice(2)` through a pipe per direction, so the bytes never enter user space.
//! The sandbox agent's relay (TCP ↔ the server's Unix socket) and the proxy's `CONNECT`
//! tunnels (that Unix socket ↔ the upstream's TCP) both run on it.
//!
//! Why not `tokio::io::copy_bidirectional`: it copies every byte into a user buffer and out
//! again, at two hops each way; the download path was CPU-bound on those copies and on the
//! syscalls and wakeups of 32 KiB reads. A splice moves up to a pipe's worth of socket pages
//! per call, and the kernel does the only copy that is left (into the Unix socket).
//!
//! What it keeps of the copy it replaces: bytes counted each way, the idle clock and the
//! session's byte budget through [`Meter`] (the proxy's accounting; the relay has none), the
//! budget checked before each read so a connection stops at it, a half-close passed on
//! (`shutdown(SHUT_WR)` on one side once the other has reached its end and everything read was
//! written), the first error either way ending both, and cancellation by dropping the future.
//! Readiness is tokio's (`ready`/`try_io` on the sockets themselves), so a splice only runs
//! once the socket said it could move something.
//!
//! Where `splice` is refused (`EINVAL`, `ENOSYS`, `EPERM`, `EOPNOTSUPP`: odd descriptors, an
//! old kernel, a seccomp filter) or no pipe can be had (out of descriptors), a direction falls
//! back to `read`/`write` through a buffer, with the same accounting.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::io::Errno;
use rustix::pipe::{PipeFlags, SpliceFlags};
use tokio::io::Interest;
use tokio::net::{TcpStream, UnixStream};

/// The capacity asked of each direction's pipe, which is also the most one splice moves: the
/// default 64 KiB meant four splices (and four wakeups) per 256 KiB the upstream wrote; 256
/// KiB is within `fs.pipe-max-size` (1 MiB by default) for any user. A pipe holds pages only
/// while bytes are in flight, and is made only once its direction has something to move, so
/// an idle connection costs no pipe. When the kernel refuses the size (a user over
/// `fs.pipe-user-pages-soft`), the pipe keeps the size it got.
pub(crate) const PIPE_SIZE: usize = 256 * 1024;

/// The send buffer asked of the Unix socket between the relay and the proxy, on both ends: the
/// default (`net.core.wmem_default`, about 208 KiB) is less than one pipe's worth, so a full
/// pipe drained in two writes and a wakeup of the reader between them. Held only while bytes
/// are queued; the kernel caps it at `net.core.wmem_max`.
pub(crate) const UNIX_SNDBUF: usize = 4 * PIPE_SIZE;

/// Gives the Unix socket of the network path its [`UNIX_SNDBUF`] (best effort: a refusal
/// leaves the default, which is slower, not wrong).
pub(crate) fn widen(unix: &UnixStream) {
    let _ = rustix::net::sockopt::set_socket_send_buffer_size(unix, UNIX_SNDBUF);
}

/// Which way bytes go, between the `a` and `b` of [`bidirectional`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dir {
    AToB,
    BToA,
}

/// The accounting of a pumped connection (the proxy's byte counts, budget and idle clock).
pub(crate) trait Meter: Sync {
    /// How many bytes may still be read, either way; an error once none may (the connection
    /// then ends with it).
    fn allowance(&self) -> io::Result<usize>;
    /// `n` bytes were read going `dir`.
    fn received(&self, dir: Dir, n: usize);
    /// `n` bytes were written going `dir`.
    fn sent(&self, dir: Dir, n: usize);
}

/// No accounting (the relay inside the sandbox: the server's side counts).
pub(crate) struct Unmetered;

impl Meter for Unmetered {
    fn allowance(&self) -> io::Result<usize> {
        Ok(usize::MAX)
    }

    fn received(&self, _dir: Dir, _n: usize) {}

    fn sent(&self, _dir: Dir, _n: usize) {}
}

/// One side of a pumped connection.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sock<'a> {
    Tcp(&'a TcpStream),
    Unix(&'a UnixStream),
}

impl Sock<'_> {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Sock::Tcp(s) => s.as_fd(),
            Sock::Unix(s) => s.as_fd(),
        }
    }

    async fn ready(&self, interest: Interest) -> io::Result<()> {
        match self {
            Sock::Tcp(s) => s.ready(interest).await.map(drop),
            Sock::Unix(s) => s.ready(interest).await.map(drop),
        }
    }

    /// Runs `f` if the socket is ready for `interest`; a `WouldBlock` from `f` clears the
    /// readiness, so the next [`Sock::ready`] waits for the kernel again.
    fn try_io<R>(&self, interest: Interest, f: impl FnOnce() -> io::Result<R>) -> io::Result<R> {
        match self {
            Sock::Tcp(s) => s.try_io(interest, f),
            Sock::Unix(s) => s.try_io(interest, f),
        }
    }

    fn shutdown_write(&self) -> io::Result<()> {
        match rustix::net::shutdown(self.fd(), rustix::net::Shutdown::Write) {
            // The peer is already gone: nothing to tell it.
            Ok(()) | Err(Errno::NOTCONN) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// How a direction moves its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Through a pipe with `splice`, falling back to [`Mode::Copy`] where refused.
    Splice,
    /// Through a buffer with `read` and `write` (the fallback; tests ask for it directly).
    Copy,
}

/// What a direction holds its bytes in between reading and writing them.
enum Chan {
    Pipe { read: OwnedFd, write: OwnedFd },
    Buf { buf: Vec<u8>, start: usize, end: usize },
}

impl Chan {
    fn new(mode: Mode, buf: usize) -> Chan {
        if mode == Mode::Splice {
            if let Ok((read, write)) = rustix::pipe::pipe_with(PipeFlags::CLOEXEC) {
                // Refused (over the user's pipe pages): a splice then moves what the pipe holds.
                let _ = rustix::pipe::fcntl_setpipe_size(&write, PIPE_SIZE);
                return Chan::Pipe { read, write };
            }
        }
        Chan::Buf { buf: vec![0; buf.max(1)], start: 0, end: 0 }
    }

    /// Reads at most `max` bytes from `src` into an empty channel.
    fn fill(&mut self, src: BorrowedFd<'_>, max: usize) -> io::Result<usize> {
        match self {
            Chan::Pipe { write, .. } => {
                // Never asked of a pipe with bytes in it, so a `WouldBlock` is the socket's.
                let flags = SpliceFlags::NONBLOCK | SpliceFlags::MOVE;
                Ok(rustix::pipe::splice(src, None, &*write, None, max.min(PIPE_SIZE), flags)?)
            }
            Chan::Buf { buf, start, end } => {
                let len = max.min(buf.len());
                let n = rustix::io::read(src, &mut buf[..len])?;
                (*start, *end) = (0, n);
                Ok(n)
            }
        }
    }

    /// Writes at most `pending` (what is in the channel) to `dst`.
    fn drain(&mut self, dst: BorrowedFd<'_>, pending: usize) -> io::Result<usize> {
        match self {
            Chan::Pipe { read, .. } => {
                let flags = SpliceFlags::NONBLOCK | SpliceFlags::MOVE;
                Ok(rustix::pipe::splice(&*read, None, dst, None, pending, flags)?)
            }
            Chan::Buf { buf, start, end } => {
                let n = rustix::io::write(dst, &buf[*start..*end])?;
                *start += n;
                Ok(n)
            }
        }
    }

    /// Turns a pipe holding `pending` bytes into a buffer holding them (splice was refused
    /// toward the destination).
    fn demote(&mut self, pending: usize, buf: usize) -> io::Result<()> {
        let Chan::Pipe { read, .. } = self else { return Ok(()) };
        let mut bytes = vec![0; buf.max(pending).max(1)];
        let mut got = 0;
        while got < pending {
            // The pipe is ours and holds `pending` bytes: this read does not block.
            match rustix::io::read(&*read, &mut bytes[got..pending])? {
                0 => break,
                n => got += n,
            }
        }
        *self = Chan::Buf { buf: bytes, start: 0, end: got };
        Ok(())
    }
}

/// Whether `e` says this descriptor (or this kernel, or this filter) does not splice.
fn refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error().map(Errno::from_raw_os_error),
        Some(Errno::INVAL | Errno::NOSYS | Errno::PERM | Errno::OPNOTSUPP)
    )
}

/// Pumps both ways between `a` and `b` until both have ended (each end passed on as a
/// half-close) or either fails; returns the bytes moved `a → b` and `b → a`. `buf` sizes the
/// fallback's buffers.
pub(crate) async fn bidirectional(
    a: Sock<'_>,
    b: Sock<'_>,
    meter: &dyn Meter,
    buf: usize,
) -> io::Result<(u64, u64)> {
    bidirectional_with(a, b, meter, Mode::Splice, buf).await
}

/// [`bidirectional`] with the mode chosen (tests run the fallback on its own).
pub(crate) async fn bidirectional_with(
    a: Sock<'_>,
    b: Sock<'_>,
    meter: &dyn Meter,
    mode: Mode,
    buf: usize,
) -> io::Result<(u64, u64)> {
    tokio::try_join!(
        one_way(a, b, Dir::AToB, meter, mode, buf),
        one_way(b, a, Dir::BToA, meter, mode, buf)
    )
}

/// Writes all of `bytes` to `dst` (what a client sent past its `CONNECT` head, already read).
pub(crate) async fn write_all(
    dst: Sock<'_>,
    mut bytes: &[u8],
    dir: Dir,
    meter: &dyn Meter,
) -> io::Result<()> {
    if !bytes.is_empty() {
        meter.allowance()?;
        meter.received(dir, bytes.len());
    }
    while !bytes.is_empty() {
        dst.ready(Interest::WRITABLE).await?;
        match dst.try_io(Interest::WRITABLE, || Ok(rustix::io::write(dst.fd(), bytes)?)) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => {
                meter.sent(dir, n);
                bytes = &bytes[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

async fn one_way(
    src: Sock<'_>,
    dst: Sock<'_>,
    dir: Dir,
    meter: &dyn Meter,
    mode: Mode,
    buf: usize,
) -> io::Result<u64> {
    let mut chan: Option<Chan> = None;
    let mut total = 0u64;
    loop {
        src.ready(Interest::READABLE).await?;
        let chan = chan.get_or_insert_with(|| Chan::new(mode, buf));
        let max = meter.allowance()?;
        let n = match src.try_io(Interest::READABLE, || chan.fill(src.fd(), max)) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
            Err(e) if refused(&e) && matches!(chan, Chan::Pipe { .. }) => {
                *chan = Chan::new(Mode::Copy, buf);
                continue;
            }
            Err(e) => return Err(e),
        };
        meter.received(dir, n);
        let mut pending = n;
        while pending > 0 {
            dst.ready(Interest::WRITABLE).await?;
            match dst.try_io(Interest::WRITABLE, || chan.drain(dst.fd(), pending)) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(m) => {
                    meter.sent(dir, m);
                    pending -= m;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) if refused(&e) && matches!(chan, Chan::Pipe { .. }) => {
                    chan.demote(pending, buf)?;
                }
                Err(e) => return Err(e),
            }
        }
        total += n as u64;
    }
    dst.shutdown_write()?;
    Ok(total)
}

#[cfg(test)]
mod tests;
