//! The loop: one turn of a session (or a subagent) — call the model, run the tools it asks for
//! (in parallel where they allow it, after the approvals they need), record every item before
//! the next step, until the model stops, the turn is interrupted or the step budget is spent.

use futures_util::StreamExt as _;
use outboard_llm::{
    context, ContentBlock, LlmError, ModelRequest, ModelStop, Provider, StreamDelta,
};
use outboard_shared::{
    CompactionTrigger, EventKind, FailureClass, OutputStream, SessionEvent, StopReason, ToolCall,
    Usage,
};
use outboard_tools::{self as tools, ToolCtx, ToolOutcome};
use outboard_vfs::Route;
use std::time::Instant;
use tracing::Instrument as _;

use crate::approve;
use crate::child;
use crate::compact::{self, CompactError, Compacted};
use crate::plan;
use crate::progress as relay;
use crate::prompt::{org_context_changes, turn_system_prompt, turn_system_prompt_quoting};
use crate::sink::{EmitError, Emitter};
use crate::spans;
use crate::state::*;
use outboard_tools::recovery::workspace_target_digest;

/// Runs one turn to its end. How it ended is handed back in [`TurnEnd::last`] for the session
/// to record, not recorded here: a client that sees the turn end may send the next message at
/// once, and the session must have its conversation back by then.
pub async fn run_turn(mut turn: Turn) -> TurnEnd {
    let span = spans::turn(
        &turn.session_id,
        &turn.turn_id,
        turn.conversation.messages(),
        turn.limits.span_content,
    );
    // A resumed turn's earlier model calls count too: their usage is in the log.
    let mut usage = turn.resume.usage;
    let ending = match drive(&mut turn, &mut usage).instrument(span.clone()).await {
        Ok(ending) => ending,
        Err(EmitError::Closed) => {
            Ending::Failed("the session closed during the turn".into(), FailureClass::Other)
        }
        Err(EmitError::Store(e)) => {
            Ending::Failed(format!("the event log failed: {e}"), FailureClass::Other)
        }
    };
    let traced = match &ending {
        Ending::Completed(stop) => spans::TurnOutcome::Completed(*stop),
        Ending::Failed(..) => spans::TurnOutcome::Failed,
        Ending::Suspended => spans::TurnOutcome::Suspended,
    };
    spans::record_turn(&span, traced, &usage);
    let last = match ending {
        Ending::Completed(stop_reason) => {
            Some(EventKind::TurnCompleted { turn_id: turn.turn_id.clone(), stop_reason, usage })
        }
        Ending::Failed(error, class) => {
            Some(EventKind::TurnFailed { turn_id: turn.turn_id.clone(), error, class: Some(class) })
        }
        Ending::Suspended => {
            tracing::info!(session = %turn.session_id, turn = %turn.turn_id, "turn suspended for shutdown");
            None
        }
    };
    TurnEnd { conversation: turn.conversation, env: turn.env, window: turn.window, last }
}

pub(crate) async fn drive(turn: &mut Turn, usage: &mut Usage) -> Result<Ending, EmitError> {
    rebuild_reads(&mut turn.env).await;
    rebuild_org_reads(&mut turn.env).await;
    let (system, specs, agents) = match &turn.role {
        Role::Main => {
            turn.approvals.refresh().await;
            let (mut system, mut quoted) = turn_system_prompt_quoting(&mut turn.env).await;
            let agents = child::agent_types(turn.env.org.as_ref()).await;
            quoted.extend(agents.iter().filter_map(|a| a.source.as_ref()).map(|s| {
                outboard_shared::OrgContextFile {
                    path: s.path.clone(),
                    version: s.version,
                    author: s.author.clone(),
                    previous: None,
                }
            }));
            let files = org_context_changes(&mut turn.env.org_shown, quoted);
            if !files.is_empty() {
                turn.emitter.durable(EventKind::OrgContext { files }).await?;
            }
            let mut specs = tools::specs();
            specs.extend(web_search(turn).await);
            specs.push(child::task_spec(&agents));
            let mcp = mcp_tools(&turn.env).await;
            system.push_str(&mcp.prompt);
            specs.extend(mcp.specs);
            (system, specs, agents)
        }
        Role::Child(role) => {
            let mut specs = role.specs();
            if role.mcp {
                specs.extend(mcp_tools(&turn.env).await.specs);
            }
            (role.system.clone(), specs, Vec::new())
        }
    };
    if let Some(ending) = crate::hooks::seams::turn_start(turn).await? {
        return Ok(ending);
    }
    let fixed_bytes = context::fixed_bytes(&system, &specs);
    turn.offered = specs.iter().map(|s| s.name.clone()).collect();
    let pending = std::mem::take(&mut turn.resume.pending);
    let recovered = pending.into_iter().map(Planned::Recovered).collect();
    if let Flow::Suspended = run_calls(turn, usage, &system, &agents, recovered, false).await? {
        return Ok(Ending::Suspended);
    }
    let mut step = turn.resume.steps_used;
    // A provider's "too long" is answered by compacting and retrying the step once.
    let mut overflow_retried = false;
    let mut stop_blocks = 0;
    while step < turn.limits.max_steps {
        if turn.shutdown.is_cancelled() {
            return Ok(Ending::Suspended);
        }
        crate::hooks::seams::flush(turn).await?;
        // Background commands that ended since the last step: told at the end of the newest
        // message, so the cached prefix stays as it was; durable, so a rebuilt conversation has it.
        // Only the session's own loop is told (each job is told once); a subagent polls its jobs
        // with `BashOutput`.
        let reminder = match turn.role {
            Role::Main => tools::background::reminder(&turn.env.sandbox).await,
            Role::Child(_) => None,
        };
        if let Some(text) = reminder {
            let seq =
                turn.emitter.durable(EventKind::SystemReminder { text: text.clone() }).await?;
            turn.conversation.push_user(seq, ContentBlock::Text(text));
        }
        if let Role::Main = turn.role {
            plan::remind(turn).await?;
        }
        let compactor = compact::Compactor {
            provider: &turn.provider,
            system: &system,
            tools: &specs,
            fixed_bytes,
            window: turn.window,
            emitter: &turn.emitter,
            cancel: &turn.cancel,
            shutdown: &turn.shutdown,
            ids: (&turn.session_id, &turn.turn_id),
        };
        let mut tokens = compactor.tokens(&turn.conversation);
        if turn.window.over(tokens) {
            match compactor.compact(&mut turn.conversation, CompactionTrigger::Auto, None).await {
                Ok(done) => {
                    usage.add(done.usage);
                    tokens = done.tokens_after;
                }
                Err(e) => {
                    if let Some(ending) = compaction_failed(turn, e)? {
                        return Ok(ending);
                    }
                }
            }
        }
        let request = ModelRequest {
            system: &system,
            messages: turn.conversation.messages(),
            tools: &specs,
            max_tokens: turn.window.answer_room(tokens, turn.provider.max_tokens()),
            forbid_tools: false,
        };
        let response = tokio::select! {
            r = call_model(&turn.provider, &request, &turn.emitter) => r?,
            _ = turn.cancel.cancelled() => return Ok(Ending::Completed(StopReason::Interrupted)),
            // The streamed answer is not durable yet: dropping it loses nothing, and the model
            // call is re-issued when the server starts again.
            _ = turn.shutdown.cancelled() => return Ok(Ending::Suspended),
        };
        let response = match response {
            Ok(r) => r,
            Err(e) if e.is_context_overflow() && !overflow_retried => {
                overflow_retried = true;
                if let Some(learned) = turn.window.learned_from(tokens) {
                    tracing::warn!(
                        session = %turn.session_id, window = turn.window.tokens,
                        learned = learned.tokens,
                        "the provider refused a request of ~{tokens} tokens as too long ({e}); \
                         the session goes on assuming a window of {} tokens (set the real one \
                         with `serve --context-window`)",
                        learned.tokens
                    );
                    turn.window = learned;
                }
                let compactor = compact::Compactor { window: turn.window, ..compactor };
                let trigger = CompactionTrigger::Overflow;
                match compactor.compact(&mut turn.conversation, trigger, None).await {
                    Ok(done) => usage.add(done.usage),
                    Err(CompactError::Emit(e)) => return Err(e),
                    Err(CompactError::Stopped) => return Ok(stopped(turn)),
                    Err(c) => {
                        let e = turn.provider.explain(&e);
                        let line = format!("{}; compacting did not help: {c}", e.line);
                        return Ok(Ending::Failed(line, e.class));
                    }
                }
                continue;
            }
            Err(e) => {
                let e = turn.provider.explain(&e);
                return Ok(Ending::Failed(e.line, e.class));
            }
        };
        step += 1;
        overflow_retried = false;
        usage.add(response.usage);

        let mut text = String::new();
        let mut calls = Vec::new();
        let mut reasoning = Vec::new();
        let mut searches = Vec::new();
        for block in &response.content {
            match block {
                ContentBlock::Reasoning(r) => reasoning.push(r.clone()),
                ContentBlock::ProviderSearch(s) => searches.push(s.clone()),
                ContentBlock::Text(t) => text.push_str(t),
                ContentBlock::ToolUse { id, name, input } => calls.push(ToolCall {
                    call_id: id.clone(),
                    name: name.clone(),
                    input: input.clone(),
                }),
                ContentBlock::ToolResult { .. } | ContentBlock::Media(_) => {}
            }
        }
        let message = EventKind::AssistantMessage {
            text,
            tool_calls: calls.clone(),
            usage: Some(response.usage),
            reasoning,
            model: Some(turn.provider.label()),
            searches,
        };
        // The message and the start of its first call share one commit when that call runs
        // with nobody's answer: one commit fewer per step. The log is the same as when they
        // are written one after the other.
        let announced = match calls.first() {
            Some(call) if announce_with_message(turn, call) => Some(EventKind::ToolCall {
                call: call.clone(),
                target_before: write_target_digest(&turn.env, call).await,
            }),
            _ => None,
        };
        let first_announced = announced.is_some();
        let seq = match announced {
            Some(start) => turn.emitter.durable_all(vec![message, start]).await?[0],
            None => turn.emitter.durable(message).await?,
        };
        turn.conversation.push_assistant(seq, response.content);

        // The provider paused a long turn of its own tools (its web search): sending the
        // conversation again, which ends with what it said so far, lets it go on.
        if calls.is_empty() && response.stop == ModelStop::Other("pause_turn".into()) {
            continue;
        }
        if calls.is_empty() && crate::hooks::seams::stop(turn, stop_blocks).await? {
            stop_blocks += 1;
            continue;
        }
        if calls.is_empty() {
            let stop = match response.stop {
                ModelStop::MaxTokens => StopReason::MaxTokens,
                _ => StopReason::EndTurn,
            };
            return Ok(Ending::Completed(stop));
        }

        let planned = calls
            .into_iter()
            .enumerate()
            .map(|(i, call)| match i == 0 && first_announced {
                true => Planned::Announced(call),
                false => Planned::Fresh(call),
            })
            .collect();
        if let Flow::Suspended = run_calls(turn, usage, &system, &agents, planned, true).await? {
            return Ok(Ending::Suspended);
        }
        if turn.cancel.is_cancelled() {
            return Ok(Ending::Completed(StopReason::Interrupted));
        }
    }
    Ok(Ending::Completed(StopReason::StepLimit))
}

/// Compacts the conversation on request (`session/compact`, `/compact [focus]`) between turns:
/// the same summary as an automatic compaction, with the person's focus. Takes the turn's
/// parts (no turn events are written) and hands them back with the outcome.
pub async fn run_compaction(
    mut turn: Turn,
    focus: Option<String>,
) -> (TurnEnd, Result<Compacted, CompactError>) {
    // The turn's tools, `Task` included: the history's calls stay valid and the prefix cached.
    let mut specs = tools::specs();
    specs.extend(web_search(&turn).await);
    specs.push(child::task_spec(&child::agent_types(turn.env.org.as_ref()).await));
    let mut system = turn_system_prompt(&mut turn.env).await;
    let mcp = mcp_tools(&turn.env).await;
    system.push_str(&mcp.prompt);
    specs.extend(mcp.specs);
    let compactor = compact::Compactor {
        provider: &turn.provider,
        system: &system,
        tools: &specs,
        fixed_bytes: context::fixed_bytes(&system, &specs),
        window: turn.window,
        emitter: &turn.emitter,
        cancel: &turn.cancel,
        shutdown: &turn.shutdown,
        ids: (&turn.session_id, &turn.turn_id),
    };
    let result = compactor
        .compact(&mut turn.conversation, CompactionTrigger::Manual, focus.as_deref())
        .await;
    (
        TurnEnd { conversation: turn.conversation, env: turn.env, window: turn.window, last: None },
        result,
    )
}

/// The org's MCP tools and the prompt's section on its servers (none outside an org).
pub(crate) async fn mcp_tools(env: &ToolEnv) -> outboard_mcp::OrgTools {
    match env.org.as_ref().and_then(|o| o.mcp.as_ref().map(|m| (m, &o.org_id))) {
        Some((mcp, org)) => mcp.org_tools(org).await,
        None => outboard_mcp::OrgTools::default(),
    }
}

/// How a turn ends when a compaction was stopped: interrupted, or suspended for a shutdown.
pub(crate) fn stopped(turn: &Turn) -> Ending {
    if turn.shutdown.is_cancelled() {
        Ending::Suspended
    } else {
        Ending::Completed(StopReason::Interrupted)
    }
}

/// What an automatic compaction that did not happen means for the turn: it goes on (the
/// request may still fit, and the provider says so if not) unless it was stopped or the log
/// failed.
pub(crate) fn compaction_failed(turn: &Turn, e: CompactError) -> Result<Option<Ending>, EmitError> {
    match e {
        CompactError::Emit(e) => Err(e),
        CompactError::Stopped => Ok(Some(stopped(turn))),
        CompactError::Nothing => Ok(None),
        e => {
            tracing::warn!(session = %turn.session_id, "cannot compact; the turn goes on: {e}");
            Ok(None)
        }
    }
}

/// One streaming model call, its deltas forwarded to the session as transient events.
///
/// The provider reports deltas through a synchronous callback; they cross to this task's
/// forwarder through a bounded [`relay`] that coalesces while the session is behind.
pub(crate) async fn call_model(
    provider: &Provider,
    request: &ModelRequest<'_>,
    emitter: &Emitter,
) -> Result<Result<outboard_llm::ModelResponse, LlmError>, EmitError> {
    let (mut relay, mut rx) = relay::relay::<StreamDelta>();
    let call = async move {
        let mut on_delta = |d: StreamDelta| relay.push(d);
        let result = provider.complete(request, &mut on_delta).await;
        relay.finish().await;
        result
    };
    let forward = async {
        while let Some(delta) = rx.recv().await {
            let kind = match delta {
                StreamDelta::Text(text) => EventKind::AssistantDelta { text },
                StreamDelta::Retry { attempt, delay, reason } => {
                    EventKind::ModelRetry { attempt, delay_ms: delay.as_millis() as u64, reason }
                }
            };
            emitter.transient(kind).await?;
        }
        Ok::<(), EmitError>(())
    };
    let (result, forwarded) = tokio::join!(call, forward);
    forwarded?;
    Ok(result)
}

/// A tool call to settle: new in this step, or left without a result by a restart.
pub(crate) enum Planned {
    Fresh(ToolCall),
    /// Fresh, its start already committed with the message that made it (see
    /// [`announce_with_message`]).
    Announced(ToolCall),
    Recovered(PendingCall),
}

impl Planned {
    fn call(&self) -> &ToolCall {
        match self {
            Planned::Fresh(call) | Planned::Announced(call) => call,
            Planned::Recovered(p) => &p.call,
        }
    }
}

/// Whether the start of `call`, the first of a model message, is committed with the message
/// itself: when it runs with nobody's answer (the policy settles it) and the turn goes on. A
/// call that waits for a person, or is refused, starts on its own as before.
pub(crate) fn announce_with_message(turn: &Turn, call: &ToolCall) -> bool {
    !turn.cancel.is_cancelled()
        && !turn.shutdown.is_cancelled()
        && !plan::runs_here(turn, call)
        && !turn.hooks.any(outboard_hooks::HookEvent::PreToolUse, Some(&call.name))
        && matches!(approve::settled(turn, call), Some(approve::Verdict::Run))
}

/// What to do with one call, decided (and its start made durable) before it runs.
pub(crate) enum Action {
    /// Answer without running.
    Answer(ToolOutcome),
    /// Run the tool; for `Task`, a fresh subagent.
    Run,
    /// Resume the subagent of a `Task` call from its events.
    Resume(Vec<SessionEvent>),
}

/// What running one call came to.
pub(crate) enum Ran {
    Done {
        outcome: ToolOutcome,
        usage: Usage,
        duration: std::time::Duration,
    },
    /// Its subagent stopped for a server shutdown: no result is written and the call resumes
    /// with the turn.
    Suspended,
}

/// How a batch of calls ended.
pub(crate) enum Flow {
    Done,
    Suspended,
}

/// Whether a call may run at the same time as its neighbours of the same message: read-only
/// tools, and `Task` (a subagent works in its own conversation).
pub(crate) fn concurrent(call: &ToolCall) -> bool {
    call.name == child::TASK || tools::runs_concurrently(&call.name)
}

/// Settles `calls` in order, each with exactly one result, so the conversation stays valid for
/// the next message. Consecutive calls that may run at once ([`concurrent`]) form a group:
/// their starts are recorded first, in call order, then they run together (at most
/// [`MAX_PARALLEL_CALLS`] at a time) and their results are recorded in call order. Other calls
/// run alone. `note_last`: the last call's result carries the notice of org files changed by
/// others since this session read them, so the model learns of them at its next step.
pub(crate) async fn run_calls(
    turn: &mut Turn,
    usage: &mut Usage,
    system: &str,
    agents: &[child::SubagentType],
    calls: Vec<Planned>,
    note_last: bool,
) -> Result<Flow, EmitError> {
    let mut calls = calls.into_iter().peekable();
    while let Some(first) = calls.next() {
        let mut group = vec![first];
        if concurrent(group[0].call()) {
            while let Some(next) = calls.next_if(|p| concurrent(p.call())) {
                group.push(next);
            }
        }
        if turn.shutdown.is_cancelled() && !matches!(group[0], Planned::Announced(_)) {
            // The calls not started yet run when the turn resumes. One whose start is in the
            // log already runs now: after a restart it would count as cut mid-run.
            return Ok(Flow::Suspended);
        }
        let note = note_last && calls.peek().is_none();
        let mut started = Vec::with_capacity(group.len());
        for planned in group {
            match start(turn, planned).await? {
                Some(ready) => started.push(ready),
                // Waiting for an approval when the server shut down: the calls of the group
                // that started resume with the turn (they are read-only or subagents).
                None => return Ok(Flow::Suspended),
            }
        }
        // The ledger leaves the environment while the group runs: one call gets it whole, calls
        // running together get a copy each, and what their reads recorded is merged back.
        let mut ledger = std::mem::take(&mut turn.env.reads);
        let ran = if started.len() == 1 {
            let (call, action) = started.remove(0);
            let ran = execute(turn, agents, system, &call, action, &mut ledger).await;
            vec![(call, ran)]
        } else {
            let view: &Turn = turn;
            let base = &ledger;
            let ran: Vec<_> = futures_util::stream::iter(started)
                .map(|(call, action)| async move {
                    let mut reads = base.clone();
                    let ran = execute(view, agents, system, &call, action, &mut reads).await;
                    (call, ran, reads)
                })
                .buffered(MAX_PARALLEL_CALLS)
                .collect()
                .await;
            let mut out = Vec::with_capacity(ran.len());
            let mut merged = Vec::new();
            for (call, ran, reads) in ran {
                if call.name == "Read" {
                    merged.push(reads);
                }
                out.push((call, ran));
            }
            for reads in merged {
                ledger.merge(reads);
            }
            out
        };
        turn.env.reads = ledger;
        let last = ran.len().saturating_sub(1);
        for (i, (call, ran)) in ran.into_iter().enumerate() {
            let Ran::Done { mut outcome, usage: used, duration } = ran? else {
                return Ok(Flow::Suspended);
            };
            usage.add(used);
            if let (true, true, Some(org)) = (note, i == last, &turn.env.org) {
                if let Some(note) = tools::changed_since_read(org, &mut turn.env.reads).await {
                    outcome.output.push_str("\n\n");
                    outcome.output.push_str(&note);
                }
            }
            let seq = record_result(turn, &call, &outcome, duration).await?;
            turn.conversation.push_result(
                seq,
                &call.call_id,
                &outcome.output,
                outcome.is_error,
                &outcome.attachments,
            );
        }
    }
    Ok(Flow::Done)
}

/// Records that a call starts (with the digest of a write's target) and decides how it runs,
/// following the recovery rules for a call left by a restart (docs/ARCHITECTURE.md,
/// "Durability"): a call that never started runs now; read-only tools run again; a file write
/// runs again only if its target still holds the content it had before the write; a subagent
/// resumes from its events; a command is never run twice — the model is told its outcome is
/// unknown and decides. After an interrupt, calls are answered without running. Before a call
/// starts, the org's tool policy decides whether it runs, is refused or waits for a person's
/// answer ([`approve`]); `None` when the server shut down while it waited.
pub(crate) async fn start(
    turn: &Turn,
    planned: Planned,
) -> Result<Option<(ToolCall, Action)>, EmitError> {
    let (call, started, child_log, approval) = match planned {
        Planned::Announced(call) if turn.cancel.is_cancelled() => {
            return Ok(Some((call, Action::Answer(not_run()))));
        }
        Planned::Announced(call) => return Ok(Some((call, Action::Run))),
        Planned::Fresh(call) => (call, None, Vec::new(), None),
        Planned::Recovered(p) => (p.call, p.started, p.child_log, p.approval),
    };
    if turn.cancel.is_cancelled() {
        return Ok(Some((call, Action::Answer(not_run()))));
    }
    let Some(before) = started else {
        let (call, refused) = crate::hooks::seams::pre_tool(turn, call).await;
        if let Some(outcome) = refused {
            return Ok(Some((call, Action::Answer(outcome))));
        }
        if plan::runs_here(turn, &call) {
            return Ok(plan::settle(turn, &call, approval)
                .await?
                .map(|o| (call, Action::Answer(o))));
        }
        match approve::check(turn, &call, approval).await? {
            approve::Verdict::Run => {}
            approve::Verdict::Refuse(outcome) => return Ok(Some((call, Action::Answer(outcome)))),
            approve::Verdict::Suspended => return Ok(None),
        }
        let target_before = write_target_digest(&turn.env, &call).await;
        turn.emitter.durable(EventKind::ToolCall { call: call.clone(), target_before }).await?;
        return Ok(Some((call, Action::Run)));
    };
    let action = match call.name.as_str() {
        child::TASK => Action::Resume(child_log),
        name if tools::is_read_only(name) => Action::Run,
        name if outboard_mcp::is_mcp_name(name) => Action::Answer(ToolOutcome {
            output: MCP_OUTCOME_UNKNOWN.into(),
            is_error: true,
            attachments: Vec::new(),
        }),
        "Write" | "Edit" | "NotebookEdit" => {
            let now = write_target_digest(&turn.env, &call).await;
            if before.is_none() || now == before {
                Action::Run
            } else {
                Action::Answer(ToolOutcome {
                    output: WRITE_MAYBE_DONE.into(),
                    is_error: false,
                    attachments: Vec::new(),
                })
            }
        }
        _ => Action::Answer(ToolOutcome {
            output: COMMAND_OUTCOME_UNKNOWN.into(),
            is_error: true,
            attachments: Vec::new(),
        }),
    };
    Ok(Some((call, action)))
}

/// Runs one call as decided by [`start`]; `reads` is the ledger it reads and records in. In a
/// `tool_call` span, which names how a `Bash` call that runs found the sandbox.
pub(crate) async fn execute(
    turn: &Turn,
    agents: &[child::SubagentType],
    system: &str,
    call: &ToolCall,
    action: Action,
    reads: &mut tools::ReadLedger,
) -> Result<Ran, EmitError> {
    let span = spans::tool_call(
        &turn.session_id,
        &turn.turn_id,
        call,
        &turn.offered,
        turn.limits.span_content,
    );
    if !span.is_disabled() && matches!(action, Action::Run) {
        if let Some(start) = sandbox_start(turn, call).await {
            span.record("sandbox.start", start);
        }
    }
    let ran =
        execute_untraced(turn, agents, system, call, action, reads).instrument(span.clone()).await;
    match &ran {
        Ok(Ran::Done { outcome, .. }) => spans::record_tool(&span, Some(outcome.is_error)),
        Ok(Ran::Suspended) => spans::record_tool(&span, None),
        Err(_) => {}
    }
    ran
}

/// For a `Bash` call about to run in this server's sandbox: how it finds the sandbox (asked of
/// the sandbox's manager, which does not wake it). `None` for other tools and hosted sessions.
async fn sandbox_start(turn: &Turn, call: &ToolCall) -> Option<&'static str> {
    if call.name != "Bash" || turn.env.remote.is_some() {
        return None;
    }
    spans::sandbox_start(turn.env.sandbox.state().await)
}

async fn execute_untraced(
    turn: &Turn,
    agents: &[child::SubagentType],
    system: &str,
    call: &ToolCall,
    action: Action,
    reads: &mut tools::ReadLedger,
) -> Result<Ran, EmitError> {
    let started = Instant::now();
    let done = |outcome: ToolOutcome, usage: Usage| Ran::Done {
        outcome,
        usage,
        duration: started.elapsed(),
    };
    if let Role::Child(role) = &turn.role {
        if let Some(refusal) = role.refusal(&call.name) {
            return Ok(done(refusal, Usage::default()));
        }
    }
    let resume = match action {
        Action::Answer(outcome) => return Ok(done(outcome, Usage::default())),
        Action::Run => None,
        Action::Resume(log) => Some(log),
    };
    if call.name == child::TASK {
        return Ok(match child::run(turn, agents, system, call, resume, drive_boxed).await? {
            Some((outcome, usage)) => done(outcome, usage),
            None => Ran::Suspended,
        });
    }
    let mut outcome = run_tool(turn, call, reads).await?;
    crate::hooks::seams::post_tool(turn, call, &mut outcome).await;
    Ok(done(outcome, Usage::default()))
}

/// For `Write`, `Edit` and `NotebookEdit`: the SHA-256 of the target's current content, or
/// `absent`.
pub(crate) async fn write_target_digest(env: &ToolEnv, call: &ToolCall) -> Option<String> {
    let path = crate::state::written_path(&call.name, &call.input)?;
    if let Ok(Route::Org(path)) = outboard_vfs::route(path) {
        let org = env.org.as_ref()?;
        let head = org.fs.head(&org.org_id, &path).await.ok()?;
        return Some(match head.filter(|h| !h.deleted) {
            Some(h) => h.sha256,
            None => "absent".into(),
        });
    }
    // Where the files are: computed by the sandbox host for a remote workspace.
    if let Some(remote) = &env.remote {
        return remote.digest(path).await;
    }
    // Through the confined root on the blocking pool, like the tool itself: a command may have
    // put a FIFO or a symlink out there.
    let workspace = env.workspace.clone();
    let path = path.to_owned();
    let digest = tokio::task::spawn_blocking(move || workspace_target_digest(&workspace, &path));
    digest.await.ok().flatten()
}

/// Records a call's result; returns its seq.
pub(crate) async fn record_result(
    turn: &Turn,
    call: &ToolCall,
    outcome: &ToolOutcome,
    duration: std::time::Duration,
) -> Result<u64, EmitError> {
    let seq = turn
        .emitter
        .durable(EventKind::ToolResult {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            output: outcome.output.clone(),
            is_error: outcome.is_error,
            duration_ms: duration.as_millis() as u64,
            attachments: outcome.attachments.clone(),
        })
        .await?;
    if let Some(metrics) = &turn.env.metrics {
        metrics.tool_call(&call.name, outcome.is_error, duration);
    }
    Ok(seq)
}

/// Runs one tool call, streaming its output to the session; the outcome as the model will see
/// it (secrets scrubbed).
pub(crate) async fn run_tool(
    turn: &Turn,
    call: &ToolCall,
    reads: &mut tools::ReadLedger,
) -> Result<ToolOutcome, EmitError> {
    let (mut relay, mut rx) = relay::relay::<(OutputStream, String)>();
    let emitter = turn.emitter.clone();
    let call_id = call.call_id.clone();
    let run = async {
        let mut on_output =
            |stream: OutputStream, text: &str| relay.push((stream, text.to_owned()));
        let ctx = ToolCtx {
            workspace: &turn.env.workspace,
            sandbox: &turn.env.sandbox,
            reads,
            on_output: &mut on_output,
            cancel: turn.cancel.clone(),
            default_timeout: turn.limits.bash_timeout,
            org: turn.env.org.as_ref(),
            events: Some(&turn.emitter),
            remote: turn.env.remote.as_deref(),
            read_only: turn.approvals.gate.mode() == outboard_shared::SessionMode::Plan,
        };
        let mut outcome = tools::run(&call.name, &call.input, ctx).await;
        // The forwarder ends once the relay is finished and read out.
        relay.finish().await;
        if let std::borrow::Cow::Owned(clean) = turn.env.scrub.scrub_str(&outcome.output) {
            outcome.output = clean;
        }
        if let (false, "Write" | "Edit", Some(org)) =
            (outcome.is_error, call.name.as_str(), &turn.env.org)
        {
            let path = call.input.get("file_path").and_then(|p| p.as_str()).unwrap_or_default();
            if let Ok(Route::Org(org_path)) = outboard_vfs::route(path) {
                let path = org_path.to_string();
                if path.starts_with(outboard_vfs::AGENTS_PREFIX) && path.ends_with(".md") {
                    if let Some(note) = child::agent_file_note(org, &path).await {
                        outcome.output.push_str("\n\n");
                        outcome.output.push_str(&note);
                    }
                }
            }
        }
        outcome
    };
    let scrub = turn.env.scrub.clone();
    let forward = async {
        // A value split across two chunks is held back until it is whole (or proved not one).
        let mut streams = [
            (OutputStream::Stdout, outboard_base::scrub::TextStream::new(scrub.clone())),
            (OutputStream::Stderr, outboard_base::scrub::TextStream::new(scrub.clone())),
        ];
        while let Some((stream, text)) = rx.recv().await {
            let Some((_, held)) = streams.iter_mut().find(|(s, _)| *s == stream) else { continue };
            let text = held.push(&text);
            if !text.is_empty() {
                emitter
                    .transient(EventKind::ToolOutputDelta {
                        call_id: call_id.clone(),
                        stream,
                        text,
                    })
                    .await?;
            }
        }
        for (stream, held) in &mut streams {
            let text = held.finish();
            if !text.is_empty() {
                let kind =
                    EventKind::ToolOutputDelta { call_id: call_id.clone(), stream: *stream, text };
                emitter.transient(kind).await?;
            }
        }
        Ok::<(), EmitError>(())
    };
    let (outcome, forwarded) = tokio::join!(run, forward);
    forwarded?;
    Ok(outcome)
}

/// [`drive`] as the subagents' callback ([`Drive`]).
pub fn drive_boxed<'a>(
    turn: &'a mut Turn,
    usage: &'a mut Usage,
) -> futures_util::future::BoxFuture<'a, Result<Ending, EmitError>> {
    Box::pin(drive(turn, usage))
}

/// The web search entry of the session's tools, when its org turned search on: `WebSearch` or
/// the provider's own tool (see [`tools::websearch::offer`]).
async fn web_search(turn: &Turn) -> Option<outboard_llm::ToolSpec> {
    let egress = turn.env.sandbox.egress();
    tools::websearch::offer(turn.env.org.as_ref(), turn.provider.kind(), egress).await
}
