//! A turn you can read (issue 51, item 3): the running turn's clock and streamed tokens for the
//! spinner, each finished turn's time, tokens and cost for the status line, and the
//! notification of a long turn that ends while the terminal is unfocused.

use super::*;
use crate::state::LastTurn;

/// A turn at least this long (ms) that ends while the terminal is unfocused is announced.
pub const LONG_TURN_MS: u64 = 10_000;

/// About this many characters of streamed text make a token (the count is exact once the
/// model call ends and reports its usage).
const CHARS_PER_TOKEN: u64 = 4;

impl App {
    /// A turn started (or an attach found one running).
    pub(super) fn turn_started(&mut self) {
        self.turn.started = Some(self.now);
        self.turn.usage_before = self.usage;
        self.turn.streamed_chars = 0;
        self.turn.interrupting = false;
        self.retry_cell = None;
    }

    /// The running turn's elapsed time and the tokens it has produced so far (the model
    /// calls that ended, and an estimate of the one streaming).
    pub fn turn_progress(&self) -> Option<(u64, u64)> {
        let started = self.turn.started?;
        let done = self.usage.output_tokens.saturating_sub(self.turn.usage_before.output_tokens);
        let streaming = self.turn.streamed_chars.div_ceil(CHARS_PER_TOKEN);
        Some((self.now.saturating_sub(started), done + streaming))
    }

    /// The turn ended: its figures for the status line, and a notification when it was long
    /// and the terminal is unfocused.
    pub(super) fn turn_ended(&mut self) -> Vec<Effect> {
        self.turn.interrupting = false;
        self.turn.streamed_chars = 0;
        self.retry_cell = None;
        let Some(started) = self.turn.started.take() else { return Vec::new() };
        let ms = self.now.saturating_sub(started);
        let before = self.turn.usage_before;
        let used = Usage {
            input_tokens: self.usage.input_tokens.saturating_sub(before.input_tokens),
            output_tokens: self.usage.output_tokens.saturating_sub(before.output_tokens),
            cache_read_tokens: self
                .usage
                .cache_read_tokens
                .saturating_sub(before.cache_read_tokens),
            cache_write_tokens: self
                .usage
                .cache_write_tokens
                .saturating_sub(before.cache_write_tokens),
        };
        let cost = self.session.as_ref().and_then(|s| {
            outboard_client::prices::PriceTable::default().price(&s.model).map(|p| p.cost(&used))
        });
        let tokens = used.input_tokens + used.output_tokens;
        self.turn.last = Some(LastTurn { ms, tokens, cost });
        if self.notify && !self.focused && ms >= LONG_TURN_MS {
            let what = self.session.as_ref().map_or("outboard", |s| s.title.as_str());
            let text = format!("{what}: the turn ended after {}", crate::format::format_ms(ms));
            return vec![Effect::Notify(text)];
        }
        Vec::new()
    }

    /// A model call failed and is retried: one line in the transcript, updated in place by
    /// the next retry of the same turn.
    pub(super) fn model_retry(&mut self, attempt: u32, delay_ms: u64, reason: &str) {
        self.streaming.clear();
        self.rerender_streaming();
        self.turn.streamed_chars = 0;
        let reason = outboard_client::describe::truncate(reason.lines().next().unwrap_or(""), 160);
        let text = format!(
            "model call failed ({reason}); retry {attempt} in {}",
            crate::format::format_ms(delay_ms)
        );
        match self.retry_cell.filter(|&i| i < self.cells.len()) {
            Some(i) => {
                self.cells[i].kind = CellKind::Notice { text, error: true };
                self.rerender(i);
            }
            None => {
                self.push_notice(text, true);
                self.retry_cell = Some(self.cells.len() - 1);
            }
        }
    }
}

/// A provider's error as one line a person can act on: the server's classified line, its
/// first line only, cut to `max` characters, with any HTML left out.
pub fn error_line(error: &str, max: usize) -> String {
    let first = error.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("");
    let line = match first.find('<') {
        Some(at) if first[at..].starts_with("<!") || first[at..].starts_with("<html") => {
            first[..at].trim_end().trim_end_matches(':').to_owned()
        }
        _ => first.to_owned(),
    };
    outboard_client::describe::truncate(&line, max)
}
