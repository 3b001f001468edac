//! `outboard sessions`: the org's sessions as a table, or as JSON for scripts. Uses the same
//! connection flags as `outboard run` (embedded mode lists the local data directory's sessions).
//! Each session shows where its files came from (`SOURCE`: the directory it works in place in,
//! `repo@ref`, or `upload`; `source` in JSON); `outboard sessions rm ID` is in [`crate::changes`].

use std::io::Write;

use outboard_shared::{SessionInfo, SessionStatus};

use crate::args::SessionsArgs;
use crate::output::truncate;
use crate::run::{Connection, RunError};

/// How many characters of a title the table shows.
pub const TITLE_COLUMN: usize = 40;

/// Runs `outboard sessions`; returns the exit status.
pub async fn sessions(args: &SessionsArgs, out: &mut impl Write) -> i32 {
    match list(args, out).await {
        Ok(()) => crate::exit::OK,
        Err(err) => {
            eprintln!("outboard: {err}");
            err.exit_code()
        }
    }
}

async fn list(args: &SessionsArgs, out: &mut impl Write) -> Result<(), RunError> {
    let conn = Connection::open_for(&args.connect, false).await?;
    let listed = conn.client.list_sessions(None).await;
    conn.close().await;
    let sessions = listed?;
    if args.json {
        // A bare array of session objects, each with its `id` (what scripts index into).
        serde_json::to_writer(&mut *out, &sessions).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        out.write_all(table(&sessions).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

/// The sessions as an aligned text table with a header (or a one-line note when there are none).
pub fn table(sessions: &[SessionInfo]) -> String {
    if sessions.is_empty() {
        return "no sessions yet — start one with: outboard run PROMPT\n".to_owned();
    }
    let header =
        ["ID", "TITLE", "OWNER", "STATUS", "TODOS", "ATTACHED", "MODEL", "UPDATED", "SOURCE"]
            .map(str::to_owned);
    let rows: Vec<[String; 9]> = sessions
        .iter()
        .map(|s| {
            [
                s.id.to_string(),
                truncate(&s.title, TITLE_COLUMN),
                s.owner.clone(),
                status(s.status).to_owned(),
                s.todos.map_or_else(|| "-".to_owned(), |t| format!("{}/{}", t.done, t.total)),
                attached(s),
                s.model.clone(),
                s.updated_at.clone(),
                match (&s.source, &s.workspace) {
                    (Some(source), _) => source.label(),
                    (None, Some(path)) => path.clone(),
                    (None, None) => "-".to_owned(),
                },
            ]
        })
        .collect();
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> =
            row.iter().zip(widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

/// `alice (driver), bob` — who is attached, or `-`.
fn attached(s: &SessionInfo) -> String {
    if s.attached.is_empty() {
        return "-".to_owned();
    }
    let names: Vec<String> = s
        .attached
        .iter()
        .map(|p| match p.role {
            outboard_shared::Role::Driver => format!("{} (driver)", p.user),
            _ => p.user.clone(),
        })
        .collect();
    names.join(", ")
}

fn status(status: SessionStatus) -> &'static str {
    match status {
        SessionStatus::Idle => "idle",
        SessionStatus::Running => "running",
        SessionStatus::Failed => "failed",
        SessionStatus::Unknown => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::ConnectArgs;
    use crate::testing::{fake_server, session, Script};
    use outboard_shared::{SessionId, UserId};
    use pretty_assertions::assert_eq;

    #[tokio::test]
    async fn sessions_json_is_an_array_of_sessions() {
        let (url, _) = fake_server(Script::default()).await;
        let connect =
            ConnectArgs { server: Some(url), token: Some("tok".into()), ..ConnectArgs::default() };
        let mut out = Vec::new();
        let code = sessions(&SessionsArgs { connect, json: true, command: None }, &mut out).await;
        assert_eq!(code, 0);
        let listed: Vec<SessionInfo> = serde_json::from_slice(&out).unwrap();
        assert_eq!(listed, vec![session("s_old", 7)]);
    }

    #[test]
    fn a_table_aligns_columns() {
        let s = SessionInfo {
            id: SessionId::from("s_1"),
            title: "fix the build".into(),
            owner_id: UserId::from("u_1"),
            owner: "ada".into(),
            status: SessionStatus::Running,
            model: "anthropic/claude".into(),
            model_name: None,
            last_seq: 9,
            created_at: "2026-01-01T00:00:00Z".into(),
            updated_at: "2026-01-02T00:00:00Z".into(),
            failure: None,
            workspace: Some("/home/ada/build".into()),
            source: None,
            network: outboard_shared::SessionNetwork::Org,
            attached: vec![
                outboard_shared::PresenceEntry {
                    user: "ada".into(),
                    role: outboard_shared::Role::Driver,
                    client: "outboard-cli/0.1.0".into(),
                    connection_id: 0,
                },
                outboard_shared::PresenceEntry {
                    user: "bob".into(),
                    role: outboard_shared::Role::Watcher,
                    client: "outboard-cli/0.1.0".into(),
                    connection_id: 0,
                },
            ],
            usage: None,
            context_window: None,
            context_window_source: None,
            context_window_from: None,
            todos: Some(outboard_shared::TodoProgress { done: 3, total: 7 }),
        };
        assert_eq!(
            table(&[s]),
            "ID   TITLE          OWNER  STATUS   TODOS  ATTACHED           MODEL             UPDATED               SOURCE\n\
             s_1  fix the build  ada    running  3/7    ada (driver), bob  anthropic/claude  2026-01-02T00:00:00Z  /home/ada/build\n"
        );
        assert!(table(&[]).starts_with("no sessions yet"));
    }
}
