//! Plan mode in the loop: calls judged by the session's mode when they are made
//! ([`crate::approve::settled`] asks `tools::plan` first), the model told of the mode in its conversation ([`remind`]), and the two tools that wait for
//! a person — `ExitPlanMode` (the plan saved as an org file, approved or sent back with a
//! reason) and `AskUserQuestion` (answered, or declined) — through the session's approval gate
//! ([`settle`]).
//!
//! The mode lives in the session's [`crate::approvals::Gate`], which the actor, the turn and its
//! subagents share: a subagent judges its calls by the same mode, and a switch made while a turn
//! runs holds from its next call. The system prompt and the tool list do not change with the
//! mode (the provider's prompt cache); the model learns of it from a `<system-reminder>`
//! added to its conversation before its next step, durable like every reminder, so a replay
//! rebuilds the same conversation and knows what the model was told.
//!
//! Durability: the request (`approval_requested` with `kind: plan|question`) is written before
//! the call waits, the answer (`approval_resolved`) and, for an approved plan, the
//! `mode_changed` before its result; a restart finds each step in the log and does not ask twice
//! or save the plan twice.

use outboard_llm::ContentBlock;
use outboard_shared::{ApprovalDecision, ApprovalKind, EventKind, Question, SessionMode, ToolCall};
use outboard_tools::plan::{self as tools_plan, ASK_USER_QUESTION, EXIT_PLAN_MODE};
use outboard_tools::ToolOutcome;

use crate::approvals::{Answer, Recorded, PLAN_OFF, PLAN_ON};
use crate::approve::{wait, Waited};
use crate::sink::EmitError;
use crate::state::{not_run, Role, Turn};

/// Whether `name` is one of the tools that wait for a person, run by [`settle`].
pub fn is_interactive(name: &str) -> bool {
    name == EXIT_PLAN_MODE || name == ASK_USER_QUESTION
}

/// Tells the model of the session's mode before a step of the main loop, when it changed since
/// it was last told: a durable reminder at the end of the conversation (the cached prefix stays).
pub(crate) async fn remind(turn: &mut Turn) -> Result<(), EmitError> {
    let Some(mode) = turn.approvals.gate.mode_to_tell() else { return Ok(()) };
    let text = match mode {
        SessionMode::Plan => PLAN_ON,
        SessionMode::Default => PLAN_OFF,
    };
    let seq = turn.emitter.durable(EventKind::SystemReminder { text: text.into() }).await?;
    turn.conversation.push_user(seq, ContentBlock::Text(text.into()));
    Ok(())
}

/// Settles a call of `ExitPlanMode` or `AskUserQuestion` by the session's own loop (a
/// subagent's is refused as a tool it lacks): its result, or `None` when the server shuts down
/// while it waits. `recorded`: what the log holds of its request after a restart.
pub(crate) async fn settle(
    turn: &Turn,
    call: &ToolCall,
    recorded: Option<Recorded>,
) -> Result<Option<ToolOutcome>, EmitError> {
    if call.name == EXIT_PLAN_MODE {
        exit_plan_mode(turn, call, recorded).await
    } else {
        ask(turn, call, recorded).await
    }
}

/// Whether `turn` is the session's own loop (the only one these tools run in).
pub(crate) fn runs_here(turn: &Turn, call: &ToolCall) -> bool {
    is_interactive(&call.name) && matches!(turn.role, Role::Main)
}

async fn exit_plan_mode(
    turn: &Turn,
    call: &ToolCall,
    recorded: Option<Recorded>,
) -> Result<Option<ToolOutcome>, EmitError> {
    let (answer, path) = match recorded {
        Some(Recorded::Answered(answer, path)) => (answer, path),
        Some(Recorded::Open { path, .. }) => match wait_and_record(turn, call).await? {
            Ok(answer) => (answer, path),
            Err(early) => return Ok(early),
        },
        None => {
            if turn.approvals.gate.mode() != SessionMode::Plan {
                return Ok(Some(ToolOutcome::error(
                    "The session is not in plan mode, so there is no plan to approve: go on with \
                     the task.",
                )));
            }
            let plan = match tools_plan::plan_input(&call.input) {
                Ok(plan) => plan,
                Err(refusal) => return Ok(Some(refusal)),
            };
            let Some(org) = turn.env.org.as_ref() else {
                return Ok(Some(ToolOutcome::error(
                    "Plans are saved as org files, and this session has no org.",
                )));
            };
            let path = match tools_plan::save_plan(org, &plan).await {
                Ok(path) => path,
                Err(refusal) => return Ok(Some(refusal)),
            };
            let asked = request(call, ApprovalKind::Plan, Some(path.clone()), Some(plan), None);
            turn.emitter.durable(asked).await?;
            match wait_and_record(turn, call).await? {
                Ok(answer) => (answer, Some(path)),
                Err(early) => return Ok(early),
            }
        }
    };
    if answer.decision == ApprovalDecision::Deny {
        return Ok(Some(plan_sent_back(&answer, path.as_deref())));
    }
    // Also after a restart that found the plan approved: leave plan mode once.
    if turn.approvals.gate.mode() == SessionMode::Plan {
        let by = answer.by.clone();
        turn.emitter.durable(EventKind::ModeChanged { mode: SessionMode::Default, by }).await?;
        turn.approvals.gate.set_mode(SessionMode::Default);
    }
    turn.approvals.gate.told(SessionMode::Default);
    let saved = path.map(|p| format!(" (saved as {p})")).unwrap_or_default();
    Ok(Some(ToolOutcome::ok(format!(
        "{} approved your plan{saved}. Plan mode is off: you can now edit files and run \
         commands. Carry out the plan now, step by step, keeping your todo list up to date.",
        answer.by
    ))))
}

/// What the model is told of a plan the user sent back.
fn plan_sent_back(answer: &Answer, path: Option<&str>) -> ToolOutcome {
    let reason = match answer.reason.as_deref().map(str::trim).filter(|r| !r.is_empty()) {
        Some(reason) => format!("Their reason: {reason}"),
        None => "They gave no reason; ask them with AskUserQuestion if it is unclear.".into(),
    };
    let saved = path.map(|p| format!(" (it stays saved as {p})")).unwrap_or_default();
    ToolOutcome::error(format!(
        "{} did not approve the plan{saved} and wants you to keep planning; the session is \
         still in plan mode. {reason} Revise the plan accordingly, then call ExitPlanMode with \
         the new one.",
        answer.by
    ))
}

async fn ask(
    turn: &Turn,
    call: &ToolCall,
    recorded: Option<Recorded>,
) -> Result<Option<ToolOutcome>, EmitError> {
    let questions = match tools_plan::questions_input(&call.input) {
        Ok(questions) => questions,
        Err(refusal) => return Ok(Some(refusal)),
    };
    let answer = match recorded {
        Some(Recorded::Answered(answer, _)) => answer,
        Some(Recorded::Open { .. }) => match wait_and_record(turn, call).await? {
            Ok(answer) => answer,
            Err(early) => return Ok(early),
        },
        None => {
            let asked = request(call, ApprovalKind::Question, None, None, Some(questions.clone()));
            turn.emitter.durable(asked).await?;
            match wait_and_record(turn, call).await? {
                Ok(answer) => answer,
                Err(early) => return Ok(early),
            }
        }
    };
    Ok(Some(answered(&questions, &answer)))
}

/// What the model is told of its questions' answers (Claude Code's wording), or of questions
/// nobody answered.
fn answered(questions: &[Question], answer: &Answer) -> ToolOutcome {
    if answer.decision == ApprovalDecision::Deny {
        let reason = answer.reason.as_deref().map(str::trim).filter(|r| !r.is_empty());
        return ToolOutcome::error(format!(
            "Not answered: {}. Decide yourself, say in your answer which assumption you made, \
             and go on.",
            reason.unwrap_or("the user declined to answer")
        ));
    }
    let given = answer.answers.as_deref().unwrap_or_default();
    let pairs: Vec<String> = questions
        .iter()
        .enumerate()
        .map(|(i, q)| {
            let a = given.get(i).map(String::as_str).unwrap_or("(no answer)");
            format!("\"{}\"=\"{a}\"", q.question)
        })
        .collect();
    ToolOutcome::ok(format!(
        "User has answered your questions: {}. You can now continue with the user's answers in \
         mind.",
        pairs.join(", ")
    ))
}

fn request(
    call: &ToolCall,
    kind: ApprovalKind,
    path: Option<String>,
    plan: Option<String>,
    questions: Option<Vec<Question>>,
) -> EventKind {
    EventKind::ApprovalRequested {
        call_id: call.call_id.clone(),
        name: call.name.clone(),
        input: call.input.clone(),
        rule: call.name.clone(),
        covers: None,
        unjudged: None,
        kind,
        path,
        plan,
        questions,
    }
}

/// Waits for the answer and records it. `Err`: what [`settle`] returns at once — the
/// interrupted call's result, or `None` when the server shuts down meanwhile (the question
/// stays open).
async fn wait_and_record(
    turn: &Turn,
    call: &ToolCall,
) -> Result<Result<Answer, Option<ToolOutcome>>, EmitError> {
    let answer = match wait(turn, call).await {
        Waited::Answered(answer) => answer,
        Waited::Interrupted => return Ok(Err(Some(not_run()))),
        Waited::Suspended => return Ok(Err(None)),
    };
    turn.emitter
        .durable(EventKind::ApprovalResolved {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            decision: answer.decision,
            scope: answer.scope,
            by: answer.by.clone(),
            reason: answer.reason.clone(),
            covers: None,
            answers: answer.answers.clone(),
        })
        .await?;
    Ok(Ok(answer))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(
        decision: ApprovalDecision,
        reason: Option<&str>,
        answers: Option<Vec<&str>>,
    ) -> Answer {
        Answer {
            decision,
            scope: Default::default(),
            by: "alice".into(),
            reason: reason.map(str::to_owned),
            answers: answers.map(|a| a.into_iter().map(str::to_owned).collect()),
        }
    }

    #[test]
    fn the_reminders_are_recognised_in_the_log_and_nothing_else_is() {
        use crate::approvals::reminded;
        assert_eq!(reminded(PLAN_ON), Some(SessionMode::Plan));
        assert_eq!(reminded(PLAN_OFF), Some(SessionMode::Default));
        assert_eq!(reminded("<system-reminder>\nBackground shell ended\n</system-reminder>"), None);
    }

    #[test]
    fn a_denied_plan_carries_the_reason_and_keeps_planning() {
        let told = plan_sent_back(
            &answer(ApprovalDecision::Deny, Some("use SQLite"), None),
            Some("/plans/x.md"),
        );
        assert!(told.is_error);
        assert!(told.output.contains("Their reason: use SQLite"), "{}", told.output);
        assert!(told.output.contains("still in plan mode"), "{}", told.output);
        let silent = plan_sent_back(&answer(ApprovalDecision::Deny, Some("  "), None), None);
        assert!(silent.output.contains("gave no reason"), "{}", silent.output);
    }

    #[test]
    fn answers_are_paired_with_their_questions() {
        let questions: Vec<Question> = serde_json::from_value(serde_json::json!([
            {"question": "DB?", "options": [{"label": "a"}, {"label": "b"}]},
            {"question": "Port?", "options": [{"label": "80"}, {"label": "443"}]},
        ]))
        .unwrap_or_default();
        let told = answered(&questions, &answer(ApprovalDecision::Allow, None, Some(vec!["a"])));
        assert_eq!(
            told.output,
            "User has answered your questions: \"DB?\"=\"a\", \"Port?\"=\"(no answer)\". You \
             can now continue with the user's answers in mind."
        );
        let nobody = answered(
            &questions,
            &answer(ApprovalDecision::Deny, Some("no one can answer: a headless run"), None),
        );
        assert!(nobody.is_error && nobody.output.contains("no one can answer"));
    }
}
