//! `--upload [DIR]` as the binary shows it: the client library packs and sends the tree
//! ([`outboard_client::upload`]); this draws the progress line on stderr: redrawn in place on a
//! terminal, a line per quarter otherwise, none in `--json` mode.

use std::io::Write as _;
use std::time::{Duration, Instant};

pub use outboard_client::upload::{http_base, pack, select, Packed, Selection, UploadError};
use outboard_client::ConnectOptions;
use outboard_shared::UploadResponse;

/// How often the progress line is redrawn on a terminal.
const REDRAW_EVERY: Duration = Duration::from_millis(200);

/// How progress is shown while the archive is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressMode {
    /// A line redrawn with `\r` on stderr (a terminal).
    Redraw,
    /// A plain line at each quarter (stderr is not a terminal).
    Lines,
    /// Nothing (`--json`).
    Quiet,
}

/// The progress line of one upload.
struct Meter {
    mode: ProgressMode,
    total: u64,
    sent: u64,
    started: Instant,
    last_draw: Option<Instant>,
    quarter: u64,
}

impl Meter {
    fn advance_to(&mut self, sent: u64) {
        self.sent = sent;
        let now = Instant::now();
        match self.mode {
            ProgressMode::Quiet => {}
            ProgressMode::Redraw => {
                let due = self.last_draw.is_none_or(|t| now.duration_since(t) >= REDRAW_EVERY);
                if due || self.sent == self.total {
                    self.last_draw = Some(now);
                    eprint!("\r\x1b[2K{}", self.line());
                    if self.sent == self.total {
                        eprintln!();
                    }
                    let _ = std::io::stderr().flush();
                }
            }
            ProgressMode::Lines => {
                let quarter = self.sent.saturating_mul(4) / self.total.max(1);
                if quarter > self.quarter {
                    self.quarter = quarter;
                    eprintln!("{}", self.line());
                }
            }
        }
    }

    fn line(&self) -> String {
        let secs = self.started.elapsed().as_secs_f64().max(0.001);
        let percent = self.sent.saturating_mul(100) / self.total.max(1);
        format!(
            "uploading {} / {} ({percent}%), {:.1} MiB/s",
            mib(self.sent),
            mib(self.total),
            self.sent as f64 / secs / MIB
        )
    }
}

const MIB: f64 = 1024.0 * 1024.0;

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB)
}

/// Sends `packed` to the server at `server` (its `ws(s)://` URL) as `token`'s upload, showing
/// its progress as `mode` says.
pub async fn send(
    packed: &Packed,
    server: &str,
    token: &str,
    options: &ConnectOptions,
    mode: ProgressMode,
) -> Result<UploadResponse, UploadError> {
    let mut meter = Meter {
        mode,
        total: packed.bytes,
        sent: 0,
        started: Instant::now(),
        last_draw: None,
        quarter: 0,
    };
    let progress = Box::new(move |sent: u64, _total: u64| meter.advance_to(sent));
    outboard_client::upload::send(packed, server, token, options, progress).await
}
