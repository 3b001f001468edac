//! `outboard usage`: the org's token usage from the server's `usage/report`, as a table or JSON,
//! with an estimated cost from a price table per model.
//!
//! The built-in table ([`BUILTIN_PRICES`]) holds the list prices of current Anthropic and OpenAI
//! models in US dollars per million tokens, for input, output, cache reads and cache writes. A
//! JSON file (`--prices FILE` or `OUTBOARD_PRICES`) adds rows or replaces built-in ones:
//!
//! ```json
//! {"my-local-model": {"input": 0, "output": 0},
//!  "claude-sonnet-4-5": {"input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75}}
//! ```
//!
//! A model is priced by the longest key its name (without the `provider/` prefix) starts with,
//! so `claude-sonnet-4-5-20250929` is priced as `claude-sonnet-4-5`. `cache_read` defaults to
//! `input` and `cache_write` to `input` when a file leaves them out. A model no key matches is
//! shown with its tokens and cost `unknown` (`null` in JSON), never a guess.

use std::io::Write;

use outboard_shared::{methods, Usage, UsageReportParams, UsageRow};
use serde::Serialize;

use crate::args::UsageArgs;
use crate::run::{Connection, RunError};

pub use outboard_client::prices::{Price, PriceError, PriceTable, BUILTIN_PRICES};

/// One row as `--json` prints it: the server's row and its estimated cost (`null`: unknown).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PricedRow {
    /// The group.
    pub key: String,
    /// The model.
    pub model: String,
    /// Model calls.
    pub calls: u64,
    /// Tokens.
    pub usage: Usage,
    /// Estimated cost in USD; `None` for a model without a price.
    pub cost_usd: Option<f64>,
}

/// What `--json` prints: the rows and their totals.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The grouping asked for.
    pub by: outboard_shared::UsageGroup,
    /// One per group and model.
    pub rows: Vec<PricedRow>,
    /// Every row's tokens summed.
    pub total: Usage,
    /// Model calls summed.
    pub calls: u64,
    /// The priced rows' costs summed; `None` when no row has a price.
    pub cost_usd: Option<f64>,
    /// Whether some row has no price (its tokens are in `total`, not in `cost_usd`).
    pub unpriced: bool,
}

/// Prices the server's rows.
pub fn report(by: outboard_shared::UsageGroup, rows: Vec<UsageRow>, prices: &PriceTable) -> Report {
    let mut total = Usage::default();
    let mut calls = 0;
    let mut cost: Option<f64> = None;
    let mut unpriced = false;
    let rows = rows
        .into_iter()
        .map(|r| {
            total.add(r.usage);
            calls += r.calls;
            let cost_usd = prices.price(&r.model).map(|p| p.cost(&r.usage));
            match cost_usd {
                Some(c) => cost = Some(cost.unwrap_or(0.0) + c),
                None => unpriced = true,
            }
            PricedRow { key: r.key, model: r.model, calls: r.calls, usage: r.usage, cost_usd }
        })
        .collect();
    Report { by, rows, total, calls, cost_usd: cost, unpriced }
}

/// The report as an aligned table with a total line.
pub fn table(report: &Report) -> String {
    if report.rows.is_empty() {
        return "no model calls recorded yet\n".to_owned();
    }
    let key = match report.by {
        outboard_shared::UsageGroup::Session => "SESSION",
        outboard_shared::UsageGroup::User => "USER",
        outboard_shared::UsageGroup::Day => "DAY",
    };
    let cost = |c: Option<f64>| c.map_or("unknown".to_owned(), |c| format!("${c:.4}"));
    let line = |k: &str, m: &str, calls: u64, u: &Usage, c: String| {
        [
            k.to_owned(),
            m.to_owned(),
            calls.to_string(),
            u.input_tokens.to_string(),
            u.cache_read_tokens.to_string(),
            u.cache_write_tokens.to_string(),
            u.output_tokens.to_string(),
            c,
        ]
    };
    let mut rows =
        vec![[key, "MODEL", "CALLS", "INPUT", "CACHE_READ", "CACHE_WRITE", "OUTPUT", "COST"]
            .map(str::to_owned)];
    for r in &report.rows {
        rows.push(line(&r.key, &r.model, r.calls, &r.usage, cost(r.cost_usd)));
    }
    let total_cost = match (report.cost_usd, report.unpriced) {
        (Some(c), true) => format!("${c:.4} + unknown"),
        (c, _) => cost(c),
    };
    rows.push(line("total", "", report.calls, &report.total, total_cost));
    let mut widths = [0usize; 8];
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    for row in &rows {
        let cells: Vec<String> =
            row.iter().zip(widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

/// Runs `outboard usage`; returns the exit status.
pub async fn usage(args: &UsageArgs, out: &mut impl Write) -> i32 {
    let prices = match &args.prices {
        Some(path) => match PriceTable::with_file(path) {
            Ok(table) => table,
            Err(err) => {
                eprintln!("outboard: {err}");
                return crate::exit::USAGE;
            }
        },
        None => PriceTable::default(),
    };
    match print(args, &prices, out).await {
        Ok(()) => crate::exit::OK,
        Err(err) => {
            eprintln!("outboard: {err}");
            err.exit_code()
        }
    }
}

async fn print(
    args: &UsageArgs,
    prices: &PriceTable,
    out: &mut impl Write,
) -> Result<(), RunError> {
    let conn = Connection::open_for(&args.connect, false).await?;
    let params = UsageReportParams {
        session_id: args.session.clone().map(outboard_shared::SessionId),
        by: args.by,
        since: args.since.clone(),
    };
    let answered = conn.client.call::<methods::UsageReport>(params).await;
    conn.close().await;
    let report = report(args.by, answered?.rows, prices);
    if args.json {
        serde_json::to_writer(&mut *out, &report).map_err(std::io::Error::from)?;
        writeln!(out)?;
    } else {
        out.write_all(table(&report).as_bytes())?;
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn usage(input: u64, output: u64, read: u64, write: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: read,
            cache_write_tokens: write,
        }
    }

    #[test]
    fn prices_by_longest_prefix_and_cache_rates() {
        let table = PriceTable::default();
        let sonnet = table.price("anthropic/claude-sonnet-4-5-20250929").unwrap();
        // 1M uncached input at $3, 1M cache reads at $0.30, 1M writes at $3.75, 1M out at $15.
        let cost = sonnet.cost(&usage(3_000_000, 1_000_000, 1_000_000, 1_000_000));
        assert!((cost - 22.05).abs() < 1e-9, "{cost}");
        assert_eq!(table.price("openai/gpt-4.1-mini").unwrap().input, 0.4);
        assert_eq!(table.price("openai/gpt-4.1").unwrap().input, 2.0);
        assert!(table.price("openai/mock-model").is_none());
    }

    #[test]
    fn unknown_models_have_tokens_and_no_cost() {
        let rows = vec![
            UsageRow {
                key: "a".into(),
                model: "openai/gpt-4o".into(),
                calls: 1,
                usage: usage(1_000_000, 0, 0, 0),
            },
            UsageRow {
                key: "b".into(),
                model: "openai/local".into(),
                calls: 2,
                usage: usage(10, 5, 0, 0),
            },
        ];
        let r = report(outboard_shared::UsageGroup::Session, rows, &PriceTable::default());
        assert_eq!(r.rows[1].cost_usd, None);
        assert_eq!(r.cost_usd, Some(2.5));
        assert!(r.unpriced);
        assert_eq!(r.total, usage(1_000_010, 5, 0, 0));
        assert!(table(&r).contains("unknown"), "{}", table(&r));
    }
}
