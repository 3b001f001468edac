//! The loop's spans, exported over OTLP when the server has an exporter (`serve
//! --otlp-endpoint`): one `turn` (the root of its trace), and under it each `tool_call`,
//! `approval_wait` and `compaction` (the `model_call` spans are the model crate's own). Each
//! names its session and turn (`session.id`, `turn.id`), so a backend finds a session's turns
//! and a turn's calls by attribute as well as by the tree.
//!
//! What they carry is the figures the metrics count — tool names, outcomes, tokens, how the
//! sandbox started — never a prompt's text, a tool's input or output, or a secret. Only with
//! [`TurnLimits::span_content`](crate::TurnLimits) (`--otlp-content`) does a turn carry its
//! prompt (`prompt`) and a tool call its input (`tool.input`).
//!
//! This module sits below every module of the loop: it takes ids and calls, not a [`Turn`](crate::Turn),
//! so `compact` and `approve` can use it without an import circle. Building a span whose target
//! no subscriber wants costs one cached check; what a field needs computing (the prompt's text,
//! the sandbox's state) is computed only when the span is enabled.

use outboard_base::spans::TARGET;
use outboard_llm::{ContentBlock, Message, Role};
use outboard_shared::{
    ApprovalDecision, CompactionTrigger, SandboxState, SessionId, StopReason, ToolCall, TurnId,
    Usage,
};
use tracing::field::Empty;
use tracing::Span;

/// The span of a turn: the root of its own trace (a session's turns are separate traces, found
/// by `session.id`). `prompt`: the turn's user message, recorded only when
/// `content` (`--otlp-content`) allows it.
pub(crate) fn turn(
    session_id: &SessionId,
    turn_id: &TurnId,
    messages: &[Message],
    content: bool,
) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        parent: None,
        "turn",
        session.id = %session_id,
        turn.id = %turn_id,
        outcome = Empty,
        stop_reason = Empty,
        gen_ai.usage.input_tokens = Empty,
        gen_ai.usage.output_tokens = Empty,
        gen_ai.usage.cache_read.input_tokens = Empty,
        prompt = Empty,
        otel.status_code = Empty,
    );
    if content && !span.is_disabled() {
        if let Some(prompt) = last_prompt(messages) {
            span.record("prompt", prompt.as_str());
        }
    }
    span
}

/// The text a person wrote last: the text blocks of the newest user message (`None` when it
/// holds only tool results, as a resumed turn's may).
fn last_prompt(messages: &[Message]) -> Option<String> {
    let last = messages.iter().rev().find(|m| m.role == Role::User)?;
    let text: Vec<&str> = last
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    (!text.is_empty()).then(|| text.join("\n"))
}

/// How a turn ended, as its span records it.
pub(crate) enum TurnOutcome {
    Completed(StopReason),
    Failed,
    Suspended,
}

/// Records a turn's end and its tokens (summed over its model calls, subagents' included).
pub(crate) fn record_turn(span: &Span, outcome: TurnOutcome, usage: &Usage) {
    span.record("gen_ai.usage.input_tokens", usage.input_tokens);
    span.record("gen_ai.usage.output_tokens", usage.output_tokens);
    span.record("gen_ai.usage.cache_read.input_tokens", usage.cache_read_tokens);
    match outcome {
        TurnOutcome::Completed(stop) => {
            span.record("outcome", "completed");
            span.record("stop_reason", stop_reason(stop));
        }
        TurnOutcome::Failed => {
            span.record("outcome", "failed");
            span.record("otel.status_code", "ERROR");
        }
        TurnOutcome::Suspended => {
            span.record("outcome", "suspended");
        }
    }
}

fn stop_reason(stop: StopReason) -> &'static str {
    match stop {
        StopReason::EndTurn => "end_turn",
        StopReason::MaxTokens => "max_tokens",
        StopReason::StepLimit => "step_limit",
        StopReason::Interrupted => "interrupted",
        StopReason::Unknown => "unknown",
    }
}

/// The span of one tool call's run (its approval, if it waited for one, is a sibling
/// `approval_wait` with the same `gen_ai.tool.call.id`). `tool.input` only with `content`.
pub(crate) fn tool_call(
    session_id: &SessionId,
    turn_id: &TurnId,
    call: &ToolCall,
    content: bool,
) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "tool_call",
        session.id = %session_id,
        turn.id = %turn_id,
        gen_ai.tool.name = %call.name,
        gen_ai.tool.call.id = %call.call_id,
        outcome = Empty,
        sandbox.start = Empty,
        tool.input = Empty,
        otel.status_code = Empty,
    );
    if content && !span.is_disabled() {
        span.record("tool.input", call.input.to_string().as_str());
    }
    span
}

/// How a `Bash` call found the sandbox, from its state as the call began: `cold_start` (none
/// was running: the call starts one), `resume` (frozen: the call thaws it) or `warm`.
pub(crate) fn sandbox_start(state: SandboxState) -> Option<&'static str> {
    match state {
        SandboxState::Running => Some("warm"),
        SandboxState::Suspended => Some("resume"),
        SandboxState::None
        | SandboxState::Waiting
        | SandboxState::Provisioning
        | SandboxState::Dead
        | SandboxState::Stopped => Some("cold_start"),
        SandboxState::Unknown => None,
    }
}

/// Records how a tool call ended: `ok`, `error` (the result the model sees is an error, a
/// refusal included), or `suspended` (a subagent stopped for a shutdown).
pub(crate) fn record_tool(span: &Span, is_error: Option<bool>) {
    let outcome = match is_error {
        Some(false) => "ok",
        Some(true) => "error",
        None => "suspended",
    };
    span.record("outcome", outcome);
    if is_error == Some(true) {
        span.record("otel.status_code", "ERROR");
    }
}

/// The span of a wait for a person's answer to `call`.
pub(crate) fn approval_wait(session_id: &SessionId, turn_id: &TurnId, call: &ToolCall) -> Span {
    tracing::info_span!(
        target: TARGET,
        "approval_wait",
        session.id = %session_id,
        turn.id = %turn_id,
        gen_ai.tool.name = %call.name,
        gen_ai.tool.call.id = %call.call_id,
        outcome = Empty,
    )
}

/// How a wait ended: `allow`, `deny`, `interrupted` or `suspended` (`None`: no answer).
pub(crate) fn record_approval(span: &Span, decision: Option<ApprovalDecision>, suspended: bool) {
    let outcome = match (decision, suspended) {
        (_, true) => "suspended",
        (Some(ApprovalDecision::Allow), _) => "allow",
        (Some(ApprovalDecision::Deny), _) => "deny",
        (None, false) => "interrupted",
    };
    span.record("outcome", outcome);
}

/// The span of a compaction (its summary call is a `model_call` under it).
pub(crate) fn compaction(
    session_id: &SessionId,
    turn_id: &TurnId,
    trigger: CompactionTrigger,
) -> Span {
    tracing::info_span!(
        target: TARGET,
        "compaction",
        session.id = %session_id,
        turn.id = %turn_id,
        trigger = trigger.as_str(),
        tokens_before = Empty,
        tokens_after = Empty,
        outcome = Empty,
        otel.status_code = Empty,
    )
}

/// Records a compaction's end: its estimates before and after when it happened, and its
/// `outcome` (`ok`; `nothing`, `stopped`; `failed`, an error status).
pub(crate) fn record_compaction(span: &Span, tokens: Option<(u64, u64)>, outcome: &'static str) {
    if let Some((before, after)) = tokens {
        span.record("tokens_before", before);
        span.record("tokens_after", after);
    }
    span.record("outcome", outcome);
    if outcome == "failed" {
        span.record("otel.status_code", "ERROR");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(blocks: Vec<ContentBlock>) -> Message {
        Message { role: Role::User, content: blocks }
    }

    #[test]
    fn the_prompt_is_the_newest_user_text_and_never_a_tool_result() {
        let asked = user(vec![ContentBlock::Text("first".into())]);
        let answered =
            Message { role: Role::Assistant, content: vec![ContentBlock::Text("answer".into())] };
        let result = user(vec![ContentBlock::ToolResult {
            tool_use_id: "c1".into(),
            content: "output".into(),
            is_error: false,
        }]);
        let next =
            user(vec![ContentBlock::Text("second".into()), ContentBlock::Text("more".into())]);
        assert_eq!(last_prompt(&[asked.clone(), answered.clone()]).as_deref(), Some("first"));
        assert_eq!(last_prompt(&[asked.clone(), answered.clone(), result]), None);
        assert_eq!(last_prompt(&[asked, answered, next]).as_deref(), Some("second\nmore"));
        assert_eq!(last_prompt(&[]), None);
    }

    #[test]
    fn a_bash_call_names_how_it_found_the_sandbox() {
        assert_eq!(sandbox_start(SandboxState::None), Some("cold_start"));
        assert_eq!(sandbox_start(SandboxState::Stopped), Some("cold_start"));
        assert_eq!(sandbox_start(SandboxState::Suspended), Some("resume"));
        assert_eq!(sandbox_start(SandboxState::Running), Some("warm"));
        assert_eq!(sandbox_start(SandboxState::Unknown), None);
    }
}
