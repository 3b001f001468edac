//! The provider's own web search through each dialect: decoded from a stream into one
//! `ContentBlock::ProviderSearch`, then sent back verbatim (and only to its own provider), with
//! the tool entry written in each dialect's shape.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use crate::search::{provider_search_spec, SearchOptions};
use crate::sse::SseEvent;
use crate::types::{ContentBlock, Message, ModelRequest, Role, ToolSpec};
use crate::{anthropic, openai, responses};

fn tools() -> Vec<ToolSpec> {
    let options = SearchOptions {
        max_uses: 5,
        allowed_domains: vec!["docs.rs".into()],
        blocked_domains: Vec::new(),
    };
    vec![
        ToolSpec {
            name: "Read".into(),
            description: "Reads.".into(),
            input_schema: json!({"type": "object"}),
        },
        provider_search_spec(&options),
    ]
}

fn request<'a>(messages: &'a [Message], tools: &'a [ToolSpec]) -> ModelRequest<'a> {
    ModelRequest { system: "", messages, tools, max_tokens: None, forbid_tools: false }
}

fn body(bytes: serde_json::Result<Vec<u8>>) -> Value {
    serde_json::from_slice(&bytes.unwrap()).unwrap()
}

#[test]
fn an_anthropic_search_is_decoded_and_sent_back_verbatim() {
    let call = json!({"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                      "input": {"query": "tokio select"}});
    let result = json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
        "content": [{"type": "web_search_result", "url": "https://docs.rs/tokio",
                     "title": "tokio", "encrypted_content": "E+q/==", "page_age": null}]});
    let mut start = call.clone();
    start["input"] = json!({});
    let events = [
        json!({"type": "message_start", "message": {"usage": {"input_tokens": 3}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": start}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "input_json_delta", "partial_json": "{\"query\": \"tokio"}}),
        json!({"type": "content_block_delta", "index": 0,
               "delta": {"type": "input_json_delta", "partial_json": " select\"}"}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "content_block_start", "index": 1, "content_block": result}),
        json!({"type": "content_block_stop", "index": 1}),
        json!({"type": "content_block_start", "index": 2,
               "content_block": {"type": "text", "text": "", "citations": []}}),
        json!({"type": "content_block_delta", "index": 2,
               "delta": {"type": "text_delta", "text": "It waits."}}),
        json!({"type": "content_block_stop", "index": 2}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
               "usage": {"output_tokens": 9}}),
        json!({"type": "message_stop"}),
    ];
    let mut decoder = anthropic::Decoder::default();
    for data in events {
        decoder.on_event(&SseEvent { event: None, data: data.to_string() }, &mut |_| {}).unwrap();
    }
    let response = decoder.finish().unwrap();
    let ContentBlock::ProviderSearch(search) = &response.content[0] else {
        panic!("{:?}", response.content)
    };
    assert_eq!(search.query, "tokio select");
    assert_eq!(search.blocks, vec![call.clone(), result.clone()]);
    assert_eq!(response.content[1], ContentBlock::Text("It waits.".into()));

    let messages = vec![
        Message { role: Role::User, content: vec![ContentBlock::Text("q".into())] },
        Message { role: Role::Assistant, content: response.content.clone() },
        Message { role: Role::User, content: vec![ContentBlock::Text("more".into())] },
    ];
    let tools = tools();
    let sent = body(anthropic::request_body("claude", 1000, None, &request(&messages, &tools)));
    assert_eq!(sent["messages"][1]["content"][0], call);
    assert_eq!(sent["messages"][1]["content"][1], result);
    assert_eq!(sent["messages"][1]["content"][2], json!({"type": "text", "text": "It waits."}));
    assert_eq!(
        sent["tools"][1],
        json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 5,
               "allowed_domains": ["docs.rs"]})
    );

    // Chat Completions has no such tool and no such blocks: both left out.
    let chat = body(openai::request_body("gpt", 1000, &request(&messages, &tools)));
    assert_eq!(chat["tools"].as_array().unwrap().len(), 1, "{chat:#}");
    assert_eq!(chat["messages"][1], json!({"role": "assistant", "content": "It waits."}));
    // The Responses API does not get Anthropic's blocks.
    let resp = body(responses::request_body("gpt", 1000, None, &request(&messages, &tools)));
    assert!(!resp.to_string().contains("server_tool_use"), "{resp:#}");
}

#[test]
fn a_responses_search_is_decoded_and_sent_back_verbatim() {
    let item = json!({"type": "web_search_call", "id": "ws_1", "status": "completed",
        "action": {"type": "search", "query": "rust 2024",
                   "sources": [{"type": "url", "url": "https://blog.rust-lang.org/"}]}});
    let events = [
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": {"type": "web_search_call", "id": "ws_1", "status": "in_progress"}}),
        json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
        json!({"type": "response.output_item.done", "output_index": 1,
               "item": {"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": "Edition 2024."}]}}),
        json!({"type": "response.completed", "response": {"status": "completed", "output": []}}),
    ];
    let mut decoder = responses::Decoder::default();
    for data in events {
        decoder.on_event(&SseEvent { event: None, data: data.to_string() }, &mut |_| {}).unwrap();
    }
    let response = decoder.finish().unwrap();
    let ContentBlock::ProviderSearch(search) = &response.content[0] else {
        panic!("{:?}", response.content)
    };
    assert_eq!(search.sources[0].url, "https://blog.rust-lang.org/");
    let messages = vec![
        Message { role: Role::User, content: vec![ContentBlock::Text("q".into())] },
        Message { role: Role::Assistant, content: response.content.clone() },
    ];
    let tools = tools();
    let sent = body(responses::request_body("gpt", 1000, None, &request(&messages, &tools)));
    assert_eq!(sent["input"][1], item);
    assert_eq!(
        sent["tools"][1],
        json!({"type": "web_search", "filters": {"allowed_domains": ["docs.rs"]}})
    );
    assert_eq!(
        sent["include"],
        json!(["reasoning.encrypted_content", "web_search_call.action.sources"])
    );
    let to_anthropic = body(anthropic::request_body("c", 1000, None, &request(&messages, &tools)));
    assert!(!to_anthropic.to_string().contains("web_search_call"), "{to_anthropic:#}");
}
