//! `outboard models`: the models the server offers, as a table or as JSON for scripts. A
//! session picks one by name (`outboard run --model NAME`, `/model NAME` in the TUI).

use std::io::Write;

use outboard_shared::{methods, Empty, ModelInfo};

use crate::args::ModelsArgs;
use crate::run::{Connection, RunError};

/// Runs `outboard models`; returns the exit status.
pub async fn models(args: &ModelsArgs, out: &mut impl Write) -> i32 {
    match list(args, out).await {
        Ok(()) => crate::exit::OK,
        Err(err) => {
            eprintln!("outboard: {err}");
            err.exit_code()
        }
    }
}

async fn list(args: &ModelsArgs, out: &mut impl Write) -> Result<(), RunError> {
    let conn = Connection::open_for(&args.connect, false).await?;
    let listed = conn.client.call::<methods::ModelsList>(Empty {}).await;
    conn.close().await;
    let models = listed?.models;
    if args.json {
        serde_json::to_writer(&mut *out, &models).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        out.write_all(table(&models).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

/// The models as an aligned table; the default is marked `*`. Where each window came from is a
/// column; a guessed one (`provider default`) gets a line under the table saying how to set it.
pub fn table(models: &[ModelInfo]) -> String {
    let header = ["", "NAME", "MODEL", "WINDOW", "FROM", "THINKING", "PRICE IN/OUT $/MTOK"]
        .map(str::to_owned);
    let rows: Vec<[String; 7]> = models
        .iter()
        .map(|m| {
            [
                if m.default { "*".to_owned() } else { String::new() },
                m.name.clone(),
                m.label.clone(),
                tokens(m.context_window),
                m.context_window_source.map_or("-", |s| s.label()).to_owned(),
                m.thinking_budget.map_or_else(|| "-".to_owned(), |b| tokens(u64::from(b))),
                m.prices.map_or_else(|| "-".to_owned(), |p| format!("{}/{}", p.input, p.output)),
            ]
        })
        .collect();
    let mut widths = header.clone().map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    for row in std::iter::once(&header).chain(&rows) {
        let cells: Vec<String> =
            row.iter().zip(widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    for m in models.iter().filter(|m| m.context_window_source.is_some_and(|s| s.is_guess())) {
        let from = m.context_window_from.as_deref().unwrap_or("a guess");
        text.push_str(&format!("{}: window {} — {from}\n", m.name, tokens(m.context_window)));
    }
    text
}

/// `200k`, `1M`, `8192`.
fn tokens(n: u64) -> String {
    match n {
        n if n >= 1_000_000 && n % 1_000_000 == 0 => format!("{}M", n / 1_000_000),
        n if n >= 10_000 && n % 1000 == 0 => format!("{}k", n / 1000),
        n => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use outboard_shared::WindowSource;

    use super::*;

    #[test]
    fn the_table_marks_the_default_and_shortens_windows() {
        let m = |name: &str, default: bool, thinking: Option<u32>| ModelInfo {
            name: name.into(),
            provider: "anthropic".into(),
            model: format!("claude-{name}"),
            label: format!("anthropic/claude-{name}"),
            context_window: 200_000,
            context_window_source: Some(WindowSource::Table),
            context_window_from: Some("the model table".into()),
            max_tokens: 8192,
            thinking_budget: thinking,
            prices: None,
            default,
        };
        let guessed = ModelInfo {
            context_window_source: Some(WindowSource::ProviderDefault),
            context_window_from: Some("a guess: set --context-window".into()),
            ..m("alias", false, None)
        };
        let text = table(&[m("sonnet", true, Some(4096)), m("haiku", false, None), guessed]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "   NAME    MODEL                    WINDOW  FROM              THINKING  PRICE IN/OUT $/MTOK"
        );
        assert_eq!(
            lines[1],
            "*  sonnet  anthropic/claude-sonnet  200k    table             4096      -"
        );
        assert_eq!(
            lines[2],
            "   haiku   anthropic/claude-haiku   200k    table             -         -"
        );
        assert_eq!(
            lines[3],
            "   alias   anthropic/claude-alias   200k    provider default  -         -"
        );
        assert_eq!(lines[4], "alias: window 200k — a guess: set --context-window");
    }
}
