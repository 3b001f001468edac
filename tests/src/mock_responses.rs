//! The mock LLM's OpenAI Responses API dialect (`POST /v1/responses`): the SSE events of a
//! scripted [`MockStep`], with its reasoning items ([`MockStep::openai_reasoning`]). It streams
//! steps only; the server that routes requests here is `mock_llm`.
//!
//! The events are those the real API streams for reasoning, a message and function calls, each
//! with its `sequence_number` and its name repeated in the SSE `event:` line: `response.created`,
//! then per output item `response.output_item.added`, its deltas (reasoning summary parts, output
//! text, function-call arguments) and `response.output_item.done` with the whole item, then
//! `response.completed` (or `response.incomplete` for a `max_tokens` stop, `response.failed` for
//! an `error_event`) with the output and the usage. `response.in_progress` and the content-part
//! events carry nothing a client needs and are left out, so `cut_after` counts from the start as
//! in the other dialects (a cut after 4 events has streamed a text delta).
//!
//! A reasoning item is written with its fields in the order `type`, `id`, `summary`,
//! `encrypted_content` ([`reasoning_item_json`]), the order a client that sends it back unchanged
//! writes it in, so a test can find it byte for byte in the next request.

use outboard_shared::Usage;
use serde::Serialize;
use serde_json::{json, Value};

pub use crate::mock_step::MockReasoning;
use crate::mock_step::{split_pieces, split_words, MockStep};

/// A reasoning item as the mock writes it in `response.output_item.done` (see the module header).
pub fn reasoning_item_json(
    id: &str,
    summary: &[String],
    encrypted_content: Option<&str>,
) -> String {
    #[derive(Serialize)]
    struct Part<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        text: &'a str,
    }
    #[derive(Serialize)]
    struct Item<'a> {
        #[serde(rename = "type")]
        kind: &'static str,
        id: &'a str,
        summary: Vec<Part<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        encrypted_content: Option<&'a str>,
    }
    let item = Item {
        kind: "reasoning",
        id,
        summary: summary.iter().map(|text| Part { kind: "summary_text", text }).collect(),
        encrypted_content,
    };
    serde_json::to_string(&item).unwrap_or_default()
}

/// Numbers the events and frames them as SSE.
struct Events {
    frames: Vec<String>,
}

impl Events {
    fn push(&mut self, kind: &str, mut data: Value) {
        data["type"] = json!(kind);
        data["sequence_number"] = json!(self.frames.len());
        self.frames.push(format!("event: {kind}\ndata: {data}\n\n"));
    }

    /// An event whose `item` is already-serialised JSON, kept byte for byte.
    fn push_raw_item(&mut self, kind: &str, output_index: usize, item: &str) {
        let seq = self.frames.len();
        self.frames.push(format!(
            "event: {kind}\ndata: {{\"type\":\"{kind}\",\"sequence_number\":{seq},\
             \"output_index\":{output_index},\"item\":{item}}}\n\n"
        ));
    }
}

/// The SSE frames answering `step` as the `n`th request, for `model`, reporting `usage`.
pub(crate) fn responses_events(step: &MockStep, model: &str, n: u64, usage: Usage) -> Vec<String> {
    let id = format!("resp_mock_{n}");
    let mut events = Events { frames: Vec::new() };
    let response = |status: &str, output: &[Value]| {
        json!({"id": id, "object": "response", "created_at": 1_700_000_000, "status": status,
               "model": model, "output": output})
    };
    events.push("response.created", json!({"response": response("in_progress", &[])}));
    if let Some(kind) = &step.error_event {
        let mut failed = response("failed", &[]);
        failed["error"] = json!({"code": kind, "message": format!("mock {kind}")});
        events.push("response.failed", json!({"response": failed}));
        return events.frames;
    }
    let mut output: Vec<Value> = Vec::new();
    for (i, reasoning) in step.openai_reasoning.iter().enumerate() {
        let index = output.len();
        let item_id = reasoning.id.clone().unwrap_or_else(|| format!("rs_mock_{n}_{i}"));
        events.push(
            "response.output_item.added",
            json!({"output_index": index,
                   "item": {"type": "reasoning", "id": item_id, "summary": []}}),
        );
        for (part, text) in reasoning.summary.iter().enumerate() {
            let at = json!({"item_id": item_id, "output_index": index, "summary_index": part});
            let with = |mut v: Value, extra: Value| {
                if let (Some(v), Some(extra)) = (v.as_object_mut(), extra.as_object()) {
                    v.extend(extra.clone());
                }
                v
            };
            events.push(
                "response.reasoning_summary_part.added",
                with(at.clone(), json!({"part": {"type": "summary_text", "text": ""}})),
            );
            for delta in split_words(text) {
                events.push(
                    "response.reasoning_summary_text.delta",
                    with(at.clone(), json!({"delta": delta})),
                );
            }
            events.push(
                "response.reasoning_summary_text.done",
                with(at.clone(), json!({"text": text})),
            );
            events.push(
                "response.reasoning_summary_part.done",
                with(at, json!({"part": {"type": "summary_text", "text": text}})),
            );
        }
        let item = reasoning_item_json(
            &item_id,
            &reasoning.summary,
            reasoning.encrypted_content.as_deref(),
        );
        events.push_raw_item("response.output_item.done", index, &item);
        output.push(serde_json::from_str(&item).unwrap_or(Value::Null));
    }
    let deltas = step.text_deltas();
    if !deltas.is_empty() {
        let index = output.len();
        let item_id = format!("msg_mock_{n}");
        events.push(
            "response.output_item.added",
            json!({"output_index": index, "item": {"id": item_id, "type": "message",
                   "status": "in_progress", "role": "assistant", "content": []}}),
        );
        for delta in &deltas {
            events.push(
                "response.output_text.delta",
                json!({"item_id": item_id, "output_index": index, "content_index": 0,
                       "delta": delta, "logprobs": []}),
            );
        }
        let text = deltas.concat();
        events.push(
            "response.output_text.done",
            json!({"item_id": item_id, "output_index": index, "content_index": 0, "text": text}),
        );
        let item = json!({"id": item_id, "type": "message", "status": "completed",
                          "role": "assistant",
                          "content": [{"type": "output_text", "text": text, "annotations": []}]});
        events.push("response.output_item.done", json!({"output_index": index, "item": item}));
        output.push(item);
    }
    for (i, call) in step.tool_calls.iter().enumerate() {
        let index = output.len();
        let item_id = format!("fc_mock_{n}_{i}");
        let call_id = call.id.clone().unwrap_or_else(|| format!("call_mock_{n}_{i}"));
        let arguments = call.arguments();
        events.push(
            "response.output_item.added",
            json!({"output_index": index, "item": {"id": item_id, "type": "function_call",
                   "status": "in_progress", "call_id": call_id, "name": call.name,
                   "arguments": ""}}),
        );
        for piece in split_pieces(&arguments) {
            events.push(
                "response.function_call_arguments.delta",
                json!({"item_id": item_id, "output_index": index, "delta": piece}),
            );
        }
        events.push(
            "response.function_call_arguments.done",
            json!({"item_id": item_id, "output_index": index, "arguments": arguments}),
        );
        let item = json!({"id": item_id, "type": "function_call", "status": "completed",
                          "call_id": call_id, "name": call.name, "arguments": arguments});
        events.push("response.output_item.done", json!({"output_index": index, "item": item}));
        output.push(item);
    }
    let usage = json!({
        "input_tokens": usage.input_tokens,
        "input_tokens_details": {"cached_tokens": usage.cache_read_tokens},
        "output_tokens": usage.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": usage.input_tokens + usage.output_tokens,
    });
    let (kind, mut last) = match step.stop_reason().as_str() {
        "end_turn" | "stop_sequence" | "tool_use" => {
            ("response.completed", response("completed", &output))
        }
        other => {
            let reason = if other == "max_tokens" { "max_output_tokens" } else { other };
            let mut incomplete = response("incomplete", &output);
            incomplete["incomplete_details"] = json!({"reason": reason});
            ("response.incomplete", incomplete)
        }
    };
    last["usage"] = usage;
    events.push(kind, json!({"response": last}));
    events.frames
}
