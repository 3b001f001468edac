use super::*;
use clap::error::ErrorKind;
use pretty_assertions::assert_eq;

fn run_args(argv: &[&str]) -> RunArgs {
    match Cli::try_parse_from(argv).unwrap().command {
        Some(Command::Run(args)) => args,
        other => panic!("not run: {other:?}"),
    }
}

#[test]
fn run_with_every_flag() {
    let args = run_args(&[
        "outboard",
        "run",
        "--server",
        "ws://127.0.0.1:7700",
        "--token",
        "tok",
        "--json",
        "--session",
        "s_1",
        "--provider",
        "openai",
        "--base-url",
        "http://127.0.0.1:9000/v1",
        "--model",
        "m",
        "--data",
        "/tmp/ob",
        "--reconnect-for",
        "90s",
        "--approve",
        "allow",
        "list the files",
    ]);
    assert_eq!(
        args,
        RunArgs {
            connect: ConnectArgs {
                server: Some("ws://127.0.0.1:7700".into()),
                token: Some("tok".into()),
                provider: Some("openai".into()),
                base_url: Some("http://127.0.0.1:9000/v1".into()),
                model: Some("m".into()),
                data_dir: Some("/tmp/ob".into()),
                ..ConnectArgs::default()
            },
            json: true,
            session: Some("s_1".into()),
            images: Vec::new(),
            reconnect_for: Duration::from_secs(90),
            source: SourceArgs::default(),
            upload: None,
            approve: ApproveMode::Allow,
            plan: false,
            stream: Default::default(),
            prompt: Some("list the files".into()),
        }
    );
}

#[test]
fn run_defaults_and_stdin_prompt() {
    // Assumes no OUTBOARD_* variable is set in the test environment.
    let args = run_args(&["outboard", "run", "-"]);
    assert_eq!(
        args,
        RunArgs {
            connect: ConnectArgs::default(),
            json: false,
            session: None,
            images: Vec::new(),
            reconnect_for: Duration::from_secs(120),
            source: SourceArgs::default(),
            upload: None,
            approve: ApproveMode::Deny,
            plan: false,
            stream: Default::default(),
            prompt: Some("-".into())
        }
    );
}

#[test]
fn no_subcommand_is_allowed() {
    assert_eq!(
        Cli::try_parse_from(["outboard"]).unwrap(),
        Cli {
            command: None,
            connect: ConnectArgs::default(),
            source: SourceArgs::default(),
            upload: None,
            plan: false,
            config: None,
            theme: ThemeChoice::Auto,
            stream: Default::default(),
            session: None,
            notify: crate::args::NotifyChoice::Bell,
        }
    );
}

#[test]
fn session_opens_the_tui_on_a_session_and_notify_takes_its_three_values() {
    let cli = Cli::try_parse_from(["outboard", "--session", "s_1", "--notify", "osc9"]).unwrap();
    assert_eq!(cli.session.as_deref(), Some("s_1"));
    assert_eq!(cli.notify, crate::args::NotifyChoice::Osc9);
    assert!(Cli::try_parse_from(["outboard", "--session", "s_1", "--plan"]).is_err());
    assert!(Cli::try_parse_from(["outboard", "--notify", "loud"]).is_err());
}

#[test]
fn a_repo_is_split_at_its_last_hash_and_excludes_a_workspace() {
    let args = run_args(&["outboard", "run", "--repo", "https://h/a.git#v1.2", "go"]);
    assert_eq!(
        args.source.repo_spec(),
        Some(outboard_shared::SourceSpec::Repo {
            url: "https://h/a.git".into(),
            git_ref: Some("v1.2".into())
        })
    );
    let args = run_args(&["outboard", "run", "--repo", "https://h/a.git", "go"]);
    assert_eq!(
        args.source.repo_spec(),
        Some(outboard_shared::SourceSpec::Repo { url: "https://h/a.git".into(), git_ref: None })
    );
    let refused = Cli::try_parse_from([
        "outboard",
        "run",
        "--repo",
        "https://h/a",
        "--workspace",
        "/x",
        "go",
    ]);
    assert_eq!(refused.unwrap_err().kind(), ErrorKind::ArgumentConflict);
    let cli = Cli::try_parse_from(["outboard", "--server", "ws://h:1", "--token", "t"]).unwrap();
    assert_eq!(cli.connect.server.as_deref(), Some("ws://h:1"));
    assert_eq!(cli.connect.token.as_deref(), Some("t"));
}

#[test]
fn attach_flags() {
    let cli =
        Cli::try_parse_from(["outboard", "attach", "s_1", "--drive", "--token", "t"]).unwrap();
    let Some(Command::Attach(args)) = cli.command else { panic!() };
    assert_eq!(args.session_id, "s_1");
    assert!(args.drive);
    assert_eq!(args.connect.token.as_deref(), Some("t"));
}

#[test]
fn usage_errors() {
    let missing = Cli::try_parse_from(["outboard", "run"]).unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::MissingRequiredArgument);
    assert_eq!(missing.exit_code(), 2);
    let provider =
        Cli::try_parse_from(["outboard", "run", "--provider", "llama", "hi"]).unwrap_err();
    assert_eq!(provider.kind(), ErrorKind::InvalidValue);
    assert_eq!(provider.exit_code(), 2);
}

/// Issue 35, item 4: the settings a user keeps across runs have variables too, as the
/// README says of every flag (one-off flags — `--json`, `--reason`, a session id — do not).
#[test]
fn the_lasting_settings_of_a_run_have_environment_variables() {
    let cmd = <Cli as clap::CommandFactory>::command();
    let run = cmd.find_subcommand("run").expect("outboard run");
    let env_of = |id: &str| {
        let arg = run.get_arguments().find(|a| a.get_id() == id).expect(id);
        arg.get_env().map(|e| e.to_string_lossy().into_owned())
    };
    for (id, var) in [
        ("context_window", "OUTBOARD_CONTEXT_WINDOW"),
        ("network", "OUTBOARD_NETWORK"),
        ("approve", "OUTBOARD_APPROVE"),
        ("reconnect_for", "OUTBOARD_RECONNECT_FOR"),
        ("model", "OUTBOARD_MODEL"),
        ("server", "OUTBOARD_SERVER"),
        ("web_search", "OUTBOARD_WEB_SEARCH"),
    ] {
        assert_eq!(env_of(id).as_deref(), Some(var), "--{id}");
    }
    // And the TUI's own (no subcommand) takes the same.
    let top = |id: &str| {
        cmd.get_arguments().find(|a| a.get_id() == id).and_then(|a| a.get_env()).is_some()
    };
    assert!(top("context_window") && top("network"));
}

/// Every boolean flag with an environment variable takes the usual spellings from it
/// (`OUTBOARD_INSECURE=1`, as the client's own refusal suggests, was refused before).
#[test]
fn every_boolean_variable_takes_the_usual_spellings() {
    let checked = boolean_env_args(&<Cli as clap::CommandFactory>::command());
    assert!(checked.contains(&"OUTBOARD_INSECURE".to_owned()), "{checked:?}");
}

/// Walks `cmd` and its subcommands; checks each flag with an environment variable parses
/// every boolean spelling and refuses a non-boolean; returns the variables checked.
fn boolean_env_args(cmd: &clap::Command) -> Vec<String> {
    let mut checked = Vec::new();
    for arg in cmd.get_arguments() {
        let (Some(env), clap::ArgAction::SetTrue) = (arg.get_env(), arg.get_action()) else {
            continue;
        };
        // The variable's value goes through the flag's value parser: parse it as a value.
        let id = arg.get_id().to_string();
        let valued = arg.clone().action(clap::ArgAction::Set).long("value").env(None);
        let parse = |word: &str| {
            let matches = clap::Command::new("t")
                .arg(valued.clone())
                .try_get_matches_from(["t", "--value", word])?;
            Ok::<_, clap::Error>(matches.get_one::<bool>(&id).copied())
        };
        for (word, want) in [("1", true), ("0", false), ("true", true), ("FALSE", false)]
            .into_iter()
            .chain([("yes", true), ("No", false), ("on", true), ("OFF", false)])
        {
            let parsed = parse(word);
            assert!(matches!(parsed, Ok(Some(got)) if got == want), "{env:?}={word}: {parsed:?}");
        }
        assert!(parse("maybe").is_err(), "{env:?}=maybe");
        checked.push(env.to_string_lossy().into_owned());
    }
    for sub in cmd.get_subcommands() {
        checked.extend(boolean_env_args(sub));
    }
    checked
}

#[test]
fn the_command_line_is_consistent() {
    // Clap's own checks (unique argument ids, e.g. no clash with the propagated --version).
    <Cli as clap::CommandFactory>::command().debug_assert();
}

#[test]
fn durations_have_units_and_zero_is_never() {
    assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
    assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
    assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
    for bad in ["", "s", "2 m", "-1s", "1.5s", "2d", "99999999999h"] {
        assert!(parse_duration(bad).is_err(), "{bad:?}");
    }
    let bad = Cli::try_parse_from(["outboard", "run", "--reconnect-for", "soon", "hi"]);
    assert_eq!(bad.unwrap_err().exit_code(), 2);
}

#[test]
fn versions_are_numbers_with_an_optional_v() {
    assert_eq!(parse_version("3"), Ok(3));
    assert_eq!(parse_version("v3"), Ok(3));
    assert_eq!(parse_version("V12"), Ok(12));
    assert!(parse_version("0").is_err());
    assert!(parse_version("v0").is_err());
    assert!(parse_version("").is_err());
    assert!(parse_version("v").is_err());
    assert!(parse_version("+3").is_err());
    assert!(parse_version("-1").is_err());
    assert!(parse_version("3a").is_err());
    assert!(parse_version("vv3").is_err());
}

#[test]
fn memory_and_skills_commands() {
    let cli = Cli::try_parse_from(["outboard", "memory", "cat", "deploys.md", "v2"]).unwrap();
    let Some(Command::Memory(MemoryCommand::Cat(args))) = cli.command else { panic!() };
    assert_eq!((args.path.as_str(), args.version), ("deploys.md", Some(2)));

    let cli = Cli::try_parse_from(["outboard", "memory", "ls", "--all", "--json"]).unwrap();
    let Some(Command::Memory(MemoryCommand::Ls(args))) = cli.command else { panic!() };
    assert!(args.all && args.json && args.path.is_none());

    let cli = Cli::try_parse_from([
        "outboard", "memory", "restore", "x.md", "2", "--server", "ws://h:1", "--token", "t",
    ])
    .unwrap();
    let Some(Command::Memory(MemoryCommand::Restore(args))) = cli.command else { panic!() };
    assert_eq!(args.version, 2);
    assert_eq!(args.connect.server.as_deref(), Some("ws://h:1"));

    let cli = Cli::try_parse_from(["outboard", "memory", "write", "MEMORY.md"]).unwrap();
    let Some(Command::Memory(MemoryCommand::Write(args))) = cli.command else { panic!() };
    assert_eq!(args.file, None);

    let cli = Cli::try_parse_from(["outboard", "skills", "cat", "deploy", "run.sh"]).unwrap();
    let Some(Command::Skills(SkillsCommand::Cat(args))) = cli.command else { panic!() };
    assert_eq!((args.name.as_str(), args.file.as_deref()), ("deploy", Some("run.sh")));

    let cli = Cli::try_parse_from(["outboard", "skills", "import", "./skills"]).unwrap();
    let Some(Command::Skills(SkillsCommand::Import(args))) = cli.command else { panic!() };
    assert_eq!(args.dir, PathBuf::from("./skills"));

    let cli = Cli::try_parse_from(["outboard", "agents", "ls", "--json"]).unwrap();
    let Some(Command::Agents(AgentsCommand::Ls(args))) = cli.command else { panic!() };
    assert!(args.json);
    let cli = Cli::try_parse_from(["outboard", "agents", "cat", "reviewer"]).unwrap();
    let Some(Command::Agents(AgentsCommand::Cat(args))) = cli.command else { panic!() };
    assert_eq!(args.name, "reviewer");
    let cli = Cli::try_parse_from(["outboard", "agents", "import", ".claude/agents"]).unwrap();
    let Some(Command::Agents(AgentsCommand::Import(args))) = cli.command else { panic!() };
    assert_eq!(args.dir, PathBuf::from(".claude/agents"));

    let bad = Cli::try_parse_from(["outboard", "memory", "restore", "x.md", "two"]);
    assert_eq!(bad.unwrap_err().exit_code(), 2);
    let missing = Cli::try_parse_from(["outboard", "memory", "cat"]).unwrap_err();
    assert_eq!(missing.exit_code(), 2);
}

#[test]
fn upload_takes_an_optional_dir() {
    let args = run_args(&["outboard", "run", "fix it", "--upload"]);
    assert_eq!(
        (args.prompt.as_deref().unwrap_or_default(), args.upload),
        ("fix it", Some(PathBuf::from(".")))
    );
    let args = run_args(&["outboard", "run", "--upload", "../repo", "fix it"]);
    assert_eq!(
        (args.prompt.as_deref().unwrap_or_default(), args.upload),
        ("fix it", Some(PathBuf::from("../repo")))
    );
    assert_eq!(run_args(&["outboard", "run", "fix it"]).upload, None);
    let clash = Cli::try_parse_from(["outboard", "run", "--session", "s_1", "--upload", ".", "x"]);
    assert_eq!(clash.unwrap_err().kind(), ErrorKind::ArgumentConflict);
}

#[test]
fn sessions_flags() {
    let cli = Cli::try_parse_from(["outboard", "sessions", "--json", "--token", "t"]).unwrap();
    let Some(Command::Sessions(args)) = cli.command else { panic!() };
    assert!(args.json);
    assert_eq!(args.connect.token.as_deref(), Some("t"));
}
