//! The mock LLM's answers about its context window, as llama.cpp (`GET /props`), vLLM and
//! routers (`GET /v1/models`), Ollama (`POST /api/show`), LM Studio (`GET /api/v0/models/{id}`)
//! and LiteLLM's proxy (`GET /model/info`) give them, in their real shapes, so the server's probe
//! ([`outboard_server::llm::window`]) is tested against each dialect over HTTP. By default the
//! mock is none of them (404 on all five).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::State;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::{json, Value};

/// Which server the mock plays when asked its context window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MockWindow {
    /// None: every probe gets 404.
    #[default]
    Unknown,
    /// llama.cpp: `/props` with `default_generation_settings.n_ctx`.
    LlamaCpp(u64),
    /// An older llama.cpp: `/props` with a top-level `n_ctx`.
    LlamaCppTopLevel(u64),
    /// vLLM: `/v1/models` with the model's `max_model_len`.
    Vllm(u64),
    /// Ollama: `/api/show` with `model_info` `llama.context_length`.
    Ollama(u64),
    /// A router (OpenRouter): `/v1/models` with the model's `context_length`.
    Router(u64),
    /// LM Studio: `/api/v0/models/mock-model` with `loaded_context_length`.
    LmStudio(u64),
    /// LiteLLM's proxy: `/model/info` with the alias's `model_info.max_input_tokens`.
    LiteLlm(u64),
    /// A server that never answers a probe (each waits ten seconds).
    Hang,
}

#[derive(Debug, Default)]
pub(crate) struct WindowState {
    window: MockWindow,
    /// The probe requests received (`GET /props` …), in order.
    probes: Vec<String>,
}

/// The window state of one mock, shared with its routes.
pub(crate) type Shared = Arc<Mutex<WindowState>>;

fn lock(state: &Shared) -> MutexGuard<'_, WindowState> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sets what the mock says from now on.
pub(crate) fn set(state: &Shared, window: MockWindow) {
    lock(state).window = window;
}

/// The probes received so far.
pub(crate) fn probes(state: &Shared) -> Vec<String> {
    lock(state).probes.clone()
}

/// The three endpoints.
pub(crate) fn router(state: Shared) -> Router {
    Router::new()
        .route("/props", get(props))
        .route("/v1/models", get(models))
        .route("/api/show", post(show))
        .route("/api/v0/models/{id}", get(lmstudio))
        .route("/model/info", get(litellm))
        .with_state(state)
}

/// Records the probe and says which window the mock plays (waiting first if it hangs).
async fn seen(state: &Shared, probe: String) -> MockWindow {
    let window = {
        let mut s = lock(state);
        s.probes.push(probe);
        s.window
    };
    if window == MockWindow::Hang {
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    window
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not Found").into_response()
}

async fn props(State(state): State<Shared>, uri: Uri) -> Response {
    match seen(&state, format!("GET {}", uri.path())).await {
        MockWindow::LlamaCpp(n) => Json(json!({
            "default_generation_settings": {
                "id": 0, "id_task": -1, "n_ctx": n, "speculative": false, "is_processing": false,
                "params": { "n_predict": -1, "temperature": 0.8 }, "prompt": ""
            },
            "total_slots": 1,
            "model_path": "/models/mock-model.gguf",
            "chat_template": "",
            "build_info": "b0000-mock"
        }))
        .into_response(),
        MockWindow::LlamaCppTopLevel(n) => {
            Json(json!({ "system_prompt": "", "n_ctx": n, "total_slots": 1 })).into_response()
        }
        _ => not_found(),
    }
}

async fn models(State(state): State<Shared>, uri: Uri) -> Response {
    match seen(&state, format!("GET {}", uri.path())).await {
        MockWindow::Vllm(n) => Json(json!({
            "object": "list",
            "data": [{
                "id": "mock-model", "object": "model", "created": 1_715_000_000,
                "owned_by": "vllm", "root": "mock-model", "parent": null, "max_model_len": n,
                "permission": []
            }]
        }))
        .into_response(),
        MockWindow::Router(n) => Json(json!({
            "data": [{
                "id": "mock-model", "canonical_slug": "mock/mock-model", "name": "Mock: Model",
                "created": 1_750_000_000, "context_length": n,
                "pricing": { "prompt": "0.0000003", "completion": "0.0000012" },
                "top_provider": { "context_length": n, "is_moderated": false }
            }]
        }))
        .into_response(),
        _ => not_found(),
    }
}

async fn lmstudio(
    State(state): State<Shared>,
    uri: Uri,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    match seen(&state, format!("GET {}", uri.path())).await {
        MockWindow::LmStudio(n) if id == "mock-model" => Json(json!({
            "id": "mock-model", "object": "model", "type": "llm", "publisher": "lmstudio-community",
            "arch": "llama", "compatibility_type": "gguf", "quantization": "Q4_K_M",
            "state": "loaded", "max_context_length": 131_072, "loaded_context_length": n
        }))
        .into_response(),
        _ => not_found(),
    }
}

async fn litellm(State(state): State<Shared>, uri: Uri) -> Response {
    match seen(&state, format!("GET {}", uri.path())).await {
        MockWindow::LiteLlm(n) => Json(json!({
            "data": [{
                "model_name": "mock-model",
                "litellm_params": { "model": "openai/upstream-model" },
                "model_info": { "id": "abc123", "max_tokens": 8192, "max_input_tokens": n,
                                "max_output_tokens": 8192, "mode": "chat" }
            }]
        }))
        .into_response(),
        _ => not_found(),
    }
}

async fn show(State(state): State<Shared>, uri: Uri, Json(body): Json<Value>) -> Response {
    let window = seen(&state, format!("POST {}", uri.path())).await;
    match window {
        MockWindow::Ollama(n) if body.get("model").and_then(Value::as_str).is_some() => {
            Json(json!({
                "modelfile": "FROM /models/mock-model.gguf",
                "parameters": "stop                           \"<|eot_id|>\"",
                "template": "{{ .Prompt }}",
                "details": { "format": "gguf", "family": "llama", "parameter_size": "8.0B" },
                "model_info": {
                    "general.architecture": "llama",
                    "llama.context_length": n,
                    "llama.embedding_length": 4096
                },
                "capabilities": ["completion"]
            }))
            .into_response()
        }
        _ => not_found(),
    }
}
