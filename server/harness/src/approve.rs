//! The org's tool policy applied to one call before it starts: run it, refuse it, or ask a person
//! and wait (see [`crate::approvals`] for the gate and [`outboard_org::toolpolicy`] for the rules).
//!
//! The order of events is what makes a restart safe: `approval_requested` and
//! `approval_resolved` are written before the call's `tool_call`, so a call that waits has
//! never started — the resumed turn waits again (or acts on the answer in the log) instead of
//! treating it as a command that may have run.

use outboard_shared::{
    ApprovalDecision, ApprovalKind, ApprovalScope, EventKind, SessionMode, ToolCall,
};

use crate::approvals::{Answer, Recorded};
use crate::sink::EmitError;
use crate::spans;
use crate::state::{not_run, Role, Turn, TASK};
use outboard_org::toolpolicy::{Decision, Judgement, Rule};
use outboard_tools::ToolOutcome;
use tracing::Instrument as _;

/// What to do with the call.
pub(crate) enum Verdict {
    /// Start it.
    Run,
    /// Answer it without running.
    Refuse(ToolOutcome),
    /// The server shuts down while the call waits: nothing more is written, and the question
    /// stays open for the resumed turn.
    Suspended,
}

/// Applies the policy to `call` (or, after a restart, what the log `recorded` of it).
pub(crate) async fn check(
    turn: &Turn,
    call: &ToolCall,
    recorded: Option<Recorded>,
) -> Result<Verdict, EmitError> {
    let approvals = &turn.approvals;
    let covers = match recorded {
        Some(Recorded::Answered(answer, _)) => return Ok(verdict(&answer)),
        Some(Recorded::Open { covers, .. }) => covers,
        None => {
            if let Some(verdict) = settled(turn, call) {
                return Ok(verdict);
            }
            let judged = judge(turn, call);
            let Some(rule) = judged.rule() else { return Ok(Verdict::Run) };
            let covers = judged.covers();
            let asked = EventKind::ApprovalRequested {
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                input: call.input.clone(),
                rule: rule.pattern.as_str().to_owned(),
                covers: Some(covers.clone()),
                unjudged: judged.unjudged().map(str::to_owned),
                kind: ApprovalKind::Tool,
                path: None,
                plan: None,
                questions: None,
            };
            turn.emitter.durable(asked).await?;
            covers
        }
    };
    let answer = match wait(turn, call).await {
        Waited::Answered(answer) => answer,
        Waited::Interrupted => return Ok(Verdict::Refuse(not_run())),
        Waited::Suspended => return Ok(Verdict::Suspended),
    };
    let for_session =
        answer.decision == ApprovalDecision::Allow && answer.scope == ApprovalScope::Session;
    turn.emitter
        .durable(EventKind::ApprovalResolved {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            decision: answer.decision,
            scope: answer.scope,
            by: answer.by.clone(),
            reason: answer.reason.clone(),
            covers: for_session.then(|| covers.clone()),
            answers: None,
        })
        .await?;
    if for_session {
        approvals.gate.allow(&call.name, &covers);
    }
    Ok(verdict(&answer))
}

/// How waiting for a person's answer ended.
pub(crate) enum Waited {
    /// With their answer (not recorded yet).
    Answered(Answer),
    /// The turn was interrupted.
    Interrupted,
    /// The server shuts down: the question stays open for the resumed turn.
    Suspended,
}

/// Waits for the answer to the request on `call` (written to the log already), in an
/// `approval_wait` span.
pub(crate) async fn wait(turn: &Turn, call: &ToolCall) -> Waited {
    let span = spans::approval_wait(
        &turn.session_id,
        &turn.turn_id,
        call,
        &turn.offered,
        turn.limits.span_content,
    );
    let waited = wait_untraced(turn, call).instrument(span.clone()).await;
    let (decision, suspended) = match &waited {
        Waited::Answered(answer) => (Some(answer.decision), false),
        Waited::Interrupted => (None, false),
        Waited::Suspended => (None, true),
    };
    spans::record_approval(&span, decision, suspended);
    waited
}

async fn wait_untraced(turn: &Turn, call: &ToolCall) -> Waited {
    let gate = &turn.approvals.gate;
    tracing::info!(session = %turn.session_id, call = %call.call_id, tool = %call.name, "waiting for a person");
    let waiting = gate.wait(&call.call_id);
    let answer = tokio::select! {
        answer = waiting => answer.ok(),
        _ = turn.cancel.cancelled() => None,
        _ = turn.shutdown.cancelled() => {
            gate.forget(&call.call_id);
            return Waited::Suspended;
        }
    };
    match answer {
        Some(answer) => Waited::Answered(answer),
        None => {
            gate.forget(&call.call_id);
            Waited::Interrupted
        }
    }
}

/// The org's rules on `call`, with the rules the session allowed for this tool as `allow`.
fn judge<'t>(turn: &'t Turn, call: &ToolCall) -> Judgement<'t> {
    let approvals = &turn.approvals;
    let granted = |rule: &Rule| approvals.gate.allows(&call.name, rule.pattern.as_str());
    approvals.rules.judge(&call.name, &call.input, &granted)
}

/// The verdict on a fresh call that needs nobody's answer: plan mode refuses it, the policy
/// allows or denies it, no rule matches, or the session already allowed every rule that asks. `None`: a person must be
/// asked.
pub(crate) fn settled(turn: &Turn, call: &ToolCall) -> Option<Verdict> {
    if let Role::Child(role) = &turn.role {
        // A tool the subagent lacks is refused when it runs; nothing to ask about.
        if role.refusal(&call.name).is_some() {
            return Some(Verdict::Run);
        }
    }
    // Plan mode first: a call it refuses is not worth a person's answer.
    if let Some(refusal) = plan_mode_refusal(turn, call) {
        return Some(Verdict::Refuse(refusal));
    }
    let judged = judge(turn, call);
    match (judged.decision(), judged.rule()) {
        (Decision::Deny, Some(rule)) => Some(Verdict::Refuse(policy_denies(&call.name, rule))),
        (Decision::Ask, _) => None,
        _ => Some(Verdict::Run),
    }
}

/// What the session's mode answers `call` now: `None` when it may run. `Task` runs (its
/// subagent's calls are judged by the same mode, through the same gate).
fn plan_mode_refusal(turn: &Turn, call: &ToolCall) -> Option<ToolOutcome> {
    if turn.approvals.gate.mode() != SessionMode::Plan || call.name == TASK {
        return None;
    }
    outboard_tools::plan::refusal_in_plan_mode(&call.name, &call.input)
}

fn verdict(answer: &Answer) -> Verdict {
    match answer.decision {
        ApprovalDecision::Allow => Verdict::Run,
        ApprovalDecision::Deny => Verdict::Refuse(person_denies(answer)),
    }
}

/// What the model is told of a call the org's policy refuses.
fn policy_denies(tool: &str, rule: &Rule) -> ToolOutcome {
    ToolOutcome::error(format!(
        "Not run: the org's tool policy denies {tool} (rule `{}`). Do not retry it; do the \
         task another way, or tell the user that an admin must change the policy \
         (`outboard-server admin policy`).",
        rule.pattern.as_str()
    ))
}

/// What the model is told of a call a person refused.
fn person_denies(answer: &Answer) -> ToolOutcome {
    let reason = match answer.reason.as_deref().map(str::trim).filter(|r| !r.is_empty()) {
        Some(reason) => format!(" Their reason: {reason}"),
        None => " They gave no reason.".to_owned(),
    };
    ToolOutcome::error(format!(
        "Not run: {} denied this call.{reason} Do not retry the same call; adjust to the \
         reason, or ask the user how to go on.",
        answer.by
    ))
}
