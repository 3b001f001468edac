//! The OpenAI Responses API provider end to end: a real server with `--provider responses`
//! against the mock LLM over HTTP/SSE, a tool loop whose model reasons (reasoning items with
//! encrypted content), a real sandbox running the tool, a rate limit retried, the server killed
//! mid-turn and restarted, and the usage with its cached share in `turn_completed`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use outboard_shared::{EventKind, Reasoning, Usage};
use outboard_tests::fixture::{driver, kinds, serve, settled_log};
use outboard_tests::harness::{Api, TestServer};
use outboard_tests::mock_llm::{MockLlm, MockStep, MockToolCall};
use outboard_tests::mock_responses::reasoning_item_json;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

/// The `type` of each `input` item (`user` for the short form of a user message).
fn item_types(body: &Value) -> Vec<String> {
    body["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap_or(i["role"].as_str().unwrap_or("?")).to_owned())
        .collect()
}

#[tokio::test]
async fn a_reasoning_tool_loop_survives_a_rate_limit_and_a_restart() {
    let summary = vec!["The user wants a greeting; run echo.".to_owned()];
    let encrypted = "gAAAAB-opaque+ciphertext/==";
    let command = json!({"command": "echo hi-from-the-sandbox"});
    let mock = MockLlm::start(vec![
        // The first call is refused with a rate limit, then answered.
        MockStep::status(429).retry_after_ms(20),
        MockStep::tool_calls(vec![MockToolCall::new("Bash", command.clone()).with_id("call_e2e")])
            .with_openai_reasoning("rs_e2e_1", &[&summary[0]], encrypted),
        // The server is killed while this answer streams…
        MockStep::text("one two three four five six seven eight nine ten").chunk_delay(300),
        // …and, restarted, calls the model again with the same input.
        MockStep::text("The sandbox said hi.").with_openai_reasoning("rs_e2e_2", &["Done."], "e2"),
    ])
    .await
    .unwrap();
    let server = serve(&mock, Api::Responses, &[]);
    let (token, mut c, sid) = driver(&server).await;
    c.request("turn/send", json!({"session_id": sid, "text": "say hi from the sandbox"}))
        .await
        .unwrap()
        .unwrap();
    // Wait for the third call's text: the tool has run and its result was sent back.
    let mut seen_result = false;
    tokio::time::timeout(
        Duration::from_secs(60),
        c.events_until(|e| {
            seen_result |= matches!(e.kind, EventKind::ToolResult { .. });
            seen_result && matches!(e.kind, EventKind::AssistantDelta { .. })
        }),
    )
    .await
    .expect("the answer after the tool streams within 60 s")
    .unwrap();
    let data = server.kill().unwrap();
    let server =
        TestServer::start_in(data, Api::Responses, &mock.responses_base_url(), &[]).unwrap();
    let log = settled_log(&server, &token, &sid, Duration::from_secs(60)).await;

    let requests = mock.requests();
    assert_eq!(requests.len(), 4, "429, tool call, killed answer, answer after the restart");
    assert_eq!(mock.remaining(), 0);
    assert!(requests.iter().all(|r| r.path == "/v1/responses"));
    assert_eq!(requests[0].raw, requests[1].raw, "the retry resends the same request");
    assert_eq!(item_types(&requests[1].body), ["user"]);

    // The call after the tool carries the reasoning item back byte for byte, then the call and
    // its output.
    let after_tool = &requests[2];
    let item = reasoning_item_json("rs_e2e_1", &summary, Some(encrypted));
    assert!(after_tool.raw.contains(&item), "{}", after_tool.raw);
    assert_eq!(
        item_types(&after_tool.body),
        ["user", "reasoning", "function_call", "function_call_output"]
    );
    let input = after_tool.body["input"].as_array().unwrap();
    assert_eq!(
        input[2],
        json!({"type": "function_call", "call_id": "call_e2e", "name": "Bash",
               "arguments": command.to_string()})
    );
    assert_eq!(input[3]["call_id"], "call_e2e");
    let output = input[3]["output"].as_str().unwrap();
    assert!(output.contains("hi-from-the-sandbox"), "{output}");
    assert_eq!(after_tool.body["store"], false);
    assert_eq!(after_tool.body["include"], json!(["reasoning.encrypted_content"]));

    // The restarted server rebuilt the same input from the log, reasoning included.
    assert_eq!(requests[3].body["input"], after_tool.body["input"]);
    assert!(requests[3].raw.contains(&item));

    // The log keeps the reasoning with the message it preceded.
    assert_eq!(
        kinds(&log),
        [
            "checkpoint",
            "turn_started",
            "user_message",
            "assistant_message",
            "tool_call",
            "tool_result",
            "assistant_message",
            "turn_completed"
        ]
    );
    let messages: Vec<(&String, &Vec<Reasoning>, Option<Usage>)> = log
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AssistantMessage { text, reasoning, usage, .. } => {
                Some((text, reasoning, *usage))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        messages[0].1,
        &vec![Reasoning::OpenaiReasoning {
            id: "rs_e2e_1".into(),
            summary: summary.clone(),
            encrypted_content: Some(encrypted.into()),
        }]
    );
    assert_eq!(messages[1].0, "The sandbox said hi.");
    assert_eq!(messages[1].1.len(), 1);

    // Usage: each message carries its call's, with the cached share the mock computed from the
    // requests' common prefix, and the turn sums them.
    assert_eq!(messages[0].2, requests[1].usage);
    assert_eq!(messages[1].2, requests[3].usage);
    let last = requests[3].usage.unwrap();
    assert!(last.cache_read_tokens > 0, "the same input again is read from the cache: {last:?}");
    let mut want = requests[1].usage.unwrap();
    want.add(last);
    match &log.last().unwrap().kind {
        EventKind::TurnCompleted { usage, .. } => assert_eq!(*usage, want),
        other => panic!("{other:?}"),
    }
}
