//! The mock LLM server: a real axum HTTP server on loopback that speaks the Anthropic Messages,
//! OpenAI Chat Completions and OpenAI Responses *streaming* wire formats, answering from a script
//! (the Responses dialect lives in `mock_responses`, the steps themselves in `mock_step`).
//!
//! Why a real server rather than a fake provider: the provider code under test is mostly wire
//! handling (SSE framing, chunk assembly, status codes, cut connections), and only real HTTP
//! exercises it. The end-to-end suites and the `mock-llm` binary use the same script.
//!
//! A script is a queue of [`MockStep`]s consumed in request order, shared by both endpoints. When
//! it runs out the server answers 500 with a body saying `mock script exhausted`, so a test that
//! makes one call too many fails loudly. Every request is recorded ([`RecordedRequest`]).
//!
//! # Script JSON (the `mock-llm --script FILE` format)
//!
//! The file is either an array of steps or `{"steps": [...], "openai": {dialect}}` where the
//! dialect applies to every step (a step's own `openai` flags are OR-ed with it). A step is an
//! object; every field is optional:
//!
//! ```json
//! {
//!   "text": "Hello there",                 // reply text, streamed in several deltas (by word)
//!   "deltas": ["Hel", "lo"],               // or: the exact deltas (overrides the split of text)
//!   "tool_calls": [
//!     {"id": "toolu_1", "name": "Write", "input": {"path": "a.txt", "content": "x"}},
//!     {"name": "Read", "raw_input": "{\"path\": "}   // raw arguments text, e.g. invalid JSON
//!   ],
//!   "stop": "end_turn",                    // Anthropic stop_reason; default tool_use when there
//!                                          // are tool calls, else end_turn (mapped for OpenAI)
//!   "usage": {"input_tokens": 10, "output_tokens": 5},
//!   "status": 429,                         // a fault instead of a reply: this HTTP status…
//!   "retry_after": 1,                      // …with `retry-after: 1` (seconds)
//!   "retry_after_ms": 50,                  // …and/or `retry-after-ms: 50`
//!   "body": "{\"error\":…}",               // …and this body (default: the dialect's error JSON)
//!   "error_event": "overloaded_error",     // a 200 stream that sends an in-stream error event
//!   "cut_after": 3,                        // send this many SSE events, then drop the connection
//!   "latency_ms": 0,                       // delay before the response starts
//!   "chunk_delay_ms": 0,                   // delay between SSE events
//!   "thinking": "Let me look…",            // Anthropic: a thinking block first (signed; the
//!                                          // mock refuses it back changed, or missing in a
//!                                          // tool loop with thinking on, as the API does)
//!   "redacted_thinking": "EmwKAhgB…",      // Anthropic: a redacted_thinking block after it
//!   "server_blocks": [{"type": "server_tool_use", …}],  // Anthropic: server-tool blocks
//!   "openai_reasoning": [                  // Responses API reasoning items, before the text
//!     {"id": "rs_1", "summary": ["Plan."], "encrypted_content": "opaque"}
//!   ],
//!   "openai": {                            // OpenAI dialect knobs (see MockOpenAiDialect)
//!     "omit_usage": false, "omit_done": false, "args_in_one_chunk": false,
//!     "omit_tool_index": false, "empty_deltas": false, "reasoning": null,
//!     "finish_reason": null
//!   }
//! }
//! ```
//!
//! `GET /_mock/requests` returns the recorded requests as JSON.
//!
//! # Prompt-cache accounting
//!
//! The reported usage imitates each vendor's prompt cache, computed from the requests received,
//! with the server's own estimate (`outboard_server::llm::context::estimate_tokens`) turning
//! bytes into tokens. A step's `usage.input_tokens`, when scripted, is the prompt's size instead
//! of the estimate, and the cached parts are capped by it.
//! - Anthropic: the request's prefixes at its `cache_control` breakpoints (tools → system →
//!   messages, `cache_control` itself left out) are what gets cached, when at least the minimum
//!   cacheable length (`anthropic_min_cacheable`); `cache_read_input_tokens` is the longest such
//!   prefix an earlier request wrote, `cache_creation_input_tokens` the rest up to the last
//!   breakpoint, `input_tokens` what follows it. No breakpoint, no cache.
//! - OpenAI and Responses (automatic prefix caching, as OpenAI, llama.cpp and vLLM do):
//!   `prompt_tokens_details.cached_tokens` (Responses: `input_tokens_details.cached_tokens`) is
//!   the longest common byte prefix of the body with
//!   any of the last [`OPENAI_CACHE_BODIES`] bodies, so a byte that changes early costs the
//!   whole rest.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Context;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures_util::stream;
use outboard_server::llm::context::{anthropic_min_cacheable, estimate_tokens};
use outboard_shared::Usage;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::mock_step::{split_pieces, split_words};
pub use crate::mock_step::{MockOpenAiDialect, MockScript, MockStep, MockToolCall};

/// The signature the mock gives a thinking block of `text`, and demands back with it: a
/// request that changed the text or the signature is refused like the real API refuses one.
pub fn mock_signature(text: &str) -> String {
    format!("mocksig{:016x}", hash(text))
}

/// A request the mock received.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// `POST`, `GET`…
    pub method: String,
    /// The path, e.g. `/v1/messages`.
    pub path: String,
    /// The `x-api-key` header, when present.
    pub x_api_key: Option<String>,
    /// The `authorization` header, when present.
    pub authorization: Option<String>,
    /// The `anthropic-version` header, when present.
    pub anthropic_version: Option<String>,
    /// The `content-type` header, when present.
    pub content_type: Option<String>,
    /// The body as JSON (a JSON string holding the text when it was not JSON).
    pub body: Value,
    /// The body exactly as received, for byte-level comparisons (prefix stability).
    #[serde(default)]
    pub raw: String,
    /// The usage the mock reported for it (absent for a fault it answered instead).
    #[serde(default)]
    pub usage: Option<Usage>,
}

impl RecordedRequest {
    /// The system prompt's text: Anthropic's `system` as a string or as text blocks (joined),
    /// OpenAI's first `system` message.
    pub fn system_text(&self) -> String {
        let blocks = |v: &Value| match v {
            Value::String(text) => text.clone(),
            Value::Array(blocks) => blocks.iter().filter_map(|b| b["text"].as_str()).collect(),
            _ => String::new(),
        };
        match &self.body["system"] {
            Value::Null => self.body["messages"]
                .as_array()
                .and_then(|m| m.iter().find(|m| m["role"] == "system"))
                .map(|m| blocks(&m["content"]))
                .unwrap_or_default(),
            system => blocks(system),
        }
    }
}

/// How many earlier OpenAI bodies a new one is compared with for its cached prefix: several
/// sessions share one mock in the suites, so the previous request may be another session's; 16
/// covers the most sessions any suite runs at once.
pub const OPENAI_CACHE_BODIES: usize = 16;

/// How many Anthropic breakpoint prefixes (as hashes) the mock remembers, oldest forgotten
/// first: four per request, enough for the longest scripted turns of the suites.
pub const ANTHROPIC_CACHE_ENTRIES: usize = 16_384;

/// The mock's prompt caches (see the module header).
#[derive(Debug, Default)]
struct Caches {
    openai: VecDeque<Vec<u8>>,
    anthropic: std::collections::HashSet<u64>,
    anthropic_order: VecDeque<u64>,
}

impl Caches {
    /// `(total, read, write)` prompt tokens of an OpenAI body.
    fn openai(&mut self, raw: &[u8]) -> (u64, u64, u64) {
        let common = self
            .openai
            .iter()
            .map(|prev| prev.iter().zip(raw).take_while(|(a, b)| a == b).count())
            .max()
            .unwrap_or(0);
        if self.openai.len() == OPENAI_CACHE_BODIES {
            self.openai.pop_front();
        }
        self.openai.push_back(raw.to_vec());
        (estimate_tokens(raw.len()), estimate_tokens(common).min(estimate_tokens(raw.len())), 0)
    }

    /// `(total, read, write)` prompt tokens of an Anthropic body.
    fn anthropic(&mut self, body: &Value) -> (u64, u64, u64) {
        let min = anthropic_min_cacheable(body["model"].as_str().unwrap_or_default());
        let mut prefix = String::new();
        let mut points: Vec<(usize, u64)> = Vec::new();
        let add = |prefix: &mut String, piece: &Value, points: &mut Vec<(usize, u64)>| {
            let mut piece = piece.clone();
            let marked = piece.as_object_mut().and_then(|o| o.remove("cache_control")).is_some();
            prefix.push_str(&piece.to_string());
            if marked && estimate_tokens(prefix.len()) >= min {
                points.push((prefix.len(), hash(prefix)));
            }
        };
        for tool in body["tools"].as_array().into_iter().flatten() {
            add(&mut prefix, tool, &mut points);
        }
        match &body["system"] {
            Value::Array(blocks) => blocks.iter().for_each(|b| add(&mut prefix, b, &mut points)),
            Value::String(text) => prefix.push_str(text),
            _ => {}
        }
        for message in body["messages"].as_array().into_iter().flatten() {
            prefix.push_str(message["role"].as_str().unwrap_or_default());
            match &message["content"] {
                Value::Array(blocks) => {
                    blocks.iter().for_each(|b| add(&mut prefix, b, &mut points))
                }
                other => prefix.push_str(&other.to_string()),
            }
        }
        let total = estimate_tokens(prefix.len());
        let read = points
            .iter()
            .filter(|(_, h)| self.anthropic.contains(h))
            .map(|(len, _)| *len)
            .max()
            .unwrap_or(0);
        let last = points.last().map_or(0, |(len, _)| *len);
        for (_, h) in &points {
            if self.anthropic.insert(*h) {
                self.anthropic_order.push_back(*h);
            }
        }
        while self.anthropic_order.len() > ANTHROPIC_CACHE_ENTRIES {
            if let Some(old) = self.anthropic_order.pop_front() {
                self.anthropic.remove(&old);
            }
        }
        let read_tokens = estimate_tokens(read);
        (total, read_tokens, estimate_tokens(last).saturating_sub(read_tokens))
    }
}

fn hash(text: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

/// The usage reported for a request: the scripted output, the prompt's size (scripted or
/// estimated) and its cached parts, capped by it.
fn reported_usage(step: &MockStep, (total, read, write): (u64, u64, u64)) -> Usage {
    let output = step.usage.map_or(5, |u| u.output_tokens);
    let input = step.usage.map_or(total, |u| u.input_tokens);
    let read = read.min(input);
    let write = write.min(input - read);
    Usage {
        input_tokens: input,
        output_tokens: output,
        cache_read_tokens: read,
        cache_write_tokens: write,
    }
}

/// Script and records, shared by the handlers. A mutex is fine here: test traffic only, never
/// held across an await.
#[derive(Debug, Default)]
struct Shared {
    steps: VecDeque<MockStep>,
    responder: Option<Responder>,
    openai: MockOpenAiDialect,
    requests: Vec<RecordedRequest>,
    /// When each request of `requests` reached its handler (benchmarks time the gaps).
    arrivals: Vec<Instant>,
    served: u64,
    caches: Caches,
}

type SharedState = Arc<Mutex<Shared>>;

/// Answers a request from its body when the scripted queue is empty: for tests where the reply
/// depends on the conversation (many sessions at once, calls re-issued after a crash), so a
/// global queue cannot say which step comes next. `None` falls back to "script exhausted".
#[derive(Clone)]
pub struct Responder(pub Arc<RespondFn>);

/// The function behind a [`Responder`].
pub type RespondFn = dyn Fn(&Value) -> Option<MockStep> + Send + Sync;

impl std::fmt::Debug for Responder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Responder")
    }
}

fn lock(state: &SharedState) -> MutexGuard<'_, Shared> {
    // A panicking handler cannot leave `Shared` half-updated in a way that matters to a test.
    state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running mock LLM server; it stops when dropped.
#[derive(Debug)]
pub struct MockLlm {
    addr: SocketAddr,
    state: SharedState,
    window: crate::mock_window::Shared,
    task: JoinHandle<()>,
}

impl MockLlm {
    /// Starts a server on `127.0.0.1:0` answering with `steps`.
    pub async fn start(steps: Vec<MockStep>) -> anyhow::Result<MockLlm> {
        MockLlm::start_script(MockScript { steps, ..MockScript::default() }, "127.0.0.1:0").await
    }

    /// Starts a server on `listen` answering with `script`.
    pub async fn start_script(script: MockScript, listen: &str) -> anyhow::Result<MockLlm> {
        let listener =
            TcpListener::bind(listen).await.with_context(|| format!("while binding {listen}"))?;
        let addr = listener.local_addr().context("while reading the bound address")?;
        let state: SharedState = Arc::new(Mutex::new(Shared {
            steps: script.steps.into(),
            openai: script.openai,
            ..Shared::default()
        }));
        let window = crate::mock_window::Shared::default();
        let app = Router::new()
            .route("/v1/messages", post(anthropic))
            .route("/v1/chat/completions", post(openai))
            .route("/v1/responses", post(responses))
            .route("/_mock/requests", get(requests))
            .with_state(state.clone())
            .merge(crate::mock_window::router(window.clone()));
        let task = tokio::spawn(async move {
            if let Err(e) = axum::serve(listener, app).await {
                tracing::error!("mock LLM server stopped: {e}");
            }
        });
        Ok(MockLlm { addr, state, window, task })
    }

    /// Starts a server on `127.0.0.1:0` that answers every request with `respond(body)`.
    pub async fn start_responder(
        respond: impl Fn(&Value) -> Option<MockStep> + Send + Sync + 'static,
    ) -> anyhow::Result<MockLlm> {
        let mock = MockLlm::start(Vec::new()).await?;
        lock(&mock.state).responder = Some(Responder(Arc::new(respond)));
        Ok(mock)
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The Anthropic base URL (`http://ADDR`, no `/v1`, as the Anthropic SDKs expect).
    pub fn anthropic_base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The OpenAI base URL (`http://ADDR/v1`, as the OpenAI SDKs expect).
    pub fn openai_base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// The Responses API base URL (`http://ADDR/v1`, as the OpenAI SDKs expect; the same as
    /// [`MockLlm::openai_base_url`]).
    pub fn responses_base_url(&self) -> String {
        self.openai_base_url()
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.state).requests.clone()
    }

    /// When each request reached the mock, in order (the handler's first instruction: the
    /// request's head and body had arrived). Benchmarks measure a process's start to its first
    /// model request and the gaps between requests with it.
    pub fn arrivals(&self) -> Vec<Instant> {
        lock(&self.state).arrivals.clone()
    }

    /// Appends a step to the script.
    pub fn push(&self, step: MockStep) {
        lock(&self.state).steps.push_back(step);
    }

    /// Plays `window`'s server when asked its context window (see [`crate::mock_window`]).
    pub fn serve_window(&self, window: crate::mock_window::MockWindow) {
        crate::mock_window::set(&self.window, window);
    }

    /// The context-window probes received so far (`GET /props`, …), in order.
    pub fn window_probes(&self) -> Vec<String> {
        crate::mock_window::probes(&self.window)
    }

    /// How many steps are left.
    pub fn remaining(&self) -> usize {
        lock(&self.state).steps.len()
    }
}

impl Drop for MockLlm {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Anthropic,
    OpenAi,
    Responses,
}

async fn anthropic(
    State(state): State<SharedState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(state, Dialect::Anthropic, method, uri, headers, body).await
}

async fn openai(
    State(state): State<SharedState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(state, Dialect::OpenAi, method, uri, headers, body).await
}

async fn responses(
    State(state): State<SharedState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(state, Dialect::Responses, method, uri, headers, body).await
}

async fn requests(State(state): State<SharedState>) -> Json<Vec<RecordedRequest>> {
    Json(lock(&state).requests.clone())
}

async fn answer(
    state: SharedState,
    dialect: Dialect,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let arrived = Instant::now();
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let json_body = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    let model = json_body.get("model").and_then(Value::as_str).unwrap_or("mock-model").to_owned();
    let record = RecordedRequest {
        method: method.to_string(),
        path: uri.path().to_owned(),
        x_api_key: header("x-api-key"),
        authorization: header("authorization"),
        anthropic_version: header("anthropic-version"),
        content_type: header("content-type"),
        raw: String::from_utf8_lossy(&body).into_owned(),
        usage: None,
        body: json_body,
    };
    let (step, global, n, usage) = {
        let mut shared = lock(&state);
        let cached = match dialect {
            Dialect::Anthropic => shared.caches.anthropic(&record.body),
            Dialect::OpenAi | Dialect::Responses => shared.caches.openai(&body),
        };
        shared.requests.push(record);
        shared.arrivals.push(arrived);
        shared.served += 1;
        let step = match shared.steps.pop_front() {
            Some(step) => Some(step),
            None => shared
                .responder
                .clone()
                .and_then(|r| shared.requests.last().and_then(|req| (r.0)(&req.body))),
        };
        let usage = step.as_ref().filter(|s| s.status.is_none()).map(|s| reported_usage(s, cached));
        if let Some(last) = shared.requests.last_mut() {
            last.usage = usage;
        }
        (step, shared.openai.clone(), shared.served, usage.unwrap_or_default())
    };
    let Some(step) = step else {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            error_body(
                dialect,
                "api_error",
                "mock script exhausted: the test made more model calls than it scripted",
            ),
        )
            .into_response();
    };
    if step.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(step.latency_ms)).await;
    }
    if let Some(status) = step.status {
        return status_response(dialect, &step, status);
    }
    if let (Dialect::Anthropic, Some(problem)) = (dialect, thinking_problem(&json_body_of(&body))) {
        let body = error_body(dialect, "invalid_request_error", &problem);
        return (StatusCode::BAD_REQUEST, body).into_response();
    }
    let events = match dialect {
        Dialect::Anthropic => anthropic_events(&step, &model, n, usage),
        Dialect::OpenAi => openai_events(&step, &step.openai.merged(&global), &model, n, usage),
        Dialect::Responses => crate::mock_responses::responses_events(&step, &model, n, usage),
    };
    sse_response(events, step.cut_after, Duration::from_millis(step.chunk_delay_ms))
}

fn json_body_of(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap_or(Value::Null)
}

/// What the Anthropic API would refuse about a request's extended thinking, as it words it: a
/// budget out of range; in a tool loop with thinking on, a last assistant message that does not
/// start with its thinking block; any thinking block whose text or signature was changed.
fn thinking_problem(body: &Value) -> Option<String> {
    let messages = body["messages"].as_array()?;
    if body["thinking"]["type"] == "enabled" {
        let budget = body["thinking"]["budget_tokens"].as_u64().unwrap_or(0);
        let max = body["max_tokens"].as_u64().unwrap_or(0);
        if budget < 1024 || budget >= max {
            return Some(format!(
                "thinking.budget_tokens: {budget} must be ≥ 1024 and less than max_tokens ({max})"
            ));
        }
        let in_tool_loop = messages.last().is_some_and(|m| {
            m["role"] == "user"
                && m["content"]
                    .as_array()
                    .is_some_and(|c| c.iter().any(|b| b["type"] == "tool_result"))
        });
        let last_assistant =
            messages.iter().enumerate().rev().find(|(_, m)| m["role"] == "assistant");
        if let (true, Some((i, m))) = (in_tool_loop, last_assistant) {
            let first = &m["content"][0]["type"];
            if first != "thinking" && first != "redacted_thinking" {
                return Some(format!(
                    "messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but \
                     found {first}. When `thinking` is enabled, a final `assistant` message must \
                     start with a thinking block"
                ));
            }
        }
    }
    for (i, m) in messages.iter().enumerate() {
        for (j, b) in m["content"].as_array().into_iter().flatten().enumerate() {
            if b["type"] == "thinking" {
                let text = b["thinking"].as_str().unwrap_or_default();
                if b["signature"].as_str() != Some(mock_signature(text).as_str()) {
                    return Some(format!(
                        "messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
                    ));
                }
            }
        }
    }
    None
}

fn error_body(dialect: Dialect, kind: &str, message: &str) -> String {
    match dialect {
        Dialect::Anthropic => {
            json!({"type": "error", "error": {"type": kind, "message": message}}).to_string()
        }
        Dialect::OpenAi | Dialect::Responses => {
            json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
                .to_string()
        }
    }
}

fn status_response(dialect: Dialect, step: &MockStep, status: u16) -> Response {
    let code = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let body = step.body.clone().unwrap_or_else(|| {
        let kind = match status {
            400 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            529 => "overloaded_error",
            _ => "api_error",
        };
        error_body(dialect, kind, &format!("mock {status}: scripted {kind}"))
    });
    let mut response = Response::builder().status(code).header("content-type", "application/json");
    if let Some(secs) = step.retry_after {
        response = response.header("retry-after", secs.to_string());
    }
    if let Some(ms) = step.retry_after_ms {
        response = response.header("retry-after-ms", ms.to_string());
    }
    response.body(Body::from(body)).unwrap_or_else(|e| {
        (StatusCode::INTERNAL_SERVER_ERROR, format!("mock cannot build the response: {e}"))
            .into_response()
    })
}

/// How long a cut stream waits after its last event before dropping the connection.
const CUT_FLUSH_PAUSE: Duration = Duration::from_millis(50);

/// Streams SSE frames, pausing `delay` between them; with `cut_after`, sends that many and then
/// fails the body, which makes hyper drop the connection mid-response.
fn sse_response(frames: Vec<String>, cut_after: Option<usize>, delay: Duration) -> Response {
    let cut = cut_after.map(|n| n.min(frames.len()));
    let total = cut.unwrap_or(frames.len());
    let frames: VecDeque<String> = frames.into_iter().take(total).collect();
    let body =
        stream::unfold((frames, 0usize, false), move |(mut frames, sent, failed)| async move {
            if failed {
                return None;
            }
            if sent > 0 && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            match frames.pop_front() {
                Some(frame) => Some((Ok(Bytes::from(frame)), (frames, sent + 1, false))),
                None if cut.is_some() => {
                    // hyper buffers frames; without a pause the error would abort the connection
                    // before the head and the events are flushed, which is no mid-stream cut.
                    tokio::time::sleep(CUT_FLUSH_PAUSE).await;
                    Some((
                        Err(std::io::Error::other("mock: scripted stream cut")),
                        (frames, sent, true),
                    ))
                }
                None => None,
            }
        });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::from_stream(body))
        .unwrap_or_else(|e| {
            (StatusCode::INTERNAL_SERVER_ERROR, format!("mock cannot build the response: {e}"))
                .into_response()
        })
}

fn frame(event: Option<&str>, data: &Value) -> String {
    match event {
        Some(name) => format!("event: {name}\ndata: {data}\n\n"),
        None => format!("data: {data}\n\n"),
    }
}

fn anthropic_events(step: &MockStep, model: &str, n: u64, usage: Usage) -> Vec<String> {
    let mut out = vec![
        frame(
            Some("message_start"),
            &json!({"type": "message_start", "message": {
                "id": format!("msg_mock_{n}"), "type": "message", "role": "assistant",
                "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": usage.uncached_input_tokens(), "output_tokens": 1,
                          "cache_read_input_tokens": usage.cache_read_tokens,
                          "cache_creation_input_tokens": usage.cache_write_tokens},
            }}),
        ),
        frame(Some("ping"), &json!({"type": "ping"})),
    ];
    if let Some(kind) = &step.error_event {
        out.push(frame(
            Some("error"),
            &json!({"type": "error", "error": {"type": kind, "message": format!("mock {kind}")}}),
        ));
        return out;
    }
    let mut index = 0;
    if let Some(text) = &step.thinking {
        out.push(frame(
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
        ));
        for piece in split_pieces(text) {
            out.push(frame(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "thinking_delta", "thinking": piece}}),
            ));
        }
        out.push(frame(
            Some("content_block_delta"),
            &json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": "signature_delta", "signature": mock_signature(text)}}),
        ));
        out.push(frame(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    if let Some(data) = &step.redacted_thinking {
        out.push(frame(
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "redacted_thinking", "data": data}}),
        ));
        out.push(frame(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for block in &step.server_blocks {
        let mut start = block.clone();
        let input = (block["type"] == "server_tool_use").then(|| block["input"].to_string());
        if input.is_some() {
            start["input"] = json!({});
        }
        out.push(frame(
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": index, "content_block": start}),
        ));
        if let Some(input) = input {
            out.push(frame(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": input}}),
            ));
        }
        out.push(frame(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    let deltas = step.text_deltas();
    if !deltas.is_empty() {
        out.push(frame(
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "text", "text": ""}}),
        ));
        for delta in deltas {
            out.push(frame(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "text_delta", "text": delta}}),
            ));
        }
        out.push(frame(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    for (i, call) in step.tool_calls.iter().enumerate() {
        let id = call.id.clone().unwrap_or_else(|| format!("toolu_mock_{n}_{i}"));
        out.push(frame(
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": id, "name": call.name, "input": {}}}),
        ));
        // The real API opens with an empty partial_json.
        let mut pieces = vec![String::new()];
        pieces.extend(split_pieces(&call.arguments()));
        for piece in pieces {
            out.push(frame(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": piece}}),
            ));
        }
        out.push(frame(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": index}),
        ));
        index += 1;
    }
    out.push(frame(
        Some("message_delta"),
        &json!({"type": "message_delta",
                "delta": {"stop_reason": step.stop_reason(), "stop_sequence": null},
                "usage": {"output_tokens": usage.output_tokens}}),
    ));
    out.push(frame(Some("message_stop"), &json!({"type": "message_stop"})));
    out
}

fn openai_events(
    step: &MockStep,
    d: &MockOpenAiDialect,
    model: &str,
    n: u64,
    usage: Usage,
) -> Vec<String> {
    let id = format!("chatcmpl-mock-{n}");
    let chunk = |delta: Value, finish: Value| {
        frame(
            None,
            &json!({"id": id, "object": "chat.completion.chunk", "created": 1_700_000_000,
                    "model": model, "system_fingerprint": "fp_mock",
                    "choices": [{"index": 0, "delta": delta, "logprobs": null,
                                 "finish_reason": finish}],
                    "usage": null}),
        )
    };
    let mut out =
        vec![chunk(json!({"role": "assistant", "content": "", "refusal": null}), Value::Null)];
    if let Some(kind) = &step.error_event {
        out.push(frame(
            None,
            &json!({"error": {"message": format!("mock {kind}"), "type": kind, "code": null}}),
        ));
        return out;
    }
    if let Some(reasoning) = &d.reasoning {
        for piece in split_words(reasoning) {
            out.push(chunk(json!({"reasoning_content": piece, "content": null}), Value::Null));
        }
    }
    for (i, delta) in step.text_deltas().into_iter().enumerate() {
        out.push(chunk(json!({"content": delta}), Value::Null));
        if d.empty_deltas && i == 0 {
            out.push(chunk(json!({"content": ""}), Value::Null));
            out.push(chunk(json!({"content": null}), Value::Null));
            out.push(chunk(json!({}), Value::Null));
        }
    }
    for (i, call) in step.tool_calls.iter().enumerate() {
        let call_id = call.id.clone().unwrap_or_else(|| format!("call_mock_{n}_{i}"));
        let with_index = |mut piece: Value| {
            if !d.omit_tool_index {
                piece["index"] = json!(i);
            }
            json!({"tool_calls": [piece]})
        };
        let arguments = call.arguments();
        if d.args_in_one_chunk {
            out.push(chunk(
                with_index(json!({"id": call_id, "type": "function",
                                  "function": {"name": call.name, "arguments": arguments}})),
                Value::Null,
            ));
            continue;
        }
        out.push(chunk(
            with_index(json!({"id": call_id, "type": "function",
                              "function": {"name": call.name, "arguments": ""}})),
            Value::Null,
        ));
        for piece in split_pieces(&arguments) {
            out.push(chunk(with_index(json!({"function": {"arguments": piece}})), Value::Null));
        }
    }
    let finish = d.finish_reason.clone().unwrap_or_else(|| {
        match step.stop_reason().as_str() {
            "end_turn" | "stop_sequence" => "stop",
            "tool_use" => "tool_calls",
            "max_tokens" => "length",
            other => other,
        }
        .to_owned()
    });
    out.push(chunk(json!({}), json!(finish)));
    if !d.omit_usage {
        out.push(frame(
            None,
            &json!({"id": id, "object": "chat.completion.chunk", "created": 1_700_000_000,
                    "model": model, "choices": [],
                    "usage": {"prompt_tokens": usage.input_tokens,
                              "completion_tokens": usage.output_tokens,
                              "total_tokens": usage.input_tokens + usage.output_tokens,
                              "prompt_tokens_details": {"cached_tokens": usage.cache_read_tokens}}}),
        ));
    }
    if !d.omit_done {
        out.push("data: [DONE]\n\n".to_owned());
    }
    out
}
