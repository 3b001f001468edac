//! `scripts/bench.sh startup|task|compare`: the real release `outboard` started as a child
//! against the mock model over real HTTP (issue #37). Nothing here asserts: the numbers are for
//! people (and closing notes).
//!
//! - `startup`: the process's spawn to the first model request reaching the mock, in embedded
//!   mode and against a running `outboard-server`, each with a cold data dir (a new one per run;
//!   for the server, a server started on it just before) and a warm one (runs after a first on the
//!   same data dir or server). The model answers at once, so the run then ends.
//! - `task`: the 21-call task in embedded mode on a warm data dir: five rounds of Write, a shell
//!   `echo`, Read and Edit, then a final answer. The gaps between the model requests (each is the
//!   harness's work around one tool call), the CPU (user + system) of the process and of every
//!   sandbox process it reaped, and the peak RSS of the process and of its whole tree.
//!
//! - `tui`: the TUI (`outboard` with no subcommand, embedded, in a tmux pane of 120×40) asked
//!   one question whose answer holds a Rust code block (so the highlighter loads), then quit
//!   with Ctrl-C twice: the peak RSS of the process and of its tree. `scripts/build-dist.sh` runs it too, so the TUI's code is laid out with
//!   the rest of what a run enters.
//!
//! With several `--build`s (`scripts/bench.sh compare REV`), the builds take turns: each round
//! runs every build's samples before the next round starts, so load on the machine falls on
//! all of them alike.

use std::collections::BTreeMap;
use std::io::BufRead as _;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use anyhow::{bail, Context as _};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use outboard_tests::speed::{self, mb, median_p90, ms, Build, Reaped};
use serde_json::json;

/// The API key the mock accepts (any would do).
const KEY: &str = "sk-bench";
/// The model id sent to the mock.
const MODEL: &str = "mock-model";
/// Rounds of the task (Write, Bash, Read, Edit each).
const TASK_ROUNDS: usize = 5;
/// The tools of one task round, in order.
const TASK_TOOLS: [&str; 4] = ["Write", "Bash", "Read", "Edit"];

/// The release `outboard` against the mock model: start to first model request, or the 21-call
/// task (tables; asserts nothing).
#[derive(clap::Parser)]
#[command(name = "bench_speed")]
struct Args {
    /// Which benchmark to run.
    #[arg(value_enum)]
    which: Which,
    /// Processes per scenario, per build and round (default: 10 for startup, 5 for task).
    #[arg(long)]
    runs: Option<usize>,
    /// Rounds: each runs every build's samples once, builds in turn.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// A build to measure, `LABEL=DIR` (DIR holding the release `outboard` and
    /// `outboard-server`); repeat it to compare. Default: the binaries beside this bench.
    #[arg(long = "build", value_name = "LABEL=DIR", value_parser = Build::parse)]
    builds: Vec<Build>,
}

#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
enum Which {
    Startup,
    Task,
    Tui,
}

fn main() -> anyhow::Result<()> {
    let args = outboard_tests::bench::args(|a: &Args| {
        if a.runs == Some(0) || a.rounds == 0 {
            return Err("--runs and --rounds must be above zero".into());
        }
        Ok(())
    });
    let builds = if args.builds.is_empty() {
        vec![Build::beside_bench().map_err(anyhow::Error::msg)?]
    } else {
        args.builds.clone()
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let _in_runtime = rt.enter();
    match args.which {
        Which::Startup => startup(&builds, args.runs.unwrap_or(10), args.rounds),
        Which::Task => task(&builds, args.runs.unwrap_or(5), args.rounds),
        Which::Tui => tui(&builds, args.runs.unwrap_or(5), args.rounds),
    }
}

/// Where a startup run connects, and how warm its data dir is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Scenario {
    EmbeddedCold,
    EmbeddedWarm,
    ServerCold,
    ServerWarm,
}

impl Scenario {
    const ALL: [Scenario; 4] = [
        Scenario::EmbeddedCold,
        Scenario::EmbeddedWarm,
        Scenario::ServerCold,
        Scenario::ServerWarm,
    ];

    fn name(self) -> &'static str {
        match self {
            Scenario::EmbeddedCold => "embedded, cold data dir",
            Scenario::EmbeddedWarm => "embedded, warm data dir",
            Scenario::ServerCold => "--server, server just started on a new data dir",
            Scenario::ServerWarm => "--server, server that served runs before",
        }
    }
}

/// One startup sample: spawn → first request, spawn → exit, CPU.
struct StartSample {
    first: Duration,
    wall: Duration,
    cpu: Duration,
}

fn startup(builds: &[Build], runs: usize, rounds: usize) -> anyhow::Result<()> {
    let mock = block(MockLlm::start_responder(|_| Some(MockStep::text("done"))))?;
    let mut samples: BTreeMap<(usize, Scenario), Vec<StartSample>> = BTreeMap::new();
    for _ in 0..rounds {
        for (b, build) in builds.iter().enumerate() {
            for scenario in Scenario::ALL {
                let got = startup_runs(build, scenario, runs, &mock)?;
                samples.entry((b, scenario)).or_default().extend(got);
            }
        }
    }
    println!("## Start to first model request (`outboard run`, mock model answering at once)");
    println!();
    println!("{runs} runs per scenario and build in each of {rounds} round(s), builds in turn. From the spawn of `outboard` to the request reaching the mock; the run then ends (`exit`). CPU: user + system of the process and what it reaped.");
    println!();
    println!("| scenario | build | runs | first request p50 (ms) | p90 (ms) | exit p50 (ms) | CPU p50 (ms) |");
    println!("|---|---|---|---|---|---|---|");
    for scenario in Scenario::ALL {
        for (b, build) in builds.iter().enumerate() {
            let s = samples.get(&(b, scenario)).map(Vec::as_slice).unwrap_or_default();
            let (first, first90) = median_p90(&mut s.iter().map(|s| s.first).collect::<Vec<_>>());
            let (wall, _) = median_p90(&mut s.iter().map(|s| s.wall).collect::<Vec<_>>());
            let (cpu, _) = median_p90(&mut s.iter().map(|s| s.cpu).collect::<Vec<_>>());
            println!(
                "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} |",
                scenario.name(),
                build.label,
                s.len(),
                ms(first),
                ms(first90),
                ms(wall),
                ms(cpu)
            );
        }
    }
    println!();
    Ok(())
}

/// `runs` startup samples of `build` in `scenario`.
fn startup_runs(
    build: &Build,
    scenario: Scenario,
    runs: usize,
    mock: &MockLlm,
) -> anyhow::Result<Vec<StartSample>> {
    let mut out = Vec::with_capacity(runs);
    // A warm scenario's data dir (and server) serves a first, unmeasured run, then the samples.
    let warm = tempfile::tempdir()?;
    let warm_server = match scenario {
        Scenario::ServerWarm => Some(BenchServer::start(build, warm.path(), mock)?),
        _ => None,
    };
    let warm_up = matches!(scenario, Scenario::EmbeddedWarm | Scenario::ServerWarm);
    for i in 0..runs + usize::from(warm_up) {
        let cold = tempfile::tempdir()?;
        let cold_server = match scenario {
            Scenario::ServerCold => Some(BenchServer::start(build, cold.path(), mock)?),
            _ => None,
        };
        let data = if warm_up { warm.path() } else { cold.path() };
        let server = warm_server.as_ref().or(cold_server.as_ref());
        let (reaped, first) = one_run(build, data, server, mock, "hello")?;
        if warm_up && i == 0 {
            continue;
        }
        out.push(StartSample {
            first: first.saturating_duration_since(reaped.spawned),
            wall: reaped.ended - reaped.spawned,
            cpu: reaped.cpu,
        });
    }
    Ok(out)
}

/// One `outboard run PROMPT` of `build` (embedded on `data`, or against `server`), to its end:
/// the reaped process and when its first model request reached the mock.
fn one_run(
    build: &Build,
    data: &Path,
    server: Option<&BenchServer>,
    mock: &MockLlm,
    prompt: &str,
) -> anyhow::Result<(Reaped, std::time::Instant)> {
    let home = tempfile::tempdir()?;
    let workspace = home.path().join("project");
    std::fs::create_dir(&workspace)?;
    let base = mock.anthropic_base_url();
    let data_str = data.to_str().context("data dir not UTF-8")?;
    let mut cmd = match server {
        None => {
            let mut cmd = speed::command(
                build,
                "outboard",
                home.path(),
                &[("ANTHROPIC_API_KEY", KEY), ("OUTBOARD_CONTEXT_WINDOW", "200000")],
            )?;
            cmd.args(["run", "--provider", "anthropic", "--base-url", &base, "--model", MODEL]);
            cmd.args(["--data", data_str]).arg("--workspace").arg(&workspace);
            cmd
        }
        Some(server) => {
            let mut cmd = speed::command(
                build,
                "outboard",
                home.path(),
                &[("OUTBOARD_TOKEN", &server.token)],
            )?;
            cmd.args(["run", "--server", &server.url]);
            cmd
        }
    };
    cmd.arg(prompt);
    let before = mock.arrivals().len();
    let reaped = speed::run(cmd)?;
    if reaped.code != 0 {
        bail!(
            "{} exited with {}: {}",
            build.bin("outboard").display(),
            reaped.code,
            speed::stderr_of(home.path(), "outboard")
        );
    }
    let first =
        mock.arrivals().get(before).copied().context("the run ended without a model request")?;
    Ok((reaped, first))
}

/// A release `outboard-server` on `127.0.0.1:0` talking to the mock, with a user's token.
struct BenchServer {
    child: Child,
    url: String,
    token: String,
}

impl BenchServer {
    fn start(build: &Build, data: &Path, mock: &MockLlm) -> anyhow::Result<BenchServer> {
        let data_str = data.to_str().context("data dir not UTF-8")?;
        let mut add = speed::command(build, "outboard-server", data, &[])?;
        add.args(["admin", "user", "add", "bench", "--org", "bench", "--data", data_str]);
        let added = add.stdout(Stdio::piped()).output()?;
        if !added.status.success() {
            bail!("admin user add: {}", speed::stderr_of(data, "outboard-server"));
        }
        let token = String::from_utf8(added.stdout)?.trim().to_owned();
        let mut serve = speed::command(
            build,
            "outboard-server",
            data,
            &[("ANTHROPIC_API_KEY", KEY), ("OUTBOARD_CONTEXT_WINDOW", "200000")],
        )?;
        serve.args(["serve", "--listen", "127.0.0.1:0", "--data", data_str]);
        serve.args(["--provider", "anthropic", "--base-url", &mock.anthropic_base_url()]);
        serve.args(["--model", MODEL]);
        let mut child = serve.stdout(Stdio::piped()).spawn()?;
        let mut line = String::new();
        let stdout = child.stdout.take().context("no stdout")?;
        std::io::BufReader::new(stdout).read_line(&mut line)?;
        let Some(url) = line.trim().strip_prefix("outboard-server listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            bail!("the server did not start: {}", speed::stderr_of(data, "outboard-server"));
        };
        Ok(BenchServer { url: url.to_owned(), child, token })
    }
}

impl Drop for BenchServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The task's script: five rounds of Write, Bash `echo`, Read, Edit, then the answer.
fn task_script() -> Vec<MockStep> {
    let mut steps = Vec::new();
    for r in 0..TASK_ROUNDS {
        let path = format!("/workspace/notes{r}.txt");
        steps.push(MockStep::tool_call(
            "Write",
            json!({"file_path": path, "content": format!("round {r}: draft\nsecond line\n")}),
        ));
        steps.push(MockStep::tool_call("Bash", json!({"command": format!("echo round {r}")})));
        steps.push(MockStep::tool_call("Read", json!({"file_path": path})));
        steps.push(MockStep::tool_call(
            "Edit",
            json!({"file_path": path, "old_string": "draft", "new_string": "final"}),
        ));
    }
    steps.push(MockStep::text("All five notes are written, checked and final."));
    steps
}

/// One task sample.
struct TaskSample {
    first: Duration,
    /// Between consecutive model requests, in order (the tool of step i is `TASK_TOOLS[i % 4]`).
    gaps: Vec<Duration>,
    wall: Duration,
    cpu: Duration,
    peak_rss: u64,
    tree_peak_rss: u64,
}

fn task(builds: &[Build], runs: usize, rounds: usize) -> anyhow::Result<()> {
    let mut samples: BTreeMap<usize, Vec<TaskSample>> = BTreeMap::new();
    for _ in 0..rounds {
        for (b, build) in builds.iter().enumerate() {
            let warm = tempfile::tempdir()?;
            for i in 0..=runs {
                let sample = task_run(build, warm.path())?;
                // The first run makes the data dir warm; it is not counted.
                if i > 0 {
                    samples.entry(b).or_default().push(sample);
                }
            }
        }
    }
    let calls = TASK_ROUNDS * TASK_TOOLS.len() + 1;
    println!("## The {calls}-call task (embedded `outboard run`, warm data dir, mock model answering at once)");
    println!();
    println!("{runs} runs per build in each of {rounds} round(s), builds in turn; medians over runs (gaps: over every gap of every run). A gap runs from one model request reaching the mock to the next: the answer, the tool, the log's commits, the next prompt. CPU: user + system of `outboard` and the sandbox processes it reaped. RSS: the process's own peak (the kernel's VmHWM, last read at most 5 ms before its exit), and the largest sum over the process tree at one 5 ms sample.");
    println!();
    println!("| build | runs | start → first request (ms) | gap p50 (ms) | gap p90 (ms) | after Write / Bash / Read / Edit, p50 (ms) | start → exit (ms) | CPU (s) | peak RSS, process (MB) | peak RSS, tree (MB) |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (b, build) in builds.iter().enumerate() {
        let s = samples.get(&b).map(Vec::as_slice).unwrap_or_default();
        let median = |f: &dyn Fn(&TaskSample) -> Duration| {
            median_p90(&mut s.iter().map(f).collect::<Vec<_>>()).0
        };
        let (gap, gap90) =
            median_p90(&mut s.iter().flat_map(|s| s.gaps.clone()).collect::<Vec<_>>());
        let by_tool: Vec<String> = (0..TASK_TOOLS.len())
            .map(|t| {
                let mut v: Vec<Duration> = s
                    .iter()
                    .flat_map(|s| s.gaps.iter().skip(t).step_by(TASK_TOOLS.len()).copied())
                    .collect();
                format!("{:.2}", ms(median_p90(&mut v).0))
            })
            .collect();
        println!(
            "| {} | {} | {:.1} | {:.2} | {:.2} | {} | {:.1} | {:.3} | {:.1} | {:.1} |",
            build.label,
            s.len(),
            ms(median(&|s| s.first)),
            ms(gap),
            ms(gap90),
            by_tool.join(" / "),
            ms(median(&|s| s.wall)),
            median(&|s| s.cpu).as_secs_f64(),
            mb(speed::median_bytes(s.iter().map(|s| s.peak_rss))),
            mb(speed::median_bytes(s.iter().map(|s| s.tree_peak_rss))),
        );
    }
    println!();
    Ok(())
}

/// One run of the task by `build` on the data dir `data`.
fn task_run(build: &Build, data: &Path) -> anyhow::Result<TaskSample> {
    let mock = block(MockLlm::start(task_script()))?;
    let (reaped, _) = one_run(build, data, None, &mock, "write the five notes")?;
    let arrivals = mock.arrivals();
    let calls = TASK_ROUNDS * TASK_TOOLS.len() + 1;
    if arrivals.len() != calls {
        bail!("the task made {} model requests, not {calls}", arrivals.len());
    }
    if mock.requests().iter().any(|r| r.raw.contains("\"is_error\":true")) {
        bail!("a tool call of the task failed: {}", last_tool_result(&mock));
    }
    Ok(TaskSample {
        first: arrivals[0].saturating_duration_since(reaped.spawned),
        gaps: arrivals.windows(2).map(|w| w[1] - w[0]).collect(),
        wall: reaped.ended - reaped.spawned,
        cpu: reaped.cpu,
        peak_rss: reaped.peak_rss,
        tree_peak_rss: reaped.tree_peak_rss,
    })
}

/// The last request's last message, to show why a task went wrong.
fn last_tool_result(mock: &MockLlm) -> String {
    let requests = mock.requests();
    let Some(last) = requests.last() else { return String::new() };
    last.body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m.to_string())
        .unwrap_or_default()
}

/// The TUI's answer: a Rust block for the highlighter, then a line to wait for.
const TUI_ANSWER: &str =
    "Here it is:\n\n```rust\nfn main() {\n    println!(\"hi\");\n}\n```\n\nThat is all, bench.";

/// One TUI sample.
struct TuiSample {
    peak_rss: u64,
    tree_peak_rss: u64,
}

fn tui(builds: &[Build], runs: usize, rounds: usize) -> anyhow::Result<()> {
    let mock = block(MockLlm::start_responder(|_| Some(MockStep::text(TUI_ANSWER))))?;
    let mut samples: BTreeMap<usize, Vec<TuiSample>> = BTreeMap::new();
    for _ in 0..rounds {
        for (b, build) in builds.iter().enumerate() {
            let warm = tempfile::tempdir()?;
            for i in 0..=runs {
                let sample = tui_run(build, warm.path(), &mock)?;
                // The first run makes the data dir warm; it is not counted.
                if i > 0 {
                    samples.entry(b).or_default().push(sample);
                }
            }
        }
    }
    println!(
        "## The TUI (embedded, in tmux at 120×40, warm data dir): one question, then Ctrl-C twice"
    );
    println!();
    println!("{runs} runs per build in each of {rounds} round(s), builds in turn; medians. RSS: the process's own peak (VmHWM, sampled every 5 ms) and the largest sum over its tree at one sample.");
    println!();
    println!("| build | runs | peak RSS, process (MB) | peak RSS, tree (MB) |");
    println!("|---|---|---|---|");
    for (b, build) in builds.iter().enumerate() {
        let s = samples.get(&b).map(Vec::as_slice).unwrap_or_default();
        println!(
            "| {} | {} | {:.1} | {:.1} |",
            build.label,
            s.len(),
            mb(speed::median_bytes(s.iter().map(|s| s.peak_rss))),
            mb(speed::median_bytes(s.iter().map(|s| s.tree_peak_rss))),
        );
    }
    println!();
    Ok(())
}

/// One TUI session of `build` on the data dir `data`, in a tmux server of its own.
fn tui_run(build: &Build, data: &Path, mock: &MockLlm) -> anyhow::Result<TuiSample> {
    let home = tempfile::tempdir()?;
    let workspace = home.path().join("project");
    std::fs::create_dir(&workspace)?;
    // A tmux server per run: one that is still going away refuses a new session.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let socket = format!("outboard-bench-speed-{}-{run}", std::process::id());
    let tmux = |args: &[&str]| outboard_tests::bench::tmux(&socket, args);
    let screen = || tmux(&["capture-pane", "-p", "-t", "t"]).unwrap_or_default();
    let wait_for = |what: &str| -> anyhow::Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while !screen().contains(what) {
            if std::time::Instant::now() > deadline {
                bail!("the TUI never showed {what:?}:\n{}", screen());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Ok(())
    };
    // The pane starts in the workspace: a relative `--build` dir would not resolve there.
    let exe = std::fs::canonicalize(build.bin("outboard"))?;
    let env = |k: &str, v: &str| format!("{k}={v}");
    let (key, home_var) = (env("ANTHROPIC_API_KEY", KEY), env("HOME", path_str(home.path())?));
    let base = mock.anthropic_base_url();
    let before = mock.arrivals().len();
    tmux(&[
        "new-session",
        "-d",
        "-s",
        "t",
        "-x",
        "120",
        "-y",
        "40",
        "-c",
        path_str(&workspace)?,
        "-e",
        &key,
        "-e",
        &home_var,
        "-e",
        "OUTBOARD_CONTEXT_WINDOW=200000",
        path_str(&exe)?,
        "--provider",
        "anthropic",
        "--base-url",
        &base,
        "--model",
        MODEL,
        "--data",
        path_str(data)?,
        "--workspace",
        path_str(&workspace)?,
        // A pane whose process ended stays, with what it printed (for the error).
        ";",
        "set-option",
        "-gw",
        "remain-on-exit",
        "on",
    ])?;
    let result = (|| {
        let pid: u32 = tmux(&["list-panes", "-t", "t", "-F", "#{pane_pid}"])?.trim().parse()?;
        let sampler = speed::Sampler::start(pid);
        wait_for("connected")?;
        tmux(&["send-keys", "-t", "t", "-l", "show me a hello world in Rust"])?;
        tmux(&["send-keys", "-t", "t", "Enter"])?;
        wait_for("That is all, bench.")?;
        tmux(&["send-keys", "-t", "t", "C-c"])?;
        wait_for("press Ctrl-C again")?;
        tmux(&["send-keys", "-t", "t", "C-c"])?;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        // Gone, or a zombie: tmux reaps its panes, but this machine's init may be slow to reap
        // what a tmux server that exited leaves behind.
        let running = || {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            status.lines().any(|l| l.starts_with("State:") && !l.contains("zombie"))
        };
        while running() {
            if std::time::Instant::now() > deadline {
                let state =
                    std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
                let state = state.lines().find(|l| l.starts_with("State:")).unwrap_or_default();
                bail!("the TUI did not exit on Ctrl-C twice ({state}):\n{}", screen());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let (tree_peak_rss, peak_rss) = sampler.stop();
        anyhow::ensure!(mock.arrivals().len() > before, "the TUI made no model request");
        Ok(TuiSample { peak_rss, tree_peak_rss })
    })();
    let _ = tmux(&["kill-server"]);
    result
}

/// `path` as UTF-8 (tmux takes strings).
fn path_str(path: &Path) -> anyhow::Result<&str> {
    path.to_str().with_context(|| format!("{} is not UTF-8", path.display()))
}

/// Runs `future` on the bench's runtime (the mock's server keeps running on its workers).
fn block<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Handle::current().block_on(future)
}
