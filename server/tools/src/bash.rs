//! `Bash`: runs a command in the session's sandbox and turns its result into the model's answer.
//!
//! Design choice: the result's cap, streaming and killing live in the sandbox, which sees the
//! bytes as they come; this tool picks the timeout, caps what is streamed to watchers at the
//! result's size, phrases the outcome (exit code, timeout, interruption) the way Claude Code
//! does, so the model reacts as it was trained to, and checks the workspace quota afterwards.

use std::time::Duration;

use outboard_shared::OutputStream;
use serde::Deserialize;
use serde_json::json;

use crate::ctx::ToolCtx;
use crate::input::lenient;
use crate::outcome::ToolOutcome;
use outboard_llm::ToolSpec;

/// The longest timeout the model may ask for, in milliseconds.
pub const MAX_TIMEOUT_MS: u64 = 600_000;

/// Added to the output of a command that hit the read-only org files.
const READ_ONLY_HINT: &str =
    "(/memory, /skills and /agents are your org's shared files: read-only in \
Bash. Change them with the Write or Edit tool, which keeps every version.)";

pub const PARAMS: &str =
    "{\"command\": string (required), \"timeout\": integer (optional, milliseconds, max 600000), \
     \"description\": string (optional, 5-10 words), \"run_in_background\": boolean (optional)}";

/// `description` is for the people watching; the tool ignores it (serde skips unknown fields).
#[derive(Debug, Deserialize)]
pub struct BashParams {
    command: String,
    #[serde(default, deserialize_with = "lenient::opt_count")]
    timeout: Option<u64>,
    #[serde(default, deserialize_with = "lenient::opt_bool")]
    run_in_background: Option<bool>,
}

pub fn spec() -> ToolSpec {
    ToolSpec {
        name: "Bash".into(),
        description: "Executes a given bash command in a sandbox with optional timeout.\n\n\
The command runs with `bash -c` in /workspace (the project), as an unprivileged user, with no \
network access, a private /tmp, and read-only system directories. Each command runs in a fresh \
shell, but the working directory (`cd`) and background processes (`server &`) carry over to the \
next command, as do files; environment variables do not. The sandbox may be restarted (after a \
long idle period or when a limit is hit): files under /workspace always survive. Your org's \
shared files are visible read-only at /memory, /skills and /agents (always current); change them with \
Write or Edit, never from Bash.\n\n\
Usage notes:\n\
- The command argument is required.\n\
- You can specify an optional timeout in milliseconds (up to 600000ms / 10 minutes). If not \
specified, commands will time out after the session's default.\n\
- It is very helpful if you write a clear, concise description of what this command does in 5-10 \
words.\n\
- If the output exceeds 30000 characters, output will be truncated (the beginning and the end \
are kept) before being returned to you.\n\
- Avoid using search commands like `find` and `grep`: use Grep and Glob instead. Avoid `cat`, \
`head`, `tail` to read files: use Read instead.\n\
- When issuing multiple commands, use the ';' or '&&' operator to separate them. DO NOT use \
newlines (newlines are ok in quoted strings).\n\
- Prefer absolute paths under /workspace.\n\
- You can use the `run_in_background` parameter to run the command in the background, which \
allows you to continue working while the command runs. You can monitor the output using the \
BashOutput tool as it becomes available, and stop it with KillShell. You will be told when it \
ends. Never use `run_in_background` to run `sleep` as it will return immediately; you do not \
need to use `&` at the end of the command when using this parameter."
            .into(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command to execute"},
                "timeout": {"type": "number", "description": "Optional timeout in milliseconds (max 600000)"},
                "description": {"type": "string", "description": "Clear, concise description of what this command does in 5-10 words. Examples:\nInput: ls\nOutput: Lists files in current directory\n\nInput: git status\nOutput: Shows working tree status\n\nInput: npm install\nOutput: Installs package dependencies"},
                "run_in_background": {"type": "boolean", "description": "Set to true to run this command in the background. Use BashOutput to read the output later."}
            },
            "required": ["command"],
            "additionalProperties": false
        }),
    }
}

pub async fn run(params: BashParams, ctx: ToolCtx<'_>) -> ToolOutcome {
    if params.command.trim().is_empty() {
        return ToolOutcome::error("The command is empty: give the shell command to run.");
    }
    // Writes aimed at the org's files are refused before they run, with what to do instead; the
    // read-only mount below catches whatever the parse cannot see. Relative targets resolve
    // against the directory the sandbox's shell is in (`cd /memory` in one command, `touch x` in
    // the next); asking for it never wakes the sandbox.
    let cwd = ctx.sandbox.cwd().await;
    if let Err(refusal) = outboard_bashguard::check(&params.command, cwd.as_deref()) {
        return ToolOutcome::error(refusal.message);
    }
    // Org files are visible read-only at /memory, /skills and /agents: bring that view up to date
    // (only what changed since the last command) so the command sees what the store holds.
    if let Some(org) = ctx.org.filter(|_| ctx.remote.is_none()) {
        if let Err(e) = org.fs.project(&org.org_id).await {
            tracing::warn!("the org files could not be projected before a command: {e}");
        }
    }
    if params.run_in_background == Some(true) {
        return crate::background::start(&params.command, ctx.sandbox, ctx.read_only).await;
    }
    let timeout = match params.timeout.filter(|&ms| ms > 0) {
        Some(ms) => Duration::from_millis(ms.min(MAX_TIMEOUT_MS)),
        None => ctx.default_timeout,
    };
    // Watchers get the output as it comes, up to the same number of bytes the result keeps,
    // then one line saying how much more there was: a command printing gigabytes must not flood
    // every attached client (and the session's in-flight buffer) with what the model never sees.
    let on_output = ctx.on_output;
    let mut cap = StreamCap::new(STREAM_CAP_BYTES);
    let mut capped = |stream: OutputStream, text: &str| {
        if let Some(part) = cap.admit(text) {
            on_output(stream, part);
        }
    };
    let cancel = ctx.cancel.clone();
    let ran = match ctx.remote {
        Some(remote) => {
            remote.exec(&params.command, timeout, &mut capped, ctx.cancel.clone()).await
        }
        None => {
            // Plan mode: the read-only view is the guarantee; the judgement only explains.
            let ran = match ctx.read_only {
                true => {
                    ctx.sandbox.exec_read_only(&params.command, timeout, &mut capped, cancel).await
                }
                false => ctx.sandbox.exec(&params.command, timeout, &mut capped, cancel).await,
            };
            ran.map_err(|e| format!("{e}. The command did not run."))
        }
    };
    if let Some(line) = cap.truncation_line() {
        on_output(OutputStream::Stderr, &line);
    }
    let result = match ran {
        Ok(result) => result,
        Err(message) => return ToolOutcome::error(message),
    };
    let mut outcome = phrase(result, &params.command, timeout, &ctx.cancel);
    // The workspace quota is measured once the command has ended (see `outboard_org::quota`): a
    // command that left the workspace over it fails with the usage and what to do.
    if let Some(org) = ctx.org.filter(|_| ctx.workspace.metered() && ctx.remote.is_none()) {
        let over = outboard_org::quota::workspace_over(
            org.fs.store(),
            &org.org_id,
            ctx.workspace.root(),
            &ctx.cancel,
        )
        .await;
        if let Some(message) = over {
            if outcome.output == "(no output)" {
                outcome.output.clear();
            }
            if !outcome.output.is_empty() && !outcome.output.ends_with('\n') {
                outcome.output.push('\n');
            }
            outcome.output.push_str(&message);
            outcome.is_error = true;
        }
    }
    outcome
}

/// Bytes of a command's output streamed to watchers: about what the model sees of it (the
/// harness's default cut of a tool result); the result in the log keeps more
/// (`outboard_sandbox_init::output::OUTPUT_HEAD_BYTES` and `OUTPUT_TAIL_BYTES`).
pub const STREAM_CAP_BYTES: usize = 30_000;

/// Counts a command's streamed output and lets through its first `cap` bytes (cut on a character
/// boundary); what it holds back is announced by [`StreamCap::truncation_line`] at the end.
#[derive(Debug)]
pub struct StreamCap {
    cap: usize,
    sent: usize,
    held_back: usize,
    ends_with_newline: bool,
}

impl StreamCap {
    pub fn new(cap: usize) -> Self {
        StreamCap { cap, sent: 0, held_back: 0, ends_with_newline: true }
    }

    /// The part of `text` to stream, if any.
    pub fn admit<'t>(&mut self, text: &'t str) -> Option<&'t str> {
        // Once anything was held back, nothing more passes: the stream is a prefix of the output.
        let room = if self.held_back > 0 { 0 } else { self.cap - self.sent };
        let mut cut = text.len().min(room);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        self.held_back += text.len() - cut;
        if cut == 0 {
            return None;
        }
        self.sent += cut;
        let part = &text[..cut];
        self.ends_with_newline = part.ends_with('\n');
        Some(part)
    }

    /// The last delta when output was held back: `… output truncated, N bytes more`.
    pub fn truncation_line(&self) -> Option<String> {
        if self.held_back == 0 {
            return None;
        }
        let lead = if self.ends_with_newline { "" } else { "\n" };
        Some(format!("{lead}… output truncated, {} bytes more\n", self.held_back))
    }
}

/// Phrases a finished command the way Claude Code does.
fn phrase(
    result: outboard_sandbox::ExecResult,
    command: &str,
    timeout: Duration,
    cancel: &tokio_util::sync::CancellationToken,
) -> ToolOutcome {
    let mut text = result.output;
    let read_only_hit = text.contains("Read-only file system")
        && outboard_vfs::ORG_ROOTS.iter().any(|root| command.contains(root) || text.contains(root));
    let mut note = |line: String| {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&line);
    };
    if read_only_hit {
        note(READ_ONLY_HINT.to_string());
    }
    if let Some(failure) = result.failure {
        note(failure);
        return ToolOutcome::error(text);
    }
    if result.timed_out {
        note(format!(
            "Command timed out after {} ms and was killed. Give a longer timeout (at most {} ms), \
             or run it with run_in_background and read its output with BashOutput.",
            timeout.as_millis(),
            MAX_TIMEOUT_MS
        ));
        return ToolOutcome::error(text);
    }
    if cancel.is_cancelled() && result.exit_code.is_none() {
        note("Interrupted by the user".to_string());
        return ToolOutcome::error(text);
    }
    match result.exit_code {
        Some(0) => {
            if text.is_empty() {
                text.push_str("(no output)");
            }
            ToolOutcome::ok(text)
        }
        Some(code) => {
            note(format!("Exit code {code}"));
            ToolOutcome::error(text)
        }
        None => {
            note("The command was killed by a signal".to_string());
            ToolOutcome::error(text)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_stream_stops_at_the_cap_and_says_how_much_more() {
        let mut cap = StreamCap::new(10);
        let mut seen = String::new();
        for chunk in ["abcd", "efgh", "ié", "j", "klm"] {
            if let Some(part) = cap.admit(chunk) {
                seen.push_str(part);
            }
        }
        // 10 bytes at most, cut before a character rather than inside it, and a prefix.
        assert_eq!(seen, "abcdefghi");
        assert_eq!(cap.truncation_line().as_deref(), Some("\n… output truncated, 6 bytes more\n"));

        let mut under = StreamCap::new(10);
        assert_eq!(under.admit("0123456789"), Some("0123456789"));
        assert_eq!(under.truncation_line(), None);
        let mut lines = StreamCap::new(3);
        assert_eq!(lines.admit("ab\ncd"), Some("ab\n"));
        assert_eq!(lines.truncation_line().as_deref(), Some("… output truncated, 2 bytes more\n"));
    }

    #[test]
    fn the_stream_cap_is_the_results() {
        assert_eq!(STREAM_CAP_BYTES, 30_000);
    }
}
