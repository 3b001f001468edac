//! The flags of Claude Code's headless mode (`claude -p --input-format stream-json
//! --output-format stream-json …`), as the Claude Agent SDKs pass them to the program they run:
//! `outboard` and `outboard run` accept them so an SDK's `cli_path` can point at `outboard`
//! (docs/STREAM_JSON.md). Clap definitions only; `streamjson::options` checks them and says,
//! in one line, which ones Outboard cannot honour.
//!
//! The flags whose meaning Outboard cannot carry out are declared here too, hidden: a program
//! that passes one gets `outboard: --FLAG is not supported …` (exit 2) instead of clap's
//! generic "unexpected argument", and never a silent change of behaviour.

use std::path::PathBuf;

use clap::Args;

/// `--input-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum InputFormat {
    /// The prompt is the PROMPT argument (`outboard run`).
    Text,
    /// User messages and control messages as JSON lines on stdin.
    #[value(name = "stream-json")]
    StreamJson,
}

/// `--output-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Outboard's own output (plain text, or `--json`): the flag changes nothing.
    Text,
    /// One `result` object per prompt.
    Json,
    /// Claude Code's messages as JSON lines.
    #[value(name = "stream-json")]
    StreamJson,
}

/// Claude Code's headless flags (see the module doc).
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct StreamJsonArgs {
    /// Claude Code's input: `stream-json` reads user messages (and the SDK's control requests)
    /// as JSON lines on stdin, for as many turns as come, until stdin closes
    /// (docs/STREAM_JSON.md).
    #[arg(
        long,
        value_enum,
        value_name = "text|stream-json",
        help_heading = "Claude Code compatibility"
    )]
    pub input_format: Option<InputFormat>,
    /// Claude Code's output: `stream-json` writes its messages (`system`, `assistant`, `user`,
    /// `result`) as JSON lines; `json` only each prompt's `result`.
    #[arg(
        long,
        value_enum,
        value_name = "text|json|stream-json",
        help_heading = "Claude Code compatibility"
    )]
    pub output_format: Option<OutputFormat>,
    /// Accepted for Claude Code's sake: stream-json output is always complete.
    #[arg(long, help_heading = "Claude Code compatibility")]
    pub verbose: bool,
    /// Also write `stream_event` lines: the answer's text as it streams.
    #[arg(long, help_heading = "Claude Code compatibility")]
    pub include_partial_messages: bool,
    /// `stdio`: ask the program on stdin (a `can_use_tool` control request) about each tool call
    /// the org's policy asks a person about. Without it such calls are denied.
    #[arg(long, value_name = "stdio", help_heading = "Claude Code compatibility")]
    pub permission_prompt_tool: Option<String>,
    /// `default`, `plan` (Outboard's plan mode), `acceptEdits` (file edits that ask are
    /// allowed), `bypassPermissions` (every call that asks is allowed) or `dontAsk` (every one
    /// is denied). The org's policy still decides what asks at all.
    #[arg(long, value_name = "MODE", help_heading = "Claude Code compatibility")]
    pub permission_mode: Option<String>,
    /// Continue this Outboard session (its id from `outboard sessions`).
    #[arg(long, value_name = "SESSION_ID", help_heading = "Claude Code compatibility")]
    pub resume: Option<String>,
    /// End a prompt's turn (`error_max_turns`) once the model has answered this many times.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), help_heading = "Claude Code compatibility")]
    pub max_turns: Option<u32>,
    /// Tools whose calls are allowed without asking, when the org's policy asks about them
    /// (comma- or space-separated names; `Name(pattern)` rules allow nothing here).
    #[arg(
        long = "allowedTools",
        alias = "allowed-tools",
        value_name = "TOOLS",
        help_heading = "Claude Code compatibility"
    )]
    pub allowed_tools: Vec<String>,
    /// Refused: the org's policy decides which tools a session has.
    #[arg(long = "disallowedTools", alias = "disallowed-tools", value_name = "TOOLS", hide = true)]
    pub disallowed_tools: Vec<String>,
    /// Only the empty value is accepted (the SDK's default): Outboard keeps its own system
    /// prompt, which the org's memory and skills extend.
    #[arg(long, value_name = "TEXT", help_heading = "Claude Code compatibility")]
    pub system_prompt: Option<String>,
    /// Refused (see --system-prompt).
    #[arg(long, value_name = "FILE", hide = true)]
    pub system_prompt_file: Option<PathBuf>,
    /// Refused (see --system-prompt).
    #[arg(long, value_name = "TEXT", hide = true)]
    pub append_system_prompt: Option<String>,
    /// Refused unless it names no server: MCP servers are the org's, on the server.
    #[arg(long, value_name = "JSON|FILE", hide = true)]
    pub mcp_config: Vec<String>,
    /// Refused (see --mcp-config).
    #[arg(long, hide = true)]
    pub strict_mcp_config: bool,
    /// Ignored: Outboard's settings are its flags, its configuration file and the org's.
    #[arg(long, value_name = "SOURCES", help_heading = "Claude Code compatibility")]
    pub setting_sources: Option<String>,
    /// Ignored: Outboard runs no hooks on this machine, so there are none to report.
    #[arg(long, help_heading = "Claude Code compatibility")]
    pub include_hook_events: bool,
    /// Only `default` is accepted: the org's policy decides the tools.
    #[arg(long, value_name = "TOOLS", hide = true)]
    pub tools: Option<String>,
    /// Claude Code flags Outboard does not support, refused by name (see the module doc).
    #[command(flatten)]
    pub refused: RefusedFlags,
}

/// Claude Code flags with no Outboard meaning: each one given is refused (exit 2).
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct RefusedFlags {
    /// Refused.
    #[arg(long, value_name = "MODEL", hide = true)]
    pub fallback_model: Option<String>,
    /// Refused.
    #[arg(long, value_name = "USD", hide = true)]
    pub max_budget_usd: Option<String>,
    /// Refused.
    #[arg(long, value_name = "BETAS", hide = true)]
    pub betas: Option<String>,
    /// Refused.
    #[arg(long, value_name = "UUID", hide = true)]
    pub session_id: Option<String>,
    /// Refused.
    #[arg(long, value_name = "JSON|FILE", hide = true)]
    pub settings: Option<String>,
    /// Refused.
    #[arg(long, value_name = "DIR", hide = true)]
    pub add_dir: Vec<String>,
    /// Refused.
    #[arg(long, value_name = "DIR", hide = true)]
    pub plugin_dir: Vec<String>,
    /// Refused.
    #[arg(long = "continue", hide = true)]
    pub continue_last: bool,
    /// Refused.
    #[arg(long, hide = true)]
    pub fork_session: bool,
    /// Refused.
    #[arg(long, value_name = "UUID", hide = true)]
    pub resume_session_at: Option<String>,
    /// Refused.
    #[arg(long, value_name = "UUID", hide = true)]
    pub resume_drops_turn: Option<String>,
    /// Refused.
    #[arg(long, hide = true)]
    pub session_mirror: bool,
    /// Refused.
    #[arg(long, value_name = "MODE", hide = true)]
    pub thinking: Option<String>,
    /// Refused.
    #[arg(long, value_name = "MODE", hide = true)]
    pub thinking_display: Option<String>,
    /// Refused.
    #[arg(long, value_name = "N", hide = true)]
    pub max_thinking_tokens: Option<String>,
    /// Refused.
    #[arg(long, value_name = "LEVEL", hide = true)]
    pub effort: Option<String>,
    /// Refused.
    #[arg(long, value_name = "SCHEMA", hide = true)]
    pub json_schema: Option<String>,
    /// Refused.
    #[arg(long, value_name = "N", hide = true)]
    pub task_budget: Option<String>,
    /// Refused.
    #[arg(long, hide = true)]
    pub dangerously_skip_permissions: bool,
}

impl RefusedFlags {
    /// The first refused flag given, by its name on the command line.
    pub fn first(&self) -> Option<&'static str> {
        let given: [(&'static str, bool); 19] = [
            ("--fallback-model", self.fallback_model.is_some()),
            ("--max-budget-usd", self.max_budget_usd.is_some()),
            ("--betas", self.betas.is_some()),
            ("--session-id", self.session_id.is_some()),
            ("--settings", self.settings.is_some()),
            ("--add-dir", !self.add_dir.is_empty()),
            ("--plugin-dir", !self.plugin_dir.is_empty()),
            ("--continue", self.continue_last),
            ("--fork-session", self.fork_session),
            ("--resume-session-at", self.resume_session_at.is_some()),
            ("--resume-drops-turn", self.resume_drops_turn.is_some()),
            ("--session-mirror", self.session_mirror),
            ("--thinking", self.thinking.is_some()),
            ("--thinking-display", self.thinking_display.is_some()),
            ("--max-thinking-tokens", self.max_thinking_tokens.is_some()),
            ("--effort", self.effort.is_some()),
            ("--json-schema", self.json_schema.is_some()),
            ("--task-budget", self.task_budget.is_some()),
            ("--dangerously-skip-permissions", self.dangerously_skip_permissions),
        ];
        given.into_iter().find(|(_, on)| *on).map(|(name, _)| name)
    }
}

impl StreamJsonArgs {
    /// Whether any of these flags was given (then the stream-json front end runs, or the
    /// flags are refused).
    pub fn any(&self) -> bool {
        *self != StreamJsonArgs::default()
    }
}
