//! A mock model scripted by the prompt: each user message carries the steps the model takes for
//! that turn, so several sessions can run against one mock at the same time, each following its
//! own script regardless of how their requests interleave.
//!
//! The user message is `SCRIPT {"steps": [...]}`, each step either `{"tool": NAME, "input": {…}}`
//! or `{"text": "…"}`; the answer to a request is the step whose index is the number of assistant
//! messages after that user message. Works for both APIs' request formats.

use serde_json::{json, Value};

use crate::mock_llm::{MockLlm, MockStep};

/// The user message that makes the model take `steps`.
pub fn script(steps: &[Value]) -> String {
    format!("SCRIPT {}", json!({ "steps": steps }))
}

/// A tool call step.
pub fn tool(name: &str, input: Value) -> Value {
    json!({ "tool": name, "input": input })
}

/// A final answer step.
pub fn say(text: &str) -> Value {
    json!({ "text": text })
}

/// The text of a message's content (a string, or the text blocks of an array).
fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter(|b| b["type"] == "text")
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

/// The step a request asks for, from its conversation.
pub fn step_for(body: &Value) -> Option<MockStep> {
    let messages = body["messages"].as_array()?;
    let (at, steps) = messages.iter().enumerate().rev().find_map(|(i, m)| {
        if m["role"] != "user" {
            return None;
        }
        let text = text_of(&m["content"]);
        let rest = text.trim().strip_prefix("SCRIPT ")?;
        let parsed: Value = serde_json::from_str(rest).ok()?;
        Some((i, parsed["steps"].as_array()?.clone()))
    })?;
    let index = messages[at..].iter().filter(|m| m["role"] == "assistant").count();
    let step = steps.get(index)?;
    Some(match step.get("tool").and_then(Value::as_str) {
        Some(name) => MockStep::tool_call(name, step["input"].clone()),
        None => MockStep::text(step["text"].as_str().unwrap_or("done")),
    })
}

/// Starts a mock answering every request from its prompt's script.
pub async fn start() -> anyhow::Result<MockLlm> {
    MockLlm::start_responder(step_for).await
}
