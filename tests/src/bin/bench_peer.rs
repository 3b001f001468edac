//! `scripts/bench.sh peer`: `outboard run` beside Codex CLI (`codex exec`), each timed as a user
//! times it — a process started from the shell, spawn to exit — on the same scripted 21-call task
//! against the same mock model over real HTTP (issue #56, item 3). Nothing here asserts.
//!
//! Both speak the OpenAI Responses API to the mock (Outboard with `--provider responses`, Codex
//! through a `[model_providers.mock]` of its `config.toml` with `wire_api = "responses"`). The
//! task is five rounds of: write a file, `echo`, read it, edit it, then a final answer — with
//! Outboard's tools (`Write`, `Bash`, `Read`, `Edit`) and with Codex's (`exec_command` running
//! `printf >`, `echo`, `cat`, `sed -i`). Each tool runs with a cold data dir (a new `--data`, a
//! new `CODEX_HOME`, every run) and a warm one (one reused after a first run that is not counted).
//! The tools take turns within each round, so load on the machine falls on both alike.
//!
//! Codex is installed by `scripts/bench.sh peer` with npm into `target/peer/codex` (the
//! `@openai/codex` package and its native binary), or given with `--codex PATH`.
//!
//! Where the wall time goes: start → first model request; the steps (first request → last
//! request: the answers, the tools, the log); last request → exit (the last answer streamed, the
//! turn's end, what runs at exit).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context as _};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use outboard_tests::speed::{self, mb, median_p90, ms, Build};
use serde_json::json;

/// Rounds of the task (four tool calls each), then the answer: 21 model requests.
const ROUNDS: usize = 5;
/// The model id both send.
const MODEL: &str = "mock-model";

#[derive(clap::Parser)]
#[command(name = "bench_peer")]
struct Args {
    /// Runs per tool and data-dir state in each round.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Rounds; each runs every tool's samples once, tools in turn.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// The `outboard` build to time, `LABEL=DIR` (default: the binaries beside this bench).
    #[arg(long = "build", value_name = "LABEL=DIR", value_parser = Build::parse)]
    builds: Vec<Build>,
    /// Codex's `codex` executable (`node_modules/.bin/codex`).
    #[arg(long)]
    codex: Option<PathBuf>,
}

/// Who runs the task.
#[derive(Clone)]
enum Tool {
    Outboard(Build),
    Codex(PathBuf),
}

impl Tool {
    fn label(&self) -> String {
        match self {
            Tool::Outboard(b) => format!("outboard ({})", b.label),
            Tool::Codex(_) => "codex exec".into(),
        }
    }
}

/// One timed run.
struct Sample {
    wall: Duration,
    first: Duration,
    steps: Duration,
    gaps: Vec<Duration>,
    exit: Duration,
    peak_tree: u64,
}

fn outboard_script() -> Vec<MockStep> {
    let mut steps = Vec::new();
    for r in 0..ROUNDS {
        let path = format!("notes{r}.txt");
        let content = format!("round {r}: draft\nsecond line\n");
        steps.push(MockStep::tool_call("Write", json!({"file_path": path, "content": content})));
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

fn codex_script() -> Vec<MockStep> {
    let exec = |cmd: String| MockStep::tool_call("exec_command", json!({ "cmd": cmd }));
    let mut steps = Vec::new();
    for r in 0..ROUNDS {
        steps.push(exec(format!("printf 'round {r}: draft\\nsecond line\\n' > notes{r}.txt")));
        steps.push(exec(format!("echo round {r}")));
        steps.push(exec(format!("cat notes{r}.txt")));
        steps.push(exec(format!("sed -i 's/draft/final/' notes{r}.txt")));
    }
    steps.push(MockStep::text("All five notes are written, checked and final."));
    steps
}

/// One run of the task by `tool` with its state in `data` (kept between warm runs).
fn run(tool: &Tool, data: &Path) -> anyhow::Result<Sample> {
    let home = tempfile::tempdir()?;
    let work = home.path().join("project");
    std::fs::create_dir(&work)?;
    let script = match tool {
        Tool::Outboard(_) => outboard_script(),
        Tool::Codex(_) => codex_script(),
    };
    let mock = block(MockLlm::start(script))?;
    let base = mock.responses_base_url();
    let cmd = match tool {
        Tool::Outboard(build) => {
            let env = [("OPENAI_API_KEY", "sk-bench"), ("OUTBOARD_CONTEXT_WINDOW", "200000")];
            let mut cmd = speed::command(build, "outboard", home.path(), &env)?;
            cmd.args(["run", "--provider", "responses", "--base-url", &base, "--model", MODEL]);
            cmd.arg("--data").arg(data).arg("--workspace").arg(&work);
            cmd.arg("write the five notes");
            cmd
        }
        Tool::Codex(codex) => {
            std::fs::write(
                data.join("config.toml"),
                format!(
                    "model = \"{MODEL}\"\nmodel_provider = \"mock\"\napproval_policy = \"never\"\n\
                     sandbox_mode = \"danger-full-access\"\n\n[model_providers.mock]\n\
                     name = \"mock\"\nbase_url = \"{base}\"\nwire_api = \"responses\"\n\
                     env_key = \"MOCK_KEY\"\n"
                ),
            )?;
            let stderr = std::fs::File::create(home.path().join("codex.stderr"))?;
            let mut cmd = std::process::Command::new(codex);
            cmd.env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("HOME", home.path())
                .env("USER", "bench")
                .env("CODEX_HOME", data)
                .env("MOCK_KEY", "sk-bench")
                .current_dir(&work)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(stderr);
            cmd.args(["exec", "--skip-git-repo-check", "write the five notes"]);
            cmd
        }
    };
    let reaped = speed::run(cmd)?;
    let arrivals = mock.arrivals();
    let calls = ROUNDS * 4 + 1;
    if reaped.code != 0 || arrivals.len() != calls {
        let bin = if matches!(tool, Tool::Codex(_)) { "codex" } else { "outboard" };
        bail!(
            "{} exited with {} after {} model requests (want {calls}): {}",
            tool.label(),
            reaped.code,
            arrivals.len(),
            speed::stderr_of(home.path(), bin)
        );
    }
    let final_text = std::fs::read_to_string(work.join("notes4.txt")).unwrap_or_default();
    if !final_text.starts_with("round 4: final") {
        bail!("{}: the task's last file is {final_text:?}", tool.label());
    }
    let (first, last) = (arrivals[0], arrivals[calls - 1]);
    Ok(Sample {
        wall: reaped.ended - reaped.spawned,
        first: first.saturating_duration_since(reaped.spawned),
        steps: last - first,
        gaps: arrivals.windows(2).map(|w| w[1] - w[0]).collect(),
        exit: reaped.ended.saturating_duration_since(last),
        peak_tree: reaped.tree_peak_rss,
    })
}

fn main() -> anyhow::Result<()> {
    let args = outboard_tests::bench::args::<Args>(|_| Ok(()));
    let runtime = tokio::runtime::Runtime::new()?;
    let _guard = runtime.enter();
    let mut tools: Vec<Tool> = if args.builds.is_empty() {
        vec![Tool::Outboard(Build::beside_bench().map_err(anyhow::Error::msg)?)]
    } else {
        args.builds.iter().cloned().map(Tool::Outboard).collect()
    };
    if let Some(codex) = &args.codex {
        tools.push(Tool::Codex(codex.clone()));
    }
    // (tool, warm) → samples.
    let mut samples: Vec<Vec<Sample>> = (0..tools.len() * 2).map(|_| Vec::new()).collect();
    for _ in 0..args.rounds {
        for (t, tool) in tools.iter().enumerate() {
            for _ in 0..args.runs {
                let cold = tempfile::tempdir()?;
                samples[t * 2].push(run(tool, cold.path()).context("cold run")?);
            }
            let warm = tempfile::tempdir()?;
            run(tool, warm.path()).context("warming run")?;
            for _ in 0..args.runs {
                samples[t * 2 + 1].push(run(tool, warm.path()).context("warm run")?);
            }
        }
    }
    println!("## The 21-call task, `outboard run` beside `codex exec` (mock model, Responses API)");
    println!();
    println!("{} runs per tool and data-dir state in each of {} round(s), tools in turn; medians (gaps: over every gap of every run). Wall: the process from spawn to exit, as a shell times it. Steps: first model request to last. Exit: last model request to the process's exit (the last answer streamed, the turn's end, teardown). RSS: the largest sum over the process tree at one 5 ms sample.", args.runs, args.rounds);
    println!();
    println!("| tool | data dir | wall (ms) | start → first request (ms) | steps (ms) | gap p50 (ms) | gap p90 (ms) | last request → exit (ms) | peak RSS, tree (MB) |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut walls = Vec::new();
    for (t, tool) in tools.iter().enumerate() {
        for warm in [false, true] {
            let s = &samples[t * 2 + usize::from(warm)];
            let median = |f: &dyn Fn(&Sample) -> Duration| {
                median_p90(&mut s.iter().map(f).collect::<Vec<_>>()).0
            };
            let (gap, gap90) =
                median_p90(&mut s.iter().flat_map(|s| s.gaps.clone()).collect::<Vec<_>>());
            let wall = median(&|s| s.wall);
            walls.push((tool.label(), warm, wall));
            println!(
                "| {} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {:.1} | {:.1} |",
                tool.label(),
                if warm { "warm" } else { "cold" },
                ms(wall),
                ms(median(&|s| s.first)),
                ms(median(&|s| s.steps)),
                ms(gap),
                ms(gap90),
                ms(median(&|s| s.exit)),
                mb(speed::median_bytes(s.iter().map(|s| s.peak_tree))),
            );
        }
    }
    if let Some((_, _, codex_cold)) = walls.iter().find(|(l, w, _)| l == "codex exec" && !w) {
        let codex_warm = walls.iter().find(|(l, w, _)| l == "codex exec" && *w).map(|w| w.2);
        println!();
        for (label, warm, wall) in walls.iter().filter(|(l, ..)| l != "codex exec") {
            let codex = if *warm { codex_warm.unwrap_or(*codex_cold) } else { *codex_cold };
            let state = if *warm { "warm" } else { "cold" };
            println!(
                "- {label}, {state}: {:.1}× Codex's wall time",
                codex.as_secs_f64() / wall.as_secs_f64().max(1e-9)
            );
        }
    }
    println!();
    Ok(())
}

fn block<T>(future: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Handle::current().block_on(future)
}
