//! `scripts/bench.sh hosts`: a workspace on a sandbox host against one on the node itself.
//! One real `outboard-server sandbox-host` (the release binary beside the bench) on 127.0.0.1,
//! driven by the harness's [`HostClient`]; the local side is [`tools::run`] with a local
//! [`Workspace`] and [`Sandbox`], as the server runs its tools. Prints tables, asserts nothing
//! (a tool that fails stops the bench: a failure's latency is not the tool's).
//!
//! - per tool (`Read` and `Write` of a 3 KiB file, `Edit` of one line in it, `Bash true`), local
//!   vs remote, p50/p99 over `--runs N` (default 500, after 20 warm-up calls), the calls of the
//!   two sides interleaved so both see the same machine; the added column is remote minus local
//!   of each quantile (target ≤ 1 ms at p50 over loopback);
//! - connect + join of a cold client (TCP, TLS, WebSocket, HMAC join), and its first command on
//!   a new workspace (the sandbox's cold start on the host), against a local cold start, over
//!   `--cold N` runs (default 30);
//! - resume to the first answer after a harness restart: workspaces whose sandboxes ran a
//!   command and were frozen when idle (a second host started with `--sandbox-freeze-after 1`),
//!   each reached by a cold client, as a restarted harness reaches its host: connect + join and
//!   the first command's answer (the thaw on the host), against the first command in a frozen
//!   local sandbox, over `--resumes N` workspaces (default 20);
//! - commands (`true`) per second per host with 1, 4 and 16 sessions at once, each session its
//!   own workspace and sandbox, for `--seconds S` each (default 3): local, remote over the one
//!   connection a harness keeps per host, remote with a connection per session.
//!
//! Both ends run on this machine: the host's CPU is the bench's CPU, so the throughput rows
//! measure the pair on these cores, not a host's capacity alone.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use outboard_server::remote::client::HostClient;
use outboard_server::remote::trust::new_join_token;
use outboard_server::sandbox::{Sandbox, SandboxConfig};
use outboard_server::tools::{self, ReadLedger, ToolCtx};
use outboard_server::vfs::Workspace;
use outboard_tests::bench::{percentile, sandbox_config, us};
use outboard_tests::hosts::HostProcess;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const T: Duration = Duration::from_secs(30);
const WARMUP: usize = 20;
/// The workspace id of the latency runs on the host.
const WS: &str = "bench";

#[derive(clap::Parser)]
#[command(about = "Sandbox host latency and throughput against local tools")]
struct Args {
    /// Timed calls per tool and side.
    #[arg(long, default_value_t = 500)]
    runs: usize,
    /// Cold clients and cold sandboxes measured.
    #[arg(long, default_value_t = 30)]
    cold: usize,
    /// Frozen workspaces resumed by a cold client (and frozen local sandboxes).
    #[arg(long, default_value_t = 20)]
    resumes: usize,
    /// Seconds each throughput phase runs.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
}

/// A workspace and its sandbox on this node.
struct Local {
    workspace: Workspace,
    sandbox: Sandbox,
    reads: ReadLedger,
}

impl Local {
    fn new(config: &SandboxConfig, dir: &Path) -> anyhow::Result<Local> {
        let workspace = Workspace::new(dir.to_path_buf())?;
        let sandbox = Sandbox::new(config.clone(), workspace.root().to_path_buf());
        Ok(Local { workspace, sandbox, reads: ReadLedger::new() })
    }

    async fn tool(&mut self, name: &str, input: &Value) -> anyhow::Result<()> {
        let ctx = ToolCtx {
            workspace: &self.workspace,
            sandbox: &self.sandbox,
            on_output: &mut |_, _| {},
            cancel: CancellationToken::new(),
            default_timeout: T,
            reads: &mut self.reads,
            org: None,
            events: None,
            remote: None,
            read_only: false,
        };
        let outcome = tools::run(name, input, ctx).await;
        if outcome.is_error {
            bail!("local {name} failed: {}", outcome.output);
        }
        Ok(())
    }
}

/// The host's side of one session: its workspace id and read ledger.
struct Remote<'a> {
    client: &'a HostClient,
    reads: ReadLedger,
}

impl Remote<'_> {
    async fn tool(&mut self, name: &str, input: &Value) -> anyhow::Result<()> {
        if name == "Bash" {
            let command = input["command"].as_str().unwrap_or_default();
            return exec(self.client, WS, command).await;
        }
        let outcome =
            self.client.tool(WS, name, input, &mut self.reads, CancellationToken::new()).await?;
        if outcome.is_error {
            bail!("remote {name} failed: {}", outcome.output);
        }
        Ok(())
    }
}

async fn exec(client: &HostClient, workspace: &str, command: &str) -> anyhow::Result<()> {
    let r = client.exec(workspace, command, T, &mut |_, _| {}, CancellationToken::new()).await?;
    if r.exit_code != Some(0) {
        bail!("remote `{command}` failed: {r:?}");
    }
    Ok(())
}

async fn local_exec(sandbox: &Sandbox, command: &str) -> anyhow::Result<()> {
    let r = sandbox.exec(command, T, &mut |_, _| {}, CancellationToken::new()).await?;
    if r.exit_code != Some(0) {
        bail!("local `{command}` failed: {r:?}");
    }
    Ok(())
}

/// A 3 KiB text file of 48 lines, one of them holding `marker`.
fn sample(marker: &str) -> String {
    (0..48)
        .map(|i| {
            if i == 24 {
                format!("    let {marker} = compute(line, {i}); // the line Edit changes\n")
            } else {
                format!("    let value_{i:02} = compute(line, {i}); // a line of ordinary source code\n")
            }
        })
        .collect()
}

/// The input of call number `i` of tool `name` (`Edit` goes back and forth between two words).
fn input(name: &str, i: usize) -> Value {
    match name {
        "Read" => json!({"file_path": "/workspace/read.txt"}),
        "Write" => json!({"file_path": "/workspace/write.txt", "content": sample("written")}),
        "Edit" => {
            let (old, new) =
                if i.is_multiple_of(2) { ("alpha", "omega") } else { ("omega", "alpha") };
            json!({"file_path": "/workspace/edit.txt", "old_string": old, "new_string": new})
        }
        _ => json!({"command": "true"}),
    }
}

struct Latency {
    name: &'static str,
    local: Vec<Duration>,
    remote: Vec<Duration>,
}

async fn latencies(
    local: &mut Local,
    remote: &mut Remote<'_>,
    runs: usize,
) -> anyhow::Result<Vec<Latency>> {
    let setup = [
        ("Write", json!({"file_path": "/workspace/read.txt", "content": sample("read")})),
        ("Write", json!({"file_path": "/workspace/edit.txt", "content": sample("alpha")})),
        ("Read", json!({"file_path": "/workspace/edit.txt"})),
        // The sandbox starts here, not in the first timed call.
        ("Bash", json!({"command": "true"})),
    ];
    for (name, input) in &setup {
        local.tool(name, input).await?;
        remote.tool(name, input).await?;
    }
    let mut out = Vec::new();
    for name in ["Read", "Write", "Edit", "Bash"] {
        let mut row = Latency { name, local: Vec::new(), remote: Vec::new() };
        for i in 0..WARMUP + runs {
            let input = input(name, i);
            let start = Instant::now();
            local.tool(name, &input).await?;
            let local_took = start.elapsed();
            let start = Instant::now();
            remote.tool(name, &input).await?;
            let remote_took = start.elapsed();
            if i >= WARMUP {
                row.local.push(local_took);
                row.remote.push(remote_took);
            }
        }
        row.local.sort();
        row.remote.sort();
        out.push(row);
    }
    Ok(out)
}

struct Cold {
    connect: Vec<Duration>,
    first_remote: Vec<Duration>,
    first_local: Vec<Duration>,
}

async fn cold(
    host: &HostProcess,
    config: &SandboxConfig,
    dir: &Path,
    n: usize,
) -> anyhow::Result<Cold> {
    let mut cold = Cold { connect: Vec::new(), first_remote: Vec::new(), first_local: Vec::new() };
    for i in 0..n {
        let client = HostClient::new(host.endpoint("bench-cold"), T)?;
        let start = Instant::now();
        client.connect().await?;
        cold.connect.push(start.elapsed());
        let start = Instant::now();
        exec(&client, &format!("cold-{i}"), "true").await?;
        cold.first_remote.push(start.elapsed());

        let sandbox = Sandbox::new(config.clone(), {
            let path = dir.join(format!("cold-{i}"));
            std::fs::create_dir_all(&path)?;
            path
        });
        let start = Instant::now();
        local_exec(&sandbox, "true").await?;
        cold.first_local.push(start.elapsed());
        sandbox.stop().await;
    }
    cold.connect.sort();
    cold.first_remote.sort();
    cold.first_local.sort();
    Ok(cold)
}

/// The seconds of idle after which the resume bench's host and local sandboxes freeze.
const FREEZE_AFTER: Duration = Duration::from_secs(1);

struct Resume {
    /// Connect + join of the cold client until the first command's answer.
    remote: Vec<Duration>,
    /// The first command in a frozen local sandbox.
    local: Vec<Duration>,
}

/// `n` workspaces on a host that freezes idle sandboxes after [`FREEZE_AFTER`], each run once
/// and left to freeze, then resumed one by one by a cold client; the same for local sandboxes.
async fn resumes(
    exe: &Path,
    config: &SandboxConfig,
    dir: &Path,
    n: usize,
) -> anyhow::Result<Resume> {
    std::fs::create_dir_all(dir)?;
    let token = new_join_token()?;
    let freeze = FREEZE_AFTER.as_secs().to_string();
    let host = HostProcess::spawn_exe(
        exe,
        None,
        &dir.join("host"),
        &token,
        &["--sandbox-freeze-after", &freeze],
        0,
        "warn",
    )?;
    let first = HostClient::new(host.endpoint("bench-resume"), T)?;
    first.connect().await?;
    for i in 0..n {
        exec(&first, &format!("resume-{i}"), "true").await?;
    }
    drop(first);
    let local_config = SandboxConfig { idle_freeze: FREEZE_AFTER, ..config.clone() };
    let mut locals = Vec::new();
    for i in 0..n {
        let path = dir.join(format!("local-{i}"));
        std::fs::create_dir_all(&path)?;
        let sandbox = Sandbox::new(local_config.clone(), path);
        local_exec(&sandbox, "true").await?;
        locals.push(sandbox);
    }
    // Every sandbox idle past its freeze, with a margin for the manager's tick.
    tokio::time::sleep(FREEZE_AFTER * 3).await;
    let mut out = Resume { remote: Vec::new(), local: Vec::new() };
    for i in 0..n {
        let client = HostClient::new(host.endpoint("bench-resume"), T)?;
        let start = Instant::now();
        client.connect().await?;
        exec(&client, &format!("resume-{i}"), "true").await?;
        out.remote.push(start.elapsed());
    }
    for sandbox in &locals {
        let start = Instant::now();
        local_exec(sandbox, "true").await?;
        out.local.push(start.elapsed());
    }
    for sandbox in locals {
        sandbox.stop().await;
    }
    out.remote.sort();
    out.local.sort();
    Ok(out)
}

/// One session of a throughput phase: a sandbox here, or a workspace on the host.
#[derive(Clone)]
enum Session {
    Local(Sandbox),
    Remote(Arc<HostClient>, String),
}

impl Session {
    async fn run_true(&self) -> anyhow::Result<()> {
        match self {
            Session::Local(sandbox) => local_exec(sandbox, "true").await,
            Session::Remote(client, workspace) => exec(client, workspace, "true").await,
        }
    }
}

/// Runs `true` in a loop in every session at once for `seconds` (each sandbox started
/// first); commands per second, all sessions together.
async fn throughput(sessions: &[Session], seconds: f64) -> anyhow::Result<f64> {
    for session in sessions {
        session.run_true().await?;
    }
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(seconds);
    let tasks: Vec<_> = sessions
        .iter()
        .cloned()
        .map(|session| {
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < deadline {
                    session.run_true().await?;
                    n += 1;
                }
                anyhow::Ok(n)
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await??;
    }
    Ok(total as f64 / start.elapsed().as_secs_f64())
}

struct Rate {
    sessions: usize,
    local: f64,
    shared: f64,
    own: f64,
}

async fn rates(
    host: &HostProcess,
    client: &Arc<HostClient>,
    config: &SandboxConfig,
    dir: &Path,
    seconds: f64,
) -> anyhow::Result<Vec<Rate>> {
    let mut out = Vec::new();
    for n in [1, 4, 16] {
        let mut local = Vec::new();
        for k in 0..n {
            let path = dir.join(format!("rate-{n}-{k}"));
            std::fs::create_dir_all(&path)?;
            local.push(Session::Local(Sandbox::new(config.clone(), path)));
        }
        let local_rate = throughput(&local, seconds).await?;
        for session in &local {
            if let Session::Local(sandbox) = session {
                sandbox.stop().await;
            }
        }
        let shared: Vec<Session> =
            (0..n).map(|k| Session::Remote(client.clone(), format!("shared-{n}-{k}"))).collect();
        let shared_rate = throughput(&shared, seconds).await?;
        let mut own = Vec::new();
        for k in 0..n {
            let client = Arc::new(HostClient::new(host.endpoint("bench-own"), T)?);
            own.push(Session::Remote(client, format!("own-{n}-{k}")));
        }
        let own_rate = throughput(&own, seconds).await?;
        out.push(Rate { sessions: n, local: local_rate, shared: shared_rate, own: own_rate });
    }
    Ok(out)
}

/// A table of named samples (each sorted) with their p50 and p99 in milliseconds.
fn print_ms_table(rows: &[(&str, &Vec<Duration>)]) {
    println!("| measure | p50 ms | p99 ms |");
    println!("|---|---:|---:|");
    for (name, samples) in rows {
        println!(
            "| {name} | {:.2} | {:.2} |",
            ms(percentile(samples, 0.5)),
            ms(percentile(samples, 0.99))
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let args = outboard_tests::bench::args(|a: &Args| {
        if a.runs == 0 || a.cold == 0 || a.resumes == 0 || a.seconds <= 0.0 {
            return Err("--runs, --cold, --resumes and --seconds must be above zero".into());
        }
        Ok(())
    });
    let exe = outboard_tests::bench::server_exe("hosts")?;
    let config = sandbox_config();
    Sandbox::check(&config).await.context("while checking the sandbox")?;
    let dir = tempfile::tempdir()?;
    let token = new_join_token()?;
    // The host logs warnings only, like the in-process local side, which logs nothing.
    let host =
        HostProcess::spawn_exe(&exe, None, &dir.path().join("host"), &token, &[], 0, "warn")?;
    let client = Arc::new(HostClient::new(host.endpoint("bench"), T)?);
    client.connect().await?;

    let mut local = Local::new(&config, &dir.path().join("local"))?;
    let mut remote = Remote { client: &client, reads: ReadLedger::new() };
    let latency = latencies(&mut local, &mut remote, args.runs).await?;
    local.sandbox.stop().await;
    let cold = cold(&host, &config, &dir.path().join("cold"), args.cold).await?;
    let resume = resumes(&exe, &config, &dir.path().join("resume"), args.resumes).await?;
    let rates = rates(&host, &client, &config, &dir.path().join("rates"), args.seconds).await?;

    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let build = if cfg!(debug_assertions) { "debug build" } else { "release build" };
    println!(
        "## Sandbox host on 127.0.0.1 against local tools — {build}, {cores} cores, host and \
         bench on the same machine\n"
    );
    println!(
        "Per tool call ({} timed runs each after {WARMUP} warm-up, local and remote calls \
         interleaved; added = remote − local of each quantile; target ≤ 1 ms at p50):\n",
        args.runs
    );
    println!(
        "| tool | local p50 µs | local p99 µs | remote p50 µs | remote p99 µs | added p50 µs | \
         added p99 µs |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for row in &latency {
        let (l50, l99) = (percentile(&row.local, 0.5), percentile(&row.local, 0.99));
        let (r50, r99) = (percentile(&row.remote, 0.5), percentile(&row.remote, 0.99));
        let label = if row.name == "Bash" { "Bash `true`" } else { row.name };
        println!(
            "| {label} | {:.0} | {:.0} | {:.0} | {:.0} | {:+.0} | {:+.0} |",
            us(l50),
            us(l99),
            us(r50),
            us(r99),
            us(r50) - us(l50),
            us(r99) - us(l99),
        );
    }
    println!("\nCold starts ({} runs each):\n", args.cold);
    let cold_rows = [
        ("connect + join, cold client (TCP, TLS, WebSocket, HMAC join)", &cold.connect),
        (
            "first command after connect, new workspace on the host (sandbox cold start)",
            &cold.first_remote,
        ),
        ("first command, new local sandbox (sandbox cold start)", &cold.first_local),
    ];
    print_ms_table(&cold_rows);
    println!(
        "\nResume to the first answer after a harness restart ({} workspaces whose sandboxes \
         froze after {}s idle):\n",
        args.resumes,
        FREEZE_AFTER.as_secs()
    );
    let resume_rows = [
        (
            "cold client: connect + join + first command in the frozen workspace (thaw on the host)",
            &resume.remote,
        ),
        ("first command in a frozen local sandbox (thaw)", &resume.local),
    ];
    print_ms_table(&resume_rows);
    println!(
        "\nCommands (`true`) per second per host, {}s per phase, each session its own workspace \
         and sandbox:\n",
        args.seconds
    );
    println!(
        "| sessions at once | local cmds/s | remote cmds/s, one connection | remote cmds/s, a \
         connection each |"
    );
    println!("|---:|---:|---:|---:|");
    for rate in &rates {
        println!(
            "| {} | {:.0} | {:.0} | {:.0} |",
            rate.sessions, rate.local, rate.shared, rate.own
        );
    }
    drop(host);
    Ok(())
}
