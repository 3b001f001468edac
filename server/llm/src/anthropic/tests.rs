use pretty_assertions::assert_eq;
use serde_json::json;

use super::*;

#[test]
fn empty_text_system_and_tools_are_left_out() {
    let messages = [
        Message {
            role: Role::User,
            content: vec![ContentBlock::Text(String::new()), ContentBlock::Text("hi".into())],
        },
        Message {
            role: Role::Assistant,
            content: vec![ContentBlock::ToolUse {
                id: "t".into(),
                name: "Glob".into(),
                input: json!(["not", "an", "object"]),
            }],
        },
    ];
    let request = ModelRequest {
        system: "",
        messages: &messages,
        tools: &[],
        max_tokens: None,
        forbid_tools: false,
    };
    let body: Value =
        serde_json::from_slice(&request_body("m", 7, None, &request).unwrap()).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "m",
            "max_tokens": 7,
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "t", "name": "Glob", "input": {}},
                ]},
            ],
            "stream": true,
        })
    );
}

fn user(blocks: Vec<ContentBlock>) -> Message {
    Message { role: Role::User, content: blocks }
}

fn assistant_call(id: &str) -> Message {
    Message {
        role: Role::Assistant,
        content: vec![ContentBlock::ToolUse {
            id: id.into(),
            name: "Read".into(),
            input: json!({}),
        }],
    }
}

fn result(id: &str, text: &str) -> ContentBlock {
    ContentBlock::ToolResult { tool_use_id: id.into(), content: text.into(), is_error: false }
}

fn marked(body: &Value) -> Vec<String> {
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

#[test]
fn breakpoints_mark_tools_system_and_the_last_two_steps() {
    let tools = [ToolSpec {
        name: "Read".into(),
        description: "r".repeat(5_000),
        input_schema: json!({"type": "object"}),
    }];
    let system = "s".repeat(4_000);
    let messages = [
        user(vec![ContentBlock::Text("do it".into())]),
        assistant_call("a"),
        user(vec![result("a", "one"), ContentBlock::Text(String::new())]),
        assistant_call("b"),
        user(vec![result("b", "two")]),
    ];
    let request = ModelRequest {
        system: &system,
        messages: &messages,
        tools: &tools,
        max_tokens: None,
        forbid_tools: false,
    };
    let body: Value =
        serde_json::from_slice(&request_body("claude-sonnet-4-5", 7, None, &request).unwrap())
            .unwrap();
    // The empty text block is not sent, so the breakpoint sits on the result before it.
    assert_eq!(
        marked(&body),
        ["tools[0]", "system[0]", "messages[2][0]", "messages[4][0]"],
        "{body:#}"
    );
    assert_eq!(body["system"][0]["text"], json!(system));
}

#[test]
fn a_prefix_below_the_minimum_is_not_marked() {
    // 1,024 tokens are about 4 KiB: tools and system are too short alone, the conversation
    // brings the prefix over it only at its last message.
    let tools = [ToolSpec {
        name: "Read".into(),
        description: "short".into(),
        input_schema: json!({"type": "object"}),
    }];
    let messages = [
        user(vec![ContentBlock::Text("x".repeat(100))]),
        assistant_call("a"),
        user(vec![result("a", &"y".repeat(5_000))]),
    ];
    let request = ModelRequest {
        system: "terse",
        messages: &messages,
        tools: &tools,
        max_tokens: None,
        forbid_tools: false,
    };
    let body: Value =
        serde_json::from_slice(&request_body("claude-sonnet-4-5", 7, None, &request).unwrap())
            .unwrap();
    assert_eq!(marked(&body), ["messages[2][0]"], "{body:#}");
    assert_eq!(body["system"], json!("terse"), "an unmarked system prompt stays a string");
    // A Haiku 4.5 needs 4,096 tokens: nothing here is long enough.
    let body: Value =
        serde_json::from_slice(&request_body("claude-haiku-4-5", 7, None, &request).unwrap())
            .unwrap();
    assert!(marked(&body).is_empty(), "{body:#}");
}

#[test]
fn usage_counts_cache_reads_and_writes_as_input() {
    let mut decoder = Decoder::default();
    let mut sink = |_: StreamDelta| {};
    let event = |data: Value| SseEvent { event: None, data: data.to_string() };
    for data in [
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 10,
            "cache_read_input_tokens": 2000, "cache_creation_input_tokens": 300,
            "output_tokens": 1}}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
               "usage": {"output_tokens": 42}}),
        json!({"type": "message_stop"}),
    ] {
        decoder.on_event(&event(data), &mut sink).unwrap();
    }
    let usage = decoder.finish().unwrap().usage;
    assert_eq!(
        usage,
        Usage {
            input_tokens: 2310,
            output_tokens: 42,
            cache_read_tokens: 2000,
            cache_write_tokens: 300
        }
    );
}

#[test]
fn thinking_blocks_stream_in_with_their_signature_and_go_back_verbatim() {
    let mut decoder = Decoder::default();
    let mut texts = Vec::new();
    let mut sink = |d: StreamDelta| texts.push(d);
    let event = |data: Value| SseEvent { event: None, data: data.to_string() };
    for data in [
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 5}}}),
        json!({"type": "content_block_start", "index": 0,
               "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "thinking_delta", "thinking": "Look at "}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "thinking_delta", "thinking": "the tests."}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "signature_delta", "signature": "EqQBCgIYAh"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1,
               "content_block": {"type": "redacted_thinking", "data": "EmwKAhgB"}}),
        json!({"type": "content_block_start", "index": 2,
               "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Glob", "input": {}}}),
        json!({"type": "content_block_delta", "index": 2,
               "delta": {"type": "input_json_delta", "partial_json": "{\"pattern\":\"*\"}"}}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"},
               "usage": {"output_tokens": 9}}),
        json!({"type": "message_stop"}),
    ] {
        decoder.on_event(&event(data), &mut sink).unwrap();
    }
    // Thinking is not streamed as answer text.
    assert!(texts.is_empty(), "{texts:?}");
    let answer = decoder.finish().unwrap();
    let thinking = Reasoning::Thinking {
        thinking: "Look at the tests.".into(),
        signature: "EqQBCgIYAh".into(),
    };
    let redacted = Reasoning::RedactedThinking { data: "EmwKAhgB".into() };
    assert_eq!(answer.content[0], ContentBlock::Reasoning(thinking.clone()));
    assert_eq!(answer.content[1], ContentBlock::Reasoning(redacted));
    assert_eq!(answer.stop, ModelStop::ToolUse);

    // The next step sends the blocks back first in the assistant message, unchanged, with
    // thinking on; the other provider's reasoning is left out; no breakpoint on a thinking
    // block.
    let mut content = answer.content.clone();
    content.insert(
        0,
        ContentBlock::Reasoning(Reasoning::OpenaiReasoning {
            id: "rs_1".into(),
            summary: vec![],
            encrypted_content: None,
        }),
    );
    let messages = vec![
        user(vec![ContentBlock::Text("go".into())]),
        Message { role: Role::Assistant, content },
        user(vec![result("toolu_1", "a.rs")]),
    ];
    let request = ModelRequest {
        system: "",
        messages: &messages,
        tools: &[],
        max_tokens: None,
        forbid_tools: false,
    };
    let body: Value =
        serde_json::from_slice(&request_body("m", 8192, Some(2048), &request).unwrap()).unwrap();
    assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 2048}));
    let sent = &body["messages"][1]["content"];
    assert_eq!(
        sent[0],
        json!({"type": "thinking", "thinking": "Look at the tests.", "signature": "EqQBCgIYAh"})
    );
    assert_eq!(sent[1], json!({"type": "redacted_thinking", "data": "EmwKAhgB"}));
    assert_eq!(sent[2]["type"], "tool_use");
    assert_eq!(sent.as_array().unwrap().len(), 3);

    // A call whose max_tokens leaves no room for the budget (a short summary) goes without
    // thinking, and then without thinking blocks, which the API would refuse.
    let body: Value =
        serde_json::from_slice(&request_body("m", 2048, Some(2048), &request).unwrap()).unwrap();
    assert!(body.get("thinking").is_none());
    let sent = &body["messages"][1]["content"];
    assert_eq!(sent.as_array().unwrap().len(), 1, "{sent}");
    assert_eq!(sent[0]["type"], "tool_use");
}
