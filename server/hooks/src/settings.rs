//! The `hooks` of a repository's `settings.json` (`.claude/settings.json`,
//! `.claude/settings.local.json`), read from bytes with limits; everything else in the file
//! (permissions, env, model…) is not read here.
//!
//! Shape, as Claude Code's: `{"hooks": {"<Event>": [{"matcher": "…", "hooks": [{"type":
//! "command", "command": "…", "timeout": 30, "onFailure": "block"}]}]}}`. A bad entry is
//! reported with where it is, and the rest still loads. A repository's file may only add
//! hooks that run in the sandbox: a `type: "http"` hook (the server would make a request to an
//! address the repository chose) is reported and not loaded.

use std::time::Duration;

use serde_json::Value;

use crate::event::HookEvent;
use crate::matcher::Matcher;

/// The most of a settings file read; a larger file is refused whole.
pub const MAX_SETTINGS_BYTES: usize = 256 * 1024;
/// Hooks loaded from one file; the rest are reported.
pub const MAX_HOOKS_PER_FILE: usize = 64;
/// The longest `command`.
pub const MAX_COMMAND_BYTES: usize = 8 * 1024;
/// A hook's timeout when it gives none (Claude Code's).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest timeout a hook may ask for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);

/// Whose a hook is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A file of the workspace, by its path below `/workspace`.
    Repository(String),
    /// An org hook, by its id (`admin hook add`).
    Org(String),
}

impl Source {
    /// How the session log names it.
    pub fn label(&self) -> String {
        match self {
            Source::Repository(file) => format!("repository hook in {file}"),
            Source::Org(id) => format!("org hook {id}"),
        }
    }
}

/// What runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handler {
    /// `bash -c COMMAND`, in the session's sandbox.
    Command(String),
    /// A POST of the input to this URL, from the server (org hooks only).
    Http(String),
}

/// One hook, ready to match and run.
#[derive(Debug, Clone)]
pub struct HookSpec {
    pub event: HookEvent,
    pub matcher: Matcher,
    /// The matcher as written.
    pub matcher_text: String,
    pub handler: Handler,
    pub timeout: Duration,
    /// `onFailure: "block"`: a hook that fails (times out, crashes, answers nonsense) blocks
    /// instead of being let through. Always set for org hooks.
    pub block_on_failure: bool,
    pub source: Source,
}

impl HookSpec {
    /// Whether it is set on `event` and matches `subject` (a tool name, or the event's own
    /// subject; `None`: the matcher is not consulted).
    pub fn applies(&self, event: HookEvent, subject: Option<&str>) -> bool {
        self.event == event && subject.is_none_or(|s| self.matcher.matches(s))
    }

    /// A short name for logs: the command's first line or the URL's host, never a query.
    pub fn short(&self) -> String {
        let text = match &self.handler {
            Handler::Command(c) => c.lines().next().unwrap_or_default().to_owned(),
            Handler::Http(u) => u.split(['?', '#']).next().unwrap_or_default().to_owned(),
        };
        let mut cut: String = text.chars().take(80).collect();
        if cut.len() < text.len() {
            cut.push('…');
        }
        cut
    }
}

/// A file's hooks and what was wrong in it.
#[derive(Debug, Default)]
pub struct Parsed {
    pub hooks: Vec<HookSpec>,
    /// One sentence a problem, naming the file and where in it.
    pub problems: Vec<String>,
}

/// Reads the hooks of `bytes`, the content of the repository's `file`.
pub fn parse(file: &str, bytes: &[u8]) -> Parsed {
    let mut out = Parsed::default();
    if bytes.len() > MAX_SETTINGS_BYTES {
        out.problems.push(format!(
            "{file}: larger than {MAX_SETTINGS_BYTES} bytes; its hooks are not loaded"
        ));
        return out;
    }
    let root: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => {
            out.problems.push(format!(
                "{file}: line {}, column {}: not JSON ({e}); its hooks are not loaded",
                e.line(),
                e.column()
            ));
            return out;
        }
    };
    let Some(hooks) = root.get("hooks") else { return out };
    let Some(events) = hooks.as_object() else {
        out.problems.push(format!("{file}: `hooks` is not an object; no hook loaded"));
        return out;
    };
    for (name, groups) in events {
        let Some(event) = HookEvent::parse(name) else {
            out.problems.push(format!(
                "{file}: hooks.{name}: unknown event (known: {}); skipped",
                HookEvent::ALL.map(HookEvent::name).join(", ")
            ));
            continue;
        };
        let Some(groups) = groups.as_array() else {
            out.problems.push(format!("{file}: hooks.{name}: not a list; skipped"));
            continue;
        };
        for (g, group) in groups.iter().enumerate() {
            let at = format!("{file}: hooks.{name}[{g}]");
            let matcher_text = group.get("matcher").and_then(Value::as_str).unwrap_or("");
            let matcher = match Matcher::parse(matcher_text) {
                Ok(m) => m,
                Err(e) => {
                    out.problems.push(format!("{at}: {e}; skipped"));
                    continue;
                }
            };
            let Some(handlers) = group.get("hooks").and_then(Value::as_array) else {
                out.problems.push(format!("{at}: no `hooks` list; skipped"));
                continue;
            };
            for (h, handler) in handlers.iter().enumerate() {
                let at = format!("{at}.hooks[{h}]");
                if out.hooks.len() >= MAX_HOOKS_PER_FILE {
                    out.problems.push(format!(
                        "{at}: more than {MAX_HOOKS_PER_FILE} hooks in one file; the rest are \
                         not loaded"
                    ));
                    return out;
                }
                match one(event, handler) {
                    Ok((handler, timeout, block_on_failure)) => out.hooks.push(HookSpec {
                        event,
                        matcher: matcher.clone(),
                        matcher_text: matcher_text.to_owned(),
                        handler,
                        timeout,
                        block_on_failure,
                        source: Source::Repository(file.to_owned()),
                    }),
                    Err(why) => out.problems.push(format!("{at}: {why}; skipped")),
                }
            }
        }
    }
    out
}

fn one(event: HookEvent, handler: &Value) -> Result<(Handler, Duration, bool), String> {
    let kind = handler.get("type").and_then(Value::as_str).unwrap_or("command");
    let handler_of = match kind {
        "command" => {
            let command = handler
                .get("command")
                .and_then(Value::as_str)
                .filter(|c| !c.trim().is_empty())
                .ok_or("a command hook without a `command`")?;
            if command.len() > MAX_COMMAND_BYTES {
                return Err(format!("its command is longer than {MAX_COMMAND_BYTES} bytes"));
            }
            Handler::Command(command.to_owned())
        }
        "http" => {
            return Err("an http hook in a repository file is not run: the server would call an \
                        address the repository chose (an org admin adds webhooks with \
                        `outboard-server admin hook add`)"
                .into())
        }
        other => return Err(format!("hooks of type {other:?} are not supported")),
    };
    let timeout = match handler.get("timeout") {
        None | Some(Value::Null) => DEFAULT_TIMEOUT,
        Some(t) => match t.as_f64().filter(|s| s.is_finite() && *s > 0.0) {
            Some(s) => Duration::from_secs_f64(s.min(MAX_TIMEOUT.as_secs_f64())),
            None => return Err("`timeout` is not a positive number of seconds".into()),
        },
    };
    let block = match handler.get("onFailure").and_then(Value::as_str) {
        None | Some("continue" | "ignore" | "allow") => false,
        Some("block") => true,
        Some(other) => return Err(format!("`onFailure` {other:?} is neither block nor continue")),
    };
    let _ = event; // a hook on an event Outboard does not fire yet loads; the harness says so
    Ok((handler_of, timeout, block))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_loads_what_is_good_and_names_what_is_not() {
        let text = br#"{"permissions": {"allow": ["Bash(ls)"]}, "hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [
                {"type": "command", "command": "./guard.sh", "timeout": 5, "onFailure": "block"},
                {"type": "http", "url": "http://169.254.169.254/"},
                {"type": "command"}]}],
            "PostToolUse": [{"matcher": "Edit|Write", "hooks": [{"command": "fmt"}]}],
            "Bogus": [],
            "Stop": [{"matcher": "(", "hooks": []}]}}"#;
        let parsed = parse(".claude/settings.json", text);
        assert_eq!(parsed.hooks.len(), 2, "{parsed:?}");
        // Events come in name order (the JSON object is read sorted).
        let guard = parsed.hooks.iter().find(|h| h.event == HookEvent::PreToolUse).unwrap();
        assert_eq!(guard.timeout, Duration::from_secs(5));
        assert!(guard.block_on_failure && guard.applies(HookEvent::PreToolUse, Some("Bash")));
        assert!(!guard.applies(HookEvent::PreToolUse, Some("Edit")));
        let format = parsed.hooks.iter().find(|h| h.event == HookEvent::PostToolUse).unwrap();
        assert_eq!(format.timeout, DEFAULT_TIMEOUT);
        assert!(format.applies(HookEvent::PostToolUse, Some("Write")));
        let problems = parsed.problems.join("\n");
        assert!(problems.contains("hooks.PreToolUse[0].hooks[1]: an http hook"), "{problems}");
        assert!(problems.contains("hooks.PreToolUse[0].hooks[2]: a command hook"), "{problems}");
        assert!(problems.contains("hooks.Bogus: unknown event"), "{problems}");
        assert!(problems.contains("hooks.Stop[0]: the matcher"), "{problems}");
    }

    #[test]
    fn bad_json_and_big_files_are_named_with_where() {
        let p = parse("f.json", b"{\n \"hooks\": [,]}");
        assert!(p.problems[0].starts_with("f.json: line 2, column"), "{:?}", p.problems);
        let big = vec![b' '; MAX_SETTINGS_BYTES + 1];
        assert!(parse("f.json", &big).problems[0].contains("larger than"));
        let many = format!(
            r#"{{"hooks": {{"Stop": [{{"hooks": [{}]}}]}}}}"#,
            vec![r#"{"command": "true"}"#; MAX_HOOKS_PER_FILE + 3].join(",")
        );
        let p = parse("f.json", many.as_bytes());
        assert_eq!(p.hooks.len(), MAX_HOOKS_PER_FILE);
        assert!(p.problems[0].contains("the rest are not loaded"), "{:?}", p.problems);
    }
}
