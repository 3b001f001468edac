use outboard_shared::SessionEvent;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

use super::*;

fn ctx() -> Context {
    Context {
        session_id: "s_1".into(),
        model: "anthropic/claude-opus-4-5".into(),
        cwd: "/work".into(),
        permission_mode: "default",
    }
}

fn event(seq: u64, kind: Value) -> SessionEvent {
    let mut v = json!({"session_id": "s_1", "seq": seq, "ts": "2025-01-01T00:00:00.000Z"});
    for (k, x) in kind.as_object().unwrap() {
        v[k] = x.clone();
    }
    serde_json::from_value(v).unwrap()
}

/// Drops the fields that change from run to run.
fn stable(mut v: Value) -> Value {
    if let Some(o) = v.as_object_mut() {
        o.remove("uuid");
        o.remove("duration_ms");
        o.remove("duration_api_ms");
    }
    v
}

#[test]
fn a_turn_with_a_tool_call_in_claude_codes_shapes() {
    let ctx = ctx();
    let mut turn = Turn::new(&ctx);
    let mut out = Vec::new();
    let usage = json!({"input_tokens": 1000, "output_tokens": 100, "cache_read_tokens": 400});
    let events = [
        event(1, json!({"type": "turn_started", "turn_id": "t_1", "by": "alice"})),
        event(2, json!({"type": "assistant_delta", "text": "Let"})),
        event(
            2,
            json!({"type": "assistant_message", "text": "Let me look.", "usage": usage,
            "model": "anthropic/claude-opus-4-5",
            "tool_calls": [{"call_id": "c1", "name": "Read", "input": {"file_path": "a"}}]}),
        ),
        event(3, json!({"type": "tool_result", "call_id": "c1", "name": "Read", "output": "x"})),
        event(4, json!({"type": "assistant_message", "text": "Done.", "tool_calls": []})),
    ];
    for e in &events {
        assert!(!turn.on_event(&ctx, e, true, &mut out));
    }
    let done = event(
        5,
        json!({"type": "turn_completed", "turn_id": "t_1",
        "stop_reason": "end_turn", "usage": usage}),
    );
    assert!(turn.on_event(&ctx, &done, true, &mut out));
    let types: Vec<&str> = out.iter().map(|m| m["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "system",
            "stream_event",
            "stream_event",
            "stream_event",
            "stream_event",
            "stream_event",
            "assistant",
            "user",
            "assistant",
            "result"
        ]
    );
    assert_eq!(out[0]["session_id"], "s_1");
    assert_eq!(out[0]["model"], "claude-opus-4-5");
    assert_eq!(out[3]["event"]["delta"], json!({"type": "text_delta", "text": "Let"}));
    assert_eq!(
        stable(out[6].clone()),
        json!({
            "type": "assistant",
            "message": {
                "id": "msg_2", "type": "message", "role": "assistant",
                "model": "claude-opus-4-5",
                "content": [
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "c1", "name": "Read", "input": {"file_path": "a"}},
                ],
                "stop_reason": "tool_use",
                "usage": {"input_tokens": 600, "output_tokens": 100,
                    "cache_read_input_tokens": 400, "cache_creation_input_tokens": 0},
            },
            "parent_tool_use_id": null,
            "session_id": "s_1",
        })
    );
    assert_eq!(
        stable(out[7].clone()),
        json!({"type": "user", "message": {"role": "user", "content": [{"type": "tool_result",
            "tool_use_id": "c1", "content": "x", "is_error": false}]},
            "parent_tool_use_id": null, "session_id": "s_1"})
    );
    // 600 uncached at $5, 100 out at $25, 400 cached at $0.5 per million.
    let per = |tokens: f64, price: f64| tokens * price / 1_000_000.0;
    let cost = per(600.0, 5.0) + per(100.0, 25.0) + per(400.0, 0.5);
    assert_eq!(
        stable(out[9].clone()),
        json!({
            "type": "result", "subtype": "success", "is_error": false, "num_turns": 2,
            "result": "Done.", "session_id": "s_1", "total_cost_usd": cost,
            "usage": {"input_tokens": 600, "output_tokens": 100,
                "cache_read_input_tokens": 400, "cache_creation_input_tokens": 0},
            "modelUsage": {}, "permission_denials": [], "errors": [],
        })
    );
}

#[test]
fn interrupted_failed_and_cut_turns() {
    let ctx = ctx();
    let stopped = event(
        2,
        json!({"type": "turn_completed", "turn_id": "t_1",
        "stop_reason": "interrupted", "usage": {}}),
    );
    let mut out = Vec::new();
    assert!(Turn::new(&ctx).on_event(&ctx, &stopped, false, &mut out));
    assert_eq!(out[1]["message"]["content"][0]["text"], INTERRUPTED);
    assert_eq!(
        (&out[2]["subtype"], &out[2]["is_error"]),
        (&json!("error_during_execution"), &json!(true))
    );

    let mut cut = Turn::new(&ctx);
    cut.cut = Cut::MaxTurns;
    let mut out = Vec::new();
    assert!(cut.on_event(&ctx, &stopped, false, &mut out));
    let kinds: Vec<&str> = out.iter().map(|m| m["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["system", "result"]);
    assert_eq!(out[1]["subtype"], "error_max_turns");

    let failed =
        event(2, json!({"type": "turn_failed", "turn_id": "t_1", "error": "the model is gone"}));
    let mut out = Vec::new();
    assert!(Turn::new(&ctx).on_event(&ctx, &failed, false, &mut out));
    assert_eq!(out[1]["errors"], json!(["the model is gone"]));
}

#[test]
fn a_subagents_messages_name_their_task_and_do_not_count() {
    let ctx = ctx();
    let mut turn = Turn::new(&ctx);
    let mut e = event(2, json!({"type": "assistant_message", "text": "sub", "tool_calls": []}));
    e.parent = Some("task_1".into());
    let mut out = Vec::new();
    turn.on_event(&ctx, &e, false, &mut out);
    assert_eq!(out[1]["parent_tool_use_id"], "task_1");
    assert_eq!(turn.answers, 0);
}
