//! The bounds of what a session keeps of a turn in flight (streamed text, running tool calls)
//! for a late attacher.

use outboard_shared::{EventKind, InFlight, ToolOutputSoFar};

/// Assistant text a snapshot carries of the answer streaming now; a late joiner sees the rest
/// when the complete `assistant_message` lands. Half a MiB keeps a snapshot well inside the
/// client's 4 MiB frame limit even with JSON escaping.
pub const IN_FLIGHT_TEXT_BYTES: usize = 512 * 1024;

/// Output a snapshot carries of one running tool call: `Bash` streams at most 30,000 bytes to
/// watchers, so this only bites a tool that does not cap itself.
pub const IN_FLIGHT_TOOL_BYTES: usize = 64 * 1024;

/// Running tool calls a snapshot carries output of (a turn runs one at a time today; parallel
/// subagents will run a few).
pub const IN_FLIGHT_TOOL_CALLS: usize = 8;

/// Appended once where a snapshot's partial text was cut.
pub const IN_FLIGHT_CUT: &str =
    "\n[… cut here in the snapshot; the complete text follows when it is recorded]";

/// Folds one event into the turn's in-flight view, within its bounds.
pub(super) fn track_in_flight(f: &mut InFlight, kind: &EventKind) {
    match kind {
        EventKind::AssistantDelta { text } => {
            push_capped(&mut f.assistant_text, text, IN_FLIGHT_TEXT_BYTES)
        }
        EventKind::ModelRetry { .. } | EventKind::AssistantMessage { .. } => {
            f.assistant_text.clear()
        }
        EventKind::ToolOutputDelta { call_id, text, .. } => {
            let running = f.tool_output.len();
            match f.tool_output.iter_mut().find(|o| &o.call_id == call_id) {
                Some(o) => push_capped(&mut o.text, text, IN_FLIGHT_TOOL_BYTES),
                None if running < IN_FLIGHT_TOOL_CALLS => {
                    let mut so_far =
                        ToolOutputSoFar { call_id: call_id.clone(), text: String::new() };
                    push_capped(&mut so_far.text, text, IN_FLIGHT_TOOL_BYTES);
                    f.tool_output.push(so_far);
                }
                None => {}
            }
        }
        EventKind::ToolResult { call_id, .. } => f.tool_output.retain(|o| &o.call_id != call_id),
        EventKind::TurnCompleted { .. } | EventKind::TurnFailed { .. } => *f = InFlight::default(),
        _ => {}
    }
}

/// Appends `more` to `buf` up to `cap` bytes (on a character boundary), then [`IN_FLIGHT_CUT`]
/// once; a buffer already cut takes nothing more.
pub(super) fn push_capped(buf: &mut String, more: &str, cap: usize) {
    if buf.len() >= cap {
        return;
    }
    if buf.len() + more.len() <= cap {
        buf.push_str(more);
        return;
    }
    let mut end = cap - buf.len();
    while !more.is_char_boundary(end) {
        end -= 1;
    }
    buf.push_str(&more[..end]);
    // The marker is longer than a character, so the buffer is past the cap from here on.
    buf.push_str(IN_FLIGHT_CUT);
}
