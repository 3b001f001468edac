//! The LLM providers against the mock LLM server over real HTTP: streaming, tool-call assembly,
//! retries, errors, request bodies, key handling, and the quirks of OpenAI-compatible servers.

// clippy's test allowance covers `#[test]` bodies only, not this file's helpers.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use outboard_server::llm::{
    ContentBlock, LlmConfig, LlmError, Message, ModelRequest, ModelResponse, ModelStop, Provider,
    ProviderKind, RetryPolicy, Role, StreamDelta, ToolSpec,
};
use outboard_server::Secret;
use outboard_shared::Usage;
use outboard_tests::mock_llm::{MockLlm, MockOpenAiDialect, MockScript, MockStep, MockToolCall};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

const KINDS: [ProviderKind; 3] =
    [ProviderKind::Anthropic, ProviderKind::OpenAi, ProviderKind::Responses];
const KEY: &str = "sk-test-very-SECRET-key-123";
const MAX_DELAY: Duration = Duration::from_millis(200);

fn config(kind: ProviderKind, mock: &MockLlm, key: Option<&str>) -> LlmConfig {
    let base_url = match kind {
        ProviderKind::Anthropic => mock.anthropic_base_url(),
        ProviderKind::OpenAi => mock.openai_base_url(),
        ProviderKind::Responses => mock.responses_base_url(),
    };
    LlmConfig {
        kind,
        base_url,
        model: "mock-model-1".into(),
        api_key: key.map(Secret::new),
        max_tokens: 1024,
        retry: RetryPolicy {
            max_attempts: 3,
            initial_delay: Duration::from_millis(10),
            max_delay: MAX_DELAY,
        },
        thinking_budget: None,
        reasoning_effort: None,
        vision: None,
    }
}

fn provider(kind: ProviderKind, mock: &MockLlm) -> Provider {
    Provider::new(config(kind, mock, Some(KEY))).unwrap()
}

/// The data of a [`ModelRequest`], which borrows it.
struct Request {
    system: String,
    messages: Vec<Message>,
    tools: Vec<ToolSpec>,
}

impl Request {
    fn borrow(&self) -> ModelRequest<'_> {
        ModelRequest {
            system: &self.system,
            messages: &self.messages,
            tools: &self.tools,
            max_tokens: None,
            forbid_tools: false,
        }
    }
}

fn simple_request() -> Request {
    Request {
        system: "You are terse.".into(),
        messages: vec![Message {
            role: Role::User,
            content: vec![ContentBlock::Text("Hi".into())],
        }],
        tools: vec![ToolSpec {
            name: "Write".into(),
            description: "Writes a file.".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        }],
    }
}

/// Runs one call and returns its result and every delta seen.
async fn call(
    provider: &Provider,
    request: &Request,
) -> (Result<ModelResponse, LlmError>, Vec<StreamDelta>) {
    let mut deltas = Vec::new();
    let mut on_delta = |d: StreamDelta| deltas.push(d);
    let result = provider.complete(&request.borrow(), &mut on_delta).await;
    (result, deltas)
}

fn texts(deltas: &[StreamDelta]) -> Vec<String> {
    deltas
        .iter()
        .filter_map(|d| match d {
            StreamDelta::Text(t) => Some(t.clone()),
            StreamDelta::Retry { .. } => None,
        })
        .collect()
}

fn retries(deltas: &[StreamDelta]) -> Vec<(u32, Duration)> {
    deltas
        .iter()
        .filter_map(|d| match d {
            StreamDelta::Retry { attempt, delay, .. } => Some((*attempt, *delay)),
            StreamDelta::Text(_) => None,
        })
        .collect()
}

fn tool(id: &str, name: &str, input: Value) -> ContentBlock {
    ContentBlock::ToolUse { id: id.into(), name: name.into(), input }
}

#[tokio::test]
async fn text_is_streamed_in_deltas_and_assembled() {
    for kind in KINDS {
        let mock =
            MockLlm::start(vec![MockStep::text("Hello there, brave new world!").usage(42, 7)])
                .await
                .unwrap();
        let (result, deltas) = call(&provider(kind, &mock), &simple_request()).await;
        assert_eq!(
            texts(&deltas),
            vec!["Hello ", "there, ", "brave ", "new ", "world!"],
            "{kind:?}"
        );
        assert_eq!(
            result.unwrap(),
            ModelResponse {
                content: vec![ContentBlock::Text("Hello there, brave new world!".into())],
                stop: ModelStop::EndTurn,
                usage: Usage { input_tokens: 42, output_tokens: 7, ..Usage::default() },
            },
            "{kind:?}"
        );
        assert_eq!(mock.requests().len(), 1);
    }
}

#[tokio::test]
async fn split_tool_call_arguments_are_assembled() {
    for kind in KINDS {
        let input =
            json!({"path": "src/main.rs", "content": "fn main() {\n    println!(\"héllo\");\n}\n"});
        let step =
            MockStep::tool_calls(vec![MockToolCall::new("Write", input.clone()).with_id("t1")])
                .with_text("Writing it.")
                .usage(3, 4);
        let mock = MockLlm::start(vec![step]).await.unwrap();
        let (result, deltas) = call(&provider(kind, &mock), &simple_request()).await;
        assert_eq!(texts(&deltas).concat(), "Writing it.");
        assert_eq!(
            result.unwrap(),
            ModelResponse {
                content: vec![ContentBlock::Text("Writing it.".into()), tool("t1", "Write", input)],
                stop: ModelStop::ToolUse,
                usage: Usage { input_tokens: 3, output_tokens: 4, ..Usage::default() },
            },
            "{kind:?}"
        );
    }
}

#[tokio::test]
async fn multiple_tool_calls_keep_their_order() {
    for kind in KINDS {
        let step = MockStep::tool_calls(vec![
            MockToolCall::new("Read", json!({"path": "a"})).with_id("t1"),
            MockToolCall::new("Bash", json!({"command": "ls -la"})).with_id("t2"),
            MockToolCall::new("Glob", json!({})).with_id("t3"),
        ]);
        let mock = MockLlm::start(vec![step]).await.unwrap();
        let (result, _) = call(&provider(kind, &mock), &simple_request()).await;
        let response = result.unwrap();
        assert_eq!(
            response.content,
            vec![
                tool("t1", "Read", json!({"path": "a"})),
                tool("t2", "Bash", json!({"command": "ls -la"})),
                tool("t3", "Glob", json!({})),
            ],
            "{kind:?}"
        );
        assert_eq!(response.stop, ModelStop::ToolUse);
    }
}

#[tokio::test]
async fn stop_reasons_are_mapped() {
    for kind in KINDS {
        let mock = MockLlm::start(vec![
            MockStep::text("truncat").stop("max_tokens"),
            MockStep::text("done").stop("stop_sequence"),
        ])
        .await
        .unwrap();
        let p = provider(kind, &mock);
        assert_eq!(call(&p, &simple_request()).await.0.unwrap().stop, ModelStop::MaxTokens);
        assert_eq!(call(&p, &simple_request()).await.0.unwrap().stop, ModelStop::EndTurn);
    }
}

#[tokio::test]
async fn rate_limit_with_retry_after_is_retried() {
    for kind in KINDS {
        let mock =
            MockLlm::start(vec![MockStep::status(429).retry_after(1), MockStep::text("ok now")])
                .await
                .unwrap();
        let (result, deltas) = call(&provider(kind, &mock), &simple_request()).await;
        assert_eq!(result.unwrap().content, vec![ContentBlock::Text("ok now".into())]);
        // retry-after: 1 s, capped by max_delay.
        assert_eq!(retries(&deltas), vec![(2, MAX_DELAY)], "{kind:?}");
        assert_eq!(mock.requests().len(), 2);

        let mock =
            MockLlm::start(vec![MockStep::status(429).retry_after_ms(30), MockStep::text("ok")])
                .await
                .unwrap();
        let (result, deltas) = call(&provider(kind, &mock), &simple_request()).await;
        assert!(result.is_ok());
        assert_eq!(retries(&deltas), vec![(2, Duration::from_millis(30))], "{kind:?}");
    }
}

#[tokio::test]
async fn server_errors_are_retried() {
    for kind in KINDS {
        let mock = MockLlm::start(vec![
            MockStep::status(500),
            MockStep::status(529),
            MockStep::text("third time lucky"),
        ])
        .await
        .unwrap();
        let (result, deltas) = call(&provider(kind, &mock), &simple_request()).await;
        assert_eq!(result.unwrap().content, vec![ContentBlock::Text("third time lucky".into())]);
        let attempts: Vec<u32> = retries(&deltas).into_iter().map(|(a, _)| a).collect();
        assert_eq!(attempts, vec![2, 3]);
        assert!(retries(&deltas).iter().all(|(_, d)| *d <= MAX_DELAY));
        assert_eq!(mock.requests().len(), 3);
    }
}

#[tokio::test]
async fn a_cut_stream_is_retried_and_the_answer_is_clean() {
    for kind in KINDS {
        let mock = MockLlm::start(vec![MockStep::cut_after(4), MockStep::text("clean answer")])
            .await
            .unwrap();
        let (result, deltas) = call(&provider(kind, &mock), &simple_request()).await;
        assert_eq!(result.unwrap().content, vec![ContentBlock::Text("clean answer".into())]);
        let retry_at = deltas.iter().position(|d| matches!(d, StreamDelta::Retry { .. })).unwrap();
        assert!(retry_at > 0, "{kind:?}: the cut attempt streamed some text first: {deltas:?}");
        match &deltas[retry_at] {
            StreamDelta::Retry { attempt: 2, reason, .. } => {
                assert!(reason.contains("cut"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(texts(&deltas[retry_at..]).concat(), "clean answer");
        assert_eq!(mock.requests().len(), 2);
    }
}

#[tokio::test]
async fn a_stream_ending_without_completion_is_cut() {
    for kind in KINDS {
        // Every event but the last few: the answer never completes.
        let mock = MockLlm::start(vec![MockStep::text("never finished").cut(3)]).await.unwrap();
        let mut config = config(kind, &mock, None);
        config.retry.max_attempts = 1;
        let (result, _) = call(&Provider::new(config).unwrap(), &simple_request()).await;
        assert!(matches!(result, Err(LlmError::Cut(_))), "{kind:?}: {result:?}");
    }
}

#[tokio::test]
async fn a_silent_stream_times_out_and_is_retried() {
    for kind in KINDS {
        let mock = MockLlm::start(vec![
            MockStep::text("slow words here").chunk_delay(500),
            MockStep::text("fast"),
        ])
        .await
        .unwrap();
        let p = provider(kind, &mock).with_idle_timeout(Duration::from_millis(100));
        let (result, deltas) = call(&p, &simple_request()).await;
        assert_eq!(result.unwrap().content, vec![ContentBlock::Text("fast".into())]);
        let reason = deltas
            .iter()
            .find_map(|d| match d {
                StreamDelta::Retry { reason, .. } => Some(reason.clone()),
                StreamDelta::Text(_) => None,
            })
            .unwrap();
        assert!(reason.contains("no data"), "{reason}");
    }
}

#[tokio::test]
async fn bad_request_is_not_retried_and_its_message_surfaces() {
    for kind in KINDS {
        let body = match kind {
            ProviderKind::Anthropic => {
                r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 999999 > 64000"}}"#
            }
            ProviderKind::OpenAi | ProviderKind::Responses => {
                r#"{"error":{"message":"max_tokens: 999999 > 64000","type":"invalid_request_error","code":null}}"#
            }
        };
        let mock = MockLlm::start(vec![MockStep::status(400).body(body), MockStep::text("unused")])
            .await
            .unwrap();
        let (result, deltas) = call(&provider(kind, &mock), &simple_request()).await;
        let error = result.unwrap_err();
        assert!(
            matches!(&error, LlmError::Status { status: 400, message, .. } if message == "max_tokens: 999999 > 64000"),
            "{error:?}"
        );
        assert_eq!(
            error.to_string(),
            "the model provider answered 400: max_tokens: 999999 > 64000"
        );
        assert!(retries(&deltas).is_empty());
        assert_eq!(mock.requests().len(), 1);
        assert_eq!(mock.remaining(), 1);
    }
}

#[tokio::test]
async fn exhausted_retries_return_the_provider_message() {
    for kind in KINDS {
        let mock = MockLlm::start(vec![MockStep::status(429); 3]).await.unwrap();
        let (result, deltas) = call(&provider(kind, &mock), &simple_request()).await;
        match result {
            Err(LlmError::Status { status: 429, message, .. }) => {
                assert_eq!(message, "mock 429: scripted rate_limit_error")
            }
            other => panic!("{kind:?}: {other:?}"),
        }
        assert_eq!(retries(&deltas).len(), 2);
        assert_eq!(mock.requests().len(), 3);
    }
}

#[tokio::test]
async fn in_stream_errors_are_retried_like_their_status() {
    for kind in KINDS {
        let mock =
            MockLlm::start(vec![MockStep::error_event("overloaded_error"), MockStep::text("ok")])
                .await
                .unwrap();
        let (result, deltas) = call(&provider(kind, &mock), &simple_request()).await;
        assert_eq!(result.unwrap().content, vec![ContentBlock::Text("ok".into())]);
        assert_eq!(retries(&deltas).len(), 1, "{kind:?}");

        let mock =
            MockLlm::start(vec![MockStep::error_event("invalid_request_error")]).await.unwrap();
        let (result, _) = call(&provider(kind, &mock), &simple_request()).await;
        assert!(matches!(result, Err(LlmError::Status { status: 400, .. })), "{result:?}");
    }
}

#[tokio::test]
async fn invalid_tool_json_surfaces_as_the_raw_string() {
    for kind in KINDS {
        let raw = r#"{"path": "a.txt", "content": "unterminated"#;
        let mock = MockLlm::start(vec![MockStep::tool_calls(vec![
            MockToolCall::raw("Write", raw).with_id("bad"),
            MockToolCall::raw("Glob", "").with_id("empty"),
        ])])
        .await
        .unwrap();
        let (result, _) = call(&provider(kind, &mock), &simple_request()).await;
        assert_eq!(
            result.unwrap().content,
            vec![tool("bad", "Write", Value::String(raw.into())), tool("empty", "Glob", json!({}))],
            "{kind:?}"
        );
    }
}

fn conversation() -> Request {
    Request {
        system: "You are Outboard.".into(),
        messages: vec![
            Message { role: Role::User, content: vec![ContentBlock::Text("Fix it".into())] },
            Message {
                role: Role::Assistant,
                content: vec![
                    ContentBlock::Text("Looking.".into()),
                    tool("t1", "Read", json!({"path": "a.rs"})),
                    tool("t2", "Write", Value::String("{broken".into())),
                ],
            },
            Message {
                role: Role::User,
                content: vec![
                    ContentBlock::ToolResult {
                        tool_use_id: "t1".into(),
                        content: "fn a() {}".into(),
                        is_error: false,
                    },
                    ContentBlock::ToolResult {
                        tool_use_id: "t2".into(),
                        content: "invalid JSON input".into(),
                        is_error: true,
                    },
                ],
            },
        ],
        tools: vec![ToolSpec {
            name: "Read".into(),
            description: "Reads a file.".into(),
            input_schema: json!({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}),
        }],
    }
}

#[tokio::test]
async fn anthropic_request_body_and_headers() {
    let mock = MockLlm::start(vec![MockStep::text("ok")]).await.unwrap();
    call(&provider(ProviderKind::Anthropic, &mock), &conversation()).await.0.unwrap();
    let request = mock.requests().remove(0);
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.x_api_key.as_deref(), Some(KEY));
    assert_eq!(request.authorization, None);
    assert_eq!(request.anthropic_version.as_deref(), Some("2023-06-01"));
    assert_eq!(request.content_type.as_deref(), Some("application/json"));
    assert_eq!(
        request.body,
        json!({
            "model": "mock-model-1",
            "max_tokens": 1024,
            "system": "You are Outboard.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Fix it"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a.rs"}},
                    {"type": "tool_use", "id": "t2", "name": "Write", "input": {}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "fn a() {}", "is_error": false},
                    {"type": "tool_result", "tool_use_id": "t2", "content": "invalid JSON input", "is_error": true},
                ]},
            ],
            "tools": [{
                "name": "Read",
                "description": "Reads a file.",
                "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
            }],
            "stream": true,
        })
    );
}

#[tokio::test]
async fn openai_request_body_and_headers() {
    let mock = MockLlm::start(vec![MockStep::text("ok")]).await.unwrap();
    call(&provider(ProviderKind::OpenAi, &mock), &conversation()).await.0.unwrap();
    let request = mock.requests().remove(0);
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(request.authorization, Some(format!("Bearer {KEY}")));
    assert_eq!(request.x_api_key, None);
    assert_eq!(request.anthropic_version, None);
    assert_eq!(
        request.body,
        json!({
            "model": "mock-model-1",
            "messages": [
                {"role": "system", "content": "You are Outboard."},
                {"role": "user", "content": "Fix it"},
                {"role": "assistant", "content": "Looking.", "tool_calls": [
                    {"id": "t1", "type": "function", "function": {"name": "Read", "arguments": "{\"path\":\"a.rs\"}"}},
                    {"id": "t2", "type": "function", "function": {"name": "Write", "arguments": "{}"}},
                ]},
                {"role": "tool", "tool_call_id": "t1", "content": "fn a() {}"},
                {"role": "tool", "tool_call_id": "t2", "content": "Error: invalid JSON input"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "Read",
                "description": "Reads a file.",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
            }}],
            "max_tokens": 1024,
            "stream": true,
            "stream_options": {"include_usage": true},
        })
    );
}

#[tokio::test]
async fn responses_request_body_and_headers() {
    let mock = MockLlm::start(vec![MockStep::text("ok")]).await.unwrap();
    call(&provider(ProviderKind::Responses, &mock), &conversation()).await.0.unwrap();
    let request = mock.requests().remove(0);
    assert_eq!(request.path, "/v1/responses");
    assert_eq!(request.authorization, Some(format!("Bearer {KEY}")));
    assert_eq!((request.x_api_key, request.anthropic_version), (None, None));
    assert_eq!(
        request.body,
        json!({
            "model": "mock-model-1",
            "instructions": "You are Outboard.",
            "tools": [{
                "type": "function",
                "name": "Read",
                "description": "Reads a file.",
                "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
                "strict": false,
            }],
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Fix it"}]},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
                {"type": "function_call", "call_id": "t1", "name": "Read", "arguments": "{\"path\":\"a.rs\"}"},
                {"type": "function_call", "call_id": "t2", "name": "Write", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "t1", "output": "fn a() {}"},
                {"type": "function_call_output", "call_id": "t2", "output": "Error: invalid JSON input"},
            ],
            "max_output_tokens": 1024,
            "include": ["reasoning.encrypted_content"],
            "store": false,
            "stream": true,
        })
    );
}

#[tokio::test]
async fn responses_reasoning_items_are_decoded_and_sent_back_unchanged() {
    let step = MockStep::tool_call("Read", json!({"path": "a"}))
        .with_openai_reasoning("rs_1", &["First I look.", "Then I read."], "ENC/+=1")
        .usage(50, 9);
    let mock = MockLlm::start(vec![step, MockStep::text("done")]).await.unwrap();
    let p = provider(ProviderKind::Responses, &mock);
    let mut request = simple_request();
    let (result, _) = call(&p, &request).await;
    let response = result.unwrap();
    let item = outboard_shared::Reasoning::OpenaiReasoning {
        id: "rs_1".into(),
        summary: vec!["First I look.".into(), "Then I read.".into()],
        encrypted_content: Some("ENC/+=1".into()),
    };
    assert_eq!(response.content[0], ContentBlock::Reasoning(item));
    assert!(matches!(&response.content[1], ContentBlock::ToolUse { name, .. } if name == "Read"));
    assert_eq!(response.stop, ModelStop::ToolUse);
    assert_eq!((response.usage.input_tokens, response.usage.output_tokens), (50, 9));
    let ContentBlock::ToolUse { id, .. } = &response.content[1] else { unreachable!() };
    let result = ContentBlock::ToolResult {
        tool_use_id: id.clone(),
        content: "contents".into(),
        is_error: false,
    };
    request.messages.push(Message { role: Role::Assistant, content: response.content.clone() });
    request.messages.push(Message { role: Role::User, content: vec![result] });
    call(&p, &request).await.0.unwrap();
    let sent = outboard_tests::mock_responses::reasoning_item_json(
        "rs_1",
        &["First I look.".into(), "Then I read.".into()],
        Some("ENC/+=1"),
    );
    let second = &mock.requests()[1];
    assert!(second.raw.contains(&sent), "{}", second.raw);
    let input = second.body["input"].as_array().unwrap();
    let types: Vec<&str> = input.iter().map(|i| i["type"].as_str().unwrap_or("user")).collect();
    assert_eq!(types, ["user", "reasoning", "function_call", "function_call_output"]);
}

#[tokio::test]
async fn no_key_means_no_auth_header() {
    for kind in KINDS {
        let mock = MockLlm::start(vec![MockStep::text("ok")]).await.unwrap();
        let p = Provider::new(config(kind, &mock, None)).unwrap();
        call(&p, &simple_request()).await.0.unwrap();
        let request = mock.requests().remove(0);
        assert_eq!((request.x_api_key, request.authorization), (None, None), "{kind:?}");
    }
}

#[tokio::test]
async fn the_key_never_appears_in_errors_or_debug() {
    for kind in KINDS {
        let echo = format!(
            r#"{{"error":{{"type":"authentication_error","message":"invalid x-api-key {KEY}"}}}}"#
        );
        let mock = MockLlm::start(vec![MockStep::status(401).body(&echo)]).await.unwrap();
        let p = provider(kind, &mock);
        assert!(!format!("{p:?}").contains(KEY));
        let (result, _) = call(&p, &simple_request()).await;
        let error = result.unwrap_err();
        assert!(matches!(error, LlmError::Status { status: 401, .. }), "{error:?}");
        for text in [error.to_string(), format!("{error:?}")] {
            assert!(!text.contains(KEY), "{text}");
            assert!(text.contains("invalid x-api-key <redacted>"), "{text}");
        }
    }
    // A connection error names the URL, never the key.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dead = LlmConfig {
        kind: ProviderKind::OpenAi,
        base_url: format!("http://127.0.0.1:{port}/v1"),
        model: "m".into(),
        api_key: Some(Secret::new(KEY)),
        max_tokens: 10,
        retry: RetryPolicy { max_attempts: 1, ..RetryPolicy::default() },
        thinking_budget: None,
        reasoning_effort: None,
        vision: None,
    };
    let (result, _) = call(&Provider::new(dead).unwrap(), &simple_request()).await;
    let error = result.unwrap_err();
    assert!(
        matches!(
            error,
            LlmError::Transport { kind: outboard_server::llm::error::Unreachable::Refused, .. }
        ),
        "{error:?}"
    );
    assert!(!format!("{error} {error:?}").contains(KEY), "{error:?}");
}

#[tokio::test]
async fn an_exhausted_script_fails_loudly() {
    for kind in KINDS {
        let mock = MockLlm::start(vec![]).await.unwrap();
        let mut config = config(kind, &mock, None);
        config.retry.max_attempts = 1;
        let (result, _) = call(&Provider::new(config).unwrap(), &simple_request()).await;
        let error = result.unwrap_err().to_string();
        assert!(error.contains("mock script exhausted"), "{error}");
    }
}

async fn openai_with(
    dialect: MockOpenAiDialect,
    step: MockStep,
) -> (ModelResponse, Vec<StreamDelta>) {
    let mock = MockLlm::start(vec![step.openai(dialect)]).await.unwrap();
    let mut config = config(ProviderKind::OpenAi, &mock, None);
    config.retry.max_attempts = 1;
    let (result, deltas) = call(&Provider::new(config).unwrap(), &simple_request()).await;
    (result.unwrap(), deltas)
}

#[tokio::test]
async fn openai_dialects() {
    let calls = || {
        MockStep::tool_calls(vec![
            MockToolCall::new("Read", json!({"path": "x"})).with_id("c1"),
            MockToolCall::new("Bash", json!({"command": "echo hi"})).with_id("c2"),
        ])
        .usage(5, 6)
    };
    let want_calls = vec![
        tool("c1", "Read", json!({"path": "x"})),
        tool("c2", "Bash", json!({"command": "echo hi"})),
    ];

    let (r, _) =
        openai_with(MockOpenAiDialect { omit_usage: true, ..Default::default() }, calls()).await;
    assert_eq!(
        (r.content, r.stop, r.usage),
        (want_calls.clone(), ModelStop::ToolUse, Usage::default())
    );

    let (r, _) =
        openai_with(MockOpenAiDialect { omit_done: true, ..Default::default() }, calls()).await;
    assert_eq!(
        (r.content, r.usage),
        (want_calls.clone(), Usage { input_tokens: 5, output_tokens: 6, ..Usage::default() })
    );

    let both = MockOpenAiDialect { omit_done: true, omit_usage: true, ..Default::default() };
    let (r, _) = openai_with(both, MockStep::text("short")).await;
    assert_eq!(r.content, vec![ContentBlock::Text("short".into())]);

    let (r, _) =
        openai_with(MockOpenAiDialect { args_in_one_chunk: true, ..Default::default() }, calls())
            .await;
    assert_eq!(r.content, want_calls);

    let no_index = MockOpenAiDialect { omit_tool_index: true, ..Default::default() };
    let (r, _) = openai_with(no_index.clone(), calls()).await;
    assert_eq!(r.content, want_calls);
    let (r, _) =
        openai_with(MockOpenAiDialect { args_in_one_chunk: true, ..no_index }, calls()).await;
    assert_eq!(r.content, want_calls);

    let (r, _) = openai_with(
        MockOpenAiDialect { finish_reason: Some("stop".into()), ..Default::default() },
        calls(),
    )
    .await;
    assert_eq!((r.content, r.stop), (want_calls.clone(), ModelStop::ToolUse));

    let noisy = MockOpenAiDialect {
        empty_deltas: true,
        reasoning: Some("Let me think about it.".into()),
        ..Default::default()
    };
    let (r, deltas) = openai_with(noisy, MockStep::text("Plain answer here")).await;
    assert_eq!(r.content, vec![ContentBlock::Text("Plain answer here".into())]);
    assert_eq!(texts(&deltas), vec!["Plain ", "answer ", "here"]);
}

#[tokio::test]
async fn the_mock_binary_serves_a_json_script() {
    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    let steps = vec![
        MockStep::text("from the binary"),
        MockStep::tool_call("Read", json!({"path": "p"})),
        MockStep::text("reasoned").with_openai_reasoning("rs_b", &["Hm."], "enc"),
    ];
    let file =
        MockScript { steps, openai: MockOpenAiDialect { omit_done: true, ..Default::default() } };
    std::fs::write(&script, serde_json::to_string(&file).unwrap()).unwrap();
    assert_eq!(MockScript::from_json(&std::fs::read_to_string(&script).unwrap()).unwrap(), file);

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_mock-llm"))
        .arg("--script")
        .arg(&script)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    tokio::time::timeout(Duration::from_secs(20), stdout.read_line(&mut line))
        .await
        .unwrap()
        .unwrap();
    let base = line.trim().strip_prefix("listening on ").unwrap().to_owned();
    let addr = base.strip_prefix("http://").unwrap().to_owned();

    for (kind, base_url) in [
        (ProviderKind::Anthropic, base.clone()),
        (ProviderKind::OpenAi, format!("{base}/v1")),
        (ProviderKind::Responses, format!("{base}/v1")),
    ] {
        let config = LlmConfig {
            kind,
            base_url,
            model: "m".into(),
            api_key: None,
            max_tokens: 10,
            retry: RetryPolicy { max_attempts: 1, ..RetryPolicy::default() },
            thinking_budget: None,
            reasoning_effort: None,
            vision: None,
        };
        let (result, _) = call(&Provider::new(config).unwrap(), &simple_request()).await;
        assert!(result.is_ok(), "{kind:?}: {result:?}");
    }

    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    tcp.write_all(
        format!("GET /_mock/requests HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut response = String::new();
    tcp.read_to_string(&mut response).await.unwrap();
    let body = response.split_once("\r\n\r\n").unwrap().1;
    let recorded: Vec<Value> = serde_json::from_str(body).unwrap();
    let paths: Vec<&str> = recorded.iter().map(|r| r["path"].as_str().unwrap()).collect();
    assert_eq!(paths, vec!["/v1/messages", "/v1/chat/completions", "/v1/responses"]);
    child.kill().await.unwrap();
}
