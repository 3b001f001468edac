//! The server's Prometheus metrics: one [`Metrics`] per server (made by [`crate::launch`], no
//! global registry, so tests and embedders run several servers in one process), its families,
//! the one-line hooks the instrumented modules call, and the text exposition written per scrape
//! (`serve --metrics-listen ADDR` serves it at `GET /metrics`; `docs/OPERATIONS.md` lists every
//! metric).
//!
//! Why here: the instrumented modules (gateway, session actor, provider, sandbox manager, store
//! thread, network proxy) each call one method with plain values; what is counted, under which
//! labels and in which buckets is decided in this module alone. It depends on no other module of
//! the server (only `outboard_shared` and `prometheus_client`), so every module may call it
//! without an import circle.
//!
//! Cardinality is bounded by construction: every label is an enum of this module (outcomes,
//! states, reasons, token kinds) except the tool and the model. A tool is one of the built-in
//! names ([`BUILT_IN_TOOLS`]), `mcp` for every MCP tool, or `other` for anything else a model
//! may invent; a model label pair is one of the first [`MAX_MODEL_SERIES`] seen, later ones are
//! counted under `other`. No session, user or org id is ever a label.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use outboard_shared::{EventKind, SandboxState, SessionStatus, StopReason, Usage};
use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

/// The `Content-Type` of the exposition: Prometheus text 0.0.4, which `promtool check metrics`
/// reads (and every Prometheus version scrapes).
pub const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// Distinct (provider, model) pairs given their own series. A server is configured with a few
/// models; this leaves room for every model a deployment offers while a mistake (a client
/// naming arbitrary models) cannot grow the exposition without bound: later pairs share
/// `model="other"`.
pub const MAX_MODEL_SERIES: usize = 32;

/// The tools counted under their own name. Anything else is `mcp` (a `mcp__SERVER__TOOL` call)
/// or `other`, so a model that invents tool names cannot add series.
pub const BUILT_IN_TOOLS: &[&str] = &[
    "AskUserQuestion",
    "Bash",
    "BashOutput",
    "Edit",
    "ExitPlanMode",
    "Glob",
    "Grep",
    "KillShell",
    "NotebookEdit",
    "Read",
    "Task",
    "TodoWrite",
    "WebFetch",
    "WebSearch",
    "Write",
];

/// The server's metric families and their registry.
pub struct Metrics {
    registry: Registry,
    connections: Gauge,
    connections_opened: Counter,
    auth_failures: Family<ReasonLabel, Counter>,
    handshake_failures: Family<ReasonLabel, Counter>,
    connections_cut: Family<ReasonLabel, Counter>,
    sessions: Family<StatusLabel, Gauge>,
    session_actors: Gauge,
    turns: Family<OutcomeLabel, Counter>,
    steps: Family<LoopLabel, Counter>,
    model: ModelMetrics,
    tool_calls: Family<ToolOutcomeLabels, Counter>,
    tool_duration: Histograms<ToolLabel>,
    sandbox: SandboxMetrics,
    store: StoreMetrics,
    store_queue_depth: Gauge,
    egress: Family<EgressLabel, Counter>,
    egress_dropped: Counter,
    upload_refusals: Family<ReasonLabel, Counter>,
    upload_lookups: Counter,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabel {
    outcome: &'static str,
}

/// `main` (a session's own loop) or `subagent` (a `Task`'s).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LoopLabel {
    r#loop: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolLabel {
    tool: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ToolOutcomeLabels {
    tool: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EgressLabel {
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabels {
    provider: Arc<str>,
    model: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelOutcomeLabels {
    provider: Arc<str>,
    model: Arc<str>,
    outcome: ModelOutcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    provider: Arc<str>,
    model: Arc<str>,
    kind: TokenKind,
}

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
enum TokenKind {
    input,
    output,
    cache_read,
    cache_write,
}

/// How a model call ended, the `outcome` label of `outboard_model_requests_total` (after the
/// provider's own retries: a call that succeeded on its second attempt is `ok`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum ModelOutcome {
    /// A complete answer.
    ok,
    /// HTTP 429 after the retries.
    rate_limited,
    /// 5xx (or Anthropic's 529 overloaded) after the retries.
    server_error,
    /// Another 4xx: the request was refused (too long, bad key, bad model).
    client_error,
    /// The stream was cut or went silent.
    cut,
    /// The provider could not be reached.
    transport,
    /// The answer could not be decoded, or the request encoded.
    decode,
    /// The provider's configuration is unusable.
    config,
}

impl From<outboard_llm::CallOutcome> for ModelOutcome {
    fn from(o: outboard_llm::CallOutcome) -> Self {
        use outboard_llm::CallOutcome as C;
        match o {
            C::RateLimited => ModelOutcome::rate_limited,
            C::ServerError => ModelOutcome::server_error,
            C::ClientError => ModelOutcome::client_error,
            C::Cut => ModelOutcome::cut,
            C::Transport => ModelOutcome::transport,
            C::Decode => ModelOutcome::decode,
            C::Config => ModelOutcome::config,
        }
    }
}

/// A family of histograms that all have the same buckets.
type Histograms<S> = Family<S, Histogram, fn() -> Histogram>;

/// A histogram of buckets from `start`, each `factor` times the last, `count` of them (`+Inf`
/// added).
fn buckets(start: f64, factor: f64, count: u16) -> Histogram {
    Histogram::new(exponential_buckets(start, factor, count))
}

/// Whole model calls: 100 ms to 3.4 min.
fn model_duration_buckets() -> Histogram {
    buckets(0.1, 2.0, 12)
}

/// First text: 25 ms to 51 s.
fn ttft_buckets() -> Histogram {
    buckets(0.025, 2.0, 12)
}

/// Tool calls: 1 ms (a `Read`) to 4.4 min (a long build).
fn tool_buckets() -> Histogram {
    buckets(0.00025, 4.0, 11)
}

/// The model calls' families, with the bounded set of model label pairs.
struct ModelMetrics {
    requests: Family<ModelOutcomeLabels, Counter>,
    duration: Histograms<ModelLabels>,
    ttft: Histograms<ModelLabels>,
    tokens: Family<TokenLabels, Counter>,
    retries: Family<ModelLabels, Counter>,
    /// The pairs given their own series so far, at most [`MAX_MODEL_SERIES`].
    seen: Mutex<HashSet<(Arc<str>, Arc<str>)>>,
}

impl ModelMetrics {
    /// The labels of `provider`/`model`: their own, or `other` once the bound is reached.
    fn labels(&self, provider: &str, model: &str) -> ModelLabels {
        let mut seen = match self.seen.lock() {
            Ok(seen) => seen,
            Err(poisoned) => poisoned.into_inner(),
        };
        let key: (Arc<str>, Arc<str>) = (provider.into(), model.into());
        if seen.contains(&key) || seen.len() < MAX_MODEL_SERIES {
            seen.insert(key.clone());
            ModelLabels { provider: key.0, model: key.1 }
        } else {
            ModelLabels { provider: key.0, model: "other".into() }
        }
    }
}

/// The sandbox managers' families; a clone rides in [`outboard_sandbox::SandboxConfig`] to each
/// session's manager.
#[derive(Clone)]
pub struct SandboxMetrics {
    live: Family<StateLabel, Gauge>,
    transitions: Family<StateLabel, Counter>,
    cold_start: Histogram,
    resume: Histogram,
}

impl std::fmt::Debug for SandboxMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SandboxMetrics")
    }
}

/// Where a sandbox's transitions are counted does not change what the sandbox is: two
/// configurations that differ only here are the same configuration.
impl PartialEq for SandboxMetrics {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for SandboxMetrics {}

impl outboard_sandbox::TransitionObserver for SandboxMetrics {
    fn transition(&self, from: SandboxState, to: SandboxState, took: Duration) {
        SandboxMetrics::transition(self, from, to, took);
    }
}

/// The states counted in `outboard_sandboxes`: a sandbox that exists (none and stopped are the
/// absence of one, and would only grow).
fn live_state(state: SandboxState) -> Option<&'static str> {
    match state {
        SandboxState::Provisioning => Some("provisioning"),
        SandboxState::Running => Some("running"),
        SandboxState::Suspended => Some("suspended"),
        SandboxState::Dead => Some("dead"),
        _ => None,
    }
}

fn state_name(state: SandboxState) -> &'static str {
    match state {
        SandboxState::None => "none",
        SandboxState::Waiting => "waiting",
        SandboxState::Stopped => "stopped",
        other => live_state(other).unwrap_or("other"),
    }
}

impl SandboxMetrics {
    /// One transition of a sandbox's state machine, `took` to get there (see
    /// `sandbox/manager.rs`: `running` after `provisioning` is a cold start, after `suspended`
    /// a resume).
    pub fn transition(&self, from: SandboxState, to: SandboxState, took: Duration) {
        if let Some(state) = live_state(from) {
            self.live.get_or_create(&StateLabel { state }).dec();
        }
        if let Some(state) = live_state(to) {
            self.live.get_or_create(&StateLabel { state }).inc();
        }
        self.transitions.get_or_create(&StateLabel { state: state_name(to) }).inc();
        match (from, to) {
            (SandboxState::Provisioning, SandboxState::Running) => {
                self.cold_start.observe(took.as_secs_f64())
            }
            (SandboxState::Suspended, SandboxState::Running) => {
                self.resume.observe(took.as_secs_f64())
            }
            _ => {}
        }
    }
}

/// The store thread's job timing; a clone is handed to [`outboard_store::Store::open_observed`].
#[derive(Clone)]
pub struct StoreMetrics {
    job: Histogram,
}

impl StoreMetrics {
    /// One job of the store thread (a read, or a write with its commit) took `took`.
    pub fn job_done(&self, took: Duration) {
        self.job.observe(took.as_secs_f64());
    }
}

impl outboard_store::JobObserver for StoreMetrics {
    fn job_done(&self, took: Duration) {
        StoreMetrics::job_done(self, took);
    }
}

impl outboard_harness::ToolMetrics for Metrics {
    fn tool_call(&self, tool: &str, is_error: bool, took: Duration) {
        Metrics::tool_call(self, tool, is_error, took);
    }
}

impl outboard_llm::CallMetrics for Metrics {
    fn start<'a>(
        &'a self,
        provider: &str,
        model: &str,
    ) -> Box<dyn outboard_llm::CallWatch + Send + 'a> {
        Box::new(self.model_call(provider, model))
    }
}

impl outboard_llm::CallWatch for ModelCall<'_> {
    fn delta(&mut self, text: bool, retry: bool) {
        ModelCall::delta(self, text, retry);
    }

    fn finish(self: Box<Self>, result: Result<&Usage, outboard_llm::CallOutcome>) {
        ModelCall::finish(*self, result.map_err(ModelOutcome::from));
    }
}

/// One model call being watched: made by [`Metrics::model_call`], told of each streamed delta,
/// finished with the outcome.
pub struct ModelCall<'a> {
    metrics: &'a ModelMetrics,
    labels: ModelLabels,
    started: Instant,
    first_text: bool,
}

impl ModelCall<'_> {
    /// A delta arrived: the first text one marks the time to first token; a retry is counted.
    pub fn delta(&mut self, text: bool, retry: bool) {
        if text && !self.first_text {
            self.first_text = true;
            self.metrics.ttft.get_or_create(&self.labels).observe(self.elapsed());
        }
        if retry {
            self.metrics.retries.get_or_create(&self.labels).inc();
        }
    }

    /// The call ended: its outcome, latency and, when it answered, its tokens.
    pub fn finish(self, result: Result<&Usage, ModelOutcome>) {
        let m = self.metrics;
        let ModelLabels { provider, model } = self.labels.clone();
        let outcome = match result {
            Ok(_) => ModelOutcome::ok,
            Err(outcome) => outcome,
        };
        let labels =
            ModelOutcomeLabels { provider: provider.clone(), model: model.clone(), outcome };
        m.requests.get_or_create(&labels).inc();
        m.duration.get_or_create(&self.labels).observe(self.elapsed());
        if let Ok(usage) = result {
            let kinds = [
                (TokenKind::input, usage.input_tokens),
                (TokenKind::output, usage.output_tokens),
                (TokenKind::cache_read, usage.cache_read_tokens),
                (TokenKind::cache_write, usage.cache_write_tokens),
            ];
            for (kind, n) in kinds {
                let labels = TokenLabels { provider: provider.clone(), model: model.clone(), kind };
                m.tokens.get_or_create(&labels).inc_by(n);
            }
        }
    }

    fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }
}

/// Counts an open WebSocket connection until dropped.
pub struct ConnectionGuard(Gauge);

impl Drop for ConnectionGuard {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Why a connection's handshake failed (`outboard_handshake_failures_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandshakeFailure {
    /// No hello within the handshake timeout.
    Timeout,
    /// The first frame was not a readable hello.
    BadHello,
    /// The client speaks another protocol version.
    ProtocolVersion,
    /// More than the pre-hello budget before hello, or a hello over the frame limit.
    TooLarge,
}

/// Why a credential was refused (`outboard_auth_failures_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthFailure {
    /// A token that is not (or no longer) valid.
    UnknownToken,
    /// An HTTP request without a usable `Authorization: Bearer` header.
    MissingToken,
}

/// The label of a tool name: built-in names as they are, `mcp` for MCP tools, `other` else.
pub fn tool_label(name: &str) -> &'static str {
    if name.starts_with("mcp__") {
        return "mcp";
    }
    BUILT_IN_TOOLS.iter().find(|t| **t == name).copied().unwrap_or("other")
}

fn status_name(status: SessionStatus) -> &'static str {
    match status {
        SessionStatus::Idle => "idle",
        SessionStatus::Running => "running",
        SessionStatus::Failed => "failed",
        SessionStatus::Unknown => "unknown",
    }
}

/// The statuses always exposed (at 0 when no session has them), so a rule on one has a series.
const STATUSES: [SessionStatus; 3] =
    [SessionStatus::Idle, SessionStatus::Running, SessionStatus::Failed];

fn stop_name(stop: StopReason) -> &'static str {
    match stop {
        StopReason::EndTurn => "end_turn",
        StopReason::MaxTokens => "max_tokens",
        StopReason::StepLimit => "step_limit",
        StopReason::Interrupted => "interrupted",
        StopReason::Unknown => "unknown",
    }
}

impl Metrics {
    /// Every family registered, at zero.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("outboard");
        let r = &mut registry;
        let connections = Gauge::default();
        r.register("connections", "Open WebSocket connections", connections.clone());
        let connections_opened = Counter::default();
        r.register(
            "connections_opened",
            "WebSocket connections upgraded since the start",
            connections_opened.clone(),
        );
        let auth_failures = Family::default();
        r.register(
            "auth_failures",
            "Credentials refused (WebSocket hello and HTTP API), by reason",
            auth_failures.clone(),
        );
        let handshake_failures = Family::default();
        r.register(
            "handshake_failures",
            "WebSocket connections closed before a valid hello, by reason",
            handshake_failures.clone(),
        );
        let connections_cut = Family::default();
        r.register(
            "connections_cut",
            "WebSocket connections the server cut for a bound after hello (a client that does \
             not read what it asked for, a message never finished, a message over its size), by \
             reason",
            connections_cut.clone(),
        );
        let sessions = Family::default();
        r.register(
            "sessions",
            "Sessions in the store by status, read at each scrape",
            sessions.clone(),
        );
        let session_actors = Gauge::default();
        r.register(
            "session_actors",
            "Session actors in memory (idle ones stop after a minute)",
            session_actors.clone(),
        );
        let turns = Family::default();
        r.register("turns", "Turns ended, by outcome", turns.clone());
        let steps = Family::default();
        r.register(
            "steps",
            "Assistant messages committed (one per model call of a loop), by loop",
            steps.clone(),
        );
        let model = ModelMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(model_duration_buckets),
            ttft: Family::new_with_constructor(ttft_buckets),
            tokens: Family::default(),
            retries: Family::default(),
            seen: Mutex::new(HashSet::new()),
        };
        r.register(
            "model_requests",
            "Model calls ended (after the provider's retries), by provider, model and outcome",
            model.requests.clone(),
        );
        r.register(
            "model_request_duration_seconds",
            "Wall time of a model call, retries and streaming included",
            model.duration.clone(),
        );
        r.register(
            "model_time_to_first_token_seconds",
            "Time from a model call's start to its first streamed text",
            model.ttft.clone(),
        );
        r.register(
            "model_tokens",
            "Tokens of answered model calls, by kind (cache_read and cache_write are part of input)",
            model.tokens.clone(),
        );
        r.register(
            "model_retries",
            "Model call attempts that failed and were retried",
            model.retries.clone(),
        );
        let tool_calls = Family::default();
        r.register(
            "tool_calls",
            "Tool calls with a result, by tool and outcome",
            tool_calls.clone(),
        );
        let tool_duration: Histograms<ToolLabel> = Family::new_with_constructor(tool_buckets);
        r.register("tool_call_duration_seconds", "Wall time of a tool call", tool_duration.clone());
        let sandbox = SandboxMetrics {
            live: Family::default(),
            transitions: Family::default(),
            // 10 ms to 20 s.
            cold_start: buckets(0.01, 2.0, 12),
            // 100 µs to 6.6 s: a thaw is well under a millisecond.
            resume: buckets(0.0001, 4.0, 9),
        };
        r.register("sandboxes", "Sandboxes that exist, by state", sandbox.live.clone());
        r.register(
            "sandbox_transitions",
            "Sandbox state changes, by the state entered",
            sandbox.transitions.clone(),
        );
        r.register(
            "sandbox_cold_start_seconds",
            "Time to provision a sandbox (spawn to its agent's hello)",
            sandbox.cold_start.clone(),
        );
        r.register(
            "sandbox_resume_seconds",
            "Time to thaw a frozen sandbox (thaw to its agent's pong)",
            sandbox.resume.clone(),
        );
        // 50 µs to 13 s: a commit takes tens of microseconds.
        let store = StoreMetrics { job: buckets(0.00005, 4.0, 10) };
        r.register(
            "store_job_duration_seconds",
            "Time the store thread spent on one job (a read, or a write and its commit)",
            store.job.clone(),
        );
        let store_queue_depth = Gauge::default();
        r.register(
            "store_queue_depth",
            "Jobs waiting for the store thread, read at each scrape (the queue holds 1024)",
            store_queue_depth.clone(),
        );
        let egress = Family::default();
        r.register(
            "egress_connections",
            "Sandbox connections through the network proxy, by outcome (allowed or refused)",
            egress.clone(),
        );
        let egress_dropped = Counter::default();
        r.register(
            "egress_audit_dropped",
            "Proxy audit records dropped because a session's audit queue was full",
            egress_dropped.clone(),
        );
        let upload_refusals = Family::default();
        r.register(
            "upload_refusals",
            "Uploads refused or cut by a bound (a quota, the cap, the deadline, a revoked token, \
             the depth, a history bundle's bounds), by bound",
            upload_refusals.clone(),
        );
        let upload_lookups = Counter::default();
        r.register(
            "upload_unpack_lookups",
            "Directory lookups unpacking uploads made (one per path component opened; linear in \
             the archive)",
            upload_lookups.clone(),
        );
        let metrics = Metrics {
            registry,
            connections,
            connections_opened,
            auth_failures,
            handshake_failures,
            connections_cut,
            sessions,
            session_actors,
            turns,
            steps,
            model,
            tool_calls,
            tool_duration,
            sandbox,
            store,
            store_queue_depth,
            egress,
            egress_dropped,
            upload_refusals,
            upload_lookups,
        };
        metrics.zero_known_series();
        metrics
    }

    /// Series that rules and dashboards name exist from the start, at zero, so a rate over them
    /// is 0 rather than absent before the first event.
    fn zero_known_series(&self) {
        for status in STATUSES {
            drop(self.sessions.get_or_create(&StatusLabel { status: status_name(status) }));
        }
        for reason in ["unknown_token", "missing_token"] {
            drop(self.auth_failures.get_or_create(&ReasonLabel { reason }));
        }
        for outcome in ["end_turn", "failed"] {
            drop(self.turns.get_or_create(&OutcomeLabel { outcome }));
        }
        for outcome in ["allowed", "refused"] {
            drop(self.egress.get_or_create(&EgressLabel { outcome }));
        }
    }

    /// A WebSocket connection was upgraded; it counts as open until the guard drops.
    pub fn connection(&self) -> ConnectionGuard {
        self.connections_opened.inc();
        self.connections.inc();
        ConnectionGuard(self.connections.clone())
    }

    /// A handshake failed.
    pub fn handshake_failed(&self, why: HandshakeFailure) {
        let reason = match why {
            HandshakeFailure::Timeout => "timeout",
            HandshakeFailure::BadHello => "bad_hello",
            HandshakeFailure::ProtocolVersion => "protocol_version",
            HandshakeFailure::TooLarge => "too_large",
        };
        self.handshake_failures.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// A connection was cut for a bound after `hello`: `reason` is `unread_output`,
    /// `write_stall`, `unfinished_message` or `too_large`.
    pub fn connection_cut(&self, reason: &'static str) {
        self.connections_cut.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// A credential was refused.
    pub fn auth_failed(&self, why: AuthFailure) {
        let reason = match why {
            AuthFailure::UnknownToken => "unknown_token",
            AuthFailure::MissingToken => "missing_token",
        };
        self.auth_failures.get_or_create(&ReasonLabel { reason }).inc();
    }

    /// A session's durable event was committed: turns, steps and tool calls are counted from
    /// the log's own events, so what is counted is what happened (`parent`: a subagent's); tool
    /// calls by [`Metrics::tool_call`], which has their exact duration.
    pub fn event(&self, kind: &EventKind, subagent: bool) {
        match kind {
            EventKind::TurnCompleted { stop_reason, .. } => {
                self.turns.get_or_create(&OutcomeLabel { outcome: stop_name(*stop_reason) }).inc();
            }
            EventKind::TurnFailed { .. } => {
                self.turns.get_or_create(&OutcomeLabel { outcome: "failed" }).inc();
            }
            EventKind::AssistantMessage { .. } => {
                let r#loop = if subagent { "subagent" } else { "main" };
                self.steps.get_or_create(&LoopLabel { r#loop }).inc();
            }
            _ => {}
        }
    }

    /// A tool call's result was committed: counted by tool and outcome, and timed to the
    /// microsecond (the log's `duration_ms` would put every call under a millisecond at 0).
    pub fn tool_call(&self, name: &str, is_error: bool, took: Duration) {
        let tool = tool_label(name);
        let outcome = if is_error { "error" } else { "ok" };
        self.tool_calls.get_or_create(&ToolOutcomeLabels { tool, outcome }).inc();
        self.tool_duration.get_or_create(&ToolLabel { tool }).observe(took.as_secs_f64());
    }

    /// Starts watching one model call of `provider`/`model`.
    pub fn model_call(&self, provider: &str, model: &str) -> ModelCall<'_> {
        ModelCall {
            labels: self.model.labels(provider, model),
            metrics: &self.model,
            started: Instant::now(),
            first_text: false,
        }
    }

    /// The families the sandbox managers report to.
    pub fn sandbox(&self) -> SandboxMetrics {
        self.sandbox.clone()
    }

    /// The family the store thread reports to.
    pub fn store(&self) -> StoreMetrics {
        self.store.clone()
    }

    /// One connection (or refusal) of a sandbox through the network proxy.
    pub fn egress(&self, allowed: bool) {
        let outcome = if allowed { "allowed" } else { "refused" };
        self.egress.get_or_create(&EgressLabel { outcome }).inc();
    }

    /// An upload was refused or cut by `bound` (a label of `uploads::limits::Bound`).
    pub fn upload_refused(&self, bound: &'static str) {
        self.upload_refusals.get_or_create(&ReasonLabel { reason: bound }).inc();
    }

    /// An upload was unpacked with `lookups` directory lookups.
    pub fn upload_unpacked(&self, lookups: u64) {
        self.upload_lookups.inc_by(lookups);
    }

    /// An audit record a full queue dropped.
    pub fn egress_audit_dropped(&self) {
        self.egress_dropped.inc();
    }

    /// The exposition, with the gauges read at scrape time set from `now`.
    pub fn render(&self, now: &Scrape) -> String {
        self.store_queue_depth.set(now.store_queue_depth as i64);
        self.session_actors.set(now.session_actors as i64);
        if let Some(counts) = &now.sessions {
            for status in STATUSES {
                let n = counts.iter().find(|(s, _)| *s == status).map_or(0, |(_, n)| *n);
                self.sessions.get_or_create(&StatusLabel { status: status_name(status) }).set(n);
            }
        }
        let mut out = String::new();
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
        {
            tracing::error!("cannot encode the metrics: {e}");
        }
        out
    }
}

/// What a scrape reads from the running server besides the families.
#[derive(Debug, Default)]
pub struct Scrape {
    /// Jobs waiting in the store's queue.
    pub store_queue_depth: usize,
    /// Session actors in memory.
    pub session_actors: usize,
    /// Sessions by status, from the store; `None` when the store did not answer in time (the
    /// previous values stay, and the queue depth tells why).
    pub sessions: Option<Vec<(SessionStatus, i64)>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line_value(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
            .and_then(|v| v.trim().parse().ok())
    }

    #[test]
    fn every_built_in_tool_has_its_own_label() {
        let mut names: Vec<String> = outboard_tools::specs().into_iter().map(|s| s.name).collect();
        names.push("Task".into());
        for name in names {
            assert_eq!(tool_label(&name), name, "{name} would be counted as other");
        }
        assert_eq!(tool_label("mcp__github__create_issue"), "mcp");
        assert_eq!(tool_label("rm_rf_everything"), "other");
    }

    #[test]
    fn invented_tool_names_share_one_series() {
        let m = Metrics::new();
        for i in 0..50 {
            m.tool_call(&format!("Invented{i}"), true, Duration::from_millis(1));
        }
        let text = m.render(&Scrape::default());
        assert_eq!(
            line_value(&text, r#"outboard_tool_calls_total{tool="other",outcome="error"}"#),
            Some(50.0)
        );
        assert!(!text.contains("Invented"), "an invented name became a label:\n{text}");
    }

    #[test]
    fn model_series_stop_at_the_bound() {
        let m = Metrics::new();
        for i in 0..MAX_MODEL_SERIES + 10 {
            m.model_call("openai", &format!("model-{i}")).finish(Ok(&Usage::default()));
        }
        let text = m.render(&Scrape::default());
        let own = text
            .lines()
            .filter(|l| l.starts_with("outboard_model_requests_total{") && l.contains("model-"))
            .count();
        assert_eq!(own, MAX_MODEL_SERIES);
        assert_eq!(
            line_value(
                &text,
                r#"outboard_model_requests_total{provider="openai",model="other",outcome="ok"}"#
            ),
            Some(10.0)
        );
        // A pair seen before the bound keeps its own series after it.
        m.model_call("openai", "model-0").finish(Err(ModelOutcome::cut));
        let text = m.render(&Scrape::default());
        assert_eq!(
            line_value(
                &text,
                r#"outboard_model_requests_total{provider="openai",model="model-0",outcome="cut"}"#
            ),
            Some(1.0)
        );
    }

    #[test]
    fn sandbox_gauge_follows_the_state_machine() {
        use SandboxState::*;
        let m = Metrics::new();
        let s = m.sandbox();
        let path = [None, Provisioning, Running, Suspended, Running, Dead, Provisioning, Running];
        for pair in path.windows(2) {
            s.transition(pair[0], pair[1], Duration::from_millis(3));
        }
        s.transition(Running, Stopped, Duration::ZERO);
        let text = m.render(&Scrape::default());
        for state in ["provisioning", "running", "suspended", "dead"] {
            let series = format!(r#"outboard_sandboxes{{state="{state}"}}"#);
            assert_eq!(line_value(&text, &series), Some(0.0), "{state}:\n{text}");
        }
        assert_eq!(line_value(&text, "outboard_sandbox_cold_start_seconds_count"), Some(2.0));
        assert_eq!(line_value(&text, "outboard_sandbox_resume_seconds_count"), Some(1.0));
        assert_eq!(
            line_value(&text, r#"outboard_sandbox_transitions_total{state="running"}"#),
            Some(3.0)
        );
    }
}
