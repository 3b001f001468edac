//! Background commands: `Bash` with `run_in_background`, `BashOutput` and `KillShell`, with
//! Claude Code's parameters and answers, and the `<system-reminder>` that tells the model at its
//! next step that a background command ended.
//!
//! The jobs themselves live in the sandbox ([`outboard_sandbox::jobs`]): the agent runs them and
//! reports their end unasked, the manager keeps their unread output (bounded) and keeps the
//! sandbox unfrozen while one runs. This module only phrases.

use serde::Deserialize;
use serde_json::json;

use crate::outcome::ToolOutcome;
use outboard_llm::ToolSpec;
use outboard_sandbox::jobs::{JobReport, JobState};
use outboard_sandbox::Sandbox;

/// Bytes of new output one `BashOutput` returns: the newest 30,000, what the model is shown of
/// a result by default. What is beyond it is consumed and counted, as when more than the job's
/// buffer waited.
pub const MAX_READ_BYTES: usize = 30_000;

/// Bytes of a `filter` regex: a pattern, not a program.
const MAX_FILTER_BYTES: usize = 1000;

pub const OUTPUT_PARAMS: &str =
    "{\"bash_id\": string (required), \"filter\": string (optional, a regular expression)}";
pub const KILL_PARAMS: &str = "{\"shell_id\": string (required)}";

#[derive(Debug, Deserialize)]
pub struct BashOutputParams {
    bash_id: String,
    #[serde(default)]
    filter: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct KillShellParams {
    shell_id: String,
}

pub fn output_spec() -> ToolSpec {
    ToolSpec {
        name: "BashOutput".into(),
        description: "Retrieves output from a running or completed background bash shell.\n\
- Takes a shell_id parameter identifying the shell\n\
- Always returns only new output since the last check\n\
- Returns stdout and stderr output along with shell status\n\
- Supports optional regex filtering to show only lines matching a pattern\n\
- Use this tool when you need to monitor or check the output of a long-running shell\n\
- Shell IDs are returned by Bash with run_in_background; you are also told when one ends"
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "bash_id": {"type": "string", "description": "The ID of the background shell to retrieve output from"},
                "filter": {"type": "string", "description": "Optional regular expression to filter the output lines. Only lines matching this regex will be included in the result. Any lines that do not match will no longer be available to read."}
            },
            "required": ["bash_id"],
            "additionalProperties": false
        }),
    }
}

pub fn kill_spec() -> ToolSpec {
    ToolSpec {
        name: "KillShell".into(),
        description: "Kills a running background bash shell by its ID.\n\
- Takes a shell_id parameter identifying the shell to kill\n\
- Returns a success or failure status\n\
- Use this tool when you need to terminate a long-running shell\n\
- Shell IDs are returned by Bash with run_in_background"
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "shell_id": {"type": "string", "description": "The ID of the background shell to kill"}
            },
            "required": ["shell_id"],
            "additionalProperties": false
        }),
    }
}

/// `Bash` with `run_in_background`: starts the command and answers with its shell id at once;
/// with `read_only` (plan mode), in the sandbox's read-only view.
pub async fn start(command: &str, sandbox: &Sandbox, read_only: bool) -> ToolOutcome {
    let started = match read_only {
        true => sandbox.spawn_job_read_only(command).await,
        false => sandbox.spawn_job(command).await,
    };
    match started {
        Ok(shell_id) => ToolOutcome::ok(format!(
            "Command running in background with ID: {shell_id}. Read its output with \
             BashOutput; you will be told when it ends."
        )),
        Err(e) => ToolOutcome::error(format!("{e}. The command did not start.")),
    }
}

fn unknown(id: &str) -> ToolOutcome {
    ToolOutcome::error(format!(
        "No background shell with ID {id}: use the ID Bash returned for a command started with \
         run_in_background."
    ))
}

pub async fn output(params: BashOutputParams, sandbox: &Sandbox) -> ToolOutcome {
    let filter = match params.filter.as_deref().map(str::trim).filter(|f| !f.is_empty()) {
        None => None,
        Some(f) if f.len() > MAX_FILTER_BYTES => {
            return ToolOutcome::error(format!(
                "The filter is {} bytes; at most {MAX_FILTER_BYTES} are allowed.",
                f.len()
            ))
        }
        Some(f) => match regex::RegexBuilder::new(f).size_limit(1 << 20).build() {
            Ok(re) => Some(re),
            Err(e) => {
                return ToolOutcome::error(format!(
                    "The filter is not a valid regular expression: {e}"
                ))
            }
        },
    };
    let Some(read) = sandbox.read_job(&params.bash_id).await else {
        return unknown(&params.bash_id);
    };
    let mut text = match &filter {
        Some(re) => {
            read.output.lines().filter(|l| re.is_match(l)).fold(String::new(), |mut a, l| {
                a.push_str(l);
                a.push('\n');
                a
            })
        }
        None => read.output,
    };
    let mut cut = read.dropped;
    if text.len() > MAX_READ_BYTES {
        let mut keep = text.len() - MAX_READ_BYTES;
        while !text.is_char_boundary(keep) {
            keep += 1;
        }
        cut += keep;
        text.drain(..keep);
    }
    let mut out = format!("<status>{}</status>\n", status_word(read.state));
    if let Some(code) = read.state.exit_code() {
        out.push_str(&format!("<exit_code>{code}</exit_code>\n"));
    }
    if cut > 0 {
        out.push_str(&format!(
            "<note>{cut} bytes of earlier output were not kept (the oldest go first)</note>\n"
        ));
    }
    if !text.is_empty() {
        out.push_str("<output>\n");
        out.push_str(&text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("</output>\n");
    }
    ToolOutcome::ok(out.trim_end().to_owned())
}

pub async fn kill(params: KillShellParams, sandbox: &Sandbox) -> ToolOutcome {
    match sandbox.kill_job(&params.shell_id).await {
        Ok(true) => ToolOutcome::ok(format!("Successfully killed shell: {}", params.shell_id)),
        Ok(false) => match sandbox.read_job(&params.shell_id).await {
            Some(read) => ToolOutcome::error(format!(
                "Shell {} is not running (status: {}).",
                params.shell_id,
                status_word(read.state)
            )),
            None => unknown(&params.shell_id),
        },
        Err(e) => ToolOutcome::error(format!("Shell {} could not be killed: {e}", params.shell_id)),
    }
}

fn status_word(state: JobState) -> &'static str {
    match state {
        JobState::Running => "running",
        JobState::Exited(_) => "completed",
        JobState::Killed => "killed",
        JobState::Lost => "lost",
    }
}

/// The background commands a session's log shows started and not ended, `(shell id, command)`
/// in start order: after a restart these are gone with the old sandbox.
pub fn running_in_log(log: &[outboard_shared::SessionEvent]) -> Vec<(String, String)> {
    use outboard_shared::{EventKind, TaskStatus};
    let mut running: Vec<(String, String)> = Vec::new();
    for event in log {
        if let EventKind::BackgroundTask { shell_id, command, status, .. } = &event.kind {
            running.retain(|(id, _)| id != shell_id);
            if *status == TaskStatus::Running {
                running.push((shell_id.clone(), command.clone()));
            }
        }
    }
    running
}

/// The `<system-reminder>` for jobs that ended since the model was last told, if any.
pub async fn reminder(sandbox: &Sandbox) -> Option<String> {
    let ended = sandbox.untold_jobs().await;
    reminder_text(&ended)
}

/// The reminder's text for `ended` jobs; `None` when there are none.
pub fn reminder_text(ended: &[JobReport]) -> Option<String> {
    if ended.is_empty() {
        return None;
    }
    let mut text = String::from("<system-reminder>\n");
    for job in ended {
        let command: String = job.command.chars().take(200).collect();
        let how = match job.state {
            JobState::Exited(code) => format!("completed with exit code {code}"),
            JobState::Killed => "was killed".to_owned(),
            JobState::Lost => {
                "was lost: the harness restarted while it ran; it was not run again".to_owned()
            }
            JobState::Running => "is running".to_owned(),
        };
        text.push_str(&format!(
            "Background shell {} ({command}) {how}. Read its remaining output with BashOutput.\n",
            job.shell_id
        ));
    }
    text.push_str("</system-reminder>");
    Some(text)
}
