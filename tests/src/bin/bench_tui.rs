//! `scripts/bench.sh tui`: the TUI's costs, as a table (asserts nothing).
//!
//! - frame: render time of one frame of a 10,000-line transcript at 120×40 (ratatui's
//!   `TestBackend`, so the figure is our layout and ratatui's buffer work, without terminal IO),
//!   while an answer streams into it (one delta applied per frame), p50/p99; and again with a
//!   subagent's text streaming into its group (a running `Task` whose child made 300 calls: the
//!   group renders its newest items only); and again with the answer streaming a Rust code block
//!   (two deltas a line, so half the frames end inside a line: the highlighter's per-block cache
//!   parses only the new lines). `--frames` prints these rows and stops;
//! - attach: the page of 1,000 answers rendered at once (each with a two-line Rust block);
//! - the first coloured code block, which loads the highlighter's grammars;
//! - idle CPU: the real `outboard` binary in tmux, connected and doing nothing, over 5 s;
//! - fan-out: the latency the server adds between a model delta and its delivery to each attached
//!   client, at 1, 10 and 50 clients, each with and without a stalled client (see [`fanout`]).

use outboard_tests::bench::{percentile, tmux};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use outboard_server::{Limits, ServerConfig};
use outboard_shared::{
    EventKind, Role, SessionAttachResponse, SessionEvent, SessionId, SessionInfo, SessionStatus,
    ToolCall, UserId,
};
use outboard_tests::harness::Api;
use outboard_tests::mock_llm::{MockLlm, MockStep};
use outboard_tui::app::{App, AppEvent, ConnState, Me};
use outboard_tui::render;
use outboard_tui::theme::Theme;
use ratatui::backend::TestBackend;
use ratatui::Terminal;
use serde_json::json;

fn ev(seq: u64, kind: EventKind) -> SessionEvent {
    SessionEvent { session_id: SessionId("s_1".into()), seq, ts: String::new(), kind, parent: None }
}

/// The `Task` call of [`frame_bench`]'s subagent, and how many tool calls its child made before
/// the measured stream: a long child, so the figure shows a group's render stays bounded.
const BENCH_TASK: &str = "c_task";
const BENCH_CHILD_CALLS: u64 = 300;

/// The events of a running subagent after `seq`: the Task call, then its child's tool calls.
fn subagent_events(seq: u64) -> Vec<SessionEvent> {
    let task = ToolCall {
        call_id: BENCH_TASK.into(),
        name: "Task".into(),
        input: json!({"description": "survey", "prompt": "p", "subagent_type": "general-purpose"}),
    };
    let mut out = vec![ev(seq + 1, EventKind::ToolCall { call: task, target_before: None })];
    for i in 0..BENCH_CHILD_CALLS {
        let call = ToolCall {
            call_id: format!("k{i}"),
            name: "Read".into(),
            input: json!({"file_path": format!("/workspace/src/m{i}.rs")}),
        };
        let result = EventKind::ToolResult {
            call_id: format!("k{i}"),
            name: "Read".into(),
            output: "fn main() {}".into(),
            is_error: false,
            duration_ms: 2,
            attachments: Vec::new(),
        };
        let child = |seq, kind| SessionEvent { parent: Some(BENCH_TASK.into()), ..ev(seq, kind) };
        out.push(child(seq + 2 + 2 * i, EventKind::ToolCall { call, target_before: None }));
        out.push(child(seq + 3 + 2 * i, result));
    }
    out
}

/// What streams in [`frame_bench`].
#[derive(Clone, Copy, PartialEq)]
enum Stream {
    /// Prose into the main answer.
    Prose,
    /// A subagent's text into its group.
    Subagent,
    /// A fenced Rust code block into the main answer.
    Code,
}

/// Frame times while an answer streams into a ~10,000-line transcript: the main loop's answer,
/// a subagent's text into its group (after [`BENCH_CHILD_CALLS`] child calls), or a code block.
/// Also returns the attach's own time: every cell of the page rendered (its code highlighted).
fn frame_bench(stream: Stream) -> anyhow::Result<(usize, Duration, Duration, Duration)> {
    let subagent = stream == Stream::Subagent;
    let mut app = App::new(Theme { color: true }, 120, 40);
    let me = Me { user: "alice".into(), connection_id: 1 };
    app.handle(AppEvent::Connection(ConnState::Connected, Some(me)));
    // ~10,000 lines: 1,000 answers of ten lines of markdown each.
    let events: Vec<SessionEvent> = (0..1000u64)
        .map(|i| {
            let text = format!(
                "## Step {i}\n\nSome *prose* with `code` and a list:\n\n- one\n- two\n\n```rust\nlet x = {i};\nlet y = x + 1;\n```"
            );
            ev(i + 1, EventKind::AssistantMessage { text, tool_calls: vec![], usage: None, reasoning: Vec::new(), model: None, searches: Vec::new() })
        })
        .chain(if subagent { subagent_events(1000) } else { Vec::new() })
        .collect();
    let session = SessionInfo {
        id: SessionId("s_1".into()),
        title: "bench".into(),
        owner_id: UserId("u_1".into()),
        owner: "alice".into(),
        status: SessionStatus::Running,
        model: "mock/model".into(),
        model_name: None,
        last_seq: 1000,
        created_at: String::new(),
        updated_at: String::new(),
        failure: None,
        workspace: None,
        source: None,
        network: Default::default(),
        attached: Vec::new(),
        usage: None,
        context_window: None,
        context_window_source: None,
        context_window_from: None,
        todos: None,
    };
    let snapshot = SessionAttachResponse {
        session,
        role: Role::Driver,
        events,
        in_flight: None,
        has_more: false,
        cursor: None,
        standing: Vec::new(),
    };
    let t = Instant::now();
    app.handle(AppEvent::Attached(Box::new(snapshot), false));
    let attach = t.elapsed();
    let lines = app.transcript_len();
    let mut terminal = Terminal::new(TestBackend::new(120, 40))?;
    let mut times = Vec::new();
    for i in 0..2000 {
        let text = match (stream, i % 2) {
            (Stream::Code, _) if i == 0 => "Here:\n\n```rust\n".to_owned(),
            (Stream::Code, 1) => format!("let v{i}: &'static str = "),
            (Stream::Code, _) => format!("\"s{i}\"; // line {i}\n"),
            _ => format!("word{i} "),
        };
        let mut delta = ev(1000, EventKind::AssistantDelta { text });
        if subagent {
            delta.parent = Some(BENCH_TASK.into());
        }
        let t = Instant::now();
        app.handle(AppEvent::Server(Box::new(delta)));
        terminal.draw(|f| render::draw(&app, f))?;
        times.push(t.elapsed());
    }
    times.sort();
    Ok((lines, attach, percentile(&times, 0.5), percentile(&times, 0.99)))
}

/// utime + stime of `pid` in clock ticks.
fn cpu_ticks(pid: &str) -> anyhow::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let after = stat.rsplit_once(')').context("stat")?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    Ok(fields[11].parse::<u64>()? + fields[12].parse::<u64>()?)
}

async fn idle_cpu() -> anyhow::Result<f64> {
    let mock = MockLlm::start(vec![]).await?;
    // The `outboard` next to this binary, in embedded mode (its own server in-process), so the
    // figure is the whole client with nothing happening.
    let exe = std::env::current_exe()?.parent().context("exe dir")?.join("outboard");
    anyhow::ensure!(exe.exists(), "{} is missing: build outboard-cli first", exe.display());
    let data = tempfile::tempdir()?;
    let socket = format!("outboard-bench-{}", std::process::id());
    let base_url = mock.anthropic_base_url();
    let key = format!("{}=bench", Api::Anthropic.key_var());
    tmux(
        &socket,
        &[
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            "120",
            "-y",
            "40",
            "-e",
            &key,
            exe.to_str().context("path")?,
            "--provider",
            "anthropic",
            "--base-url",
            &base_url,
            "--model",
            "mock",
            "--data",
            data.path().to_str().context("path")?,
        ],
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !tmux(&socket, &["capture-pane", "-p", "-t", "t"])?.contains("connected") {
        anyhow::ensure!(Instant::now() < deadline, "the TUI did not connect");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = tmux(&socket, &["list-panes", "-t", "t", "-F", "#{pane_pid}"])?.trim().to_owned();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = cpu_ticks(&pid)?;
    let window = Duration::from_secs(5);
    tokio::time::sleep(window).await;
    let used = cpu_ticks(&pid)? - before;
    let _ = tmux(&socket, &["kill-server"]);
    // Clock ticks are 1/100 s on Linux.
    Ok(used as f64 / 100.0 / window.as_secs_f64() * 100.0)
}

// ---------------------------------------------------------------------------------------------
// Fan-out latency.
//
// What the figure is: for every (client, delta) pair, the instant the client's WebSocket read
// returned the `assistant_delta` frame minus the instant a timestamping TCP proxy between the
// server and the mock LLM finished handing the SSE chunk carrying that delta to the server's
// socket. So it is everything the server does from "model bytes arrived" to "frame on a client's
// socket" (SSE parse, provider, agent loop, session actor, broadcast, per-connection forwarder and
// queue, JSON encode, WebSocket write) plus loopback TCP and the client's WebSocket frame decode.
// The mock's pacing is outside it (the clock starts when the bytes leave the proxy). Everything
// runs in one process on one tokio runtime, so the clients' reads compete with the server for the
// same cores: at 50 clients part of the figure is client-side scheduling.
//
// The clients are raw WebSocket connections that timestamp a frame as soon as it is read and find
// the delta's number by substring (no JSON parse), so their own cost stays small. The driver is
// one of the clients.
//
// The stalled client attaches as a watcher with a 4 KiB receive buffer and never reads again.
// Two warm-up turns of big deltas in a second session it also watches (before the other watchers
// attach; in every run alike) send it ~6 MiB, more than the kernel buffers of a loopback
// connection hold (up to tcp_wmem's 4 MiB), so during the measured turn its server-side writer is
// blocked and its 512-frame outbound queue full; the footnote shows the bytes stuck in the kernel
// against the bytes sent.

const FANOUT_CLIENTS: [usize; 3] = [1, 10, 50];
const FANOUT_DELTAS: usize = 400;
const FANOUT_DELTA_MS: u64 = 5;
const WARMUP_TURNS: usize = 2;
const WARMUP_DELTAS: usize = 1500;
const WARMUP_DELTA_BYTES: usize = 1000;

type RawWs = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;
type Marks = std::sync::Arc<std::sync::Mutex<std::collections::HashMap<u32, Instant>>>;

/// The number `N` of the first `"text":"dN<non-digit>` in `hay`, and where it ended.
fn delta_marks(hay: &[u8]) -> Vec<(u32, usize)> {
    const PAT: &[u8] = b"\"text\":\"d";
    let mut out = Vec::new();
    let mut i = 0;
    while i + PAT.len() <= hay.len() {
        if &hay[i..i + PAT.len()] != PAT {
            i += 1;
            continue;
        }
        let start = i + PAT.len();
        let digits = hay[start..].iter().take_while(|b| b.is_ascii_digit()).count();
        let end = start + digits;
        // Only a complete number (followed by a non-digit) counts; a chunk may cut it.
        if digits > 0 && end < hay.len() {
            if let Some(n) = std::str::from_utf8(&hay[start..end]).ok().and_then(|s| s.parse().ok())
            {
                out.push((n, end));
            }
        }
        i = end.max(i + 1);
    }
    out
}

/// A TCP proxy to `upstream` that records, per delta number, when the response bytes carrying it
/// were written to the downstream (the server's) socket.
async fn timestamping_proxy(
    upstream: std::net::SocketAddr,
    marks: Marks,
) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((inbound, _)) = listener.accept().await {
            let marks = marks.clone();
            tokio::spawn(async move {
                if let Err(e) = proxy_conn(inbound, upstream, marks).await {
                    eprintln!("proxy connection: {e:#}");
                }
            });
        }
    });
    Ok(url)
}

async fn proxy_conn(
    inbound: tokio::net::TcpStream,
    upstream: std::net::SocketAddr,
    marks: Marks,
) -> anyhow::Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let outbound = tokio::net::TcpStream::connect(upstream).await?;
    inbound.set_nodelay(true)?;
    outbound.set_nodelay(true)?;
    let (mut in_r, mut in_w) = inbound.into_split();
    let (mut out_r, mut out_w) = outbound.into_split();
    let up = tokio::spawn(async move { tokio::io::copy(&mut in_r, &mut out_w).await });
    let mut buf = vec![0u8; 64 * 1024];
    // The tail of the previous read, so a marker cut between two reads is still found.
    let mut carry: Vec<u8> = Vec::new();
    loop {
        let n = out_r.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        in_w.write_all(&buf[..n]).await?;
        let now = Instant::now();
        carry.extend_from_slice(&buf[..n]);
        let found = delta_marks(&carry);
        if !found.is_empty() {
            let mut map = marks.lock().unwrap_or_else(|p| p.into_inner());
            for (n, _) in found {
                map.entry(n).or_insert(now);
            }
        }
        let keep = carry.len().min(32);
        carry.drain(..carry.len() - keep);
    }
    up.abort();
    Ok(())
}

/// A raw WebSocket client that has said hello; `rcvbuf` shrinks its socket's receive buffer.
async fn raw_connect(
    addr: std::net::SocketAddr,
    token: &str,
    rcvbuf: Option<u32>,
) -> anyhow::Result<RawWs> {
    use futures_util::SinkExt as _;
    let socket = tokio::net::TcpSocket::new_v4()?;
    if let Some(size) = rcvbuf {
        socket.set_recv_buffer_size(size)?;
    }
    let stream = socket.connect(addr).await?;
    stream.set_nodelay(true)?;
    let (mut ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}"), stream).await?;
    let hello = serde_json::json!({
        "type": "hello", "protocol_version": outboard_shared::PROTOCOL_VERSION,
        "token": token, "client": "bench-fanout"
    });
    ws.send(tokio_tungstenite::tungstenite::Message::Text(hello.to_string().into())).await?;
    let welcome = raw_json(&mut ws).await?;
    anyhow::ensure!(welcome["type"] == "welcome", "not welcomed: {welcome}");
    Ok(ws)
}

/// The next text frame, as text.
async fn raw_text(ws: &mut RawWs) -> anyhow::Result<String> {
    use futures_util::StreamExt as _;
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .context("no frame within 30 s")?
            .context("connection closed")??;
        if let tokio_tungstenite::tungstenite::Message::Text(t) = msg {
            return Ok(t.as_str().to_owned());
        }
    }
}

async fn raw_json(ws: &mut RawWs) -> anyhow::Result<serde_json::Value> {
    Ok(serde_json::from_str(&raw_text(ws).await?)?)
}

async fn raw_send(
    ws: &mut RawWs,
    id: u64,
    method: &str,
    params: serde_json::Value,
) -> anyhow::Result<()> {
    use futures_util::SinkExt as _;
    let frame =
        serde_json::json!({"type": "request", "id": id, "method": method, "params": params});
    ws.send(tokio_tungstenite::tungstenite::Message::Text(frame.to_string().into())).await?;
    Ok(())
}

/// Sends a request and returns its result, skipping the events that arrive meanwhile.
async fn raw_request(
    ws: &mut RawWs,
    id: u64,
    method: &str,
    params: serde_json::Value,
) -> anyhow::Result<serde_json::Value> {
    raw_send(ws, id, method, params).await?;
    loop {
        let frame = raw_json(ws).await?;
        if frame["type"] == "response" && frame["id"] == id {
            anyhow::ensure!(frame["error"].is_null(), "{method} failed: {}", frame["error"]);
            return Ok(frame["result"].clone());
        }
    }
}

/// Reads until the turn ends; returns (delta number, receive instant) for the measured deltas.
async fn collect_deltas(mut ws: RawWs) -> anyhow::Result<Vec<(u32, Instant)>> {
    let mut out = Vec::with_capacity(FANOUT_DELTAS);
    loop {
        let text = raw_text(&mut ws).await?;
        let now = Instant::now();
        if text.contains("\"assistant_delta\"") {
            if let Some((n, _)) = delta_marks(text.as_bytes()).first() {
                out.push((*n, now));
            }
        } else if text.contains("\"turn_completed\"") {
            return Ok(out);
        } else if text.contains("\"turn_failed\"") || text.contains("\"lagged\"") {
            anyhow::bail!("the measured turn went wrong for a client: {text}");
        } else if text.contains("\"type\":\"response\"") && !text.contains("\"error\":null") {
            let frame: serde_json::Value = serde_json::from_str(&text)?;
            anyhow::ensure!(frame["error"].is_null(), "a request failed: {}", frame["error"]);
        }
    }
}

/// Bytes queued in the kernel for the loopback TCP connection between the client's port `port`
/// and the server's `server`: (unread by the client, unsent by the server).
fn stuck_bytes(port: u16, server: u16) -> Option<(u64, u64)> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let (mut unread, mut unsent) = (None, None);
    for line in table.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let (Some(local), Some(remote), Some(queues)) = (f.get(1), f.get(2), f.get(4)) else {
            continue;
        };
        let port_of =
            |a: &str| a.rsplit_once(':').and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
        let (tx, rx) = queues.split_once(':')?;
        let (tx, rx) = (u64::from_str_radix(tx, 16).ok()?, u64::from_str_radix(rx, 16).ok()?);
        match (port_of(local), port_of(remote)) {
            (Some(l), Some(r)) if l == port && r == server => unread = Some(rx),
            (Some(l), Some(r)) if l == server && r == port => unsent = Some(tx),
            _ => {}
        }
    }
    Some((unread?, unsent?))
}

struct FanoutRun {
    latencies: Vec<Duration>,
    missing: usize,
    /// For the stalled client: bytes unread in its socket, unsent in the server's, and the
    /// bytes of the warm-up frames it was sent.
    stuck: Option<(u64, u64, u64)>,
}

/// One server, `clients` attached clients (the driver included), optionally a stalled client;
/// a warm-up turn, then a measured turn of [`FANOUT_DELTAS`] deltas.
async fn fanout_run(clients: usize, stalled: bool) -> anyhow::Result<FanoutRun> {
    let agent_exe = std::env::current_exe()?.parent().context("exe dir")?.join("outboard-server");
    anyhow::ensure!(agent_exe.exists(), "{} is missing: build it first", agent_exe.display());
    let padding = "x".repeat(WARMUP_DELTA_BYTES);
    let warm: Vec<String> = (0..WARMUP_DELTAS).map(|i| format!("w{i} {padding} ")).collect();
    let warm: Vec<&str> = warm.iter().map(String::as_str).collect();
    let measured: Vec<String> = (0..FANOUT_DELTAS).map(|i| format!("d{i} ")).collect();
    let measured: Vec<&str> = measured.iter().map(String::as_str).collect();
    let mut steps: Vec<MockStep> =
        (0..WARMUP_TURNS).map(|_| MockStep::text("").with_deltas(&warm).chunk_delay(1)).collect();
    steps.push(MockStep::text("").with_deltas(&measured).latency(50).chunk_delay(FANOUT_DELTA_MS));
    let mock = MockLlm::start(steps).await?;
    let marks: Marks = Default::default();
    let proxy = timestamping_proxy(mock.addr(), marks.clone()).await?;

    let data = tempfile::tempdir_in(std::env::temp_dir())?;
    let mut llm =
        outboard_server::config::llm_config(Some("anthropic"), Some(&proxy), Some("bench"))?;
    llm.api_key = Some(outboard_server::Secret::new("bench-key"));
    let config = ServerConfig {
        data_dir: data.path().to_path_buf(),
        models: llm.into(),
        // The server probes its sandbox at launch; the agent lives in `outboard-server`.
        sandbox: outboard_server::sandbox::SandboxConfig {
            agent_exe: Some(agent_exe),
            ..outboard_server::sandbox::SandboxConfig::Bwrap
        },
        limits: Limits::default(),
        net: outboard_server::NetConfig::default(),
        allow_client_workspaces: false,
        place_on_hosts: false,
        store: None,
        workspaces: None,
    };
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let server = outboard_server::launch(listener, config).await?;
    let addr = server.local_addr();
    let token = server.mint_token("bench", "bench").await?;

    let mut driver = raw_connect(addr, &token, None).await?;
    let created = raw_request(&mut driver, 1, "session/create", json!({})).await?;
    let sid = created["session"]["id"].as_str().context("no session id")?.to_owned();
    raw_request(&mut driver, 2, "session/attach", json!({"session_id": sid, "role": "driver"}))
        .await?;

    // The warm-up runs in a second session (so the measured one has no big history: the mock
    // refuses request bodies above 2 MiB) that the stalled client watches too: its frames go to
    // the same per-connection queue.
    let created = raw_request(&mut driver, 20, "session/create", json!({})).await?;
    let filler = created["session"]["id"].as_str().context("no session id")?.to_owned();
    raw_request(&mut driver, 21, "session/attach", json!({"session_id": filler, "role": "driver"}))
        .await?;
    let mut stalled_ws = None;
    if stalled {
        let mut ws = raw_connect(addr, &token, Some(4096)).await?;
        for (id, session) in [(1, &sid), (2, &filler)] {
            let params = json!({"session_id": session, "role": "watcher"});
            raw_request(&mut ws, id, "session/attach", params).await?;
        }
        // From here on it never reads.
        stalled_ws = Some(ws);
    }

    // Warm-up turns: big deltas, only the driver (and the stalled client) attached. `warm_bytes`
    // counts the frames the driver got, which the stalled client was sent too.
    let mut warm_bytes = 0u64;
    for turn in 0..WARMUP_TURNS {
        let id = 3 + turn as u64;
        let params = json!({"session_id": filler, "text": "warm up"});
        raw_request(&mut driver, id, "turn/send", params).await?;
        loop {
            let text = raw_text(&mut driver).await?;
            warm_bytes += text.len() as u64;
            let frame: serde_json::Value = serde_json::from_str(&text)?;
            match frame["event"]["type"].as_str() {
                Some("turn_completed") => break,
                Some("turn_failed") => anyhow::bail!("a warm-up turn failed: {frame}"),
                _ => {}
            }
        }
    }

    let mut watchers = Vec::new();
    for _ in 1..clients {
        let mut ws = raw_connect(addr, &token, None).await?;
        raw_request(&mut ws, 1, "session/attach", json!({"session_id": sid, "role": "watcher"}))
            .await?;
        watchers.push(ws);
    }
    // Let the presence events of those attaches drain.
    tokio::time::sleep(Duration::from_millis(200)).await;
    marks.lock().unwrap_or_else(|p| p.into_inner()).clear();

    let mut tasks: Vec<_> =
        watchers.into_iter().map(|ws| tokio::spawn(collect_deltas(ws))).collect();
    raw_send(&mut driver, 10, "turn/send", json!({"session_id": sid, "text": "measure"})).await?;
    tasks.push(tokio::spawn(collect_deltas(driver)));
    let mut received = Vec::new();
    for task in tasks {
        received.push(task.await??);
    }

    let stuck = match &stalled_ws {
        Some(ws) => stuck_bytes(ws.get_ref().local_addr()?.port(), addr.port())
            .map(|(unread, unsent)| (unread, unsent, warm_bytes)),
        None => None,
    };
    let sent = marks.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let mut latencies = Vec::with_capacity(clients * FANOUT_DELTAS);
    let mut missing = 0;
    for client in &received {
        missing += FANOUT_DELTAS.saturating_sub(client.len());
        for (n, at) in client {
            match sent.get(n) {
                Some(t) => latencies.push(at.saturating_duration_since(*t)),
                None => missing += 1,
            }
        }
    }
    drop(stalled_ws);
    server.shutdown().await;
    latencies.sort();
    Ok(FanoutRun { latencies, missing, stuck })
}

async fn fanout() -> anyhow::Result<()> {
    println!();
    println!(
        "## Fan-out latency added by the server, model delta → client ({FANOUT_DELTAS} deltas \
         {FANOUT_DELTA_MS} ms apart, {} build, one process)",
        if cfg!(debug_assertions) { "debug" } else { "release" }
    );
    println!();
    println!("| clients | stalled client | deltas | p50 (µs) | p99 (µs) |");
    println!("|---|---|---|---|---|");
    let mut notes = Vec::new();
    for stalled in [false, true] {
        for clients in FANOUT_CLIENTS {
            let run = fanout_run(clients, stalled).await?;
            let us = |d: Duration| d.as_secs_f64() * 1e6;
            println!(
                "| {clients} | {} | {} | {:.0} | {:.0} |",
                if stalled { "yes" } else { "no" },
                run.latencies.len(),
                us(percentile(&run.latencies, 0.5)),
                us(percentile(&run.latencies, 0.99)),
            );
            if run.missing > 0 {
                notes.push(format!(
                    "{clients} clients, stalled={stalled}: {} deltas not measured",
                    run.missing
                ));
            }
            if let Some((unread, unsent, warm)) = run.stuck {
                notes.push(format!(
                    "{clients} clients + stalled: of the {} KiB of warm-up frames sent to the \
                     stalled client, {} KiB sat unread in its socket and {} KiB unsent in the \
                     server's after the measured turn; the rest was still inside the server \
                     (writer, 512-frame outbound queue, broadcast)",
                    warm / 1024,
                    unread / 1024,
                    unsent / 1024
                ));
            }
        }
    }
    println!();
    println!(
        "Latency = a client's WebSocket read of the `assistant_delta` frame − the moment a \
         timestamping proxy between server and mock LLM wrote the SSE chunk holding that delta to \
         the server; p50/p99 over every (client, delta) pair (`deltas` = samples). Clients and \
         server share one tokio runtime on {} cores.",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for note in notes {
        println!("- {note}");
    }
    Ok(())
}

/// The TUI's costs: frame render time, attach, the first coloured code block, idle CPU, and the
/// server's fan-out latency to attached clients (a table; asserts nothing).
#[derive(clap::Parser)]
struct Args {
    /// Prints the frame rows only and stops.
    #[arg(long)]
    frames: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = outboard_tests::bench::args::<Args>(|_| Ok(()));
    println!("tui");
    println!("{:<58} {:>10} {:>10}", "", "p50", "p99");
    // Before any frame: the first coloured block pays for loading the grammars.
    let t = Instant::now();
    let first = outboard_tui::highlight::highlight_block(
        "fn main() { let s = \"x\"; }",
        "rust",
        &Theme { color: true },
    );
    let load = t.elapsed();
    anyhow::ensure!(first.len() == 1, "one line highlighted");
    println!(
        "{:<58} {:>10}",
        "first code block coloured (loads the grammars)",
        format!("{:.1} ms", load.as_secs_f64() * 1000.0)
    );
    for stream in [Stream::Prose, Stream::Subagent, Stream::Code] {
        let (lines, attach, p50, p99) = frame_bench(stream)?;
        if stream == Stream::Prose {
            println!(
                "{:<58} {:>10}",
                "attach of 1,000 answers with 2,000 lines of Rust",
                format!("{:.1} ms", attach.as_secs_f64() * 1000.0)
            );
        }
        let what = match stream {
            Stream::Subagent => {
                format!("frame, {lines} lines, a subagent streaming ({BENCH_CHILD_CALLS} calls)")
            }
            Stream::Prose => format!("frame, {lines}-line transcript, 120x40, streaming"),
            Stream::Code => format!("frame, {lines} lines, a 1,000-line code block streaming"),
        };
        println!(
            "{:<58} {:>10} {:>10}",
            what,
            format!("{:.3} ms", p50.as_secs_f64() * 1000.0),
            format!("{:.3} ms", p99.as_secs_f64() * 1000.0)
        );
    }
    if args.frames {
        return Ok(());
    }
    match idle_cpu().await {
        Ok(cpu) => {
            println!("{:<58} {:>10}", "idle CPU of a connected TUI (5 s)", format!("{cpu:.2} %"))
        }
        Err(e) => println!("idle CPU: not measured ({e:#}; needs tmux)"),
    }
    fanout().await?;
    Ok(())
}
