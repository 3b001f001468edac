//! What every dialect's request body must hold, checked across the three at once (a test of
//! its own, above the dialects and their shared types: no module imports it).

use serde_json::{json, Value};

use crate::types::*;

/// Every dialect honours `forbid_tools`: the tools stay in the body (the cached prefix) and
/// `tool_choice` says none; without tools the body says nothing of it.
#[test]
fn forbidding_tool_calls_keeps_the_tools_and_sets_tool_choice_none() {
    type Body = fn(&ModelRequest<'_>) -> serde_json::Result<Vec<u8>>;
    let dialects: [(&str, Body, Value); 3] = [
        (
            "anthropic",
            |r| crate::anthropic::request_body("m", 100, None, r),
            json!({"type": "none"}),
        ),
        ("openai", |r| crate::openai::request_body("m", 100, r), json!("none")),
        ("responses", |r| crate::responses::request_body("m", 100, None, r), json!("none")),
    ];
    let messages =
        vec![Message { role: Role::User, content: vec![ContentBlock::Text("hi".into())] }];
    let tools = vec![ToolSpec {
        name: "Bash".into(),
        description: "runs".into(),
        input_schema: json!({"type": "object"}),
    }];
    for (name, make, none) in dialects {
        let body =
            |r: &ModelRequest<'_>| -> Value { serde_json::from_slice(&make(r).unwrap()).unwrap() };
        let mut request = ModelRequest {
            system: "s",
            messages: &messages,
            tools: &tools,
            max_tokens: None,
            forbid_tools: true,
        };
        let forbidden = body(&request);
        assert_eq!(forbidden["tool_choice"], none, "{name}");
        assert_eq!(forbidden["tools"].as_array().map(Vec::len), Some(1), "{name}");
        request.forbid_tools = false;
        assert_eq!(body(&request).get("tool_choice"), None, "{name}");
        request.forbid_tools = true;
        request.tools = &[];
        assert_eq!(body(&request).get("tool_choice"), None, "{name}");
    }
}
