//! Benchmarks that print tables (run with `scripts/bench.sh [harness|durable|all]`).
//!
//! - `harness`: the harness's own overhead per step. One long turn against the mock LLM with zero
//!   latency, each step a cheap tool call, through the real server (in-process `launch`) and a
//!   real WebSocket client. Overhead per step = (turn wall time − model time − tool time) /
//!   steps, model and tool time as the server's own metrics measured them in the turn; the
//!   mock's round trip for a call of average size, measured alone, is shown beside it.
//! - `durable`: the cost of one checkpoint (a durable event appended and committed) under each
//!   SQLite durability setting, p50/p99 over many appends.
//!
//! Nothing here asserts: the numbers are for people (and closing notes).

use outboard_tests::bench::{percentile, sandbox_config, us, BenchSession};
use std::time::{Duration, Instant};

use outboard_server::llm::{ContentBlock, Message, ModelRequest, Provider, Role};
use outboard_server::store::{Durability, Store};
use outboard_server::{Limits, ServerConfig};
use outboard_shared::{EventKind, SessionEvent};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use serde_json::json;

const STEPS: usize = 200;
const RUNS: usize = 3;
const CHECKPOINTS: usize = 2000;

/// The harness's own overhead per step, and the cost of a checkpoint under each SQLite
/// durability setting (tables; asserts nothing).
#[derive(clap::Parser)]
struct Args {
    /// Which benchmark to run.
    #[arg(value_enum, default_value_t = Which::All)]
    which: Which,
}

#[derive(Clone, Copy, PartialEq, clap::ValueEnum)]
enum Which {
    Harness,
    Durable,
    All,
}

fn main() -> anyhow::Result<()> {
    let which = outboard_tests::bench::args(|_: &Args| Ok(())).which;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    if which != Which::Durable {
        rt.block_on(harness())?;
    }
    if which != Which::Harness {
        rt.block_on(durable())?;
    }
    Ok(())
}

async fn harness() -> anyhow::Result<()> {
    println!("## Harness overhead per step ({STEPS} steps per turn, {RUNS} turns, mock LLM with zero latency)");
    println!();
    println!("Model and tool time are the server's own figures for the turn (the sums of its `outboard_model_request_duration_seconds` and `outboard_tool_call_duration_seconds`); the overhead is what is left of a step: the loop, the log's commits, the events to the client.");
    println!();
    println!("| provider | turn wall (ms) | model calls (ms) | tools (ms) | per step, all (µs) | model call, in the turn (µs) | model call of average size, alone (µs) | harness overhead per step (µs) |");
    println!("|---|---|---|---|---|---|---|---|");
    for api in ["anthropic", "openai", "responses"] {
        let alone = mock_call_cost(api).await?;
        let mut turns = Vec::new();
        for _ in 0..RUNS {
            turns.push(one_long_turn(api).await?);
        }
        turns.sort_by_key(|t| t.overhead());
        let median = &turns[turns.len() / 2];
        let per_step = |d: Duration| d / STEPS as u32;
        println!(
            "| {api} | {:.1} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} | {:.0} |",
            median.wall.as_secs_f64() * 1e3,
            median.model.as_secs_f64() * 1e3,
            median.tools.as_secs_f64() * 1e3,
            us(per_step(median.wall)),
            us(per_step(median.model)),
            us(alone),
            us(per_step(median.overhead())),
        );
    }
    println!();
    Ok(())
}

/// One benchmark turn's times.
struct TurnTimes {
    wall: Duration,
    /// Summed wall time of its model calls, as the server measured them.
    model: Duration,
    /// Summed wall time of its tool calls, as the server measured them.
    tools: Duration,
}

impl TurnTimes {
    fn overhead(&self) -> Duration {
        self.wall.saturating_sub(self.model).saturating_sub(self.tools)
    }
}

fn steps() -> Vec<MockStep> {
    let mut steps: Vec<MockStep> =
        (0..STEPS - 1).map(|_| MockStep::tool_call("Glob", json!({"pattern": "*.txt"}))).collect();
    steps.push(MockStep::text("done"));
    steps
}

/// One turn of `STEPS` steps through the real server, with the server's model and tool time.
async fn one_long_turn(api: &str) -> anyhow::Result<TurnTimes> {
    let mock = MockLlm::start(steps()).await?;
    // A window the turn never fills: the bench measures a step, and a compaction (a model call
    // the script has no answer for) is not one. `bench long` measures compaction.
    let limits = Limits {
        max_steps: STEPS as u32 + 1,
        context_window: Some(10_000_000),
        ..Limits::default()
    };
    let BenchSession { server, mut client, session: sid, .. } =
        BenchSession::start(api, &mock, limits).await?;
    let metrics = server.serve_metrics(tokio::net::TcpListener::bind("127.0.0.1:0").await?)?;
    let started = Instant::now();
    client
        .request("turn/send", json!({"session_id": sid, "text": "go"}))
        .await?
        .map_err(anyhow::Error::msg)?;
    let events = client
        .events_until(|e| {
            matches!(e.kind, EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. })
        })
        .await?;
    let wall = started.elapsed();
    if let Some(EventKind::TurnFailed { error, .. }) = events.last().map(|e| &e.kind) {
        anyhow::bail!("the benchmark turn failed: {error}");
    }
    let text = reqwest::get(format!("http://{metrics}/metrics")).await?.text().await?;
    let times = TurnTimes {
        wall,
        model: metric_sum(&text, "outboard_model_request_duration_seconds_sum")?,
        tools: metric_sum(&text, "outboard_tool_call_duration_seconds_sum")?,
    };
    server.shutdown().await;
    Ok(times)
}

/// The sum over every label set of the Prometheus sample `name` in `text`, as a duration.
fn metric_sum(text: &str, name: &str) -> anyhow::Result<Duration> {
    let mut found = false;
    let mut sum = 0.0;
    for line in text.lines().filter(|l| l.starts_with(name)) {
        let rest = &line[name.len()..];
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        let value = line.rsplit(' ').next().unwrap_or_default();
        sum += value.parse::<f64>().map_err(|e| anyhow::anyhow!("{line:?}: {e}"))?;
        found = true;
    }
    anyhow::ensure!(found, "the server's metrics have no {name}");
    Ok(Duration::from_secs_f64(sum))
}

/// The mock's HTTP round trip for one model call of the turn's average size, measured without the
/// harness: the conversation grows by a tool call and its result per step, so a step's request
/// carries on average `STEPS / 2` of them (serialised, sent, parsed by the mock). That is model
/// time, not harness time.
async fn mock_call_cost(api: &str) -> anyhow::Result<Duration> {
    let n = 200;
    let mock = MockLlm::start(
        (0..n).map(|_| MockStep::tool_call("Glob", json!({"pattern": "*.txt"}))).collect(),
    )
    .await?;
    let base = if api == "anthropic" { mock.anthropic_base_url() } else { mock.openai_base_url() };
    let mut llm = outboard_server::config::llm_config(Some(api), Some(&base), Some("bench"))?;
    llm.api_key = Some(outboard_server::Secret::new("bench-key"));
    let provider = Provider::new(llm)?;
    let mut messages =
        vec![Message { role: Role::User, content: vec![ContentBlock::Text("go".into())] }];
    for i in 0..STEPS / 2 {
        let id = format!("toolu_{i}");
        messages.push(Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: id.clone(),
                name: "Glob".into(),
                input: json!({"pattern": "*.txt"}),
            }],
        });
        messages.push(Message {
            role: Role::User,
            content: vec![ContentBlock::ToolResult {
                tool_use_id: id,
                content: "No files found".into(),
                is_error: false,
            }],
        });
    }
    let system = outboard_server::agent::system_prompt();
    let tools = outboard_server::tools::specs();
    let request = ModelRequest {
        system: &system,
        messages: &messages,
        tools: &tools,
        max_tokens: None,
        forbid_tools: false,
    };
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        provider.complete(&request, &mut |_| {}).await?;
        times.push(t.elapsed());
    }
    times.sort();
    Ok(percentile(&times, 0.5))
}

async fn durable() -> anyhow::Result<()> {
    println!(
        "## Checkpoint cost: one durable event appended and committed ({CHECKPOINTS} appends)"
    );
    println!();
    println!("| durability | guarantee | p50 (µs) | p99 (µs) | max (µs) |");
    println!("|---|---|---|---|---|");
    for (durability, label, guarantee) in [
        (Durability::Normal, "WAL, synchronous=NORMAL (default)", "survives a process crash"),
        (Durability::Full, "WAL, synchronous=FULL", "survives power loss"),
    ] {
        // On the real disk (not a tmpfs), where fsync costs what it costs.
        let dir = tempfile::tempdir_in(".")?;
        let store = Store::open(&dir.path().join("outboard.db"), durability)?;
        let (user, _) = store.add_user("bench", "bench").await?;
        let session = store.create_session(&user, "bench", "mock/bench").await?;
        let mut times = Vec::with_capacity(CHECKPOINTS);
        for seq in 1..=CHECKPOINTS as u64 {
            let event = SessionEvent {
                session_id: session.id.clone(),
                seq,
                ts: "2026-11-29T00:00:00.000Z".into(),
                kind: EventKind::ToolResult {
                    call_id: format!("call_{seq}"),
                    name: "Bash".into(),
                    output: "x".repeat(400),
                    is_error: false,
                    duration_ms: 3,
                    attachments: Vec::new(),
                },
                parent: None,
            };
            let t = Instant::now();
            store.append_event(event).await?;
            times.push(t.elapsed());
        }
        times.sort();
        println!(
            "| {label} | {guarantee} | {:.0} | {:.0} | {:.0} |",
            us(percentile(&times, 0.5)),
            us(percentile(&times, 0.99)),
            us(*times.last().unwrap_or(&Duration::ZERO)),
        );
    }
    println!();
    resume_at_start(RESUME_SESSIONS).await
}

const RESUME_SESSIONS: usize = 1000;

/// Start-up with `n` sessions whose log ends mid-turn (after the user message): the time until
/// the server accepts connections with every turn resumed, and until every turn has completed
/// against the mock (zero latency).
async fn resume_at_start(n: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir_in(".")?;
    let db = dir.path().join("outboard.db");
    {
        let store = Store::open(&db, Durability::Normal)?;
        let (user, _) = store.add_user("bench", "bench").await?;
        for _ in 0..n {
            let s = store.create_session(&user, "bench", "mock/bench").await?;
            for (seq, kind) in [
                EventKind::TurnStarted {
                    turn_id: outboard_shared::TurnId("t_b".into()),
                    by: "bench".into(),
                },
                EventKind::UserMessage { text: "resume me".into(), attachments: Vec::new() },
            ]
            .into_iter()
            .enumerate()
            {
                let ts = "2026-11-29T00:00:00.000Z".into();
                store
                    .append_event(SessionEvent {
                        session_id: s.id.clone(),
                        seq: seq as u64 + 1,
                        ts,
                        kind,
                        parent: None,
                    })
                    .await?;
            }
        }
    }
    let mock = MockLlm::start_responder(|_| Some(MockStep::text("resumed"))).await?;
    let mut llm = outboard_server::config::llm_config(
        Some("anthropic"),
        Some(&mock.anthropic_base_url()),
        Some("bench"),
    )?;
    llm.api_key = Some(outboard_server::Secret::new("bench-key"));
    let config = ServerConfig {
        data_dir: dir.path().to_path_buf(),
        models: llm.into(),
        sandbox: sandbox_config(),
        limits: Limits::default(),
        net: outboard_server::NetConfig::default(),
        allow_client_workspaces: false,
        place_on_hosts: false,
        store: None,
        workspaces: None,
    };
    let watcher = Store::open(&db, Durability::Normal)?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let t0 = Instant::now();
    let server = outboard_server::launch(listener, config).await?;
    let serving = t0.elapsed();
    loop {
        if watcher.sessions_with_open_turns().await?.is_empty() {
            break;
        }
        if t0.elapsed() > Duration::from_secs(300) {
            anyhow::bail!("sessions still open after 300 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let done = t0.elapsed();
    server.shutdown().await;
    println!("## Start-up with {n} sessions cut mid-turn");
    println!();
    println!("| sessions | accepting connections, every actor started (ms) | every resumed turn completed (ms) |");
    println!("|---|---|---|");
    println!("| {n} | {:.1} | {:.1} |", serving.as_secs_f64() * 1e3, done.as_secs_f64() * 1e3);
    println!();
    Ok(())
}
