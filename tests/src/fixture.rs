//! The end-to-end suites' shared setup, on top of [`crate::harness`]: a real server on loopback
//! talking to the mock model, its users, a client driving a session ([`World`]), scripted turns
//! and waits with a deadline, the views of a turn's events the suites assert on, a server killed
//! and brought back at its address, and session logs crafted in the store before a server starts
//! on them ([`craft_log`]); and, without a server, a real sandbox whose network goes through the
//! proxy, with the proxy's audit recorded ([`net_sandbox`]).
//!
//! Everything here fails the test (panics) on an error: it is setup, not what a test checks.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test setup: a failure fails the test

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboard_server::netproxy::ca::OrgCa;
use outboard_server::netproxy::{Audit, AuditEntry, Decide, NetLimits, SessionNet};
use outboard_server::sandbox::{ExecResult, Sandbox, SandboxConfig};
use outboard_shared::{EventKind, SessionAttachResponse, SessionEvent, ToolCall, TurnId, Usage};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use crate::harness::{bin, open_store, outboard, Api, CliRun, TestServer, WsClient};
use crate::mock_llm::{MockLlm, MockStep, MockToolCall};

/// The user the suites' servers start with, and their org.
pub const USER: &str = "alice";
/// [`USER`]'s org.
pub const ORG: &str = "acme";

/// The base URL of `mock` for a server speaking `api`.
pub fn base_url(mock: &MockLlm, api: Api) -> String {
    match api {
        Api::Anthropic => mock.anthropic_base_url(),
        Api::OpenAi => mock.openai_base_url(),
        Api::Responses => mock.responses_base_url(),
    }
}

/// A server speaking `api` to `mock`, on a fresh data dir, with `extra` flags.
pub fn serve(mock: &MockLlm, api: Api, extra: &[&str]) -> TestServer {
    let data = tempfile::tempdir().unwrap();
    TestServer::start_in(data, api, &base_url(mock, api), extra).unwrap()
}

/// Kills `server` (SIGKILL), runs `meanwhile` (a check of what the kill left), and starts the
/// server again on its data dir at its address, speaking `api` to `mock` with `extra` flags: a
/// crash and the restart a deployment does.
pub fn crash_and_restart(
    server: TestServer,
    mock: &MockLlm,
    api: Api,
    extra: &[&str],
    meanwhile: impl FnOnce(),
) -> TestServer {
    let url = server.url.clone();
    let data = server.kill().unwrap();
    meanwhile();
    TestServer::restart_at(&url, data, api, &base_url(mock, api), extra).unwrap()
}

/// Adds [`USER`] of [`ORG`] to `server`; returns their token, their client and the id of a new
/// session it drives.
pub async fn driver(server: &TestServer) -> (String, WsClient, String) {
    let token = server.add_user(USER, ORG).unwrap();
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();
    (token, c, sid)
}

/// A server on the mock model with [`USER`]'s client driving a new session.
pub struct World {
    /// The model.
    pub mock: MockLlm,
    /// The server.
    pub server: TestServer,
    /// [`USER`]'s client, attached to `sid` as its driver.
    pub c: WsClient,
    /// The session.
    pub sid: String,
    /// [`USER`]'s token.
    pub token: String,
}

impl World {
    /// `mock` behind a server speaking `api` with `extra` flags ([`serve`]), and [`driver`].
    pub async fn start(mock: MockLlm, api: Api, extra: &[&str]) -> World {
        let server = serve(&mock, api, extra);
        let (token, c, sid) = driver(&server).await;
        World { mock, server, c, sid, token }
    }

    /// [`World::start`] on the Anthropic API with the scripted `steps`.
    pub async fn anthropic(steps: Vec<MockStep>, extra: &[&str]) -> World {
        World::start(MockLlm::start(steps).await.unwrap(), Api::Anthropic, extra).await
    }
}

/// A server of the scripted model ([`crate::scripted`]: each turn's text is its script) with
/// `extra` flags; its users are the test's to add.
pub struct Org {
    /// The model.
    pub mock: MockLlm,
    /// The server.
    pub server: TestServer,
}

impl Org {
    /// Starts the model and the server (Anthropic API).
    pub async fn start(extra: &[&str]) -> Org {
        let mock = crate::scripted::start().await.unwrap();
        let server = serve(&mock, Api::Anthropic, extra);
        Org { mock, server }
    }
}

/// Runs `outboard ARGS --server URL --token TOKEN` against `server`, with `stdin`.
pub fn cli(server: &TestServer, token: &str, args: &[&str], stdin: Option<&str>) -> CliRun {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--server", &server.url, "--token", token]);
    outboard(&all, stdin).unwrap()
}

/// [`cli`], which must exit 0.
pub fn cli_ok(server: &TestServer, token: &str, args: &[&str], stdin: Option<&str>) -> CliRun {
    let r = cli(server, token, args, stdin);
    assert_eq!(r.code, 0, "outboard {args:?}: {}", r.stderr);
    r
}

/// Runs `outboard-server admin ARGS` on `server`'s data dir with `stdin`, which must succeed;
/// returns its stdout.
pub fn admin_ok(server: &TestServer, args: &[&str], stdin: Option<&str>) -> String {
    let (code, out, err) = server.admin(args, stdin).unwrap();
    assert_eq!(code, 0, "admin {args:?}: {err}");
    out
}

/// Whether `e` ends a turn (completed or failed).
pub fn turn_ended(e: &SessionEvent) -> bool {
    matches!(e.kind, EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. })
}

/// Events up to the first that `stop` accepts; fails after `wait`, naming `what`.
pub async fn until(
    c: &mut WsClient,
    what: &str,
    wait: Duration,
    stop: impl FnMut(&SessionEvent) -> bool,
) -> Vec<SessionEvent> {
    tokio::time::timeout(wait, c.events_until(stop))
        .await
        .unwrap_or_else(|_| panic!("timed out after {wait:?} waiting for {what}"))
        .unwrap()
}

/// A turn of `text` ([`WsClient::turn`]: its events up to its end); fails after `wait`.
pub async fn turn_within(
    c: &mut WsClient,
    sid: &str,
    text: &str,
    wait: Duration,
) -> Vec<SessionEvent> {
    tokio::time::timeout(wait, c.turn(sid, text))
        .await
        .unwrap_or_else(|_| panic!("timed out after {wait:?} waiting for the turn {text:?}"))
        .unwrap()
}

/// Sends the scripted model's `steps` ([`crate::scripted::script`]) as a turn of `sid`.
pub async fn send_script(c: &mut WsClient, sid: &str, steps: &[Value]) {
    let text = crate::scripted::script(steps);
    c.request("turn/send", json!({"session_id": sid, "text": text})).await.unwrap().unwrap();
}

/// [`send_script`], then the turn's events up to its end.
pub async fn script_turn(c: &mut WsClient, sid: &str, steps: &[Value]) -> Vec<SessionEvent> {
    send_script(c, sid, steps).await;
    c.events_until(turn_ended).await.unwrap()
}

/// A model step calling `Bash` with `command`, as call `id`.
pub fn bash(id: &str, command: &str) -> MockStep {
    MockStep::tool_calls(vec![MockToolCall::new("Bash", json!({"command": command})).with_id(id)])
}

/// The result event of the call `call_id` among `events`.
pub fn result_event<'a>(events: &'a [SessionEvent], call_id: &str) -> &'a SessionEvent {
    events
        .iter()
        .find(|e| matches!(&e.kind, EventKind::ToolResult { call_id: c, .. } if c == call_id))
        .unwrap_or_else(|| panic!("no result of {call_id} in {events:#?}"))
}

/// The output and error flag of the call `call_id` among `events`.
pub fn result_of(events: &[SessionEvent], call_id: &str) -> (String, bool) {
    match &result_event(events, call_id).kind {
        EventKind::ToolResult { output, is_error, .. } => (output.clone(), *is_error),
        _ => unreachable!("result_event finds tool results"),
    }
}

/// `(tool, is_error, output)` of each tool result among `events`, in order.
pub fn results(events: &[SessionEvent]) -> Vec<(String, bool, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolResult { name, output, is_error, .. } => {
                Some((name.clone(), *is_error, output.clone()))
            }
            _ => None,
        })
        .collect()
}

/// `(output, is_error)` of each result of `tool` among `events`, in order.
pub fn results_of(events: &[SessionEvent], tool: &str) -> Vec<(String, bool)> {
    results(events)
        .into_iter()
        .filter(|(name, _, _)| name == tool)
        .map(|(_, is_error, output)| (output, is_error))
        .collect()
}

/// `(call id, output, is_error)` of each tool result among `events`, in order.
pub fn call_results(events: &[SessionEvent]) -> Vec<(String, String, bool)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolResult { call_id, output, is_error, .. } => {
                Some((call_id.clone(), output.clone(), *is_error))
            }
            _ => None,
        })
        .collect()
}

/// The type of each event of `log` but the `sandbox` ones, in order.
pub fn kinds(log: &[SessionEvent]) -> Vec<&'static str> {
    log.iter().map(|e| e.kind.type_name()).filter(|k| *k != "sandbox").collect()
}

/// The result of `method`, which must succeed.
pub async fn ok(c: &mut WsClient, method: &str, params: Value) -> Value {
    c.request(method, params).await.unwrap().unwrap_or_else(|e| panic!("{method}: {e:?}"))
}

/// A new client of `token` on `server` attached to `sid` as `role`, and the attach's answer.
pub async fn attach(
    server: &TestServer,
    token: &str,
    sid: &str,
    role: &str,
) -> (WsClient, SessionAttachResponse) {
    let mut c = WsClient::connect(&server.url, token).await.unwrap();
    let answer = ok(&mut c, "session/attach", json!({"session_id": sid, "role": role})).await;
    (c, serde_json::from_value(answer).unwrap())
}

/// The session's durable log as a watcher's attach gives it (one page: the suites' logs are far
/// under one).
pub async fn attached_log(server: &TestServer, token: &str, sid: &str) -> Vec<SessionEvent> {
    attach(server, token, sid, "watcher").await.1.events
}

/// The session's durable log once its turn has ended: a watcher attaches and, unless the log
/// already ends with the turn's end, follows the turn (at most `wait`) to its end.
pub async fn settled_log(
    server: &TestServer,
    token: &str,
    sid: &str,
    wait: Duration,
) -> Vec<SessionEvent> {
    let (mut c, snap) = attach(server, token, sid, "watcher").await;
    let mut log = snap.events;
    if !log.last().is_some_and(turn_ended) {
        let live = tokio::time::timeout(wait, c.events_until(turn_ended))
            .await
            .unwrap_or_else(|_| panic!("the resumed turn did not end within {wait:?}"))
            .unwrap();
        log.extend(live.into_iter().filter(|e| e.kind.is_durable()));
    }
    log
}

/// Writes a session log of `events` (numbered from 1) in the store of data dir `data`, for a
/// server to start on, as a crash leaves one: the cut point is exact. The session, on `model`
/// (`provider/model`), belongs to [`USER`] of [`ORG`], created here; returns the session id and
/// their token.
pub async fn craft_log(data: &Path, model: &str, events: Vec<EventKind>) -> (String, String) {
    let store = open_store(data).unwrap();
    let (user, token) = store.add_user(ORG, USER).await.unwrap();
    let session = store.create_session(&user, "crafted", model).await.unwrap();
    for (i, kind) in events.into_iter().enumerate() {
        let event = SessionEvent {
            session_id: session.id.clone(),
            seq: i as u64 + 1,
            ts: "2026-11-29T00:00:00.000Z".into(),
            kind,
            parent: None,
        };
        store.append_event(event).await.unwrap();
    }
    (session.id.0, token)
}

/// A tool call of a crafted log.
pub fn crafted_call(id: &str, name: &str, input: Value) -> ToolCall {
    ToolCall { call_id: id.into(), name: name.into(), input }
}

/// The start of a crafted turn (`t_crafted`, by [`USER`]) and its user message `text`.
pub fn crafted_opening(text: &str) -> Vec<EventKind> {
    vec![
        EventKind::TurnStarted { turn_id: TurnId("t_crafted".into()), by: USER.into() },
        EventKind::UserMessage { text: text.into(), attachments: Vec::new() },
    ]
}

/// A crafted model answer that calls `calls` (no text), with the call's `usage`.
pub fn crafted_answer(calls: &[ToolCall], usage: Option<Usage>) -> EventKind {
    EventKind::AssistantMessage {
        text: String::new(),
        tool_calls: calls.to_vec(),
        usage,
        reasoning: Vec::new(),
        model: None,
        searches: Vec::new(),
    }
}

/// The start of `call` in a crafted log (a file tool's target unrecorded).
pub fn crafted_start(call: &ToolCall) -> EventKind {
    EventKind::ToolCall { call: call.clone(), target_before: None }
}

/// A crafted successful result `output` of `call`.
pub fn crafted_result(call: &ToolCall, output: &str) -> EventKind {
    EventKind::ToolResult {
        call_id: call.call_id.clone(),
        name: call.name.clone(),
        output: output.into(),
        is_error: false,
        duration_ms: 1,
        attachments: Vec::new(),
    }
}

/// `len` bytes of noise that does not compress (xorshift64 from `seed`, its low byte each step):
/// data that stays as large on the wire and on disk as it is.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// How long a network sandbox's command, or the wait for an audit entry, may take.
pub const NET_WAIT: Duration = Duration::from_secs(60);

/// What a command prefixes to reach the tests' upstreams through the proxy: they are on the
/// host's 127.0.0.1, which inside the sandbox is `NO_PROXY` (there it means the sandbox's own
/// loopback), so the variables are unset for them; in production an internal mirror has an
/// address of its own.
pub const VIA_PROXY: &str = "unset NO_PROXY no_proxy; ";

/// The audit entries a sandbox's proxy recorded, in order.
#[derive(Default)]
pub struct AuditLog(Mutex<Vec<AuditEntry>>);

impl Audit for AuditLog {
    fn record(&self, entry: AuditEntry) {
        self.0.lock().unwrap().push(entry);
    }
}

impl AuditLog {
    /// The entries so far.
    pub fn entries(&self) -> Vec<AuditEntry> {
        self.0.lock().unwrap().clone()
    }

    /// Waits (at most [`NET_WAIT`]) until an entry for `host:port` matches `want`, and returns
    /// it; fails naming `what`.
    pub async fn wait_for(
        &self,
        what: &str,
        host: &str,
        port: u16,
        want: impl Fn(&AuditEntry) -> bool,
    ) -> AuditEntry {
        let place = format!("{host}:{port}");
        self.wait_matching(what, &place, |e| e.host == host && e.port == port && want(e)).await
    }

    /// [`AuditLog::wait_for`] an entry for port `port`, whatever the host.
    pub async fn wait_for_port(
        &self,
        what: &str,
        port: u16,
        want: impl Fn(&AuditEntry) -> bool,
    ) -> AuditEntry {
        self.wait_matching(what, &format!("port {port}"), |e| e.port == port && want(e)).await
    }

    async fn wait_matching(
        &self,
        what: &str,
        place: &str,
        matches: impl Fn(&AuditEntry) -> bool,
    ) -> AuditEntry {
        let deadline = std::time::Instant::now() + NET_WAIT;
        loop {
            if let Some(e) = self.entries().into_iter().find(|e| matches(e)) {
                return e;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no audit entry for {what} ({place}) in {:#?}",
                self.entries()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A real sandbox (`bwrap`, the launcher and the agent of the real `outboard-server` binary) over
/// a fresh workspace, its network through the proxy.
pub struct NetSandbox {
    /// The sandbox.
    pub sandbox: Sandbox,
    /// What its proxy recorded.
    pub audit: Arc<AuditLog>,
    /// The org CA its proxy intercepts with, when it has one.
    pub ca: Option<Arc<OrgCa>>,
    /// The workspace's host directory.
    pub ws: PathBuf,
    _ws: tempfile::TempDir,
}

/// A [`NetSandbox`] of session `session` of [`USER`] in org [`ORG`], whose proxy asks `decide`,
/// applies `limits`, intercepts with `ca` and refuses the server's own `server_ports`.
pub fn net_sandbox(
    session: &str,
    decide: Arc<dyn Decide>,
    limits: NetLimits,
    ca: Option<Arc<OrgCa>>,
    server_ports: Vec<u16>,
) -> NetSandbox {
    let ws = tempfile::tempdir().unwrap();
    let audit = Arc::new(AuditLog::default());
    let network = SessionNet {
        org: ORG.into(),
        org_name: ORG.into(),
        session: session.into(),
        user: USER.into(),
        decide,
        audit: audit.clone(),
        limits,
        ca: ca.clone(),
        env: Vec::new(),
    };
    let config = SandboxConfig {
        agent_exe: Some(bin("outboard-server").unwrap()),
        network: Some(network),
        server_ports,
        ..SandboxConfig::Bwrap
    };
    let path = ws.path().to_path_buf();
    NetSandbox { sandbox: Sandbox::new(config, path.clone()), audit, ca, ws: path, _ws: ws }
}

/// Runs `command` in `sandbox` (at most [`NET_WAIT`]).
pub async fn exec(sandbox: &Sandbox, command: &str) -> ExecResult {
    sandbox.exec(command, NET_WAIT, &mut |_, _| {}, CancellationToken::new()).await.unwrap()
}

/// Sends `session/list` on `c` every 100 ms until it fails (at most `within`, else the test
/// fails): a connection whose token was revoked is told why and closed. Returns the failure,
/// after checking that the connection is closed.
pub async fn until_cut(c: &mut WsClient, within: Duration) -> String {
    let deadline = std::time::Instant::now() + within;
    let failure = loop {
        match c.request("session/list", json!({})).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => break format!("{}: {}", e.code.as_str(), e.message),
            Err(e) => break format!("{e:#}"),
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the connection still serves requests {within:?} later"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let after = tokio::time::timeout(Duration::from_secs(5), c.frame()).await;
    assert!(matches!(after, Ok(Err(_))), "the connection stayed open: {after:?}");
    failure
}
