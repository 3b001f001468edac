//! What model tokens cost: the built-in list prices and a file's overrides. `outboard usage`
//! prices its report with them and the TUI's status line estimates a session's cost.

use std::collections::BTreeMap;
use std::path::Path;

use outboard_shared::Usage;
use serde::{Deserialize, Serialize};

/// Dollars per million tokens of one model.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Price {
    /// Uncached input.
    pub input: f64,
    /// Output.
    pub output: f64,
    /// Input read from the prompt cache (default: `input`).
    #[serde(default)]
    pub cache_read: Option<f64>,
    /// Input written to the prompt cache (default: `input`).
    #[serde(default)]
    pub cache_write: Option<f64>,
}

impl Price {
    const fn of(input: f64, output: f64, cache_read: f64, cache_write: f64) -> Price {
        Price { input, output, cache_read: Some(cache_read), cache_write: Some(cache_write) }
    }

    /// The cost of `usage` in dollars.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let per = |tokens: u64, price: f64| tokens as f64 * price / 1_000_000.0;
        per(usage.uncached_input_tokens(), self.input)
            + per(usage.output_tokens, self.output)
            + per(usage.cache_read_tokens, self.cache_read.unwrap_or(self.input))
            + per(usage.cache_write_tokens, self.cache_write.unwrap_or(self.input))
    }
}

/// List prices (USD per million tokens) from anthropic.com/pricing and openai.com/api/pricing,
/// as of late 2025. Anthropic cache writes are the 5-minute ones (1.25× input), reads 0.1×;
/// OpenAI has no write charge and reads at its "cached input" price.
pub const BUILTIN_PRICES: &[(&str, Price)] = &[
    ("claude-opus-4-5", Price::of(5.0, 25.0, 0.5, 6.25)),
    ("claude-opus-4", Price::of(15.0, 75.0, 1.5, 18.75)),
    ("claude-sonnet-4", Price::of(3.0, 15.0, 0.3, 3.75)),
    ("claude-3-7-sonnet", Price::of(3.0, 15.0, 0.3, 3.75)),
    ("claude-3-5-sonnet", Price::of(3.0, 15.0, 0.3, 3.75)),
    ("claude-haiku-4-5", Price::of(1.0, 5.0, 0.1, 1.25)),
    ("claude-3-5-haiku", Price::of(0.8, 4.0, 0.08, 1.0)),
    ("gpt-5-mini", Price::of(0.25, 2.0, 0.025, 0.25)),
    ("gpt-5-nano", Price::of(0.05, 0.4, 0.005, 0.05)),
    ("gpt-5", Price::of(1.25, 10.0, 0.125, 1.25)),
    ("gpt-4.1-mini", Price::of(0.4, 1.6, 0.1, 0.4)),
    ("gpt-4.1-nano", Price::of(0.1, 0.4, 0.025, 0.1)),
    ("gpt-4.1", Price::of(2.0, 8.0, 0.5, 2.0)),
    ("gpt-4o-mini", Price::of(0.15, 0.6, 0.075, 0.15)),
    ("gpt-4o", Price::of(2.5, 10.0, 1.25, 2.5)),
    ("o4-mini", Price::of(1.1, 4.4, 0.275, 1.1)),
    ("o3", Price::of(2.0, 8.0, 0.5, 2.0)),
];

/// The table a report prices with: the built-in rows, overridden by a file's.
#[derive(Debug, Clone, PartialEq)]
pub struct PriceTable {
    rows: BTreeMap<String, Price>,
}

impl Default for PriceTable {
    fn default() -> Self {
        PriceTable { rows: BUILTIN_PRICES.iter().map(|(k, p)| ((*k).to_owned(), *p)).collect() }
    }
}

/// A price file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PriceError {
    /// It cannot be read.
    #[error("cannot read the price file {path}: {error}")]
    Read {
        /// The file.
        path: String,
        /// Why.
        error: std::io::Error,
    },
    /// It is not the expected JSON.
    #[error(
        "the price file {path} is not a JSON object of model → {{\"input\", \"output\", \
         \"cache_read\"?, \"cache_write\"?}} in USD per million tokens: {error}"
    )]
    Parse {
        /// The file.
        path: String,
        /// Why.
        error: serde_json::Error,
    },
}

impl PriceTable {
    /// The built-in table with the rows of the JSON file at `path` added or replacing.
    pub fn with_file(path: &Path) -> Result<PriceTable, PriceError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|error| PriceError::Read { path: shown.clone(), error })?;
        let rows: BTreeMap<String, Price> = serde_json::from_str(&text)
            .map_err(|error| PriceError::Parse { path: shown, error })?;
        let mut table = PriceTable::default();
        for (model, price) in rows {
            table.rows.insert(model.to_lowercase(), price);
        }
        Ok(table)
    }

    /// The price of `model` (`provider/model` or a bare name): the row with the longest key the
    /// name starts with.
    pub fn price(&self, model: &str) -> Option<&Price> {
        let name = model.split_once('/').map_or(model, |(_, m)| m).to_lowercase();
        self.rows
            .iter()
            .filter(|(key, _)| name.starts_with(key.as_str()))
            .max_by_key(|(key, _)| key.len())
            .map(|(_, price)| price)
    }
}
