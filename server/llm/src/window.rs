//! The context window of a model no table knows, asked of the server that runs it: a local model
//! behind an OpenAI- or Anthropic-compatible server, or a gateway's alias, has whatever window
//! that server was started with or was configured for, which no model name tells. Each says it
//! its own way:
//!
//! - llama.cpp: `GET /props`, `default_generation_settings.n_ctx` (recent builds; `n_ctx` at the
//!   top level in some others) — also behind its Anthropic-compatible `/v1/messages`;
//! - vLLM: `GET /v1/models`, the `max_model_len` of the entry whose `id` is the model; gateways
//!   and hosted routers that list windows there (OpenRouter, Together, Groq) say `context_length`
//!   or `context_window` in the same entry;
//! - Ollama: `POST /api/show` with the model's name, `num_ctx` of its `parameters` when the
//!   model was given one (what Ollama runs it with), else the `model_info` key ending in
//!   `.context_length` (what the model was trained for);
//! - LM Studio: `GET /api/v0/models/{model}`, `loaded_context_length` when it is loaded, else
//!   `max_context_length`;
//! - LiteLLM's proxy: `GET /model/info`, the `model_info.max_input_tokens` of the entry whose
//!   `model_name` is the model.
//!
//! All are asked at once with a short timeout ([`PROBE_TIMEOUT`]); the first dialect in that
//! order that answers wins. The vendors' hosted APIs ([`is_hosted`]) are not asked: none of
//! these answers there, and the model table knows their models. The answer is remembered per
//! base URL and model ([`WindowCache`]), so a server is asked once, not per session. A probe that
//! fails leaves the model at its API's usual window
//! ([`crate::context::provider_default_window`], stated as a guess) and is tried again after
//! [`RETRY_FAILED_AFTER`]; nothing fails because of it.

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
    /// A gateway or router whose `/v1/models` gives `context_length` (OpenRouter, Together…).
    ModelList,
    /// Ollama.
    Ollama,
    /// LM Studio's REST API.
    LmStudio,
    /// LiteLLM's proxy.
    LiteLlm,
}

impl Dialect {
    /// Where the window came from, for the log and `models/list`.
    pub fn source(self) -> &'static str {
        match self {
            Dialect::LlamaCpp => "llama.cpp /props",
            Dialect::Vllm => "vLLM /v1/models",
            Dialect::ModelList => "the server's /v1/models",
            Dialect::Ollama => "Ollama /api/show",
            Dialect::LmStudio => "LM Studio /api/v0/models",
            Dialect::LiteLlm => "LiteLLM /model/info",
        }
    }
}

/// Whether `base_url` is a vendor's hosted API, which none of the probes answers (its models are
/// in the model table).
pub fn is_hosted(base_url: &str) -> bool {
    let host = base_url.split("://").nth(1).unwrap_or(base_url);
    let host = host.split(['/', ':']).next().unwrap_or(host);
    matches!(host, "api.anthropic.com" | "api.openai.com")
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
    model_entry(body, model)?.get("max_model_len")?.as_u64().filter(|n| *n > 0)
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

/// The `/v1/models` entry of `model`, by `id` (or vLLM's `root`).
fn model_entry<'a>(body: &'a Value, model: &str) -> Option<&'a Value> {
    body.get("data")?.as_array()?.iter().find(|m| {
        m.get("id").and_then(Value::as_str) == Some(model)
            || m.get("root").and_then(Value::as_str) == Some(model)
    })
}

/// A gateway's `/v1/models`: the `context_length` (OpenRouter, Together) or `context_window`
/// (Groq) of the entry whose `id` is `model`.
pub fn parse_model_list(body: &Value, model: &str) -> Option<u64> {
    let entry = model_entry(body, model)?;
    entry
        .get("context_length")
        .or_else(|| entry.get("context_window"))
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
}

/// LM Studio's `/api/v0/models/{model}`: `loaded_context_length` (what it runs with), else
/// `max_context_length` (what the model takes).
pub fn parse_lmstudio_model(body: &Value) -> Option<u64> {
    body.get("loaded_context_length")
        .and_then(Value::as_u64)
        .filter(|n| *n > 0)
        .or_else(|| body.get("max_context_length").and_then(Value::as_u64))
        .filter(|n| *n > 0)
}

/// LiteLLM's `/model/info`: `model_info.max_input_tokens` of the entry whose `model_name` is
/// `model`.
pub fn parse_litellm_info(body: &Value, model: &str) -> Option<u64> {
    body.get("data")?
        .as_array()?
        .iter()
        .find(|m| m.get("model_name").and_then(Value::as_str) == Some(model))?
        .pointer("/model_info/max_input_tokens")?
        .as_u64()
        .filter(|n| *n > 0)
}

/// The server's root under a base URL: an OpenAI-style one ends in `/v1`
/// (`http://host:11434/v1` → `http://host:11434`), an Anthropic-style one is the root already.
fn root_of(base_url: &str) -> &str {
    let base = base_url.trim_end_matches('/');
    base.strip_suffix("/v1").unwrap_or(base)
}

/// Asks the server behind `llm` for its window in every dialect at once: the window and who
/// said it, or `None` when none answered within [`PROBE_TIMEOUT`].
pub async fn probe(llm: &LlmConfig) -> Option<(u64, Dialect)> {
    let http = reqwest::Client::builder().timeout(PROBE_TIMEOUT).build().ok()?;
    let root = root_of(&llm.base_url);
    let get_json = |req: reqwest::RequestBuilder| {
        let req = match (&llm.api_key, llm.kind) {
            (Some(key), crate::ProviderKind::Anthropic) => req.header("x-api-key", key.expose()),
            (Some(key), _) => req.bearer_auth(key.expose()),
            (None, _) => req,
        };
        async move {
            let resp = req.send().await.ok()?.error_for_status().ok()?;
            if resp.content_length().is_some_and(|n| n > MAX_PROBE_BODY as u64) {
                return None;
            }
            let body = resp.bytes().await.ok()?;
            (body.len() <= MAX_PROBE_BODY).then_some(())?;
            serde_json::from_slice::<Value>(&body).ok()
        }
    };
    let model = llm.model.as_str();
    let (props, models, show, lmstudio, litellm) = tokio::join!(
        get_json(http.get(format!("{root}/props"))),
        get_json(http.get(format!("{root}/v1/models"))),
        get_json(
            http.post(format!("{root}/api/show")).json(&serde_json::json!({ "model": model }))
        ),
        get_json(http.get(format!("{root}/api/v0/models/{}", path_segment(model)))),
        get_json(http.get(format!("{root}/model/info"))),
    );
    let found = [
        (props.as_ref().and_then(parse_llamacpp_props), Dialect::LlamaCpp),
        (models.as_ref().and_then(|b| parse_vllm_models(b, model)), Dialect::Vllm),
        (models.as_ref().and_then(|b| parse_model_list(b, model)), Dialect::ModelList),
        (show.as_ref().and_then(parse_ollama_show), Dialect::Ollama),
        (lmstudio.as_ref().and_then(parse_lmstudio_model), Dialect::LmStudio),
        (litellm.as_ref().and_then(|b| parse_litellm_info(b, model)), Dialect::LiteLlm),
    ];
    found.into_iter().find_map(|(window, dialect)| Some((window?, dialect)))
}

/// The most bytes of a probe's answer read (a gateway's `/v1/models` or `/model/info` lists
/// every model it routes: a few hundred entries of a few hundred bytes).
pub const MAX_PROBE_BODY: usize = 4 << 20;

/// `model` as one URL path segment (LM Studio's ids hold `/`: `lmstudio-community/qwen…`).
fn path_segment(model: &str) -> String {
    model
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Probed windows by base URL and model: found ones for good, failures for
/// [`RETRY_FAILED_AFTER`]; at most [`WINDOW_CACHE_ENTRIES`] (the oldest is forgotten first).
#[derive(Debug, Default)]
pub struct WindowCache {
    entries: Mutex<Entries>,
}

/// (base URL, model) → the window said and who said it (`None`: the probe failed), and when.
type Entries = HashMap<(String, String), (Option<(u64, Dialect)>, Instant)>;

/// What the cache knows of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cached {
    /// The server said this window, in this dialect.
    Window(u64, Dialect),
    /// A probe failed lately: use the API's usual window, do not ask again yet.
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
            Some((Some((window, dialect)), _)) => Cached::Window(*window, *dialect),
            Some((None, at)) if at.elapsed() < RETRY_FAILED_AFTER => Cached::Failed,
            _ => Cached::Unknown,
        }
    }

    /// Remembers a probe's outcome.
    pub fn put(&self, base_url: &str, model: &str, window: Option<(u64, Dialect)>) {
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
