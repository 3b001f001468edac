//! Where the loop fires hooks, and what their answers do there:
//!
//! | event | when | exit 2 / `decision: block` | context |
//! |---|---|---|---|
//! | `SessionStart` (`source: startup`) | before the first model call of a session | logged | for the model |
//! | `UserPromptSubmit` | before the first model call of each turn | the turn fails with the reason; the model is not called | for the model |
//! | `PreToolUse` | before the org's policy judges a call | the call is refused, the reason is its result | with the result |
//! | `PostToolUse` / `PostToolUseFailure` | after a call, before its result is recorded | the reason is added to the result | with the result |
//! | `Stop` | when the model ends the turn | the reason goes to the model and the loop goes on | — |

use outboard_hooks::{input, Answer, Decision, HookEvent};
use outboard_llm::ContentBlock;
use outboard_shared::{EventKind, ToolCall};
use outboard_tools::ToolOutcome;
use serde_json::json;

use crate::sink::EmitError;
use crate::state::{Ending, Role, Turn};

/// Times one turn's `Stop` hooks may send the model back to work.
pub const MAX_STOP_BLOCKS: u32 = 8;

fn base(turn: &Turn, event: HookEvent) -> serde_json::Map<String, serde_json::Value> {
    let plan = turn.approvals.gate.mode() == outboard_shared::SessionMode::Plan;
    input::base(event, turn.session_id.as_str(), plan)
}

/// Adds `text` to the conversation as a durable `system_reminder`.
async fn remind(turn: &mut Turn, text: String) -> Result<(), EmitError> {
    let seq = turn.emitter.durable(EventKind::SystemReminder { text: text.clone() }).await?;
    turn.conversation.push_user(seq, ContentBlock::Text(text));
    Ok(())
}

/// Logs the notes kept since the last call (see the module header of `hooks`).
pub async fn flush(turn: &mut Turn) -> Result<(), EmitError> {
    let Some(text) = turn.hooks.take_notes() else { return Ok(()) };
    let text = turn.env.scrub.scrub_str(&text).into_owned();
    remind(turn, text).await
}

async fn context(turn: &mut Turn, event: HookEvent, answer: &Answer) -> Result<(), EmitError> {
    if answer.context.is_empty() {
        return Ok(());
    }
    let text = format!(
        "<system-reminder>\n{event} hook additional context: {}\n</system-reminder>",
        answer.context.join("\n")
    );
    remind(turn, text).await
}

/// At the start of the session's loop: reads the hooks; in a turn that starts fresh, fires
/// `SessionStart` (the session's first turn) and `UserPromptSubmit`. `Some`: the turn ends so.
pub async fn turn_start(turn: &mut Turn) -> Result<Option<Ending>, EmitError> {
    if !matches!(turn.role, Role::Main) {
        return Ok(None);
    }
    turn.hooks = super::run::load(turn).await;
    let fresh = turn.resume.steps_used == 0 && turn.resume.pending.is_empty();
    if !fresh {
        return Ok(None);
    }
    if turn.conversation.messages().len() == 1
        && turn.hooks.any(HookEvent::SessionStart, Some("startup"))
    {
        let body = input::with(base(turn, HookEvent::SessionStart), "source", json!("startup"));
        let answer = super::run::fire(turn, HookEvent::SessionStart, Some("startup"), body).await;
        context(turn, HookEvent::SessionStart, &answer).await?;
    }
    if turn.hooks.any(HookEvent::UserPromptSubmit, None) {
        let prompt = turn
            .conversation
            .messages()
            .last()
            .and_then(|m| {
                m.content.iter().rev().find_map(|b| match b {
                    ContentBlock::Text(t) => Some(t.clone()),
                    _ => None,
                })
            })
            .unwrap_or_default();
        let body = input::with(base(turn, HookEvent::UserPromptSubmit), "prompt", json!(prompt));
        let answer = super::run::fire(turn, HookEvent::UserPromptSubmit, None, body).await;
        if let Decision::Block(reason) = &answer.decision {
            flush(turn).await?;
            return Ok(Some(Ending::Failed(
                format!("A UserPromptSubmit hook blocked this prompt: {reason}"),
                outboard_shared::FailureClass::Other,
            )));
        }
        if let Some(reason) = &answer.stop {
            flush(turn).await?;
            return Ok(Some(Ending::Failed(
                format!("A UserPromptSubmit hook stopped the turn: {reason}"),
                outboard_shared::FailureClass::Other,
            )));
        }
        context(turn, HookEvent::UserPromptSubmit, &answer).await?;
    }
    flush(turn).await?;
    Ok(None)
}

/// Before the org's policy judges `call`: the call as the hooks leave it (`updatedInput`),
/// or the result that refuses it.
pub async fn pre_tool(turn: &Turn, mut call: ToolCall) -> (ToolCall, Option<ToolOutcome>) {
    if !turn.hooks.any(HookEvent::PreToolUse, Some(&call.name)) {
        return (call, None);
    }
    let body = input::tool(
        base(turn, HookEvent::PreToolUse),
        &call.name,
        &call.input,
        &call.call_id,
        None,
    );
    let answer = super::run::fire(turn, HookEvent::PreToolUse, Some(&call.name), body).await;
    if let Decision::Block(reason) = answer.decision {
        let mut text = format!("A PreToolUse hook refused this call: {reason}");
        for c in &answer.context {
            text.push_str("\n\n");
            text.push_str(c);
        }
        return (call, Some(ToolOutcome::error(text)));
    }
    if let Some(reason) = answer.stop {
        return (
            call,
            Some(ToolOutcome::error(format!("A PreToolUse hook stopped this call: {reason}"))),
        );
    }
    if let Some(input) = answer.updated_input {
        call.input = input;
    }
    (call, None)
}

/// After `call` ran: `PostToolUse` (or `PostToolUseFailure` for an error), whose block
/// reason and context are added to the result the model gets.
pub async fn post_tool(turn: &Turn, call: &ToolCall, outcome: &mut ToolOutcome) {
    let event = match outcome.is_error {
        false => HookEvent::PostToolUse,
        true => HookEvent::PostToolUseFailure,
    };
    if !turn.hooks.any(event, Some(&call.name)) {
        return;
    }
    let response = Some((outcome.output.as_str(), outcome.is_error));
    let body = input::tool(base(turn, event), &call.name, &call.input, &call.call_id, response);
    let answer = super::run::fire(turn, event, Some(&call.name), body).await;
    let mut add = Vec::new();
    if let Decision::Block(reason) = answer.decision {
        add.push(format!("{event} hook feedback: {reason}"));
    }
    if let Some(reason) = answer.stop {
        add.push(format!("{event} hook asks to stop: {reason}"));
    }
    add.extend(answer.context.into_iter().map(|c| format!("{event} hook additional context: {c}")));
    for text in add {
        if !outcome.output.is_empty() {
            outcome.output.push_str("\n\n");
        }
        outcome.output.push_str(&text);
    }
}

/// When the model ends the turn: the reason to go on when a `Stop` hook blocks (at most
/// [`MAX_STOP_BLOCKS`] times a turn), added to the conversation.
pub async fn stop(turn: &mut Turn, blocked_before: u32) -> Result<bool, EmitError> {
    if !matches!(turn.role, Role::Main) || !turn.hooks.any(HookEvent::Stop, None) {
        return Ok(false);
    }
    let body =
        input::with(base(turn, HookEvent::Stop), "stop_hook_active", json!(blocked_before > 0));
    let answer = super::run::fire(turn, HookEvent::Stop, None, body).await;
    let go_on = match (&answer.decision, &answer.stop) {
        (Decision::Block(reason), None) if blocked_before < MAX_STOP_BLOCKS => {
            let text =
                format!("<system-reminder>\nStop hook feedback: {reason}\n</system-reminder>");
            remind(turn, text).await?;
            true
        }
        (Decision::Block(_), None) => {
            turn.hooks.note(format!(
                "Stop hooks blocked {MAX_STOP_BLOCKS} times this turn; the turn ends"
            ));
            false
        }
        _ => false,
    };
    flush(turn).await?;
    Ok(go_on)
}
