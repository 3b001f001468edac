//! The pump on real sockets on loopback (a TCP connection on one side, a Unix socket pair on
//! the other, as in the relay and the tunnel): integrity of a large transfer both ways, the
//! counts, the pipe's bound, the budget cut, the half-close, and the same through the
//! fallback's buffers.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use super::*;

const T: Duration = Duration::from_secs(60);
const MIB: usize = 1 << 20;

/// Counts like the proxy's meter, optionally with a budget; notes the largest single read.
#[derive(Default)]
struct Counting {
    up: AtomicU64,
    down: AtomicU64,
    sent: AtomicU64,
    largest: AtomicUsize,
    budget: Option<u64>,
}

impl Meter for Counting {
    fn allowance(&self) -> io::Result<usize> {
        let Some(limit) = self.budget else { return Ok(usize::MAX) };
        let used = self.up.load(Ordering::Relaxed) + self.down.load(Ordering::Relaxed);
        match limit.saturating_sub(used) {
            0 => Err(io::Error::other("spent")),
            left => Ok(usize::try_from(left).unwrap()),
        }
    }

    fn received(&self, dir: Dir, n: usize) {
        let counter = if dir == Dir::AToB { &self.up } else { &self.down };
        counter.fetch_add(n as u64, Ordering::Relaxed);
        self.largest.fetch_max(n, Ordering::Relaxed);
    }

    fn sent(&self, _dir: Dir, n: usize) {
        self.sent.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// `(outer, inner)` ends of a TCP connection on loopback, and of a Unix socket pair: the pump
/// runs between the two inner ends, the test speaks on the outer ones.
async fn sockets() -> ((TcpStream, TcpStream), (UnixStream, UnixStream)) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let outer = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    let (inner, _) = listener.accept().await.unwrap();
    ((outer, inner), UnixStream::pair().unwrap())
}

/// A deterministic stream of bytes that does not repeat within a transfer (xorshift64).
struct Pattern(u64);

impl Pattern {
    fn new(seed: u64) -> Pattern {
        Pattern(seed | 1)
    }

    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            chunk.copy_from_slice(&self.0.to_le_bytes()[..chunk.len()]);
        }
    }
}

async fn send_pattern(mut w: impl tokio::io::AsyncWrite + Unpin, seed: u64, len: usize) {
    let mut pattern = Pattern::new(seed);
    let mut buf = vec![0u8; 128 * 1024];
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len());
        pattern.fill(&mut buf[..n]);
        w.write_all(&buf[..n]).await.unwrap();
        left -= n;
    }
    w.shutdown().await.unwrap();
}

/// Reads to the end, checking every byte against the pattern; returns how many came.
async fn expect_pattern(mut r: impl tokio::io::AsyncRead + Unpin, seed: u64) -> usize {
    let mut pattern = Pattern::new(seed);
    let (mut got, mut want) = (vec![0u8; 128 * 1024], vec![0u8; 128 * 1024]);
    // The pattern is generated in 8-byte words: keep reads aligned to them.
    let mut total = 0;
    loop {
        let mut n = r.read(&mut got).await.unwrap();
        if n == 0 {
            return total;
        }
        while n % 8 != 0 {
            let more = r.read(&mut got[n..n + 8 - n % 8]).await.unwrap();
            if more == 0 {
                break;
            }
            n += more;
        }
        pattern.fill(&mut want[..n]);
        assert!(got[..n] == want[..n], "the bytes at {total}..{} differ", total + n);
        total += n;
    }
}

/// 64 MiB one way and 8 MiB the other at once, every byte checked, both counted.
async fn large_transfer(mode: Mode) -> Counting {
    let ((mut tcp_out, tcp_in), (unix_in, mut unix_out)) = sockets().await;
    let meter = Counting::default();
    let pump =
        bidirectional_with(Sock::Tcp(&tcp_in), Sock::Unix(&unix_in), &meter, mode, 32 * 1024);
    let (tcp_r, tcp_w) = tcp_out.split();
    let (unix_r, unix_w) = unix_out.split();
    let (moved, (), (), down, up) = tokio::time::timeout(T, async {
        tokio::join!(
            pump,
            send_pattern(tcp_w, 1, 64 * MIB),
            send_pattern(unix_w, 2, 8 * MIB),
            expect_pattern(tcp_r, 2),
            expect_pattern(unix_r, 1),
        )
    })
    .await
    .expect("the transfer did not end");
    assert_eq!((up, down), (64 * MIB, 8 * MIB));
    assert_eq!(moved.unwrap(), (64 * MIB as u64, 8 * MIB as u64));
    assert_eq!(meter.up.load(Ordering::Relaxed), 64 * MIB as u64);
    assert_eq!(meter.down.load(Ordering::Relaxed), 8 * MIB as u64);
    assert_eq!(meter.sent.load(Ordering::Relaxed), 72 * MIB as u64);
    meter
}

#[tokio::test]
async fn a_large_transfer_arrives_intact_both_ways_and_is_counted() {
    let meter = large_transfer(Mode::Splice).await;
    // One splice moves at most a pipe's worth, and more than the fallback's buffer: the bytes
    // went through pipes, not through user space.
    let largest = meter.largest.load(Ordering::Relaxed);
    assert!(largest <= PIPE_SIZE, "a splice moved {largest} bytes, over PIPE_SIZE");
    assert!(largest > 32 * 1024, "no splice moved more than a copy's buffer: {largest}");
}

#[tokio::test]
async fn the_fallback_copy_arrives_intact_both_ways_and_is_counted() {
    let meter = large_transfer(Mode::Copy).await;
    let largest = meter.largest.load(Ordering::Relaxed);
    assert!(largest <= 32 * 1024, "a read of the fallback moved {largest} bytes, over its buffer");
}

/// A splice reads as much as the socket holds, up to the pipe's capacity and never beyond.
#[tokio::test]
async fn one_splice_moves_at_most_the_pipe_s_capacity() {
    let ((mut tcp_out, tcp_in), (unix_in, mut unix_out)) = sockets().await;
    // More than a pipe's worth waits in the socket before the pump starts.
    let queued = PIPE_SIZE + 64 * 1024;
    rustix::net::sockopt::set_socket_send_buffer_size(&unix_out, 2 * queued).unwrap();
    let sender = tokio::spawn(async move {
        unix_out.write_all(&vec![7u8; queued]).await.unwrap();
        unix_out
    });
    let deadline = std::time::Instant::now() + T;
    while !sender.is_finished() {
        assert!(std::time::Instant::now() < deadline, "the bytes did not fit the socket");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let meter = Counting::default();
    let pump = bidirectional(Sock::Tcp(&tcp_in), Sock::Unix(&unix_in), &meter, 32 * 1024);
    let mut got = vec![0u8; queued];
    tokio::select! {
        r = pump => panic!("the pump ended early: {r:?}"),
        r = tokio::time::timeout(T, tcp_out.read_exact(&mut got)) => { r.unwrap().unwrap(); }
    }
    assert!(got.iter().all(|b| *b == 7));
    assert_eq!(meter.largest.load(Ordering::Relaxed), PIPE_SIZE);
}

#[tokio::test]
async fn the_budget_cuts_mid_transfer_at_the_byte() {
    let ((mut tcp_out, tcp_in), (unix_in, mut unix_out)) = sockets().await;
    let meter = Counting { budget: Some(MIB as u64 + 5), ..Counting::default() };
    let cutting = async {
        let cut = bidirectional(Sock::Tcp(&tcp_in), Sock::Unix(&unix_in), &meter, 32 * 1024).await;
        // The pump has let go: both outer ends see the connection end.
        drop((tcp_in, unix_in));
        cut
    };
    let sending = async {
        // Far more than the budget; fails once the pump is gone.
        let chunk = vec![1u8; 64 * 1024];
        for _ in 0..128 {
            if tcp_out.write_all(&chunk).await.is_err() {
                break;
            }
        }
    };
    let mut got = Vec::new();
    let (cut, (), _) = tokio::time::timeout(T, async {
        tokio::join!(cutting, sending, unix_out.read_to_end(&mut got))
    })
    .await
    .expect("the budget did not cut the transfer");
    assert_eq!(cut.unwrap_err().to_string(), "spent");
    assert_eq!(got.len(), MIB + 5);
    assert_eq!(meter.up.load(Ordering::Relaxed), MIB as u64 + 5);
}

async fn half_close(mode: Mode) {
    let ((mut tcp_out, tcp_in), (unix_in, mut unix_out)) = sockets().await;
    let meter = Counting::default();
    let pump = bidirectional_with(Sock::Tcp(&tcp_in), Sock::Unix(&unix_in), &meter, mode, 1024);
    let talk = async {
        tcp_out.write_all(b"ping").await.unwrap();
        tcp_out.shutdown().await.unwrap();
        // The other side sees the request and its end, and still answers after it.
        let mut request = Vec::new();
        unix_out.read_to_end(&mut request).await.unwrap();
        assert_eq!(request, b"ping");
        unix_out.write_all(b"pong!").await.unwrap();
        unix_out.shutdown().await.unwrap();
        let mut answer = Vec::new();
        tcp_out.read_to_end(&mut answer).await.unwrap();
        assert_eq!(answer, b"pong!");
    };
    let (moved, ()) = tokio::time::timeout(T, async { tokio::join!(pump, talk) })
        .await
        .expect("the half-closed exchange did not end");
    assert_eq!(moved.unwrap(), (4, 5));
}

#[tokio::test]
async fn a_half_close_is_passed_on_and_the_other_way_keeps_going() {
    half_close(Mode::Splice).await;
}

#[tokio::test]
async fn the_fallback_passes_a_half_close_on_too() {
    half_close(Mode::Copy).await;
}

#[tokio::test]
async fn bytes_already_read_are_written_and_counted_first() {
    let (_, (unix_in, mut unix_out)) = sockets().await;
    let meter = Counting::default();
    write_all(Sock::Unix(&unix_in), b"early", Dir::AToB, &meter).await.unwrap();
    let mut got = [0u8; 5];
    unix_out.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"early");
    assert_eq!(meter.up.load(Ordering::Relaxed), 5);
}

#[test]
fn what_counts_as_splice_refused() {
    let os = |e: Errno| io::Error::from_raw_os_error(e.raw_os_error());
    for e in [Errno::INVAL, Errno::NOSYS, Errno::PERM, Errno::OPNOTSUPP] {
        assert!(refused(&os(e)), "{e:?}");
    }
    for e in [Errno::AGAIN, Errno::PIPE, Errno::CONNRESET] {
        assert!(!refused(&os(e)), "{e:?}");
    }
}

#[test]
fn the_unix_socket_of_the_path_gets_its_send_buffer() {
    let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
    a.set_nonblocking(true).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let _guard = rt.enter();
    let a = UnixStream::from_std(a).unwrap();
    let before = rustix::net::sockopt::socket_send_buffer_size(&a).unwrap();
    assert!(before < UNIX_SNDBUF, "the default is already {before}: nothing to test");
    widen(&a);
    // The kernel doubles what it is asked (for its bookkeeping), within `net.core.wmem_max`.
    let wmem_max: usize =
        std::fs::read_to_string("/proc/sys/net/core/wmem_max").unwrap().trim().parse().unwrap();
    let after = rustix::net::sockopt::socket_send_buffer_size(&a).unwrap();
    assert_eq!(after, 2 * UNIX_SNDBUF.min(wmem_max));
}
