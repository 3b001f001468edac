//! `serve --config FILE`: the flags of `serve` from a TOML file (`/etc/outboard/server.toml`),
//! and `config show`, which prints what is in effect and where each value comes from.
//!
//! Every long flag of `serve` is a key (`listen`, `data`, `base_url`, `max_connections`…), found
//! in clap's definition of `serve` itself, so a flag added later is a key at once. The file's
//! values become the flags' defaults: the command line, then the environment, then the file, then
//! the built-in default. `models` may be the model catalog itself, as `[[models]]` tables, where
//! `--models FILE` would name a file of them.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{ArgMatches, Command};
use outboard_flagfile::{FlagFile, FlagFileError, Flags};
use outboard_server::models::{ModelCatalog, ModelsError};

/// The subcommand whose flags the file holds.
const SERVE: &str = "serve";

/// The key that may hold the model catalog inline.
const MODELS: &str = "models";

/// Whether `arg` of `serve` is a key: every long flag but the one naming the file.
fn is_setting(arg: &clap::Arg) -> bool {
    arg.get_long().is_some() && arg.get_id() != "config"
}

/// The keys of `cli`'s `serve`.
fn serve_flags(cli: &Command) -> Flags {
    let serve = cli.get_subcommands().find(|c| c.get_name() == SERVE);
    let serve = serve.cloned().unwrap_or_else(|| Command::new(SERVE));
    Flags::of(&serve, is_setting).with_tables(MODELS)
}

/// Parses `argv` against `cli`; for `serve --config FILE`, again with the file's values under
/// the flags and the environment. Exits as clap does on a usage error (or `--help`).
pub(crate) fn parse(
    cli: Command,
    argv: Vec<OsString>,
) -> Result<(ArgMatches, Option<FlagFile>), FlagFileError> {
    let first = cli.clone().try_get_matches_from(&argv).unwrap_or_else(|e| e.exit());
    let named = match first.subcommand() {
        Some((SERVE, serve)) => serve.get_one::<PathBuf>("config").cloned(),
        _ => None,
    };
    let Some(path) = named else { return Ok((first, None)) };
    let file = FlagFile::read(&path)?;
    let values = serve_flags(&cli).check(&file)?;
    let matches = cli
        .mut_subcommand(SERVE, |serve| values.apply(serve))
        .try_get_matches_from(argv)
        .unwrap_or_else(|e| e.exit());
    Ok((matches, Some(file)))
}

/// `config show [--config FILE]`: the file, then every key of `serve` with its value in effect
/// (secrets as set or unset) and its source.
pub(crate) fn show(
    cli: &Command,
    path: Option<&Path>,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let flags = serve_flags(cli);
    let file = path.map(FlagFile::read).transpose()?;
    if let Some(file) = &file {
        flags.check(file)?;
        writeln!(out, "config file: {}", file.path().display())?;
    } else {
        writeln!(out, "config file: none (give --config FILE)")?;
    }
    let settings = outboard_flagfile::settings(&flags, file.as_ref());
    out.write_all(outboard_flagfile::show::render(&settings).as_bytes())?;
    Ok(())
}

/// The model catalog of the file's `[[models]]` tables, when it has them; `default` is
/// `--model`.
pub(crate) fn inline_models(
    file: Option<&FlagFile>,
    default: Option<&str>,
) -> Option<Result<ModelCatalog, ModelsError>> {
    let file = file?;
    let tables = file.value(MODELS).filter(|v| v.is_array())?;
    let place = file.place(MODELS);
    Some(ModelCatalog::from_tables(tables, &place, default))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory as _;
    use pretty_assertions::assert_eq;

    fn serve_args(argv: &[&str]) -> Result<crate::args::ServeArgs, FlagFileError> {
        let argv = argv.iter().map(OsString::from).collect();
        let (matches, _) = parse(crate::Cli::command(), argv)?;
        match <crate::Cli as clap::FromArgMatches>::from_arg_matches(&matches).unwrap().command {
            crate::Command::Serve(args) => Ok(*args),
            _ => panic!("not serve"),
        }
    }

    /// Every long flag of `serve` is a key, its flattened groups' included; `--config` is not.
    #[test]
    fn every_serve_flag_is_a_key() {
        let flags = serve_flags(&crate::Cli::command());
        let keys: Vec<&str> = flags.keys().collect();
        for key in [
            "listen",
            "data",
            "store",
            "base_url",
            "models",
            "max_connections",
            "tls_cert",
            "git_allow_host",
            "insecure",
            "max_steps",
            "metrics_listen",
        ] {
            assert!(keys.contains(&key), "{key}: {keys:?}");
        }
        assert!(!keys.contains(&"config") && !keys.contains(&"help"), "{keys:?}");
    }

    /// (No OUTBOARD_* variable of these keys is set in the test environment.)
    #[test]
    fn the_file_sets_serve_under_its_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("server.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:7811\"\nmax_steps = 12\ninsecure = true\n\
             git_allow_host = [\"git.local:3000\"]\nhandshake_timeout = 2.5\n",
        )
        .unwrap();
        let path = path.to_str().unwrap();
        let args = serve_args(&["outboard-server", "serve", "--config", path, "--max-steps", "3"])
            .unwrap();
        assert_eq!(args.listen, "127.0.0.1:7811".parse().unwrap());
        assert_eq!(args.max_steps, 3, "the flag wins");
        assert!(args.net.insecure);
        assert_eq!(args.net.git_allow_hosts, ["git.local:3000"]);
        assert_eq!(args.net.handshake_timeout, std::time::Duration::from_millis(2500));

        std::fs::write(path, "listen = \"127.0.0.1:7811\"\nlisten_on = 1\n").unwrap();
        let err = serve_args(&["outboard-server", "serve", "--config", path]).err().unwrap();
        assert!(err.to_string().starts_with(&format!("{path}:2: unknown key `listen_on`")));
        std::fs::write(path, "\nlisten = 7700\n").unwrap();
        let err = serve_args(&["outboard-server", "serve", "--config", path]).err().unwrap();
        assert!(err.to_string().starts_with(&format!("{path}:2: `listen`: ")), "{err}");
    }
}
