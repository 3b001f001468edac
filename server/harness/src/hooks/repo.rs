//! A repository's hooks: read from the workspace as bytes, run in the session's sandbox.
//!
//! The files (`.claude/settings.json`, then `.claude/settings.local.json`) are read fresh at
//! the start of each turn through the workspace's confined root, as `AGENTS.md` is (a link out
//! of the workspace is refused, never followed), at most `MAX_SETTINGS_BYTES` each, on the
//! blocking pool, and parsed as data: they can only add hooks that run in the sandbox.
//!
//! A hook runs as `bash -c` in the sandbox, like a `Bash` call (its limits, its network
//! policy, no credentials, no environment of the server's), in a subshell so its `cd` does not
//! move the model's shell, with `CLAUDE_PROJECT_DIR=/workspace` and its JSON input on stdin
//! (a here-document: the input is one line of JSON, so its end marker cannot occur in it).
//! What it prints is kept up to [`HOOK_OUTPUT_BYTES`] a stream.

use std::io::Read as _;
use std::path::Path;
use std::time::Duration;

use outboard_hooks::{settings, HookSpec, Parsed, RunResult};
use outboard_shared::OutputStream;
use outboard_vfs::confined::{file_type, ConfinedError, Root};

use crate::state::Turn;

/// The settings files read, in order (a later file's hooks are added to an earlier one's).
pub const SETTINGS_FILES: [&str; 2] = [".claude/settings.json", ".claude/settings.local.json"];

/// The most of a hook's stdout, and of its stderr, kept; the rest is dropped (and said).
pub const HOOK_OUTPUT_BYTES: usize = 64 * 1024;

/// The repository's hooks and what was wrong in its files.
pub fn read(root: &Root) -> Parsed {
    let mut out = Parsed::default();
    for file in SETTINGS_FILES {
        match read_one(root, file) {
            Ok(bytes) => {
                let parsed = settings::parse(file, &bytes);
                out.hooks.extend(parsed.hooks);
                out.problems.extend(parsed.problems);
            }
            Err(ConfinedError::NotFound) => {}
            Err(e) => out.problems.push(format!("{file}: not read: it {e}")),
        }
    }
    out
}

fn read_one(root: &Root, file: &str) -> Result<Vec<u8>, ConfinedError> {
    let opened = root.open_read(Path::new(file))?;
    if file_type(&opened.stat) != rustix::fs::FileType::RegularFile {
        return Err(ConfinedError::IsDir);
    }
    let limit = settings::MAX_SETTINGS_BYTES as u64 + 1;
    let mut bytes = Vec::new();
    (&opened.file).take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// `'…'` around `text` for bash.
fn quote(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

/// The script the sandbox runs for `command` with `input` (one line of JSON) on stdin.
pub fn script(command: &str, input: &str) -> String {
    debug_assert!(!input.contains('\n'));
    format!(
        "( cd {dir} 2>/dev/null; export CLAUDE_PROJECT_DIR={dir}; exec bash -c {cmd} ) \
         <<'OUTBOARD_HOOK_INPUT_END'\n{input}\nOUTBOARD_HOOK_INPUT_END\n",
        dir = outboard_hooks::input::PROJECT_DIR,
        cmd = quote(command),
    )
}

/// Runs `command` (a repository hook) in the turn's sandbox with `input`.
pub async fn run(turn: &Turn, spec: &HookSpec, command: &str, input: &str) -> RunResult {
    let script = script(command, input);
    let mut stdout = Bounded::default();
    let mut stderr = Bounded::default();
    let mut on_output = |stream: OutputStream, text: &str| match stream {
        OutputStream::Stdout => stdout.push(text),
        OutputStream::Stderr => stderr.push(text),
    };
    let cancel = turn.cancel.child_token();
    let timeout = spec.timeout;
    let ran = match turn.env.remote.as_deref() {
        Some(remote) => remote.exec(&script, timeout, &mut on_output, cancel).await,
        None => {
            let plan = turn.approvals.gate.mode() == outboard_shared::SessionMode::Plan;
            let sandbox = &turn.env.sandbox;
            let ran = match plan {
                true => sandbox.exec_read_only(&script, timeout, &mut on_output, cancel).await,
                false => sandbox.exec(&script, timeout, &mut on_output, cancel).await,
            };
            ran.map_err(|e| e.to_string())
        }
    };
    let result = match ran {
        Ok(result) => result,
        Err(e) => {
            return RunResult { failure: Some(format!("could not run: {e}")), ..Default::default() }
        }
    };
    let failure = if result.timed_out {
        Some(format!("did not finish within {}", seconds(timeout)))
    } else if let Some(why) = result.failure {
        Some(why)
    } else if let Some(signal) = result.signal {
        Some(format!("was killed by signal {signal}"))
    } else if turn.cancel.is_cancelled() {
        Some("was stopped: the turn was interrupted".into())
    } else {
        None
    };
    let mut failure = failure;
    if failure.is_none() && stdout.dropped > 0 {
        // A cut answer is not the hook's answer: it fails (and blocks if it says so).
        failure = Some(format!(
            "printed more than {HOOK_OUTPUT_BYTES} bytes on stdout ({} more dropped)",
            stdout.dropped
        ));
    }
    RunResult { exit_code: result.exit_code, stdout: stdout.text, stderr: stderr.text, failure }
}

fn seconds(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// Text kept up to [`HOOK_OUTPUT_BYTES`], counting what was dropped.
#[derive(Default)]
struct Bounded {
    text: String,
    dropped: usize,
}

impl Bounded {
    fn push(&mut self, chunk: &str) {
        let room = HOOK_OUTPUT_BYTES.saturating_sub(self.text.len());
        let mut cut = chunk.len().min(room);
        while !chunk.is_char_boundary(cut) {
            cut -= 1;
        }
        self.text.push_str(&chunk[..cut]);
        self.dropped += chunk.len() - cut;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_is_bounded_and_the_drop_counted() {
        let mut b = Bounded::default();
        b.push(&"x".repeat(HOOK_OUTPUT_BYTES - 1));
        b.push("éé");
        assert_eq!(b.text.len(), HOOK_OUTPUT_BYTES - 1);
        assert_eq!(b.dropped, 4);
    }

    #[test]
    fn the_script_quotes_the_command_and_feeds_the_input() {
        let s = script("echo 'a' && exit 2", r#"{"x":"OUTBOARD_HOOK_INPUT_END"}"#);
        assert!(s.contains(r"exec bash -c 'echo '\''a'\'' && exit 2' )"), "{s}");
        assert!(s.ends_with("\n{\"x\":\"OUTBOARD_HOOK_INPUT_END\"}\nOUTBOARD_HOOK_INPUT_END\n"));
    }

    #[test]
    fn a_settings_link_out_of_the_workspace_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let host = outside.path().join("settings.json");
        std::fs::write(&host, r#"{"hooks": {"Stop": [{"hooks": [{"command": "true"}]}]}}"#)
            .unwrap();
        std::fs::create_dir(dir.path().join(".claude")).unwrap();
        std::os::unix::fs::symlink(&host, dir.path().join(".claude/settings.json")).unwrap();
        let ws = outboard_vfs::Workspace::new(dir.path().to_path_buf()).unwrap();
        let parsed = read(ws.confined());
        assert!(parsed.hooks.is_empty());
        assert!(parsed.problems[0].starts_with(".claude/settings.json: not read"), "{parsed:?}");
    }
}
