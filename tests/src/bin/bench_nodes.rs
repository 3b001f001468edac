//! Several server nodes on one PostgreSQL (`scripts/bench.sh nodes [--kills N] [--sessions N]
//! [--only checkpoint|takeover|fanout|throughput]`):
//!
//! - `checkpoint`: one durable event appended and committed, SQLite vs PostgreSQL (the latter
//!   with the lease's fencing check in the same transaction), p50/p99.
//! - `takeover`: a node killed with SIGKILL in the middle of a turn; the time until another
//!   node asks the model again for that turn (it took the lease over and resumed), p50/p99 over
//!   the kills, against the target of lease + 1 s.
//! - `fanout`: how late each durable event of a busy session reaches a watcher on the node that
//!   runs it and one on another node (through the relay), from the event's timestamp, and the
//!   other node's extra time over the same node's per event.
//! - `throughput`: steps per second of many concurrent mock sessions (each step a cheap tool
//!   call) on 1 node and on 3 nodes of one store.
//!
//! Real `outboard-server` processes (the release build beside this binary), the test run's
//! PostgreSQL cluster. Nothing here asserts: the numbers are for people.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outboard_server::store::{Durability, Store, StoreSpec};
use outboard_shared::{EventKind, SessionEvent};
use outboard_tests::bench::{percentile, us};
use outboard_tests::harness::{Api, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use outboard_tests::nodes::Cluster;
use serde_json::json;

const CHECKPOINTS: usize = 2000;
const LEASE_SECS: u64 = 2;
const STEPS: usize = 10;

/// Several server nodes on one PostgreSQL: checkpoint cost, takeover after SIGKILL, fan-out to
/// watchers, steps/s on 1 vs 3 nodes (tables; asserts nothing).
#[derive(clap::Parser)]
struct Args {
    /// Nodes killed mid-turn in `takeover`.
    #[arg(long, default_value_t = 20)]
    kills: usize,
    /// Concurrent sessions in `throughput`.
    #[arg(long, default_value_t = 200)]
    sessions: usize,
    /// Runs only this one.
    #[arg(long, value_enum)]
    only: Option<Part>,
}

#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
enum Part {
    Checkpoint,
    Takeover,
    Fanout,
    Throughput,
}

fn main() -> anyhow::Result<()> {
    let Args { kills, sessions, only } = outboard_tests::bench::args(|a: &Args| {
        if a.kills == 0 || a.sessions == 0 {
            return Err("--kills and --sessions must be above zero".into());
        }
        Ok(())
    });
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let runs = |part: Part| only.is_none_or(|o| o == part);
    rt.block_on(async {
        if runs(Part::Checkpoint) {
            checkpoint().await?;
        }
        if runs(Part::Takeover) {
            takeover(kills).await?;
        }
        if runs(Part::Fanout) {
            fanout().await?;
        }
        if runs(Part::Throughput) {
            throughput(sessions).await?;
        }
        Ok(())
    })
}

fn event(session: &outboard_shared::SessionId, seq: u64) -> SessionEvent {
    SessionEvent {
        session_id: session.clone(),
        seq,
        ts: "2026-12-03T00:00:00.000Z".into(),
        kind: EventKind::ToolResult {
            call_id: format!("call_{seq}"),
            name: "Bash".into(),
            output: "x".repeat(400),
            is_error: false,
            duration_ms: 3,
            attachments: Vec::new(),
        },
        parent: None,
    }
}

async fn checkpoint() -> anyhow::Result<()> {
    println!(
        "## Checkpoint cost: one durable event appended and committed ({CHECKPOINTS} appends)"
    );
    println!();
    println!("| store | p50 (µs) | p99 (µs) | max (µs) |");
    println!("|---|---|---|---|");
    let dir = tempfile::tempdir_in(".")?;
    let pg = outboard_server::store::pgtest::fresh_url().map_err(anyhow::Error::msg)?;
    for (label, spec, leased) in [
        (
            "SQLite, WAL, synchronous=NORMAL",
            StoreSpec::Sqlite(dir.path().join("outboard.db")),
            false,
        ),
        ("PostgreSQL 1 node, no lease", StoreSpec::Postgres { url: pg.clone(), pool: 4 }, false),
        ("PostgreSQL, leased (fencing check)", StoreSpec::Postgres { url: pg, pool: 4 }, true),
    ] {
        let store = Store::open_spec(&spec, Durability::Normal, None)?;
        let (user, _) = store.add_user(&format!("bench{leased}"), "bench").await?;
        let session = store.create_session(&user, "bench", "mock/bench").await?;
        if leased {
            store
                .acquire_lease(&session.id)
                .await?
                .map_err(|h| anyhow::anyhow!("held by {}", h.node))?;
        }
        let mut times = Vec::with_capacity(CHECKPOINTS);
        for seq in 1..=CHECKPOINTS as u64 {
            let t = Instant::now();
            store.append_event(event(&session.id, seq)).await?;
            times.push(t.elapsed());
        }
        times.sort();
        println!(
            "| {label} | {:.0} | {:.0} | {:.0} |",
            us(percentile(&times, 0.5)),
            us(percentile(&times, 0.99)),
            us(*times.last().unwrap_or(&Duration::ZERO)),
        );
    }
    println!();
    Ok(())
}

async fn takeover(kills: usize) -> anyhow::Result<()> {
    // One round at a time: a turn's first request never answers in time (its node is killed
    // meanwhile); the time of the next one is when the turn resumed on another node.
    let seen: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let log = seen.clone();
    let mock = MockLlm::start_responder(move |_| {
        let mut calls = log.lock().ok()?;
        calls.push(Instant::now());
        Some(if calls.len() % 2 == 1 {
            MockStep::text("never seen").latency(60_000)
        } else {
            MockStep::text("resumed")
        })
    })
    .await?;
    let cluster = Cluster::new(Api::Anthropic, &mock.anthropic_base_url(), LEASE_SECS)?;
    let mut nodes = vec![cluster.start()?, cluster.start()?];
    let token = nodes[0].add_user("bench", "bench")?;
    let mut times = Vec::new();
    let mut missed = 0;
    for round in 0..kills {
        let victim = round % 2;
        let mut c = WsClient::connect(&nodes[victim].url, &token).await?;
        let sid = c.new_session().await?;
        c.request("turn/send", json!({"session_id": sid, "text": "go"}))
            .await?
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let first = Instant::now() + Duration::from_secs(10);
        while seen.lock().map(|s| s.len()).unwrap_or(0) < 2 * round + 1 {
            anyhow::ensure!(Instant::now() < first, "the turn never asked the model");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        drop(c);
        let data = nodes.remove(victim).kill().ok_or_else(|| anyhow::anyhow!("no data dir"))?;
        let killed = Instant::now();
        let give_up = killed + Duration::from_secs(LEASE_SECS * 5 + 10);
        let resumed = loop {
            let at = seen.lock().ok().and_then(|s| s.get(2 * round + 1).copied());
            if let Some(at) = at {
                break Some(at);
            }
            if Instant::now() > give_up {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        };
        match resumed {
            Some(at) => times.push(at.saturating_duration_since(killed)),
            None => missed += 1,
        }
        nodes.insert(victim, cluster.start_in(data)?);
    }
    times.sort();
    println!("## Takeover after SIGKILL ({kills} kills, lease {LEASE_SECS} s, 2 nodes)");
    println!();
    println!("From the kill to the resumed turn's model request on the other node.");
    println!();
    println!("| p50 (ms) | p99 (ms) | max (ms) | target (ms) | not resumed |");
    println!("|---|---|---|---|---|");
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "| {:.0} | {:.0} | {:.0} | {} | {missed} |",
        ms(percentile(&times, 0.5)),
        ms(percentile(&times, 0.99)),
        ms(*times.last().unwrap_or(&Duration::ZERO)),
        LEASE_SECS * 1000 + 1000,
    );
    println!();
    Ok(())
}

/// Milliseconds since midnight UTC of an event timestamp (`…THH:MM:SS.mmmZ`) and of now.
fn ms_of_day(ts: &str) -> Option<f64> {
    let time = ts.split('T').nth(1)?.trim_end_matches('Z');
    let mut parts = time.split(':');
    let h: f64 = parts.next()?.parse().ok()?;
    let m: f64 = parts.next()?.parse().ok()?;
    let s: f64 = parts.next()?.parse().ok()?;
    Some(((h * 60.0 + m) * 60.0 + s) * 1000.0)
}

fn now_ms_of_day() -> f64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64();
    (now % 86_400.0) * 1000.0
}

const FANOUT_STEPS: usize = 40;

/// The `p` quantile (0..1) of sorted values.
fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn fanout() -> anyhow::Result<()> {
    let mock = MockLlm::start_responder(|body| {
        let results = body.to_string().matches("\"tool_result\"").count();
        Some(if results < FANOUT_STEPS {
            MockStep::tool_call("Glob", json!({"pattern": "*.txt"})).latency(20)
        } else {
            MockStep::text("done")
        })
    })
    .await?;
    let cluster = Cluster::new(Api::Anthropic, &mock.anthropic_base_url(), 10)?;
    let a = cluster.start()?;
    let b = cluster.start()?;
    let token = a.add_user("bench", "bench")?;
    let mut driver = WsClient::connect(&a.url, &token).await?;
    let sid = driver.new_session().await?;
    let watch = |url: String, token: String, sid: String| async move {
        let mut c = WsClient::connect(&url, &token).await?;
        c.request("session/attach", json!({"session_id": sid, "role": "watcher"}))
            .await?
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut seen: Vec<(u64, f64, Instant)> = Vec::new();
        loop {
            let e = c.event().await?;
            if !e.kind.is_durable() {
                continue;
            }
            let late = ms_of_day(&e.ts).map_or(0.0, |ts| now_ms_of_day() - ts);
            seen.push((e.seq, late, Instant::now()));
            if matches!(e.kind, EventKind::TurnCompleted { .. }) {
                return anyhow::Ok(seen);
            }
        }
    };
    let here = tokio::spawn(watch(a.url.clone(), token.clone(), sid.clone()));
    let there = tokio::spawn(watch(b.url.clone(), token.clone(), sid.clone()));
    tokio::time::sleep(Duration::from_millis(500)).await;
    driver.completed_turn(&sid, "go", Duration::from_secs(300)).await?;
    let here = here.await??;
    let there = there.await??;
    let lateness = |seen: &[(u64, f64, Instant)]| {
        let mut v: Vec<f64> = seen.iter().map(|s| s.1.max(0.0)).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let mut extra: Vec<f64> = there
        .iter()
        .filter_map(|(seq, _, at)| {
            let (_, _, here_at) = here.iter().find(|h| h.0 == *seq)?;
            Some(at.saturating_duration_since(*here_at).as_secs_f64() * 1e6)
        })
        .collect();
    extra.sort_by(f64::total_cmp);
    println!("## Event fan-out: one session on node A, {FANOUT_STEPS} steps, a watcher on A and one on B");
    println!();
    println!("From the event's timestamp (ms resolution) to its arrival at the watcher; \"extra\" is B's arrival minus A's for the same event.");
    println!();
    println!("| watcher | events | p50 (ms) | p99 (ms) | max (ms) |");
    println!("|---|---|---|---|---|");
    for (name, seen) in [("same node (A)", &here), ("other node (B, relayed)", &there)] {
        let v = lateness(seen);
        println!(
            "| {name} | {} | {:.1} | {:.1} | {:.1} |",
            v.len(),
            pct(&v, 0.5),
            pct(&v, 0.99),
            v.last().copied().unwrap_or(0.0)
        );
    }
    println!();
    println!(
        "extra on B: p50 {:.0} µs, p99 {:.0} µs, max {:.0} µs",
        pct(&extra, 0.5),
        pct(&extra, 0.99),
        extra.last().copied().unwrap_or(0.0)
    );
    println!();
    Ok(())
}

async fn throughput(sessions: usize) -> anyhow::Result<()> {
    println!("## Steps per second: {sessions} concurrent sessions, {STEPS} steps each (Glob), mock LLM with zero latency");
    println!();
    println!("| nodes | wall (s) | steps/s |");
    println!("|---|---|---|");
    for n in [1usize, 3] {
        let mock = MockLlm::start_responder(|body| {
            let results = body.to_string().matches("\"tool_result\"").count();
            Some(if results + 1 < STEPS {
                MockStep::tool_call("Glob", json!({"pattern": "*.txt"}))
            } else {
                MockStep::text("done")
            })
        })
        .await?;
        // Every session's client connects from 127.0.0.1.
        let cluster = Cluster::new(Api::Anthropic, &mock.anthropic_base_url(), 10)?
            .with_flags(&["--max-connections-per-ip", "4096"]);
        let nodes: Vec<_> = (0..n).map(|_| cluster.start()).collect::<Result<_, _>>()?;
        let token = nodes[0].add_user("bench", "bench")?;
        for (quota, value) in [("sessions_per_hour", "100000"), ("live_sandboxes", "1000")] {
            let (code, out, err) =
                nodes[0].admin(&["quota", "set", "--org", "bench", quota, value], None)?;
            anyhow::ensure!(code == 0, "quota set {quota}: {out}{err}");
        }
        let mut clients = Vec::new();
        for i in 0..sessions {
            let mut c = WsClient::connect(&nodes[i % n].url, &token).await?;
            let sid = c.new_session().await?;
            clients.push((c, sid));
        }
        let t = Instant::now();
        let turns = clients.into_iter().map(|(mut c, sid)| async move {
            c.completed_turn(&sid, "go", Duration::from_secs(600)).await.map(|_| ())
        });
        for done in futures_util::future::join_all(turns).await {
            done?;
        }
        let wall = t.elapsed();
        println!(
            "| {n} | {:.2} | {:.0} |",
            wall.as_secs_f64(),
            (sessions * STEPS) as f64 / wall.as_secs_f64()
        );
    }
    println!();
    Ok(())
}
