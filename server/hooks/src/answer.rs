//! What a hook's run means: Claude Code's exit codes and JSON output, per event, and how the
//! answers of the hooks that ran together combine.
//!
//! - exit 0: success; stdout is read as JSON when it starts with `{` (a `{` that does not parse
//!   is a failure), else for `UserPromptSubmit` and `SessionStart` it is context for the model.
//! - exit 2: blocks, with stderr as the reason: the tool call is refused (`PreToolUse`), the
//!   prompt is refused (`UserPromptSubmit`), the model goes on (`Stop`), the model is told
//!   (`PostToolUse*`, the tool already ran); other events only log it.
//! - any other exit, a crash, a timeout, an answer that is not JSON: a failure, logged, let
//!   through unless the hook says `onFailure: "block"` (an org hook always blocks).

use serde_json::Value;

use crate::event::HookEvent;

/// The most of a reason or a context text kept (Claude Code's cut for hook output).
pub const MAX_TEXT_CHARS: usize = 10_000;

/// How a run ended, as the runner saw it (stdout and stderr already bounded by the runner).
#[derive(Debug, Clone, Default)]
pub struct RunResult {
    /// `None` when it did not exit by itself.
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Why it did not finish (a timeout, a signal, could not start, an HTTP error): a sentence.
    pub failure: Option<String>,
}

/// What the hooks decided.
#[derive(Debug, Clone, PartialEq, Eq, Default, PartialOrd, Ord)]
pub enum Decision {
    /// Nothing said.
    #[default]
    None,
    /// `permissionDecision: "allow"` (does not lift the org's `ask` or `deny`).
    Allow,
    /// `permissionDecision: "ask"`.
    Ask,
    /// Blocked, with the reason for the model (or the person).
    Block(String),
}

/// A failure worth a line in the session log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// What happened, a sentence.
    pub what: String,
    /// Whether it blocked (`onFailure: "block"`, an org hook) or was let through.
    pub blocked: bool,
}

/// One hook's answer, or several combined by [`Answer::merge`].
#[derive(Debug, Clone, Default)]
pub struct Answer {
    pub decision: Decision,
    /// `hookSpecificOutput.updatedInput` (`PreToolUse`).
    pub updated_input: Option<Value>,
    /// Text for the model: `additionalContext`, or stdout where it is context.
    pub context: Vec<String>,
    /// `continue: false`: the turn stops, with `stopReason`.
    pub stop: Option<String>,
    /// `systemMessage`: shown to the person (logged).
    pub system_message: Option<String>,
    pub failures: Vec<Failure>,
}

fn cut(text: &str) -> String {
    let text = text.trim();
    match text.char_indices().nth(MAX_TEXT_CHARS) {
        Some((i, _)) => format!("{}… [cut at {MAX_TEXT_CHARS} characters]", &text[..i]),
        None => text.to_owned(),
    }
}

/// What `result` means for `event`; `block_on_failure`: a failure blocks; `name`: how the
/// reason names the hook.
pub fn interpret(
    event: HookEvent,
    block_on_failure: bool,
    name: &str,
    result: &RunResult,
) -> Answer {
    let fail = |what: String| {
        let mut answer = Answer::default();
        if block_on_failure {
            answer.decision = Decision::Block(format!("Blocked: {name} failed ({what})."));
        }
        answer.failures.push(Failure { what, blocked: block_on_failure });
        answer
    };
    if let Some(why) = &result.failure {
        return fail(why.clone());
    }
    match result.exit_code {
        Some(0) => {}
        Some(2) => {
            let mut reason = cut(&result.stderr);
            if reason.is_empty() {
                reason = format!("Blocked by {name}.");
            }
            let mut answer = Answer::default();
            match event {
                HookEvent::PreToolUse
                | HookEvent::PermissionRequest
                | HookEvent::UserPromptSubmit
                | HookEvent::Stop
                | HookEvent::SubagentStop
                | HookEvent::PostToolUse
                | HookEvent::PostToolUseFailure => answer.decision = Decision::Block(reason),
                _ => answer.system_message = Some(reason),
            }
            return answer;
        }
        Some(code) => {
            let stderr = cut(&result.stderr);
            let tail = if stderr.is_empty() { String::new() } else { format!(": {stderr}") };
            return fail(format!("exited with {code}{tail}"));
        }
        None => return fail("ended without an exit code".into()),
    }
    let stdout = result.stdout.trim();
    if stdout.starts_with('{') {
        return match serde_json::from_str::<Value>(stdout) {
            Ok(Value::Object(map)) => json_answer(event, &map),
            _ => fail(format!(
                "its output starts with `{{` but is not a JSON object ({} bytes)",
                stdout.len()
            )),
        };
    }
    let mut answer = Answer::default();
    if matches!(event, HookEvent::UserPromptSubmit | HookEvent::SessionStart) && !stdout.is_empty()
    {
        answer.context.push(cut(stdout));
    }
    answer
}

fn json_answer(event: HookEvent, map: &serde_json::Map<String, Value>) -> Answer {
    let text = |v: Option<&Value>| v.and_then(Value::as_str).map(cut).filter(|s| !s.is_empty());
    let mut answer = Answer::default();
    if map.get("continue") == Some(&Value::Bool(false)) {
        answer.stop =
            Some(text(map.get("stopReason")).unwrap_or_else(|| "Stopped by a hook.".into()));
    }
    answer.system_message = text(map.get("systemMessage"));
    let reason = text(map.get("reason"));
    match map.get("decision").and_then(Value::as_str) {
        Some("block") => {
            answer.decision = Decision::Block(reason.unwrap_or_else(|| "Blocked by a hook.".into()))
        }
        // The older PreToolUse spelling.
        Some("approve") if event == HookEvent::PreToolUse => answer.decision = Decision::Allow,
        _ => {}
    }
    if let Some(Value::Object(specific)) = map.get("hookSpecificOutput") {
        if event == HookEvent::PreToolUse || event == HookEvent::PermissionRequest {
            let why = text(specific.get("permissionDecisionReason"));
            match specific.get("permissionDecision").and_then(Value::as_str) {
                Some("deny") => {
                    answer.decision =
                        Decision::Block(why.unwrap_or_else(|| "Denied by a hook.".into()))
                }
                Some("ask") => answer.decision = answer.decision.clone().max(Decision::Ask),
                Some("allow") => answer.decision = answer.decision.clone().max(Decision::Allow),
                _ => {}
            }
            if let Some(input) = specific.get("updatedInput").filter(|v| v.is_object()) {
                answer.updated_input = Some(input.clone());
            }
        }
        if let Some(context) = text(specific.get("additionalContext")) {
            answer.context.push(context);
        }
    }
    answer
}

impl Answer {
    /// The answers of hooks that ran together: the strongest decision (block > ask > allow;
    /// the reasons of every block, one a line), every context in order, the first stop, the
    /// last `updatedInput`.
    pub fn merge(answers: Vec<Answer>) -> Answer {
        let mut out = Answer::default();
        let mut reasons = Vec::new();
        for a in answers {
            match a.decision {
                Decision::Block(r) => reasons.push(r),
                d => out.decision = out.decision.max(d),
            }
            if a.updated_input.is_some() {
                out.updated_input = a.updated_input;
            }
            out.context.extend(a.context);
            if out.stop.is_none() {
                out.stop = a.stop;
            }
            if let Some(m) = a.system_message {
                out.system_message = Some(match out.system_message.take() {
                    Some(before) => format!("{before}\n{m}"),
                    None => m,
                });
            }
            out.failures.extend(a.failures);
        }
        if !reasons.is_empty() {
            out.decision = Decision::Block(reasons.join("\n"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(code: i32, stdout: &str, stderr: &str) -> RunResult {
        RunResult {
            exit_code: Some(code),
            stdout: stdout.into(),
            stderr: stderr.into(),
            failure: None,
        }
    }

    #[test]
    fn exit_codes_mean_what_they_mean_in_claude_code() {
        let pre = HookEvent::PreToolUse;
        let a = interpret(pre, false, "h", &run(2, "", "no rm -rf\n"));
        assert_eq!(a.decision, Decision::Block("no rm -rf".into()));
        let a = interpret(pre, false, "h", &run(1, "", "oops"));
        assert_eq!(a.decision, Decision::None);
        assert_eq!(a.failures[0].what, "exited with 1: oops");
        let a = interpret(pre, true, "h", &run(1, "", "oops"));
        assert!(matches!(a.decision, Decision::Block(r) if r.contains("h failed")));
        let a = interpret(HookEvent::UserPromptSubmit, false, "h", &run(0, "ctx\n", ""));
        assert_eq!(a.context, vec!["ctx".to_owned()]);
        let a = interpret(HookEvent::PostToolUse, false, "h", &run(0, "ignored", ""));
        assert!(a.context.is_empty());
        let timed = RunResult { failure: Some("timed out after 1s".into()), ..Default::default() };
        assert_eq!(interpret(pre, false, "h", &timed).decision, Decision::None);
    }

    #[test]
    fn json_output_is_read_and_bad_json_is_a_failure() {
        let pre = HookEvent::PreToolUse;
        let out = r#"{"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "permissionDecision": "deny", "permissionDecisionReason": "not here",
            "additionalContext": "see docs"}, "systemMessage": "hi"}"#;
        let a = interpret(pre, false, "h", &run(0, out, ""));
        assert_eq!(a.decision, Decision::Block("not here".into()));
        assert_eq!(a.context, vec!["see docs".to_owned()]);
        assert_eq!(a.system_message.as_deref(), Some("hi"));
        let out = r#"{"hookSpecificOutput": {"permissionDecision": "allow",
            "updatedInput": {"command": "ls"}}, "continue": false, "stopReason": "done"}"#;
        let a = interpret(pre, false, "h", &run(0, out, ""));
        assert_eq!(a.decision, Decision::Allow);
        assert_eq!(a.updated_input, Some(serde_json::json!({"command": "ls"})));
        assert_eq!(a.stop.as_deref(), Some("done"));
        let a = interpret(
            HookEvent::Stop,
            false,
            "h",
            &run(0, r#"{"decision": "block", "reason": "tests fail"}"#, ""),
        );
        assert_eq!(a.decision, Decision::Block("tests fail".into()));
        let a = interpret(pre, false, "h", &run(0, "{not json", ""));
        assert!(a.failures[0].what.contains("not a JSON object"), "{a:?}");
        let merged = Answer::merge(vec![
            interpret(
                pre,
                false,
                "a",
                &run(0, r#"{"hookSpecificOutput": {"permissionDecision": "allow"}}"#, ""),
            ),
            interpret(pre, false, "b", &run(2, "", "first")),
            interpret(pre, false, "c", &run(2, "", "second")),
        ]);
        assert_eq!(merged.decision, Decision::Block("first\nsecond".into()));
        let long = "x".repeat(MAX_TEXT_CHARS + 5);
        let a = interpret(pre, false, "h", &run(2, "", &long));
        assert!(
            matches!(a.decision, Decision::Block(r) if r.ends_with("[cut at 10000 characters]"))
        );
    }
}
