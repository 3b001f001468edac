//! `scripts/bench.sh sandbox`: the sandbox lifecycle on the real bubblewrap and cgroups, as
//! p50/p90/p99 tables. Prints, asserts nothing.
//!
//! - cold provision → first answer: the `running` transition after `provisioning` (spawn of
//!   `bwrap` to the agent's hello), and the whole first `exec("true")`;
//! - resume → first answer: the `running` transition after `suspended` (thaw + ping/pong);
//! - resume → first command completed: `exec("true")` on a frozen sandbox;
//! - a command with no suspend: `exec("true")` on a running sandbox;
//! - idle memory per sandbox over 100 frozen sandboxes (PSS of their processes, and the drop of
//!   the host's `MemAvailable`, which also counts kernel memory).

use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use outboard_server::sandbox::{Sandbox, SandboxConfig, SandboxTransition};
use outboard_shared::SandboxState;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const RUNS: usize = 100;
const T: Duration = Duration::from_secs(20);

fn pct(samples: &mut [f64], p: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i]
}

fn row(name: &str, samples: &mut [f64], unit: &str) {
    println!(
        "| {name:<44} | {:>9.3} | {:>9.3} | {:>9.3} | {unit} (n={}) |",
        pct(samples, 0.5),
        pct(samples, 0.9),
        pct(samples, 0.99),
        samples.len()
    );
}

async fn exec(sandbox: &Sandbox, cmd: &str) -> anyhow::Result<f64> {
    let start = Instant::now();
    let r = sandbox.exec(cmd, T, &mut |_, _| {}, CancellationToken::new()).await?;
    if r.exit_code != Some(0) {
        bail!("{cmd} failed: {r:?}");
    }
    Ok(start.elapsed().as_secs_f64() * 1000.0)
}

fn running_ms(rx: &mut mpsc::Receiver<SandboxTransition>) -> Option<f64> {
    let mut ms = None;
    while let Ok(t) = rx.try_recv() {
        if t.state == SandboxState::Running {
            ms = Some(t.ms);
        }
    }
    ms
}

async fn wait_state(sandbox: &Sandbox, state: SandboxState) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while sandbox.state().await != state {
        if Instant::now() > deadline {
            bail!("the sandbox did not reach {state:?}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

fn meminfo_available_kib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.strip_prefix("MemAvailable:")?.trim().split(' ').next()?.parse().ok()
            })
        })
        .unwrap_or(0)
}

/// PSS in KiB of `pid` and its parent (the agent and its `bwrap`).
fn pss_kib(pid: u32) -> u64 {
    let pss = |p: u32| -> u64 {
        std::fs::read_to_string(format!("/proc/{p}/smaps_rollup"))
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("Pss:")?.trim().split(' ').next()?.parse().ok())
            })
            .unwrap_or(0)
    };
    let parent = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().and_then(|s| {
        let rest = &s[s.rfind(')')? + 1..];
        rest.split_whitespace().nth(1)?.parse::<u32>().ok()
    });
    pss(pid) + parent.map_or(0, pss)
}

/// The sandbox lifecycle on the real bubblewrap and cgroups: start, exec, freeze, resume, memory
/// (p50/p90/p99 tables; asserts nothing). No arguments.
#[derive(clap::Parser)]
struct Args {}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    outboard_tests::bench::args::<Args>(|_| Ok(()));
    let config = SandboxConfig {
        agent_exe: Some(outboard_tests::bench::server_exe("sandbox")?),
        ..SandboxConfig::Bwrap
    };
    Sandbox::check(&config).await.context("while checking the sandbox")?;
    let ws = tempfile::tempdir()?;
    let ws_path = ws.path().to_path_buf();

    let (mut cold_answer, mut cold_exec) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let (tx, mut rx) = mpsc::channel(16);
        let sandbox = Sandbox::with_transitions(config.clone(), ws_path.clone(), tx);
        cold_exec.push(exec(&sandbox, "true").await?);
        cold_answer.push(running_ms(&mut rx).context("no running transition")?);
        sandbox.stop().await;
    }

    let freezing = SandboxConfig { idle_freeze: Duration::from_millis(10), ..config.clone() };
    let (tx, mut rx) = mpsc::channel(16);
    let sandbox = Sandbox::with_transitions(freezing, ws_path.clone(), tx);
    exec(&sandbox, "sleep 100000 & true").await?;
    let (mut resume_answer, mut resume_exec) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        wait_state(&sandbox, SandboxState::Suspended).await?;
        let _ = running_ms(&mut rx);
        resume_exec.push(exec(&sandbox, "true").await?);
        resume_answer.push(running_ms(&mut rx).context("no running transition after thaw")?);
    }
    sandbox.stop().await;

    let sandbox = Sandbox::new(config.clone(), ws_path.clone());
    exec(&sandbox, "true").await?;
    let mut warm = Vec::new();
    for _ in 0..RUNS {
        warm.push(exec(&sandbox, "true").await?);
    }
    sandbox.stop().await;

    let before = meminfo_available_kib();
    let mut sandboxes = Vec::new();
    for _ in 0..RUNS {
        let s = Sandbox::new(
            SandboxConfig { idle_freeze: Duration::from_millis(10), ..config.clone() },
            ws_path.clone(),
        );
        exec(&s, "true").await?;
        sandboxes.push(s);
    }
    let mut pss = Vec::new();
    for s in &sandboxes {
        wait_state(s, SandboxState::Suspended).await?;
        if let Some(pid) = s.pid().await {
            pss.push(pss_kib(pid) as f64 / 1024.0);
        }
    }
    let after = meminfo_available_kib();
    let per_sandbox_avail = before.saturating_sub(after) as f64 / 1024.0 / RUNS as f64;
    for s in &sandboxes {
        s.stop().await;
    }

    println!("sandbox lifecycle ({RUNS} runs each; bubblewrap + cgroup v1 freezer on this host)\n");
    println!("| {:<44} | {:>9} | {:>9} | {:>9} | unit |", "measure", "p50", "p90", "p99");
    println!("|{:-<46}|{:-<11}|{:-<11}|{:-<11}|------|", "", "", "", "");
    row("cold provision → first answer (hello)", &mut cold_answer, "ms");
    row("cold provision → first command completed", &mut cold_exec, "ms");
    row("resume (thaw) → first answer (pong)", &mut resume_answer, "ms");
    row("resume (thaw) → first command completed", &mut resume_exec, "ms");
    row("command, no suspend (`true`)", &mut warm, "ms");
    row("idle memory per frozen sandbox (PSS)", &mut pss, "MiB");
    println!("\nidle memory per frozen sandbox (host MemAvailable drop / {RUNS}): {per_sandbox_avail:.2} MiB");
    Ok(())
}
