//! Helpers for end-to-end tests over real processes: build and locate the workspace's binaries,
//! start `outboard-server` on `127.0.0.1:0` with a temporary data dir, create users, run the
//! `outboard` CLI, and wait on conditions with a deadline.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};

/// A fake API key given to servers under test: tests assert it never shows up anywhere.
pub const TEST_API_KEY: &str = "sk-test-SECRET-do-not-leak-4242";

/// Builds the `outboard-server` and `outboard` binaries once per test process (a no-op when they
/// are fresh), so a test never runs a stale binary, and returns the directory holding them.
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    outboard_server::sandbox::testing::workspace_bin_dir().map_err(|e| anyhow::anyhow!(e))
}

/// The path of a workspace binary (`outboard`, `outboard-server`).
pub fn bin(name: &str) -> anyhow::Result<PathBuf> {
    let path = bin_dir()?.join(name);
    if !path.exists() {
        bail!("{} is missing", path.display());
    }
    Ok(path)
}

/// Which provider protocol a test server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    /// Anthropic Messages.
    Anthropic,
    /// OpenAI Chat Completions.
    OpenAi,
    /// The OpenAI Responses API.
    Responses,
}

impl Api {
    /// The `--provider` value.
    pub fn provider(self) -> &'static str {
        match self {
            Api::Anthropic => "anthropic",
            Api::OpenAi => "openai",
            Api::Responses => "responses",
        }
    }

    /// The environment variable holding this provider's key.
    pub fn key_var(self) -> &'static str {
        match self {
            Api::Anthropic => "ANTHROPIC_API_KEY",
            Api::OpenAi | Api::Responses => "OPENAI_API_KEY",
        }
    }
}

/// A pseudo-flag of `extra` (never passed to the server): the server starts without the suites'
/// `OUTBOARD_CONTEXT_WINDOW`, so an unknown model's window is what its server says, or the
/// default (tests of the window probe).
pub const MODEL_OWN_WINDOW: &str = "--test-model-own-window";

/// The file in a data dir that names its PostgreSQL store (a test may write it to put several
/// servers on one store).
pub const STORE_URL_FILE: &str = "test-store-url";

/// `--store URL` for data dir `dir` when it names one ([`STORE_URL_FILE`]) or the suites run on
/// PostgreSQL (`OUTBOARD_TEST_STORE=postgres`): a schema of this process's test cluster per data dir,
/// remembered in the dir, so a restart and the `admin` commands find the same store; nothing
/// on SQLite (the file in the data dir).
pub fn store_args(dir: &Path) -> anyhow::Result<Vec<String>> {
    Ok(match store_url(dir)? {
        Some(url) => vec!["--store".into(), url, "--store-pool".into(), "3".into()],
        None => Vec::new(),
    })
}

/// The PostgreSQL URL of data dir `dir` ([`store_args`]); `None`: its SQLite file.
pub fn store_url(dir: &Path) -> anyhow::Result<Option<String>> {
    use outboard_server::store::pgtest;
    let file = dir.join(STORE_URL_FILE);
    match std::fs::read_to_string(&file) {
        Ok(url) => Ok(Some(url)),
        Err(_) if !pgtest::wanted() => Ok(None),
        Err(_) => {
            let url = pgtest::fresh_url().map_err(|e| anyhow::anyhow!(e))?;
            std::fs::write(&file, &url)?;
            Ok(Some(url))
        }
    }
}

/// The store of data dir `dir`, opened in this process (to seed or inspect it beside a server).
pub fn open_store(dir: &Path) -> anyhow::Result<outboard_server::store::Store> {
    use outboard_server::store::{Durability, Store, StoreSpec};
    let spec = match store_url(dir)? {
        Some(url) => StoreSpec::Postgres { url, pool: 2 },
        None => StoreSpec::Sqlite(dir.join(outboard_server::config::DB_FILE)),
    };
    Store::open_spec(&spec, Durability::Normal, None).context("cannot open the store")
}

/// A real `outboard-server` process on a loopback port with its own data dir.
pub struct TestServer {
    child: Child,
    /// `ws://127.0.0.1:PORT`.
    pub url: String,
    /// `http://ADDR/metrics`, when started with `--metrics-listen`.
    pub metrics_url: Option<String>,
    /// The data dir (removed on drop unless taken by [`TestServer::kill`]).
    data: Option<tempfile::TempDir>,
    stderr_path: PathBuf,
}

impl TestServer {
    /// Starts a server talking to the mock LLM at `base_url` with the `api` protocol.
    pub fn start(api: Api, base_url: &str) -> anyhow::Result<TestServer> {
        let data = tempfile::tempdir()?;
        Self::start_in(data, api, base_url, &[])
    }

    /// Starts a server on an existing data dir (for restart tests), with extra flags.
    pub fn start_in(
        data: tempfile::TempDir,
        api: Api,
        base_url: &str,
        extra: &[&str],
    ) -> anyhow::Result<TestServer> {
        Self::start_on(data, "127.0.0.1:0", api, base_url, extra)
            .map_err(|e| anyhow::anyhow!(e.reason))
    }

    /// Restarts a server on the data dir and the port of one that stopped (`url` is the old
    /// one's [`TestServer::url`]), the way a deployed server comes back at the same address:
    /// clients that reconnect find it there. Retries while the port is still held (for at most
    /// `PORT_REUSE_DEADLINE`), since a killed process's listening socket can take a moment to go.
    pub fn restart_at(
        url: &str,
        data: tempfile::TempDir,
        api: Api,
        base_url: &str,
        extra: &[&str],
    ) -> anyhow::Result<TestServer> {
        /// A killed server's socket is closed by the kernel when the process is reaped, which
        /// [`TestServer::kill`] waits for; this only covers a slow reap on a loaded machine.
        const PORT_REUSE_DEADLINE: Duration = Duration::from_secs(30);
        let addr = url.trim_start_matches("ws://").to_owned();
        let deadline = Instant::now() + PORT_REUSE_DEADLINE;
        let mut data = data;
        loop {
            match Self::start_on(data, &addr, api, base_url, extra) {
                Ok(server) => return Ok(server),
                Err(StartError { data: back, reason }) => {
                    if Instant::now() >= deadline || !reason.contains("in use") {
                        bail!("cannot restart the server on {addr}: {reason}");
                    }
                    data = back;
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
        }
    }

    /// The `127.0.0.1:PORT` it listens on.
    pub fn addr(&self) -> &str {
        self.url.trim_start_matches("ws://")
    }

    fn start_on(
        data: tempfile::TempDir,
        listen: &str,
        api: Api,
        base_url: &str,
        extra: &[&str],
    ) -> Result<TestServer, StartError> {
        match Self::spawn(&data, listen, api, base_url, extra) {
            Ok((child, url, metrics_url, stderr_path)) => {
                Ok(TestServer { url, metrics_url, child, data: Some(data), stderr_path })
            }
            Err(e) => Err(StartError { data, reason: format!("{e:#}") }),
        }
    }

    fn spawn(
        data: &tempfile::TempDir,
        listen: &str,
        api: Api,
        base_url: &str,
        extra: &[&str],
    ) -> anyhow::Result<(Child, String, Option<String>, PathBuf)> {
        let own_window = extra.contains(&MODEL_OWN_WINDOW);
        let extra: Vec<&str> = extra.iter().copied().filter(|a| *a != MODEL_OWN_WINDOW).collect();
        let extra = extra.as_slice();
        let stderr_path = data.path().join("server.stderr");
        // Appended: a restarted server's log follows the previous one's.
        let stderr = std::fs::OpenOptions::new().create(true).append(true).open(&stderr_path)?;
        let mut command = Command::new(bin("outboard-server")?);
        command.args(["serve", "--listen", listen]).arg("--data").arg(data.path());
        command.args(store_args(data.path())?);
        if outboard_server::store::pgtest::wanted() && !extra.contains(&"--lease-secs") {
            // A killed server's restart waits for its own heartbeat to go stale: keep it short.
            command.args(["--lease-secs", "2"]);
        }
        // A model file (`extra` has `--models FILE`) names providers and URLs itself.
        if !extra.contains(&"--models") {
            command.args(["--provider", api.provider(), "--base-url", base_url]);
            command.args(["--model", "mock-model"]);
        }
        // `mock-model` is no known family (its server is asked, else a guess): the suites stand for a Claude-size
        // window unless a test gives `--context-window` (which wins over the variable).
        if own_window {
            command.env_remove("OUTBOARD_CONTEXT_WINDOW");
        } else {
            command.env("OUTBOARD_CONTEXT_WINDOW", "200000");
        }
        command
            .args(extra)
            .env(api.key_var(), TEST_API_KEY)
            .env("OUTBOARD_LOG", "debug")
            .env_remove("OUTBOARD_LISTEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        let metrics = extra.contains(&"--metrics-listen");
        let (child, url, metrics_url) = Self::listening(&mut command, &stderr_path, metrics)?;
        Ok((child, url, metrics_url, stderr_path))
    }

    /// Starts `outboard-server serve --config FILE` on `data`: the file names the listen address,
    /// the data dir (`data`'s) and the models itself; the environment holds `api`'s key.
    pub fn start_with_config(
        data: tempfile::TempDir,
        config: &Path,
        api: Api,
    ) -> anyhow::Result<TestServer> {
        let stderr_path = data.path().join("server.stderr");
        let stderr = std::fs::File::create(&stderr_path)?;
        let mut command = Command::new(bin("outboard-server")?);
        command.args(["serve", "--config"]).arg(config).args(store_args(data.path())?);
        command
            .env(api.key_var(), TEST_API_KEY)
            .env("OUTBOARD_LOG", "debug")
            .env_remove("OUTBOARD_LISTEN")
            .env_remove("OUTBOARD_CONTEXT_WINDOW")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr);
        let (child, url, metrics_url) = Self::listening(&mut command, &stderr_path, false)?;
        Ok(TestServer { child, url, metrics_url, data: Some(data), stderr_path })
    }

    /// Spawns `command` (a `serve`) and reads its listening line (and with `metrics`, its
    /// metrics line): the child, its URL and its metrics URL.
    fn listening(
        command: &mut Command,
        stderr_path: &Path,
        metrics: bool,
    ) -> anyhow::Result<(Child, String, Option<String>)> {
        use std::io::BufRead as _;
        let mut child = command.spawn().context("cannot start outboard-server")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut line = String::new();
        let mut stdout = std::io::BufReader::new(stdout);
        stdout.read_line(&mut line)?;
        let Some(url) = line.trim().strip_prefix("outboard-server listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(stderr_path).unwrap_or_default();
            bail!("the server did not start: {line:?}\n{log}");
        };
        // The metrics line follows the listening one.
        let mut metrics_url = None;
        if metrics {
            let mut line = String::new();
            stdout.read_line(&mut line)?;
            match line.trim().strip_prefix("outboard-server metrics on ") {
                Some(m) => metrics_url = Some(m.to_owned()),
                None => {
                    let _ = child.kill();
                    let _ = child.wait();
                    bail!("no metrics address after the listening line: {line:?}");
                }
            }
        }
        Ok((child, url.to_owned(), metrics_url))
    }

    /// Adds a user and returns their token (`outboard-server admin user add`).
    pub fn add_user(&self, name: &str, org: &str) -> anyhow::Result<String> {
        let out = Command::new(bin("outboard-server")?)
            .args(["admin", "user", "add", name, "--org", org])
            .arg("--data")
            .arg(self.data_dir())
            .args(store_args(self.data_dir())?)
            .output()?;
        if !out.status.success() {
            bail!("admin user add failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let token = String::from_utf8(out.stdout)?.trim().to_owned();
        Ok(token)
    }

    /// Runs `outboard-server admin ARGS --data DIR` on this server's data dir, with `stdin`;
    /// returns its exit code, stdout and stderr.
    pub fn admin(
        &self,
        args: &[&str],
        stdin: Option<&str>,
    ) -> anyhow::Result<(i32, String, String)> {
        use std::io::Write as _;
        let mut child = Command::new(bin("outboard-server")?)
            .arg("admin")
            .args(args)
            .arg("--data")
            .arg(self.data_dir())
            .args(store_args(self.data_dir())?)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input.as_bytes())?;
        }
        let out = child.wait_with_output()?;
        Ok((
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    }

    /// The host directory of a session's workspace.
    pub fn workspace(&self, session_id: &str) -> PathBuf {
        self.data_dir().join("workspaces").join(session_id)
    }

    /// Everything the server logged so far (at debug level).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The data dir.
    pub fn data_dir(&self) -> &Path {
        self.data.as_ref().map_or(Path::new("/nonexistent"), |d| d.path())
    }

    /// Stops the server with SIGTERM (a graceful shutdown), waits for it to exit (at most
    /// `timeout`, then SIGKILL), and hands back its data dir and whether it exited cleanly.
    pub fn terminate(mut self, timeout: Duration) -> (Option<tempfile::TempDir>, bool) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let deadline = Instant::now() + timeout;
        let mut clean = false;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                clean = status.success();
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        (self.data.take(), clean)
    }

    /// Kills the server (SIGKILL) and hands back its data dir, for a restart.
    pub fn kill(mut self) -> Option<tempfile::TempDir> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.data.take()
    }
}

/// A server that did not start, with its data dir back for another try.
struct StartError {
    data: tempfile::TempDir,
    reason: String,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The result of one `outboard` invocation.
#[derive(Debug)]
pub struct CliRun {
    /// Exit code (-1 when killed by a signal).
    pub code: i32,
    /// Stdout.
    pub stdout: String,
    /// Stderr.
    pub stderr: String,
}

impl CliRun {
    /// Stdout parsed as JSON lines.
    pub fn json_lines(&self) -> anyhow::Result<Vec<serde_json::Value>> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).with_context(|| format!("not JSON: {l}")))
            .collect()
    }
}

/// Runs `outboard ARGS` with a clean environment (no `OUTBOARD_*` from the developer's shell).
pub fn outboard(args: &[&str], stdin: Option<&str>) -> anyhow::Result<CliRun> {
    outboard_in(None, &[], args, stdin)
}

/// [`outboard`] in the directory `cwd` (embedded mode works there, in place), with `env` added.
pub fn outboard_in(
    cwd: Option<&Path>,
    env: &[(&str, &str)],
    args: &[&str],
    stdin: Option<&str>,
) -> anyhow::Result<CliRun> {
    use std::io::Write as _;
    let mut cmd = Command::new(bin("outboard")?);
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    clean_env(&mut cmd);
    cmd.envs(env.iter().copied());
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
    let mut child = cmd.spawn()?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())?;
    }
    let Output { status, stdout, stderr } = child.wait_with_output()?;
    Ok(CliRun {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}

/// Leaves out of `cmd`'s environment what the developer's shell may hold for `outboard`: its
/// variables, API keys, and its configuration file (`$XDG_CONFIG_HOME` points at a directory
/// that does not exist; a test that wants a file passes `--config` or its own variable).
fn clean_env(cmd: &mut Command) {
    for (k, _) in std::env::vars() {
        if k.starts_with("OUTBOARD_") || k.ends_with("_API_KEY") {
            cmd.env_remove(k);
        }
    }
    cmd.env("XDG_CONFIG_HOME", std::env::temp_dir().join("outboard-tests-no-config"));
}

/// Starts `outboard ARGS` in the background with a clean environment (see [`outboard`]) plus
/// `env`, its stdout and stderr going to files in `dir` (`outboard.stdout`, `outboard.stderr`), so
/// a test can watch its output while it runs and act meanwhile (kill its server, press Ctrl-C).
pub fn spawn_outboard(
    args: &[&str],
    env: &[(&str, &str)],
    dir: &Path,
) -> anyhow::Result<BackgroundCli> {
    let stdout = dir.join("outboard.stdout");
    let stderr = dir.join("outboard.stderr");
    let mut cmd = Command::new(bin("outboard")?);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout)?)
        .stderr(std::fs::File::create(&stderr)?);
    clean_env(&mut cmd);
    cmd.envs(env.iter().copied());
    Ok(BackgroundCli { child: cmd.spawn()?, stdout, stderr })
}

/// An `outboard` process started by [`spawn_outboard`]; killed on drop if still running.
pub struct BackgroundCli {
    child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl BackgroundCli {
    /// Its stdout so far.
    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// Its stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Sends it SIGINT (a Ctrl-C).
    pub fn interrupt(&self) -> anyhow::Result<()> {
        let status = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status()?;
        if !status.success() {
            bail!("kill -INT failed");
        }
        Ok(())
    }

    /// Waits for it to exit, at most `timeout` (then kills it and fails, naming `what`).
    pub fn wait(mut self, what: &str, timeout: Duration) -> anyhow::Result<CliRun> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(CliRun {
                    code: status.code().unwrap_or(-1),
                    stdout: self.stdout(),
                    stderr: self.stderr(),
                });
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                bail!(
                    "timed out after {timeout:?} waiting for {what}\nstdout:\n{}\nstderr:\n{}",
                    self.stdout(),
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for BackgroundCli {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Polls `cond` until it holds or `timeout` passes; the error names `what`.
pub fn wait_until(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    bail!("timed out after {timeout:?} waiting for {what}")
}

/// [`wait_until`] for async tests: it sleeps with tokio, so tasks of the same runtime (a mock
/// model serving the very request being waited for, on a test's single thread) keep running.
pub async fn wait_until_async(
    what: &str,
    timeout: Duration,
    mut cond: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bail!("timed out after {timeout:?} waiting for {what}")
}

/// Whether any process on this machine has `marker` in its command line (a sandboxed command
/// shows in the host's `/proc` too).
pub fn host_process_with(marker: &str) -> bool {
    let Ok(procs) = std::fs::read_dir("/proc") else { return false };
    procs.flatten().any(|p| {
        std::fs::read(p.path().join("cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
    })
}

/// A minimal protocol client for tests that need to act mid-turn (interrupt, attach).
pub struct WsClient {
    ws: tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >,
    next_id: u64,
    /// Events received while waiting for a response, in order.
    pub backlog: std::collections::VecDeque<outboard_shared::SessionEvent>,
    /// The server's `welcome` (this connection's id among other things).
    pub welcome: Option<outboard_shared::Welcome>,
    /// Progress frames received while waiting for responses, in order.
    pub progress: Vec<outboard_shared::ProgressFrame>,
    /// Non-fatal connection errors received while waiting for responses (a `lagged` when a
    /// session this connection was attached to stopped running where it was), in order.
    pub notices: Vec<outboard_shared::ConnectionError>,
    /// The size in bytes of the last text frame received (the paging tests bound it).
    pub last_frame_bytes: usize,
}

impl WsClient {
    /// Connects and says hello; fails unless welcomed.
    pub async fn connect(url: &str, token: &str) -> anyhow::Result<WsClient> {
        use futures_util::SinkExt as _;
        let (ws, _) = tokio_tungstenite::connect_async(url).await?;
        let mut client = WsClient {
            ws,
            next_id: 1,
            backlog: Default::default(),
            welcome: None,
            progress: Vec::new(),
            notices: Vec::new(),
            last_frame_bytes: 0,
        };
        let hello = serde_json::json!({
            "type": "hello", "protocol_version": outboard_shared::PROTOCOL_VERSION,
            "token": token, "client": "outboard-tests"
        });
        client
            .ws
            .send(tokio_tungstenite::tungstenite::Message::Text(hello.to_string().into()))
            .await?;
        match client.frame().await? {
            outboard_shared::ServerFrame::Welcome(w) => {
                client.welcome = Some(w);
                Ok(client)
            }
            other => bail!("not welcomed: {other:?}"),
        }
    }

    /// The next text frame from the server, whatever it is (at most 30 s).
    pub async fn frame(&mut self) -> anyhow::Result<outboard_shared::ServerFrame> {
        use futures_util::StreamExt as _;
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(30), self.ws.next())
                .await
                .context("no frame within 30 s")?
                .context("connection closed")??;
            if let tokio_tungstenite::tungstenite::Message::Text(t) = msg {
                self.last_frame_bytes = t.len();
                return Ok(serde_json::from_str(&t)?);
            }
        }
    }

    /// Sends a request and returns its result (events that arrive meanwhile go to `backlog`).
    pub async fn request(
        &mut self,
        method: &str,
        params: serde_json::Value,
    ) -> anyhow::Result<Result<serde_json::Value, outboard_shared::ErrorBody>> {
        use futures_util::SinkExt as _;
        let id = self.next_id;
        self.next_id += 1;
        let frame =
            serde_json::json!({"type": "request", "id": id, "method": method, "params": params});
        self.ws
            .send(tokio_tungstenite::tungstenite::Message::Text(frame.to_string().into()))
            .await?;
        loop {
            match self.frame().await? {
                outboard_shared::ServerFrame::Response(r) if r.id.0 == id => {
                    return Ok(match (r.result, r.error) {
                        (_, Some(e)) => Err(e),
                        (Some(v), None) => Ok(v),
                        (None, None) => Ok(serde_json::Value::Null),
                    })
                }
                outboard_shared::ServerFrame::Event(e) => self.backlog.push_back(e.event),
                outboard_shared::ServerFrame::Progress(p) if p.request_id.0 == id => {
                    self.progress.push(p)
                }
                outboard_shared::ServerFrame::Error(e) if !e.fatal => self.notices.push(e),
                other => bail!("unexpected frame {other:?}"),
            }
        }
    }

    /// Creates a session and attaches to it as its driver; returns its id.
    pub async fn new_session(&mut self) -> anyhow::Result<String> {
        let created = self.request("session/create", serde_json::json!({})).await?;
        let created = created.map_err(|e| anyhow::anyhow!("session/create: {e}"))?;
        let sid = created["session"]["id"].as_str().context("no session id")?.to_owned();
        self.request("session/attach", serde_json::json!({"session_id": sid, "role": "driver"}))
            .await?
            .map_err(|e| anyhow::anyhow!("session/attach: {e}"))?;
        Ok(sid)
    }

    /// The next session event.
    pub async fn event(&mut self) -> anyhow::Result<outboard_shared::SessionEvent> {
        if let Some(e) = self.backlog.pop_front() {
            return Ok(e);
        }
        match self.frame().await? {
            outboard_shared::ServerFrame::Event(e) => Ok(e.event),
            other => bail!("expected an event, got {other:?}"),
        }
    }

    /// Events until (and including) the first one for which `stop` holds.
    pub async fn events_until(
        &mut self,
        mut stop: impl FnMut(&outboard_shared::SessionEvent) -> bool,
    ) -> anyhow::Result<Vec<outboard_shared::SessionEvent>> {
        let mut out = Vec::new();
        loop {
            let e = self.event().await?;
            let done = stop(&e);
            out.push(e);
            if done {
                return Ok(out);
            }
        }
    }
    /// Sends `text` to `session_id` and returns the events up to the turn's end (completed or
    /// failed), that one included.
    pub async fn turn(
        &mut self,
        session_id: &str,
        text: &str,
    ) -> anyhow::Result<Vec<outboard_shared::SessionEvent>> {
        use outboard_shared::EventKind;
        let params = serde_json::json!({"session_id": session_id, "text": text});
        if let Err(e) = self.request("turn/send", params).await? {
            bail!("turn/send was refused: {}", e.message);
        }
        self.events_until(|e| {
            matches!(e.kind, EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. })
        })
        .await
    }
}

impl WsClient {
    /// Sends `text` to `session_id` and returns the turn's durable events, failing unless the
    /// turn completes (not fails) within `wait`.
    pub async fn completed_turn(
        &mut self,
        session_id: &str,
        text: &str,
        wait: Duration,
    ) -> anyhow::Result<Vec<outboard_shared::SessionEvent>> {
        let events = tokio::time::timeout(wait, self.turn(session_id, text))
            .await
            .map_err(|_| anyhow::anyhow!("the turn {text:?} did not end within {wait:?}"))??;
        durable_completed(events)
    }

    /// Waits (at most `wait`) for the end of the turn running now and returns its durable
    /// events, failing unless it completes.
    pub async fn completion(
        &mut self,
        wait: Duration,
    ) -> anyhow::Result<Vec<outboard_shared::SessionEvent>> {
        use outboard_shared::EventKind;
        let ended = self.events_until(|e| {
            matches!(e.kind, EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. })
        });
        let events = tokio::time::timeout(wait, ended)
            .await
            .map_err(|_| anyhow::anyhow!("the turn did not end within {wait:?}"))??;
        durable_completed(events)
    }
}

/// The durable ones of a turn's `events`, which must end with `turn_completed`.
fn durable_completed(
    events: Vec<outboard_shared::SessionEvent>,
) -> anyhow::Result<Vec<outboard_shared::SessionEvent>> {
    let events: Vec<_> = events.into_iter().filter(|e| e.kind.is_durable()).collect();
    match events.last().map(|e| &e.kind) {
        Some(outboard_shared::EventKind::TurnCompleted { .. }) => Ok(events),
        _ => bail!("the turn did not complete: {events:#?}"),
    }
}

/// `(tool name, output, is_error)` of each tool result among `events`, in order.
pub fn tool_results(events: &[outboard_shared::SessionEvent]) -> Vec<(String, String, bool)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            outboard_shared::EventKind::ToolResult { name, output, is_error, .. } => {
                Some((name.clone(), output.clone(), *is_error))
            }
            _ => None,
        })
        .collect()
}

/// The outputs of the `Bash` results among `events`, in order.
pub fn bash_outputs(events: &[outboard_shared::SessionEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            outboard_shared::EventKind::ToolResult { name, output, .. } if name == "Bash" => {
                Some(output.clone())
            }
            _ => None,
        })
        .collect()
}
