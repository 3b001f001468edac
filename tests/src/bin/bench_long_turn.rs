//! `scripts/bench.sh long`, the turn half: one 1,000-step turn through a real in-process server in
//! a 16,000-token window (and a 64,000-token one) (the mock LLM answering from each body, `outboard_tests::long_turn`),
//! for each dialect. It prints the request bytes per step over the turn — flat after the first
//! compactions, not growing with the step count — the compactions, and the share of input tokens
//! the mock's prompt cache (which imitates each vendor's, see `mock_llm`) reports as read from
//! cache. Nothing here asserts: the numbers are for people (and closing notes).

use std::time::Instant;

use outboard_server::Limits;
use outboard_shared::EventKind;
use outboard_tests::bench::BenchSession;
use outboard_tests::long_turn::{is_summary, long_turn_mock};

const STEPS: u64 = 1_000;
/// Steps per row of the bytes table.
const BUCKET: usize = 100;

/// A 1,000-step turn in a 16k- and a 64k-token window: request bytes per step, compactions, the
/// prompt cache's share (tables; asserts nothing). No arguments.
#[derive(clap::Parser)]
struct Args {}

fn main() -> anyhow::Result<()> {
    outboard_tests::bench::args::<Args>(|_| Ok(()));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    rt.block_on(async {
        // Each step adds about 1,000 new tokens: in a 16k window that is a tenth of every
        // request, which bounds the cache's share; a bigger window shows the share a long turn
        // gets from a Claude-size model.
        for (api, window) in [("anthropic", 16_000), ("openai", 16_000), ("anthropic", 64_000)] {
            long_turn(api, window).await?;
        }
        Ok(())
    })
}

async fn long_turn(api: &str, window: u64) -> anyhow::Result<()> {
    let mock = long_turn_mock(STEPS, None, 0).await?;
    let limits =
        Limits { max_steps: STEPS as u32 + 10, context_window: Some(window), ..Limits::default() };
    let BenchSession { server, mut client, session: sid, .. } =
        BenchSession::start(api, &mock, limits).await?;
    let started = Instant::now();
    let events = client.turn(&sid, "Run the long scripted task.").await?;
    let wall = started.elapsed();
    if let Some(EventKind::TurnFailed { error, .. }) = events.last().map(|e| &e.kind) {
        anyhow::bail!("the benchmark turn failed: {error}");
    }
    server.shutdown().await;

    let requests = mock.requests();
    let summaries = requests.iter().filter(|r| is_summary(&r.body)).count();
    println!(
        "## A {STEPS}-step turn in a {window}-token window ({api}; {} model calls, {summaries} \
         compactions, {:.1} s)",
        requests.len(),
        wall.as_secs_f64()
    );
    println!();
    println!(
        "| steps | request bytes, mean | request bytes, max | est. tokens, max | compactions |"
    );
    println!("|---|---|---|---|---|");
    // Per bucket of steps: the sizes of its requests, and the compactions just before them.
    let mut rows: Vec<(Vec<usize>, usize)> = Vec::new();
    let (mut step, mut compactions) = (0, 0);
    for r in &requests {
        if is_summary(&r.body) {
            compactions += 1;
            continue;
        }
        if rows.len() <= step / BUCKET {
            rows.push((Vec::new(), 0));
        }
        let row = &mut rows[step / BUCKET];
        row.0.push(r.raw.len());
        row.1 += std::mem::take(&mut compactions);
        step += 1;
    }
    for (i, (sizes, compacted)) in rows.iter().enumerate() {
        let mean = sizes.iter().sum::<usize>() / sizes.len().max(1);
        let max = sizes.iter().copied().max().unwrap_or(0);
        println!(
            "| {}–{} | {mean} | {max} | {} | {compacted} |",
            i * BUCKET + 1,
            i * BUCKET + sizes.len(),
            outboard_server::llm::context::estimate_tokens(max),
        );
    }
    println!();
    let (mut input, mut read) = (0u64, 0u64);
    for r in &requests {
        if let Some(u) = r.usage {
            input += u.input_tokens;
            read += u.cache_read_tokens;
        }
    }
    let share = if input == 0 { 0.0 } else { read as f64 / input as f64 * 100.0 };
    println!(
        "Prompt cache over the turn ({api}, the mock's imitation of the vendor's cache): {read} of \
         {input} input tokens read from cache, {share:.1} %."
    );
    println!();
    Ok(())
}
