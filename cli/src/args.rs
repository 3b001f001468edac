//! The command line of `outboard`: clap definitions only, no behaviour. Scripts and tests depend on
//! these flags and their environment variables, so changing one is a breaking change.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

mod stream_json;
pub use stream_json::{InputFormat, OutputFormat, RefusedFlags, StreamJsonArgs};

/// `outboard`: talk to an Outboard agent from a terminal or a script.
#[derive(Debug, Clone, PartialEq, Parser)]
#[command(name = "outboard", version, about, propagate_version = true)]
pub struct Cli {
    /// What to do; with none, the TUI opens on a new session.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Connection flags of the TUI (when no subcommand is given).
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Where the TUI's new session's files come from.
    #[command(flatten)]
    pub source: SourceArgs,
    /// The TUI with --server: send DIR (default: the current directory) and work on the copy,
    /// as `outboard run --upload` does.
    #[arg(long, value_name = "DIR", num_args = 0..=1, default_missing_value = ".")]
    pub upload: Option<PathBuf>,
    /// Start the TUI's new session in plan mode: the model explores and proposes a plan, and
    /// changes nothing until you approve it (Shift-Tab or /plan switches).
    #[arg(long)]
    pub plan: bool,
    /// The configuration file (default: $XDG_CONFIG_HOME/outboard/config.toml, else
    /// ~/.config/outboard/config.toml; a missing default file is no error). Its keys are the
    /// long names, with `_` for `-`, of the flags that have an environment variable; a flag or
    /// a variable wins over it. `outboard config show` prints what is in effect.
    #[arg(long, global = true, env = "OUTBOARD_CONFIG", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The TUI's colours: `auto`, the terminal's own named colours (so its light or dark theme
    /// holds), none when NO_COLOR is set; `color`, colours even then; `mono`, none at all (bold,
    /// dim and reverse only).
    #[arg(long, global = true, env = "OUTBOARD_THEME", value_enum, default_value = "auto")]
    pub theme: ThemeChoice,
    /// Claude Code's headless flags: with `--input-format stream-json --output-format
    /// stream-json`, `outboard` speaks Claude Code's stream-json protocol on stdin and stdout
    /// instead of opening the TUI (what the Claude Agent SDKs run).
    #[command(flatten)]
    pub stream: Box<StreamJsonArgs>,
    /// Open the TUI on this session (the one `outboard` names on exit), driving it when it is
    /// yours; the same as `outboard attach ID --drive`.
    #[arg(long, value_name = "ID", conflicts_with_all = ["upload", "plan", "repo"])]
    pub session: Option<String>,
    /// How the TUI announces a turn of 10 s or more that ends while its terminal is not focused
    /// (terminals that report focus): `bell`, the terminal's bell; `osc9`, a desktop
    /// notification (OSC 9: iTerm2, WezTerm, kitty, ghostty, Windows Terminal) and the bell;
    /// `off`.
    #[arg(long, global = true, env = "OUTBOARD_NOTIFY", value_enum, default_value = "bell")]
    pub notify: NotifyChoice,
}

/// `--notify`: how the TUI announces a long turn's end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum NotifyChoice {
    /// The terminal's bell.
    #[default]
    Bell,
    /// OSC 9 and the bell.
    Osc9,
    /// Nothing.
    Off,
}

/// `--theme`: whether the TUI colours its screen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ThemeChoice {
    /// Colours unless NO_COLOR is set to a non-empty value.
    #[default]
    Auto,
    /// Colours, whatever NO_COLOR says.
    Color,
    /// No colours.
    Mono,
}

/// Where a new session's workspace comes from, instead of the current directory.
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct SourceArgs {
    /// Work on a clone of this repository, made by the server (`https://host/path[#REF]`; REF is
    /// a branch, a tag or a full commit id, the default branch when absent). The server
    /// authenticates with the org's credential for the host (`outboard-server admin secret set`);
    /// never put a credential in the URL.
    #[arg(long, value_name = "URL[#REF]", conflicts_with_all = ["workspace", "upload"])]
    pub repo: Option<String>,
    /// What new sessions' sandboxes may reach: `org`, the org's policy (`outboard-server admin
    /// network show --org ORG`), or `none`, no network at all. A session can only narrow its
    /// org's policy.
    #[arg(long, env = "OUTBOARD_NETWORK", value_name = "org|none", default_value = "org")]
    pub network: outboard_shared::SessionNetwork,
    /// The model's context window in tokens for new sessions, overriding the server's (a local
    /// model whose `n_ctx` is smaller than its family's window).
    #[arg(
        long,
        env = "OUTBOARD_CONTEXT_WINDOW",
        value_name = "TOKENS",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub context_window: Option<u64>,
}

impl SourceArgs {
    /// `--repo URL#REF` as (URL, REF).
    pub fn repo_spec(&self) -> Option<outboard_shared::SourceSpec> {
        let text = self.repo.as_deref()?.trim();
        let (url, git_ref) = match text.rsplit_once('#') {
            Some((url, r)) => (url, Some(r.to_owned()).filter(|r| !r.is_empty())),
            None => (text, None),
        };
        Some(outboard_shared::SourceSpec::Repo { url: url.to_owned(), git_ref })
    }
}

/// The subcommands.
#[derive(Debug, Clone, PartialEq, Subcommand)]
pub enum Command {
    /// Run one turn headlessly: send PROMPT, stream the answer, exit with the turn's status
    /// (0 completed, 1 failed, 2 usage or configuration, 3 cannot connect or not authorised).
    Run(RunArgs),
    /// List the sessions of your org.
    Sessions(SessionsArgs),
    /// List the models the server offers (`--model NAME` picks one for a session; `*` marks
    /// the default).
    Models(ModelsArgs),
    /// Token usage of your org's model calls and an estimated cost, by session, user or day.
    Usage(UsageArgs),
    /// Compact a session's conversation now: the model summarises it and the session goes on
    /// from the summary and its newest step (sessions also compact by themselves when their
    /// context window fills up). Your session, with no one else driving it.
    Compact(CompactArgs),
    /// List a session's checkpoints: one per prompt, the state (files and conversation) just
    /// before it, numbered from 1.
    Checkpoints(CheckpointsArgs),
    /// Take a session back to checkpoint N (the state just before prompt N): its files and
    /// its conversation, or only one of them. Your session, with no one else driving it, and
    /// no turn running.
    Rewind(RewindArgs),
    /// Start a new session from checkpoint N of a session (default: from now), with its own
    /// copy of the workspace and the conversation up to there; prints the new session's id.
    Fork(ForkArgs),
    /// Open the TUI on an existing session (yours or a teammate's) as a watcher, or as the
    /// driver with --drive (the owner drives at once; anyone else asks the driver).
    Attach(AttachArgs),
    /// Read and change the org's shared memory files (`/memory/**`), with their history.
    #[command(subcommand)]
    Memory(MemoryCommand),
    /// List, read and import the org's skills (`/skills/NAME/SKILL.md` and their files).
    #[command(subcommand)]
    Skills(SkillsCommand),
    /// List, read and import the org's agent types (`/agents/NAME.md`, Claude Code's agent
    /// files), which the model can start as subagents.
    #[command(subcommand)]
    Agents(AgentsCommand),
    /// Print a session's changes as a git diff against its base (the commit it was cloned at,
    /// the uploaded tree, or HEAD for a session working in place).
    Diff(DiffArgs),
    /// Apply a session's changes to a local work tree; changes nothing unless every hunk applies.
    Apply(ApplyArgs),
    /// Commit a repository session's changes and push them as a new branch (the server pushes
    /// with the org's credential; it never force-pushes).
    Push(PushArgs),
    /// Let a tool call that waits for approval run (the org's policy says `ask` for it). Any
    /// member of the session's org may answer, unless attached to it as a watcher.
    Approve(ApproveArgs),
    /// Refuse a tool call that waits for approval; the model is told, with your reason. For a
    /// plan: keep planning, and the model revises it with your reason.
    Deny(DenyArgs),
    /// Answer the model's questions (`AskUserQuestion`): one ANSWER per question, in order,
    /// an option's label or any text of your own.
    Answer(AnswerArgs),
    /// List and read the org's plans (`/plans/<date>-<slug>.md`, saved when a session in plan
    /// mode proposes one).
    #[command(subcommand)]
    Plans(PlansCommand),
    /// The configuration file (`outboard config show`).
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Print shell completions (`outboard completions zsh > ~/.zfunc/_outboard`).
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: outboard_cmdline::manual::Shell,
    },
    /// Print the man page, or write every page (one per subcommand) into DIR.
    Man {
        /// Where to write `outboard.1` and the subcommands' pages.
        dir: Option<PathBuf>,
    },
}

/// `outboard config …`.
#[derive(Debug, Clone, PartialEq, Subcommand)]
pub enum ConfigCommand {
    /// Print every setting the file may hold with the value in effect and where it comes from:
    /// the environment, the file (with its line), or the default. Secrets show as set or unset.
    Show,
}

/// `outboard diff`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct DiffArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// A summary of changed files (`git diff --stat`) instead of the patch.
    #[arg(long)]
    pub stat: bool,
    /// The session's id (see `outboard sessions`).
    #[arg(value_name = "SESSION_ID")]
    pub session_id: String,
}

/// `outboard apply`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct ApplyArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The work tree to apply to (its top directory; default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The session's id.
    #[arg(value_name = "SESSION_ID")]
    pub session_id: String,
}

/// `outboard push`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct PushArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The branch to create (default `outboard/<short session id>`).
    #[arg(long, value_name = "NAME")]
    pub branch: Option<String>,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// The session's id.
    #[arg(value_name = "SESSION_ID")]
    pub session_id: String,
}

/// `outboard memory …`. A PATH is relative to `/memory` (`deploys.md`), or starts with
/// `memory/`, `/memory/`, `/skills/` or `/agents/`.
#[derive(Debug, Clone, PartialEq, Subcommand)]
pub enum MemoryCommand {
    /// List the files under PATH (default `/memory`): path, version, size, author, time.
    Ls(MemoryLsArgs),
    /// Print a file's content exactly, the current version or VERSION (`3` or `v3`).
    Cat(MemoryCatArgs),
    /// Every version of a file, oldest first: who made it, when, how, and its size.
    History(MemoryHistoryArgs),
    /// Make VERSION's content current again (as a new version).
    Restore(MemoryRestoreArgs),
    /// Delete a file (a new version marks it deleted; `restore` brings it back).
    Rm(MemoryPathArgs),
    /// Write a file's whole content from FILE, or from stdin with `-` or no FILE.
    Write(MemoryWriteArgs),
}

/// `outboard memory ls`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct MemoryLsArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Also list deleted files.
    #[arg(long)]
    pub all: bool,
    /// Print the files as a JSON array.
    #[arg(long)]
    pub json: bool,
    /// A directory or file (default `/memory`).
    #[arg(value_name = "PATH")]
    pub path: Option<String>,
}

/// `outboard memory cat`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct MemoryCatArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The file.
    #[arg(value_name = "PATH")]
    pub path: String,
    /// A past version (`3` or `v3`); the current one when absent.
    #[arg(id = "file_version", value_name = "VERSION", value_parser = parse_version)]
    pub version: Option<u64>,
}

/// `outboard memory history`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct MemoryHistoryArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print the versions as a JSON array.
    #[arg(long)]
    pub json: bool,
    /// The file.
    #[arg(value_name = "PATH")]
    pub path: String,
}

/// `outboard memory restore`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct MemoryRestoreArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The file.
    #[arg(value_name = "PATH")]
    pub path: String,
    /// The version to bring back (`2` or `v2`).
    #[arg(id = "file_version", value_name = "VERSION", value_parser = parse_version)]
    pub version: u64,
}

/// A memory command that takes only a path (`outboard memory rm`).
#[derive(Debug, Clone, PartialEq, Args)]
pub struct MemoryPathArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The file.
    #[arg(value_name = "PATH")]
    pub path: String,
}

/// `outboard memory write`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct MemoryWriteArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The file to write.
    #[arg(value_name = "PATH")]
    pub path: String,
    /// Where the content comes from: a local file, or `-` (or nothing) for stdin.
    #[arg(value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Write only if the file's current version is this one (0: only if it does not exist);
    /// otherwise refuse, naming who changed it (exit 1).
    #[arg(long, value_name = "VERSION")]
    pub base_version: Option<u64>,
}

/// `outboard skills …`.
#[derive(Debug, Clone, PartialEq, Subcommand)]
pub enum SkillsCommand {
    /// List the org's skills: name, description, file count, and what is wrong with one.
    Ls(SkillsLsArgs),
    /// Print a skill's SKILL.md, or another of its files.
    Cat(SkillsCatArgs),
    /// Import Claude Code-style skills from DIR: a directory of skill directories (each with a
    /// SKILL.md), or a single skill directory.
    Import(SkillsImportArgs),
}

/// `outboard skills ls`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct SkillsLsArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print the skills as a JSON array.
    #[arg(long)]
    pub json: bool,
}

/// `outboard skills cat`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct SkillsCatArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The skill's name (its directory under `/skills`).
    #[arg(value_name = "NAME")]
    pub name: String,
    /// A file of the skill, relative to its directory (default `SKILL.md`).
    #[arg(value_name = "FILE")]
    pub file: Option<String>,
}

/// `outboard skills import`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct SkillsImportArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// A directory of skills, or one skill's directory.
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// `outboard agents …`.
#[derive(Debug, Clone, PartialEq, Subcommand)]
pub enum AgentsCommand {
    /// List the org's agent types: name, description, tools ("all" when not restricted), model,
    /// version, and what is left out of or wrong with one.
    Ls(AgentsLsArgs),
    /// Print an agent's file (`/agents/NAME.md`): front matter and system prompt.
    Cat(AgentsCatArgs),
    /// Import Claude Code agent files from DIR (like `.claude/agents/`): each `*.md` in it,
    /// all checked before anything is written.
    Import(AgentsImportArgs),
}

/// `outboard agents ls`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct AgentsLsArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print the agents as a JSON array.
    #[arg(long)]
    pub json: bool,
}

/// `outboard agents cat`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct AgentsCatArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The agent's name (its file `/agents/NAME.md`).
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// `outboard agents import`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct AgentsImportArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// A directory of agent files (`NAME.md`).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

/// A file version on the command line: `3` or `v3` (versions count from 1).
pub fn parse_version(text: &str) -> Result<u64, String> {
    let digits = text.strip_prefix(['v', 'V']).unwrap_or(text);
    match digits.parse::<u64>() {
        Ok(0) => Err("versions count from 1".to_owned()),
        Ok(n) if digits.bytes().all(|b| b.is_ascii_digit()) => Ok(n),
        _ => Err(format!("{text:?} is not a version: use a number such as 3 or v3")),
    }
}

/// A duration on the command line: a number with a unit, `500ms`, `90s`, `2m`, `1h`; a bare
/// number is seconds, and `0` is none.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let bad = || format!("{text:?} is not a duration: use a number with a unit, such as 90s or 2m");
    let n: u64 = digits.parse().map_err(|_| bad())?;
    let per_unit = match unit {
        "ms" => Duration::from_millis(1),
        "" | "s" => Duration::from_secs(1),
        "m" | "min" => Duration::from_secs(60),
        "h" => Duration::from_secs(3600),
        _ => return Err(bad()),
    };
    u32::try_from(n).ok().and_then(|n| per_unit.checked_mul(n)).ok_or_else(bad)
}

/// `outboard attach`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct AttachArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Ask to drive the session.
    #[arg(long)]
    pub drive: bool,
    /// The session's id (see `outboard sessions`).
    #[arg(value_name = "SESSION_ID")]
    pub session_id: String,
}

/// Where the server is and how to reach it; with no `--server`, one is started in-process.
#[derive(Debug, Clone, Default, PartialEq, Args)]
pub struct ConnectArgs {
    /// The server's WebSocket URL (ws://HOST:PORT). Without it, an embedded server is started
    /// (a client-only build, without the `embedded` feature, has none and needs it).
    #[arg(long, env = "OUTBOARD_SERVER", value_name = "URL")]
    pub server: Option<String>,
    /// Your bearer token (required with --server). Prefer OUTBOARD_TOKEN or --token-file: other
    /// users of this machine can read a command line (`ps`).
    #[arg(long, env = "OUTBOARD_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// A file whose first line is your bearer token (takes precedence over --token).
    #[arg(long, env = "OUTBOARD_TOKEN_FILE", value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// A PEM file of CA certificates to trust for wss:// besides the built-in roots (a private CA).
    #[arg(long, env = "OUTBOARD_CA_CERT", value_name = "FILE")]
    pub ca_cert: Option<PathBuf>,
    /// Allow sending the token over clear-text ws:// to a host other than this machine.
    /// OUTBOARD_INSECURE takes 1/0, true/false, yes/no, on/off.
    #[arg(long, env = "OUTBOARD_INSECURE", value_parser = clap::builder::BoolishValueParser::new())]
    pub insecure: bool,
    /// Embedded mode: the model provider.
    #[arg(long, env = "OUTBOARD_PROVIDER", value_parser = ["anthropic", "openai", "responses"])]
    pub provider: Option<String>,
    /// Embedded mode: the provider's base URL (a local or mock server).
    #[arg(long, env = "OUTBOARD_BASE_URL", value_name = "URL")]
    pub base_url: Option<String>,
    /// The model of new sessions (and of `run --session`'s next turn), by its name in
    /// `outboard models`; embedded mode without --models: the provider's model id.
    #[arg(long, env = "OUTBOARD_MODEL", value_name = "NAME")]
    pub model: Option<String>,
    /// Embedded mode: a TOML file of the models sessions may pick (as `outboard-server serve
    /// --models`).
    #[arg(long, env = "OUTBOARD_MODELS", value_name = "FILE", conflicts_with_all = ["provider", "base_url"])]
    pub models: Option<PathBuf>,
    /// Embedded mode: the data directory (default: $XDG_DATA_HOME/outboard).
    #[arg(long = "data", env = "OUTBOARD_DATA_DIR", value_name = "DIR")]
    pub data_dir: Option<PathBuf>,
    /// Embedded mode: the directory a new session works in, in place, as /workspace (default:
    /// the current directory; `/` and your home directory only when named here).
    #[arg(long, env = "OUTBOARD_WORKSPACE", value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Embedded mode: the model's web search (`WebSearch`), off when not given: `anthropic` or
    /// `openai` (the provider's own), `searxng:URL`, `brave` (its key: the local org's secret
    /// for api.search.brave.com), or `off`.
    #[arg(long, env = "OUTBOARD_WEB_SEARCH", value_name = "BACKEND")]
    pub web_search: Option<String>,
}

/// `outboard run`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct RunArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print one JSON object per line (the headless schema) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Continue this session instead of creating one.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// An image to send with the prompt (PNG, JPEG, GIF or WebP; repeat for more), scaled down
    /// to what models take.
    #[arg(long = "image", value_name = "FILE")]
    pub images: Vec<PathBuf>,
    /// With --server: when the connection ends mid-turn (a server restart), keep reconnecting for
    /// this long (`90s`, `2m`, `1h`; `0` never), then resume after the last event seen.
    #[arg(
        long,
        env = "OUTBOARD_RECONNECT_FOR",
        value_name = "DURATION",
        default_value = "2m",
        value_parser = parse_duration
    )]
    pub reconnect_for: Duration,
    /// Where a new session's files come from.
    #[command(flatten)]
    pub source: SourceArgs,
    /// With --server: send DIR (default: the current directory) to the server and work on the
    /// copy: in a git work tree, the whole work tree with its history and uncommitted and
    /// untracked (not ignored) files; elsewhere DIR's files. Put it after PROMPT, or give DIR.
    #[arg(
        long,
        value_name = "DIR",
        num_args = 0..=1,
        default_missing_value = ".",
        conflicts_with = "session"
    )]
    pub upload: Option<PathBuf>,
    /// A tool call the org's policy says to ask about: `deny` it (the model is told), `allow`
    /// it, or `wait` for `outboard approve|deny` or an attached TUI (the call id is printed).
    #[arg(
        long,
        env = "OUTBOARD_APPROVE",
        value_enum,
        value_name = "deny|allow|wait",
        default_value = "deny"
    )]
    pub approve: ApproveMode,
    /// Plan mode: the model explores, changes nothing, and proposes a plan. With `--approve deny`
    /// the run ends there, printing it (exit 0); `allow` carries it out; `wait` waits for you.
    #[arg(long)]
    pub plan: bool,
    /// Claude Code's headless flags (`--input-format stream-json --output-format stream-json`:
    /// docs/STREAM_JSON.md).
    #[command(flatten)]
    pub stream: Box<StreamJsonArgs>,
    /// The message to send; `-` reads it from stdin. None with `--input-format stream-json`.
    #[arg(value_name = "PROMPT", required_unless_present = "input_format")]
    pub prompt: Option<String>,
}

/// How `outboard run` answers approval requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ApproveMode {
    /// Refuse every call that asks.
    Deny,
    /// Run every call that asks.
    Allow,
    /// Print the request and wait for someone else's answer.
    Wait,
}

/// `outboard approve`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct ApproveArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Also run every later call of the same tool in this session without asking.
    #[arg(long = "for-session")]
    pub for_session: bool,
    /// The session's id.
    #[arg(value_name = "SESSION_ID")]
    pub session_id: String,
    /// The call waiting, as its `approval_requested` event names it.
    #[arg(value_name = "CALL_ID")]
    pub call_id: String,
}

/// `outboard deny`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct DenyArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Why: the model reads it with the refusal.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// The session's id.
    #[arg(value_name = "SESSION_ID")]
    pub session_id: String,
    /// The call waiting, as its `approval_requested` event names it.
    #[arg(value_name = "CALL_ID")]
    pub call_id: String,
}

/// `outboard answer`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct AnswerArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The session's id.
    #[arg(value_name = "SESSION_ID")]
    pub session_id: String,
    /// The `AskUserQuestion` call, as its `approval_requested` event names it.
    #[arg(value_name = "CALL_ID")]
    pub call_id: String,
    /// One answer per question, in order.
    #[arg(value_name = "ANSWER", required = true, num_args = 1..=4)]
    pub answers: Vec<String>,
}

/// `outboard plans`.
#[derive(Debug, Clone, PartialEq, Subcommand)]
pub enum PlansCommand {
    /// List the org's plans, newest first.
    Ls(PlansLsArgs),
    /// Print a plan (`/plans/NAME.md`, or just NAME).
    Cat(PlansCatArgs),
}

/// `outboard plans ls`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct PlansLsArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print the plans as a JSON array.
    #[arg(long)]
    pub json: bool,
}

/// `outboard plans cat`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct PlansCatArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The plan.
    #[arg(value_name = "PATH")]
    pub path: String,
}

/// `outboard sessions`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct SessionsArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print the list as JSON.
    #[arg(long)]
    pub json: bool,
    /// `rm ID`: delete a session.
    #[command(subcommand)]
    pub command: Option<SessionsCommand>,
}

/// `outboard models`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct ModelsArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print the list as JSON.
    #[arg(long)]
    pub json: bool,
}

/// `outboard sessions …`.
#[derive(Debug, Clone, PartialEq, Subcommand)]
pub enum SessionsCommand {
    /// Delete a session you own: its log and its workspace (a session working in place in a
    /// directory of yours keeps that directory).
    Rm(SessionsRmArgs),
    /// Move a session whose sandbox host is gone to another host of the server: its workspace
    /// is made again there (empty) and the model is told.
    Restore(SessionsRmArgs),
}

/// `outboard sessions rm` and `outboard sessions restore`: one session.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct SessionsRmArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// The session's id.
    #[arg(value_name = "SESSION_ID")]
    pub session_id: String,
}

/// `outboard usage`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct UsageArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Only this session.
    #[arg(long, value_name = "SESSION_ID")]
    pub session: Option<String>,
    /// One row per session, user or day (UTC), and model.
    #[arg(long, value_name = "session|user|day", default_value = "session", value_parser = parse_usage_by)]
    pub by: outboard_shared::UsageGroup,
    /// Only model calls at or after DATE: YYYY-MM-DD (UTC) or an RFC 3339 UTC time.
    #[arg(long, value_name = "DATE")]
    pub since: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// A JSON price table (model → USD per million tokens) over the built-in one.
    #[arg(long, env = "OUTBOARD_PRICES", value_name = "FILE")]
    pub prices: Option<PathBuf>,
}

/// `outboard compact`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct CompactArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// The session's id.
    #[arg(value_name = "SESSION_ID")]
    pub session_id: String,
    /// What the summary should keep in particular (the rest of the line).
    #[arg(value_name = "FOCUS", trailing_var_arg = true)]
    pub focus: Vec<String>,
}

/// `outboard checkpoints`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct CheckpointsArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print the checkpoints as a JSON array.
    #[arg(long)]
    pub json: bool,
    /// The session's id.
    #[arg(value_name = "SESSION_ID")]
    pub session_id: String,
}

/// `outboard rewind`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct RewindArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Restore the files only; the conversation goes on as it is.
    #[arg(long, conflicts_with = "conversation")]
    pub code: bool,
    /// Take the conversation back only; the files stay as they are.
    #[arg(long)]
    pub conversation: bool,
    /// The session's id.
    #[arg(value_name = "SESSION_ID")]
    pub session_id: String,
    /// The checkpoint (`outboard checkpoints SESSION_ID` lists them).
    #[arg(value_name = "N")]
    pub checkpoint: u32,
}

/// `outboard fork`.
#[derive(Debug, Clone, PartialEq, Args)]
pub struct ForkArgs {
    /// Connection flags.
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// Print the new session as JSON.
    #[arg(long)]
    pub json: bool,
    /// The session's id.
    #[arg(value_name = "SESSION_ID")]
    pub session_id: String,
    /// The checkpoint to start from; absent: the session as it is now.
    #[arg(value_name = "N")]
    pub checkpoint: Option<u32>,
}

/// `--by` of `outboard usage`.
fn parse_usage_by(text: &str) -> Result<outboard_shared::UsageGroup, String> {
    match text {
        "session" => Ok(outboard_shared::UsageGroup::Session),
        "user" => Ok(outboard_shared::UsageGroup::User),
        "day" => Ok(outboard_shared::UsageGroup::Day),
        other => Err(format!("{other:?} is not a grouping: give session, user or day")),
    }
}

#[cfg(test)]
mod tests;
