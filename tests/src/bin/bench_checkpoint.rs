//! Checkpoints and rewinds on a large workspace (issue #38, item 2): prints what a checkpoint
//! (the in-process snapshot before each prompt into the session's shadow repository, issue 49)
//! and a rewind's restore cost on a workspace of [`FILES`] files, asserts nothing.
//!
//! The fixture: [`FILES`] files of about 1 KiB of code-like text over [`DIRS`] directories, in a
//! temp dir on the working directory's disk (a tmpfs would flatter every number), worked on
//! by `outboard_server::sources::Sources` exactly as a session's actor does.
//!
//! Measured, each over `--runs N` runs (default 21; p50 and max printed):
//! - the first checkpoint (every file hashed: paid once, by the first prompt);
//! - a checkpoint after [`CHANGED`] files changed (the stat cache reused: the case of every
//!   later prompt);
//! - a checkpoint with nothing changed;
//! - a rewind's restore of those [`CHANGED`] files (snapshot, crash record, checkout).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use outboard_server::sources::Sources;
use outboard_shared::SessionId;

/// Files in the workspace.
const FILES: usize = 10_000;
/// Directories they are spread over.
const DIRS: usize = 100;
/// Files a prompt changes between two checkpoints.
const CHANGED: usize = 10;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let runs = runs_arg()?;
    let here = std::env::current_dir()?;
    let data = tempfile::Builder::new().prefix("bench-checkpoint-").tempdir_in(&here)?;
    let sources = Sources::new(data.path(), None);
    let session = SessionId("s_bench".into());
    let ws = data.path().join("workspaces").join(session.as_str());
    fill(&ws)?;

    let started = Instant::now();
    let first = sources.checkpoint(&session, &ws).await?;
    let cold = started.elapsed();

    let (mut changed, mut unchanged, mut restore) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        change(&ws, run)?;
        let started = Instant::now();
        let tree = sources.checkpoint(&session, &ws).await?;
        changed.push(started.elapsed());
        let started = Instant::now();
        sources.checkpoint(&session, &ws).await?;
        unchanged.push(started.elapsed());
        // Back to the first checkpoint, then forward again, each a rewind's restore.
        change(&ws, run + runs)?;
        let started = Instant::now();
        sources.restore(&session, &ws, &tree, 1).await?;
        restore.push(started.elapsed());
        sources.rewind_done(&session);
        anyhow::ensure!(sources.checkpoint(&session, &ws).await? == tree, "restore was not exact");
    }
    anyhow::ensure!(first.len() == 40, "no tree");
    println!("| {FILES} files, {runs} runs | p50 | max |\n|---|---|---|");
    println!("| first checkpoint (every file hashed) | {} | |", ms(cold));
    row(&format!("checkpoint, {CHANGED} files changed"), &mut changed);
    row("checkpoint, nothing changed", &mut unchanged);
    row(&format!("rewind's restore of {CHANGED} changed files"), &mut restore);
    Ok(())
}

fn runs_arg() -> anyhow::Result<usize> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == "--runs") {
        Some(i) => Ok(args.get(i + 1).context("--runs N")?.parse()?),
        None => Ok(21),
    }
}

/// [`FILES`] files of about 1 KiB each over [`DIRS`] directories.
fn fill(ws: &Path) -> anyhow::Result<()> {
    for i in 0..FILES {
        let dir = ws.join(format!("src/m{:03}", i % DIRS));
        std::fs::create_dir_all(&dir)?;
        let line = format!("fn f{i}(x: u64) -> u64 {{ x.wrapping_mul({i}).rotate_left(7) }}\n");
        std::fs::write(dir.join(format!("f{i}.rs")), line.repeat(1024 / line.len() + 1))?;
    }
    Ok(())
}

/// Changes [`CHANGED`] files, different ones each `run`.
fn change(ws: &Path, run: usize) -> anyhow::Result<()> {
    for k in 0..CHANGED {
        let i = (run * CHANGED + k) * 97 % FILES;
        let path = ws.join(format!("src/m{:03}/f{i}.rs", i % DIRS));
        std::fs::write(path, format!("// run {run}\n"))?;
    }
    Ok(())
}

fn row(what: &str, times: &mut [Duration]) {
    times.sort();
    let p50 = times[times.len() / 2];
    let max = times[times.len() - 1];
    println!("| {what} | {} | {} |", ms(p50), ms(max));
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}
