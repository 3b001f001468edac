//! `outboard compact SESSION [FOCUS…]`: `session/compact` from a script or a terminal, the
//! headless twin of the TUI's `/compact`. It waits for the summary (a model call) and prints the
//! conversation's estimated size before and after.

use std::io::Write;

use outboard_shared::{methods, SessionCompactParams, SessionId};

use crate::args::CompactArgs;
use crate::run::{Connection, RunError};

/// Runs `outboard compact`; returns the exit code.
pub async fn compact(args: &CompactArgs, out: &mut impl Write) -> i32 {
    match run(args, out).await {
        Ok(()) => crate::exit::OK,
        Err(err) => {
            eprintln!("outboard: {err}");
            err.exit_code()
        }
    }
}

async fn run(args: &CompactArgs, out: &mut impl Write) -> Result<(), RunError> {
    let conn = Connection::open_for(&args.connect, false).await?;
    let focus = args.focus.join(" ");
    let params = SessionCompactParams {
        session_id: SessionId(args.session_id.clone()),
        focus: (!focus.trim().is_empty()).then_some(focus),
    };
    let answered = conn.client.call::<methods::SessionCompact>(params).await;
    conn.close().await;
    let done = answered?;
    if args.json {
        serde_json::to_writer(&mut *out, &done).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "compacted {}: ~{} → ~{} tokens (event {}); the log keeps every message",
            args.session_id, done.tokens_before, done.tokens_after, done.seq
        )?;
    }
    out.flush()?;
    Ok(())
}
