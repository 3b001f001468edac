//! `serve --otlp-endpoint`: a real server exports its spans over OTLP/HTTP to a receiver on
//! loopback that decodes them with the protocol's own types. A turn with a `Bash` call that
//! waits for a person's approval, then a compaction on request, make the five kinds of span,
//! linked by tree and by session and turn ids, with the tokens the model reported; SIGTERM
//! right after flushes them (the processor's own schedule is 5 s). Neither the provider's key
//! nor the prompt nor the command is anywhere in the bytes sent — until `--otlp-content`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use outboard_shared::{EventKind, SessionEvent, Usage};
use outboard_tests::fixture::{driver, serve, ORG};
use outboard_tests::harness::{bin, Api, TEST_API_KEY};
use outboard_tests::mock_llm::{MockLlm, MockStep, MockToolCall};
use prost::Message as _;
use serde_json::json;

/// Generous: the machine is shared and loaded.
const WAIT: Duration = Duration::from_secs(60);

const PROMPT: &str = "otlp-prompt-5be1: say what the directory holds";
const COMMAND: &str = "echo otlp-command-77c2";

/// The bodies `POST /v1/traces` received, as sent.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<bytes::Bytes>>>);

impl Received {
    fn bytes(&self) -> Vec<u8> {
        self.0.lock().unwrap().iter().flat_map(|b| b.iter().copied()).collect()
    }

    /// Every span of every request, decoded.
    fn spans(&self) -> Vec<Span> {
        let bodies = self.0.lock().unwrap().clone();
        let mut spans = Vec::new();
        for body in bodies {
            let request = ExportTraceServiceRequest::decode(body).expect("an OTLP trace request");
            for resource in request.resource_spans {
                let service =
                    resource.resource.as_ref().and_then(|r| {
                        r.attributes.iter().find(|kv| kv.key == "service.name").and_then(|kv| {
                            match kv.value.as_ref()?.value.as_ref()? {
                                AnyValue::StringValue(s) => Some(s.clone()),
                                _ => None,
                            }
                        })
                    });
                assert_eq!(service.as_deref(), Some("outboard-server"));
                for scope in resource.scope_spans {
                    spans.extend(scope.spans);
                }
            }
        }
        spans
    }
}

/// A collector on 127.0.0.1 that keeps what it is sent and answers an empty success.
async fn receiver() -> (SocketAddr, Received) {
    let received = Received::default();
    let kept = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: bytes::Bytes| {
            let kept = kept.clone();
            async move {
                kept.0.lock().unwrap().push(body);
                ([("content-type", "application/x-protobuf")], Vec::<u8>::new())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, received)
}

/// A span's attributes, as text (strings as they are, numbers written out).
fn attributes(span: &Span) -> BTreeMap<String, String> {
    span.attributes
        .iter()
        .filter_map(|kv| {
            let value = match kv.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(s) => s.clone(),
                AnyValue::IntValue(i) => i.to_string(),
                AnyValue::DoubleValue(d) => d.to_string(),
                AnyValue::BoolValue(b) => b.to_string(),
                _ => return None,
            };
            Some((kv.key.clone(), value))
        })
        .collect()
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

/// The usage of each assistant message of `events`, in order.
fn usages(events: &[SessionEvent]) -> Vec<Usage> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::AssistantMessage { usage: Some(u), .. } => Some(*u),
            _ => None,
        })
        .collect()
}

fn turn_id(events: &[SessionEvent]) -> String {
    events
        .iter()
        .find_map(|e| match &e.kind {
            EventKind::TurnCompleted { turn_id, .. } => Some(turn_id.to_string()),
            _ => None,
        })
        .expect("the turn completed")
}

/// The model: a `Bash` call (id `b1`) with text before it, then an answer; then a summary.
async fn mock() -> MockLlm {
    let call = MockToolCall::new("Bash", json!({ "command": COMMAND })).with_id("b1");
    MockLlm::start(vec![
        MockStep::tool_calls(vec![call]).with_text("Looking.").usage(1200, 7),
        MockStep::text("It holds nothing yet.").usage(1300, 9),
        MockStep::text("The user asked what the directory holds; it was empty."),
    ])
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_is_one_trace_of_its_calls_with_no_key_prompt_or_command_in_it() {
    let (addr, received) = receiver().await;
    let mock = mock().await;
    let endpoint = format!("http://{addr}");
    let server = serve(&mock, Api::Anthropic, &["--otlp-endpoint", &endpoint]);
    let (_, mut c, sid) = driver(&server).await;
    let (code, out, err) =
        server.admin(&["policy", "set", "--org", ORG, "Bash(echo *)", "ask"], None).unwrap();
    assert_eq!(code, 0, "{out}{err}");

    c.request("turn/send", json!({"session_id": sid, "text": PROMPT})).await.unwrap().unwrap();
    let asked = |e: &SessionEvent| matches!(e.kind, EventKind::ApprovalRequested { .. });
    let mut events = tokio::time::timeout(WAIT, c.events_until(asked)).await.unwrap().unwrap();
    let answer = json!({"session_id": sid, "call_id": "b1", "decision": "allow"});
    c.request("approval/answer", answer).await.unwrap().unwrap();
    let ended = |e: &SessionEvent| matches!(e.kind, EventKind::TurnCompleted { .. });
    events.extend(tokio::time::timeout(WAIT, c.events_until(ended)).await.unwrap().unwrap());
    let compacted =
        c.request("session/compact", json!({"session_id": sid})).await.unwrap().unwrap();
    let (_, clean) = server.terminate(WAIT);
    assert!(clean, "the server exits cleanly on SIGTERM");

    let spans = received.spans();
    let turns = named(&spans, "turn");
    assert_eq!(turns.len(), 1, "{spans:#?}");
    let turn = turns[0];
    let t = attributes(turn);
    assert!(turn.parent_span_id.is_empty(), "a turn is the root of its trace");
    assert_eq!(t["session.id"], sid);
    assert_eq!(t["turn.id"], turn_id(&events));
    assert_eq!((t["outcome"].as_str(), t["stop_reason"].as_str()), ("completed", "end_turn"));
    let logged = usages(&events);
    assert_eq!(logged.len(), 2, "{events:#?}");
    let total: u64 = logged.iter().map(|u| u.input_tokens).sum();
    assert_eq!(t["gen_ai.usage.input_tokens"], total.to_string());
    assert_eq!(t["gen_ai.usage.output_tokens"], "16");

    // Under the turn: its two model calls, with the tokens each reported, in order.
    let under = |s: &&Span| s.parent_span_id == turn.span_id && s.trace_id == turn.trace_id;
    let mut calls: Vec<&Span> = named(&spans, "model_call").into_iter().filter(under).collect();
    calls.sort_by_key(|s| s.start_time_unix_nano);
    assert_eq!(calls.len(), 2, "{spans:#?}");
    for (call, usage) in calls.iter().zip(&logged) {
        let a = attributes(call);
        assert_eq!(a["gen_ai.provider.name"], "anthropic");
        assert_eq!(a["gen_ai.request.model"], "mock-model");
        assert_eq!(a["gen_ai.usage.input_tokens"], usage.input_tokens.to_string());
        assert_eq!(a["gen_ai.usage.output_tokens"], usage.output_tokens.to_string());
        assert_eq!(a["gen_ai.usage.cache_read.input_tokens"], usage.cache_read_tokens.to_string());
        assert_eq!(a["outcome"], "ok");
        let ttft: f64 = a["time_to_first_token_ms"].parse().unwrap();
        let took = (call.end_time_unix_nano - call.start_time_unix_nano) as f64 / 1e6;
        assert!(ttft > 0.0 && ttft <= took, "first token at {ttft} ms of {took} ms");
    }

    // The tool call ran in a sandbox it started, after a person allowed it.
    let tools: Vec<&Span> = named(&spans, "tool_call").into_iter().filter(under).collect();
    assert_eq!(tools.len(), 1, "{spans:#?}");
    let tool = attributes(tools[0]);
    assert_eq!(
        (tool["gen_ai.tool.name"].as_str(), tool["gen_ai.tool.call.id"].as_str()),
        ("Bash", "b1")
    );
    assert_eq!((tool["outcome"].as_str(), tool["sandbox.start"].as_str()), ("ok", "cold_start"));
    assert_eq!((&tool["session.id"], &tool["turn.id"]), (&t["session.id"], &t["turn.id"]));
    let waits: Vec<&Span> = named(&spans, "approval_wait").into_iter().filter(under).collect();
    assert_eq!(waits.len(), 1, "{spans:#?}");
    let wait = attributes(waits[0]);
    assert_eq!((wait["gen_ai.tool.call.id"].as_str(), wait["outcome"].as_str()), ("b1", "allow"));
    assert!(waits[0].end_time_unix_nano <= tools[0].start_time_unix_nano, "waited, then ran");

    // The compaction on request: a trace of its own, its summary call under it.
    let compactions = named(&spans, "compaction");
    assert_eq!(compactions.len(), 1, "{spans:#?}");
    let compaction = attributes(compactions[0]);
    assert_eq!((compaction["trigger"].as_str(), compaction["outcome"].as_str()), ("manual", "ok"));
    assert_eq!(compaction["session.id"], sid);
    assert_eq!(compaction["tokens_before"], compacted["tokens_before"].to_string());
    assert_eq!(compaction["tokens_after"], compacted["tokens_after"].to_string());
    let summary = named(&spans, "model_call")
        .into_iter()
        .filter(|s| s.parent_span_id == compactions[0].span_id)
        .count();
    assert_eq!(summary, 1, "{spans:#?}");

    let raw = String::from_utf8_lossy(&received.bytes()).into_owned();
    for secret in [TEST_API_KEY, PROMPT, COMMAND, "otlp-prompt", "otlp-command"] {
        assert!(!raw.contains(secret), "{secret:?} was exported");
    }
    assert!(!t.contains_key("prompt") && !tool.contains_key("tool.input"), "{t:?} {tool:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_otlp_content_the_prompt_and_the_tool_input_are_exported() {
    let (addr, received) = receiver().await;
    let mock = mock().await;
    let endpoint = format!("http://{addr}");
    let server = serve(&mock, Api::Anthropic, &["--otlp-endpoint", &endpoint, "--otlp-content"]);
    let (_, mut c, sid) = driver(&server).await;
    let events = c.turn(&sid, PROMPT).await.unwrap();
    assert_eq!(usages(&events).len(), 2, "{events:#?}");
    let (_, clean) = server.terminate(WAIT);
    assert!(clean, "the server exits cleanly on SIGTERM");

    let spans = received.spans();
    let turns = named(&spans, "turn");
    assert_eq!(turns.len(), 1, "{spans:#?}");
    assert_eq!(attributes(turns[0])["prompt"], PROMPT);
    let tools = named(&spans, "tool_call");
    assert_eq!(tools.len(), 1, "{spans:#?}");
    let input: serde_json::Value =
        serde_json::from_str(&attributes(tools[0])["tool.input"]).unwrap();
    assert_eq!(input, json!({ "command": COMMAND }));
    // The content is what people and the model wrote, never the provider's key.
    assert!(!String::from_utf8_lossy(&received.bytes()).contains(TEST_API_KEY));
}

/// Issue 49, item 7: a tool name is the model's text. Without `--otlp-content` a name the
/// session does not offer is exported as `unknown_tool`, never as written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_made_up_tool_name_is_exported_as_a_placeholder() {
    const MADE_UP: &str = "otlp-made-up-tool-3f9e_the_prompt_said_hunter2";
    let (addr, received) = receiver().await;
    let made_up = MockToolCall::new(MADE_UP, json!({})).with_id("m1");
    let bash = MockToolCall::new("Bash", json!({ "command": COMMAND })).with_id("b1");
    let mock = MockLlm::start(vec![
        MockStep::tool_calls(vec![made_up]),
        MockStep::tool_calls(vec![bash]),
        MockStep::text("Done."),
    ])
    .await
    .unwrap();
    let endpoint = format!("http://{addr}");
    let server = serve(&mock, Api::Anthropic, &["--otlp-endpoint", &endpoint]);
    let (_, mut c, sid) = driver(&server).await;
    let events = c.turn(&sid, PROMPT).await.unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::ToolResult { call_id, .. } if call_id == "m1")),
        "{events:#?}"
    );
    let (_, clean) = server.terminate(WAIT);
    assert!(clean, "the server exits cleanly on SIGTERM");

    let spans = received.spans();
    let mut names: Vec<(String, String)> = named(&spans, "tool_call")
        .into_iter()
        .map(|s| {
            let a = attributes(s);
            (a["gen_ai.tool.call.id"].clone(), a["gen_ai.tool.name"].clone())
        })
        .collect();
    names.sort();
    assert_eq!(
        names,
        [("b1".to_owned(), "Bash".to_owned()), ("m1".to_owned(), "unknown_tool".to_owned())],
        "{spans:#?}"
    );
    let raw = String::from_utf8_lossy(&received.bytes()).into_owned();
    for secret in [MADE_UP, "otlp-made-up", "hunter2"] {
        assert!(!raw.contains(secret), "{secret:?} was exported");
    }
}

/// Issue 49, item 7: a clear-text collector off loopback, named by `--otlp-endpoint` or by the
/// standard variable, is refused at start (its key and the spans would cross the network
/// readable), before anything else happens; `--insecure` is the way past (unit-tested in
/// `telemetry.rs`, where no server has to be started).
#[test]
fn a_cleartext_collector_off_loopback_is_refused_at_start() {
    let data = tempfile::tempdir().unwrap();
    let data_dir = data.path().to_str().unwrap();
    let off = "http://collector.example:4318";
    let serve = ["serve", "--data", data_dir, "--listen", "127.0.0.1:0"];
    for (flags, env) in [(vec!["--otlp-endpoint", off], None), (vec![], Some(off))] {
        let mut command = std::process::Command::new(bin("outboard-server").unwrap());
        // No model key either: a server that got past the check would stop at that, not serve.
        command.args(serve).args(&flags).env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
        command.env_remove("ANTHROPIC_API_KEY").env_remove("OPENAI_API_KEY");
        match env {
            Some(url) => command.env("OTEL_EXPORTER_OTLP_ENDPOINT", url),
            None => command.env_remove("OTEL_EXPORTER_OTLP_ENDPOINT"),
        };
        let out = command.stdin(std::process::Stdio::null()).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{flags:?} {env:?}: {stderr}");
        assert!(
            stderr.contains("clear-text http://") && stderr.contains("--insecure"),
            "{flags:?} {env:?}: {stderr}"
        );
    }
}
