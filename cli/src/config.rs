//! The client's configuration file: `$XDG_CONFIG_HOME/outboard/config.toml` (else
//! `~/.config/outboard/config.toml`), or the file `--config FILE` / `OUTBOARD_CONFIG` names.
//!
//! Its keys are the long names (with `_` for `-`) of the flags that have an environment
//! variable: the settings a user keeps across runs, by the rule `args.rs` already follows
//! (one-off flags — `--json`, `--session`, `--reason` — have none, and are no keys). The command
//! line is parsed twice: once to learn which file to read and check, then with the file's values
//! as the flags' defaults, so clap ranks them below the command line and the environment. Every
//! subcommand's flags get them, embedded mode's `--provider`, `--base-url`, `--models` and
//! `--data` included, so the embedded server sees a file's value exactly as a flag's.
//!
//! A missing default file is no error; a file named explicitly must exist. A file that holds a
//! secret (`token`) must be private to its owner: readable or writable by its group or others,
//! it is refused with the `chmod` that fixes it, as ssh refuses a private key.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::{ArgMatches, CommandFactory as _};
use outboard_flagfile::{FlagFile, FlagFileError, Flags};

use crate::args::Cli;

/// Why the command line and the configuration file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file is unreadable or wrong: the message names the file, the line and the key.
    #[error(transparent)]
    File(#[from] FlagFileError),
    /// The command line itself (or `--help`, `--version`): clap prints and exits.
    #[error(transparent)]
    Usage(#[from] clap::Error),
    /// The file holds a secret and its group or others may read or write it (the secret's value
    /// is never in the message, only its key).
    #[error(
        "{path} holds a secret (`{key}`) and is {access} by users other than its owner (mode \
         {mode:04o}); it is not used. Run `chmod 600 {path}`",
        path = path.display()
    )]
    NotPrivate {
        /// The file.
        path: PathBuf,
        /// The secret's key.
        key: String,
        /// "readable", "writable" or "readable and writable".
        access: &'static str,
        /// The file's permission bits.
        mode: u32,
    },
}

/// The configuration file in use.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Where it is looked for: named, or the default location; `None` with no home directory.
    pub path: Option<PathBuf>,
    /// Its content; `None` when the default file does not exist.
    pub file: Option<FlagFile>,
}

/// Whether `arg` is a setting of the file: a flag with an environment variable (not the one
/// naming the file).
pub fn is_setting(arg: &clap::Arg) -> bool {
    arg.get_env().is_some() && arg.get_id() != "config"
}

/// The settings of `outboard`.
pub fn flags() -> Flags {
    Flags::of(&Cli::command(), is_setting)
}

/// `$XDG_CONFIG_HOME/outboard/config.toml`, else `$HOME/.config/outboard/config.toml` (a
/// relative `XDG_CONFIG_HOME` is ignored, as the XDG spec says).
pub fn default_path() -> Option<PathBuf> {
    let absolute = |var: &str| std::env::var_os(var).map(PathBuf::from).filter(|p| p.is_absolute());
    let base =
        absolute("XDG_CONFIG_HOME").or_else(|| absolute("HOME").map(|h| h.join(".config")))?;
    Some(base.join("outboard").join("config.toml"))
}

/// Parses `argv` with the configuration file's values under the flags and the environment.
pub fn parse(argv: Vec<OsString>) -> Result<(ArgMatches, Config), ConfigError> {
    let first = Cli::command().try_get_matches_from(&argv)?;
    let config = Config::load(first.get_one::<PathBuf>("config").cloned())?;
    let Some(file) = &config.file else { return Ok((first, config)) };
    let values = flags().check(file)?;
    private_if_secret(file)?;
    let matches = values.apply(Cli::command()).try_get_matches_from(argv)?;
    Ok((matches, config))
}

/// Refuses `file` when it holds a secret's key and its mode lets its group or others read or
/// write it (checked on the file as opened by path, links followed, as ssh does).
fn private_if_secret(file: &FlagFile) -> Result<(), ConfigError> {
    use std::os::unix::fs::PermissionsExt as _;
    let flags = flags();
    let Some(key) =
        file.keys().find(|k| flags.flag(k).is_some_and(outboard_flagfile::flags::is_secret))
    else {
        return Ok(());
    };
    let mode = std::fs::metadata(file.path())
        .map_err(|error| FlagFileError::Read { path: file.path().display().to_string(), error })?
        .permissions()
        .mode()
        & 0o7777;
    let access = match (mode & 0o044 != 0, mode & 0o022 != 0) {
        (false, false) => return Ok(()),
        (true, false) => "readable",
        (false, true) => "writable",
        (true, true) => "readable and writable",
    };
    Err(ConfigError::NotPrivate { path: file.path().to_owned(), key: key.to_owned(), access, mode })
}

impl Config {
    /// Reads `named` (which must exist), else the default file if there is one.
    pub fn load(named: Option<PathBuf>) -> Result<Config, FlagFileError> {
        match named {
            Some(path) => Ok(Config { file: Some(FlagFile::read(&path)?), path: Some(path) }),
            None => {
                let path = default_path();
                let file = match &path {
                    Some(path) => FlagFile::read_if_present(path)?,
                    None => None,
                };
                Ok(Config { path, file })
            }
        }
    }

    /// `outboard config show`: the file, then each setting, its value and where it comes from.
    pub fn show(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        match (&self.path, &self.file) {
            (Some(path), Some(_)) => writeln!(out, "config file: {}", path.display())?,
            (Some(path), None) => writeln!(out, "config file: {} (absent)", path.display())?,
            (None, _) => writeln!(out, "config file: none (no $XDG_CONFIG_HOME or $HOME)")?,
        }
        let settings = outboard_flagfile::settings(&flags(), self.file.as_ref());
        out.write_all(outboard_flagfile::show::render(&settings).as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args::{ApproveMode, Command};
    use pretty_assertions::assert_eq;

    fn write(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    fn run_args(argv: &[&str]) -> crate::args::RunArgs {
        let (matches, _) = parse(argv.iter().map(OsString::from).collect()).unwrap();
        match <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap().command {
            Some(Command::Run(args)) => args,
            other => panic!("not run: {other:?}"),
        }
    }

    /// The file reaches every subcommand's flags, under the command line. (No `OUTBOARD_*`
    /// variable of these keys is set in the test environment, as `args.rs`'s tests assume.)
    #[test]
    fn the_file_fills_what_the_command_line_leaves() {
        let (_dir, path) = write(
            "server = \"ws://file:7700\"\ntoken_file = \"/run/tok\"\napprove = \"wait\"\n\
             reconnect_for = \"5m\"\nnetwork = \"none\"\nmodel = \"haiku\"\n",
        );
        let path = path.to_str().unwrap();
        let args = run_args(&["outboard", "run", "--config", path, "--model", "sonnet", "hi"]);
        assert_eq!(args.connect.server.as_deref(), Some("ws://file:7700"));
        assert_eq!(args.connect.token_file, Some(PathBuf::from("/run/tok")));
        assert_eq!(args.connect.model.as_deref(), Some("sonnet"), "the flag wins");
        assert_eq!(args.approve, ApproveMode::Wait);
        assert_eq!(args.reconnect_for, std::time::Duration::from_secs(300));
        assert_eq!(args.source.network, outboard_shared::SessionNetwork::None);
        // `--config` before the subcommand works too, and reaches `sessions`.
        let argv = ["outboard", "--config", path, "sessions"].map(OsString::from).to_vec();
        let (matches, config) = parse(argv).unwrap();
        assert_eq!(config.path.as_deref(), Some(std::path::Path::new(path)));
        let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap();
        let Some(Command::Sessions(sessions)) = cli.command else { panic!() };
        assert_eq!(sessions.connect.server.as_deref(), Some("ws://file:7700"));
    }

    /// The TUI's `theme` is a key like the connection's, for `outboard` and `outboard attach`;
    /// a theme that is none of the three names the file's line.
    #[test]
    fn the_theme_comes_from_the_file_too() {
        use crate::args::ThemeChoice;
        let (_dir, path) = write("server = \"ws://file:7700\"\ntheme = \"mono\"\n");
        let path = path.to_str().unwrap();
        for argv in [
            vec!["outboard", "--config", path],
            vec!["outboard", "--config", path, "attach", "s_1"],
        ] {
            let (matches, _) = parse(argv.into_iter().map(OsString::from).collect()).unwrap();
            let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap();
            assert_eq!(cli.theme, ThemeChoice::Mono);
        }
        let (matches, _) =
            parse(["outboard", "--config", path, "--theme", "color"].map(OsString::from).to_vec())
                .unwrap();
        let cli = <Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap();
        assert_eq!(cli.theme, ThemeChoice::Color, "the flag wins");

        let (_dir, path) = write("theme = \"sepia\"\n");
        let argv = ["outboard", "--config", path.to_str().unwrap()].map(OsString::from).to_vec();
        let err = parse(argv).unwrap_err().to_string();
        assert!(err.contains(":1") && err.contains("theme"), "{err}");
    }

    #[test]
    fn a_named_file_must_exist_and_hold_only_settings() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.toml");
        let argv = ["outboard", "--config", missing.to_str().unwrap(), "sessions"];
        let err = parse(argv.map(OsString::from).to_vec()).unwrap_err();
        assert!(matches!(err, ConfigError::File(FlagFileError::Read { .. })), "{err}");

        let (_dir, path) = write("server = \"ws://h:1\"\njson = true\n");
        let argv = ["outboard", "--config", path.to_str().unwrap(), "sessions"];
        let err = parse(argv.map(OsString::from).to_vec()).unwrap_err().to_string();
        assert!(err.starts_with(&format!("{}:2: unknown key `json`", path.display())), "{err}");

        let (_dir, path) = write("\n\napprove = \"sometimes\"\n");
        let argv = ["outboard", "--config", path.to_str().unwrap(), "sessions"];
        let err = parse(argv.map(OsString::from).to_vec()).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "{}:3: `approve`: \"sometimes\" is not one of: deny, allow, wait",
                path.display()
            )
        );
    }

    /// Issue 49, item 7: a `token` in a file its group or others can read or write is refused
    /// with the `chmod` that fixes it; the same file at 0600, or a looser one without a secret,
    /// is used.
    #[test]
    fn a_secret_in_a_file_others_can_read_or_write_is_refused_with_the_chmod() {
        use std::os::unix::fs::PermissionsExt as _;
        let (_dir, path) = write("server = \"ws://h:1\"\ntoken = \"s3cret\"\n");
        let argv =
            || ["outboard", "--config", path.to_str().unwrap(), "sessions"].map(OsString::from);
        for (mode, access) in
            [(0o644, "readable"), (0o620, "writable"), (0o606, "readable and writable")]
        {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
            let err = parse(argv().to_vec()).unwrap_err();
            assert!(matches!(err, ConfigError::NotPrivate { .. }), "{mode:o}: {err}");
            let err = err.to_string();
            assert!(err.contains(&format!("chmod 600 {}", path.display())), "{err}");
            assert!(err.contains("`token`") && err.contains(access), "{err}");
            assert!(!err.contains("s3cret"), "{err}");
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        parse(argv().to_vec()).unwrap();
        let (_dir, open) = write("server = \"ws://h:1\"\n");
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
        parse(
            ["outboard", "--config", open.to_str().unwrap(), "sessions"]
                .map(OsString::from)
                .to_vec(),
        )
        .unwrap();
    }

    #[test]
    fn show_prints_values_and_sources_with_the_token_as_set() {
        let (_dir, path) =
            write("server = \"ws://h:1\"\ntoken = \"s3cret\"\n\nreconnect_for = \"90s\"\n");
        let config = Config::load(Some(path.clone())).unwrap();
        let mut out = Vec::new();
        config.show(&mut out).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(!out.contains("s3cret"), "{out}");
        let line = |key: &str| {
            let found = out.lines().find(|l| l.split_whitespace().next() == Some(key));
            found.map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        };
        let place = |n: usize| format!("file {}:{n}", path.display());
        assert_eq!(line("server"), Some(format!("server ws://h:1 {}", place(1))));
        assert_eq!(line("token"), Some(format!("token set {}", place(2))));
        assert_eq!(line("reconnect_for"), Some(format!("reconnect_for 90s {}", place(4))));
        assert_eq!(line("approve"), Some("approve deny default".to_owned()));
        assert_eq!(line("token_file"), Some("token_file unset -".to_owned()));
        assert_eq!(line("json"), None, "one-off flags are no settings");
        assert_eq!(out.lines().next(), Some(format!("config file: {}", path.display()).as_str()));
    }
}
