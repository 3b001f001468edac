//! A long scripted turn for the mock LLM, answered from each request's body: step `N` is the
//! tool call `step-N` after the newest one the request carries (the tail after a compaction always
//! keeps the newest step), and a summary request (recognised by the harness's instruction mark)
//! gets a summary. So a script needs not know when compactions come, and a turn resumed after a
//! crash goes on where its log stands. Used by `tests/tests/e2e/compaction.rs` and `bench_long`.

use outboard_server::agent::compact::INSTRUCTION_MARK;
use serde_json::{json, Value};

use crate::mock_llm::{MockLlm, MockStep, MockToolCall};

/// How long the summary that a test kills the server during takes.
pub const SLOW_SUMMARY_MS: u64 = 5_000;

/// Whether `body` asks for a summary.
pub fn is_summary(body: &Value) -> bool {
    body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .is_some_and(|m| m.to_string().contains(INSTRUCTION_MARK))
}

/// The number of the newest `step-N` tool call in `body` (the tail after a compaction always
/// keeps the newest step), or `None` before the first. Both dialects: Anthropic's `tool_use`
/// blocks, OpenAI's `tool_calls`.
pub fn last_step(body: &Value) -> Option<u64> {
    call_ids(body).iter().rev().find_map(|id| id.strip_prefix("step-")?.parse().ok())
}

/// The ids of the tool calls `body`'s messages carry, oldest first. Both dialects: Anthropic's
/// `tool_use` blocks, OpenAI's `tool_calls`.
pub fn call_ids(body: &Value) -> Vec<String> {
    let ids = |m: &Value| -> Vec<String> {
        let blocks =
            m["content"].as_array().into_iter().flatten().filter(|b| b["type"] == "tool_use");
        let calls = m["tool_calls"].as_array().into_iter().flatten();
        blocks.chain(calls).filter_map(|b| b["id"].as_str().map(str::to_owned)).collect()
    };
    body["messages"].as_array().into_iter().flatten().flat_map(ids).collect()
}

/// The steps' commands: the first writes ten 3 KiB files, then `Read`s of them (cheap: no
/// sandbox), every 10th step a `Bash` that appends its number to `ran.txt` (so a command run
/// twice shows), and at `big` one printing 100 kB.
pub fn step_call(n: u64, big: Option<u64>) -> MockToolCall {
    let id = format!("step-{n}");
    let call = if n == 0 {
        MockToolCall::new(
            "Bash",
            json!({"command": "for i in 0 1 2 3 4 5 6 7 8 9; do head -c 2300 /dev/urandom | base64 > f$i.txt; done; echo made"}),
        )
    } else if Some(n) == big {
        MockToolCall::new("Bash", json!({"command": "head -c 100000 /dev/zero | tr '\\0' x; echo"}))
    } else if n.is_multiple_of(10) {
        MockToolCall::new(
            "Bash",
            json!({"command": format!("echo {n} >> ran.txt; cat f{}.txt", n % 10)}),
        )
    } else {
        MockToolCall::new("Read", json!({"file_path": format!("/workspace/f{}.txt", n % 10)}))
    };
    call.with_id(&id)
}

/// A mock answering a turn of `steps` steps from each body, and summaries; the `slow`th summary
/// (counting from 1) takes `SLOW_SUMMARY_MS`.
pub async fn long_turn_mock(steps: u64, big: Option<u64>, slow: usize) -> anyhow::Result<MockLlm> {
    let summaries = std::sync::atomic::AtomicUsize::new(0);
    MockLlm::start_responder(move |body| {
        if is_summary(body) {
            let nth = summaries.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
            let summary_latency_ms = if nth == slow { SLOW_SUMMARY_MS } else { 0 };
            let upto = last_step(body).unwrap_or(0);
            let summary = format!(
                "The user asked for a long scripted task. Steps up to {upto} are done: the files \
                 f0..f9 were made and read; ran.txt records the commands."
            );
            return Some(MockStep::text(&summary).latency(summary_latency_ms));
        }
        let next = last_step(body).map_or(0, |n| n + 1);
        if next >= steps {
            return Some(MockStep::text("All steps done."));
        }
        Some(MockStep::tool_calls(vec![step_call(next, big)]))
    })
    .await
}
