//! The file against a small command shaped like Outboard's: precedence, errors, secrets.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use clap::{Arg, ArgAction, Command};
use pretty_assertions::assert_eq;

use crate::{settings, FlagFile, FlagFileError, Flags, Setting, Source};

/// A command with a subcommand carrying the flags, each with a variable named after `tag` (the
/// tests run in parallel; each sets only its own variables, before building the command, since
/// clap reads a flag's variable when the flag is defined).
fn command(tag: &str) -> Command {
    let var = |name: &str| format!("FLAGFILE_TEST_{tag}_{name}");
    let run = Command::new("run")
        .arg(Arg::new("server").long("server").env(var("SERVER")))
        .arg(Arg::new("base_url").long("base-url").env(var("BASE_URL")))
        .arg(
            Arg::new("max_steps")
                .long("max-steps")
                .env(var("MAX_STEPS"))
                .value_parser(clap::value_parser!(u32))
                .default_value("40"),
        )
        .arg(Arg::new("insecure").long("insecure").env(var("INSECURE")).action(ArgAction::SetTrue))
        .arg(Arg::new("allow").long("allow-host").env(var("ALLOW")).action(ArgAction::Append))
        .arg(Arg::new("token").long("token").env(var("TOKEN")).hide_env_values(true))
        .arg(
            Arg::new("pin")
                .long("pin")
                .env(var("PIN"))
                .hide_env_values(true)
                .value_parser(clap::value_parser!(u32)),
        )
        .arg(Arg::new("models").long("models").env(var("MODELS")))
        .arg(Arg::new("json").long("json").action(ArgAction::SetTrue))
        .arg(Arg::new("prompt"));
    Command::new("tool").subcommand(run)
}

/// Flags with a variable, as `outboard` takes them.
fn with_env(arg: &Arg) -> bool {
    arg.get_env().is_some()
}

fn file(text: &str) -> FlagFile {
    FlagFile::parse(Path::new("/etc/tool.toml"), text).unwrap()
}

fn error(tag: &str, text: &str) -> FlagFileError {
    Flags::of(&command(tag), with_env).check(&file(text)).unwrap_err()
}

fn run_matches(cmd: Command, argv: &[&str]) -> clap::ArgMatches {
    let matches = cmd.try_get_matches_from(argv).unwrap();
    matches.subcommand_matches("run").unwrap().clone()
}

#[test]
fn the_command_line_then_the_environment_then_the_file_then_the_default() {
    std::env::set_var("FLAGFILE_TEST_PREC_BASE_URL", "http://env");
    let cmd = command("PREC");
    let flags = Flags::of(&cmd, with_env);
    let values = flags
        .check(&file(
            "server = \"ws://file:1\"\nbase_url = \"http://file\"\nmax_steps = 7\ninsecure = true\n\
             allow_host = [\"a:1\", \"b:2\"]\n",
        ))
        .unwrap();
    let applied = values.apply(cmd);
    let run = run_matches(applied.clone(), &["tool", "run", "--server", "ws://flag:1", "p"]);
    let one = |id: &str| run.get_one::<String>(id).cloned();
    assert_eq!(one("server").as_deref(), Some("ws://flag:1"), "the flag wins");
    assert_eq!(one("base_url").as_deref(), Some("http://env"), "the variable beats the file");
    assert_eq!(run.get_one::<u32>("max_steps"), Some(&7), "the file beats the default");
    assert_eq!(run.get_one::<bool>("insecure"), Some(&true));
    let hosts: Vec<&String> = run.get_many::<String>("allow").unwrap().collect();
    assert_eq!(hosts, ["a:1", "b:2"]);
    let run =
        run_matches(applied, &["tool", "run", "--max-steps", "9", "--allow-host", "c:3", "p"]);
    assert_eq!(run.get_one::<u32>("max_steps"), Some(&9));
    let hosts: Vec<&String> = run.get_many::<String>("allow").unwrap().collect();
    assert_eq!(hosts, ["c:3"], "a repeated flag replaces the file's list");
    // Without a file, the built-in default.
    let run = run_matches(command("PREC"), &["tool", "run", "p"]);
    assert_eq!(run.get_one::<u32>("max_steps"), Some(&40));
}

#[test]
fn an_unknown_key_names_the_file_its_line_and_the_keys() {
    let err = error("UNKNOWN", "server = \"ws://h:1\"\n\nbogus = 1\n");
    assert_eq!(
        err.to_string(),
        "/etc/tool.toml:3: unknown key `bogus`: no flag is called --bogus; the keys are: \
         allow_host, base_url, insecure, max_steps, models, pin, server, token"
    );
    // A flag without a variable is not a setting of this rule.
    let err = error("UNKNOWN", "json = true\n");
    assert!(matches!(&err, FlagFileError::UnknownKey { line: 1, key, .. } if key == "json"));
    let err = error("UNKNOWN", "\nbase-url = \"http://x\"\n");
    assert_eq!(
        err.to_string(),
        "/etc/tool.toml:2: unknown key `base-url`: write `base_url` (a flag's long name, with _ \
         for -)"
    );
}

#[test]
fn a_wrong_type_names_the_file_its_line_and_the_key() {
    let cases = [
        ("max_steps = \"many\"", "/etc/tool.toml:1: `max_steps`: invalid digit found in string"),
        (
            "\ninsecure = \"yes\"",
            "/etc/tool.toml:2: `insecure` must be true or false, not a string",
        ),
        ("server = 7700", "/etc/tool.toml:1: `server` must be a string, not an integer"),
        ("server = [\"a\"]", "/etc/tool.toml:1: `server` must be a single value, not an array"),
        (
            "max_steps = true",
            "/etc/tool.toml:1: `max_steps` must be a string or a number, not a boolean",
        ),
        ("[server]\nhost = \"h\"", "/etc/tool.toml:1: `server` must be a string, not a table"),
        ("allow_host = [1]", "/etc/tool.toml:1: `allow_host` must be a string, not an integer"),
    ];
    for (text, want) in cases {
        assert_eq!(error("TYPE", text).to_string(), want, "{text}");
    }
}

#[test]
fn tables_are_taken_only_where_the_caller_reads_them() {
    let text = "models = [{ name = \"a\" }]\n[[models]]\nname = \"b\"\n";
    assert!(FlagFile::parse(Path::new("x"), text).is_err(), "a key twice is TOML's error");
    let text = "max_steps = 3\n[[models]]\nname = \"a\"\n[[models]]\nname = \"b\"\n";
    let err = error("TABLES", text);
    assert_eq!(err.to_string(), "/etc/tool.toml:2: `models` must be a single value, not an array");
    let flags = Flags::of(&command("TABLES"), with_env).with_tables("models");
    let values = flags.check(&file(text)).unwrap();
    assert_eq!(values.texts("models"), None, "the tables are not a flag's value");
    assert_eq!(values.texts("max_steps"), Some(&["3".to_owned()][..]));
    let models = settings(&flags, Some(&file(text)));
    let models = models.iter().find(|s| s.key == "models").unwrap();
    assert_eq!(models.value, "2 [[models]] tables");
}

#[test]
fn secrets_never_show_their_values() {
    let err = error("SECRET", "pin = \"s3cret-99\"\n");
    assert_eq!(err.to_string(), "/etc/tool.toml:1: `pin`: invalid value");
    let err = error("SECRET", "token = 5\n");
    assert!(!err.to_string().contains('5'), "{err}");

    let cmd = command("SECRET");
    let flags = Flags::of(&cmd, with_env);
    let text = "token = \"s3cret-token\"\nserver = \"ws://h:1\"\n";
    let mut applied = flags.check(&file(text)).unwrap().apply(cmd);
    let help = applied.find_subcommand_mut("run").unwrap().render_long_help().to_string();
    assert!(help.contains("[default: ws://h:1]"), "{help}");
    assert!(!help.contains("s3cret"), "{help}");
    let shown = settings(&flags, Some(&file(text)));
    let token = shown.iter().find(|s| s.key == "token").unwrap();
    assert_eq!(token.value, "set");
    let pin = shown.iter().find(|s| s.key == "pin").unwrap();
    assert_eq!((pin.value.as_str(), &pin.source), ("unset", &Source::Unset));
}

#[test]
fn settings_say_where_each_value_comes_from() {
    std::env::set_var("FLAGFILE_TEST_SHOW_SERVER", "ws://env:1");
    std::env::set_var("FLAGFILE_TEST_SHOW_TOKEN", "t0ken");
    let flags = Flags::of(&command("SHOW"), with_env);
    let text =
        "server = \"ws://file:1\"\n\nbase_url = \"http://file\"\nallow_host = [\"a:1\", \"b:2\"]\n";
    let shown = settings(&flags, Some(&file(text)));
    let setting = |key: &str, value: &str, source: Source| Setting {
        key: key.into(),
        value: value.into(),
        source,
    };
    let place = |line: usize| Source::File(format!("/etc/tool.toml:{line}"));
    assert_eq!(
        shown,
        [
            setting("allow_host", "a:1, b:2", place(4)),
            setting("base_url", "http://file", place(3)),
            setting("insecure", "false", Source::Default),
            setting("max_steps", "40", Source::Default),
            setting("models", "unset", Source::Unset),
            setting("pin", "unset", Source::Unset),
            setting("server", "ws://env:1", Source::Env("FLAGFILE_TEST_SHOW_SERVER".into())),
            setting("token", "set", Source::Env("FLAGFILE_TEST_SHOW_TOKEN".into())),
        ]
    );
    let table = crate::show::render(&shown[..2]);
    assert_eq!(
        table,
        "allow_host  a:1, b:2     file /etc/tool.toml:4\nbase_url    http://file  file /etc/tool.toml:3\n"
    );
}
