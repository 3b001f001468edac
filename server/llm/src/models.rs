//! The models a server offers: a catalog read from `serve --models FILE` (or made of the single
//! model of `--provider/--base-url/--model`), and at run time one provider client per model.
//!
//! CONTRACT (used by `hub`, `session`, `gateway`, `main`): [`ModelCatalog`] (configuration),
//! [`Models`] (the clients, by name), [`ModelsError`].
//!
//! Sessions pick a model by its *name* (`outboard run --model sonnet`, `session/create {model}`,
//! `/model` in the TUI, `session/set_model`); the log and the listings show its *label*,
//! `provider/model-id`, because that is what answered and what a price is looked up by.
//! Credentials stay per provider on the server: each entry names the environment variable its key
//! is read from (by default its provider's usual one), so a file never holds a key.
//!
//! The file (TOML, Codex's `config.toml` style):
//! ```toml
//! default = "sonnet"               # optional: else the first model
//!
//! [[models]]
//! name = "sonnet"                  # what clients pick it by
//! provider = "anthropic"           # anthropic | openai | responses
//! model = "claude-sonnet-4-5"      # the provider's model id
//! base_url = "https://api.anthropic.com"      # optional: the provider's hosted API
//! api_key_env = "ANTHROPIC_API_KEY"           # optional: the provider's usual variable
//! context_window = 200000          # optional: else the model family's known window
//! max_tokens = 16000               # optional: output tokens per call (8192)
//! thinking_budget = 8000           # optional (anthropic): extended thinking on, this budget
//! reasoning_effort = "medium"      # optional (responses): none, minimal, low, medium, high, xhigh
//! vision = true                    # optional: whether it takes images (else the model table's)
//! prices = { input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75 }  # USD/Mtok
//! ```

use std::path::Path;
use std::sync::Arc;

use outboard_shared::{ModelInfo, ModelPrices, WindowSource};
use serde::Deserialize;

use crate::anthropic::MIN_THINKING_BUDGET;
use crate::client::Provider;
use crate::config::{LlmConfig, ProviderKind, RetryPolicy, UnknownProvider};
use crate::error::LlmError;
use crate::observe::CallMetrics;
use crate::window::{self, Cached, WindowCache};
use outboard_base::Secret;

/// The most models one server offers: each is a line of `models/list` and of the TUI's picker, and
/// a connection pool; a hundred is more than any team's set of providers and tiers.
pub const MAX_MODELS: usize = 100;

/// The longest model name, in bytes (a short handle people type).
pub const MAX_NAME_BYTES: usize = 64;

/// The output tokens asked for per call when an entry does not say.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

/// Why a model catalog cannot be used. Each message says what to change.
#[derive(Debug, thiserror::Error)]
pub enum ModelsError {
    /// The file cannot be read.
    #[error("cannot read the model file {path}: {error}")]
    Read { path: String, error: std::io::Error },
    /// The file is not the TOML this module reads.
    #[error("the model file {path} is not valid: {error}")]
    Parse { path: String, error: String },
    /// An entry is unusable.
    #[error("the model file {path}: {problem}")]
    Invalid { path: String, problem: String },
    /// A provider client cannot be built for an entry.
    #[error("model {name}: {error}")]
    Provider { name: String, error: LlmError },
}

/// One model on offer.
#[derive(Debug, Clone)]
pub struct ModelEntry {
    /// What clients pick it by.
    pub name: String,
    /// How to reach it (its key included, read from the environment).
    pub llm: LlmConfig,
    /// Its context window in tokens; `None`: the server's `--context-window`, else its family's.
    pub context_window: Option<u64>,
    /// Its prices, when the file gives them.
    pub prices: Option<ModelPrices>,
}

impl ModelEntry {
    /// `provider/model`.
    pub fn label(&self) -> String {
        format!("{}/{}", self.llm.kind.as_str(), self.llm.model)
    }

    /// The window a session of this model gets when its server is not asked: the entry's, else
    /// `server_default` (`serve --context-window`), else the model family's, else its API's
    /// usual window (a guess).
    pub fn window(&self, server_default: Option<u64>) -> u64 {
        self.window_info(server_default, None).tokens
    }

    /// [`ModelEntry::window`] when it is known without asking the model's server: the entry's,
    /// `server_default`, or a known family's.
    pub fn known_window(&self, server_default: Option<u64>) -> Option<u64> {
        self.context_window
            .or(server_default)
            .or_else(|| crate::context::known_window(&self.label()))
    }

    /// The window and where it came from: the entry's, `server_default`, the model table's,
    /// what its server said (`probed`), else its API's usual window, stated as a guess with the
    /// flag and the key that set the real one.
    pub fn window_info(
        &self,
        server_default: Option<u64>,
        probed: Option<(u64, window::Dialect)>,
    ) -> WindowInfo {
        let info = |tokens, source, from: String| WindowInfo { tokens, source, from };
        if let Some(tokens) = self.context_window {
            return info(tokens, WindowSource::Config, "context_window in the model file".into());
        }
        if let Some(tokens) = server_default {
            return info(tokens, WindowSource::Flag, "the server's --context-window".into());
        }
        if let Some(tokens) = crate::context::known_window(&self.label()) {
            return info(tokens, WindowSource::Table, "the model table".into());
        }
        if let Some((tokens, dialect)) = probed {
            let from = format!("{} at {}", dialect.source(), self.llm.base_url);
            return info(tokens, WindowSource::Probe, from);
        }
        let tokens = crate::context::provider_default_window(self.llm.kind);
        let asked = if window::is_hosted(&self.llm.base_url) {
            String::new()
        } else {
            format!(" nor its server at {}", self.llm.base_url)
        };
        let from = format!(
            "a guess: neither the model table{asked} knows {}'s window, so the {} API's usual \
             {} tokens; set the real one with --context-window or context_window in the model \
             file",
            self.llm.model,
            self.llm.kind.as_str(),
            outboard_shared::thousands(tokens)
        );
        info(tokens, WindowSource::ProviderDefault, from)
    }

    /// Its `models/list` line.
    pub fn info(&self, server_default: Option<u64>, default: bool) -> ModelInfo {
        let window = self.window_info(server_default, None);
        ModelInfo {
            name: self.name.clone(),
            provider: self.llm.kind.as_str().to_owned(),
            model: self.llm.model.clone(),
            label: self.label(),
            context_window: window.tokens,
            context_window_source: Some(window.source),
            context_window_from: Some(window.from),
            max_tokens: self.llm.max_tokens,
            thinking_budget: self.llm.thinking_budget,
            prices: self.prices,
            default,
        }
    }
}

/// A context window and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WindowInfo {
    /// Its size in tokens.
    pub tokens: u64,
    /// Where it came from.
    pub source: WindowSource,
    /// Who said it or what sets it, for a person.
    pub from: String,
}

/// The models a server is configured with; the first is the default.
#[derive(Debug, Clone)]
pub struct ModelCatalog {
    entries: Vec<ModelEntry>,
}

impl From<LlmConfig> for ModelCatalog {
    /// The catalog of one model (the flags' form), named by its model id.
    fn from(llm: LlmConfig) -> Self {
        ModelCatalog {
            entries: vec![ModelEntry {
                name: llm.model.clone(),
                llm,
                context_window: None,
                prices: None,
            }],
        }
    }
}

/// The file's shape.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    default: Option<String>,
    #[serde(default)]
    models: Vec<FileEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    name: String,
    provider: String,
    model: String,
    base_url: Option<String>,
    api_key_env: Option<String>,
    context_window: Option<u64>,
    max_tokens: Option<u32>,
    thinking_budget: Option<u32>,
    reasoning_effort: Option<String>,
    vision: Option<bool>,
    prices: Option<ModelPrices>,
}

impl ModelCatalog {
    /// Reads a model file (see the module header); `default` (`--model`) names the default
    /// model instead of the file's `default`.
    pub fn from_file(path: &Path, default: Option<&str>) -> Result<Self, ModelsError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|error| ModelsError::Read { path: shown.clone(), error })?;
        Self::from_toml(&text, &shown, default, &|name| std::env::var(name).ok())
    }

    /// [`ModelCatalog::from_file`] of the text, with `env` standing for the environment.
    pub fn from_toml(
        text: &str,
        path: &str,
        default: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ModelsError> {
        let file: File = toml::from_str(text)
            .map_err(|e| ModelsError::Parse { path: path.to_owned(), error: e.to_string() })?;
        Self::from_parsed(file, path, default, env)
    }

    /// A catalog given inline, as the `[[models]]` tables of a server's configuration file
    /// (`serve --config FILE`) instead of a file of its own; `models` is the array of tables,
    /// `path` the configuration file, `default` (`--model`) the default model's name.
    pub fn from_tables(
        models: &toml::Value,
        path: &str,
        default: Option<&str>,
    ) -> Result<Self, ModelsError> {
        let models: Vec<FileEntry> = models.clone().try_into().map_err(|e: toml::de::Error| {
            ModelsError::Parse { path: path.to_owned(), error: format!("[[models]]: {e}") }
        })?;
        let file = File { default: None, models };
        Self::from_parsed(file, path, default, &|name| std::env::var(name).ok())
    }

    fn from_parsed(
        file: File,
        path: &str,
        default: Option<&str>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Self, ModelsError> {
        let invalid = |problem: String| ModelsError::Invalid { path: path.to_owned(), problem };
        if file.models.is_empty() {
            return Err(invalid(
                "it offers no model: add a [[models]] table with name, provider and model".into(),
            ));
        }
        if file.models.len() > MAX_MODELS {
            return Err(invalid(format!(
                "it offers {} models, more than the {MAX_MODELS} a server takes",
                file.models.len()
            )));
        }
        let mut entries: Vec<ModelEntry> = Vec::with_capacity(file.models.len());
        for (i, e) in file.models.into_iter().enumerate() {
            let at = format!("model {} ({:?})", i + 1, e.name);
            check_name(&e.name).map_err(|p| invalid(format!("{at}: {p}")))?;
            if entries.iter().any(|x| x.name == e.name) {
                return Err(invalid(format!("{at}: the name is used twice")));
            }
            let kind = ProviderKind::parse(&e.provider)
                .ok_or_else(|| invalid(format!("{at}: {}", UnknownProvider(e.provider))))?;
            if e.model.trim().is_empty() {
                return Err(invalid(format!("{at}: `model` (the provider's model id) is empty")));
            }
            if e.context_window == Some(0) {
                return Err(invalid(format!("{at}: context_window must be above 0")));
            }
            let max_tokens = e.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
            if max_tokens == 0 {
                return Err(invalid(format!("{at}: max_tokens must be above 0")));
            }
            check_thinking(kind, e.thinking_budget, max_tokens)
                .map_err(|p| invalid(format!("{at}: {p}")))?;
            check_effort(kind, e.reasoning_effort.as_deref())
                .map_err(|p| invalid(format!("{at}: {p}")))?;
            if let Some(p) = &e.prices {
                let all = [p.input, p.output, p.cache_read, p.cache_write];
                if all.iter().any(|v| !v.is_finite() || *v < 0.0) {
                    return Err(invalid(format!("{at}: prices must be numbers of 0 or more")));
                }
            }
            let key_var = e.api_key_env.unwrap_or_else(|| kind.key_var().to_owned());
            let api_key = env(&key_var).filter(|v| !v.trim().is_empty()).map(Secret::new);
            entries.push(ModelEntry {
                name: e.name,
                llm: LlmConfig {
                    kind,
                    base_url: e
                        .base_url
                        .unwrap_or_else(|| kind.default_base_url().to_owned())
                        .trim_end_matches('/')
                        .to_owned(),
                    model: e.model,
                    api_key,
                    max_tokens,
                    retry: RetryPolicy::default(),
                    thinking_budget: e.thinking_budget,
                    reasoning_effort: e.reasoning_effort,
                    vision: e.vision,
                },
                context_window: e.context_window,
                prices: e.prices,
            });
        }
        let mut catalog = ModelCatalog { entries };
        if let Some(name) = default.or(file.default.as_deref()) {
            catalog.set_default(name).map_err(invalid)?;
        }
        Ok(catalog)
    }

    /// Makes `name` the default (first) model.
    pub fn set_default(&mut self, name: &str) -> Result<(), String> {
        let Some(i) = self.entries.iter().position(|e| e.name == name) else {
            return Err(format!(
                "the default model {name:?} is not one of its models ({})",
                self.names().join(", ")
            ));
        };
        let entry = self.entries.remove(i);
        self.entries.insert(0, entry);
        Ok(())
    }

    /// Turns extended thinking on for every Anthropic model with `budget` tokens (`serve
    /// --thinking-budget`), keeping a budget an entry sets itself.
    pub fn with_thinking(mut self, budget: Option<u32>) -> Result<Self, String> {
        let Some(budget) = budget else { return Ok(self) };
        for e in &mut self.entries {
            if e.llm.kind == ProviderKind::Anthropic && e.llm.thinking_budget.is_none() {
                check_thinking(e.llm.kind, Some(budget), e.llm.max_tokens)
                    .map_err(|p| format!("--thinking-budget: {p}"))?;
                e.llm.thinking_budget = Some(budget);
            }
        }
        Ok(self)
    }

    /// The models, the default first.
    pub fn entries(&self) -> &[ModelEntry] {
        &self.entries
    }

    /// The default model.
    pub fn default_entry(&self) -> &ModelEntry {
        &self.entries[0]
    }

    /// The default model's settings, mutable (tests and benches point it at a mock).
    pub fn default_llm_mut(&mut self) -> &mut LlmConfig {
        &mut self.entries[0].llm
    }

    fn names(&self) -> Vec<&str> {
        self.entries.iter().map(|e| e.name.as_str()).collect()
    }
}

/// Names are handles people type: letters, digits and `-._:/`, at most [`MAX_NAME_BYTES`].
fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(format!("a name is 1 to {MAX_NAME_BYTES} bytes"));
    }
    if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._:/".contains(&b)) {
        return Err("a name holds only letters, digits and - . _ : /".into());
    }
    Ok(())
}

/// Extended thinking is Anthropic's, at least [`MIN_THINKING_BUDGET`] and below `max_tokens`
/// (the API counts the budget inside `max_tokens`).
fn check_thinking(kind: ProviderKind, budget: Option<u32>, max_tokens: u32) -> Result<(), String> {
    let Some(budget) = budget else { return Ok(()) };
    if kind != ProviderKind::Anthropic {
        return Err(format!(
            "thinking_budget is Anthropic's extended thinking; a {} model reasons by itself",
            kind.as_str()
        ));
    }
    if budget < MIN_THINKING_BUDGET {
        return Err(format!("thinking_budget must be at least {MIN_THINKING_BUDGET} tokens"));
    }
    if budget >= max_tokens {
        return Err(format!(
            "thinking_budget ({budget}) must be below max_tokens ({max_tokens}), which counts it"
        ));
    }
    Ok(())
}

/// The efforts the Responses API takes for `reasoning.effort`.
const EFFORTS: &[&str] = &["none", "minimal", "low", "medium", "high", "xhigh"];

/// A reasoning effort is the Responses API's, one of [`EFFORTS`].
fn check_effort(kind: ProviderKind, effort: Option<&str>) -> Result<(), String> {
    let Some(effort) = effort else { return Ok(()) };
    if kind != ProviderKind::Responses {
        return Err(format!(
            "reasoning_effort is the Responses API's (provider = \"responses\"), not {}'s",
            kind.as_str()
        ));
    }
    if !EFFORTS.contains(&effort) {
        return Err(format!("reasoning_effort {effort:?} is not one of {}", EFFORTS.join(", ")));
    }
    Ok(())
}

/// The provider clients, one per model (each its own connection pool), by name.
#[derive(Debug)]
pub struct Models {
    entries: Vec<(ModelEntry, Arc<Provider>)>,
    /// `serve --context-window`, for entries that give none.
    server_window: Option<u64>,
    /// The windows the models' servers said ([`Models::resolve_window`]).
    probed: Arc<WindowCache>,
}

impl Models {
    /// A client per entry of `catalog`.
    pub fn new(catalog: &ModelCatalog, server_window: Option<u64>) -> Result<Self, ModelsError> {
        let entries = catalog
            .entries
            .iter()
            .map(|e| {
                let provider = Provider::new(e.llm.clone())
                    .map_err(|error| ModelsError::Provider { name: e.name.clone(), error })?;
                Ok((e.clone(), Arc::new(provider)))
            })
            .collect::<Result<_, ModelsError>>()?;
        Ok(Models { entries, server_window, probed: Arc::default() })
    }

    /// The same clients, each counting its calls in `metrics`.
    pub fn with_metrics(self, metrics: &Arc<dyn CallMetrics>) -> Self {
        let entries = self
            .entries
            .into_iter()
            .map(|(e, p)| {
                let provider = Arc::unwrap_or_clone(p).with_metrics(metrics.clone());
                (e, Arc::new(provider))
            })
            .collect();
        Models { entries, ..self }
    }

    /// The default model.
    pub fn default_model(&self) -> (&ModelEntry, &Arc<Provider>) {
        let (e, p) = &self.entries[0];
        (e, p)
    }

    /// The model named `name`.
    pub fn get(&self, name: &str) -> Option<(&ModelEntry, &Arc<Provider>)> {
        self.entries.iter().find(|(e, _)| e.name == name).map(|(e, p)| (e, p))
    }

    /// The model named `name`, or an error listing those there are.
    pub fn pick(&self, name: &str) -> Result<(&ModelEntry, &Arc<Provider>), String> {
        self.get(name).ok_or_else(|| {
            let names: Vec<&str> = self.entries.iter().map(|(e, _)| e.name.as_str()).collect();
            format!(
                "this server offers no model {name:?}: pick one of {} (`outboard models`)",
                names.join(", ")
            )
        })
    }

    /// The model a session runs with: its recorded name; for a session recorded before names
    /// (or whose model was renamed), the entry with its label; else the default.
    pub fn for_session(&self, name: Option<&str>, label: &str) -> (&ModelEntry, &Arc<Provider>) {
        name.and_then(|n| self.get(n))
            .or_else(|| self.entries.iter().find(|(e, _)| e.label() == label).map(|(e, p)| (e, p)))
            .unwrap_or_else(|| self.default_model())
    }

    /// The window a session of `entry` gets.
    pub fn window(&self, entry: &ModelEntry) -> u64 {
        self.window_info(entry).tokens
    }

    /// [`Models::window`] and where it came from, with what its server said if it was asked.
    pub fn window_info(&self, entry: &ModelEntry) -> WindowInfo {
        let probed = match self.probed.get(&entry.llm.base_url, &entry.llm.model) {
            Cached::Window(tokens, dialect) => Some((tokens, dialect)),
            Cached::Failed | Cached::Unknown => None,
        };
        entry.window_info(self.server_window, probed)
    }

    /// The window of a session of the model `name` (`label` for an older session) that runs with
    /// `window` tokens, and where that came from: its model's, or the session's own when it
    /// asked for another at creation (`--context-window`, `session/create`'s `context_window`).
    pub fn session_window(&self, name: Option<&str>, label: &str, window: u64) -> WindowInfo {
        let model = self.window_info(self.for_session(name, label).0);
        if model.tokens == window {
            return model;
        }
        WindowInfo {
            tokens: window,
            source: WindowSource::Flag,
            from: "the session's own, asked for at its creation (--context-window)".into(),
        }
    }

    /// [`Models::window_info`], first asking the model's server when nothing else knows the
    /// window, it is not a vendor's hosted API, and it was not asked yet (see [`crate::window`]):
    /// at most [`window::PROBE_TIMEOUT`], once per base URL and model; a failed probe leaves the
    /// API's usual window, logged as the guess it is.
    pub async fn resolve_window(&self, entry: &ModelEntry) -> WindowInfo {
        let (base, model) = (&entry.llm.base_url, &entry.llm.model);
        if entry.known_window(self.server_window).is_none()
            && !window::is_hosted(base)
            && self.probed.get(base, model) == Cached::Unknown
        {
            let said = window::probe(&entry.llm).await;
            self.probed.put(base, model, said);
            let info = self.window_info(entry);
            match said {
                Some((window, dialect)) => tracing::info!(
                    model = %model, url = %base, source = dialect.source(),
                    "context window {window} tokens for model {model} from {} at {base}",
                    dialect.source()
                ),
                None => tracing::warn!(
                    model = %model, url = %base,
                    "the server at {base} does not say model {model}'s context window (llama.cpp \
                     /props, /v1/models, Ollama /api/show, LM Studio /api/v0/models, LiteLLM \
                     /model/info); assuming {} tokens, {}",
                    info.tokens, info.from
                ),
            }
            return info;
        }
        self.window_info(entry)
    }

    /// `models/list`: the models, the default first.
    pub fn list(&self) -> Vec<ModelInfo> {
        self.entries
            .iter()
            .enumerate()
            .map(|(i, (e, _))| {
                // What its server said, once asked ([`Models::resolve_window`]).
                let window = self.window_info(e);
                ModelInfo {
                    context_window: window.tokens,
                    context_window_source: Some(window.source),
                    context_window_from: Some(window.from),
                    ..e.info(self.server_window, i == 0)
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "ANTHROPIC_API_KEY" => Some("sk-ant".into()),
            "OPENROUTER_KEY" => Some("sk-or".into()),
            _ => None,
        }
    }

    const FILE: &str = r#"
default = "haiku"

[[models]]
name = "sonnet"
provider = "anthropic"
model = "claude-sonnet-4-5"
thinking_budget = 4000
max_tokens = 16000
prices = { input = 3.0, output = 15.0, cache_read = 0.3, cache_write = 3.75 }

[[models]]
name = "haiku"
provider = "anthropic"
model = "claude-haiku-4-5"
context_window = 100000

[[models]]
name = "or/qwen"
provider = "openai"
model = "qwen/qwen3-coder"
base_url = "https://openrouter.ai/api/v1/"
api_key_env = "OPENROUTER_KEY"
"#;

    #[test]
    fn a_file_gives_models_with_their_keys_windows_and_default() {
        let c = ModelCatalog::from_toml(FILE, "m.toml", None, &env).unwrap();
        let names: Vec<_> = c.entries().iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["haiku", "sonnet", "or/qwen"]);
        let sonnet = &c.entries()[1];
        assert_eq!(sonnet.llm.thinking_budget, Some(4000));
        assert_eq!(sonnet.llm.api_key.as_ref().map(Secret::expose), Some("sk-ant"));
        assert_eq!(sonnet.llm.base_url, "https://api.anthropic.com");
        assert_eq!(sonnet.window(None), 200_000);
        assert_eq!(c.entries()[0].window(Some(5)), 100_000);
        let qwen = &c.entries()[2];
        assert_eq!(qwen.llm.base_url, "https://openrouter.ai/api/v1");
        assert_eq!(qwen.llm.api_key.as_ref().map(Secret::expose), Some("sk-or"));
        assert_eq!(qwen.label(), "openai/qwen/qwen3-coder");
        // `--model` overrides the file's default.
        let c = ModelCatalog::from_toml(FILE, "m.toml", Some("or/qwen"), &env).unwrap();
        assert_eq!(c.default_entry().name, "or/qwen");
    }

    /// The `[[models]]` tables of a server's configuration file are the same catalog.
    #[test]
    fn inline_tables_are_a_catalog() {
        let config: toml::Table =
            toml::from_str(&format!("listen = \"127.0.0.1:7700\"\n{FILE}")).unwrap();
        let tables = &config["models"];
        let c = ModelCatalog::from_tables(tables, "server.toml", Some("sonnet")).unwrap();
        let names: Vec<_> = c.entries().iter().map(|e| e.name.as_str()).collect();
        assert_eq!(names, ["sonnet", "haiku", "or/qwen"]);
        assert_eq!(c.entries()[2].llm.base_url, "https://openrouter.ai/api/v1");
        let bad: toml::Table = toml::from_str(
            "[[models]]\nname = \"a\"\nprovider = \"openai\"\nmodel = \"m\"\nkey = \"x\"\n",
        )
        .unwrap();
        let err = ModelCatalog::from_tables(&bad["models"], "server.toml", None).unwrap_err();
        let err = err.to_string();
        assert!(err.starts_with("the model file server.toml is not valid: [[models]]: "), "{err}");
        assert!(err.contains("unknown field `key`"), "{err}");
    }

    #[test]
    fn bad_files_say_what_to_fix() {
        let err = |text: &str| {
            ModelCatalog::from_toml(text, "m.toml", None, &env).unwrap_err().to_string()
        };
        let one = |extra: &str| {
            format!("[[models]]\nname = \"a\"\nprovider = \"anthropic\"\nmodel = \"m\"\n{extra}")
        };
        assert!(err("").contains("offers no model"), "{}", err(""));
        assert!(err("[[models]]\nname = \"a\"").contains("not valid"));
        assert!(err(&one("colour = 1")).contains("unknown field"), "{}", err(&one("colour = 1")));
        assert!(err(&one("thinking_budget = 100")).contains("at least 1024"));
        assert!(err(&one("thinking_budget = 9000")).contains("below max_tokens"));
        let openai = "[[models]]\nname = \"a\"\nprovider = \"openai\"\nmodel = \"m\"\nthinking_budget = 2000";
        assert!(err(openai).contains("Anthropic's"), "{}", err(openai));
        let twice = format!("{}\n{}", one(""), one(""));
        assert!(err(&twice).contains("used twice"), "{}", err(&twice));
        let bad_name = "[[models]]\nname = \"a b\"\nprovider = \"anthropic\"\nmodel = \"m\"";
        assert!(err(bad_name).contains("only letters"));
        let llama = "[[models]]\nname = \"a\"\nprovider = \"llama\"\nmodel = \"m\"";
        assert!(err(llama).contains("unknown provider"), "{}", err(llama));
        let default = format!("default = \"zz\"\n{}", one(""));
        assert!(err(&default).contains("\"zz\" is not one of its models (a)"), "{}", err(&default));
        assert!(err(&one("prices = { input = -1.0, output = 1.0 }")).contains("0 or more"));
        assert!(err(&one("reasoning_effort = \"high\"")).contains("Responses API's"));
        let responses = "[[models]]\nname = \"a\"\nprovider = \"responses\"\nmodel = \"m\"\nreasoning_effort = \"max\"";
        assert!(err(responses).contains("not one of none, minimal"), "{}", err(responses));
        let ok = responses.replace("max", "low");
        let c = ModelCatalog::from_toml(&ok, "m.toml", None, &env).unwrap();
        assert_eq!(c.default_entry().llm.reasoning_effort.as_deref(), Some("low"));
        assert_eq!(c.default_entry().llm.base_url, "https://api.openai.com/v1");
    }

    #[test]
    fn a_session_finds_its_model_by_name_then_label_then_the_default() {
        let mut c = ModelCatalog::from_toml(FILE, "m.toml", None, &env).unwrap();
        for e in &mut c.entries {
            e.llm.base_url = "http://127.0.0.1:9".into();
        }
        let models = Models::new(&c, None).unwrap();
        assert_eq!(models.for_session(Some("sonnet"), "x").0.name, "sonnet");
        assert_eq!(models.for_session(None, "anthropic/claude-sonnet-4-5").0.name, "sonnet");
        assert_eq!(models.for_session(Some("gone"), "gone/too").0.name, "haiku");
        let err = models.pick("opus").unwrap_err();
        assert!(err.contains("haiku, sonnet, or/qwen"), "{err}");
        let list = models.list();
        assert!(list[0].default && !list[1].default);
        assert_eq!(list[1].prices.map(|p| p.output), Some(15.0));
    }
}
