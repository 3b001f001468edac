//! `outboard approve SESSION CALL_ID [--for-session]` and `outboard deny SESSION CALL_ID
//! [--reason TEXT]`: `approval/answer` from a script or another terminal, for a tool call that
//! waits because the org's policy says `ask` for it. The call id is in the session's
//! `approval_requested` event (printed by `outboard run`, shown by the TUI).

use std::io::Write;

use outboard_shared::{methods, ApprovalAnswerParams, ApprovalDecision, ApprovalScope, SessionId};

use crate::args::{ApproveArgs, ConnectArgs, DenyArgs};
use crate::run::{Connection, RunError};

/// Runs `outboard approve`; returns the exit code.
pub async fn approve(args: &ApproveArgs, out: &mut impl Write) -> i32 {
    let scope = if args.for_session { ApprovalScope::Session } else { ApprovalScope::Once };
    let params = ApprovalAnswerParams {
        session_id: SessionId(args.session_id.clone()),
        call_id: args.call_id.clone(),
        decision: ApprovalDecision::Allow,
        scope,
        reason: None,
    };
    let said = match scope {
        ApprovalScope::Once => format!("allowed {}", args.call_id),
        ApprovalScope::Session => format!(
            "allowed {} and, for the rest of this session, the later calls of its tool that only \
             the rules its request named ask about (the request's `covers`, printed by \
             `outboard run` and shown by the TUI)",
            args.call_id
        ),
    };
    exit(answer(&args.connect, params, &said, out).await)
}

/// Runs `outboard deny`; returns the exit code.
pub async fn deny(args: &DenyArgs, out: &mut impl Write) -> i32 {
    let params = ApprovalAnswerParams {
        session_id: SessionId(args.session_id.clone()),
        call_id: args.call_id.clone(),
        decision: ApprovalDecision::Deny,
        scope: ApprovalScope::Once,
        reason: args.reason.clone(),
    };
    exit(answer(&args.connect, params, &format!("denied {}", args.call_id), out).await)
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
    said: &str,
    out: &mut impl Write,
) -> Result<(), RunError> {
    let conn = Connection::open_for(connect, false).await?;
    let answered = conn.client.call::<methods::ApprovalAnswer>(params).await;
    conn.close().await;
    answered?;
    writeln!(out, "{said}")?;
    out.flush()?;
    Ok(())
}
