//! `scripts/bench.sh long`: what long sessions cost, as tables (asserts nothing). Each section
//! runs on its own: `bench_long [attach|rss|all] [--quick]` (`--quick`: smaller sizes, to try the
//! bench itself).
//!
//! - attach: the time from a new client's `session/attach` to its first screen (the response
//!   decoded) on sessions of 1k, 10k and 100k events, p50/p99 over 50 attaches each, each on a
//!   new connection; the first attach of each session, which starts its actor (the log read
//!   whole to rebuild the conversation), is shown apart as "cold". Target: p50 ≤ 20 ms.
//! - rss: the real server process's VmRSS with 1,000 idle sessions of 500 steps each, after a
//!   client attached to each one once and left (their actors still alive), and again once the
//!   idle actors were evicted (`SESSION_IDLE` later). Target: ≤ 200 MiB.
//!
//! - load: the server's VmRSS and peak before and after the first turn of a session of
//!   1,000,000 events (100,000 with `--quick`) whose last compaction covers all but its last
//!   turn, loaded by a fresh server: the conversation is read from that compaction on.
//!
//! The sessions are written through the server's own store before it starts
//! ([`outboard_tests::long_session`]); the server is the real `outboard-server` process.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use outboard_tests::bench::percentile;
use outboard_tests::harness::{Api, TestServer, WsClient};
use outboard_tests::long_session;
use outboard_tests::mock_llm::MockLlm;
use serde_json::json;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// What long sessions cost: attach time to the first screen, and the server's RSS with many idle
/// sessions (tables; asserts nothing).
#[derive(clap::Parser)]
struct Args {
    /// Which section to run.
    #[arg(value_enum, default_value_t = Section::All)]
    section: Section,
    /// Smaller sizes, to try the bench itself.
    #[arg(long)]
    quick: bool,
}

#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
enum Section {
    Attach,
    Rss,
    Load,
    All,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Args { section, quick } = outboard_tests::bench::args(|_: &Args| Ok(()));
    if matches!(section, Section::Attach | Section::All) {
        attach(quick).await?;
    }
    if matches!(section, Section::Rss | Section::All) {
        rss(quick).await?;
    }
    if matches!(section, Section::Load | Section::All) {
        load(quick).await?;
    }
    Ok(())
}

/// Attaches this many times per session size.
const ATTACHES: usize = 50;

async fn attach(quick: bool) -> anyhow::Result<()> {
    let sizes: &[u64] = if quick { &[1_000, 10_000] } else { &[1_000, 10_000, 100_000] };
    let data = tempfile::tempdir()?;
    let store = long_session::open(data.path())?;
    let (owner, token) = long_session::user(&store, "alice", "acme").await?;
    let mut sessions = Vec::new();
    for &n in sizes {
        // Tool results of 1 KB, ten steps a turn: a coding session's shape.
        let (id, last) = long_session::seed(&store, &owner, n, 10, 1_000).await?;
        sessions.push((n, id.0, last));
    }
    drop(store);
    let mock = MockLlm::start(vec![]).await?;
    let server = TestServer::start_in(data, Api::Anthropic, &mock.anthropic_base_url(), &[])?;
    println!("attach to the first screen (a new client, the newest page of history)");
    println!(
        "{:>9} {:>8} {:>10} {:>10} {:>10} {:>11}",
        "events", "attaches", "cold ms", "p50 ms", "p99 ms", "frame KiB"
    );
    for (n, id, _last) in &sessions {
        let mut samples = Vec::with_capacity(ATTACHES);
        let mut frame = 0;
        for _ in 0..ATTACHES {
            let mut client = WsClient::connect(&server.url, &token).await?;
            let started = Instant::now();
            let snapshot = client
                .request("session/attach", json!({"session_id": id, "role": "watcher"}))
                .await?
                .map_err(|e| anyhow::anyhow!("attach: {}", e.message))?;
            let snapshot: outboard_shared::SessionAttachResponse =
                serde_json::from_value(snapshot)?;
            samples.push(started.elapsed());
            frame = client.last_frame_bytes;
            anyhow::ensure!(!snapshot.events.is_empty(), "an empty first page");
        }
        let cold = samples[0];
        let mut warm = samples[1..].to_vec();
        warm.sort();
        println!(
            "{:>9} {:>8} {:>10.1} {:>10.2} {:>10.2} {:>11.0}",
            n,
            ATTACHES,
            ms(cold),
            ms(percentile(&warm, 0.5)),
            ms(percentile(&warm, 0.99)),
            frame as f64 / 1024.0
        );
    }
    println!();
    Ok(())
}

async fn rss(quick: bool) -> anyhow::Result<()> {
    let (count, steps) = if quick { (100u64, 100u64) } else { (1_000, 500) };
    let data = tempfile::tempdir()?;
    let store = long_session::open(data.path())?;
    let (owner, token) = long_session::user(&store, "alice", "acme").await?;
    let seeding = Instant::now();
    let mut ids = Vec::new();
    for _ in 0..count {
        // Fifty steps a turn (ten turns), tool results of 500 bytes.
        let events = steps * long_session::EVENTS_PER_STEP + (steps / 50).max(1) * 4;
        let (id, _) = long_session::seed(&store, &owner, events, 50, 500).await?;
        ids.push(id.0);
    }
    drop(store);
    let seeded = seeding.elapsed();
    let mock = MockLlm::start(vec![]).await?;
    let server = TestServer::start_in(data, Api::Anthropic, &mock.anthropic_base_url(), &[])?;
    let pid = server.pid();
    let before = vm(pid, "VmRSS")?;
    let touching = Instant::now();
    for id in &ids {
        let mut client = WsClient::connect(&server.url, &token).await?;
        client
            .request("session/attach", json!({"session_id": id, "role": "watcher"}))
            .await?
            .map_err(|e| anyhow::anyhow!("attach: {}", e.message))?;
    }
    let touched = touching.elapsed();
    // The last connections' detaches reach the server in a moment; nothing else is running.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = vm(pid, "VmRSS")?;
    let peak = vm(pid, "VmHWM")?;
    // Actors with nobody attached stop after the idle time (`SESSION_IDLE`) and free their
    // conversations: the steady state of sessions nobody watches.
    tokio::time::sleep(outboard_server::config::SESSION_IDLE + Duration::from_secs(5)).await;
    let evicted = vm(pid, "VmRSS")?;
    println!("server memory with idle sessions (each attached once, then left)");
    println!(
        "{:>9} {:>7} {:>12} {:>12} {:>12} {:>14} {:>10} {:>10}",
        "sessions",
        "steps",
        "RSS start",
        "RSS after",
        "RSS peak",
        "RSS evicted",
        "seed s",
        "touch s"
    );
    println!(
        "{:>9} {:>7} {:>8.1} MiB {:>8.1} MiB {:>8.1} MiB {:>10.1} MiB {:>10.1} {:>10.1}",
        count,
        steps,
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        peak as f64 / 1024.0,
        evicted as f64 / 1024.0,
        seeded.as_secs_f64(),
        touched.as_secs_f64()
    );
    println!();
    Ok(())
}

async fn load(quick: bool) -> anyhow::Result<()> {
    let events: u64 = if quick { 100_000 } else { 1_000_000 };
    let data = tempfile::tempdir()?;
    let store = long_session::open(data.path())?;
    let (owner, token) = long_session::user(&store, "alice", "acme").await?;
    let seeding = Instant::now();
    let (session, last) = long_session::seed(&store, &owner, events, 8, 1_000).await?;
    long_session::compact(&store, &session, last, 8).await?;
    drop(store);
    let seeded = seeding.elapsed();
    let mock =
        MockLlm::start(vec![outboard_tests::mock_step::MockStep::text("Carried on.")]).await?;
    let server = TestServer::start_in(data, Api::Anthropic, &mock.anthropic_base_url(), &[])?;
    let pid = server.pid();
    let mut client = WsClient::connect(&server.url, &token).await?;
    client
        .request("session/attach", json!({"session_id": session.0, "role": "driver"}))
        .await?
        .map_err(|e| anyhow::anyhow!("attach: {}", e.message))?;
    let (before, peak_before) = (vm(pid, "VmRSS")?, vm(pid, "VmHWM")?);
    let started = Instant::now();
    client.turn(&session.0, "go on").await?;
    let turn = started.elapsed();
    let (after, peak) = (vm(pid, "VmRSS")?, vm(pid, "VmHWM")?);
    println!("the first turn after loading a long session (its last compaction covers all but its last turn)");
    println!(
        "{:>10} {:>12} {:>12} {:>12} {:>12} {:>10} {:>8}",
        "events", "RSS before", "RSS after", "peak before", "peak after", "turn s", "seed s"
    );
    println!(
        "{:>10} {:>8.1} MiB {:>8.1} MiB {:>8.1} MiB {:>8.1} MiB {:>10.2} {:>8.1}",
        last + 1,
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        peak_before as f64 / 1024.0,
        peak as f64 / 1024.0,
        turn.as_secs_f64(),
        seeded.as_secs_f64()
    );
    println!();
    Ok(())
}

/// A `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`).
fn vm(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .with_context(|| format!("no {field} in /proc/{pid}/status"))?;
    line.split_whitespace().nth(1).context("no value")?.parse().context("not a number")
}
