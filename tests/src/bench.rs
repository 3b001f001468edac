//! What the benchmark binaries share: their command lines, percentiles, unit conversion, and the
//! sandbox settings of in-process servers.

use std::time::Duration;

/// The arguments of a bench binary (`crash` and `mock-llm` too), parsed as the main binaries
/// parse theirs, so that a typo gets a usage line rather than an `anyhow` backtrace: `--help`/`-h`
/// prints the usage and exits 0; an unknown or malformed argument, or one `check` refuses (e.g. a
/// count of zero), prints `error: …` and the usage to stderr and exits 2.
pub fn args<A: clap::Parser>(check: impl FnOnce(&A) -> Result<(), String>) -> A {
    match parse_args(std::env::args_os(), check) {
        Ok(args) => args,
        Err(Refusal { code: 0, text }) => {
            print!("{text}");
            std::process::exit(0)
        }
        Err(Refusal { code, text }) => {
            eprint!("{text}");
            std::process::exit(code)
        }
    }
}

/// Why [`parse_args`] did not return arguments: what to print and the exit code (0 for the help
/// asked for, on stdout; 2 for a refused command line, on stderr).
#[derive(Debug)]
pub struct Refusal {
    /// The process's exit code.
    pub code: i32,
    /// The help, or `error: …` and the usage.
    pub text: String,
}

/// [`args`] over `argv` (its first item the binary's name), nothing printed.
pub fn parse_args<A, I, T>(
    argv: I,
    check: impl FnOnce(&A) -> Result<(), String>,
) -> Result<A, Refusal>
where
    A: clap::Parser,
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let mut command = A::command();
    let parsed = command
        .try_get_matches_from_mut(argv)
        .and_then(|matches| A::from_arg_matches(&matches))
        .map_err(|e| e.render().to_string());
    let error = match parsed {
        Ok(args) => match check(&args) {
            Ok(()) => return Ok(args),
            Err(message) => format!("error: {message}"),
        },
        Err(help) if !help.starts_with("error:") => return Err(Refusal { code: 0, text: help }),
        // clap's own error, cut before its usage or hint (some kinds carry the usage, some not).
        Err(error) => error.split("\n\n").next().unwrap_or_default().trim_end().to_owned(),
    };
    let usage = command.render_usage();
    Err(Refusal { code: 2, text: format!("{error}\n\n{usage}\n\nFor more, try '--help'.\n") })
}

/// The `p` quantile (0.0–1.0) of `sorted` samples (nearest rank; zero when empty).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Microseconds, for tables.
pub fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// The release `outboard-server` beside the running bench (the sandbox agent, or a sandbox
/// host); `case` is the `scripts/bench.sh` case that builds it, named in the error.
pub fn server_exe(case: &str) -> anyhow::Result<std::path::PathBuf> {
    use anyhow::Context as _;
    let exe = std::env::current_exe()?;
    let path = exe.parent().context("no parent dir")?.join("outboard-server");
    if !path.exists() {
        anyhow::bail!(
            "{} is missing: build it first (scripts/bench.sh {case} does)",
            path.display()
        );
    }
    Ok(path)
}

/// The sandbox of in-process servers: a benchmark binary does not carry the sandbox agent, so
/// point at the `outboard-server` built beside it (`scripts/bench.sh` builds it).
pub fn sandbox_config() -> outboard_server::sandbox::SandboxConfig {
    let agent_exe = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("outboard-server")));
    outboard_server::sandbox::SandboxConfig {
        agent_exe,
        ..outboard_server::sandbox::SandboxConfig::default()
    }
}

/// An in-process server for a benchmark talking to `mock` in the `api` dialect, with one
/// session its driver is attached to.
pub struct BenchSession {
    /// The server.
    pub server: outboard_server::ServerHandle,
    /// The driver's connection.
    pub client: crate::harness::WsClient,
    /// The session's id.
    pub session: String,
    _data: tempfile::TempDir,
}

impl BenchSession {
    /// Starts the server (data in a fresh temp dir, the sandbox agent beside the bench) with
    /// `limits`, creates a session and attaches to it as its driver.
    pub async fn start(
        api: &str,
        mock: &crate::mock_llm::MockLlm,
        limits: outboard_server::Limits,
    ) -> anyhow::Result<BenchSession> {
        use anyhow::Context as _;
        let data = tempfile::tempdir_in(std::env::temp_dir())?;
        let base =
            if api == "anthropic" { mock.anthropic_base_url() } else { mock.openai_base_url() };
        let mut llm = outboard_server::config::llm_config(Some(api), Some(&base), Some("bench"))?;
        llm.api_key = Some(outboard_server::Secret::new("bench-key"));
        let config = outboard_server::ServerConfig {
            data_dir: data.path().to_path_buf(),
            models: llm.into(),
            sandbox: sandbox_config(),
            limits,
            net: outboard_server::NetConfig::default(),
            allow_client_workspaces: false,
            place_on_hosts: false,
            store: None,
            workspaces: None,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let server = outboard_server::launch(listener, config).await?;
        let token = server.mint_token("bench", "bench").await?;
        let mut client = crate::harness::WsClient::connect(&server.url(), &token).await?;
        let created = client
            .request("session/create", serde_json::json!({}))
            .await?
            .map_err(anyhow::Error::msg)?;
        let session = created["session"]["id"].as_str().context("no id")?.to_owned();
        client
            .request("session/attach", serde_json::json!({"session_id": session, "role": "driver"}))
            .await?
            .map_err(anyhow::Error::msg)?;
        Ok(BenchSession { server, client, session, _data: data })
    }
}

/// `tmux -L SOCKET ARGS…` (a tmux server of the bench's own): its stdout, or an error with its
/// stderr when it fails.
pub fn tmux(socket: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new("tmux").args(["-L", socket]).args(args).output()?;
    if !out.status.success() {
        anyhow::bail!("tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::parse_args;

    /// Measures nothing: the shape of a bench's command line.
    #[derive(Debug, clap::Parser)]
    struct Args {
        /// Runs per measurement.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Smaller sizes.
        #[arg(long)]
        quick: bool,
    }

    fn parse(argv: &[&str]) -> Result<Args, super::Refusal> {
        let argv = std::iter::once("bench_x").chain(argv.iter().copied());
        parse_args(
            argv,
            |a: &Args| if a.runs == 0 { Err("--runs must be above zero".into()) } else { Ok(()) },
        )
    }

    #[test]
    fn help_prints_the_usage_and_succeeds() {
        for flag in ["--help", "-h"] {
            let Err(refusal) = parse(&["--runs", "2", flag]) else {
                panic!("{flag} parsed as a run")
            };
            let text = &refusal.text;
            assert_eq!(refusal.code, 0, "{flag}: {text}");
            assert!(text.contains("Measures nothing") && text.contains("--runs <RUNS>"), "{text}");
        }
    }

    #[test]
    fn a_bad_argument_is_an_error_with_the_usage_and_exit_code_2() {
        for (argv, says) in [
            (&["--bogus"][..], "unexpected argument '--bogus'"),
            (&["--runs", "many"], "invalid value 'many' for '--runs <RUNS>'"),
            (&["--runs"], "a value is required for '--runs <RUNS>'"),
            (&["--runs", "0"], "error: --runs must be above zero"),
            (&["extra"], "unexpected argument 'extra'"),
        ] {
            let Err(refusal) = parse(argv) else { panic!("{argv:?} parsed") };
            let text = &refusal.text;
            assert_eq!(refusal.code, 2, "{argv:?}: {text}");
            assert!(text.starts_with("error: ") && text.contains(says), "{text}");
            assert_eq!(text.matches("Usage: bench_x [OPTIONS]").count(), 1, "{text}");
        }
    }

    #[test]
    fn good_arguments_parse() {
        let a = parse(&["--quick", "--runs", "5"]);
        assert!(matches!(a, Ok(Args { runs: 5, quick: true })), "{a:?}");
        let a = parse(&[]);
        assert!(matches!(a, Ok(Args { runs: 3, quick: false })), "{a:?}");
    }
}
