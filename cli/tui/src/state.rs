//! The TUI's plain state types that more than its update function uses: the connection's state
//! and the session picker, which drawing reads, and a tool call's cell, which a subagent group
//! holds too. They hold data only and build on no other module of the TUI; `app` re-exports them,
//! so `tui::app::ConnState` and the others keep their paths.

use outboard_shared::SessionInfo;
use serde_json::Value;

/// The state of the connection to the server, as shown in the status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnState {
    /// The first connection is being made.
    Connecting,
    /// Connected and attached.
    Connected,
    /// The connection dropped; retrying.
    Reconnecting {
        /// Attempts so far.
        attempt: u32,
        /// The last error, one line.
        reason: String,
    },
    /// Gave up (refused token, the server says no): the reason.
    Gone(String),
}

/// A running or finished tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCell {
    /// The call id.
    pub call_id: String,
    /// The tool.
    pub name: String,
    /// Its input.
    pub input: Value,
    /// Output streamed so far.
    pub output: String,
    /// Once finished: error flag, result text, duration.
    pub result: Option<(bool, String, u64)>,
}

impl ToolCell {
    /// A call that has started, with no output yet.
    pub fn started(call: outboard_shared::ToolCall) -> Self {
        ToolCell {
            call_id: call.call_id,
            name: call.name,
            input: call.input,
            output: String::new(),
            result: None,
        }
    }

    /// A call known only by its result (its start is on an older page).
    pub fn from_result(call_id: String, name: String, result: (bool, String, u64)) -> Self {
        ToolCell { call_id, name, input: Value::Null, output: String::new(), result: Some(result) }
    }
}

/// The session picker.
#[derive(Debug, Clone, PartialEq)]
pub struct Picker {
    /// The sessions listed.
    pub sessions: Vec<SessionInfo>,
    /// The highlighted row.
    pub selected: usize,
}

/// The running turn's clock and counters (the spinner) and the last turn's figures (the status
/// line), as times on the runtime's clock (ms).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct TurnStats {
    /// When the running turn started (or was found running at an attach).
    pub started: Option<u64>,
    /// The session's usage when it started: the turn's own is the difference.
    pub usage_before: outboard_shared::Usage,
    /// Characters of the answer streamed by the model call in flight (its tokens are known
    /// when it ends; about four characters make a token until then).
    pub streamed_chars: u64,
    /// The last turn that ended: how long it took, its tokens and its cost (`None`: no price).
    pub last: Option<LastTurn>,
    /// An interrupt was asked for and the turn has not ended yet.
    pub interrupting: bool,
}

/// A finished turn's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LastTurn {
    /// Wall time (ms).
    pub ms: u64,
    /// Input and output tokens of its model calls.
    pub tokens: u64,
    /// Estimated cost in dollars, `None` when the model's price is unknown.
    pub cost: Option<f64>,
}
