//! What an attaching client gets of the output of a tool in flight.
use super::in_flight::track_in_flight;
use super::*;
use outboard_shared::OutputStream;
use pretty_assertions::assert_eq;

fn delta(call_id: &str, text: &str) -> EventKind {
    EventKind::ToolOutputDelta {
        call_id: call_id.into(),
        stream: OutputStream::Stdout,
        text: text.into(),
    }
}

#[test]
fn tool_output_in_a_snapshot_stops_at_its_bound() {
    let mut f = InFlight::default();
    let chunk = "€".repeat(1000); // three bytes a character: the cut lands mid-character
    for _ in 0..100 {
        track_in_flight(&mut f, &delta("c1", &chunk));
    }
    let text = &f.tool_output[0].text;
    assert!(text.ends_with(IN_FLIGHT_CUT), "{}", &text[text.len() - 100..]);
    let kept = text.len() - IN_FLIGHT_CUT.len();
    assert_eq!(kept, IN_FLIGHT_TOOL_BYTES - IN_FLIGHT_TOOL_BYTES % 3);
    assert!(text[..kept].chars().all(|c| c == '€'));
    // The result ends the call's entry.
    track_in_flight(
        &mut f,
        &EventKind::ToolResult {
            call_id: "c1".into(),
            name: "Bash".into(),
            output: String::new(),
            is_error: false,
            duration_ms: 0,
            attachments: Vec::new(),
        },
    );
    assert_eq!(f.tool_output, vec![]);
}

#[test]
fn assistant_text_and_running_calls_are_bounded() {
    let mut f = InFlight::default();
    let chunk = "x".repeat(100 * 1024);
    for _ in 0..20 {
        track_in_flight(&mut f, &EventKind::AssistantDelta { text: chunk.clone() });
    }
    assert_eq!(f.assistant_text.len(), IN_FLIGHT_TEXT_BYTES + IN_FLIGHT_CUT.len());
    for i in 0..2 * IN_FLIGHT_TOOL_CALLS {
        track_in_flight(&mut f, &delta(&format!("c{i}"), "out"));
    }
    assert_eq!(f.tool_output.len(), IN_FLIGHT_TOOL_CALLS);
    track_in_flight(&mut f, &EventKind::AssistantDelta { text: "more".into() });
    assert!(f.assistant_text.ends_with(IN_FLIGHT_CUT));
}

#[test]
fn small_output_is_kept_whole() {
    let mut f = InFlight::default();
    track_in_flight(&mut f, &delta("c1", "one\n"));
    track_in_flight(&mut f, &delta("c1", "two\n"));
    track_in_flight(&mut f, &EventKind::AssistantDelta { text: "Hi".into() });
    assert_eq!(f.tool_output[0].text, "one\ntwo\n");
    assert_eq!(f.assistant_text, "Hi");
}
