//! `outboard checkpoints SESSION`, `outboard rewind SESSION N` and `outboard fork SESSION [N]`:
//! a session's checkpoints (one per prompt, the state just before it) from a script or a
//! terminal, the headless twins of the TUI's `/rewind` and `/fork`.

use std::io::Write;

use outboard_shared::{methods, SessionForkParams, SessionId, SessionRef, SessionRewindParams};

use crate::args::{CheckpointsArgs, ForkArgs, RewindArgs};
use crate::run::{Connection, RunError};
pub use outboard_client::describe::checkpoint_line as line;

/// Runs `outboard checkpoints`; returns the exit code.
pub async fn checkpoints(args: &CheckpointsArgs, out: &mut impl Write) -> i32 {
    exit(list(args, out).await)
}

/// Runs `outboard rewind`; returns the exit code.
pub async fn rewind(args: &RewindArgs, out: &mut impl Write) -> i32 {
    exit(go_back(args, out).await)
}

/// Runs `outboard fork`; returns the exit code.
pub async fn fork(args: &ForkArgs, out: &mut impl Write) -> i32 {
    exit(fork_session(args, out).await)
}

fn exit(done: Result<(), RunError>) -> i32 {
    match done {
        Ok(()) => crate::exit::OK,
        Err(err) => {
            eprintln!("outboard: {err}");
            err.exit_code()
        }
    }
}

async fn list(args: &CheckpointsArgs, out: &mut impl Write) -> Result<(), RunError> {
    let conn = Connection::open_for(&args.connect, false).await?;
    let params = SessionRef { session_id: SessionId(args.session_id.clone()) };
    let answered = conn.client.call::<methods::SessionCheckpoints>(params).await;
    conn.close().await;
    let listed = answered?;
    if args.json {
        serde_json::to_writer(&mut *out, &listed.checkpoints).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else if listed.checkpoints.is_empty() {
        writeln!(out, "no checkpoints yet: the session has no prompt")?;
    } else {
        for checkpoint in &listed.checkpoints {
            writeln!(out, "{}", line(checkpoint))?;
        }
    }
    out.flush()?;
    Ok(())
}

async fn go_back(args: &RewindArgs, out: &mut impl Write) -> Result<(), RunError> {
    let conn = Connection::open_for(&args.connect, false).await?;
    // Both by default; one flag names the only one.
    let (code, conversation) = match (args.code, args.conversation) {
        (true, false) => (true, false),
        (false, true) => (false, true),
        _ => (true, true),
    };
    let params = SessionRewindParams {
        session_id: SessionId(args.session_id.clone()),
        checkpoint: args.checkpoint,
        code,
        conversation,
    };
    let answered = conn.client.call::<methods::SessionRewind>(params).await;
    conn.close().await;
    let done = answered?;
    if args.json {
        serde_json::to_writer(&mut *out, &done).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        let what = match (code, conversation) {
            (true, true) => "code and conversation",
            (true, false) => "code",
            _ => "conversation",
        };
        writeln!(
            out,
            "rewound {} to checkpoint {} ({what}; event {}); its prompt was:\n{}",
            args.session_id, args.checkpoint, done.seq, done.prompt
        )?;
    }
    out.flush()?;
    Ok(())
}

async fn fork_session(args: &ForkArgs, out: &mut impl Write) -> Result<(), RunError> {
    let conn = Connection::open_for(&args.connect, false).await?;
    let params = SessionForkParams {
        session_id: SessionId(args.session_id.clone()),
        checkpoint: args.checkpoint,
    };
    let answered = conn.client.call::<methods::SessionFork>(params).await;
    conn.close().await;
    let done = answered?;
    if args.json {
        serde_json::to_writer(&mut *out, &done).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        writeln!(out, "{}", done.session.id)?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboard_shared::CheckpointInfo;

    #[test]
    fn a_line_shows_the_number_the_author_the_marks_and_the_prompts_first_line() {
        let c = CheckpointInfo {
            n: 12,
            prompt: "fix the build\nand the tests".into(),
            by: "alice".into(),
            ts: "2026-12-04T20:31:07.123Z".into(),
            seq: 40,
            code: false,
            current: false,
            dropped: false,
        };
        assert_eq!(
            line(&c),
            " 12  2026-12-04 20:31:07  alice (conversation only, rewound)  fix the build…"
        );
    }
}
