//! The proxy on its own, over its real Unix socket with real upstreams on 127.0.0.1: request
//! parsing, the refusal text, the head bound and the three limits. (Through a real sandbox:
//! `tests/tests/e2e/sandbox_network.rs`.)

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use hyper::header::HeaderMap;
use pretty_assertions::assert_eq;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpListener;

use super::*;
use crate::leaves::MAX_LEAVES;
use crate::target::{parse_target, refusal_body, strip_hop_by_hop, Refusal, Target};
use crate::{ca, relay};
use outboard_shared::{OrgId, SessionId};

/// Refuses the hosts listed, allows every other; lifts the forbidden ranges for `literals`.
struct Policy {
    refuse: Vec<String>,
    literals: Vec<(IpAddr, u16)>,
    /// Secrets injected into every host on that port.
    inject: Vec<(u16, Arc<Injection>)>,
}

impl Decide for Policy {
    fn decide(&self, host: &str, _port: u16) -> Verdict {
        if self.refuse.iter().any(|h| h == host) {
            Verdict::Refuse {
                policy: "org test: allow list".into(),
                reason: format!("{host} is not on the list"),
                hint: format!("outboard-server admin network set --org test registries+ {host}"),
            }
        } else {
            Verdict::Allow
        }
    }

    fn allows_literal(&self, ip: IpAddr, port: u16) -> bool {
        self.literals.contains(&(ip, port))
    }

    fn injections(&self, _host: &str, port: u16) -> Vec<Arc<Injection>> {
        self.inject.iter().filter(|(p, _)| *p == port).map(|(_, i)| i.clone()).collect()
    }
}

#[derive(Default)]
struct Recorder(Mutex<Vec<AuditEntry>>);

impl Audit for Recorder {
    fn record(&self, entry: AuditEntry) {
        self.0.lock().unwrap().push(entry);
    }
}

impl Recorder {
    fn entries(&self) -> Vec<AuditEntry> {
        self.0.lock().unwrap().clone()
    }
}

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const T: Duration = Duration::from_secs(20);

struct Fixture {
    _dir: tempfile::TempDir,
    proxy: ProxyHandle,
    audit: Arc<Recorder>,
}

async fn start(literals: Vec<(IpAddr, u16)>, limits: NetLimits) -> Fixture {
    start_with(literals, limits, REFUSAL_LINGER).await
}

async fn start_with(literals: Vec<(IpAddr, u16)>, limits: NetLimits, linger: Duration) -> Fixture {
    start_full(literals, vec![], None, limits, linger).await
}

async fn start_full(
    literals: Vec<(IpAddr, u16)>,
    inject: Vec<(u16, Arc<Injection>)>,
    ca: Option<Arc<ca::OrgCa>>,
    limits: NetLimits,
    linger: Duration,
) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let audit = Arc::new(Recorder::default());
    let ctx = SessionNet {
        org: OrgId::from("test"),
        org_name: "test".into(),
        session: SessionId::from("s_test"),
        user: "alice".into(),
        decide: Arc::new(Policy { refuse: vec!["refused.example".into()], literals, inject }),
        audit: audit.clone(),
        limits,
        env: Vec::new(),
        ca,
    };
    let proxy = serve_with(&dir.path().join("proxy.sock"), ctx, vec![], linger).await.unwrap();
    Fixture { _dir: dir, proxy, audit }
}

async fn client(f: &Fixture) -> UnixStream {
    UnixStream::connect(f.proxy.socket_path()).await.unwrap()
}

/// Reads until the peer closes (or `T` passes).
async fn read_all(s: &mut UnixStream) -> String {
    let mut out = Vec::new();
    let _ = tokio::time::timeout(T, s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// Reads one response head.
async fn read_head(s: &mut UnixStream) -> String {
    let mut out = Vec::new();
    let mut byte = [0u8; 1];
    while !out.ends_with(b"\r\n\r\n") {
        match tokio::time::timeout(T, s.read(&mut byte)).await {
            Ok(Ok(1)) => out.push(byte[0]),
            _ => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A TCP upstream that sends `bytes` bytes to every connection, then waits for the peer.
async fn sender(bytes: usize) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let chunk = vec![b'x'; 8192];
                let mut left = bytes;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if s.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n;
                }
                let mut sink = [0u8; 1024];
                while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
            });
        }
    });
    port
}

async fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + T;
    while !cond() {
        assert!(std::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn connect_and_absolute_form_targets() {
    let t = |method: Method, uri: &str| parse_target(&method, &uri.parse::<Uri>().unwrap());
    let target = |host: &str, port, path: Option<&str>| {
        Ok(Target { host: host.into(), port, path: path.map(String::from) })
    };
    assert_eq!(t(Method::CONNECT, "crates.io:443"), target("crates.io", 443, None));
    assert_eq!(t(Method::CONNECT, "[::1]:8443"), target("::1", 8443, None));
    assert_eq!(t(Method::CONNECT, "Example.COM:443"), target("example.com", 443, None));
    assert!(t(Method::CONNECT, "crates.io").unwrap_err().contains("port"));
    assert_eq!(
        t(Method::GET, "http://deb.debian.org/debian/dists?x=1"),
        target("deb.debian.org", 80, Some("/debian/dists?x=1"))
    );
    assert_eq!(t(Method::GET, "http://127.0.0.1:8080"), target("127.0.0.1", 8080, Some("/")));
    assert_eq!(t(Method::POST, "http://[::1]:81/a"), target("::1", 81, Some("/a")));
    assert!(t(Method::GET, "/only/a/path").unwrap_err().contains("forward proxy"));
    assert!(t(Method::GET, "https://example.com/").unwrap_err().contains("CONNECT"));
    assert!(t(Method::GET, "ftp://example.com/").unwrap_err().contains("http only"));
}

#[tokio::test]
async fn a_malformed_port_is_refused_with_400_and_never_read_as_another() {
    // `:111793` was read as "no port" (so port 80), `+443` and `0443` as 443.
    let port = sender(5).await;
    let f = start(vec![(LOCAL, 80), (LOCAL, 443), (LOCAL, port)], NetLimits::DEFAULT).await;
    let heads = [
        "GET http://127.0.0.1:111793/ HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".to_string(),
        "GET http://127.0.0.1:+443/ HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".to_string(),
        "GET http://127.0.0.1:0443/ HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".to_string(),
        format!("GET http://127.0.0.1:0{port}/ HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"),
        "CONNECT 127.0.0.1:+443 HTTP/1.1\r\n\r\n".to_string(),
        "CONNECT 127.0.0.1:0443 HTTP/1.1\r\n\r\n".to_string(),
        format!("CONNECT 127.0.0.1:0{port} HTTP/1.1\r\n\r\n"),
        "CONNECT 127.0.0.1:111793 HTTP/1.1\r\n\r\n".to_string(),
        "CONNECT 127.0.0.1:0 HTTP/1.1\r\n\r\n".to_string(),
    ];
    for head in &heads {
        let mut c = client(&f).await;
        c.write_all(head.as_bytes()).await.unwrap();
        let answer = read_all(&mut c).await;
        assert!(answer.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head:?}: {answer}");
        assert!(!answer.contains("xxxxx"), "{head:?} reached the upstream: {answer}");
    }
    // Nothing was connected: every entry the proxy wrote is a refusal.
    let entries = f.audit.entries();
    assert!(entries.iter().all(|e| !e.allowed), "{entries:?}");
    // The canonical spelling still works.
    let mut c = client(&f).await;
    c.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    assert!(read_head(&mut c).await.starts_with("HTTP/1.1 200"));
}

#[test]
fn ports_are_read_only_in_their_canonical_form() {
    let t = |method: Method, uri: &str| parse_target(&method, &uri.parse::<Uri>().unwrap());
    for bad in ["+443", "0443", "00", "0", "65536", "99999"] {
        let err = t(Method::CONNECT, &format!("example.com:{bad}")).unwrap_err();
        assert!(err.contains("is not a port"), "{bad}: {err}");
        let err = t(Method::GET, &format!("http://example.com:{bad}/")).unwrap_err();
        assert!(err.contains("is not a port"), "{bad}: {err}");
    }
    assert_eq!(t(Method::CONNECT, "[::1]:65535").unwrap().port, 65535);
    assert_eq!(t(Method::GET, "http://[::1]/").unwrap().port, 80);
    assert_eq!(t(Method::GET, "http://u:p@example.com:8080/").unwrap().port, 8080);
}

#[test]
fn hop_by_hop_and_proxy_headers_are_removed() {
    let mut h = HeaderMap::new();
    for (k, v) in [
        ("connection", "keep-alive, x-private"),
        ("keep-alive", "timeout=5"),
        ("proxy-authorization", "Basic Zm9vOmJhcg=="),
        ("proxy-connection", "keep-alive"),
        ("x-private", "1"),
        ("te", "trailers"),
        ("transfer-encoding", "chunked"),
        ("upgrade", "websocket"),
        ("host", "example.com"),
        ("accept", "*/*"),
        ("content-length", "3"),
    ] {
        h.append(k, v.parse().unwrap());
    }
    strip_hop_by_hop(&mut h);
    let mut left: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
    left.sort_unstable();
    assert_eq!(left, ["accept", "content-length", "host"]);
}

#[test]
fn the_refusal_names_host_policy_and_command() {
    let r = Refusal {
        status: StatusCode::FORBIDDEN,
        policy: "org acme: registries".into(),
        reason: "evil.example is not in the registries preset".into(),
        hint: "`outboard-server admin network set --org acme registries+ evil.example`".into(),
    };
    assert_eq!(
        refusal_body("evil.example", 443, &r),
        "Outboard's network proxy refused evil.example:443.\n\
         policy: org acme: registries\n\
         reason: evil.example is not in the registries preset\n\
         to allow it: `outboard-server admin network set --org acme registries+ evil.example`\n"
    );
    assert!(refusal_body("::1", 80, &r).starts_with("Outboard's network proxy refused [::1]:80."));
}

#[test]
fn local_addresses_are_told_from_others() {
    assert!(is_local(LOCAL));
    assert!(!is_local("192.0.2.1".parse().unwrap()));
}

#[tokio::test]
async fn a_head_over_the_bound_is_431_and_one_under_it_is_served() {
    let port = sender(5).await;
    let f = start(vec![(LOCAL, port)], NetLimits::DEFAULT).await;
    // Just under the bound: hyper's buffer holds the whole head.
    let pad = "a".repeat(MAX_HEAD - 200);
    let mut c = client(&f).await;
    let head = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nx-pad: {pad}\r\n\r\n");
    assert!(head.len() < MAX_HEAD);
    c.write_all(head.as_bytes()).await.unwrap();
    let answer = read_head(&mut c).await;
    assert!(answer.starts_with("HTTP/1.1 200 Connection established\r\n"), "{answer}");
    // Over it: refused before any decision.
    let pad = "a".repeat(MAX_HEAD + 10);
    let mut c = client(&f).await;
    let head = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nx-pad: {pad}\r\n\r\n");
    let _ = c.write_all(head.as_bytes()).await;
    let answer = read_all(&mut c).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");
}

#[tokio::test]
async fn refusals_answer_403_with_the_policy_and_are_audited() {
    let port = sender(5).await;
    let f = start(vec![], NetLimits::DEFAULT).await;
    let mut c = client(&f).await;
    c.write_all(b"CONNECT refused.example:443 HTTP/1.1\r\nhost: refused.example:443\r\n\r\n")
        .await
        .unwrap();
    let answer = read_all(&mut c).await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(answer.contains("content-type: text/plain"), "{answer}");
    assert!(answer.contains("connection: close"), "{answer}");
    assert!(answer.contains("proxy-connection: close"), "{answer}");
    assert!(answer.contains("policy: org test: allow list"), "{answer}");
    assert!(answer.contains("registries+ refused.example"), "{answer}");
    // Allowed by the policy, but loopback and not named by an admin.
    let mut c = client(&f).await;
    let head = format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n");
    c.write_all(head.as_bytes()).await.unwrap();
    let answer = read_all(&mut c).await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(answer.contains("127.0.0.1 is a loopback address"), "{answer}");
    assert!(answer.contains(&format!("--org test registries+ 127.0.0.1:{port}")), "{answer}");
    wait_for("two audit entries", || f.audit.entries().len() == 2).await;
    let e = f.audit.entries();
    assert_eq!((e[0].host.as_str(), e[0].port, e[0].allowed), ("refused.example", 443, false));
    assert!(e[0].reason.as_deref().unwrap().contains("not on the list"), "{e:?}");
    assert_eq!((e[1].host.as_str(), e[1].port, e[1].allowed), ("127.0.0.1", port, false));
}

#[tokio::test]
async fn the_connection_cap_answers_503_beyond_it() {
    let port = sender(0).await;
    let limits = NetLimits { max_connections: 2, ..NetLimits::DEFAULT };
    let f = start(vec![(LOCAL, port)], limits).await;
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut c = client(&f).await;
        let head = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n");
        c.write_all(head.as_bytes()).await.unwrap();
        let answer = read_head(&mut c).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        open.push(c);
    }
    assert_eq!(f.proxy.open_connections(), 2);
    let mut c = client(&f).await;
    c.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    let answer = read_all(&mut c).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains("already has 2 connections open"), "{answer}");
    // One closes: the next one gets through.
    drop(open.pop());
    wait_for("a slot to free", || f.proxy.open_connections() == 1).await;
    let mut c = client(&f).await;
    c.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    assert!(read_head(&mut c).await.starts_with("HTTP/1.1 200"));
    let refused: Vec<AuditEntry> = f.audit.entries().into_iter().filter(|e| !e.allowed).collect();
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!((refused[0].host.as_str(), refused[0].port), ("127.0.0.1", port));
}

#[tokio::test]
async fn beyond_the_answering_slots_an_over_the_cap_connection_is_closed_unanswered() {
    let port = sender(0).await;
    let limits = NetLimits { max_connections: 1, ..NetLimits::DEFAULT };
    // Over-the-cap connections linger for as long as the test runs.
    let f = start_with(vec![(LOCAL, port)], limits, T).await;
    let mut open = client(&f).await;
    open.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    assert!(read_head(&mut open).await.starts_with("HTTP/1.1 200"));
    // Each of these takes one answering slot, waiting for a request that never comes.
    let mut silent = Vec::new();
    for _ in 0..REFUSING {
        silent.push(client(&f).await);
    }
    let mut last = client(&f).await;
    let _ = last.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes()).await;
    assert_eq!(read_all(&mut last).await, "", "answered although every answering slot was taken");
    wait_for("the unanswered refusal's record", || {
        f.audit.entries().iter().any(|e| !e.allowed && e.host.is_empty())
    })
    .await;
    // One silent connection goes: its slot answers the next one with the reason.
    drop(silent.pop());
    let deadline = std::time::Instant::now() + T;
    loop {
        let mut next = client(&f).await;
        let _ =
            next.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes()).await;
        let answer = read_all(&mut next).await;
        if answer.starts_with("HTTP/1.1 503") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no 503 after a slot freed: {answer:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_relay_pipes_at_most_its_bound_and_closes_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("relay.sock");
    let unix = UnixListener::bind(&socket).unwrap();
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = tcp.local_addr().unwrap();
    tokio::spawn(relay::relay(tcp, socket, 2));
    let mut piped = Vec::new();
    for n in 0..2u8 {
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        c.write_all(&[n]).await.unwrap();
        let (mut far, _) = unix.accept().await.unwrap();
        let mut got = [0u8; 1];
        far.read_exact(&mut got).await.unwrap();
        assert_eq!(got, [n]);
        piped.push((c, far));
    }
    let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(T, third.read(&mut buf)).await.unwrap();
    assert!(matches!(read, Ok(0) | Err(_)), "the third connection was kept: {read:?}");
    // A slot frees: the next connection is piped again.
    drop(piped.pop());
    let deadline = std::time::Instant::now() + T;
    loop {
        let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = c.write_all(b"z").await;
        if let Ok(Ok((mut far, _))) =
            tokio::time::timeout(Duration::from_millis(200), unix.accept()).await
        {
            let mut got = [0u8; 1];
            far.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"z");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no connection piped after a slot freed");
    }
}

#[tokio::test]
async fn an_idle_tunnel_is_closed_and_audited_as_idle() {
    let port = sender(3).await;
    let limits = NetLimits { idle_timeout: Duration::from_millis(300), ..NetLimits::DEFAULT };
    let f = start(vec![(LOCAL, port)], limits).await;
    let mut c = client(&f).await;
    c.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    assert!(read_head(&mut c).await.starts_with("HTTP/1.1 200"));
    // The upstream's 3 bytes, then nothing either way until the proxy closes the tunnel.
    assert_eq!(read_all(&mut c).await, "xxx");
    wait_for("the audit entry", || f.audit.entries().len() == 1).await;
    let e = &f.audit.entries()[0];
    assert!(e.allowed, "{e:?}");
    assert_eq!((e.bytes_up, e.bytes_down), (0, 3));
    assert!(e.reason.as_deref().unwrap_or("").contains("idle timeout"), "{e:?}");
    wait_for("the slot to free", || f.proxy.open_connections() == 0).await;
}

#[tokio::test]
async fn a_client_connection_that_sends_nothing_is_closed_at_the_idle_timeout() {
    let limits = NetLimits { idle_timeout: Duration::from_millis(300), ..NetLimits::DEFAULT };
    let f = start(vec![], limits).await;
    let mut c = client(&f).await;
    wait_for("the connection to count", || f.proxy.open_connections() == 1).await;
    assert_eq!(read_all(&mut c).await, "");
    wait_for("the slot to free", || f.proxy.open_connections() == 0).await;
}

#[tokio::test]
async fn a_tunnel_carries_bytes_sent_with_its_head_and_a_half_close_both_ways() {
    // An upstream that echoes until the client's end, then closes.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    let f = start(vec![(LOCAL, port)], NetLimits::DEFAULT).await;
    let mut c = client(&f).await;
    // "early" rides with the head, so the proxy has read it before the tunnel starts.
    c.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\nearly").as_bytes())
        .await
        .unwrap();
    assert!(read_head(&mut c).await.starts_with("HTTP/1.1 200"));
    c.write_all(b" late").await.unwrap();
    c.shutdown().await.unwrap();
    assert_eq!(read_all(&mut c).await, "early late");
    wait_for("the audit entry", || f.audit.entries().len() == 1).await;
    let e = &f.audit.entries()[0];
    assert_eq!((e.allowed, e.bytes_up, e.bytes_down, e.reason.as_deref()), (true, 10, 10, None));
}

#[tokio::test]
async fn the_byte_budget_cuts_the_connection_and_refuses_the_next() {
    let port = sender(1 << 20).await;
    let limits = NetLimits { session_bytes: 100_000, ..NetLimits::DEFAULT };
    let f = start(vec![(LOCAL, port)], limits).await;
    let mut c = client(&f).await;
    c.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    assert!(read_head(&mut c).await.starts_with("HTTP/1.1 200"));
    let got = read_all(&mut c).await;
    // At most one read buffer over the budget, and far from the megabyte sent.
    assert!(got.len() >= 100_000 - 8192 && got.len() < 100_000 + 64 * 1024, "{}", got.len());
    let mut c = client(&f).await;
    c.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
    let answer = read_all(&mut c).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(answer.contains(BUDGET_SPENT), "{answer}");
    wait_for("two audit entries", || f.audit.entries().len() == 2).await;
    let e = f.audit.entries();
    let cut = e.iter().find(|e| e.allowed).unwrap();
    assert_eq!(cut.reason.as_deref(), Some(BUDGET_SPENT), "{e:?}");
    assert!(cut.bytes_down >= 100_000 - 8192, "{e:?}");
    assert!(e.iter().any(|e| !e.allowed && e.reason.as_deref().unwrap().contains(BUDGET_SPENT)));
    assert!(f.proxy.bytes_used() >= 100_000);
}

#[tokio::test]
async fn plain_http_is_forwarded_in_origin_form_without_proxy_headers() {
    // An upstream that answers with the request head it received.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if !matches!(s.read(&mut byte).await, Ok(1)) {
                        return;
                    }
                    head.push(byte[0]);
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: keep-alive\r\n\
                     keep-alive: timeout=5\r\n\r\n",
                    head.len()
                );
                let _ = s.write_all(answer.as_bytes()).await;
                let _ = s.write_all(&head).await;
            });
        }
    });
    let f = start(vec![(LOCAL, port)], NetLimits::DEFAULT).await;
    let mut c = client(&f).await;
    let head = format!(
        "GET http://127.0.0.1:{port}/a/b?c=d HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\
         proxy-authorization: Basic eDp5\r\nproxy-connection: keep-alive\r\nx-kept: 1\r\n\r\n"
    );
    c.write_all(head.as_bytes()).await.unwrap();
    let answer = read_head(&mut c).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(!answer.contains("keep-alive: timeout"), "{answer}");
    let len: usize = answer
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let mut body = vec![0u8; len];
    c.read_exact(&mut body).await.unwrap();
    let body = String::from_utf8(body).unwrap();
    assert!(body.starts_with("GET /a/b?c=d HTTP/1.1\r\n"), "{body}");
    assert!(body.contains("x-kept: 1"), "{body}");
    assert!(!body.to_ascii_lowercase().contains("proxy-"), "{body}");
    drop(c);
    wait_for("the audit entry", || f.audit.entries().len() == 1).await;
    let e = &f.audit.entries()[0];
    assert!(e.allowed && e.bytes_up > 0 && e.bytes_down > 0, "{e:?}");
}

#[tokio::test]
async fn dropping_the_handle_removes_the_socket() {
    let f = start(vec![], NetLimits::DEFAULT).await;
    let path = f.proxy.socket_path().to_path_buf();
    assert!(path.exists());
    drop(f.proxy);
    assert!(!path.exists());
}

mod intercepting {
    //! Interception on the bare socket: a TLS upstream on 127.0.0.1 with its own test CA that
    //! echoes the request's headers, and a client that trusts the org's CA.

    use std::sync::Arc;

    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tokio_rustls::client::TlsStream;

    use pretty_assertions::assert_eq;

    use super::*;
    use crate::ca::OrgCa;

    const VALUE: &str = "s3cr3t-token-0123456789";

    fn injection(upstream_ca: &str) -> Arc<Injection> {
        Arc::new(Injection {
            name: "API".into(),
            header: "authorization".into(),
            header_value: format!("Bearer {VALUE}"),
            value: VALUE.into(),
            placeholders: vec!["outboard-placeholder-API".into()],
            upstream_ca: Some(upstream_ca.into()),
        })
    }

    /// A throwaway CA (PEM) and a leaf for 127.0.0.1 signed by it.
    fn test_pki(cn: &str) -> (String, rcgen::Certificate, rcgen::KeyPair) {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.distinguished_name.push(DnType::CommonName, cn);
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.subject_alt_names.push(SanType::IpAddress(LOCAL));
        params.subject_alt_names.push(SanType::DnsName("localhost".try_into().unwrap()));
        let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
        (ca.pem(), cert, key)
    }

    /// What the echo upstream saw: each request's headers, as `name: value` lines.
    type Seen = Arc<Mutex<Vec<String>>>;

    /// A TLS upstream (certificate of a CA named `cn`) answering each request with its headers
    /// in the body and its `authorization` in `x-echo`; keeps connections alive.
    async fn echo_upstream(cn: &str) -> (u16, String, Seen) {
        let (ca_pem, cert, key) = test_pki(cn);
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let seen: Seen = Arc::default();
        let for_task = seen.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, seen) = (acceptor.clone(), for_task.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else { return };
                    let service = service_fn(move |req: Request<Incoming>| {
                        let seen = seen.clone();
                        async move {
                            let mut lines = String::new();
                            for (k, v) in req.headers() {
                                lines.push_str(&format!("{k}: {}\n", v.to_str().unwrap_or("?")));
                            }
                            seen.lock().unwrap().push(lines.clone());
                            let echo = req.headers().get("authorization").cloned();
                            let mut answer = Response::new(Body::from(lines));
                            if let Some(echo) = echo {
                                answer.headers_mut().insert("x-echo", echo);
                            }
                            Ok::<_, Infallible>(answer)
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .await;
                });
            }
        });
        (port, ca_pem, seen)
    }

    /// `CONNECT` to 127.0.0.1:`port`, then TLS trusting only `ca_pem`.
    async fn tls_through(f: &Fixture, port: u16, ca_pem: &str) -> TlsStream<UnixStream> {
        let mut c = client(f).await;
        c.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
        let head = read_head(&mut c).await;
        assert!(head.starts_with("HTTP/1.1 200 Connection established\r\n"), "{head}");
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap()).unwrap();
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::IpAddress(LOCAL.into()), c)
            .await
            .unwrap()
    }

    /// A client that accepts any certificate, as `curl -k` does: it can ask for any name.
    #[derive(Debug)]
    struct AcceptAnything(Arc<rustls::crypto::CryptoProvider>);

    impl rustls::client::danger::ServerCertVerifier for AcceptAnything {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: rustls::pki_types::UnixTime,
        ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
            Ok(rustls::client::danger::ServerCertVerified::assertion())
        }

        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            let algorithms = &self.0.signature_verification_algorithms;
            rustls::crypto::verify_tls12_signature(message, cert, dss, algorithms)
        }

        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &rustls::DigitallySignedStruct,
        ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
            let algorithms = &self.0.signature_verification_algorithms;
            rustls::crypto::verify_tls13_signature(message, cert, dss, algorithms)
        }

        fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }

    /// `CONNECT localhost:port`, then TLS asking for `sni` (none for an IP) and accepting any
    /// certificate.
    async fn tls_asking_for(
        f: &Fixture,
        port: u16,
        sni: ServerName<'static>,
    ) -> TlsStream<UnixStream> {
        let mut c = client(f).await;
        c.write_all(format!("CONNECT localhost:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
        let head = read_head(&mut c).await;
        assert!(head.starts_with("HTTP/1.1 200 Connection established\r\n"), "{head}");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(AcceptAnything(provider)))
            .with_no_client_auth();
        tokio_rustls::TlsConnector::from(Arc::new(config)).connect(sni, c).await.unwrap()
    }

    /// Sends `requests` on one connection; each answer's status, headers and body.
    async fn get(
        tls: TlsStream<UnixStream>,
        requests: Vec<Request<String>>,
    ) -> Vec<(StatusCode, HeaderMap, String)> {
        let (mut sender, driver) =
            hyper::client::conn::http1::handshake(TokioIo::new(tls)).await.unwrap();
        tokio::spawn(driver);
        let mut answers = Vec::new();
        for req in requests {
            sender.ready().await.unwrap();
            let (parts, body) = sender.send_request(req).await.unwrap().into_parts();
            let body = axum::body::to_bytes(Body::new(body), 1 << 20).await.unwrap();
            answers.push((parts.status, parts.headers, String::from_utf8_lossy(&body).into()));
        }
        answers
    }

    fn request(port: u16, headers: &[(&'static str, &str)]) -> Request<String> {
        let mut req = Request::get("/echo").body(String::new()).unwrap();
        req.headers_mut().insert(HOST, format!("127.0.0.1:{port}").parse().unwrap());
        for (k, v) in headers {
            req.headers_mut().insert(*k, v.parse().unwrap());
        }
        req
    }

    async fn intercepting(port: u16, upstream_ca: &str) -> (Fixture, Arc<OrgCa>) {
        let ca = Arc::new(OrgCa::generate("test").unwrap());
        let inject = vec![(port, injection(upstream_ca))];
        let f = start_full(
            vec![(LOCAL, port)],
            inject,
            Some(ca.clone()),
            NetLimits::DEFAULT,
            REFUSAL_LINGER,
        )
        .await;
        (f, ca)
    }

    #[tokio::test]
    async fn the_header_is_set_placeholders_replaced_identity_asked_and_the_value_scrubbed() {
        let (port, upstream_ca, seen) = echo_upstream("upstream test CA").await;
        let (f, ca) = intercepting(port, &upstream_ca).await;
        let tls = tls_through(&f, port, ca.cert_pem()).await;
        let answers = get(
            tls,
            vec![
                request(
                    port,
                    &[("authorization", "Bearer sandbox-junk"), ("accept-encoding", "gzip, br")],
                ),
                request(port, &[("x-token", "token outboard-placeholder-API!")]),
            ],
        )
        .await;
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2, "{seen:?}");
        // The upstream got the real credential, replacing whatever the sandbox sent.
        assert!(seen[0].contains(&format!("authorization: Bearer {VALUE}\n")), "{}", seen[0]);
        assert!(!seen[0].contains("sandbox-junk"), "{}", seen[0]);
        assert!(seen[0].contains("accept-encoding: identity\n"), "{}", seen[0]);
        assert!(!seen[0].contains("gzip"), "{}", seen[0]);
        assert!(seen[1].contains(&format!("x-token: token {VALUE}!\n")), "{}", seen[1]);
        // What came back holds `[secret API]` where the value was, headers and bodies.
        for (status, headers, body) in &answers {
            assert_eq!(*status, StatusCode::OK);
            assert!(!body.contains(VALUE), "{body}");
            assert!(body.contains("authorization: Bearer [secret API]\n"), "{body}");
            assert_eq!(headers["x-echo"], "Bearer [secret API]");
            // Scrubbing changes lengths: the length goes, the body comes chunked.
            assert!(!headers.contains_key("content-length"), "{headers:?}");
        }
        assert!(answers[1].2.contains("x-token: token [secret API]!\n"), "{}", answers[1].2);
        drop(answers);
        wait_for("the audit entry", || !f.audit.entries().is_empty()).await;
        let e = &f.audit.entries()[0];
        assert!(e.allowed && e.intercepted && e.reason.is_none(), "{e:?}");
        assert!(e.bytes_up > 0 && e.bytes_down > 0, "{e:?}");
    }

    #[tokio::test]
    async fn a_request_naming_another_host_inside_the_tunnel_gets_421_and_no_credential() {
        let (port, upstream_ca, seen) = echo_upstream("upstream test CA").await;
        let ca = Arc::new(OrgCa::generate("test").unwrap());
        // The secret is bound to `localhost` (a name: SNI applies), reached on loopback.
        let six = IpAddr::V6(std::net::Ipv6Addr::LOCALHOST);
        let f = start_full(
            vec![(LOCAL, port), (six, port)],
            vec![(port, injection(&upstream_ca))],
            Some(ca),
            NetLimits::DEFAULT,
            REFUSAL_LINGER,
        )
        .await;
        let bound = || ServerName::try_from("localhost").unwrap();
        let attacker = || ServerName::try_from("attacker.example").unwrap();
        let with_host = |host: &str| {
            let mut req = Request::get("/echo").body(String::new()).unwrap();
            req.headers_mut().insert(HOST, host.parse().unwrap());
            req
        };
        let ours = format!("localhost:{port}");
        let absolute = || {
            let mut req =
                Request::get("https://attacker.example/echo").body(String::new()).unwrap();
            req.headers_mut().insert(HOST, ours.parse().unwrap());
            req
        };
        let two_hosts = || {
            let mut req = with_host(&ours);
            req.headers_mut().append(HOST, "attacker.example".parse().unwrap());
            req
        };
        let cases: Vec<(ServerName<'static>, Request<String>, &str)> = vec![
            (bound(), with_host("attacker.example"), "\"attacker.example\" in its Host header"),
            (bound(), with_host(&format!("localhost:{}", port + 1)), "in its Host header"),
            (bound(), with_host(&format!("localhost.:{port}")), "in its Host header"),
            (bound(), absolute(), "\"attacker.example\" in its request line"),
            (bound(), two_hosts(), "more than one Host header"),
            (attacker(), with_host(&ours), "the server name \"attacker.example\""),
            (attacker(), with_host("attacker.example"), "the server name \"attacker.example\""),
            (ServerName::IpAddress(LOCAL.into()), with_host(&ours), "no TLS server name"),
        ];
        for (sni, req, says) in cases {
            let shown = format!("{sni:?} {:?} {:?}", req.uri(), req.headers());
            let answers = get(tls_asking_for(&f, port, sni).await, vec![req]).await;
            let (status, _, body) = &answers[0];
            assert_eq!(*status, StatusCode::MISDIRECTED_REQUEST, "{shown}: {body}");
            assert!(body.contains("credentials go only to the host they are bound to"), "{body}");
            assert!(body.contains(says), "{shown}: {body}");
            assert!(!body.contains(VALUE), "{body}");
        }
        assert!(seen.lock().unwrap().is_empty(), "a misdirected request was sent: {seen:?}");
        // The bound name in SNI and Host (with or without its port) is served with the credential.
        for host in [ours.clone(), "LocalHost".into()] {
            let answers =
                get(tls_asking_for(&f, port, bound()).await, vec![with_host(&host)]).await;
            assert_eq!(answers[0].0, StatusCode::OK, "{host}: {}", answers[0].2);
        }
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert!(seen[0].contains(&format!("authorization: Bearer {VALUE}\n")), "{}", seen[0]);
        wait_for("the refusals' audit entries", || {
            f.audit.entries().iter().filter(|e| e.refused_by.is_some()).count() == 8
        })
        .await;
        let refused: Vec<AuditEntry> =
            f.audit.entries().into_iter().filter(|e| e.refused_by.is_some()).collect();
        for e in &refused {
            assert_eq!((e.host.as_str(), e.port, e.allowed), ("localhost", port, false), "{e:?}");
            assert!(e.reason.as_deref().unwrap().contains("Nothing was sent"), "{e:?}");
        }
    }

    #[tokio::test]
    async fn an_upstream_whose_certificate_does_not_verify_gets_a_502_and_no_credential() {
        let (port, _its_own_ca, seen) = echo_upstream("some other CA").await;
        let (unrelated_ca, _, _) = test_pki("the CA the secret names");
        let (f, ca) = intercepting(port, &unrelated_ca).await;
        let tls = tls_through(&f, port, ca.cert_pem()).await;
        let answers = get(tls, vec![request(port, &[])]).await;
        let (status, _, body) = &answers[0];
        assert_eq!(*status, StatusCode::BAD_GATEWAY, "{body}");
        assert!(body.contains(&format!("could not reach 127.0.0.1:{port}")), "{body}");
        assert!(body.contains("certificate"), "{body}");
        assert!(body.contains("it was not sent"), "{body}");
        assert!(seen.lock().unwrap().is_empty());
        wait_for("the audit entry", || !f.audit.entries().is_empty()).await;
        let e = &f.audit.entries()[0];
        assert!(e.intercepted && e.reason.as_deref().unwrap().contains("certificate"), "{e:?}");
    }

    #[tokio::test]
    async fn without_a_ca_an_injected_host_is_refused_and_never_tunnelled() {
        let (port, upstream_ca, seen) = echo_upstream("upstream test CA").await;
        let inject = vec![(port, injection(&upstream_ca))];
        let f =
            start_full(vec![(LOCAL, port)], inject, None, NetLimits::DEFAULT, REFUSAL_LINGER).await;
        let mut c = client(&f).await;
        c.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes()).await.unwrap();
        let answer = read_all(&mut c).await;
        assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
        assert!(answer.contains("no sandbox CA"), "{answer}");
        assert!(!answer.contains(VALUE));
        assert!(seen.lock().unwrap().is_empty());
        wait_for("the audit entry", || !f.audit.entries().is_empty()).await;
        let e = &f.audit.entries()[0];
        assert!(!e.allowed && !e.intercepted, "{e:?}");
    }

    #[tokio::test]
    async fn plain_http_to_an_injected_host_is_refused() {
        let port = sender(5).await;
        let ca = Arc::new(OrgCa::generate("test").unwrap());
        let inject = vec![(port, injection("unused"))];
        let f =
            start_full(vec![(LOCAL, port)], inject, Some(ca), NetLimits::DEFAULT, REFUSAL_LINGER)
                .await;
        let mut c = client(&f).await;
        let head = format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n");
        c.write_all(head.as_bytes()).await.unwrap();
        let answer = read_all(&mut c).await;
        assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
        assert!(answer.contains("credentials are only sent over https"), "{answer}");
        assert!(answer.contains("use https://127.0.0.1/"), "{answer}");
        assert!(!answer.contains("xxxxx"), "the upstream was reached: {answer}");
    }

    #[test]
    fn the_leaf_cache_keeps_at_most_its_bound_dropping_the_oldest() {
        let leaves = Leaves::new(Arc::new(OrgCa::generate("test").unwrap()));
        let first = leaves.config("h0.example").unwrap();
        assert!(Arc::ptr_eq(&first, &leaves.config("h0.example").unwrap()), "minted twice");
        for i in 1..=MAX_LEAVES {
            leaves.config(&format!("h{i}.example")).unwrap();
        }
        assert_eq!(leaves.len(), MAX_LEAVES);
        assert!(!leaves.has("h0.example"), "the oldest is dropped");
        assert!(leaves.has(&format!("h{MAX_LEAVES}.example")));
        assert!(leaves.has("h1.example"));
        leaves.config("::1").unwrap();
        assert_eq!(leaves.len(), MAX_LEAVES);
    }
}
