//! Prompt caching, usage accounting and context windows against the real server and the mock
//! LLM over HTTP/SSE: the Anthropic bodies' cache breakpoints and the cached share of input as
//! the mock computes it from the requests, the OpenAI bodies' byte-stable prefix, each call's
//! usage in the log and summed per turn (across a restart) and per session, `outboard usage`,
//! and the context window a session gets.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use outboard_shared::{EventKind, SessionEvent, SessionInfo, Usage};
use outboard_tests::fixture::{
    craft_log, crafted_answer, crafted_call, crafted_opening, crafted_result, crafted_start,
    crash_and_restart, driver, serve, settled_log,
};
use outboard_tests::harness::{outboard, Api, TestServer, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep, RecordedRequest};
use outboard_tests::scripted::{self, say, tool};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

/// Runs one scripted turn on a new session of `server` and returns its durable events.
async fn scripted_turn(c: &mut WsClient, sid: &str, steps: &[Value]) -> Vec<SessionEvent> {
    c.request("turn/send", json!({"session_id": sid, "text": scripted::script(steps)}))
        .await
        .unwrap()
        .unwrap();
    c.completion(Duration::from_secs(60)).await.unwrap()
}

/// Each step lists the workspace: results of some size, so the conversation grows.
fn glob_steps(n: usize) -> Vec<Value> {
    let mut steps: Vec<Value> = (0..n).map(|_| tool("Glob", json!({"pattern": "**/*"}))).collect();
    steps.push(say("Listed."));
    steps
}

fn fill_workspace(server: &TestServer, sid: &str) {
    let dir = server.workspace(sid);
    std::fs::create_dir_all(&dir).unwrap();
    for i in 0..60 {
        std::fs::write(dir.join(format!("a-rather-long-file-name-number-{i:03}.txt")), "x")
            .unwrap();
    }
}

fn usages(events: &[SessionEvent]) -> Vec<Usage> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AssistantMessage { usage, .. } => Some(usage.expect("every call's usage")),
            _ => None,
        })
        .collect()
}

fn turn_usage(events: &[SessionEvent]) -> Usage {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::TurnCompleted { usage, .. } => Some(*usage),
            _ => None,
        })
        .expect("a turn_completed")
}

fn sum(usages: &[Usage]) -> Usage {
    let mut total = Usage::default();
    for u in usages {
        total.add(*u);
    }
    total
}

/// The cached share of each call's input, in percent.
fn cached_shares(usages: &[Usage]) -> Vec<u64> {
    usages.iter().map(|u| u.cache_read_tokens * 100 / u.input_tokens.max(1)).collect()
}

/// That each call's cached share of its input is larger than the one before, compared exactly
/// (whole percents tie near 90 %).
fn assert_cached_share_grows(calls: &[Usage]) {
    for pair in calls.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let grows = u128::from(b.cache_read_tokens) * u128::from(a.input_tokens.max(1))
            > u128::from(a.cache_read_tokens) * u128::from(b.input_tokens.max(1));
        assert!(grows, "the cached share grows: {:?}", cached_shares(calls));
    }
}

/// Where each breakpoint of an Anthropic body is: `tools[i]`, `system[i]`, `messages[m][b]`.
fn breakpoints(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for (i, t) in body["tools"].as_array().into_iter().flatten().enumerate() {
        if t.get("cache_control").is_some() {
            out.push(format!("tools[{i}]"));
        }
    }
    for (i, b) in body["system"].as_array().into_iter().flatten().enumerate() {
        if b.get("cache_control").is_some() {
            out.push(format!("system[{i}]"));
        }
    }
    for (m, message) in body["messages"].as_array().into_iter().flatten().enumerate() {
        for (i, b) in message["content"].as_array().into_iter().flatten().enumerate() {
            if let Some(c) = b.get("cache_control") {
                assert_eq!(c, &json!({"type": "ephemeral"}));
                out.push(format!("messages[{m}][{i}]"));
            }
        }
    }
    out
}

fn last_block(body: &Value, message: usize) -> String {
    let blocks = body["messages"][message]["content"].as_array().unwrap();
    format!("messages[{message}][{}]", blocks.len() - 1)
}

async fn session_info(c: &mut WsClient, sid: &str) -> SessionInfo {
    let listed = c.request("session/list", json!({})).await.unwrap().unwrap();
    let sessions: Vec<SessionInfo> = serde_json::from_value(listed["sessions"].clone()).unwrap();
    sessions.into_iter().find(|s| s.id.0 == sid).expect("the session is listed")
}

#[tokio::test]
async fn anthropic_bodies_carry_breakpoints_and_the_cached_share_grows() {
    let mock = scripted::start().await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let (_token, mut c, sid) = driver(&server).await;
    fill_workspace(&server, &sid);
    let events = scripted_turn(&mut c, &sid, &glob_steps(4)).await;

    let requests: Vec<RecordedRequest> = mock.requests();
    assert_eq!(requests.len(), 5);
    for (i, r) in requests.iter().enumerate() {
        let body = &r.body;
        let tools = body["tools"].as_array().unwrap().len();
        let last = body["messages"].as_array().unwrap().len() - 1;
        // Tools and the system prompt are well over 1,024 tokens here; the first request's
        // conversation is one short message, the prefix through it is long enough all the same.
        let mut want = vec![format!("tools[{}]", tools - 1), "system[0]".to_owned()];
        if i > 0 {
            // Where the previous request put its newest-message breakpoint.
            want.push(last_block(body, last - 2));
        }
        want.push(last_block(body, last));
        assert_eq!(breakpoints(body), want, "request {i}");
        assert!(breakpoints(body).len() <= 4);
    }

    // The mock caches what the breakpoints mark: from the second call on, each call reads the
    // previous one's prefix, a growing share of its input.
    let calls = usages(&events);
    let shares = cached_shares(&calls);
    assert_eq!(calls[0].cache_read_tokens, 0, "{calls:?}");
    assert!(calls[0].cache_write_tokens > 0, "{calls:?}");
    assert_cached_share_grows(&calls[1..]);
    assert!(shares[4] >= 80, "{shares:?}");
    // The mock's own record agrees with what the log keeps.
    let reported: Vec<Usage> = requests.iter().map(|r| r.usage.unwrap()).collect();
    assert_eq!(reported, calls);
    assert_eq!(turn_usage(&events), sum(&calls));
}

/// The end of an OpenAI body's `messages` array: everything before it is the prefix a provider
/// with automatic prefix caching can reuse.
fn conversation_prefix(raw: &str) -> &str {
    let end = raw.find("],\"max_tokens\"").expect("the conversation comes before max_tokens");
    &raw[..end]
}

#[tokio::test]
async fn openai_prefix_is_byte_stable_between_steps_and_turns() {
    let mock = scripted::start().await.unwrap();
    let server = serve(&mock, Api::OpenAi, &[]);
    let (_token, mut c, sid) = driver(&server).await;
    fill_workspace(&server, &sid);
    let first = scripted_turn(&mut c, &sid, &glob_steps(3)).await;
    let second = scripted_turn(&mut c, &sid, &glob_steps(2)).await;

    let requests = mock.requests();
    assert_eq!(requests.len(), 4 + 3);
    for (i, pair) in requests.windows(2).enumerate() {
        let before = conversation_prefix(&pair[0].raw);
        assert!(
            pair[1].raw.starts_with(before),
            "request {} is not a byte prefix of request {}: they differ from byte {}",
            i,
            i + 1,
            before.bytes().zip(pair[1].raw.bytes()).take_while(|(a, b)| a == b).count()
        );
    }
    // The provider's `cached_tokens` are parsed into the log, and grow from step 2 on.
    let calls = usages(&first);
    assert!(calls[1].cache_read_tokens > 0, "{calls:?}");
    assert_cached_share_grows(&calls[1..]);
    let second_calls = usages(&second);
    assert!(cached_shares(&second_calls)[0] >= 80, "a new turn reads the last one's prefix");
    assert_eq!(turn_usage(&first), sum(&calls));
}

#[tokio::test]
async fn usage_is_durable_summed_across_a_restart_and_reported() {
    // A turn cut by a restart after its first model call: the log holds that call's usage.
    let before = Usage {
        input_tokens: 10_000,
        output_tokens: 500,
        cache_read_tokens: 6_000,
        cache_write_tokens: 0,
    };
    let glob = crafted_call("c1", "Glob", json!({"pattern": "*"}));
    let mut kinds = crafted_opening("list the files");
    kinds.extend([
        crafted_answer(std::slice::from_ref(&glob), Some(before)),
        crafted_start(&glob),
        crafted_result(&glob, "a.txt"),
    ]);
    let data = tempfile::tempdir().unwrap();
    let (sid, token) = craft_log(data.path(), "openai/mock-model", kinds).await;
    let mock = MockLlm::start(vec![MockStep::text("Done.").usage(2_000, 40)]).await.unwrap();
    let server = TestServer::start_in(data, Api::OpenAi, &mock.openai_base_url(), &[]).unwrap();

    let log = settled_log(&server, &token, &sid, Duration::from_secs(30)).await;
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let calls = usages(&log);
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0], before);
    assert_eq!((calls[1].input_tokens, calls[1].output_tokens), (2_000, 40));
    let total = sum(&calls);
    assert_eq!(turn_usage(&log), total, "the turn's usage counts the call before the restart");
    assert_eq!(session_info(&mut c, &sid).await.usage, Some(total));
    drop(c);

    // Durable: a restarted server lists the same totals.
    let data = server.kill().unwrap();
    let server = TestServer::start_in(data, Api::OpenAi, &mock.openai_base_url(), &[]).unwrap();
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    assert_eq!(session_info(&mut c, &sid).await.usage, Some(total));

    // `outboard usage --json`: the same totals, grouped as asked.
    let run = |extra: &[&str]| {
        let mut args = vec!["usage", "--json", "--server", &server.url, "--token", &token];
        args.extend_from_slice(extra);
        let out = outboard(&args, None).unwrap();
        assert_eq!(out.code, 0, "{}", out.stderr);
        serde_json::from_str::<Value>(&out.stdout).unwrap()
    };
    let by_session = run(&[]);
    assert_eq!(by_session["rows"].as_array().unwrap().len(), 1, "{by_session}");
    assert_eq!(by_session["rows"][0]["key"], json!(sid));
    assert_eq!(by_session["rows"][0]["calls"], json!(2));
    assert_eq!(serde_json::from_value::<Usage>(by_session["total"].clone()).unwrap(), total);
    // `mock-model` has no price: tokens only.
    assert_eq!(by_session["cost_usd"], Value::Null);
    assert_eq!(by_session["unpriced"], json!(true));
    let by_user = run(&["--by", "user"]);
    assert_eq!(by_user["rows"][0]["key"], json!("alice"), "{by_user}");
    let by_day = run(&["--by", "day"]);
    let days: Vec<&str> =
        by_day["rows"].as_array().unwrap().iter().map(|r| r["key"].as_str().unwrap()).collect();
    assert_eq!(days.len(), 2, "the crafted call's day and today's: {by_day}");
    assert_eq!(days[0], "2026-11-29");
    let since = run(&["--since", "2026-11-30"]);
    assert_eq!(since["calls"], json!(1), "only today's call: {since}");

    // A price file prices the model: (2,000 + 10,000 − 6,000) uncached × $1/M, 6,000 cached
    // × $0.10/M, 540 out × $2/M.
    let prices = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        prices.path(),
        r#"{"mock-model": {"input": 1.0, "output": 2.0, "cache_read": 0.1}}"#,
    )
    .unwrap();
    let priced = run(&["--prices", prices.path().to_str().unwrap()]);
    let cost = priced["cost_usd"].as_f64().unwrap();
    let want = 6_000.0 * 1.0 / 1e6 + 6_000.0 * 0.1 / 1e6 + 540.0 * 2.0 / 1e6;
    assert!((cost - want).abs() < 1e-9, "{cost} vs {want}: {priced}");
    assert_eq!(priced["unpriced"], json!(false));
}

#[tokio::test]
async fn a_session_gets_its_model_family_window_the_servers_or_its_own() {
    let mock = MockLlm::start(Vec::new()).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let window = |v: Value| v["session"]["context_window"].as_u64();
    let created = c.request("session/create", json!({})).await.unwrap().unwrap();
    // The harness's servers run with OUTBOARD_CONTEXT_WINDOW=200000 (`mock-model` is no known
    // family; the table's default is unit-tested in `llm::context`).
    assert_eq!(window(created), Some(200_000));
    let created =
        c.request("session/create", json!({"context_window": 16000})).await.unwrap().unwrap();
    assert_eq!(window(created.clone()), Some(16_000));
    let sid = created["session"]["id"].as_str().unwrap().to_owned();
    assert_eq!(session_info(&mut c, &sid).await.context_window, Some(16_000));
    let refused = c.request("session/create", json!({"context_window": 0})).await.unwrap();
    assert!(refused.is_err(), "{refused:?}");
    drop(c);

    let server =
        crash_and_restart(server, &mock, Api::Anthropic, &["--context-window", "32000"], || {});
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let created = c.request("session/create", json!({})).await.unwrap().unwrap();
    assert_eq!(window(created), Some(32_000));
    assert_eq!(session_info(&mut c, &sid).await.context_window, Some(16_000), "kept");
}
