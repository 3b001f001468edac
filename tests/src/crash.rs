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
//! no command ran twice (each command appends a unique line to `ran.log`); and a watcher that was
//! attached through all the crashes, reconnecting with its last `seq`, holds exactly the same
//! transcript as a client attaching fresh at the end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use outboard_shared::{EventKind, SessionEvent};
use serde_json::{json, Value};
use tokio::sync::watch;

use crate::harness::{Api, TestServer, WsClient};
use crate::mock_llm::{MockLlm, MockStep};

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
    Done,
    ChildDone,
}

/// An even session does everything itself; an odd one hands its middle steps to a subagent, so
/// kills land inside children too. The subagent reads the file before it edits it (its ledger
/// is its own). The step is the number of tool results the conversation holds so far; past the
/// end, the last step again.
fn script(conversation: &Conversation) -> &'static [Step] {
    use Step::*;
    match conversation {
        Conversation::Main(k) if k % 2 == 1 => &[Write, Task, Read, Done],
        Conversation::Main(_) => &[Write, BashA, Edit, BashB, Read, Done],
        Conversation::Child(_) => &[Read, BashA, Edit, BashB, ChildDone],
    }
}

/// Step `step` of session `k`'s task (or its subagent's).
fn step_for(k: usize, step: Step) -> MockStep {
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
        Step::Done => MockStep::text(&format!("done {k}")),
        Step::ChildDone => MockStep::text(&format!("child done {k}")),
    };
    // Slow enough streams that kills land mid-stream too.
    s.chunk_delay(15)
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

/// Runs the harness and checks everything; an error says what broke.
pub async fn run(config: CrashConfig) -> anyhow::Result<CrashReport> {
    let calls = Arc::new(Mutex::new(0usize));
    let counter = calls.clone();
    let mock = MockLlm::start_responder(move |body| {
        if let Ok(mut n) = counter.lock() {
            *n += 1;
        }
        parse_request(body).and_then(|(conversation, step)| {
            let steps = script(&conversation);
            let (Conversation::Main(k) | Conversation::Child(k)) = conversation;
            steps.get(step).or(steps.last()).map(|s| step_for(k, *s))
        })
    })
    .await?;
    let base = match config.api {
        Api::Anthropic => mock.anthropic_base_url(),
        Api::OpenAi | Api::Responses => mock.openai_base_url(),
    };
    let mut server = TestServer::start(config.api, &base)?;
    let token = server.add_user("alice", "acme")?;
    if let Some(quota) = config.live_sandboxes {
        let (code, out, err) = server.admin(
            &["quota", "set", "--org", "acme", "live_sandboxes", &quota.to_string()],
            None,
        )?;
        anyhow::ensure!(code == 0, "quota set live_sandboxes {quota}: {out}{err}");
    }

    // Start every session's turn, and a watcher per session that survives the crashes.
    let (url_tx, url_rx) = watch::channel(server.url.clone());
    let mut sids = Vec::new();
    let mut watchers = Vec::new();
    {
        let mut c = WsClient::connect(&server.url, &token).await?;
        for k in 0..config.sessions {
            let created =
                c.request("session/create", json!({})).await?.map_err(anyhow::Error::msg)?;
            let sid = created["session"]["id"].as_str().context("no session id")?.to_owned();
            watchers.push(tokio::spawn(watch_through_crashes(
                url_rx.clone(),
                token.clone(),
                sid.clone(),
            )));
            c.request("turn/send", json!({"session_id": sid, "text": format!("crash task {k}")}))
                .await?
                .map_err(anyhow::Error::msg)?;
            sids.push(sid);
        }
    }

    let mut rng = Rng(config.seed | 1);
    for _ in 0..config.kills {
        tokio::time::sleep(Duration::from_millis(rng.range(config.gap_ms.0, config.gap_ms.1)))
            .await;
        let data = server.kill().context("the data dir")?;
        server = TestServer::start_in(data, config.api, &base, &[])?;
        let _ = url_tx.send(server.url.clone());
    }

    // Let every session finish.
    let deadline = Instant::now() + Duration::from_secs(60 + 10 * config.sessions as u64);
    let mut c = WsClient::connect(&server.url, &token).await?;
    loop {
        let list = c.request("session/list", json!({})).await?.map_err(anyhow::Error::msg)?;
        let busy = list["sessions"]
            .as_array()
            .map_or(0, |s| s.iter().filter(|s| s["status"] != "idle").count());
        if busy == 0 {
            break;
        }
        if Instant::now() > deadline {
            bail!("{busy} sessions still not idle; server log:\n{}", server.log());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let mut report = CrashReport {
        sessions: config.sessions,
        kills: config.kills,
        unknown_outcomes: 0,
        model_calls: 0,
        events: 0,
    };
    for (k, sid) in sids.iter().enumerate() {
        let snap = c
            .request("session/attach", json!({"session_id": sid, "role": "watcher"}))
            .await?
            .map_err(anyhow::Error::msg)?;
        let snap: outboard_shared::SessionAttachResponse = serde_json::from_value(snap)?;
        let log = snap.events;
        report.events += log.len();
        report.unknown_outcomes += check_session(k, &log, &server.workspace(sid))
            .with_context(|| format!("session {k} ({sid})"))?;
        let watched = tokio::time::timeout(Duration::from_secs(30), watchers.remove(0))
            .await
            .context("a watcher did not finish")??
            .with_context(|| format!("the watcher of session {k}"))?;
        if watched != log {
            bail!(
                "session {k}: the watcher that lived through the crashes saw {} events, a fresh \
                 attach {}; first difference at index {:?}",
                watched.len(),
                log.len(),
                watched.iter().zip(&log).position(|(a, b)| a != b)
            );
        }
    }
    report.model_calls = calls.lock().map(|n| *n).unwrap_or(0);
    Ok(report)
}

/// Checks one session's final log and workspace; returns its unknown-outcome count.
fn check_session(
    k: usize,
    log: &[SessionEvent],
    workspace: &std::path::Path,
) -> anyhow::Result<usize> {
    for (i, e) in log.iter().enumerate() {
        if e.seq != i as u64 + 1 {
            bail!("seq {} at position {i}: a gap or a duplicate", e.seq);
        }
    }
    match log.last().map(|e| &e.kind) {
        Some(EventKind::TurnCompleted { .. }) => {}
        other => bail!("the turn did not complete: last event {other:?}"),
    }
    let final_text = log.iter().rev().find_map(|e| match &e.kind {
        EventKind::AssistantMessage { text, .. } => Some(text.clone()),
        _ => None,
    });
    if final_text.as_deref() != Some(&format!("done {k}")) {
        bail!("the final answer is {final_text:?}");
    }
    // An odd session's subagent reported, once, and its events name their Task call.
    if k % 2 == 1 {
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
    }
    // Every tool call has exactly one result.
    let mut calls: HashMap<String, usize> = HashMap::new();
    let mut unknown = 0;
    let mut bash_ok: Vec<String> = Vec::new();
    let mut bash_calls: HashMap<String, String> = HashMap::new();
    for e in log {
        match &e.kind {
            EventKind::AssistantMessage { tool_calls, .. } => {
                for c in tool_calls {
                    calls.entry(c.call_id.clone()).or_insert(0);
                    if c.name == "Bash" {
                        let cmd = c.input["command"].as_str().unwrap_or_default().to_owned();
                        bash_calls.insert(c.call_id.clone(), cmd);
                    }
                }
            }
            EventKind::ToolResult { call_id, name, output, is_error, .. } => {
                *calls.entry(call_id.clone()).or_insert(0) += 1;
                if output.contains("outcome is unknown") {
                    unknown += 1;
                } else if name == "Bash" && !is_error {
                    bash_ok.push(bash_calls.get(call_id).cloned().unwrap_or_default());
                } else if *is_error {
                    bail!("an unexpected error result for {name}: {output}");
                }
            }
            _ => {}
        }
    }
    if let Some((id, n)) = calls.iter().find(|(_, n)| **n != 1) {
        bail!("tool call {id} has {n} results");
    }
    // Files: the edit landed exactly once.
    let file = std::fs::read_to_string(workspace.join(format!("k{k}.txt")))?;
    if file != format!("v2 {k}\n") {
        bail!("k{k}.txt holds {file:?}");
    }
    // Commands: each line at most once; exactly once when its result was recorded.
    let ran = std::fs::read_to_string(workspace.join("ran.log")).unwrap_or_default();
    for tag in ["a", "b"] {
        let line = format!("{k}-{tag}");
        let n = ran.lines().filter(|l| *l == line).count();
        if n > 1 {
            bail!("command {line} ran {n} times");
        }
        let accepted = bash_ok.iter().any(|c| c.contains(&format!("echo {line} ")));
        if accepted && n != 1 {
            bail!("command {line} succeeded but ran {n} times");
        }
    }
    Ok(unknown)
}

/// A client attached through the whole run: on every disconnect it reconnects to the current
/// server and re-attaches after the last durable `seq` it holds. Returns its durable events once
/// the session's turn completed.
async fn watch_through_crashes(
    mut url: watch::Receiver<String>,
    token: String,
    sid: String,
) -> anyhow::Result<Vec<SessionEvent>> {
    let mut seen: Vec<SessionEvent> = Vec::new();
    let give_up = Instant::now() + Duration::from_secs(600);
    loop {
        if Instant::now() > give_up {
            bail!("the watcher of {sid} gave up");
        }
        let current = url.borrow_and_update().clone();
        let Ok(mut c) = WsClient::connect(&current, &token).await else {
            let _ = tokio::time::timeout(Duration::from_millis(200), url.changed()).await;
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
            _ => continue,
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
