//! A turn's session events as Claude Code's messages: `system` `init` when the turn starts,
//! `assistant` for each of the model's answers (text and `tool_use` blocks), `user` for each tool
//! result, `stream_event`s for the text as it streams (with `--include-partial-messages`), and
//! the `result` when the turn ends, with its counts, usage and cost.
//!
//! [`Turn`] is a pure state machine over the events (no I/O), so every mapping is unit-tested;
//! the session loop writes what it returns.

use std::time::Instant;

use outboard_client::prices::PriceTable;
use outboard_shared::{EventKind, SessionEvent, StopReason, Usage};
use serde_json::{json, Value};

use super::wire::{self, PROTOCOL_VERSION};

/// Outboard's built-in tools as the `init` message lists them (the org's MCP tools and
/// `WebSearch`, when the org offers them, come on top).
pub const TOOLS: &[&str] = &[
    "Task",
    "Bash",
    "BashOutput",
    "KillShell",
    "Glob",
    "Grep",
    "Read",
    "Edit",
    "Write",
    "NotebookEdit",
    "TodoWrite",
    "WebFetch",
    "ExitPlanMode",
    "AskUserQuestion",
];

/// What Claude Code writes into the conversation when a person interrupts a turn.
pub const INTERRUPTED: &str = "[Request interrupted by user]";

/// The session a turn runs in, as its messages name it.
#[derive(Debug, Clone)]
pub struct Context {
    /// The Outboard session id.
    pub session_id: String,
    /// The model, `provider/model` (its `model` part is what messages name).
    pub model: String,
    /// The workspace, as the `init` message names it.
    pub cwd: String,
    /// Claude Code's name of the permission mode.
    pub permission_mode: &'static str,
}

/// Why a turn was cut short by this front end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Not cut (or interrupted by the program).
    No,
    /// `--max-turns` was reached.
    MaxTurns,
}

/// One prompt's turn, from its sending to its `result`.
#[derive(Debug)]
pub struct Turn {
    started: Instant,
    /// The model's answers so far (Claude Code's `num_turns`).
    pub answers: u32,
    last_text: String,
    usage: Usage,
    model: String,
    streaming: bool,
    init_sent: bool,
    /// Calls denied by this front end or the program: `permission_denials`.
    pub denials: Vec<Value>,
    /// Why this front end cut the turn.
    pub cut: Cut,
}

/// A model label's model part (`anthropic/claude-x` → `claude-x`).
fn model_part(label: &str) -> &str {
    label.split_once('/').map_or(label, |(_, m)| m)
}

impl Turn {
    /// A turn whose prompt was just sent.
    pub fn new(ctx: &Context) -> Turn {
        Turn {
            started: Instant::now(),
            answers: 0,
            last_text: String::new(),
            usage: Usage::default(),
            model: ctx.model.clone(),
            streaming: false,
            init_sent: false,
            denials: Vec::new(),
            cut: Cut::No,
        }
    }

    /// The `system` `init` message (once per turn, before its first other message).
    pub fn init(&mut self, ctx: &Context) -> Option<Value> {
        if self.init_sent {
            return None;
        }
        self.init_sent = true;
        Some(json!({
            "type": "system",
            "subtype": "init",
            "session_id": ctx.session_id,
            "cwd": ctx.cwd,
            "tools": TOOLS,
            "mcp_servers": [],
            "model": model_part(&ctx.model),
            "permissionMode": ctx.permission_mode,
            "slash_commands": [],
            "apiKeySource": "none",
            "output_style": "default",
            "agents": [],
            "claude_code_version": PROTOCOL_VERSION,
            "outboard_version": env!("CARGO_PKG_VERSION"),
            "uuid": wire::uuid(),
        }))
    }

    /// The messages one session event makes; `partial` asks for `stream_event`s. Returns
    /// whether the event ends the turn (its `result` is then among the messages).
    pub fn on_event(
        &mut self,
        ctx: &Context,
        event: &SessionEvent,
        partial: bool,
        out: &mut Vec<Value>,
    ) -> bool {
        let sid = ctx.session_id.as_str();
        let parent = event.parent.as_deref();
        match &event.kind {
            EventKind::TurnStarted { .. } if parent.is_none() => out.extend(self.init(ctx)),
            EventKind::AssistantDelta { text } if partial && parent.is_none() => {
                out.extend(self.init(ctx));
                if !self.streaming {
                    self.streaming = true;
                    let start = json!({"type": "message_start", "message": {
                        "id": wire::uuid(), "type": "message", "role": "assistant",
                        "model": model_part(&self.model), "content": [],
                    }});
                    out.push(stream_event(sid, start));
                    let block = json!({"type": "content_block_start", "index": 0,
                        "content_block": {"type": "text", "text": ""}});
                    out.push(stream_event(sid, block));
                }
                let delta = json!({"type": "content_block_delta", "index": 0,
                    "delta": {"type": "text_delta", "text": text}});
                out.push(stream_event(sid, delta));
            }
            EventKind::AssistantMessage { text, tool_calls, usage, model, .. } => {
                out.extend(self.init(ctx));
                if parent.is_none() {
                    if self.streaming {
                        self.streaming = false;
                        out.push(stream_event(
                            sid,
                            json!({"type": "content_block_stop", "index": 0}),
                        ));
                        out.push(stream_event(sid, json!({"type": "message_stop"})));
                    }
                    self.answers += 1;
                    if let Some(u) = usage {
                        self.usage.add(*u);
                    }
                    if let Some(m) = model {
                        self.model = m.clone();
                    }
                    if !text.is_empty() {
                        self.last_text = text.clone();
                    }
                }
                let mut content = Vec::new();
                if !text.is_empty() {
                    content.push(json!({"type": "text", "text": text}));
                }
                for call in tool_calls {
                    content.push(json!({"type": "tool_use", "id": call.call_id,
                        "name": call.name, "input": call.input}));
                }
                let stop = if tool_calls.is_empty() { "end_turn" } else { "tool_use" };
                let label = model.as_deref().unwrap_or(&self.model);
                out.push(json!({
                    "type": "assistant",
                    "message": {
                        "id": format!("msg_{}", event.seq),
                        "type": "message",
                        "role": "assistant",
                        "model": model_part(label),
                        "content": content,
                        "stop_reason": stop,
                        "usage": wire::usage(&usage.unwrap_or_default()),
                    },
                    "parent_tool_use_id": parent,
                    "session_id": sid,
                    "uuid": wire::uuid(),
                }));
            }
            EventKind::ToolResult { call_id, output, is_error, .. } => {
                out.extend(self.init(ctx));
                out.push(json!({
                    "type": "user",
                    "message": {"role": "user", "content": [{
                        "type": "tool_result", "tool_use_id": call_id,
                        "content": output, "is_error": is_error,
                    }]},
                    "parent_tool_use_id": parent,
                    "session_id": sid,
                    "uuid": wire::uuid(),
                }));
            }
            EventKind::TurnCompleted { stop_reason, usage, .. } if parent.is_none() => {
                out.extend(self.init(ctx));
                self.usage = *usage;
                let interrupted = *stop_reason == StopReason::Interrupted;
                if interrupted && self.cut == Cut::No {
                    out.push(json!({
                        "type": "user",
                        "message": {"role": "user", "content": [{"type": "text", "text": INTERRUPTED}]},
                        "parent_tool_use_id": null,
                        "session_id": sid,
                        "uuid": wire::uuid(),
                    }));
                }
                let (subtype, is_error, result) = match (interrupted, self.cut) {
                    (false, _) => ("success", false, self.last_text.clone()),
                    (true, Cut::MaxTurns) => ("error_max_turns", true, String::new()),
                    (true, Cut::No) => ("error_during_execution", true, INTERRUPTED.to_owned()),
                };
                out.push(self.result(ctx, subtype, is_error, &result, None));
                return true;
            }
            EventKind::TurnFailed { error, .. } if parent.is_none() => {
                out.extend(self.init(ctx));
                out.push(self.result(ctx, "error_during_execution", true, error, Some(error)));
                return true;
            }
            _ => {}
        }
        false
    }

    /// The turn's `result` message.
    pub fn result(
        &self,
        ctx: &Context,
        subtype: &str,
        is_error: bool,
        result: &str,
        error: Option<&str>,
    ) -> Value {
        let ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        let cost = PriceTable::default().price(&self.model).map_or(0.0, |p| p.cost(&self.usage));
        json!({
            "type": "result",
            "subtype": subtype,
            "is_error": is_error,
            "duration_ms": ms,
            "duration_api_ms": ms,
            "num_turns": self.answers,
            "result": result,
            "session_id": ctx.session_id,
            "total_cost_usd": cost,
            "usage": wire::usage(&self.usage),
            "modelUsage": {},
            "permission_denials": self.denials,
            "errors": error.map(|e| vec![e.to_owned()]).unwrap_or_default(),
            "uuid": wire::uuid(),
        })
    }
}

fn stream_event(session_id: &str, event: Value) -> Value {
    json!({
        "type": "stream_event",
        "uuid": wire::uuid(),
        "session_id": session_id,
        "event": event,
        "parent_tool_use_id": null,
    })
}

#[cfg(test)]
mod tests;
