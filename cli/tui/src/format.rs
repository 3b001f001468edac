//! Small text formatters shared by the transcript (`app`, `subagents`) and the status line
//! (`render`): token counts, durations and a tool call's one-line summary. They build on no
//! other module of the TUI.

use serde_json::Value;

/// `950`, `12.3k`, `4.1M`.
pub fn compact(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1000..=999_999 => format!("{:.1}k", n as f64 / 1000.0),
        _ => format!("{:.1}M", n as f64 / 1_000_000.0),
    }
}

/// `850 ms`, `1.2 s`, `2 m 05 s`.
pub fn format_ms(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms} ms"),
        1000..=59_999 => format!("{:.1} s", ms as f64 / 1000.0),
        _ => format!("{} m {:02} s", ms / 60_000, (ms / 1000) % 60),
    }
}

/// A tool call's one-line summary: the command, the path or the pattern.
pub fn tool_summary(name: &str, input: &Value) -> String {
    let field = |k: &str| input.get(k).and_then(Value::as_str).map(str::to_owned);
    let summary = match name {
        "Bash" => field("command"),
        "Read" | "Write" | "Edit" => field("file_path"),
        "NotebookEdit" => field("notebook_path"),
        "Glob" | "Grep" => field("pattern"),
        _ => None,
    };
    summary.unwrap_or_else(|| match input {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    })
}
