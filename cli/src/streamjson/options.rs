//! Claude Code's flags, checked: what Outboard can carry out becomes [`Options`]; a flag that
//! would change behaviour in a way Outboard cannot honour is refused with one line naming it
//! ([`OptionsError`], exit 2); the few that change nothing here are listed in
//! [`Options::ignored`] and named on stderr. Nothing is dropped silently.

use crate::args::{InputFormat, OutputFormat, RunArgs};

/// What a turn's output looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Every message (`--output-format stream-json`).
    StreamJson,
    /// Only each prompt's `result` (`--output-format json`).
    Json,
}

/// Where the prompts come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompts {
    /// User messages on stdin (`--input-format stream-json`), with the control protocol.
    Stdin,
    /// One prompt, the PROMPT argument (read from stdin when `-`); stdin is not read after it.
    Once(String),
}

/// Claude Code's permission modes, as far as Outboard has them. The org's policy decides which
/// calls ask; the mode decides who answers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PermissionMode {
    /// Calls that ask go to the program (`--permission-prompt-tool stdio`), else are denied.
    Default,
    /// Outboard's plan mode; calls that ask are answered as in `Default`.
    Plan,
    /// File edits (`Write`, `Edit`, `NotebookEdit`) that ask are allowed; others as `Default`.
    AcceptEdits,
    /// Every call that asks is allowed (except what the org's rules could not judge).
    BypassPermissions,
    /// Every call that asks is denied.
    DontAsk,
}

impl PermissionMode {
    /// Claude Code's name of a mode; an error says which names there are.
    pub fn parse(name: &str) -> Result<PermissionMode, String> {
        match name {
            "default" => Ok(PermissionMode::Default),
            "plan" => Ok(PermissionMode::Plan),
            "acceptEdits" => Ok(PermissionMode::AcceptEdits),
            "bypassPermissions" => Ok(PermissionMode::BypassPermissions),
            "dontAsk" => Ok(PermissionMode::DontAsk),
            "auto" => Err("permission mode `auto` (a model that judges each call) is not \
                           supported: the org's tool policy judges calls; use default, plan, \
                           acceptEdits, bypassPermissions or dontAsk"
                .to_owned()),
            other => Err(format!(
                "unknown permission mode {other:?}: use default, plan, acceptEdits, \
                 bypassPermissions or dontAsk"
            )),
        }
    }

    /// Claude Code's name.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Default => "default",
            PermissionMode::Plan => "plan",
            PermissionMode::AcceptEdits => "acceptEdits",
            PermissionMode::BypassPermissions => "bypassPermissions",
            PermissionMode::DontAsk => "dontAsk",
        }
    }
}

/// The stream-json front end's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    /// The output.
    pub output: Output,
    /// The input.
    pub prompts: Prompts,
    /// `--include-partial-messages`.
    pub partial: bool,
    /// `--permission-prompt-tool stdio`: calls that ask are asked on stdin.
    pub ask_stdio: bool,
    /// `--permission-mode` (or `--plan`).
    pub mode: PermissionMode,
    /// `--max-turns`.
    pub max_turns: Option<u32>,
    /// `--allowedTools`' bare tool names.
    pub allowed_tools: Vec<String>,
    /// `--resume` (or `--session`): the Outboard session to continue.
    pub resume: Option<String>,
    /// Flags accepted that change nothing here, each with why.
    pub ignored: Vec<String>,
}

/// A flag Outboard cannot honour; the process exits 2 with this line.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0} (docs/STREAM_JSON.md)")]
pub struct OptionsError(pub String);

fn refuse<T>(text: impl Into<String>) -> Result<T, OptionsError> {
    Err(OptionsError(text.into()))
}

/// Checks the flags of a stream-json run; `prompt` is the PROMPT argument (none for the bare
/// `outboard`).
pub fn check(args: &RunArgs) -> Result<Options, OptionsError> {
    let s = &args.stream;
    let output = match s.output_format {
        Some(OutputFormat::StreamJson) => Output::StreamJson,
        Some(OutputFormat::Json) => Output::Json,
        Some(OutputFormat::Text) | None => {
            return refuse(
                "Claude Code's flags (--input-format, --permission-mode, …) need \
                 --output-format stream-json (or json)",
            )
        }
    };
    if args.json {
        return refuse("--json is Outboard's own output; it excludes --output-format");
    }
    let prompts = match (s.input_format, &args.prompt) {
        (Some(InputFormat::StreamJson), None) => Prompts::Stdin,
        (Some(InputFormat::StreamJson), Some(_)) => {
            return refuse(
                "--input-format stream-json reads the prompts from stdin: give no PROMPT",
            )
        }
        (_, Some(prompt)) => Prompts::Once(prompt.clone()),
        (_, None) => return refuse("give a PROMPT, or --input-format stream-json"),
    };
    if prompts == Prompts::Stdin && output == Output::Json {
        return refuse("--input-format stream-json needs --output-format stream-json");
    }
    if !args.images.is_empty() && prompts == Prompts::Stdin {
        return refuse("--image with --input-format stream-json: send images as image blocks");
    }
    let ask_stdio = match s.permission_prompt_tool.as_deref() {
        None => false,
        Some("stdio") => true,
        Some(other) => {
            return refuse(format!(
                "--permission-prompt-tool {other}: only `stdio` is supported (the program \
                 answers `can_use_tool` control requests); an MCP tool cannot be the prompt"
            ))
        }
    };
    if ask_stdio && prompts != Prompts::Stdin {
        return refuse("--permission-prompt-tool stdio needs --input-format stream-json");
    }
    let mut mode = match s.permission_mode.as_deref() {
        None => PermissionMode::Default,
        Some(name) => PermissionMode::parse(name).map_err(OptionsError)?,
    };
    if args.plan {
        if s.permission_mode.is_some() && mode != PermissionMode::Plan {
            return refuse("--plan and --permission-mode say different things: give one");
        }
        mode = PermissionMode::Plan;
    }
    if let Some(prompt) = s.system_prompt.as_deref().filter(|p| !p.trim().is_empty()) {
        let _ = prompt;
        return refuse(
            "--system-prompt with text is not supported: Outboard keeps its own system prompt \
             (extended by the org's memory and skills); give an empty one, or none",
        );
    }
    if s.system_prompt_file.is_some() || s.append_system_prompt.is_some() {
        let flag = if s.system_prompt_file.is_some() {
            "--system-prompt-file"
        } else {
            "--append-system-prompt"
        };
        return refuse(format!(
            "{flag} is not supported: Outboard keeps its own system prompt; put lasting \
             instructions in the org's memory (`outboard memory write MEMORY.md`)"
        ));
    }
    if !s.disallowed_tools.is_empty() {
        return refuse(
            "--disallowedTools is not supported: the org's tool policy decides which tools a \
             session has (`outboard-server admin policy`)",
        );
    }
    if let Some(tools) = s.tools.as_deref().filter(|t| *t != "default") {
        return refuse(format!(
            "--tools {tools:?} is not supported: the org's tool policy decides which tools a \
             session has; only `default` is accepted"
        ));
    }
    for config in &s.mcp_config {
        if !names_no_server(config) {
            return refuse(
                "--mcp-config is not supported: MCP servers are the org's, connected on the \
                 server (`outboard-server admin mcp`)",
            );
        }
    }
    if s.strict_mcp_config {
        return refuse("--strict-mcp-config is not supported: MCP servers are the org's");
    }
    if let Some(flag) = s.refused.first() {
        return refuse(format!("{flag} is not supported by Outboard's stream-json mode"));
    }
    let resume = match (&s.resume, &args.session) {
        (Some(a), Some(b)) if a != b => return refuse("--resume and --session name two sessions"),
        (a, b) => a.clone().or_else(|| b.clone()),
    };
    let mut ignored = Vec::new();
    if s.verbose {
        ignored.push("--verbose (stream-json output is always complete)".to_owned());
    }
    if s.setting_sources.is_some() {
        ignored.push("--setting-sources (Outboard's settings are its own and the org's)".into());
    }
    if s.include_hook_events {
        ignored.push("--include-hook-events (no hooks run on this machine)".to_owned());
    }
    let mut allowed_tools = Vec::new();
    for rule in s.allowed_tools.iter().flat_map(|v| split_rules(v)) {
        if rule.contains('(') {
            ignored.push(format!("--allowedTools rule {rule} (only bare tool names allow here)"));
        } else {
            allowed_tools.push(rule);
        }
    }
    Ok(Options {
        output,
        prompts,
        partial: s.include_partial_messages,
        ask_stdio,
        mode,
        max_turns: s.max_turns,
        allowed_tools,
        resume,
        ignored,
    })
}

/// Claude Code's rule list: commas and spaces separate rules, except inside parentheses.
pub fn split_rules(text: &str) -> Vec<String> {
    let (mut rules, mut current, mut depth) = (Vec::new(), String::new(), 0usize);
    for c in text.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' | ' ' if depth == 0 => {
                if !current.is_empty() {
                    rules.push(std::mem::take(&mut current));
                }
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    if !current.is_empty() {
        rules.push(current);
    }
    rules
}

/// Whether an `--mcp-config` value is JSON naming no server (what an SDK may pass by default).
fn names_no_server(config: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(config)
        .ok()
        .and_then(|v| v.get("mcpServers").and_then(|s| s.as_object()).map(|s| s.is_empty()))
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;
    use pretty_assertions::assert_eq;

    fn check_argv(argv: &[&str]) -> Result<Options, OptionsError> {
        let cli = crate::args::Cli::try_parse_from(argv).unwrap();
        let Some(crate::args::Command::Run(args)) = cli.command else { panic!("not run") };
        check(&args)
    }

    #[test]
    fn what_the_sdk_passes_is_taken() {
        let options = check_argv(&[
            "outboard",
            "run",
            "--output-format",
            "stream-json",
            "--verbose",
            "--system-prompt=",
            "--permission-prompt-tool=stdio",
            "--allowedTools=Read,Bash(git:*) Grep",
            "--max-turns=3",
            "--resume=s_1",
            "--setting-sources=",
            "--input-format",
            "stream-json",
        ])
        .unwrap();
        assert_eq!(
            options,
            Options {
                output: Output::StreamJson,
                prompts: Prompts::Stdin,
                partial: false,
                ask_stdio: true,
                mode: PermissionMode::Default,
                max_turns: Some(3),
                allowed_tools: vec!["Read".into(), "Grep".into()],
                resume: Some("s_1".into()),
                ignored: vec![
                    "--verbose (stream-json output is always complete)".into(),
                    "--setting-sources (Outboard's settings are its own and the org's)".into(),
                    "--allowedTools rule Bash(git:*) (only bare tool names allow here)".into(),
                ],
            }
        );
    }

    #[test]
    fn what_changes_behaviour_is_refused_by_name() {
        let base = ["outboard", "run", "--output-format=stream-json", "--input-format=stream-json"];
        for (flag, says) in [
            ("--system-prompt=be terse", "--system-prompt with text"),
            ("--append-system-prompt=x", "--append-system-prompt"),
            ("--disallowedTools=Bash", "--disallowedTools"),
            ("--permission-mode=auto", "`auto`"),
            ("--permission-prompt-tool=mcp__x__y", "only `stdio`"),
            ("--mcp-config={\"mcpServers\":{\"a\":{}}}", "--mcp-config"),
            ("--fallback-model=x", "--fallback-model is not supported"),
            ("--continue", "--continue is not supported"),
            ("--tools=Read", "--tools"),
        ] {
            let mut argv = base.to_vec();
            argv.push(flag);
            let err = check_argv(&argv).unwrap_err();
            assert!(err.to_string().contains(says), "{flag}: {err}");
        }
        let err = check_argv(&["outboard", "run", "--permission-mode=plan", "hi"]).unwrap_err();
        assert!(err.to_string().contains("need --output-format"), "{err}");
    }

    #[test]
    fn an_empty_mcp_config_and_default_tools_are_fine() {
        let options = check_argv(&[
            "outboard",
            "run",
            "--output-format=json",
            "--mcp-config",
            "{\"mcpServers\": {}}",
            "--tools=default",
            "hello",
        ])
        .unwrap();
        assert_eq!(
            (options.output, options.prompts),
            (Output::Json, Prompts::Once("hello".into()))
        );
    }
}
