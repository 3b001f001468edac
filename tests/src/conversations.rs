//! A mock model that answers several conversations at once, each from its own script: the
//! conversation is known by its first user message (a session's first prompt, a subagent's
//! `Task` prompt), and its step by how many assistant messages the request already carries. So
//! concurrent subagents get their own next step whatever order their requests arrive in, and a
//! conversation resumed after a crash goes on where its log stands. Used by
//! `tests/tests/e2e/subagents.rs` and `bench_tasks`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::mock_llm::{MockLlm, MockStep};

/// The text of the first user message of a request body (Anthropic's dialect), or empty.
pub fn first_user_text(body: &Value) -> String {
    let Some(first) = body["messages"].as_array().and_then(|m| m.first()) else {
        return String::new();
    };
    match &first["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => {
            blocks.iter().filter_map(|b| b["text"].as_str()).collect::<Vec<_>>().join("")
        }
        _ => String::new(),
    }
}

/// How many assistant messages a request carries: the number of the step it asks for.
pub fn step_of(body: &Value) -> usize {
    body["messages"].as_array().map_or(0, |m| m.iter().filter(|m| m["role"] == "assistant").count())
}

/// A conversation's key (the start of its first user message) and its steps.
type Script = (String, Vec<MockStep>);

/// The scripts, by the start of their conversation's first user message.
#[derive(Clone, Default)]
pub struct Scripts {
    scripts: Arc<Mutex<Vec<Script>>>,
    /// How many times each (conversation, step) was asked, for steps that answer differently
    /// the first time (see [`Scripts::first_time`]).
    asked: Arc<Mutex<HashMap<(String, usize), usize>>>,
    /// Steps answered with this one the first time only.
    first: Arc<Mutex<HashMap<(String, usize), MockStep>>>,
}

impl Scripts {
    /// Adds the script of the conversation whose first user message starts with `key`.
    pub fn add(&self, key: &str, steps: Vec<MockStep>) {
        if let Ok(mut s) = self.scripts.lock() {
            s.push((key.to_owned(), steps));
        }
    }

    /// Answers step `step` of conversation `key` with `step_once` the first time it is asked
    /// (e.g. a slow answer the test kills the server during), with the script afterwards.
    pub fn first_time(&self, key: &str, step: usize, step_once: MockStep) {
        if let Ok(mut f) = self.first.lock() {
            f.insert((key.to_owned(), step), step_once);
        }
    }

    /// The answer to `body`; `None` (the mock answers 500) for a conversation without a script
    /// or past its end.
    pub fn answer(&self, body: &Value) -> Option<MockStep> {
        let text = first_user_text(body);
        let step = step_of(body);
        let scripts = self.scripts.lock().ok()?;
        let (key, steps) = scripts.iter().find(|(k, _)| text.starts_with(k.as_str()))?;
        let id = (key.clone(), step);
        let times = {
            let mut asked = self.asked.lock().ok()?;
            let n = asked.entry(id.clone()).or_default();
            *n += 1;
            *n
        };
        if times == 1 {
            if let Some(once) = self.first.lock().ok()?.remove(&id) {
                return Some(once);
            }
        }
        steps.get(step).cloned()
    }

    /// How many times step `step` of `key` was asked.
    pub fn asked(&self, key: &str, step: usize) -> usize {
        self.asked.lock().map_or(0, |a| a.get(&(key.to_owned(), step)).copied().unwrap_or(0))
    }

    /// A mock model on `127.0.0.1:0` answering from these scripts.
    pub async fn start(&self) -> anyhow::Result<MockLlm> {
        let scripts = self.clone();
        MockLlm::start_responder(move |body| scripts.answer(body)).await
    }
}
