//! The network edge and data at rest, attacked from outside over real sockets against the real
//! `outboard-server` binary on 127.0.0.1:0: idle-connection floods, oversize data before `hello`,
//! connection caps, handshake and idle timeouts, TLS end to end, clear-text refusals, token
//! revocation, tokens in trace logs, and the permissions of the data dir.
//!
//! Timeouts here are failure detectors only; no assertion is about speed.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::io::BufRead as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use outboard_shared::MAX_PRE_HELLO_BYTES;
use outboard_tests::harness::{bin, WsClient, TEST_API_KEY};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpSocket, TcpStream};

/// A real `outboard-server serve` on 127.0.0.1:0 with its own data dir and log file.
struct Server {
    child: Child,
    url: String,
    addr: String,
    data: tempfile::TempDir,
    log_path: PathBuf,
}

impl Server {
    /// Starts the server with `extra` flags, logging at `log` level to a file outside the data
    /// dir (so the data dir holds only what the server made).
    fn start(extra: &[&str], log: &str) -> Server {
        Self::start_in(tempfile::tempdir().unwrap(), extra, log, "http://127.0.0.1:9")
    }

    fn start_in(data: tempfile::TempDir, extra: &[&str], log: &str, base_url: &str) -> Server {
        raise_nofile();
        let log_path = std::env::temp_dir().join(format!(
            "outboard-secnet-{}-{}.log",
            std::process::id(),
            unique()
        ));
        let stderr = std::fs::File::create(&log_path).unwrap();
        let mut child = Command::new(bin("outboard-server").unwrap())
            .args(["serve", "--listen", "127.0.0.1:0", "--provider", "anthropic"])
            .arg("--data")
            .arg(data.path())
            .args(["--base-url", base_url, "--model", "mock-model"])
            .args(extra)
            .env("ANTHROPIC_API_KEY", TEST_API_KEY)
            .env("OUTBOARD_LOG", log)
            .env("RUST_LOG", log)
            .env_remove("OUTBOARD_LISTEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(stdout).read_line(&mut line).unwrap();
        let Some(url) = line.trim().strip_prefix("outboard-server listening on ") else {
            let _ = child.kill();
            panic!(
                "the server did not start: {line:?}\n{}",
                std::fs::read_to_string(&log_path).unwrap()
            );
        };
        let addr = url.split_once("://").unwrap().1.to_owned();
        Server { child, url: url.to_owned(), addr, data, log_path }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn add_user(&self, name: &str, org: &str) -> String {
        let out = admin(self.data.path(), &["user", "add", name, "--org", org]);
        out.trim().to_owned()
    }

    /// A `/proc/PID/status` field in kB.
    fn status_kb(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with(field)).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log_path);
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

/// `outboard-server admin ARGS --data DIR`; panics unless it succeeds; returns stdout.
fn admin(data: &Path, args: &[&str]) -> String {
    let out = Command::new(bin("outboard-server").unwrap())
        .arg("admin")
        .args(args)
        .arg("--data")
        .arg(data)
        .output()
        .unwrap();
    assert!(out.status.success(), "admin {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// `outboard ARGS` with exactly the `OUTBOARD_*`/key variables given in `env`.
fn outboard(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut cmd = Command::new(bin("outboard").unwrap());
    cmd.args(args).stdin(Stdio::null());
    for (k, _) in std::env::vars() {
        if k.starts_with("OUTBOARD_") || k.ends_with("_API_KEY") || k == "RUST_LOG" {
            cmd.env_remove(k);
        }
    }
    cmd.envs(env.iter().copied());
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Thousands of sockets need more than the usual 1024 descriptors; the server inherits this.
fn raise_nofile() {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let limit = getrlimit(Resource::Nofile);
    let _ = setrlimit(Resource::Nofile, Rlimit { current: limit.maximum, maximum: limit.maximum });
    let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
    assert!(now >= 4500, "these tests need `ulimit -n` of at least 4500 (it is {now})");
}

// ---------------------------------------------------------------------------------------------
// Raw WebSocket helpers
// ---------------------------------------------------------------------------------------------

const UPGRADE: &str = "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n\
    Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
    Sec-WebSocket-Version: 13\r\n\r\n";

/// Connects and upgrades by hand; returns the socket just after the `101` head.
async fn raw_upgrade(addr: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(UPGRADE.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), s.read(&mut byte))
            .await
            .expect("no upgrade answer within 10 s")
            .unwrap();
        assert_eq!(n, 1, "closed during the upgrade: {}", String::from_utf8_lossy(&head));
        head.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&head);
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s
}

/// The header of a masked client text frame of `len` payload bytes (mask key zero).
fn frame_header(len: u64) -> Vec<u8> {
    let mut h = vec![0x81, 0x80 | 127];
    h.extend_from_slice(&len.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 0]);
    h
}

/// A masked client text frame (mask key zero), with the shortest length encoding.
fn client_text(text: &str) -> Vec<u8> {
    let len = text.len();
    let mut f = vec![0x81];
    if len < 126 {
        f.push(0x80 | len as u8);
    } else if len < 65536 {
        f.push(0x80 | 126);
        f.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        f.push(0x80 | 127);
        f.extend_from_slice(&(len as u64).to_be_bytes());
    }
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(text.as_bytes());
    f
}

/// A masked client ping frame.
fn client_ping() -> Vec<u8> {
    vec![0x89, 0x80, 0, 0, 0, 0]
}

/// One server frame: opcode and payload.
#[derive(Debug)]
struct Frame {
    opcode: u8,
    payload: Vec<u8>,
}

/// Parses complete unmasked server frames from the front of `buf`.
fn parse_frames(buf: &[u8]) -> (Vec<Frame>, usize) {
    let mut frames = Vec::new();
    let mut at = 0;
    loop {
        let rest = &buf[at..];
        if rest.len() < 2 {
            break;
        }
        let opcode = rest[0] & 0x0f;
        let (len, start) = match rest[1] & 0x7f {
            126 if rest.len() >= 4 => (u16::from_be_bytes([rest[2], rest[3]]) as usize, 4),
            127 if rest.len() >= 10 => {
                (u64::from_be_bytes(rest[2..10].try_into().unwrap()) as usize, 10)
            }
            126 | 127 => break,
            n => (n as usize, 2),
        };
        if rest.len() < start + len {
            break;
        }
        frames.push(Frame { opcode, payload: rest[start..start + len].to_vec() });
        at += start + len;
    }
    (frames, at)
}

/// Reads server frames until a close frame, the end of the stream, or `within` (a failure
/// detector); returns them.
async fn read_frames(s: &mut TcpStream, within: Duration) -> Vec<Frame> {
    read_frames_after(s, Vec::new(), within).await
}

/// [`read_frames`], with `buf` already read from the socket.
async fn read_frames_after(s: &mut TcpStream, mut buf: Vec<u8>, within: Duration) -> Vec<Frame> {
    let deadline = tokio::time::Instant::now() + within;
    let mut chunk = [0u8; 8192];
    loop {
        let (frames, _) = parse_frames(&buf);
        if frames.iter().any(|f| f.opcode == 8) {
            return frames;
        }
        match tokio::time::timeout_at(deadline, s.read(&mut chunk)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return frames,
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The fatal error frame's code and the close frame's code and reason.
fn error_and_close(frames: &[Frame]) -> (String, u16, String) {
    let error = frames
        .iter()
        .find(|f| f.opcode == 1)
        .map(|f| {
            let v: serde_json::Value = serde_json::from_slice(&f.payload).unwrap();
            assert_eq!(v["type"], "error", "{v}");
            assert_eq!(v["fatal"], true, "{v}");
            v["code"].as_str().unwrap().to_owned()
        })
        .unwrap_or_default();
    let close = frames.iter().find(|f| f.opcode == 8).expect("no close frame");
    let code = u16::from_be_bytes([close.payload[0], close.payload[1]]);
    let reason = String::from_utf8(close.payload[2..].to_vec()).unwrap();
    (error, code, reason)
}

/// How a raw connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    /// The server answered this HTTP status line and closed.
    Http(String),
    /// Closed (EOF or reset) without a byte.
    Closed,
    /// Still open after the wait.
    Open,
}

async fn ending(mut s: TcpStream, wait: Duration) -> Ending {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    loop {
        match tokio::time::timeout(wait, s.read(&mut chunk)).await {
            Err(_) if buf.is_empty() => return Ending::Open,
            Err(_) | Ok(Ok(0)) | Ok(Err(_)) => {
                if buf.is_empty() {
                    return Ending::Closed;
                }
                let text = String::from_utf8_lossy(&buf).into_owned();
                return Ending::Http(text);
            }
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Opens `n` TCP connections to `addr` from `source` (a loopback address), sending nothing.
async fn open_idle(addr: &str, source: &str, n: usize) -> Vec<TcpStream> {
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let mut conns = Vec::with_capacity(n);
    for _ in 0..n {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind(format!("{source}:0").parse().unwrap()).unwrap();
        conns.push(socket.connect(addr).await.unwrap());
    }
    conns
}

// ---------------------------------------------------------------------------------------------
// Unauthenticated limits
// ---------------------------------------------------------------------------------------------

/// With default flags: 2,000 idle connections from one address are all cut (64 by the upgrade
/// timeout of 10 s, the rest at once by the per-address cap), and a real client is served after.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_thousand_idle_connections_are_cut_and_the_server_still_serves() {
    let server = Server::start(&[], "info");
    let token = server.add_user("alice", "acme");
    let started = Instant::now();
    let conns = open_idle(&server.addr, "127.0.0.1", 2000).await;
    let waits: Vec<_> =
        conns.into_iter().map(|c| tokio::spawn(ending(c, Duration::from_secs(30)))).collect();
    let mut endings = Vec::new();
    for w in waits {
        endings.push(w.await.unwrap());
    }
    let elapsed = started.elapsed();
    let open = endings.iter().filter(|e| **e == Ending::Open).count();
    let refused = endings
        .iter()
        .filter(|e| matches!(e, Ending::Http(h) if h.starts_with("HTTP/1.1 429")))
        .count();
    let closed = endings.iter().filter(|e| **e == Ending::Closed).count();
    eprintln!("2000 idle connections: {refused} answered 429, {closed} closed, {open} open; all ended after {elapsed:?}");
    assert_eq!(open, 0, "connections left open 30 s after they were made");
    assert!(refused >= 1, "the per-address cap never answered");
    assert_eq!(closed + refused, 2000);
    assert!(closed >= 64, "the 64 admitted connections are closed by the upgrade timeout");
    let refusal = endings.iter().find(|e| matches!(e, Ending::Http(_))).unwrap();
    let Ending::Http(text) = refusal else { unreachable!() };
    assert!(text.contains("--max-connections-per-ip"), "{text}");

    let mut client = WsClient::connect(&server.url, &token).await.unwrap();
    assert!(client.request("ping", serde_json::json!({})).await.unwrap().is_ok());
    let log = server.log();
    assert!(log.contains("refused a connection"), "{log}");
    assert!(log.contains("did not complete its upgrade in time"), "{log}");
}

/// The server-wide cap: with `--max-connections 1000`, exactly 1000 of 2,000 idle connections
/// are held and the rest answered 503 (or closed when more refusals than answer slots pile up);
/// once they go, a real client is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_global_connection_cap_holds() {
    let server = Server::start(
        &[
            "--max-connections",
            "1000",
            "--max-connections-per-ip",
            "100000",
            "--handshake-timeout",
            "60",
        ],
        "info",
    );
    let token = server.add_user("alice", "acme");
    let conns = open_idle(&server.addr, "127.0.0.1", 2000).await;
    let waits: Vec<_> =
        conns.into_iter().map(|c| tokio::spawn(ending(c, Duration::from_secs(3)))).collect();
    let mut endings = Vec::new();
    for w in waits {
        endings.push(w.await.unwrap());
    }
    let open = endings.iter().filter(|e| **e == Ending::Open).count();
    let refused: Vec<_> = endings
        .iter()
        .filter_map(|e| match e {
            Ending::Http(h) => Some(h.clone()),
            _ => None,
        })
        .collect();
    let closed = endings.iter().filter(|e| **e == Ending::Closed).count();
    eprintln!("global cap 1000: {open} held, {} answered 503, {closed} closed", refused.len());
    assert_eq!(open, 1000, "exactly --max-connections are held");
    assert!(!refused.is_empty());
    assert!(refused.iter().all(|h| h.starts_with("HTTP/1.1 503")), "{refused:?}");
    assert!(refused[0].contains("--max-connections"), "{}", refused[0]);
    assert_eq!(refused.len() + closed, 1000);
    // The held ones were dropped by `ending`: their slots free up and a client gets in.
    let mut client = None;
    for _ in 0..100 {
        if let Ok(c) = WsClient::connect(&server.url, &token).await {
            client = Some(c);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut client = client.expect("no client served after the flood went away");
    assert!(client.request("ping", serde_json::json!({})).await.unwrap().is_ok());
}

/// The per-address cap: 8 idle connections from 127.0.0.2 fill it, the 9th gets 429, while
/// another address is still served.
#[tokio::test]
async fn the_per_address_cap_holds() {
    let server =
        Server::start(&["--max-connections-per-ip", "8", "--handshake-timeout", "60"], "info");
    let token = server.add_user("alice", "acme");
    let held = open_idle(&server.addr, "127.0.0.2", 8).await;
    let ninth = open_idle(&server.addr, "127.0.0.2", 1).await.pop().unwrap();
    match ending(ninth, Duration::from_secs(10)).await {
        Ending::Http(h) => {
            assert!(h.starts_with("HTTP/1.1 429"), "{h}");
            assert!(h.contains("127.0.0.2"), "{h}");
        }
        other => panic!("the 9th connection from one address was not refused: {other:?}"),
    }
    let mut client = WsClient::connect(&server.url, &token).await.unwrap();
    assert!(client.request("ping", serde_json::json!({})).await.unwrap().is_ok());
    drop(held);
}

/// 64 KiB before `hello`: a 15 MiB frame header followed by a slow trickle is cut as soon as
/// the budget is spent, with `too_large` and close code 1009.
#[tokio::test]
async fn oversize_data_before_hello_is_cut_at_the_budget() {
    let server = Server::start(&[], "info");
    let mut s = raw_upgrade(&server.addr).await;
    s.write_all(&frame_header(15 << 20)).await.unwrap();
    let chunk = vec![b'x'; 1024];
    let mut sent = 0usize;
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while sent < 2 << 20 {
        if s.write_all(&chunk).await.is_err() {
            break;
        }
        sent += chunk.len();
        tokio::time::sleep(Duration::from_millis(1)).await;
        match s.try_read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&buf[..n]);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    eprintln!("the server answered after {sent} payload bytes");
    let frames = read_frames_after(&mut s, answer, Duration::from_secs(10)).await;
    assert!(
        sent <= MAX_PRE_HELLO_BYTES + 48 * 1024,
        "the server let {sent} bytes through before cutting (limit {MAX_PRE_HELLO_BYTES})"
    );
    let (code, close, reason) = error_and_close(&frames);
    assert_eq!(code, "too_large");
    assert_eq!(close, 1009);
    assert!(reason.starts_with("too_large: more than 65536 bytes before hello"), "{reason}");
    assert!(server.log().contains("sent too much before hello"), "{}", server.log());
}

/// Forty half-sent 15 MiB frames before `hello` leave the server's memory near where it was:
/// each connection is cut after 64 KiB instead of buffering its frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forty_oversize_frames_do_not_grow_the_server() {
    // Default flags: 40 connections from one address stay under the per-address cap of 64.
    let server = Server::start(&[], "info");
    let baseline = server.status_kb("VmRSS:");
    let hwm_before = server.status_kb("VmHWM:");
    let attacks: Vec<_> = (0..40)
        .map(|_| {
            let addr = server.addr.clone();
            tokio::spawn(async move {
                let s = raw_upgrade(&addr).await;
                let (mut rx, mut tx) = s.into_split();
                tx.write_all(&frame_header(15 << 20)).await.unwrap();
                // The answer is read while the frame is still being sent, as a client's reader
                // task does: a reader that waited for its writes to end would lose the close
                // frame to the TCP reset that ends the server's linger, whenever the machine is
                // too busy to send 15 MiB within it.
                let reader = tokio::spawn(async move {
                    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                    let mut buf = Vec::new();
                    let mut chunk = [0u8; 8192];
                    loop {
                        let (frames, _) = parse_frames(&buf);
                        if frames.iter().any(|f| f.opcode == 8) {
                            return frames;
                        }
                        match tokio::time::timeout_at(deadline, rx.read(&mut chunk)).await {
                            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => return frames,
                            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
                let chunk = vec![b'x'; 64 * 1024];
                let mut sent = 0usize;
                while sent < 15 << 20 && !reader.is_finished() {
                    match tokio::time::timeout(Duration::from_secs(3), tx.write_all(&chunk)).await {
                        Ok(Ok(())) => sent += chunk.len(),
                        // Blocked (the server stopped reading) or closed.
                        _ => break,
                    }
                }
                let frames = reader.await.unwrap();
                (sent, frames)
            })
        })
        .collect();
    let mut cut = 0;
    for a in attacks {
        let (_, frames) = a.await.unwrap();
        if frames.iter().any(|f| f.opcode == 8) {
            let (code, close, _) = error_and_close(&frames);
            assert_eq!((code.as_str(), close), ("too_large", 1009));
            cut += 1;
        }
    }
    let peak = server.status_kb("VmHWM:");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = server.status_kb("VmRSS:");
    let growth = peak.saturating_sub(hwm_before.max(baseline));
    eprintln!(
        "server RSS: baseline {baseline} kB, peak {peak} kB (peak before {hwm_before} kB), \
         after {after} kB; {cut}/40 connections saw the close frame"
    );
    // The server lingers after its close frame and each reader runs beside its writer, so every
    // connection sees the close frame (before the lingering close, 1 to 11 of 40 did: a reset
    // destroyed it unread); a busy machine may still starve a reader past the linger now and then.
    assert!(cut >= 36, "only {cut} of 40 attacking connections saw the too_large close");
    assert!(growth < 64 * 1024, "the server grew by {growth} kB at its peak under the attack");
    assert!(after < baseline + 32 * 1024, "RSS after the attack: {after} kB (baseline {baseline})");
}

/// `--handshake-timeout`: an upgraded connection that sends no hello is closed with
/// `handshake_required` (close 1008). `--idle-timeout`: after hello, silence is closed with
/// `idle_timeout`, while a client that pings stays.
#[tokio::test]
async fn hello_and_idle_timeouts_close_with_a_reason() {
    let server = Server::start(&["--handshake-timeout", "1", "--idle-timeout", "1"], "info");
    let token = server.add_user("alice", "acme");

    let mut s = raw_upgrade(&server.addr).await;
    let frames = read_frames(&mut s, Duration::from_secs(15)).await;
    let (code, close, reason) = error_and_close(&frames);
    assert_eq!((code.as_str(), close), ("handshake_required", 1008));
    assert!(reason.contains("no hello within 1 s"), "{reason}");

    let hello =
        serde_json::json!({"type": "hello", "protocol_version": 1, "token": token, "client": "t"});
    let mut s = raw_upgrade(&server.addr).await;
    s.write_all(&client_text(&hello.to_string())).await.unwrap();
    let frames = read_frames(&mut s, Duration::from_secs(15)).await;
    assert!(String::from_utf8_lossy(&frames[0].payload).contains("welcome"));
    let (code, close, reason) = error_and_close(&frames[1..]);
    assert_eq!((code.as_str(), close), ("idle_timeout", 1008));
    assert!(reason.starts_with("idle_timeout: no frame from the client for 1 s"), "{reason}");

    // Pings every 300 ms for 3 s keep a connection open past the 1 s idle timeout.
    let mut s = raw_upgrade(&server.addr).await;
    s.write_all(&client_text(&hello.to_string())).await.unwrap();
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        s.write_all(&client_ping()).await.unwrap();
    }
    let ping = serde_json::json!({"type": "request", "id": 7, "method": "ping", "params": {}});
    s.write_all(&client_text(&ping.to_string())).await.unwrap();
    let mut seen = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 4096];
    while !seen.contains("\"response\"") && Instant::now() < deadline {
        let n =
            tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await.unwrap().unwrap();
        assert!(n > 0, "closed although the client pinged: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    assert!(seen.contains("\"id\":7"), "{seen}");
    assert!(!seen.contains("idle_timeout"), "{seen}");
}

// ---------------------------------------------------------------------------------------------
// TLS and tokens
// ---------------------------------------------------------------------------------------------

/// A throwaway CA and a server certificate for 127.0.0.1 and localhost, as PEM files in `dir`.
fn test_pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.distinguished_name.push(DnType::CommonName, "outboard test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    params.subject_alt_names.push(SanType::IpAddress("127.0.0.1".parse().unwrap()));
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let (ca_path, cert_path, key_path) =
        (dir.join("ca.pem"), dir.join("server.pem"), dir.join("server.key"));
    std::fs::write(&ca_path, ca.pem()).unwrap();
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (ca_path, cert_path, key_path)
}

/// `serve --tls-cert --tls-key` and `outboard run --server wss://… --ca-cert`: a turn completes
/// against the mock model; without the CA the client fails with a certificate error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_end_to_end_with_a_private_ca() {
    let pki = tempfile::tempdir().unwrap();
    let (ca, cert, key) = test_pki(pki.path());
    let mock = MockLlm::start(vec![MockStep::text("hello over TLS")]).await.unwrap();
    let server = Server::start_in(
        tempfile::tempdir().unwrap(),
        &["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()],
        "info",
        &mock.anthropic_base_url(),
    );
    assert!(server.url.starts_with("wss://127.0.0.1:"), "{}", server.url);
    let token = server.add_user("alice", "acme");
    let url = server.url.clone();
    let ca_arg = ca.to_str().unwrap().to_owned();
    let (code, stdout, stderr) = tokio::task::spawn_blocking({
        let (url, token) = (url.clone(), token.clone());
        move || {
            outboard(
                &["run", "--json", "--server", &url, "--ca-cert", &ca_arg, "say hi"],
                &[("OUTBOARD_TOKEN", &token)],
            )
        }
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "stderr: {stderr}\nstdout: {stdout}");
    assert!(stdout.contains("hello over TLS"), "{stdout}");
    assert!(stdout.contains("turn_completed"), "{stdout}");

    // The same CA through OUTBOARD_CA_CERT.
    let ca_env = ca.to_str().unwrap().to_owned();
    let (code, _, stderr) = tokio::task::spawn_blocking({
        let (url, token) = (url.clone(), token.clone());
        move || {
            outboard(
                &["sessions", "--server", &url],
                &[("OUTBOARD_TOKEN", &token), ("OUTBOARD_CA_CERT", &ca_env)],
            )
        }
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{stderr}");

    // Without the CA: a clear certificate error, exit 3.
    let (code, _, stderr) = tokio::task::spawn_blocking(move || {
        outboard(&["sessions", "--server", &url], &[("OUTBOARD_TOKEN", &token)])
    })
    .await
    .unwrap();
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("certificate is not trusted"), "{stderr}");
    assert!(stderr.contains("--ca-cert"), "{stderr}");
}

/// `serve --listen 0.0.0.0:0` without TLS is refused (exit 2, a message naming the fix); with
/// `--insecure` it starts.
#[test]
fn clear_text_off_loopback_is_refused_by_the_server() {
    let data = tempfile::tempdir().unwrap();
    let err_path = data.path().join("refused.stderr");
    let mut child = Command::new(bin("outboard-server").unwrap())
        .args(["serve", "--listen", "0.0.0.0:0", "--base-url", "http://127.0.0.1:9"])
        .arg("--data")
        .arg(data.path())
        .env("ANTHROPIC_API_KEY", TEST_API_KEY)
        .env_remove("OUTBOARD_LISTEN")
        .env_remove("OUTBOARD_INSECURE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    // A server that starts instead of refusing would never exit: 30 s is the failure detector.
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stderr = std::fs::read_to_string(&err_path).unwrap();
    assert_eq!(status.and_then(|s| s.code()), Some(2), "the server did not refuse: {stderr}");
    assert!(stderr.contains("refusing to listen on 0.0.0.0:0 without TLS"), "{stderr}");
    assert!(stderr.contains("--tls-cert"), "{stderr}");

    let line = serve_in_clear(data.path(), &["--insecure"], &[]);
    assert!(line.starts_with("outboard-server listening on ws://0.0.0.0:"), "{line:?}");
}

/// `outboard-server serve --listen 0.0.0.0:0` in clear text with `args` and `env`: the first line
/// it prints (its listening line, when it starts).
fn serve_in_clear(data: &Path, args: &[&str], env: &[(&str, &str)]) -> String {
    let mut child = Command::new(bin("outboard-server").unwrap())
        .args(["serve", "--listen", "0.0.0.0:0", "--base-url", "http://127.0.0.1:9"])
        .args(args)
        .arg("--data")
        .arg(data)
        .env("ANTHROPIC_API_KEY", TEST_API_KEY)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    line
}

/// The client refuses to send a token over ws:// to a non-loopback host unless `--insecure`;
/// it reads tokens from `--token-file`.
#[test]
fn clear_text_token_off_loopback_is_refused_by_the_client() {
    // 192.0.2.1 (TEST-NET-1) is never reachable: a connection attempt would hang, not fail.
    let (code, _, stderr) = outboard(
        &["sessions", "--server", "ws://192.0.2.1:7700"],
        &[("OUTBOARD_TOKEN", "ob_secret")],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("refusing to send the token over clear-text ws:// to 192.0.2.1"),
        "{stderr}"
    );
    assert!(!stderr.contains("ob_secret"), "{stderr}");

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "ob_from_file\n").unwrap();
    let (code, _, stderr) = outboard(
        &["sessions", "--server", "ws://example.invalid:1", "--token-file", file.to_str().unwrap()],
        &[],
    );
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("clear-text ws:// to example.invalid"), "{stderr}");

    // --token on the command line still works, with a warning.
    let (_, _, stderr) =
        outboard(&["sessions", "--server", "ws://127.0.0.1:9", "--token", "ob_x"], &[]);
    assert!(stderr.contains("visible to other users"), "{stderr}");
}

/// `OUTBOARD_INSECURE` takes the usual boolean spellings in both binaries (`1`, which the
/// client's own refusal suggests, was refused with "possible values: true, false"); a password
/// in `serve --store` is warned about without being printed, and the help steers to
/// `OUTBOARD_STORE` and `PGPASSWORD`.
#[test]
fn boolean_variables_take_the_usual_spellings_and_store_passwords_stay_off_the_command_line() {
    // 0.0.0.0 is not loopback for the client's rule, and refuses at once on this machine.
    for yes in ["1", "yes", "ON", "True"] {
        let (code, _, stderr) = outboard(
            &["sessions", "--server", "ws://0.0.0.0:9"],
            &[("OUTBOARD_TOKEN", "ob_secret"), ("OUTBOARD_INSECURE", yes)],
        );
        assert!(!stderr.contains("possible values") && !stderr.contains("refusing"), "{stderr}");
        assert_ne!(code, 0, "{stderr}");
    }
    for no in ["0", "no", "off", "FALSE"] {
        let (code, _, stderr) = outboard(
            &["sessions", "--server", "ws://0.0.0.0:9"],
            &[("OUTBOARD_TOKEN", "ob_secret"), ("OUTBOARD_INSECURE", no)],
        );
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("refusing to send the token over clear-text"), "{stderr}");
    }

    let data = tempfile::tempdir().unwrap();
    let line = serve_in_clear(data.path(), &[], &[("OUTBOARD_INSECURE", "1")]);
    assert!(line.starts_with("outboard-server listening on ws://0.0.0.0:"), "{line:?}");

    let out = Command::new(bin("outboard-server").unwrap())
        .args(["serve", "--store", "postgres://ob:hunter2pass@127.0.0.1:1/outboard"])
        .arg("--data")
        .arg(data.path())
        .env_remove("OUTBOARD_STORE")
        .env("ANTHROPIC_API_KEY", TEST_API_KEY)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("holds a password") && stderr.contains("PGPASSWORD"), "{stderr}");
    assert!(!stderr.contains("hunter2pass"), "{stderr}");
    let help = Command::new(bin("outboard-server").unwrap()).args(["serve", "--help"]).output();
    let help = String::from_utf8_lossy(&help.unwrap().stdout).into_owned();
    assert!(help.contains("OUTBOARD_STORE") && help.contains("PGPASSWORD"), "{help}");
}

/// `admin token ls` shows ids, not tokens; `admin token revoke ID` makes the next hello fail.
#[tokio::test]
async fn a_revoked_token_is_refused_at_the_next_hello() {
    let server = Server::start(&[], "info");
    let token = server.add_user("alice", "acme");
    let other = server.add_user("bob", "beta");
    let mut client = WsClient::connect(&server.url, &token).await.unwrap();
    assert!(client.request("ping", serde_json::json!({})).await.unwrap().is_ok());

    let listed = admin(server.data.path(), &["token", "ls", "--org", "acme"]);
    assert!(!listed.contains(&token) && !listed.contains(&other), "{listed}");
    let rows: Vec<&str> = listed.lines().skip(1).collect();
    assert_eq!(rows.len(), 1, "{listed}");
    assert!(rows[0].contains("alice") && rows[0].contains("acme"), "{listed}");
    let id = rows[0].split_whitespace().next().unwrap();
    assert_eq!(id.len(), 8);

    let revoked = admin(server.data.path(), &["token", "revoke", id]);
    assert!(revoked.contains("revoked") && revoked.contains("alice"), "{revoked}");
    let err = WsClient::connect(&server.url, &token).await.err().expect("a revoked token got in");
    assert!(format!("{err:?}").to_lowercase().contains("unauthorized"), "{err:?}");
    // Bob's token is untouched.
    WsClient::connect(&server.url, &other).await.unwrap();
    let all = admin(server.data.path(), &["token", "ls"]);
    assert_eq!(all.lines().count(), 2, "{all}");
}

/// A connection opened before `admin token revoke` (the real command, on the same data dir) is
/// cut: the next requests fail with the reason and the socket closes, while a connection of
/// another token goes on. Before, `session/create` and `session/list` kept working on it.
#[tokio::test]
async fn a_revoked_token_loses_its_open_connections() {
    let server = Server::start(&[], "info");
    let token = server.add_user("alice", "acme");
    let other = server.add_user("bob", "acme");
    let mut alice = WsClient::connect(&server.url, &token).await.unwrap();
    let mut second = WsClient::connect(&server.url, &token).await.unwrap();
    let mut bob = WsClient::connect(&server.url, &other).await.unwrap();
    alice.request("session/create", serde_json::json!({})).await.unwrap().unwrap();

    let listed = admin(server.data.path(), &["token", "ls"]);
    let row = listed.lines().find(|l| l.contains("alice")).unwrap();
    admin(server.data.path(), &["token", "revoke", row.split_whitespace().next().unwrap()]);

    for c in [&mut alice, &mut second] {
        let failure = outboard_tests::fixture::until_cut(c, Duration::from_secs(10)).await;
        assert!(failure.contains("revoked"), "{failure}");
    }
    assert!(bob.request("session/list", serde_json::json!({})).await.unwrap().is_ok());
    assert!(server.log().contains("revoked"), "{}", server.log());
}

/// With the server logging at trace level, neither a valid nor a refused token appears in its
/// stderr; nor in the CLI's at trace level.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_never_reach_the_logs() {
    let server = Server::start(&[], "trace");
    let token = server.add_user("alice", "acme");
    let mut client = WsClient::connect(&server.url, &token).await.unwrap();
    assert!(client.request("session/create", serde_json::json!({})).await.unwrap().is_ok());
    let wrong = "ob_0123456789abcdef-wrong-token-never-logged";
    assert!(WsClient::connect(&server.url, wrong).await.is_err());
    let url = server.url.clone();
    let t = token.clone();
    let (code, _, cli_stderr) = tokio::task::spawn_blocking(move || {
        outboard(&["sessions", "--server", &url], &[("OUTBOARD_TOKEN", &t), ("RUST_LOG", "trace")])
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{cli_stderr}");
    drop(client);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let log = server.log();
    assert!(log.lines().count() > 20 && log.contains("TRACE"), "not a trace log: {log}");
    assert!(log.contains("connected"), "{log}");
    let leaks: Vec<String> = log
        .lines()
        .filter(|l| l.contains(&token))
        .map(|l| l.replace(&token, "<TOKEN>").chars().take(300).collect())
        .collect();
    assert!(leaks.is_empty(), "the server logged the token:\n{}", leaks.join("\n"));
    assert!(!log.contains(wrong), "the server logged a refused token");
    let hex: String = token.bytes().map(|b| format!("{b:02x}")).collect();
    assert!(!log.contains(&hex[..40]), "the server logged the token's bytes in hex");
    assert!(!log.contains(&token[3..20]), "the server logged part of a token");
    assert!(cli_stderr.contains("TRACE") || cli_stderr.contains("DEBUG"), "{cli_stderr}");
    assert!(!cli_stderr.contains(&token), "the CLI logged the token");
}

// ---------------------------------------------------------------------------------------------
// Data at rest
// ---------------------------------------------------------------------------------------------

fn mode(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// Every file under `dir` grants nothing to group or others.
fn assert_private_tree(dir: &Path) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.file_type().is_symlink() {
            continue;
        }
        let m = meta.permissions().mode() & 0o777;
        assert_eq!(m & 0o077, 0, "{} is {m:o}", path.display());
        if meta.is_dir() {
            assert_private_tree(&path);
        }
    }
}

/// The server: data dir 0700 (a looser existing one is tightened, with a warning), the database,
/// its WAL and everything else it writes 0600.
#[tokio::test]
async fn the_server_keeps_its_data_dir_private() {
    let data = tempfile::tempdir().unwrap();
    std::fs::set_permissions(data.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mock = MockLlm::start(vec![
        MockStep::tool_call("Bash", serde_json::json!({"command": "echo hi > made-by-bash.txt"}))
            .with_text("writing"),
        MockStep::text("done"),
    ])
    .await
    .unwrap();
    let server =
        Server::start_in(data, &["--sandbox", "unsafe-host"], "info", &mock.anthropic_base_url());
    let token = server.add_user("alice", "acme");
    let mut client = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = client.new_session().await.unwrap();
    client
        .request("turn/send", serde_json::json!({"session_id": sid, "text": "go"}))
        .await
        .unwrap()
        .unwrap();
    client
        .events_until(|e| matches!(e.kind, outboard_shared::EventKind::TurnCompleted { .. }))
        .await
        .unwrap();
    let dir = server.data.path();
    assert_eq!(mode(dir), 0o700);
    assert!(server.log().contains("tightening permissions"), "{}", server.log());
    for name in ["outboard.db", "outboard.db-wal", "outboard.db-shm"] {
        assert_eq!(mode(&dir.join(name)), 0o600, "{name}");
    }
    assert!(dir.join("workspaces").join(&sid).join("made-by-bash.txt").exists());
    assert_private_tree(dir);
}

/// Embedded mode: the data dir is created 0700 and the database files 0600 without changing the
/// CLI's umask; a looser database file is tightened; the process's token is revoked at exit and
/// stale embedded tokens of dead processes are removed at the next start.
#[tokio::test]
async fn embedded_mode_keeps_its_data_private_and_revokes_its_tokens() {
    let parent = tempfile::tempdir().unwrap();
    let dir = parent.path().join("data");
    let (code, _, stderr) = outboard(&["sessions", "--data", dir.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(mode(&dir), 0o700);
    for name in ["outboard.db", "outboard.db-wal", "outboard.db-shm"] {
        let path = dir.join(name);
        if path.exists() {
            assert_eq!(mode(&path), 0o600, "{name}");
        }
    }
    assert_eq!(mode(&dir.join("outboard.db")), 0o600);

    // The token of that run is gone.
    let listed = admin(&dir, &["token", "ls"]);
    assert_eq!(listed.lines().count(), 1, "tokens left behind: {listed}");

    // A token of a dead embedded process (a crash) is removed at the next embedded start; a
    // looser database file is tightened.
    let dead = {
        let mut c = Command::new("true").spawn().unwrap();
        let pid = c.id();
        c.wait().unwrap();
        pid
    };
    {
        let store = outboard_server::store::Store::open(
            &dir.join("outboard.db"),
            outboard_server::store::Durability::Normal,
        )
        .unwrap();
        store.mint_token("local", "someone", &format!("embedded pid={dead}")).await.unwrap();
        store.mint_token("local", "someone", "admin").await.unwrap();
    }
    assert_eq!(admin(&dir, &["token", "ls"]).lines().count(), 3);
    std::fs::set_permissions(dir.join("outboard.db"), std::fs::Permissions::from_mode(0o644))
        .unwrap();
    let (code, _, stderr) = outboard(&["sessions", "--data", dir.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(mode(&dir.join("outboard.db")), 0o600);
    let listed = admin(&dir, &["token", "ls"]);
    assert_eq!(listed.lines().count(), 2, "{listed}");
    assert!(listed.contains("admin") && !listed.contains("embedded"), "{listed}");
}
