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
//! A tool's name and a call's id are written by the model too: a name is exported only when it
//! is one of the tools the loop offered (else [`UNKNOWN_TOOL`], unless `--otlp-content`), and
//! both are cut to [`MAX_NAME_BYTES`]; an id that is not a plain token of letters, digits,
//! `_`, `-`, `.` and `:` is exported as [`ODD_CALL_ID`] (ids are the provider's, such as
//! `toolu_…`, `call_…`).
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

/// What an exported span names a tool the loop did not offer (a name the model made up), unless
/// `--otlp-content` allows the model's text.
pub(crate) const UNKNOWN_TOOL: &str = "unknown_tool";

/// What an exported span names a call whose id is not a plain token.
pub(crate) const ODD_CALL_ID: &str = "odd_call_id";

/// The longest tool name or call id exported, in bytes (longer ones are cut at a character's
/// boundary).
pub(crate) const MAX_NAME_BYTES: usize = 64;

/// `name` as a span exports it: one of `offered`, or with `content` any name, cut to
/// [`MAX_NAME_BYTES`]; else [`UNKNOWN_TOOL`].
fn exported_tool<'a>(name: &'a str, offered: &[String], content: bool) -> &'a str {
    if content || offered.iter().any(|o| o == name) {
        cut(name)
    } else {
        UNKNOWN_TOOL
    }
}

/// A call's id as a span exports it: a plain token cut to [`MAX_NAME_BYTES`], else
/// [`ODD_CALL_ID`].
fn exported_call_id(id: &str) -> &str {
    let plain = !id.is_empty()
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'));
    if plain {
        cut(id)
    } else {
        ODD_CALL_ID
    }
}

/// `text` cut to at most [`MAX_NAME_BYTES`] bytes, at a character's boundary.
fn cut(text: &str) -> &str {
    let mut end = text.len().min(MAX_NAME_BYTES);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

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
/// `approval_wait` with the same `gen_ai.tool.call.id`). `tool.input` only with `content`;
/// the tool's name only when it is one of `offered` or with `content`.
pub(crate) fn tool_call(
    session_id: &SessionId,
    turn_id: &TurnId,
    call: &ToolCall,
    offered: &[String],
    content: bool,
) -> Span {
    let span = tracing::info_span!(
        target: TARGET,
        "tool_call",
        session.id = %session_id,
        turn.id = %turn_id,
        gen_ai.tool.name = exported_tool(&call.name, offered, content),
        gen_ai.tool.call.id = exported_call_id(&call.call_id),
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

/// The span of a wait for a person's answer to `call` (its names as in [`tool_call`]).
pub(crate) fn approval_wait(
    session_id: &SessionId,
    turn_id: &TurnId,
    call: &ToolCall,
    offered: &[String],
    content: bool,
) -> Span {
    tracing::info_span!(
        target: TARGET,
        "approval_wait",
        session.id = %session_id,
        turn.id = %turn_id,
        gen_ai.tool.name = exported_tool(&call.name, offered, content),
        gen_ai.tool.call.id = exported_call_id(&call.call_id),
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
    fn only_offered_tool_names_and_plain_ids_are_exported_and_bounded() {
        let offered = vec!["Bash".to_owned(), "mcp__gh__create_issue".to_owned()];
        assert_eq!(exported_tool("Bash", &offered, false), "Bash");
        assert_eq!(
            exported_tool("mcp__gh__create_issue", &offered, false),
            "mcp__gh__create_issue"
        );
        let made_up = "the user's password is hunter2";
        assert_eq!(exported_tool(made_up, &offered, false), UNKNOWN_TOOL);
        assert_eq!(exported_tool(made_up, &offered, true), made_up);
        let long = "é".repeat(100);
        let cut_name = exported_tool(&long, &offered, true);
        assert!(cut_name.len() <= MAX_NAME_BYTES && long.starts_with(cut_name));
        assert_eq!(cut_name.len(), MAX_NAME_BYTES);
        assert_eq!(exported_call_id("toolu_01AbC-x.y:z"), "toolu_01AbC-x.y:z");
        assert_eq!(exported_call_id("id with words"), ODD_CALL_ID);
        assert_eq!(exported_call_id("\u{1b}]52;c;x\u{7}"), ODD_CALL_ID);
        assert_eq!(exported_call_id(""), ODD_CALL_ID);
        assert_eq!(exported_call_id(&"a".repeat(200)).len(), MAX_NAME_BYTES);
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
