//! The crash harness: N concurrent sessions, each a multi-step task with files and commands,
//! while the server is killed with SIGKILL at random moments and restarted on the same data dir,
//! many times. Run short by the test suite (`tests/tests/e2e/crash.rs`) and long by
//! `scripts/crash.sh` (the `crash` binary).
//!
//! The model is the mock LLM in "responder" mode: it answers from the conversation it is sent
//! (which session or subagent, how many tool results so far), so a model call re-issued after a
//! crash gets the right next step whatever order the calls arrive in. Odd sessions hand their
//! commands and edit to a subagent (`Task`), so kills land inside children too.
//!
//! At the end it checks, for every session: the turn completed; the log is well formed (seqs
//! 1..n, every tool call has exactly one result); the files match what the accepted steps did;
//! no command or MCP call ran twice (each appends a unique line to `ran.log`, or the MCP server's
//! own record); every approval asked for was answered; and a watcher that was
//! attached through all the crashes, reconnecting with its last `seq`, holds exactly the same
//! transcript as a client attaching fresh at the end.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use outboard_shared::{EventKind, SessionEvent};
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::harness::{Api, TestServer, WsClient};
use crate::mock_llm::{MockLlm, MockStep, MockToolCall};
use crate::nodes::Cluster;

/// What to run.
#[derive(Debug, Clone)]
pub struct CrashConfig {
    /// Concurrent sessions.
    pub sessions: usize,
    /// SIGKILLs of the server.
    pub kills: usize,
    /// The provider protocol.
    pub api: Api,
    /// Random gap between restarts and the next kill, in ms.
    pub gap_ms: (u64, u64),
    /// Seed of the kill schedule (printed, so a failure can be replayed).
    pub seed: u64,
    /// The org's `live_sandboxes` quota for the run; `None`: the server's default (8), which
    /// more sessions than that respect by waiting in the org's queue.
    pub live_sandboxes: Option<u64>,
    /// Servers: 1 is one server on the suite's store, killed and restarted on its data dir; more
    /// are nodes of one PostgreSQL store, a random one killed each time (its sessions taken over
    /// by the others once its lease lapses) and restarted at a new address.
    pub nodes: usize,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrashReport {
    /// Sessions run.
    pub sessions: usize,
    /// Kills done.
    pub kills: usize,
    /// Tool results with "outcome is unknown" (commands cut by a kill, never re-run).
    pub unknown_outcomes: usize,
    /// Model calls the mock answered (more than the script length: re-issued after kills).
    pub model_calls: usize,
    /// Durable events over all sessions.
    pub events: usize,
    /// Approval requests (a request asked again after a kill counts again).
    pub approvals: usize,
    /// MCP calls the MCP server ran.
    pub mcp_calls: usize,
    /// Compactions recorded.
    pub compactions: usize,
}

/// One scripted step of a crash task.
#[derive(Debug, Clone, Copy)]
enum Step {
    Write,
    /// A command that appends its unique line to `ran.log` (so a command run twice shows).
    BashA,
    Edit,
    BashB,
    Read,
    /// Hand the commands and the edit to a subagent.
    Task,
    /// A command in the background (`run_in_background`) that appends its line.
    Background,
    /// A command the org's policy asks a person about ([`APPROVAL_RULE`]).
    Approved,
    /// An MCP call that records itself ([`MCP_SERVER`]'s `append`).
    Mcp,
    /// `curl` through the proxy to the upstream that records it ([`hit_recorder`]).
    Proxy,
    Done,
    ChildDone,
}

/// What a session's task exercises while the server is killed: session `k` is
/// `KINDS[k % KINDS.len()]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Its own commands and edit.
    Plain,
    /// A subagent's commands and edit.
    Subagent,
    /// A background command beside its own.
    Background,
    /// A command waiting for approval.
    Approval,
    /// An MCP call.
    Mcp,
    /// A long turn that compacts (see [`compacting_step`]).
    Compaction,
    /// A request through the session's network proxy.
    Proxy,
}

const KINDS: [Kind; 7] = [
    Kind::Plain,
    Kind::Subagent,
    Kind::Background,
    Kind::Approval,
    Kind::Mcp,
    Kind::Compaction,
    Kind::Proxy,
];

/// The context window of a [`Kind::Compaction`] session: a few thousand tokens above the
/// harness's own prompt and tools, so the turn compacts every dozen steps or so.
const SMALL_WINDOW: u64 = 16_000;
/// The steps of a [`Kind::Compaction`] session's turn before its answer.
const COMPACTING_STEPS: usize = 30;
/// Every this many steps, a compacting turn runs a command (which appends its line).
const COMPACTING_COMMAND_EVERY: usize = 8;

fn kind(k: usize) -> Kind {
    KINDS[k % KINDS.len()]
}

/// The org policy rule that makes [`Step::Approved`]'s command ask (and no other).
const APPROVAL_RULE: &str = "Bash(echo approved*)";
/// The org's MCP server's name: its tools are `mcp__crash__*`.
const MCP_SERVER: &str = "crash";

/// Each kind's steps, and a subagent's (which reads the file before it edits it: its ledger is
/// its own). The step is the number of tool results the conversation holds so far; past the
/// end, the last step again.
fn script(conversation: &Conversation) -> &'static [Step] {
    use Step::*;
    match conversation {
        Conversation::Main(k) => match kind(*k) {
            Kind::Plain => &[Write, BashA, Edit, BashB, Read, Done],
            Kind::Subagent => &[Write, Task, Read, Done],
            Kind::Background => &[Write, Background, BashA, Edit, BashB, Read, Done],
            Kind::Approval => &[Write, BashA, Approved, Edit, Read, Done],
            Kind::Mcp => &[Write, Mcp, Edit, BashB, Read, Done],
            // Answered by `compacting_step`, from the call ids.
            Kind::Compaction => &[],
            Kind::Proxy => &[Write, Proxy, Edit, BashB, Read, Done],
        },
        Conversation::Child(_) => &[Read, BashA, Edit, BashB, ChildDone],
    }
}

/// Step `step` of session `k`'s task (or its subagent's); `record` is the MCP server's record,
/// `upstream` the address of [`hit_recorder`].
fn step_for(k: usize, step: Step, record: &str, upstream: SocketAddr) -> MockStep {
    let file = format!("k{k}.txt");
    let s = match step {
        Step::Write => {
            MockStep::tool_call("Write", json!({"file_path": file, "content": format!("v1 {k}\n")}))
        }
        Step::BashA => MockStep::tool_call(
            "Bash",
            json!({"command": format!("echo {k}-a >> ran.log; sleep 0.2; echo {k}-a done")}),
        ),
        Step::Edit => MockStep::tool_call(
            "Edit",
            json!({"file_path": file, "old_string": format!("v1 {k}"), "new_string": format!("v2 {k}")}),
        ),
        Step::BashB => MockStep::tool_call(
            "Bash",
            json!({"command": format!("echo {k}-b >> ran.log; sleep 0.2; cat {file}")}),
        ),
        Step::Read => MockStep::tool_call("Read", json!({"file_path": file})),
        Step::Task => MockStep::tool_call(
            "Task",
            json!({"description": "run the steps",
                   "prompt": format!("crash child {k}: run the steps"),
                   "subagent_type": "general-purpose"}),
        ),
        Step::Background => MockStep::tool_call(
            "Bash",
            json!({"command": format!("echo {k}-bg >> ran.log; sleep 0.5; echo {k}-bg done"),
                   "run_in_background": true}),
        ),
        Step::Approved => MockStep::tool_call(
            "Bash",
            json!({"command": format!("echo approved-{k} >> ran.log; echo asked {k}")}),
        ),
        Step::Mcp => MockStep::tool_call(
            &format!("mcp__{MCP_SERVER}__append"),
            json!({"path": record, "line": format!("{k}-m")}),
        ),
        // The sandbox's own 127.0.0.1 is in NO_PROXY: the request must take the proxy.
        Step::Proxy => MockStep::tool_call(
            "Bash",
            json!({"command": format!("unset NO_PROXY no_proxy; curl -sSf http://{upstream}/hit/{k}-p")}),
        ),
        Step::Done => MockStep::text(&format!("done {k}")),
        Step::ChildDone => MockStep::text(&format!("child done {k}")),
    };
    // Slow enough streams that kills land mid-stream too.
    s.chunk_delay(15)
}

/// The call id of step `n` of compacting session `k`.
fn compacting_id(k: usize, n: usize) -> String {
    format!("crash{k}-step-{n}")
}

/// The newest compacting step a request carries, `(k, n)` from its call id (a compaction keeps
/// the newest step in its tail); `None` before the first.
fn newest_compacting_step(body: &Value) -> Option<(usize, usize)> {
    let steps = crate::long_turn::call_ids(body);
    steps.iter().rev().find_map(|id| {
        let (k, n) = id.strip_prefix("crash")?.split_once("-step-")?;
        Some((k.parse().ok()?, n.parse().ok()?))
    })
}

/// The answer to a compacting session's request: a summary to a summary request; otherwise the
/// step after the newest one it carries. Step 0 writes ten 3 KiB files, then `Read`s of them,
/// every [`COMPACTING_COMMAND_EVERY`]th step a `Bash` that appends its line (and makes the files
/// a cut step 0 did not), and after [`COMPACTING_STEPS`] the answer.
fn compacting_step(k: usize, body: &Value) -> MockStep {
    if crate::long_turn::is_summary(body) {
        return MockStep::text(&format!("Summary: crash task {k}, files f0..f9 read in turn."));
    }
    let n = newest_compacting_step(body).map_or(0, |(_, n)| n + 1);
    if n > COMPACTING_STEPS {
        return MockStep::text(&format!("done {k}"));
    }
    // The ten files, made by step 0 and again by each command where missing: a kill that cuts
    // step 0 must not leave the turn reading nothing (and compacting never).
    let make = "for i in 0 1 2 3 4 5 6 7 8 9; do [ -s f$i.txt ] || head -c 2300 /dev/urandom | base64 > f$i.txt; done";
    let call = if n == 0 {
        MockToolCall::new("Bash", json!({"command": format!("{make}; echo made")}))
    } else if n.is_multiple_of(COMPACTING_COMMAND_EVERY) {
        MockToolCall::new(
            "Bash",
            json!({"command": format!("{make}; echo {k}-c{n} >> ran.log; sleep 0.2; cat f{}.txt", n % 10)}),
        )
    } else {
        MockToolCall::new("Read", json!({"file_path": format!("f{}.txt", n % 10)}))
    };
    MockStep::tool_calls(vec![call.with_id(&compacting_id(k, n))])
}

/// The text of a request's first user message (both dialects: OpenAI's first message is the
/// system prompt).
fn first_user_text(body: &Value) -> String {
    let messages = body.get("messages").and_then(Value::as_array);
    let first = messages.and_then(|m| m.iter().find(|m| m["role"] == "user"));
    match first.map(|m| &m["content"]) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => {
            blocks.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("")
        }
        _ => String::new(),
    }
}

/// What a request is for: a session's main loop or its subagent.
enum Conversation {
    Main(usize),
    Child(usize),
}

/// Which conversation a request is for, and how many tool results it carries.
fn parse_request(body: &Value) -> Option<(Conversation, usize)> {
    let first = first_user_text(body);
    let number = |text: &str, mark: &str| -> Option<usize> {
        text.split(mark).nth(1)?.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    };
    let conversation = match number(&first, "crash child ") {
        Some(k) => Conversation::Child(k),
        None => Conversation::Main(number(&first, "crash task ")?),
    };
    let messages = body.get("messages")?.as_array()?;
    let mut results = 0;
    for m in messages {
        if m.get("role").and_then(Value::as_str) == Some("tool") {
            results += 1;
        }
        if let Some(blocks) = m.get("content").and_then(Value::as_array) {
            results += blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
                .count();
        }
    }
    Some((conversation, results))
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: plenty for a kill schedule.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next() % (hi - lo).max(1)
    }
}

/// The seed of a run: `CRASH_SEED` (to replay a run's kill schedule), else one from the clock.
/// A test prints it with its failure.
pub fn seed() -> u64 {
    if let Some(seed) = std::env::var("CRASH_SEED").ok().and_then(|s| s.trim().parse().ok()) {
        return seed;
    }
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    now.map_or(1, |d| d.as_nanos() as u64)
}

/// Runs the harness and checks everything; an error says what broke.
pub async fn run(config: CrashConfig) -> anyhow::Result<CrashReport> {
    let calls = Arc::new(Mutex::new(0usize));
    let counter = calls.clone();
    // The MCP server's record of the calls it ran: outside the server's data dir, which a kill
    // does not touch either.
    let scratch = tempfile::tempdir()?;
    let record = scratch.path().join("mcp-calls.log");
    let record_path = record.display().to_string();
    let hits = scratch.path().join("proxy-hits.log");
    let upstream = hit_recorder(hits.clone()).await?;
    let mock = MockLlm::start_responder(move |body| {
        if let Ok(mut n) = counter.lock() {
            *n += 1;
        }
        if let Some((k, _)) = newest_compacting_step(body) {
            return Some(compacting_step(k, body));
        }
        parse_request(body).and_then(|(conversation, step)| {
            if let Conversation::Main(k) = conversation {
                if kind(k) == Kind::Compaction {
                    return Some(compacting_step(k, body));
                }
            }
            let steps = script(&conversation);
            let (Conversation::Main(k) | Conversation::Child(k)) = conversation;
            steps.get(step).or(steps.last()).map(|s| step_for(k, *s, &record_path, upstream))
        })
    })
    .await?;
    let base = match config.api {
        Api::Anthropic => mock.anthropic_base_url(),
        Api::OpenAi | Api::Responses => mock.openai_base_url(),
    };
    let mut fleet = Fleet::start(&config, &base)?;
    let server = fleet.any();
    let token = server.add_user("alice", "acme")?;
    org_setup(server, upstream)?;
    if let Some(quota) = config.live_sandboxes {
        let (code, out, err) = server.admin(
            &["quota", "set", "--org", "acme", "live_sandboxes", &quota.to_string()],
            None,
        )?;
        anyhow::ensure!(code == 0, "quota set live_sandboxes {quota}: {out}{err}");
    }

    // Start every session's turn (on the nodes in turn), and a watcher per session that
    // survives the crashes.
    let mut sids = Vec::new();
    let mut watchers = Vec::new();
    let mut approvers = Vec::new();
    for k in 0..config.sessions {
        let mut c = WsClient::connect(&fleet.url(k), &token).await?;
        let params = match kind(k) {
            Kind::Compaction => json!({"context_window": SMALL_WINDOW}),
            _ => json!({}),
        };
        let created = c.request("session/create", params).await?.map_err(anyhow::Error::msg)?;
        let sid = created["session"]["id"].as_str().context("no session id")?.to_owned();
        c.request("turn/send", json!({"session_id": sid, "text": format!("crash task {k}")}))
            .await?
            .map_err(anyhow::Error::msg)?;
        // After the send: the approver takes driving from the connection that created the
        // session.
        let urls = Urls { rx: fleet.urls.subscribe(), turn: k };
        watchers.push(tokio::spawn(watch_through_crashes(
            urls.clone(),
            token.clone(),
            sid.clone(),
        )));
        if kind(k) == Kind::Approval {
            approvers.push(tokio::spawn(approve_through_crashes(urls, token.clone(), sid.clone())));
        }
        sids.push(sid);
    }

    let mut rng = Rng(config.seed | 1);
    for _ in 0..config.kills {
        tokio::time::sleep(Duration::from_millis(rng.range(config.gap_ms.0, config.gap_ms.1)))
            .await;
        fleet.kill_one(&mut rng).await?;
    }

    // Let every session finish.
    let deadline = Instant::now() + Duration::from_secs(60 + 10 * config.sessions as u64);
    let mut c = fleet.connect_any(&token).await?;
    loop {
        let list = c.request("session/list", json!({})).await?.map_err(anyhow::Error::msg)?;
        let busy = list["sessions"]
            .as_array()
            .map_or(0, |s| s.iter().filter(|s| s["status"] != "idle").count());
        if busy == 0 {
            break;
        }
        if Instant::now() > deadline {
            let stuck = stuck_sessions(&mut c, &list).await;
            bail!("{busy} sessions still not idle:\n{stuck}\nserver logs:\n{}", fleet.logs());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut report = CrashReport {
        sessions: config.sessions,
        kills: config.kills,
        unknown_outcomes: 0,
        model_calls: 0,
        events: 0,
        approvals: 0,
        mcp_calls: 0,
        compactions: 0,
    };
    for (k, sid) in sids.iter().enumerate() {
        let snap = c
            .request("session/attach", json!({"session_id": sid, "role": "watcher"}))
            .await?
            .map_err(anyhow::Error::msg)?;
        let snap: outboard_shared::SessionAttachResponse = serde_json::from_value(snap)?;
        let log = snap.events;
        report.events += log.len();
        report.approvals +=
            log.iter().filter(|e| matches!(e.kind, EventKind::ApprovalRequested { .. })).count();
        report.compactions +=
            log.iter().filter(|e| matches!(e.kind, EventKind::Compaction { .. })).count();
        report.unknown_outcomes += check_session(k, &log, &fleet.workspace(sid), &record, &hits)
            .with_context(|| format!("session {k} ({sid})"))?;
        let watched = tokio::time::timeout(Duration::from_secs(30), watchers.remove(0))
            .await
            .context("a watcher did not finish")??
            .with_context(|| format!("the watcher of session {k}"))?;
        // The watcher stops at the turn's end; the sandbox may stop for idleness after it.
        let through_turn = &log[..watched.len().min(log.len())];
        if watched != through_turn {
            bail!(
                "session {k}: the watcher that lived through the crashes saw {} events, a fresh \
                 attach {}; first difference at index {:?}",
                watched.len(),
                log.len(),
                watched.iter().zip(&log).position(|(a, b)| a != b)
            );
        }
    }
    for approver in approvers {
        tokio::time::timeout(Duration::from_secs(30), approver)
            .await
            .context("an approver did not finish")??
            .context("an approver")?;
    }
    report.model_calls = calls.lock().map(|n| *n).unwrap_or(0);
    report.mcp_calls = std::fs::read_to_string(&record).unwrap_or_default().lines().count();
    Ok(report)
}

/// The servers the harness kills (see [`CrashConfig::nodes`]), and their addresses as they are
/// now for the clients that follow the sessions through the kills.
struct Fleet {
    /// The nodes' shared store and workspaces; `None` for one server.
    cluster: Option<Cluster>,
    nodes: Vec<TestServer>,
    api: Api,
    base: String,
    urls: watch::Sender<Vec<String>>,
}

impl Fleet {
    fn start(config: &CrashConfig, base: &str) -> anyhow::Result<Fleet> {
        let (cluster, nodes) = if config.nodes > 1 {
            // One-second leases: a killed node's sessions are taken over within seconds.
            let cluster = Cluster::new(config.api, base, 1)?;
            let nodes = (0..config.nodes).map(|_| cluster.start()).collect::<Result<_, _>>()?;
            (Some(cluster), nodes)
        } else {
            (None, vec![TestServer::start(config.api, base)?])
        };
        let (urls, _) = watch::channel(Vec::new());
        let fleet = Fleet { cluster, nodes, api: config.api, base: base.to_owned(), urls };
        fleet.publish();
        Ok(fleet)
    }

    fn publish(&self) {
        self.urls.send_replace(self.nodes.iter().map(|n| n.url.clone()).collect());
    }

    fn any(&self) -> &TestServer {
        &self.nodes[0]
    }

    /// The address of node `k` modulo their number (sessions are spread over them).
    fn url(&self, k: usize) -> String {
        self.nodes[k % self.nodes.len()].url.clone()
    }

    /// SIGKILLs a random node and starts it again on its data dir (several nodes: after a pause
    /// of up to half a second, so the others may start taking its sessions over).
    async fn kill_one(&mut self, rng: &mut Rng) -> anyhow::Result<()> {
        let victim = rng.range(0, self.nodes.len() as u64) as usize;
        let data = self.nodes.remove(victim).kill().context("the data dir")?;
        let node = match &self.cluster {
            Some(cluster) => {
                tokio::time::sleep(Duration::from_millis(rng.range(0, 500))).await;
                cluster.start_in(data)?
            }
            None => TestServer::start_in(data, self.api, &self.base, &[])?,
        };
        self.nodes.insert(victim, node);
        self.publish();
        Ok(())
    }

    /// A connection to the first node that takes one.
    async fn connect_any(&self, token: &str) -> anyhow::Result<WsClient> {
        let mut last = None;
        for node in &self.nodes {
            match WsClient::connect(&node.url, token).await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.context("no node")?)
    }

    fn workspace(&self, sid: &str) -> PathBuf {
        match &self.cluster {
            Some(cluster) => cluster.workspace(sid),
            None => self.any().workspace(sid),
        }
    }

    /// Every server's log, for a failure.
    fn logs(&self) -> String {
        let logs = self.nodes.iter().enumerate().map(|(i, n)| format!("-- node {i}:\n{}", n.log()));
        logs.collect()
    }
}

/// Where a client that follows a session through the kills connects: the servers' current
/// addresses, and which of them to try next (the next one after each failure).
#[derive(Clone)]
struct Urls {
    rx: watch::Receiver<Vec<String>>,
    turn: usize,
}

impl Urls {
    /// The address to try now.
    fn current(&mut self) -> String {
        let urls = self.rx.borrow_and_update();
        urls[self.turn % urls.len()].clone()
    }

    /// After a failure: the next server, once the addresses change or after a short pause.
    async fn next(&mut self) {
        self.turn += 1;
        let _ = tokio::time::timeout(Duration::from_millis(200), self.rx.changed()).await;
    }
}

/// For a failure: each session of `list` that is not idle, with the kinds of its last events
/// and of its standing ones (an open approval shows there).
async fn stuck_sessions(c: &mut WsClient, list: &Value) -> String {
    let mut out = String::new();
    let busy = list["sessions"].as_array().into_iter().flatten().filter(|s| s["status"] != "idle");
    for session in busy {
        let sid = session["id"].as_str().unwrap_or_default();
        let params = json!({"session_id": sid, "role": "watcher"});
        let snap = match c.request("session/attach", params).await {
            Ok(Ok(v)) => serde_json::from_value::<outboard_shared::SessionAttachResponse>(v),
            other => {
                out.push_str(&format!("{sid}: attach failed: {other:?}\n"));
                continue;
            }
        };
        let Ok(snap) = snap else { continue };
        let names = |events: &[SessionEvent]| -> Vec<&'static str> {
            events.iter().map(|e| e.kind.type_name()).collect()
        };
        let tail = &snap.events[snap.events.len().saturating_sub(8)..];
        out.push_str(&format!(
            "{sid} ({}): last events {:?}, standing {:?}\n",
            session["title"],
            names(tail),
            names(&snap.standing)
        ));
        // The questions asked and answered, and the calls, to see which is open.
        for e in &snap.events {
            match &e.kind {
                EventKind::ApprovalRequested { call_id, .. }
                | EventKind::ApprovalResolved { call_id, .. }
                | EventKind::ToolResult { call_id, .. } => out.push_str(&format!(
                    "  {} {} {call_id} parent {:?}\n",
                    e.seq,
                    e.kind.type_name(),
                    e.parent
                )),
                EventKind::TurnStarted { .. }
                | EventKind::TurnCompleted { .. }
                | EventKind::TurnFailed { .. } => {
                    out.push_str(&format!("  {} {}\n", e.seq, e.kind.type_name()))
                }
                _ => {}
            }
        }
    }
    out
}

/// The org's side of the kinds: the rule that makes [`Step::Approved`] ask, the MCP server
/// (stdio, the official Python SDK) that [`Step::Mcp`] calls, and the network policy that lets
/// [`Step::Proxy`] reach `upstream`.
fn org_setup(server: &TestServer, upstream: SocketAddr) -> anyhow::Result<()> {
    let script = format!("{}/mcp/stdio_server.py", env!("CARGO_MANIFEST_DIR"));
    let upstream = upstream.to_string();
    let commands: [&[&str]; 3] = [
        &["policy", "set", "--org", "acme", APPROVAL_RULE, "ask"],
        &["mcp", "add", "--org", "acme", MCP_SERVER, "--command", "python3", &script],
        &["network", "set", "--org", "acme", "registries+", &upstream],
    ];
    for args in commands {
        let (code, out, err) = server.admin(args, None)?;
        if code != 0 {
            bail!("admin {args:?}: {out}{err}");
        }
    }
    Ok(())
}

/// An HTTP upstream on the host's 127.0.0.1, outside every server process (so it outlives the
/// kills): each `GET /hit/TAG` appends TAG to `record`, so a request made twice shows.
async fn hit_recorder(record: PathBuf) -> anyhow::Result<SocketAddr> {
    use axum::extract::Path;
    use axum::routing::get;
    let app = axum::Router::new().route(
        "/hit/{tag}",
        get(move |Path(tag): Path<String>| async move {
            use std::io::Write as _;
            let written = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&record)
                .and_then(|mut f| writeln!(f, "{tag}"));
            match written {
                Ok(()) => (axum::http::StatusCode::OK, format!("hit {tag}\n")),
                Err(e) => (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(addr)
}

/// Checks one session's final log and workspace (and the MCP server's `record`); returns its
/// unknown-outcome count.
fn check_session(
    k: usize,
    log: &[SessionEvent],
    workspace: &std::path::Path,
    record: &std::path::Path,
    hits: &std::path::Path,
) -> anyhow::Result<usize> {
    for (i, e) in log.iter().enumerate() {
        if e.seq != i as u64 + 1 {
            bail!("seq {} at position {i}: a gap or a duplicate", e.seq);
        }
    }
    // After the turn's end, only the sandbox stopping for idleness may follow.
    let after_turn = log.iter().rev().take_while(|e| matches!(e.kind, EventKind::Sandbox { .. }));
    match log.iter().rev().nth(after_turn.count()).map(|e| &e.kind) {
        Some(EventKind::TurnCompleted { .. }) => {}
        other => bail!("the turn did not complete: its last event is {other:?}"),
    }
    let final_text = log.iter().rev().find_map(|e| match &e.kind {
        EventKind::AssistantMessage { text, .. } => Some(text.clone()),
        _ => None,
    });
    if final_text.as_deref() != Some(&format!("done {k}")) {
        bail!("the final answer is {final_text:?}");
    }
    if kind(k) == Kind::Subagent {
        check_subagent(k, log)?;
    }
    if kind(k) == Kind::Approval {
        check_approvals(log)?;
    }
    // Every tool call has exactly one result.
    let mut calls: HashMap<String, usize> = HashMap::new();
    let mut unknown = 0;
    let mut accepted: Vec<String> = Vec::new();
    let mut inputs: HashMap<String, String> = HashMap::new();
    for e in log {
        match &e.kind {
            EventKind::AssistantMessage { tool_calls, .. } => {
                for c in tool_calls {
                    calls.entry(c.call_id.clone()).or_insert(0);
                    inputs.insert(c.call_id.clone(), c.input.to_string());
                }
            }
            EventKind::ToolResult { call_id, name, output, is_error, .. } => {
                *calls.entry(call_id.clone()).or_insert(0) += 1;
                if output.contains("outcome is unknown") {
                    unknown += 1;
                } else if !is_error {
                    accepted.push(inputs.get(call_id).cloned().unwrap_or_default());
                } else if unknown > 0 && after_a_cut(output) {
                    // A call before it was cut by a kill (its outcome is unknown and it is not
                    // run again): the file it made may be missing, or must be read again.
                } else {
                    bail!("an unexpected error result for {name}: {output}");
                }
            }
            _ => {}
        }
    }
    if let Some((id, n)) = calls.iter().find(|(_, n)| **n != 1) {
        bail!("tool call {id} has {n} results");
    }
    // Files: the edit landed exactly once; a compacting turn compacted (unless a kill cut the
    // command that makes its files: reads of nothing fill no window).
    if kind(k) == Kind::Compaction {
        let compacted = log.iter().any(|e| matches!(e.kind, EventKind::Compaction { .. }));
        if !compacted && unknown == 0 {
            bail!("the long turn in a {SMALL_WINDOW}-token window never compacted");
        }
    } else {
        let file = std::fs::read_to_string(workspace.join(format!("k{k}.txt"))).unwrap_or_default();
        // A cut `Write` leaves the `Edit` refused (the file must be read first): then the
        // file holds the first version or nothing, never a second edit.
        let edited = file == format!("v2 {k}\n");
        let cut = unknown > 0 && (file.is_empty() || file == format!("v1 {k}\n"));
        if !edited && !cut {
            bail!("k{k}.txt holds {file:?}");
        }
    }
    // Commands, MCP calls, proxied requests: each line at most once; exactly once when its result was recorded
    // (a background command's start says nothing of its line: a kill may stop it first).
    let ran = std::fs::read_to_string(workspace.join("ran.log")).unwrap_or_default();
    let mcp = std::fs::read_to_string(record).unwrap_or_default();
    let proxied = std::fs::read_to_string(hits).unwrap_or_default();
    let lines: Vec<(String, &str, bool)> = match kind(k) {
        Kind::Plain | Kind::Subagent => {
            vec![(format!("{k}-a"), &ran, true), (format!("{k}-b"), &ran, true)]
        }
        Kind::Background => vec![
            (format!("{k}-bg"), &ran, false),
            (format!("{k}-a"), &ran, true),
            (format!("{k}-b"), &ran, true),
        ],
        Kind::Approval => {
            vec![(format!("{k}-a"), &ran, true), (format!("approved-{k}"), &ran, true)]
        }
        Kind::Mcp => vec![(format!("{k}-m"), &mcp, true), (format!("{k}-b"), &ran, true)],
        Kind::Proxy => vec![(format!("{k}-p"), &proxied, true), (format!("{k}-b"), &ran, true)],
        Kind::Compaction => (COMPACTING_COMMAND_EVERY..=COMPACTING_STEPS)
            .step_by(COMPACTING_COMMAND_EVERY)
            .map(|n| (format!("{k}-c{n}"), ran.as_str(), true))
            .collect(),
    };
    for (line, written, counts) in lines {
        let n = written.lines().filter(|l| *l == line).count();
        if n > 1 {
            bail!("{line} ran {n} times");
        }
        let quoted = format!("{line}\"");
        let recorded = accepted.iter().any(|input| {
            input.contains(&format!("echo {line} "))
                || input.contains(&format!("\"{quoted}"))
                || input.contains(&format!("/hit/{quoted}"))
        });
        if counts && recorded && n != 1 {
            bail!("{line} succeeded but ran {n} times");
        }
    }
    Ok(unknown)
}

/// Whether a tool's error is what a call cut before it explains: its file missing, or not
/// read since (a `Write` whose outcome is unknown leaves the read ledger without its file).
fn after_a_cut(output: &str) -> bool {
    output.starts_with("File does not exist")
        || output.starts_with("File has not been read yet")
        || output.contains("No such file or directory")
}

/// A subagent session: its subagent reported, once, and its events name their Task call.
fn check_subagent(k: usize, log: &[SessionEvent]) -> anyhow::Result<()> {
    let task = log.iter().find_map(|e| match &e.kind {
        EventKind::ToolResult { name, output, call_id, .. } if name == "Task" => {
            Some((output.clone(), call_id.clone()))
        }
        _ => None,
    });
    let Some((report, task_id)) = task else { bail!("no Task result") };
    if report != format!("child done {k}") {
        bail!("the subagent's report is {report:?}");
    }
    let nested = log.iter().filter(|e| e.parent.as_deref() == Some(task_id.as_str())).count();
    if nested == 0 {
        bail!("no event names the Task call {task_id}");
    }
    Ok(())
}

/// An approval session: the command asked, and no request was lost: each call asked about was
/// answered `allow` (by the approver) before its result.
fn check_approvals(log: &[SessionEvent]) -> anyhow::Result<()> {
    let mut open: Vec<String> = Vec::new();
    let mut asked = 0;
    for e in log {
        match &e.kind {
            EventKind::ApprovalRequested { call_id, .. } => {
                asked += 1;
                open.push(call_id.clone());
            }
            EventKind::ApprovalResolved { call_id, decision, .. } => {
                if *decision != outboard_shared::ApprovalDecision::Allow {
                    bail!("the approval of {call_id} was answered {decision:?}");
                }
                open.retain(|c| c != call_id);
            }
            EventKind::ToolResult { call_id, output, .. }
                if open.contains(call_id) && !output.contains("outcome is unknown") =>
            {
                bail!("{call_id} has a result while its approval is open: {output}");
            }
            _ => {}
        }
    }
    if asked == 0 {
        bail!("the approval rule never asked");
    }
    Ok(())
}

/// A client attached through the whole run: on every disconnect it reconnects to the current
/// server and re-attaches after the last durable `seq` it holds. Returns its durable events once
/// the session's turn completed.
async fn watch_through_crashes(
    mut urls: Urls,
    token: String,
    sid: String,
) -> anyhow::Result<Vec<SessionEvent>> {
    let mut seen: Vec<SessionEvent> = Vec::new();
    let give_up = Instant::now() + Duration::from_secs(600);
    loop {
        if Instant::now() > give_up {
            bail!("the watcher of {sid} gave up");
        }
        let Ok(mut c) = WsClient::connect(&urls.current(), &token).await else {
            urls.next().await;
            continue;
        };
        let after = seen.last().map_or(0, |e| e.seq);
        let snap = match c
            .request(
                "session/attach",
                json!({"session_id": sid, "role": "watcher", "after_seq": after}),
            )
            .await
        {
            Ok(Ok(v)) => v,
            // Refused while the session changes nodes, or the node went away.
            _ => {
                urls.next().await;
                continue;
            }
        };
        let snap: outboard_shared::SessionAttachResponse = serde_json::from_value(snap)?;
        seen.extend(snap.events);
        if finished(&seen) {
            return Ok(seen);
        }
        loop {
            match c.event().await {
                Ok(e) if e.kind.is_durable() => {
                    if e.seq == seen.last().map_or(0, |l| l.seq) + 1 {
                        seen.push(e);
                        if finished(&seen) {
                            return Ok(seen);
                        }
                    } else if e.seq > seen.last().map_or(0, |l| l.seq) {
                        bail!(
                            "the watcher of {sid} saw a gap: seq {} after {:?}",
                            e.seq,
                            seen.last().map(|l| l.seq)
                        );
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    }
}

/// The person who answers a session's approval requests, through the crashes: on every
/// (re)connect it attaches as the driver (retrying while another connection drives), answers
/// `allow` to the requests the snapshot shows open (its `standing` ones, older than its page, and
/// those in its page), then to each one that arrives, until the turn completed.
async fn approve_through_crashes(mut urls: Urls, token: String, sid: String) -> anyhow::Result<()> {
    let give_up = Instant::now() + Duration::from_secs(600);
    loop {
        if Instant::now() > give_up {
            bail!("the approver of {sid} gave up");
        }
        let Ok(mut c) = WsClient::connect(&urls.current(), &token).await else {
            urls.next().await;
            continue;
        };
        let params = json!({"session_id": sid, "role": "driver"});
        let snap = match c.request("session/attach", params).await {
            Ok(Ok(v)) => v,
            _ => {
                urls.next().await;
                continue;
            }
        };
        let snap: outboard_shared::SessionAttachResponse = serde_json::from_value(snap)?;
        if finished(&snap.events) {
            return Ok(());
        }
        if snap.role != outboard_shared::Role::Driver {
            // Another connection drives: only a driver answers.
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        // Open requests older than the snapshot's page are in `standing`; those in the page
        // are among its events.
        let known: Vec<SessionEvent> = snap.standing.iter().chain(&snap.events).cloned().collect();
        for e in outboard_server::approvals::open_requests(&known) {
            if let EventKind::ApprovalRequested { call_id, .. } = &e.kind {
                allow(&mut c, &sid, call_id).await;
            }
        }
        while let Ok(e) = c.event().await {
            match &e.kind {
                EventKind::ApprovalRequested { call_id, .. } => allow(&mut c, &sid, call_id).await,
                EventKind::TurnCompleted { .. } => return Ok(()),
                _ => {}
            }
        }
    }
}

/// Answers `allow` to `call_id`; a refusal (answered already, the server going away) is fine:
/// the next attach shows what is still open.
async fn allow(c: &mut WsClient, sid: &str, call_id: &str) {
    let params = json!({"session_id": sid, "call_id": call_id, "decision": "allow"});
    match c.request("approval/answer", params).await {
        Ok(Ok(_)) => {}
        // Printed, so a run that loses an approval shows what its answers met.
        refused => eprintln!("crash harness: allow {call_id} of {sid}: {refused:?}"),
    }
}

fn finished(log: &[SessionEvent]) -> bool {
    log.iter()
        .rev()
        .find(|e| {
            matches!(
                e.kind,
                EventKind::TurnStarted { .. }
                    | EventKind::TurnCompleted { .. }
                    | EventKind::TurnFailed { .. }
            )
        })
        .is_some_and(|e| matches!(e.kind, EventKind::TurnCompleted { .. }))
}
