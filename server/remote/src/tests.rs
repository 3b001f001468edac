//! The sandbox host and its client on loopback: a real host (TLS, WebSocket, join) in this
//! process with real bubblewrap sandboxes, and the real client.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use outboard_shared::OutputStream;
use pretty_assertions::assert_eq;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::client::{HostClient, HostEndpoint, RemoteError};
use crate::host::{Host, HostOptions};
use crate::protocol::{self, FrameError, Op, ToHost, MAX_FRAME_BYTES};
use outboard_sandbox::SandboxConfig;
use outboard_tools::{confinement, ReadLedger};

const T: Duration = Duration::from_secs(30);

struct Running {
    addr: SocketAddr,
    fingerprint: String,
    shutdown: CancellationToken,
    served: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn stop(self) {
        self.shutdown.cancel();
        self.served.await.unwrap();
    }
}

/// A host on `listen` with its data in `data`, joined by `token` (or the one stored before).
async fn start(data: &Path, token: Option<&str>, listen: SocketAddr) -> Running {
    start_with(data, token, listen, |_| {}).await
}

/// [`start`] with options changed by `tune` (smaller bounds, to reach them).
async fn start_with(
    data: &Path,
    token: Option<&str>,
    listen: SocketAddr,
    tune: impl FnOnce(&mut HostOptions),
) -> Running {
    let sandbox = SandboxConfig {
        agent_exe: Some(outboard_sandbox::testing::agent_exe_for_tests().unwrap()),
        ..SandboxConfig::Bwrap
    };
    let mut options = HostOptions::new(data.to_path_buf(), sandbox);
    options.capacity = 8;
    tune(&mut options);
    let host = Host::new(options, token).unwrap();
    let fingerprint = host.fingerprint().to_owned();
    let listener = tokio::net::TcpListener::bind(listen).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let shutdown = CancellationToken::new();
    let served = tokio::spawn(host.serve(listener, shutdown.clone()));
    Running { addr, fingerprint, shutdown, served }
}

fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn client(addr: SocketAddr, token: &str, window: Duration) -> HostClient {
    let endpoint = HostEndpoint {
        name: "h1".into(),
        url: format!("wss://{addr}"),
        token: token.into(),
        pin: None,
    };
    HostClient::new(endpoint, window).unwrap()
}

struct Fixture {
    dir: tempfile::TempDir,
    token: String,
    host: Running,
    client: HostClient,
}

impl Fixture {
    async fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let token = crate::trust::new_join_token().unwrap();
        let host = start(&dir.path().join("host"), Some(&token), loopback()).await;
        let client = client(host.addr, &token, T);
        Fixture { dir, token, host, client }
    }

    fn workspace_dir(&self, id: &str) -> PathBuf {
        self.dir.path().join("host").join("workspaces").join(id)
    }
}

#[tokio::test]
async fn a_command_runs_on_the_host_and_streams_its_output() {
    let f = Fixture::new().await;
    let mut streamed = Vec::new();
    let command = "echo one; echo two >&2; echo made > here.txt; exit 3";
    let r = f
        .client
        .exec(
            "w1",
            command,
            T,
            &mut |s, t| streamed.push((s, t.to_owned())),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(r.exit_code, Some(3), "{r:?}");
    let out: String = streamed
        .iter()
        .filter(|(s, _)| *s == OutputStream::Stdout)
        .map(|(_, t)| t.as_str())
        .collect();
    let err: String = streamed
        .iter()
        .filter(|(s, _)| *s == OutputStream::Stderr)
        .map(|(_, t)| t.as_str())
        .collect();
    assert_eq!((out.as_str(), err.as_str()), ("one\n", "two\n"));
    assert_eq!(std::fs::read_to_string(f.workspace_dir("w1").join("here.txt")).unwrap(), "made\n");
    assert_eq!(f.client.pinned().as_deref(), Some(f.host.fingerprint.as_str()));
}

#[tokio::test]
async fn a_cancelled_command_is_killed_on_the_host() {
    let f = Fixture::new().await;
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    let mut started = Some(trigger);
    let r = f
        .client
        .exec(
            "w1",
            "echo started; sleep 600; echo never > never.txt",
            T,
            &mut |_, t| {
                if t.contains("started") {
                    if let Some(c) = started.take() {
                        c.cancel();
                    }
                }
            },
            cancel,
        )
        .await
        .unwrap();
    assert_eq!(r.exit_code, None, "{r:?}");
    assert!(!f.workspace_dir("w1").join("never.txt").exists());
}

#[tokio::test]
async fn write_read_edit_through_the_wire_keep_the_read_before_write_rule() {
    let f = Fixture::new().await;
    let c = &f.client;
    let mut reads = ReadLedger::new();
    let no = CancellationToken::new;
    let call = |name: &'static str, input: serde_json::Value| (name, input);
    let (name, input) =
        call("Write", json!({"file_path": "/workspace/a.txt", "content": "alpha\n"}));
    let r = c.tool("w1", name, &input, &mut reads, no()).await.unwrap();
    assert!(!r.is_error, "{}", r.output);
    let on_host = f.workspace_dir("w1").join("a.txt");
    assert_eq!(std::fs::read_to_string(&on_host).unwrap(), "alpha\n");

    let r = c.tool("w1", "Read", &json!({"file_path": "a.txt"}), &mut reads, no()).await.unwrap();
    assert_eq!(r.output, "     1\talpha\n");
    let edit = json!({"file_path": "a.txt", "old_string": "alpha", "new_string": "beta"});
    let r = c.tool("w1", "Edit", &edit, &mut reads, no()).await.unwrap();
    assert!(!r.is_error, "{}", r.output);
    assert_eq!(std::fs::read_to_string(&on_host).unwrap(), "beta\n");

    // A change made on the host behind the session's back: the host refuses the next edit.
    std::fs::write(&on_host, "changed\n").unwrap();
    let edit = json!({"file_path": "a.txt", "old_string": "changed", "new_string": "x"});
    let r = c.tool("w1", "Edit", &edit, &mut reads, no()).await.unwrap();
    assert!(r.is_error && r.output.contains("modified since read"), "{}", r.output);
    // A file never read cannot be overwritten, whoever made it.
    std::fs::write(f.workspace_dir("w1").join("b.txt"), "bee\n").unwrap();
    let write = json!({"file_path": "b.txt", "content": "x"});
    let r = c.tool("w1", "Write", &write, &mut reads, no()).await.unwrap();
    assert!(r.is_error && r.output.contains("has not been read"), "{}", r.output);

    // The digest the durability rules record, computed where the file is.
    let digest = c.digest("w1", "/workspace/a.txt").await.unwrap();
    assert_eq!(digest, Some(outboard_org::tokens::hex_sha256(b"changed\n")));
    assert_eq!(c.digest("w1", "nope.txt").await.unwrap().as_deref(), Some("absent"));

    let r = c.tool("w1", "Grep", &json!({"pattern": "bee"}), &mut reads, no()).await.unwrap();
    assert_eq!(r.output, "Found 1 file\n/workspace/b.txt");
    let r = c.tool("w1", "Glob", &json!({"pattern": "*.txt"}), &mut reads, no()).await.unwrap();
    assert!(r.output.contains("/workspace/a.txt") && r.output.contains("/workspace/b.txt"));
}

#[tokio::test]
async fn the_local_confinement_cases_hold_on_the_host() {
    let f = Fixture::new().await;
    f.client.open("w1").await.unwrap();
    let root = f.workspace_dir("w1");
    let outside = confinement::lay_out(&root, f.dir.path());
    let host = f.dir.path().to_string_lossy().into_owned();
    let mut reads = ReadLedger::new();
    for (tool, input, expect) in confinement::cases(&outside) {
        let r =
            f.client.tool("w1", tool, &input, &mut reads, CancellationToken::new()).await.unwrap();
        confinement::check(tool, &input, &expect, &r, &host);
    }
    confinement::check_untouched(&outside);
    // Workspace ids are plain names: none leads out of the host's workspaces directory.
    for id in ["..", "a/b", "", "x".repeat(65).as_str()] {
        let e = f.client.open(id).await.unwrap_err();
        assert!(matches!(e, RemoteError::Failed { .. }), "{id:?}: {e}");
    }
}

#[tokio::test]
async fn a_wrong_join_token_is_refused_with_what_to_do() {
    let f = Fixture::new().await;
    let wrong = crate::trust::new_join_token().unwrap();
    let e = client(f.host.addr, &wrong, T).connect().await.unwrap_err();
    let message = e.to_string();
    assert!(matches!(e, RemoteError::Refused { .. }), "{message}");
    assert!(
        message.contains("join token is wrong") && message.contains("admin hosts add"),
        "{message}"
    );
    assert!(!message.contains(&wrong) && !message.contains(&f.token), "a secret leaked: {message}");
    // The right token still joins.
    f.client.connect().await.unwrap();
}

#[tokio::test]
async fn a_certificate_other_than_the_pinned_one_is_refused() {
    let f = Fixture::new().await;
    let endpoint = HostEndpoint {
        name: "h1".into(),
        url: format!("wss://{}", f.host.addr),
        token: f.token.clone(),
        pin: Some("00".repeat(32)),
    };
    let e = HostClient::new(endpoint, T).unwrap().connect().await.unwrap_err();
    assert!(matches!(e, RemoteError::NotTheHost { .. }), "{e}");
    assert!(e.to_string().contains("admin hosts add h1"), "{e}");
}

#[test]
fn the_frame_bound_is_reached_and_held() {
    let message = |content: String| ToHost::Call {
        id: 7,
        op: Op::Tool {
            workspace: "w1".into(),
            name: "Write".into(),
            input: json!({"file_path": "big", "content": content}),
            ledger: Vec::new(),
        },
    };
    let base = protocol::encode(&message(String::new())).unwrap().len();
    let at_bound = protocol::encode(&message("a".repeat(MAX_FRAME_BYTES - base))).unwrap();
    assert_eq!(at_bound.len(), MAX_FRAME_BYTES);
    assert_eq!(
        protocol::decode::<ToHost>(&at_bound).unwrap(),
        message("a".repeat(MAX_FRAME_BYTES - base))
    );
    let over = protocol::encode(&message("a".repeat(MAX_FRAME_BYTES - base + 1)));
    assert!(matches!(over, Err(FrameError::TooLarge { len }) if len == MAX_FRAME_BYTES + 1));
    let mut bytes = at_bound;
    bytes.push(b' ');
    assert!(matches!(protocol::decode::<ToHost>(&bytes), Err(FrameError::TooLarge { .. })));
}

#[tokio::test]
async fn a_call_over_the_frame_bound_is_refused_and_the_link_stays_up() {
    let f = Fixture::new().await;
    let mut reads = ReadLedger::new();
    let big = json!({"file_path": "big", "content": "a".repeat(MAX_FRAME_BYTES)});
    let e =
        f.client.tool("w1", "Write", &big, &mut reads, CancellationToken::new()).await.unwrap_err();
    assert!(matches!(e, RemoteError::Frame { .. }), "{e}");
    assert!(e.to_string().contains(&MAX_FRAME_BYTES.to_string()), "{e}");
    let small = json!({"file_path": "small", "content": "ok"});
    let r =
        f.client.tool("w1", "Write", &small, &mut reads, CancellationToken::new()).await.unwrap();
    assert!(!r.is_error, "{}", r.output);
}

#[tokio::test]
async fn a_restarted_host_is_reconnected_and_keeps_the_workspace() {
    let Fixture { dir, host, client, .. } = Fixture::new().await;
    let mut reads = ReadLedger::new();
    let write = json!({"file_path": "kept.txt", "content": "still here\n"});
    let r = client.tool("w1", "Write", &write, &mut reads, CancellationToken::new()).await.unwrap();
    assert!(!r.is_error, "{}", r.output);
    let addr = host.addr;
    host.stop().await;
    // Started again without the token: the stored hash and certificate are used.
    let again = start(&dir.path().join("host"), None, addr).await;
    let read = json!({"file_path": "kept.txt"});
    let r = client.tool("w1", "Read", &read, &mut reads, CancellationToken::new()).await.unwrap();
    assert_eq!(r.output, "     1\tstill here\n");
    let r = client
        .exec("w1", "cat kept.txt", T, &mut |_, _| {}, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!((r.exit_code, r.output.as_str()), (Some(0), "still here\n"));
    assert_eq!(client.pinned().as_deref(), Some(again.fingerprint.as_str()));
    // The ledger kept across the restart still allows the edit of what was read.
    let edit = json!({"file_path": "kept.txt", "old_string": "still", "new_string": "now"});
    let r = client.tool("w1", "Edit", &edit, &mut reads, CancellationToken::new()).await.unwrap();
    assert!(!r.is_error, "{}", r.output);
    again.stop().await;
}

#[tokio::test]
async fn a_host_that_is_gone_is_reported_unreachable_by_name() {
    let f = Fixture::new().await;
    let addr = f.host.addr;
    f.host.stop().await;
    let c = client(addr, &f.token, Duration::from_millis(300));
    let e = c.open("w1").await.unwrap_err();
    assert!(matches!(e, RemoteError::Unreachable { .. }), "{e}");
    let want = format!("sandbox host h1 at wss://{addr} is unreachable: ");
    assert!(e.to_string().starts_with(&want), "{e}");
}

#[tokio::test]
async fn a_call_past_the_per_connection_bound_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let token = crate::trust::new_join_token().unwrap();
    let host =
        start_with(&dir.path().join("host"), Some(&token), loopback(), |o| o.max_calls = 2).await;
    let client = std::sync::Arc::new(client(host.addr, &token, T));
    // The first sandbox of the test process builds the agent binary, blocking this runtime.
    let warm = client.exec("warm", "true", T, &mut |_, _| {}, CancellationToken::new()).await;
    assert_eq!(warm.unwrap().exit_code, Some(0));
    let cancel = CancellationToken::new();
    let (done_tx, mut done_rx) = tokio::sync::mpsc::channel(3);
    for workspace in ["a", "b", "c"] {
        let (client, cancel, done) = (client.clone(), cancel.clone(), done_tx.clone());
        tokio::spawn(async move {
            let r = client.exec(workspace, "sleep 600", T, &mut |_, _| {}, cancel).await;
            let _ = done.send(r).await;
        });
    }
    // Two hold the host's two slots, sleeping until cancelled; the third is answered at once.
    let first = tokio::time::timeout(T, done_rx.recv()).await.unwrap().unwrap();
    let e = first.unwrap_err();
    assert!(e.to_string().contains("running 2 calls of this harness already"), "{e}");
    cancel.cancel();
    for _ in 0..2 {
        let r = tokio::time::timeout(T, done_rx.recv()).await.unwrap().unwrap().unwrap();
        assert_eq!((r.exit_code, r.timed_out), (None, false), "{r:?}");
    }
    host.stop().await;
}

/// Reads from a raw TCP connection until the host closes it (`true`) or `wait` passes (`false`).
async fn closed_by_host(tcp: &mut tokio::net::TcpStream, wait: Duration) -> bool {
    use tokio::io::AsyncReadExt as _;
    let mut buf = [0u8; 64];
    matches!(tokio::time::timeout(wait, tcp.read(&mut buf)).await, Ok(Ok(0) | Err(_)))
}

#[tokio::test]
async fn peers_that_never_join_hold_at_most_the_pending_bound_and_the_join_deadline() {
    let dir = tempfile::tempdir().unwrap();
    let token = crate::trust::new_join_token().unwrap();
    let host = start_with(&dir.path().join("host"), Some(&token), loopback(), |o| {
        o.max_pending_joins = 2;
        o.max_connections = 3;
    })
    .await;
    // Two silent peers take both joining slots; a third connection is closed at accept, and
    // so is a real harness's while they hold them.
    let mut silent = Vec::new();
    for _ in 0..2 {
        silent.push(tokio::net::TcpStream::connect(host.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await; // both accepted
    let mut third = tokio::net::TcpStream::connect(host.addr).await.unwrap();
    assert!(closed_by_host(&mut third, T).await, "the third unjoined connection is closed");
    let early = client(host.addr, &token, Duration::ZERO);
    let e = early.connect_within(T).await.unwrap_err();
    assert!(matches!(e, RemoteError::Unreachable { .. }), "{e}");
    // Once they are gone, a harness joins, and holds a connection slot of its own.
    drop(silent);
    let joined = client(host.addr, &token, T);
    let mut tries = 0;
    while let Err(e) = joined.connect_within(T).await {
        tries += 1;
        assert!(tries < 50, "the slots were never given back: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(joined.status().await.unwrap().capacity, 8);
    // Connections past the total bound are closed at once, joined or not: one harness plus two
    // silent peers fill three slots.
    let mut held = Vec::new();
    for _ in 0..2 {
        held.push(tokio::net::TcpStream::connect(host.addr).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut over = tokio::net::TcpStream::connect(host.addr).await.unwrap();
    assert!(closed_by_host(&mut over, T).await, "the fourth connection is over the total bound");
    // A silent peer is dropped at the join deadline, not kept.
    assert!(closed_by_host(&mut held[0], crate::host::JOIN_TIMEOUT * 2).await);
    host.stop().await;
}

#[tokio::test]
async fn background_commands_run_read_and_die_in_the_hosts_sandbox() {
    let f = Fixture::new().await;
    let mut reads = ReadLedger::new();
    let start = json!({"command": "echo started; sleep 600", "run_in_background": true});
    let started =
        f.client.tool("w1", "Bash", &start, &mut reads, CancellationToken::new()).await.unwrap();
    assert!(!started.is_error, "{started:?}");
    let id = started
        .output
        .split("with ID: ")
        .nth(1)
        .and_then(|rest| rest.split('.').next())
        .unwrap_or_else(|| panic!("no shell id in {:?}", started.output))
        .to_owned();
    // Its output is read there, once it has some.
    let mut output = String::new();
    for _ in 0..100 {
        let read = json!({"bash_id": id});
        let r =
            f.client.tool("w1", "BashOutput", &read, &mut reads, CancellationToken::new()).await;
        output.push_str(&r.unwrap().output);
        if output.contains("started") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(output.contains("started") && output.contains("running"), "{output}");
    let kill = json!({"shell_id": id});
    let killed = f
        .client
        .tool("w1", "KillShell", &kill, &mut reads, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(killed.output, format!("Successfully killed shell: {id}"), "{killed:?}");
    // The sandbox is the workspace's own: a foreground command there no longer sees it.
    let r = f
        .client
        .exec("w1", "pgrep -x sleep || echo none", T, &mut |_, _| {}, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(r.output.trim(), "none", "{r:?}");
    // Tools that are the harness's are refused by name.
    let e = f
        .client
        .tool("w1", "WebFetch", &json!({"url": "http://x"}), &mut reads, CancellationToken::new())
        .await
        .unwrap_err();
    assert!(e.to_string().contains("does not run on a sandbox host"), "{e}");
    f.host.stop().await;
}

/// What a hostile host answers after the join.
enum Hostile {
    /// Refuses the join with this reason (no token needed to send it).
    Refuse(String),
    /// Welcomes the harness (it knows the token: a compromised host) and answers each call,
    /// in order, with these replies.
    Answer(Vec<protocol::Reply>),
}

/// A sandbox host that speaks the protocol but answers as `behaviour` says, on loopback; its
/// address. It serves one connection.
async fn hostile_host(dir: &Path, token: &str, behaviour: Hostile) -> SocketAddr {
    use futures_util::{SinkExt as _, StreamExt as _};
    use protocol::{ToHarness, PROTOCOL_VERSION};
    use tokio_tungstenite::tungstenite::Message;
    let identity = crate::trust::HostIdentity::load_or_create(dir).unwrap();
    let fingerprint = identity.fingerprint();
    let tls =
        tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(identity.server_config().unwrap()));
    let key = crate::trust::JoinKey::from_token(token).unwrap();
    let listener = tokio::net::TcpListener::bind(loopback()).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let stream = tls.accept(tcp).await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(stream).await.unwrap();
        let send = |m: &ToHarness| Message::Binary(serde_json::to_vec(m).unwrap().into());
        let nonce = crate::trust::nonce().unwrap();
        let challenge = ToHarness::Challenge { version: PROTOCOL_VERSION, nonce: nonce.clone() };
        ws.send(send(&challenge)).await.unwrap();
        let Some(Ok(Message::Binary(join))) = ws.next().await else { return };
        let Ok(ToHost::Join { nonce: theirs, .. }) = protocol::decode(&join) else { return };
        let replies = match behaviour {
            Hostile::Refuse(reason) => {
                let _ = ws.send(send(&ToHarness::Refused { reason })).await;
                return;
            }
            Hostile::Answer(replies) => replies,
        };
        let proof = key.host_proof(&nonce, &theirs, &fingerprint);
        ws.send(send(&ToHarness::Welcome { proof, capacity: Some(1) })).await.unwrap();
        for reply in replies {
            let Some(Ok(Message::Binary(call))) = ws.next().await else { return };
            let Ok(ToHost::Call { id, .. }) = protocol::decode(&call) else { return };
            if ws.send(send(&ToHarness::Reply { id, reply })).await.is_err() {
                return;
            }
        }
        while ws.next().await.is_some() {}
    });
    addr
}

/// A refusal reason, which a peer without the token can send, reaches the harness's errors (and
/// `admin hosts ls`) as bounded plain text: no escape sequence, newline or bidirectional
/// control, at most `MAX_HOST_TEXT_BYTES`.
#[tokio::test]
async fn a_hosts_refusal_reason_is_bounded_plain_text() {
    let dir = tempfile::tempdir().unwrap();
    let token = crate::trust::new_join_token().unwrap();
    let reason = format!(
        "\u{1b}[2J\u{1b}[31mgo away\u{1b}[0m\r\nFAKE: all good\u{202e}{}",
        "A".repeat(100_000)
    );
    let addr = hostile_host(dir.path(), &token, Hostile::Refuse(reason)).await;
    let e = client(addr, &token, Duration::ZERO).connect_within(T).await.unwrap_err();
    let RemoteError::Refused { reason, .. } = &e else { panic!("{e:?}") };
    let head: String = reason.chars().take(80).collect();
    assert!(reason.starts_with(" [2J [31mgo away [0m  FAKE: all good "), "{head:?}");
    assert!(!reason.chars().any(|c| c.is_control() || c == '\u{202e}'), "{head:?}");
    assert!(reason.len() <= protocol::MAX_HOST_TEXT_BYTES + '…'.len_utf8(), "{}", reason.len());
    assert!(e.to_string().len() < 1024, "{}", e.to_string().len());
}

/// A host's results are kept as a local command's or tool's would be: a 15 MiB command output
/// and a 15 MiB `Read` come back capped (head and tail, the middle cut with a note), and a
/// message over the harness's bound ends the connection instead of being buffered. Before,
/// a 60 MiB `Bash` result went whole into the session's log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosts_oversized_results_are_capped_like_local_ones() {
    use outboard_sandbox::output::{OUTPUT_HEAD_BYTES, OUTPUT_TAIL_BYTES};
    let dir = tempfile::tempdir().unwrap();
    let token = crate::trust::new_join_token().unwrap();
    let big = "x".repeat(15 << 20);
    let replies = vec![
        protocol::Reply::Exec {
            exit_code: Some(0),
            output: big.clone(),
            timed_out: false,
            signal: None,
            failure: Some(format!("\u{1b}]0;title\u{7}{}", "F".repeat(64 << 10))),
        },
        protocol::Reply::Tool {
            output: big,
            is_error: false,
            recorded: vec![],
            forgotten: vec![],
            attachments: vec![],
        },
        protocol::Reply::Failed { error: "E".repeat(20 << 20) },
    ];
    let addr = hostile_host(dir.path(), &token, Hostile::Answer(replies)).await;
    let c = client(addr, &token, Duration::ZERO);

    let r = c.exec("w1", "true", T, &mut |_, _| {}, CancellationToken::new()).await.unwrap();
    let note = 512;
    assert!(r.output.len() <= OUTPUT_HEAD_BYTES + OUTPUT_TAIL_BYTES + note, "{}", r.output.len());
    assert!(r.output.contains("bytes of output cut from the middle"));
    let failure = r.failure.unwrap();
    assert!(failure.len() <= protocol::MAX_HOST_TEXT_BYTES + 3 && !failure.contains('\u{1b}'));

    let mut reads = ReadLedger::new();
    let read = json!({"file_path": "a.txt"});
    let t = c.tool("w1", "Read", &read, &mut reads, CancellationToken::new()).await.unwrap();
    assert!(
        t.output.len() <= crate::client::MAX_HOST_TOOL_OUTPUT_BYTES + note,
        "{}",
        t.output.len()
    );

    // 20 MiB in one message: over the bound, the connection is cut, nothing is kept.
    let e = c.exec("w1", "true", T, &mut |_, _| {}, CancellationToken::new()).await.unwrap_err();
    assert!(matches!(e, RemoteError::Lost { .. } | RemoteError::Unreachable { .. }), "{e:?}");
    assert!(e.to_string().len() < 1024);
}
