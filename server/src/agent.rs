//! The harness loop: model → tools → model, until the model ends the turn, the step budget is
//! spent, or the user interrupts.
//!
//! A turn runs as its own task, spawned by the session actor, and owns for its duration the
//! conversation and the session's tool environment (workspace, sandbox, read ledger); it hands
//! them back when it ends. It never touches the log or the clients directly: every event goes
//! through the actor's [`Emitter`], and a durable event is committed to the store before
//! [`Emitter::durable`] returns, so each item the model will see is on disk before the next step
//! starts (DESIGN.md, "The harness loop and durability").

use std::sync::Arc;
use std::time::Instant;

use outboard_shared::{EventKind, OutputStream, SessionId, StopReason, ToolCall, TurnId, Usage};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::Limits;
use crate::llm::{
    ContentBlock, LlmError, Message, ModelRequest, ModelStop, Provider, Role, StreamDelta,
};
use crate::sandbox::Sandbox;
use crate::session::{EmitError, Emitter};
use crate::tools::{self, ReadLedger, ToolCtx, ToolOutcome};
use crate::vfs::Workspace;

/// What a session's tools act on; owned by the running turn, or by the actor between turns.
#[derive(Debug)]
pub struct ToolEnv {
    /// `/workspace`.
    pub workspace: Workspace,
    /// Where `Bash` runs.
    pub sandbox: Sandbox,
    /// Which files the session has read (Claude Code's read-before-write rule).
    pub reads: ReadLedger,
}

/// Everything a turn needs.
pub struct Turn {
    /// The session.
    pub session_id: SessionId,
    /// This turn.
    pub turn_id: TurnId,
    /// The model.
    pub provider: Arc<Provider>,
    /// The conversation so far, ending with this turn's user message.
    pub conversation: Vec<Message>,
    /// The tool environment.
    pub env: ToolEnv,
    /// Where events go.
    pub emitter: Emitter,
    /// Cancelled by `turn/interrupt`.
    pub cancel: CancellationToken,
    /// Step budget and timeouts.
    pub limits: Limits,
}

/// What a turn hands back to its session.
pub struct TurnEnd {
    /// The conversation including everything this turn added.
    pub conversation: Vec<Message>,
    /// The tool environment.
    pub env: ToolEnv,
}

/// How a turn ended, before it is written to the log.
enum Ending {
    Completed(StopReason),
    Failed(String),
}

/// Runs one turn to its end and records how it ended.
pub async fn run_turn(mut turn: Turn) -> TurnEnd {
    let mut usage = Usage::default();
    let ending = match drive(&mut turn, &mut usage).await {
        Ok(ending) => ending,
        Err(EmitError::Closed) => Ending::Failed("the session closed during the turn".into()),
        Err(EmitError::Store(e)) => Ending::Failed(format!("the event log failed: {e}")),
    };
    let kind = match ending {
        Ending::Completed(stop_reason) => {
            EventKind::TurnCompleted { turn_id: turn.turn_id.clone(), stop_reason, usage }
        }
        Ending::Failed(error) => EventKind::TurnFailed { turn_id: turn.turn_id.clone(), error },
    };
    if let Err(e) = turn.emitter.durable(kind).await {
        tracing::error!(session = %turn.session_id, "cannot record the end of the turn: {e}");
    }
    TurnEnd { conversation: turn.conversation, env: turn.env }
}

async fn drive(turn: &mut Turn, usage: &mut Usage) -> Result<Ending, EmitError> {
    let specs = tools::specs();
    for _step in 0..turn.limits.max_steps {
        let request = ModelRequest {
            system: system_prompt(),
            messages: turn.conversation.clone(),
            tools: specs.clone(),
        };
        let response = tokio::select! {
            r = call_model(&turn.provider, &request, &turn.emitter) => r?,
            _ = turn.cancel.cancelled() => return Ok(Ending::Completed(StopReason::Interrupted)),
        };
        let response = match response {
            Ok(r) => r,
            Err(e) => return Ok(Ending::Failed(e.to_string())),
        };
        usage.add(response.usage);

        let mut text = String::new();
        let mut calls = Vec::new();
        for block in &response.content {
            match block {
                ContentBlock::Text(t) => text.push_str(t),
                ContentBlock::ToolUse { id, name, input } => calls.push(ToolCall {
                    call_id: id.clone(),
                    name: name.clone(),
                    input: input.clone(),
                }),
                ContentBlock::ToolResult { .. } => {}
            }
        }
        turn.emitter
            .durable(EventKind::AssistantMessage { text, tool_calls: calls.clone() })
            .await?;
        turn.conversation.push(Message { role: Role::Assistant, content: response.content });

        if calls.is_empty() {
            let stop = match response.stop {
                ModelStop::MaxTokens => StopReason::MaxTokens,
                _ => StopReason::EndTurn,
            };
            return Ok(Ending::Completed(stop));
        }

        let mut results = Vec::with_capacity(calls.len());
        for call in calls {
            let outcome = if turn.cancel.is_cancelled() {
                // Every tool call gets exactly one result, so the conversation stays valid for
                // the next message; calls after an interrupt are answered without running.
                ToolOutcome {
                    output: "Not run: the user interrupted the turn.".into(),
                    is_error: true,
                }
            } else {
                turn.emitter.durable(EventKind::ToolCall { call: call.clone() }).await?;
                run_tool(turn, &call).await?
            };
            results.push(ContentBlock::ToolResult {
                tool_use_id: call.call_id.clone(),
                content: outcome.output,
                is_error: outcome.is_error,
            });
        }
        turn.conversation.push(Message { role: Role::User, content: results });
        if turn.cancel.is_cancelled() {
            return Ok(Ending::Completed(StopReason::Interrupted));
        }
    }
    Ok(Ending::Completed(StopReason::StepLimit))
}

/// One streaming model call, its deltas forwarded to the session as transient events.
///
/// The provider reports deltas through a synchronous callback; they cross to this task's
/// forwarder over an unbounded channel, whose size is bounded in practice by one model response
/// and which lives only as long as the call.
async fn call_model(
    provider: &Provider,
    request: &ModelRequest,
    emitter: &Emitter,
) -> Result<Result<crate::llm::ModelResponse, LlmError>, EmitError> {
    let (tx, mut rx) = mpsc::unbounded_channel::<StreamDelta>();
    let call = async move {
        let mut on_delta = move |d: StreamDelta| {
            let _ = tx.send(d);
        };
        provider.complete(request, &mut on_delta).await
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

/// Runs one tool call and records its result.
async fn run_tool(turn: &mut Turn, call: &ToolCall) -> Result<ToolOutcome, EmitError> {
    let started = Instant::now();
    let (tx, mut rx) = mpsc::unbounded_channel::<(OutputStream, String)>();
    let emitter = turn.emitter.clone();
    let call_id = call.call_id.clone();
    let run = async {
        // The sender lives in this closure, so the forwarder ends when the tool has finished.
        let mut on_output = move |stream: OutputStream, text: &str| {
            let _ = tx.send((stream, text.to_owned()));
        };
        let ctx = ToolCtx {
            workspace: &turn.env.workspace,
            sandbox: &mut turn.env.sandbox,
            reads: &mut turn.env.reads,
            on_output: &mut on_output,
            cancel: turn.cancel.clone(),
            default_timeout: turn.limits.bash_timeout,
        };
        tools::run(&call.name, &call.input, ctx).await
    };
    let forward = async {
        while let Some((stream, text)) = rx.recv().await {
            emitter
                .transient(EventKind::ToolOutputDelta { call_id: call_id.clone(), stream, text })
                .await?;
        }
        Ok::<(), EmitError>(())
    };
    let (outcome, forwarded) = tokio::join!(run, forward);
    forwarded?;
    turn.emitter
        .durable(EventKind::ToolResult {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            output: outcome.output.clone(),
            is_error: outcome.is_error,
            duration_ms: started.elapsed().as_millis() as u64,
        })
        .await?;
    Ok(outcome)
}

/// The system prompt of every turn.
pub fn system_prompt() -> String {
    SYSTEM_PROMPT.to_owned()
}

const SYSTEM_PROMPT: &str = "You are Outboard, a software engineering agent. You work for the \
user through tools, carefully and efficiently, and you finish with a short answer saying what you \
did.

Your environment:
- /workspace is this session's working directory and persists between turns. Relative paths in \
file tools are relative to /workspace. Read, Write, Edit, Glob and Grep act on /workspace only.
- Bash runs each command in an isolated Linux sandbox whose working directory is /workspace. The \
sandbox has no network access and an empty environment; files outside /workspace are not kept.
- Read a file before you Edit or overwrite it. Prefer Edit for small changes to existing files.
- Tool errors are returned to you as results: read them and correct your next call.";

/// Rebuilds the model's conversation from a session's durable log: user messages, assistant
/// messages with their tool calls, and tool results grouped into one user message per step.
pub fn conversation_from_log(events: &[outboard_shared::SessionEvent]) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    for event in events {
        match &event.kind {
            EventKind::UserMessage { text } => {
                push_user(&mut out, ContentBlock::Text(text.clone()));
            }
            EventKind::AssistantMessage { text, tool_calls } => {
                let mut content = Vec::new();
                if !text.is_empty() {
                    content.push(ContentBlock::Text(text.clone()));
                }
                for c in tool_calls {
                    content.push(ContentBlock::ToolUse {
                        id: c.call_id.clone(),
                        name: c.name.clone(),
                        input: c.input.clone(),
                    });
                }
                out.push(Message { role: Role::Assistant, content });
            }
            EventKind::ToolResult { call_id, output, is_error, .. } => {
                push_user(
                    &mut out,
                    ContentBlock::ToolResult {
                        tool_use_id: call_id.clone(),
                        content: output.clone(),
                        is_error: *is_error,
                    },
                );
            }
            _ => {}
        }
    }
    out
}

/// Appends a user block, merging it into the last message when that is a user message already
/// (tool results followed by the next prompt): both APIs want one user message per turn there.
pub fn push_user(conversation: &mut Vec<Message>, block: ContentBlock) {
    match conversation.last_mut() {
        Some(last) if last.role == Role::User => last.content.push(block),
        _ => conversation.push(Message { role: Role::User, content: vec![block] }),
    }
}
