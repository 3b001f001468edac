use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;

fn body(system: &str, messages: &[Message], tools: &[ToolSpec], effort: Option<&str>) -> Value {
    let request = ModelRequest { system, messages, tools, max_tokens: None, forbid_tools: false };
    serde_json::from_slice(&request_body("m", 7, effort, &request).unwrap()).unwrap()
}

fn reasoning(id: &str, summary: &[&str], encrypted: Option<&str>) -> ContentBlock {
    ContentBlock::Reasoning(Reasoning::OpenaiReasoning {
        id: id.into(),
        summary: summary.iter().map(|s| (*s).to_owned()).collect(),
        encrypted_content: encrypted.map(str::to_owned),
    })
}

#[test]
fn input_items() {
    let text = |t: &str| ContentBlock::Text(t.into());
    let messages = [
        Message { role: Role::User, content: vec![text("two"), text(""), text("parts \"q\"")] },
        Message {
            role: Role::Assistant,
            content: vec![
                reasoning("rs_1", &["Plan.", "Then act."], Some("gAAA==")),
                reasoning("rs_2", &[], None),
                ContentBlock::Reasoning(Reasoning::Thinking {
                    thinking: "Anthropic's".into(),
                    signature: "sig".into(),
                }),
                text("Looking."),
                text(""),
                ContentBlock::ToolUse {
                    id: "call_1".into(),
                    name: "Bash".into(),
                    input: json!({"command": "echo \"hi\"\n"}),
                },
                ContentBlock::ToolUse {
                    id: "call_2".into(),
                    name: "Write".into(),
                    input: Value::String("{broken".into()),
                },
            ],
        },
        Message {
            role: Role::User,
            content: vec![
                ContentBlock::ToolResult {
                    tool_use_id: "call_1".into(),
                    content: "hi\n".into(),
                    is_error: false,
                },
                ContentBlock::ToolResult {
                    tool_use_id: "call_2".into(),
                    content: "bad JSON".into(),
                    is_error: true,
                },
                text("and then"),
            ],
        },
        Message { role: Role::Assistant, content: vec![] },
        Message { role: Role::User, content: vec![text("")] },
    ];
    let tools = [ToolSpec {
        name: "Bash".into(),
        description: "Runs it.".into(),
        input_schema: json!({"type": "object"}),
    }];
    assert_eq!(
        body("Be terse.", &messages, &tools, None),
        json!({
            "model": "m",
            "instructions": "Be terse.",
            "tools": [{"type": "function", "name": "Bash", "description": "Runs it.",
                       "parameters": {"type": "object"}, "strict": false}],
            "input": [
                {"role": "user", "content": [
                    {"type": "input_text", "text": "two"},
                    {"type": "input_text", "text": "parts \"q\""},
                ]},
                {"type": "reasoning", "id": "rs_1", "summary": [
                    {"type": "summary_text", "text": "Plan."},
                    {"type": "summary_text", "text": "Then act."},
                ], "encrypted_content": "gAAA=="},
                {"type": "reasoning", "id": "rs_2", "summary": []},
                {"type": "message", "role": "assistant",
                 "content": [{"type": "output_text", "text": "Looking."}]},
                {"type": "function_call", "call_id": "call_1", "name": "Bash",
                 "arguments": "{\"command\":\"echo \\\"hi\\\"\\n\"}"},
                {"type": "function_call", "call_id": "call_2", "name": "Write", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "hi\n"},
                {"type": "function_call_output", "call_id": "call_2", "output": "Error: bad JSON"},
                {"role": "user", "content": [{"type": "input_text", "text": "and then"}]},
            ],
            "max_output_tokens": 16,
            "include": ["reasoning.encrypted_content"],
            "store": false,
            "stream": true,
        })
    );
}

#[test]
fn effort_and_empty_parts() {
    let messages = [Message { role: Role::User, content: vec![ContentBlock::Text("hi".into())] }];
    let request = ModelRequest {
        system: "",
        messages: &messages,
        tools: &[],
        max_tokens: None,
        forbid_tools: false,
    };
    let raw =
        String::from_utf8(request_body("gpt-5", 4096, Some("high"), &request).unwrap()).unwrap();
    // Exact bytes: the reasoning item order and the field order matter to the prefix cache.
    assert_eq!(
        raw,
        r#"{"model":"gpt-5","reasoning":{"effort":"high","summary":"auto"},"input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}],"max_output_tokens":4096,"include":["reasoning.encrypted_content"],"store":false,"stream":true}"#
    );
}

#[test]
fn a_reasoning_item_is_sent_back_byte_for_byte() {
    let item = r#"{"type":"reasoning","id":"rs_9","summary":[{"type":"summary_text","text":"Think \"twice\"\n"}],"encrypted_content":"enc+/=="}"#;
    let mut decoder = Decoder::default();
    let events = [
        format!(r#"{{"type":"response.output_item.done","output_index":0,"item":{item}}}"#),
        r#"{"type":"response.completed","response":{"status":"completed","output":[]}}"#.to_owned(),
    ];
    for data in events {
        decoder.on_event(&SseEvent { event: None, data }, &mut |_| {}).unwrap();
    }
    let response = decoder.finish().unwrap();
    let messages = [Message { role: Role::Assistant, content: response.content }];
    let request = ModelRequest {
        system: "",
        messages: &messages,
        tools: &[],
        max_tokens: None,
        forbid_tools: false,
    };
    let raw = String::from_utf8(request_body("m", 100, None, &request).unwrap()).unwrap();
    assert!(raw.contains(&format!(r#""input":[{item}]"#)), "{raw}");
}

/// Feeds `(event name, data)` pairs; returns the decoder's result and the text deltas.
fn decode(events: &[Value]) -> (Result<Option<ModelResponse>, LlmError>, Vec<String>) {
    let mut decoder = Decoder::default();
    let mut texts = Vec::new();
    for data in events {
        let name = data["type"].as_str().map(str::to_owned);
        let event = SseEvent { event: name, data: data.to_string() };
        let mut on_delta = |d: StreamDelta| {
            if let StreamDelta::Text(t) = d {
                texts.push(t);
            }
        };
        match decoder.on_event(&event, &mut on_delta) {
            Ok(Progress::Done) => break,
            Ok(Progress::More) => {}
            Err(e) => return (Err(e), texts),
        }
    }
    (Ok(decoder.finish()), texts)
}

fn tool_loop_events() -> Vec<Value> {
    let reasoning_done = json!({"type": "reasoning", "id": "rs_1", "encrypted_content": "enc1",
        "summary": [{"type": "summary_text", "text": "Need to list."}]});
    vec![
        json!({"type": "response.created", "sequence_number": 0,
               "response": {"id": "resp_1", "status": "in_progress", "output": []}}),
        json!({"type": "response.in_progress", "sequence_number": 1}),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "reasoning", "id": "rs_1", "summary": []}}),
        json!({"type": "response.reasoning_summary_part.added", "output_index": 0,
               "summary_index": 0, "part": {"type": "summary_text", "text": ""}}),
        json!({"type": "response.reasoning_summary_text.delta", "output_index": 0,
               "summary_index": 0, "delta": "Need "}),
        json!({"type": "response.reasoning_summary_text.delta", "output_index": 0,
               "summary_index": 0, "delta": "to list."}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": reasoning_done}),
        json!({"type": "response.output_item.added", "output_index": 1,
               "item": {"type": "message", "id": "msg_1", "role": "assistant", "content": []}}),
        json!({"type": "response.output_text.delta", "output_index": 1, "content_index": 0,
               "delta": "Listing "}),
        json!({"type": "response.output_text.delta", "output_index": 1, "content_index": 0,
               "delta": "files."}),
        json!({"type": "response.output_item.done", "output_index": 1,
               "item": {"type": "message", "id": "msg_1", "role": "assistant",
                        "content": [{"type": "output_text", "text": "Listing files.",
                                     "annotations": []}]}}),
        json!({"type": "response.output_item.added", "output_index": 2,
               "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1",
                        "name": "Bash", "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 2,
               "delta": "{\"command\":"}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 2,
               "delta": "\"ls\"}"}),
        json!({"type": "response.function_call_arguments.done", "output_index": 2,
               "arguments": "{\"command\":\"ls\"}"}),
        json!({"type": "response.output_item.done", "output_index": 2,
               "item": {"type": "function_call", "id": "fc_1", "call_id": "call_1",
                        "name": "Bash", "arguments": "{\"command\":\"ls\"}",
                        "status": "completed"}}),
        json!({"type": "response.completed", "response": {"id": "resp_1",
               "status": "completed", "output": [],
               "usage": {"input_tokens": 120, "input_tokens_details": {"cached_tokens": 100},
                         "output_tokens": 30,
                         "output_tokens_details": {"reasoning_tokens": 12},
                         "total_tokens": 150}}}),
    ]
}

#[test]
fn a_tool_loop_answer_with_reasoning() {
    let (result, texts) = decode(&tool_loop_events());
    assert_eq!(texts, vec!["Listing ", "files."]);
    assert_eq!(
        result.unwrap().unwrap(),
        ModelResponse {
            content: vec![
                reasoning("rs_1", &["Need to list."], Some("enc1")),
                ContentBlock::Text("Listing files.".into()),
                ContentBlock::ToolUse {
                    id: "call_1".into(),
                    name: "Bash".into(),
                    input: json!({"command": "ls"}),
                },
            ],
            stop: ModelStop::ToolUse,
            usage: Usage {
                input_tokens: 120,
                output_tokens: 30,
                cache_read_tokens: 100,
                cache_write_tokens: 0,
            },
        }
    );
}

#[test]
fn a_stream_without_its_terminal_event_is_cut() {
    let mut events = tool_loop_events();
    events.pop();
    assert_eq!(decode(&events).0.unwrap(), None);
    // `[DONE]` (a compatible server's habit) does not complete it either.
    let mut decoder = Decoder::default();
    let done = SseEvent { event: None, data: "[DONE]".into() };
    assert_eq!(decoder.on_event(&done, &mut |_| {}).unwrap(), Progress::More);
    assert_eq!(decoder.finish(), None);
}

#[test]
fn items_whose_done_event_was_missed_come_from_the_final_output() {
    let events = [
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "function_call", "call_id": "c", "name": "Glob",
                        "arguments": ""}}),
        json!({"type": "response.function_call_arguments.delta", "output_index": 0,
               "delta": "{\"pat"}),
        json!({"type": "response.completed", "response": {"status": "completed", "output": [
            {"type": "function_call", "call_id": "c", "name": "Glob",
             "arguments": "{\"pattern\":\"*\"}"},
            {"type": "web_search_call", "id": "ws_1"},
            {"type": "message", "content": [{"type": "refusal", "refusal": "No."}]},
        ]}}),
    ];
    let response = decode(&events).0.unwrap().unwrap();
    assert_eq!(
        response.content,
        vec![
            ContentBlock::ToolUse {
                id: "c".into(),
                name: "Glob".into(),
                input: json!({"pattern": "*"})
            },
            // The API's own search is kept, to be sent back (see `crate::search`).
            crate::search::from_responses(json!({"type": "web_search_call", "id": "ws_1"})),
            ContentBlock::Text("No.".into()),
        ]
    );
    assert_eq!(response.stop, ModelStop::ToolUse);
}

#[test]
fn incomplete_answers() {
    let incomplete = |reason: &str| {
        json!({"type": "response.incomplete", "response": {"status": "incomplete",
               "incomplete_details": {"reason": reason}, "output": [],
               "usage": {"input_tokens": 5, "output_tokens": 16}}})
    };
    let text = json!({"type": "response.output_text.delta", "output_index": 0, "delta": "trunc"});
    let response = decode(&[text.clone(), incomplete("max_output_tokens")]).0.unwrap().unwrap();
    assert_eq!(response.stop, ModelStop::MaxTokens);
    assert_eq!(response.content, vec![ContentBlock::Text("trunc".into())]);
    assert_eq!(response.usage.output_tokens, 16);
    let response = decode(&[text, incomplete("content_filter")]).0.unwrap().unwrap();
    assert_eq!(response.stop, ModelStop::Other("content_filter".into()));
}

#[test]
fn failures_carry_the_status_their_code_stands_for() {
    let failed = |code: &str, message: &str| {
        json!({"type": "response.failed", "response": {"status": "failed",
               "error": {"code": code, "message": message}}})
    };
    let status = |events: &[Value]| match decode(events).0 {
        Err(LlmError::Status { status, message, .. }) => (status, message),
        other => panic!("{other:?}"),
    };
    assert_eq!(status(&[failed("server_error", "boom")]), (500, "boom (server_error)".into()));
    assert_eq!(status(&[failed("rate_limit_exceeded", "slow down")]).0, 429);
    assert_eq!(status(&[failed("overloaded_error", "busy")]).0, 529);
    let overflow =
        failed("context_length_exceeded", "Your input exceeds the context window of this model.");
    let (code, message) = status(&[overflow]);
    let error = LlmError::Status { status: code, message, retry_after: None };
    assert!(error.is_context_overflow(), "{error}");
    let error_event = json!({"type": "error", "code": "rate_limit_exceeded",
                             "message": "Rate limit reached", "param": null,
                             "sequence_number": 3});
    assert_eq!(status(&[error_event]), (429, "Rate limit reached (rate_limit_exceeded)".into()));
    let nested = json!({"type": "error", "error": {"type": "invalid_request_error",
                        "message": "bad"}});
    assert_eq!(status(&[nested]).0, 400);
    assert_eq!(status(&[json!({"type": "response.failed", "response": {}})]).0, 500);
}

#[test]
fn unreadable_events_are_decode_errors() {
    let mut decoder = Decoder::default();
    let event = SseEvent { event: Some("response.created".into()), data: "{nope".into() };
    assert!(matches!(decoder.on_event(&event, &mut |_| {}), Err(LlmError::Decode(_))));
}
