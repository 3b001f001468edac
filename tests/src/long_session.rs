//! Long sessions made fast for the paging tests and `bench_long`: complete turns written through
//! the server's own [`Store`] (the same `append_event` the session actor uses, so the seq rules,
//! the session row and the log format are the real ones) into a data dir before the server
//! starts on it. A scripted turn would take minutes for 20,000 events; this takes a second.

use outboard_server::store::{Store, UserRow};
use outboard_shared::{EventKind, SessionEvent, SessionId, StopReason, ToolCall, TurnId, Usage};

/// The events [`seed`] appends in one transaction.
const SEED_CHUNK: usize = 1_000;

/// The events one step writes: the assistant's message with a tool call, the call, its result.
pub const EVENTS_PER_STEP: u64 = 3;

/// The store of the data dir `dir` (created and migrated if new).
pub fn open(dir: &std::path::Path) -> anyhow::Result<Store> {
    crate::harness::open_store(dir)
}

/// Creates `user` in `org` (if new) and returns it with a token.
pub async fn user(store: &Store, name: &str, org: &str) -> anyhow::Result<(UserRow, String)> {
    Ok(store.add_user(org, name).await?)
}

/// Creates a session of `owner` holding at least `events` durable events: turns of
/// `steps_per_turn` steps (each a `Bash` call with a result of `result_bytes`), every turn
/// complete, so the server finds nothing to resume. Returns the session's id and its last seq.
pub async fn seed(
    store: &Store,
    owner: &UserRow,
    events: u64,
    steps_per_turn: u64,
    result_bytes: usize,
) -> anyhow::Result<(SessionId, u64)> {
    let row = store.create_session(owner, "a long session", "anthropic/mock-model").await?;
    let mut log = Log { session: row.id.clone(), events: Vec::new() };
    let mut turn = 0u64;
    while log.seq() < events {
        turn += 1;
        let turn_id = TurnId(format!("t_{turn}"));
        log.push(EventKind::TurnStarted { turn_id: turn_id.clone(), by: owner.name.clone() });
        log.push(EventKind::UserMessage {
            text: format!("turn {turn}: go on"),
            attachments: Vec::new(),
        });
        for step in 0..steps_per_turn {
            let call = ToolCall {
                call_id: format!("c_{turn}_{step}"),
                name: "Bash".into(),
                input: serde_json::json!({"command": format!("echo step {step}")}),
            };
            log.push(EventKind::AssistantMessage {
                text: String::new(),
                tool_calls: vec![call.clone()],
                usage: None,
                reasoning: Vec::new(),
                model: None,
                searches: Vec::new(),
            });
            let call_id = call.call_id.clone();
            log.push(EventKind::ToolCall { call, target_before: None });
            let line = format!("step {step} of turn {turn}\n");
            let output: String = line.repeat(result_bytes / line.len() + 1);
            log.push(EventKind::ToolResult {
                call_id,
                name: "Bash".into(),
                output: output[..result_bytes].to_owned(),
                is_error: false,
                duration_ms: 3,
                attachments: Vec::new(),
            });
        }
        log.push(EventKind::AssistantMessage {
            text: format!("done with turn {turn}"),
            tool_calls: Vec::new(),
            usage: None,
            reasoning: Vec::new(),
            model: None,
            searches: Vec::new(),
        });
        log.push(EventKind::TurnCompleted {
            turn_id,
            stop_reason: StopReason::EndTurn,
            usage: Usage::default(),
        });
    }
    let last = log.seq();
    let Log { session, events } = log;
    // In transactions of SEED_CHUNK events: every append updates the session's row, and
    // PostgreSQL keeps each version of that row until the transaction ends, so one transaction
    // of 40,000 appends walks ever longer chains of them (minutes, quadratic); in chunks the old
    // versions are pruned as they go (seconds).
    for chunk in events.chunks(SEED_CHUNK) {
        let chunk = chunk.to_vec();
        store.call(move |c| outboard_server::store::append_events(c, &chunk)).await?;
    }
    Ok((session, last))
}

/// Appends to the session [`seed`] made (`last` its last seq, `steps_per_turn` as given there)
/// the `compaction` an automatic compaction of its last turn would write: everything before
/// that turn's first model message summarised, the rest kept verbatim. Returns the new last
/// seq and the seq of the first event kept.
pub async fn compact(
    store: &Store,
    session: &SessionId,
    last: u64,
    steps_per_turn: u64,
) -> anyhow::Result<(u64, u64)> {
    // The last turn: turn_started, user_message, then per step assistant_message, tool_call,
    // tool_result, then the answer and turn_completed.
    let kept_from = last - 3 * steps_per_turn - 1;
    let mut log = Log { session: session.clone(), events: Vec::new() };
    log.push(EventKind::Compaction {
        summary: format!("The user asked for {last} events of steps; they all ran."),
        from_seq: 1,
        kept_from_seq: kept_from,
        tokens_before: 900_000,
        tokens_after: 2_000,
        trigger: outboard_shared::CompactionTrigger::Auto,
        focus: None,
        usage: None,
    });
    let mut events = log.events;
    events[0].seq = last + 1;
    store.call(move |c| outboard_server::store::append_events(c, &events)).await?;
    Ok((last + 1, kept_from))
}

struct Log {
    session: SessionId,
    events: Vec<SessionEvent>,
}

impl Log {
    fn seq(&self) -> u64 {
        self.events.len() as u64
    }

    fn push(&mut self, kind: EventKind) {
        let seq = self.seq() + 1;
        let ts = format!("2026-01-01T00:00:00.{:03}Z", seq % 1000);
        self.events.push(SessionEvent {
            session_id: self.session.clone(),
            seq,
            ts,
            kind,
            parent: None,
        });
    }
}
