//! The log filter both binaries build from the user's directives, with the libraries that would
//! log credentials capped. One function, so a cap added for one binary protects the other.

/// The `tracing` target of the spans the server exports over OTLP (`outboard_base::spans::TARGET`
/// in the server, which cannot be named from here; the app's test
/// `the_exported_spans_never_reach_the_log` holds the two equal).
pub const SPANS_TARGET: &str = "outboard_spans";

/// The log filter of `outboard-server` (`OUTBOARD_LOG`) and `outboard` (`RUST_LOG`): the user's
/// directives, or `default`, with the WebSocket library capped at `debug` whatever they ask, and
/// the exported spans' target ([`SPANS_TARGET`]) off.
/// tungstenite logs every message it receives (the `hello` with its token included) and every
/// frame's payload at `trace`; nothing else in the process logs credentials at any level.
///
/// The cap only ever lowers a level: it is added when the directives could reach `trace` at all.
/// (Added unconditionally, `tungstenite=debug` *enabled* those debug lines under a filter that
/// was otherwise `off`, and they scrolled the TUI's screen.) An empty `RUST_LOG` counts as unset.
pub fn log_filter(user: Option<&str>, default: &str) -> tracing_subscriber::EnvFilter {
    let spec = user.map(str::trim).filter(|s| !s.is_empty());
    let mut filter = spec
        .and_then(|s| tracing_subscriber::EnvFilter::try_new(s).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(default));
    // The exported spans never become log lines or their prefixes, whatever the directives say
    // (under `--otlp-content` their fields hold prompts); an `off` turns nothing on.
    if let Ok(directive) = format!("{SPANS_TARGET}=off").parse() {
        filter = filter.add_directive(directive);
    }
    // The hint covers every directive (`trace`, `tungstenite=trace`, `5`); none means "maybe".
    if filter.max_level_hint().is_none_or(|max| max >= tracing::level_filters::LevelFilter::TRACE) {
        for cap in ["tungstenite=debug", "tokio_tungstenite=debug"] {
            if let Ok(directive) = cap.parse() {
                filter = filter.add_directive(directive);
            }
        }
    }
    // The PostgreSQL driver logs every statement with its parameters at debug: message texts,
    // token hashes, sealed values. Kept at info unless asked for by name.
    // Only where debug is on at all: a cap that is a directive of its own would turn an `off`
    // filter on.
    let debug =
        filter.max_level_hint().is_none_or(|max| max >= tracing::level_filters::LevelFilter::DEBUG);
    if debug && !spec.is_some_and(|s| s.contains("postgres")) {
        for cap in ["tokio_postgres=info", "postgres=info"] {
            if let Ok(directive) = cap.parse() {
                filter = filter.add_directive(directive);
            }
        }
    }
    filter
}

#[cfg(test)]
mod tests {
    use super::log_filter;
    use tracing::level_filters::LevelFilter;

    #[test]
    fn the_websocket_cap_never_turns_logging_on() {
        // Off stays off (the TUI's screen must not get tungstenite's debug lines).
        assert_eq!(log_filter(None, "off").max_level_hint(), Some(LevelFilter::OFF));
        assert_eq!(log_filter(Some(""), "off").max_level_hint(), Some(LevelFilter::OFF));
        assert_eq!(log_filter(Some("info"), "off").max_level_hint(), Some(LevelFilter::INFO));
        // Trace asked for: everything at trace but the WebSocket library, capped at debug.
        let capped = log_filter(Some("trace"), "off").to_string();
        assert!(capped.contains("tungstenite=debug"), "{capped}");
        let capped = log_filter(Some("tungstenite=trace"), "off").to_string();
        assert!(capped.contains("tungstenite=debug"), "{capped}");
        // Debug asked for: the PostgreSQL driver's statement lines (parameters and all) stay out
        // unless asked for by name.
        let capped = log_filter(Some("debug"), "off").to_string();
        assert!(capped.contains("tokio_postgres=info"), "{capped}");
        let named = log_filter(Some("debug,tokio_postgres=debug"), "off").to_string();
        assert!(!named.contains("tokio_postgres=info"), "{named}");
    }
}
