//! `scripts/bench.sh tasks`: subagents against one agent, through a real in-process server, real
//! sandboxes and the mock model over HTTP (each conversation answered from its own script,
//! `outboard_tests::conversations`). One agent does 160 scripted steps; then one message starts 8
//! subagents doing 20 steps each. The steps are `Read`s, `Glob`s and, every fifth, a `Bash` in
//! the session's sandbox, the same mix for both. It prints the wall time of each turn and the
//! ratio, with the mock answering at once (the harness's own cost, on a machine's cores) and
//! after 50 ms (a fast model's time to first token), and each subagent's overhead: from its
//! start (the loop's tracing event [`outboard_server::agent::child::SPAWN_TARGET`]) to its first
//! model request reaching the mock. Nothing here asserts: the numbers are for people.
//! `bench_tasks [--quick]`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outboard_server::agent::child::SPAWN_TARGET;
use outboard_server::Limits;
use outboard_shared::EventKind;
use outboard_tests::bench::{percentile, us, BenchSession};
use outboard_tests::conversations::{first_user_text, step_of, Scripts};
use outboard_tests::mock_llm::{MockLlm, MockStep, MockToolCall};
use serde_json::json;
use tracing_subscriber::layer::SubscriberExt as _;

const CHILDREN: usize = 8;
const CHILD_STEPS: usize = 20;
/// Subagents started one at a time per run, for the overhead of a lone one.
const SERIAL_TASKS: usize = 20;

/// When each subagent started, by its `Task` call id, from the loop's tracing event.
#[derive(Clone, Default)]
struct Spawns(Arc<Mutex<HashMap<String, Instant>>>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Spawns {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        if event.metadata().target() != SPAWN_TARGET {
            return;
        }
        struct CallId(Option<String>);
        impl tracing::field::Visit for CallId {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "call_id" {
                    self.0 = Some(format!("{value:?}"));
                }
            }
        }
        let mut id = CallId(None);
        event.record(&mut id);
        if let (Some(id), Ok(mut spawns)) = (id.0, self.0.lock()) {
            spawns.entry(id).or_insert_with(Instant::now);
        }
    }
}

/// When each conversation's first request reached the mock, by its first user message.
type FirstRequests = Arc<Mutex<HashMap<String, Instant>>>;

/// The tool call of step `k` of a scripted agent: mostly file reads, a sandbox command every
/// fifth.
fn step(k: usize, who: &str) -> MockStep {
    let call = match k % 5 {
        4 => MockToolCall::new("Bash", json!({"command": format!("echo {who}-{k}")})),
        3 => MockToolCall::new("Glob", json!({"pattern": "*.txt"})),
        _ => MockToolCall::new("Read", json!({"file_path": format!("/workspace/f{}.txt", k % 4)})),
    };
    MockStep::tool_calls(vec![call])
}

/// The files the steps read, made by each turn's first step.
fn setup() -> MockStep {
    MockStep::tool_calls(vec![MockToolCall::new(
        "Bash",
        json!({"command": "for i in 0 1 2 3; do seq 1 200 > f$i.txt; done"}),
    )])
}

fn with_latency(steps: Vec<MockStep>, ms: u64) -> Vec<MockStep> {
    steps.into_iter().map(|s| s.latency(ms)).collect()
}

async fn mock(scripts: &Scripts, firsts: &FirstRequests) -> anyhow::Result<MockLlm> {
    let (scripts, firsts) = (scripts.clone(), firsts.clone());
    MockLlm::start_responder(move |body| {
        if step_of(body) == 0 {
            if let Ok(mut f) = firsts.lock() {
                f.entry(first_user_text(body)).or_insert_with(Instant::now);
            }
        }
        scripts.answer(body)
    })
    .await
}

/// One turn's wall time.
async fn timed_turn(mock: &MockLlm, text: &str) -> anyhow::Result<Duration> {
    let limits = Limits { max_steps: 500, ..Limits::default() };
    let BenchSession { server, mut client, session, .. } =
        BenchSession::start("anthropic", mock, limits).await?;
    let started = Instant::now();
    let events = client.turn(&session, text).await?;
    let wall = started.elapsed();
    if let Some(EventKind::TurnFailed { error, .. }) = events.last().map(|e| &e.kind) {
        anyhow::bail!("the benchmark turn failed: {error}");
    }
    server.shutdown().await;
    Ok(wall)
}

/// Subagents against one agent: 8 children × 20 steps vs one agent × 160 (wall time), and each
/// child's start to its first model request (tables; asserts nothing).
#[derive(clap::Parser)]
struct Args {
    /// One run instead of three, to try the bench itself.
    #[arg(long)]
    quick: bool,
}

fn main() -> anyhow::Result<()> {
    let quick = outboard_tests::bench::args::<Args>(|_| Ok(())).quick;
    let runs = if quick { 1 } else { 3 };
    let spawns = Spawns::default();
    let filter =
        tracing_subscriber::filter::Targets::new().with_target(SPAWN_TARGET, tracing::Level::DEBUG);
    let subscriber = tracing_subscriber::registry()
        .with(tracing_subscriber::Layer::with_filter(spawns.clone(), filter));
    tracing::subscriber::set_global_default(subscriber)?;

    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        println!(
            "## {CHILDREN} subagents × {CHILD_STEPS} steps against one agent × {} steps \
             ({runs} runs each, median)",
            CHILDREN * CHILD_STEPS
        );
        println!();
        println!("| model latency | one agent, s | {CHILDREN} subagents, s | speed-up |");
        println!("|---|---|---|---|");
        let mut overheads = Vec::new();
        for latency in [0u64, 50] {
            let (mut single, mut parallel) = (Vec::new(), Vec::new());
            for run in 0..runs {
                let scripts = Scripts::default();
                let firsts = FirstRequests::default();
                let key = format!("single {latency} {run}");
                let mut steps = vec![setup()];
                steps.extend((0..CHILDREN * CHILD_STEPS).map(|k| step(k, "single")));
                steps.push(MockStep::text("Done."));
                scripts.add(&key, with_latency(steps, latency));
                let mock = mock(&scripts, &firsts).await?;
                single.push(timed_turn(&mock, &key).await?);

                let key = format!("parallel {latency} {run}");
                let tasks: Vec<MockToolCall> = (0..CHILDREN)
                    .map(|i| {
                        MockToolCall::new(
                            "Task",
                            json!({"description": format!("part {i}"),
                                   "prompt": format!("child-{latency}-{run}-{i}: do part {i}"),
                                   "subagent_type": "general-purpose"}),
                        )
                        .with_id(&format!("task_{latency}_{run}_{i}"))
                    })
                    .collect();
                let main =
                    vec![setup(), MockStep::tool_calls(tasks), MockStep::text("All parts done.")];
                scripts.add(&key, with_latency(main, latency));
                for i in 0..CHILDREN {
                    let mut steps: Vec<MockStep> =
                        (0..CHILD_STEPS).map(|k| step(k, &format!("c{i}"))).collect();
                    steps.push(MockStep::text(&format!("Part {i} done.")));
                    scripts
                        .add(&format!("child-{latency}-{run}-{i}:"), with_latency(steps, latency));
                }
                parallel.push(timed_turn(&mock, &key).await?);
                // Model latency is the mock's, before its answer: not the harness's overhead.
                if latency == 0 {
                    let spawned = spawns.0.lock().map(|s| s.clone()).unwrap_or_default();
                    let firsts = firsts.lock().map(|f| f.clone()).unwrap_or_default();
                    for i in 0..CHILDREN {
                        let (Some(s), Some(f)) = (
                            spawned.get(&format!("task_{latency}_{run}_{i}")),
                            firsts.get(&format!("child-{latency}-{run}-{i}: do part {i}")),
                        ) else {
                            anyhow::bail!("child {i} of run {run}: no start or no first request");
                        };
                        overheads.push(f.saturating_duration_since(*s));
                    }
                }
            }
            single.sort();
            parallel.sort();
            let (one, many) = (single[single.len() / 2], parallel[parallel.len() / 2]);
            println!(
                "| {latency} ms | {:.2} | {:.2} | {:.2}× |",
                one.as_secs_f64(),
                many.as_secs_f64(),
                one.as_secs_f64() / many.as_secs_f64().max(1e-9)
            );
        }
        // One subagent at a time: a message with one Task call, twenty times over.
        let scripts = Scripts::default();
        let firsts = FirstRequests::default();
        let mock = mock(&scripts, &firsts).await?;
        let alone = SERIAL_TASKS * runs;
        let mut main: Vec<MockStep> = (0..alone)
            .map(|i| {
                MockStep::tool_calls(vec![MockToolCall::new(
                    "Task",
                    json!({"description": format!("alone {i}"),
                           "prompt": format!("alone-{i}: report"),
                           "subagent_type": "general-purpose"}),
                )
                .with_id(&format!("alone_{i}"))])
            })
            .collect();
        main.push(MockStep::text("All reported."));
        scripts.add("one at a time", main);
        for i in 0..alone {
            scripts.add(&format!("alone-{i}:"), vec![MockStep::text(&format!("Report {i}."))]);
        }
        timed_turn(&mock, "one at a time").await?;
        let mut single = Vec::new();
        {
            let spawned = spawns.0.lock().map(|s| s.clone()).unwrap_or_default();
            let firsts = firsts.lock().map(|f| f.clone()).unwrap_or_default();
            for i in 0..alone {
                let (Some(s), Some(f)) =
                    (spawned.get(&format!("alone_{i}")), firsts.get(&format!("alone-{i}: report")))
                else {
                    anyhow::bail!("subagent alone_{i}: no start or no first request");
                };
                single.push(f.saturating_duration_since(*s));
            }
        }
        println!();
        println!("## A subagent's start to its first model request");
        println!();
        println!("| subagents | p50 | p99 | max |");
        println!("|---|---|---|---|");
        let rows = [
            (format!("one at a time ({alone})"), single),
            (format!("{CHILDREN} at once ({})", overheads.len()), overheads),
        ];
        for (label, mut samples) in rows {
            samples.sort();
            println!(
                "| {label} | {:.0} µs | {:.0} µs | {:.0} µs |",
                us(percentile(&samples, 0.5)),
                us(percentile(&samples, 0.99)),
                us(samples.last().copied().unwrap_or_default())
            );
        }
        Ok(())
    })
}
