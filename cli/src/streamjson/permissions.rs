//! Who answers a tool call that the org's policy asks a person about (an `approval_requested`
//! event): the flags decide some at once (`--allowedTools`, `--permission-mode`), the program
//! answers the rest when it asked for them with `--permission-prompt-tool stdio` (a
//! `can_use_tool` control request), and without it they are denied, as Claude Code's headless
//! mode denies what it cannot ask about.
//!
//! Outboard runs a call with the input the model gave, as the policy judged it: an `allow` whose
//! `updatedInput` changes the input is turned into a denial that says so, never into a different
//! call than the one judged.

use outboard_shared::{ApprovalDecision, ApprovalKind, Question};
use serde_json::{json, Value};

use super::options::PermissionMode;

/// Tools whose calls `acceptEdits` allows.
pub const EDIT_TOOLS: &[&str] = &["Write", "Edit", "MultiEdit", "NotebookEdit"];

/// How long a `can_use_tool` request waits for the program's answer before the call is denied.
pub const ASK_DEADLINE: std::time::Duration = std::time::Duration::from_secs(600);

/// What the denial says when nobody is asked.
pub const NOBODY_TO_ASK: &str = "this is Outboard's stream-json mode without \
    `--permission-prompt-tool stdio` (a `can_use_tool` callback), so nobody is there to approve \
    the call; the program can set a permission callback, or `--allowedTools`";

/// The reason for calls `dontAsk` denies.
pub const DONT_ASK: &str = "the permission mode is dontAsk: calls that need approval are denied";

/// What the flags decide about one approval request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Run it.
    Allow,
    /// Refuse it, with this reason for the model.
    Deny(String),
    /// Send a `can_use_tool` request to the program.
    Ask,
}

/// The settings [`judge`] reads.
#[derive(Debug, Clone, Copy)]
pub struct Rules<'a> {
    /// The current permission mode.
    pub mode: PermissionMode,
    /// Whether the program answers `can_use_tool`.
    pub ask_stdio: bool,
    /// `--allowedTools` names.
    pub allowed: &'a [String],
}

/// The verdict on a request for `name` of `kind`; `unjudged` is why the org's rules could not
/// judge part of it (then only a person, or the program, may allow it).
pub fn judge(rules: Rules<'_>, name: &str, kind: ApprovalKind, unjudged: bool) -> Verdict {
    let fallback = || {
        if rules.ask_stdio {
            Verdict::Ask
        } else {
            Verdict::Deny(NOBODY_TO_ASK.to_owned())
        }
    };
    if kind != ApprovalKind::Tool {
        // A plan or questions: only the program can answer them.
        return fallback();
    }
    if rules.mode == PermissionMode::DontAsk {
        return Verdict::Deny(DONT_ASK.to_owned());
    }
    if unjudged {
        return fallback();
    }
    let allowed = rules.allowed.iter().any(|t| t == name)
        || rules.mode == PermissionMode::BypassPermissions
        || (rules.mode == PermissionMode::AcceptEdits && EDIT_TOOLS.contains(&name));
    if allowed {
        Verdict::Allow
    } else {
        fallback()
    }
}

/// The `can_use_tool` control request for a call (`tool_name` and `input` as the SDK's callback
/// receives them; a plan as `ExitPlanMode` with `plan`, questions as `AskUserQuestion`).
pub fn can_use_tool(request_id: &str, name: &str, input: &Value, call_id: &str) -> Value {
    json!({
        "type": "control_request",
        "request_id": request_id,
        "request": {
            "subtype": "can_use_tool",
            "tool_name": name,
            "input": input,
            "permission_suggestions": [],
            "tool_use_id": call_id,
        },
    })
}

/// The answer to send the server for the program's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// Allow or deny.
    pub decision: ApprovalDecision,
    /// A denial's reason.
    pub reason: Option<String>,
    /// The answers to questions (`AskUserQuestion` allowed with `updatedInput.answers`).
    pub answers: Option<Vec<String>>,
    /// The program asked to stop the turn too (`interrupt: true` on a deny).
    pub interrupt: bool,
    /// A note for stderr (an `updatedInput` that could not be used).
    pub note: Option<String>,
}

fn deny(reason: impl Into<String>) -> Answer {
    Answer {
        decision: ApprovalDecision::Deny,
        reason: Some(reason.into()),
        answers: None,
        interrupt: false,
        note: None,
    }
}

/// Reads the program's answer to `can_use_tool` about a request of `kind` with `input`.
pub fn answer(
    outcome: Result<Value, String>,
    kind: ApprovalKind,
    input: &Value,
    questions: Option<&[Question]>,
) -> Answer {
    let response = match outcome {
        Ok(response) => response,
        Err(error) => return deny(format!("the program's permission callback failed: {error}")),
    };
    match response.get("behavior").and_then(Value::as_str) {
        Some("allow") => {}
        Some("deny") => {
            let message = response.get("message").and_then(Value::as_str).unwrap_or("");
            let message = if message.is_empty() { "denied by the program" } else { message };
            let mut answer = deny(message);
            answer.interrupt = response.get("interrupt").and_then(Value::as_bool) == Some(true);
            return answer;
        }
        _ => return deny("the program's permission answer had no behavior allow or deny"),
    }
    let updated = response.get("updatedInput").filter(|v| !v.is_null());
    if kind == ApprovalKind::Question {
        let answers = updated.and_then(|u| u.get("answers")).and_then(|a| {
            questions?.iter().map(|q| a.get(&q.question)?.as_str().map(str::to_owned)).collect()
        });
        return match answers {
            Some(answers) => Answer {
                decision: ApprovalDecision::Allow,
                reason: None,
                answers: Some(answers),
                interrupt: false,
                note: None,
            },
            None => deny(
                "the program allowed AskUserQuestion without `updatedInput.answers` (an \
                 object of question → answer for every question): the questions stay unanswered",
            ),
        };
    }
    if let Some(updated) = updated.filter(|u| *u != input && kind == ApprovalKind::Tool) {
        let _ = updated;
        let mut answer = deny(
            "the program allowed this call with a changed input, which Outboard does not run \
             (it runs calls as the org's policy judged them): make the call again with that \
             input if it is still wanted",
        );
        answer.note = Some(
            "outboard: an allow with a changed updatedInput was turned into a denial: Outboard \
             runs only the input the org's policy judged"
                .to_owned(),
        );
        return answer;
    }
    Answer {
        decision: ApprovalDecision::Allow,
        reason: None,
        answers: None,
        interrupt: false,
        note: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn rules(mode: PermissionMode, ask_stdio: bool, allowed: &[String]) -> Rules<'_> {
        Rules { mode, ask_stdio, allowed }
    }

    #[test]
    fn the_flags_decide_first_then_the_program() {
        let read = vec!["Read".to_owned()];
        let t = ApprovalKind::Tool;
        assert_eq!(
            judge(rules(PermissionMode::Default, true, &read), "Read", t, false),
            Verdict::Allow
        );
        assert_eq!(
            judge(rules(PermissionMode::Default, true, &read), "Bash", t, false),
            Verdict::Ask
        );
        assert_eq!(
            judge(rules(PermissionMode::Default, true, &read), "Read", t, true),
            Verdict::Ask
        );
        assert_eq!(
            judge(rules(PermissionMode::Default, false, &read), "Bash", t, false),
            Verdict::Deny(NOBODY_TO_ASK.into())
        );
        assert_eq!(
            judge(rules(PermissionMode::AcceptEdits, true, &[]), "Edit", t, false),
            Verdict::Allow
        );
        assert_eq!(
            judge(rules(PermissionMode::AcceptEdits, true, &[]), "Bash", t, false),
            Verdict::Ask
        );
        assert_eq!(
            judge(rules(PermissionMode::BypassPermissions, false, &[]), "Bash", t, false),
            Verdict::Allow
        );
        assert_eq!(
            judge(rules(PermissionMode::DontAsk, true, &read), "Read", t, false),
            Verdict::Deny(DONT_ASK.into())
        );
        assert_eq!(
            judge(
                rules(PermissionMode::BypassPermissions, true, &[]),
                "x",
                ApprovalKind::Plan,
                false
            ),
            Verdict::Ask
        );
    }

    #[test]
    fn the_programs_answers() {
        let input = json!({"command": "ls"});
        let allow = json!({"behavior": "allow", "updatedInput": {"command": "ls"}});
        assert_eq!(
            answer(Ok(allow), ApprovalKind::Tool, &input, None).decision,
            ApprovalDecision::Allow
        );
        let changed = json!({"behavior": "allow", "updatedInput": {"command": "rm -rf /"}});
        let got = answer(Ok(changed), ApprovalKind::Tool, &input, None);
        assert_eq!(got.decision, ApprovalDecision::Deny);
        assert!(got.note.is_some());
        let no = json!({"behavior": "deny", "message": "not today", "interrupt": true});
        let got = answer(Ok(no), ApprovalKind::Tool, &input, None);
        assert_eq!((got.reason.as_deref(), got.interrupt), (Some("not today"), true));
        let failed = answer(Err("boom".into()), ApprovalKind::Tool, &input, None);
        assert_eq!(
            failed.reason.as_deref(),
            Some("the program's permission callback failed: boom")
        );
    }

    #[test]
    fn questions_are_answered_through_updated_input() {
        let q = Question {
            question: "Which?".into(),
            header: String::new(),
            options: vec![],
            multi_select: false,
        };
        let allow =
            json!({"behavior": "allow", "updatedInput": {"answers": {"Which?": "the red one"}}});
        let got =
            answer(Ok(allow), ApprovalKind::Question, &json!({}), Some(std::slice::from_ref(&q)));
        assert_eq!(got.answers, Some(vec!["the red one".to_owned()]));
        let bare = json!({"behavior": "allow", "updatedInput": {}});
        let got = answer(Ok(bare), ApprovalKind::Question, &json!({}), Some(&[q]));
        assert_eq!(got.decision, ApprovalDecision::Deny);
    }
}
