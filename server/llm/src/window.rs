//! The context window of a model no table knows, asked of the server that runs it: a local model
//! behind an OpenAI-compatible server (llama.cpp, vLLM, Ollama) has whatever window that server
//! was started with, which no model name tells. Each of the three says it its own way:
//!
//! - llama.cpp: `GET /props`, `default_generation_settings.n_ctx` (recent builds; `n_ctx` at the
//!   top level in some others);
//! - vLLM: `GET /v1/models`, the `max_model_len` of the entry whose `id` is the model;
//! - Ollama: `POST /api/show` with the model's name, `num_ctx` of its `parameters` when the
//!   model was given one (what Ollama runs it with), else the `model_info` key ending in
//!   `.context_length` (what the model was trained for).
//!
//! All three are asked at once with a short timeout ([`PROBE_TIMEOUT`]); the first dialect in
//! that order that answers wins. The answer is remembered per base URL and model
//! ([`WindowCache`]), so a server is asked once, not per session. A probe that fails leaves the
//! model at [`crate::context::DEFAULT_CONTEXT_WINDOW`] (and is tried again after
//! [`RETRY_FAILED_AFTER`]); nothing fails because of it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::config::LlmConfig;

/// How long each probe request may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Base URL and model pairs remembered, at most (a server has a handful of models).
pub const WINDOW_CACHE_ENTRIES: usize = 256;

/// How long a failed probe is remembered before the server is asked again (it may have been
/// starting).
pub const RETRY_FAILED_AFTER: Duration = Duration::from_secs(60);

/// Which server answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// llama.cpp's `llama-server`.
    LlamaCpp,
    /// vLLM's OpenAI-compatible server.
    Vllm,
    /// Ollama.
    Ollama,
}

impl Dialect {
    /// Where the window came from, for the log.
    pub fn source(self) -> &'static str {
        match self {
            Dialect::LlamaCpp => "llama.cpp /props",
            Dialect::Vllm => "vLLM /v1/models",
            Dialect::Ollama => "Ollama /api/show",
        }
    }
}

/// llama.cpp's `/props`: `default_generation_settings.n_ctx`, or a top-level `n_ctx`.
pub fn parse_llamacpp_props(body: &Value) -> Option<u64> {
    body.pointer("/default_generation_settings/n_ctx")
        .or_else(|| body.get("n_ctx"))
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
}

/// vLLM's `/v1/models`: the `max_model_len` of the entry whose `id` (or `root`) is `model`.
pub fn parse_vllm_models(body: &Value, model: &str) -> Option<u64> {
    body.get("data")?
        .as_array()?
        .iter()
        .find(|m| {
            m.get("id").and_then(Value::as_str) == Some(model)
                || m.get("root").and_then(Value::as_str) == Some(model)
        })?
        .get("max_model_len")?
        .as_u64()
        .filter(|n| *n > 0)
}

/// Ollama's `/api/show`: `num_ctx` in `parameters` (a text of `name value` lines), else the
/// `model_info` key ending in `.context_length`.
pub fn parse_ollama_show(body: &Value) -> Option<u64> {
    let num_ctx = body.get("parameters").and_then(Value::as_str).and_then(|params| {
        params.lines().find_map(|line| {
            let mut words = line.split_whitespace();
            (words.next() == Some("num_ctx")).then(|| words.next()?.parse::<u64>().ok())?
        })
    });
    let trained = || {
        body.get("model_info")?
            .as_object()?
            .iter()
            .find(|(k, _)| k.ends_with(".context_length"))?
            .1
            .as_u64()
    };
    num_ctx.or_else(trained).filter(|n| *n > 0)
}

/// The server's root under an OpenAI-style base URL (`http://host:11434/v1` → `http://host:11434`).
fn root_of(base_url: &str) -> &str {
    let base = base_url.trim_end_matches('/');
    base.strip_suffix("/v1").unwrap_or(base)
}

/// Asks the server behind `llm` for its window in the three dialects at once: the window and
/// who said it, or `None` when none answered within [`PROBE_TIMEOUT`].
pub async fn probe(llm: &LlmConfig) -> Option<(u64, Dialect)> {
    let http = reqwest::Client::builder().timeout(PROBE_TIMEOUT).build().ok()?;
    let root = root_of(&llm.base_url);
    let get_json = |req: reqwest::RequestBuilder| {
        let req = match &llm.api_key {
            Some(key) => req.bearer_auth(key.expose()),
            None => req,
        };
        async move {
            let resp = req.send().await.ok()?.error_for_status().ok()?;
            serde_json::from_slice::<Value>(&resp.bytes().await.ok()?).ok()
        }
    };
    let model = llm.model.as_str();
    let (props, models, show) = tokio::join!(
        get_json(http.get(format!("{root}/props"))),
        get_json(http.get(format!("{root}/v1/models"))),
        get_json(
            http.post(format!("{root}/api/show")).json(&serde_json::json!({ "model": model }))
        ),
    );
    props
        .as_ref()
        .and_then(parse_llamacpp_props)
        .map(|n| (n, Dialect::LlamaCpp))
        .or_else(|| {
            models.as_ref().and_then(|b| parse_vllm_models(b, model)).map(|n| (n, Dialect::Vllm))
        })
        .or_else(|| show.as_ref().and_then(parse_ollama_show).map(|n| (n, Dialect::Ollama)))
}

/// Probed windows by base URL and model: found ones for good, failures for
/// [`RETRY_FAILED_AFTER`]; at most [`WINDOW_CACHE_ENTRIES`] (the oldest is forgotten first).
#[derive(Debug, Default)]
pub struct WindowCache {
    entries: Mutex<Entries>,
}

/// (base URL, model) → the window said (`None`: the probe failed) and when.
type Entries = HashMap<(String, String), (Option<u64>, Instant)>;

/// What the cache knows of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cached {
    /// The server said this window.
    Window(u64),
    /// A probe failed lately: use the default, do not ask again yet.
    Failed,
    /// Nothing: probe.
    Unknown,
}

impl WindowCache {
    fn map(&self) -> std::sync::MutexGuard<'_, Entries> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What is known of `model` at `base_url`.
    pub fn get(&self, base_url: &str, model: &str) -> Cached {
        match self.map().get(&(base_url.to_owned(), model.to_owned())) {
            Some((Some(window), _)) => Cached::Window(*window),
            Some((None, at)) if at.elapsed() < RETRY_FAILED_AFTER => Cached::Failed,
            _ => Cached::Unknown,
        }
    }

    /// Remembers a probe's outcome.
    pub fn put(&self, base_url: &str, model: &str, window: Option<u64>) {
        let mut map = self.map();
        if map.len() >= WINDOW_CACHE_ENTRIES {
            if let Some(oldest) = map.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| k.clone())
            {
                map.remove(&oldest);
            }
        }
        map.insert((base_url.to_owned(), model.to_owned()), (window, Instant::now()));
    }

    /// How many pairs it holds.
    pub fn len(&self) -> usize {
        self.map().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests;
