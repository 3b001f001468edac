//! The `tracing` target of the spans Outboard exports over OTLP (`serve --otlp-endpoint`): a
//! turn, each model call, tool call, approval wait and compaction. They live under a target of
//! their own, never the crates' module paths, for two reasons: the exporter's layer enables
//! exactly this target and nothing else the process logs, and the log's filter turns it off
//! whatever `OUTBOARD_LOG` asks, so a span's fields (a prompt's text under `--otlp-content`)
//! never reach the log lines and their span prefixes. With no exporter, no subscriber wants the
//! target and every span of it is a disabled callsite: one cached check, nothing recorded.

/// The target of every exported span (`tracing::info_span!(target: TARGET, …)`).
pub const TARGET: &str = "outboard_spans";
