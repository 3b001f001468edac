//! Pages of a session's history on the wire: `session/attach`'s snapshot, `session/history`, the
//! catch-up after a reconnect, and the last guard that no frame leaves over [`MAX_FRAME_BYTES`].
//!
//! A session of a hundred thousand events must cost a watcher no more than one of a hundred:
//! the store reads one page with a LIMIT on the log's primary key ([`HISTORY_PAGE_EVENTS`]), and
//! this module cuts that page to [`HISTORY_PAGE_BYTES`] measured on the encoded response frame
//! itself (not an estimate), so a client's first screen is one small frame. An event larger than
//! the byte bound still goes out, alone in its page: events are bounded where they are made
//! (tool results by their tools, user messages by [`message_fits`], model output by its token
//! limit), and [`bounded_frame`] refuses anything that would still exceed the frame limit.

use outboard_shared::{
    ConnectionError, ErrorBody, ErrorCode, RequestId, Response, ServerFrame, SessionEvent,
    SessionHistoryResponse, HISTORY_PAGE_BYTES, HISTORY_PAGE_EVENTS, MAX_FRAME_BYTES,
};
use serde::Serialize;

use outboard_store::{Store, StoreError};

/// Which end of a page to keep when it is too large.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keep {
    /// The newest events (a first screen, a page back in history).
    Newest,
    /// The oldest events (a catch-up after `after_seq`, continued in order).
    Oldest,
}

/// The length of the response frame answering `id` with `result`, as the writer will send it.
pub fn response_len<T: Serialize>(id: RequestId, result: &T) -> usize {
    serde_json::to_string(&ServerFrame::Response(Response::ok(id, result)))
        .map_or(usize::MAX, |s| s.len())
}

/// Cuts `events` so that a frame of `base` bytes (the frame with no events) plus them fits in
/// [`HISTORY_PAGE_BYTES`], keeping the `keep` end; at least one event is kept, however large.
/// Returns the events kept, in their order.
pub fn fit(base: usize, mut events: Vec<SessionEvent>, keep: Keep) -> Vec<SessionEvent> {
    if events.len() > HISTORY_PAGE_EVENTS {
        match keep {
            Keep::Newest => drop(events.drain(..events.len() - HISTORY_PAGE_EVENTS)),
            Keep::Oldest => events.truncate(HISTORY_PAGE_EVENTS),
        }
    }
    let budget = HISTORY_PAGE_BYTES.saturating_sub(base);
    let mut used = 0usize;
    let mut kept = 0usize;
    let order: Box<dyn Iterator<Item = &SessionEvent>> = match keep {
        Keep::Newest => Box::new(events.iter().rev()),
        Keep::Oldest => Box::new(events.iter()),
    };
    for event in order {
        // One comma between events; the first one over-counts by a byte, which is harmless.
        let len = serde_json::to_string(event).map_or(usize::MAX, |s| s.len()).saturating_add(1);
        if kept > 0 && used.saturating_add(len) > budget {
            break;
        }
        used = used.saturating_add(len);
        kept += 1;
    }
    let n = events.len();
    match keep {
        Keep::Newest => events.split_off(n - kept),
        Keep::Oldest => {
            events.truncate(kept);
            events
        }
    }
}

/// `session/history`: the page just before `before`, at most `limit` events and one frame's
/// page bound.
pub async fn history(
    store: &Store,
    id: RequestId,
    session: &outboard_shared::SessionId,
    before: u64,
    limit: Option<u32>,
) -> Result<Response, ErrorBody> {
    let limit = limit.unwrap_or(HISTORY_PAGE_EVENTS as u32).clamp(1, HISTORY_PAGE_EVENTS as u32);
    let events = store.events_before(session, before, limit).await.map_err(internal)?;
    let empty = SessionHistoryResponse { events: Vec::new(), has_more: true, cursor: before };
    let events = fit(response_len(id, &empty), events, Keep::Newest);
    let cursor = events.first().map_or(before, |e| e.seq);
    // The log has every seq from 1 with no gap (the store enforces it).
    let has_more = cursor > 1;
    Ok(Response::ok(id, &SessionHistoryResponse { events, has_more, cursor }))
}

/// Reads the events after `from` up to `until` from the store, a page at a time, and hands each
/// to `send` in order (the catch-up of an attach with `after_seq` whose snapshot did not fit in
/// one frame). Stops early, with `Ok(false)`, when `send` says the connection is gone.
pub async fn catch_up<F, Fut>(
    store: &Store,
    session: &outboard_shared::SessionId,
    mut from: u64,
    until: u64,
    mut send: F,
) -> Result<bool, StoreError>
where
    F: FnMut(SessionEvent) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    while from < until {
        let page = store.events_after_limited(session, from, HISTORY_PAGE_EVENTS as u32).await?;
        if page.is_empty() {
            break;
        }
        for event in page {
            if event.seq > until {
                return Ok(true);
            }
            from = event.seq;
            if !send(event).await {
                return Ok(false);
            }
        }
    }
    Ok(true)
}

/// The text the writer sends for `frame`: its JSON, or, when that exceeds [`MAX_FRAME_BYTES`]
/// (the peer would refuse it and close), an error in its place saying what was too large: an
/// error response to the same request, else a non-fatal connection error.
pub fn bounded_frame(frame: &ServerFrame) -> Option<String> {
    let text = serde_json::to_string(frame).ok()?;
    if text.len() <= MAX_FRAME_BYTES {
        return Some(text);
    }
    tracing::warn!(bytes = text.len(), "refused to send a frame over the frame limit");
    let replacement = match frame {
        ServerFrame::Response(r) => ServerFrame::Response(Response::err(
            r.id,
            ErrorBody::new(
                ErrorCode::TooLarge,
                format!(
                    "the answer is {} bytes, over the {MAX_FRAME_BYTES}-byte frame limit; ask \
                     for less (a smaller limit, a narrower path)",
                    text.len()
                ),
            ),
        )),
        ServerFrame::Event(e) => ServerFrame::Error(ConnectionError {
            error: ErrorBody::new(
                ErrorCode::TooLarge,
                format!(
                    "session {}: event {} ({}) is {} bytes, over the {MAX_FRAME_BYTES}-byte frame \
                     limit, and was not sent; the rest of the session goes on",
                    e.event.session_id,
                    e.event.seq,
                    e.event.kind.type_name(),
                    text.len()
                ),
            ),
            fatal: false,
        }),
        _ => ServerFrame::Error(ConnectionError {
            error: ErrorBody::new(
                ErrorCode::TooLarge,
                format!(
                    "a {}-byte frame over the {MAX_FRAME_BYTES}-byte limit was not sent",
                    text.len()
                ),
            ),
            fatal: false,
        }),
    };
    serde_json::to_string(&replacement).ok()
}

/// Room a `user_message` event frame needs around its text (session id, seq, time, tags): the
/// request that carried the text had a smaller envelope, so a text that fit in its request frame
/// could still make an event frame over the limit without this margin.
pub const EVENT_ENVELOPE_BYTES: usize = 1024;

/// Refuses a user message whose event could not be sent to the session's clients in one frame:
/// the message would be durable but no client could ever be shown it.
pub fn message_fits(text: &str) -> Result<(), ErrorBody> {
    let encoded = serde_json::to_string(text).map_or(usize::MAX, |s| s.len());
    let most = MAX_FRAME_BYTES - EVENT_ENVELOPE_BYTES;
    if encoded <= most {
        return Ok(());
    }
    Err(ErrorBody::new(
        ErrorCode::TooLarge,
        format!(
            "the message is {encoded} bytes encoded; at most {most} fit in an event: put large \
             content in a file in the workspace and refer to it"
        ),
    ))
}

fn internal(e: StoreError) -> ErrorBody {
    ErrorBody::new(ErrorCode::Internal, e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use outboard_shared::{EventFrame, EventKind, SessionId};

    fn event(seq: u64, text_bytes: usize) -> SessionEvent {
        SessionEvent {
            session_id: SessionId::from("s_1"),
            seq,
            ts: "2026-01-01T00:00:00.000Z".into(),
            kind: EventKind::UserMessage { text: "x".repeat(text_bytes), attachments: Vec::new() },
            parent: None,
        }
    }

    #[test]
    fn a_page_stops_at_the_byte_bound_keeping_the_asked_end() {
        // 40 KiB each: about 25 fit in a 1 MiB page, far fewer than the count bound.
        let events: Vec<_> = (1..=100).map(|s| event(s, 40 * 1024)).collect();
        let newest = fit(200, events.clone(), Keep::Newest);
        assert!(newest.len() > 20 && newest.len() < 26, "{}", newest.len());
        assert_eq!(newest.last().map(|e| e.seq), Some(100));
        let bytes: usize = newest.iter().map(|e| serde_json::to_string(e).unwrap().len() + 1).sum();
        assert!(bytes + 200 <= HISTORY_PAGE_BYTES, "{bytes}");
        let oldest = fit(200, events, Keep::Oldest);
        assert_eq!(oldest.len(), newest.len());
        assert_eq!(oldest.first().map(|e| e.seq), Some(1));
    }

    #[test]
    fn a_page_stops_at_the_count_bound() {
        let events: Vec<_> = (1..=(HISTORY_PAGE_EVENTS as u64 + 7)).map(|s| event(s, 10)).collect();
        let page = fit(200, events, Keep::Newest);
        assert_eq!(page.len(), HISTORY_PAGE_EVENTS);
        assert_eq!(page.first().map(|e| e.seq), Some(8));
    }

    #[test]
    fn an_event_larger_than_a_page_goes_alone() {
        let events = vec![event(1, 10), event(2, HISTORY_PAGE_BYTES + 10)];
        let page = fit(200, events, Keep::Newest);
        assert_eq!(page.iter().map(|e| e.seq).collect::<Vec<_>>(), vec![2]);
    }

    #[test]
    fn a_message_is_refused_when_its_event_would_not_fit_a_frame() {
        let most = MAX_FRAME_BYTES - EVENT_ENVELOPE_BYTES;
        // Two bytes of quotes around it when encoded.
        assert!(message_fits(&"a".repeat(most - 2)).is_ok());
        let refused = message_fits(&"a".repeat(most - 1)).unwrap_err();
        assert_eq!(refused.code, ErrorCode::TooLarge);
        // Escaping counts: a newline is two bytes in the frame.
        assert!(message_fits(&"\n".repeat(most / 2)).is_err());
        // The biggest accepted message still makes an event frame within the limit.
        let event = event(1, 0);
        let text = "a".repeat(most - 2);
        let frame = ServerFrame::Event(EventFrame {
            event: SessionEvent {
                kind: EventKind::UserMessage { text, attachments: Vec::new() },
                ..event
            },
        });
        assert!(serde_json::to_string(&frame).unwrap().len() <= MAX_FRAME_BYTES);
    }

    #[test]
    fn a_frame_over_the_limit_is_replaced_by_an_error() {
        let small = ServerFrame::Event(EventFrame { event: event(3, 10) });
        assert!(bounded_frame(&small).unwrap().contains("\"seq\":3"));
        let huge = ServerFrame::Event(EventFrame { event: event(4, MAX_FRAME_BYTES) });
        let text = bounded_frame(&huge).unwrap();
        assert!(text.len() < 1024, "{}", text.len());
        assert!(text.contains("too_large") && text.contains("event 4"), "{text}");
        let answer = ServerFrame::Response(Response::ok(
            RequestId(9),
            &serde_json::json!({"big": "y".repeat(MAX_FRAME_BYTES)}),
        ));
        let text = bounded_frame(&answer).unwrap();
        assert!(text.contains("\"id\":9") && text.contains("too_large"), "{text}");
    }
}
