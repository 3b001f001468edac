//! `outboard approve SESSION CALL_ID [--for-session]`, `outboard deny SESSION CALL_ID
//! [--reason TEXT]` and `outboard answer SESSION CALL_ID ANSWER…`: `approval/answer` from a
//! script or another terminal, for a tool call that waits because the org's policy says `ask`
//! for it, a plan waiting for approval (`ExitPlanMode`), or the model's questions
//! (`AskUserQuestion`). The call id is in the session's
//! `approval_requested` event (printed by `outboard run`, shown by the TUI); `--for-session`
//! prints what the grant covers, as that request said.

use std::io::Write;

use outboard_shared::{
    methods, ApprovalAnswerParams, ApprovalDecision, ApprovalScope, EventKind,
    SessionHistoryParams, SessionId,
};

use crate::args::{AnswerArgs, ApproveArgs, ConnectArgs, DenyArgs};
use crate::client::Client;
use crate::run::{Connection, RunError};

/// Runs `outboard approve`; returns the exit code. With `--for-session` it prints what the grant
/// covers, as the request said (`covers`), read from the session's newest history pages.
pub async fn approve(args: &ApproveArgs, out: &mut impl Write) -> i32 {
    let scope = if args.for_session { ApprovalScope::Session } else { ApprovalScope::Once };
    let params = ApprovalAnswerParams {
        session_id: SessionId(args.session_id.clone()),
        call_id: args.call_id.clone(),
        decision: ApprovalDecision::Allow,
        scope,
        reason: None,
        answers: None,
    };
    exit(answer(&args.connect, params, out).await)
}

/// Runs `outboard deny`; returns the exit code.
pub async fn deny(args: &DenyArgs, out: &mut impl Write) -> i32 {
    let params = ApprovalAnswerParams {
        session_id: SessionId(args.session_id.clone()),
        call_id: args.call_id.clone(),
        decision: ApprovalDecision::Deny,
        scope: ApprovalScope::Once,
        reason: args.reason.clone(),
        answers: None,
    };
    exit(answer(&args.connect, params, out).await)
}

/// Runs `outboard answer`: the questions' answers, in order; returns the exit code.
pub async fn answer_questions(args: &AnswerArgs, out: &mut impl Write) -> i32 {
    let params = ApprovalAnswerParams {
        session_id: SessionId(args.session_id.clone()),
        call_id: args.call_id.clone(),
        decision: ApprovalDecision::Allow,
        scope: ApprovalScope::Once,
        reason: None,
        answers: Some(args.answers.clone()),
    };
    exit(answer(&args.connect, params, out).await)
}

fn exit(result: Result<(), RunError>) -> i32 {
    match result {
        Ok(()) => crate::exit::OK,
        Err(err) => {
            eprintln!("outboard: {err}");
            err.exit_code()
        }
    }
}

async fn answer(
    connect: &ConnectArgs,
    params: ApprovalAnswerParams,
    out: &mut impl Write,
) -> Result<(), RunError> {
    let conn = Connection::open_for(connect, false).await?;
    let for_session =
        params.decision == ApprovalDecision::Allow && params.scope == ApprovalScope::Session;
    let request = match for_session {
        true => find_request(&conn.client, &params.session_id, &params.call_id).await,
        false => None,
    };
    let answered = conn.client.call::<methods::ApprovalAnswer>(params.clone()).await;
    conn.close().await;
    answered?;
    let said = match (params.decision, for_session, request) {
        (ApprovalDecision::Allow, _, _) if params.answers.is_some() => {
            format!("answered {}", params.call_id)
        }
        (ApprovalDecision::Deny, _, _) => format!("denied {}", params.call_id),
        (ApprovalDecision::Allow, false, _) => format!("allowed {}", params.call_id),
        (ApprovalDecision::Allow, true, Some((tool, covers))) => format!(
            "allowed {} and {}",
            params.call_id,
            crate::output::session_covers(&tool, covers.as_deref())
        ),
        (ApprovalDecision::Allow, true, None) => format!(
            "allowed {} and, for the rest of this session, the later calls of its tool that only \
             the rules its request named ask about (the request's `covers`)",
            params.call_id
        ),
    };
    writeln!(out, "{said}")?;
    out.flush()?;
    Ok(())
}

/// How many history pages (newest first) are searched for the request: a waiting call is
/// among the newest events unless parallel subagents wrote many since.
const REQUEST_PAGES: usize = 4;

/// The tool and `covers` of the request `call_id`, from the session's newest history pages;
/// `None` when it is not there (the answer still goes; only the wording is general).
async fn find_request(
    client: &Client,
    session_id: &SessionId,
    call_id: &str,
) -> Option<(String, Option<Vec<String>>)> {
    // Below every seq; SQL integers are signed.
    let mut before = i64::MAX as u64;
    for _ in 0..REQUEST_PAGES {
        let params = SessionHistoryParams { session_id: session_id.clone(), before, limit: None };
        let page = client.call::<methods::SessionHistory>(params).await.ok()?;
        let found = page.events.iter().rev().find_map(|e| match &e.kind {
            EventKind::ApprovalRequested { call_id: c, name, covers, .. } if c == call_id => {
                Some((name.clone(), covers.clone()))
            }
            _ => None,
        });
        if found.is_some() || !page.has_more {
            return found;
        }
        before = page.cursor;
    }
    None
}
