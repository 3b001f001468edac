//! Attach roles and fan-out over real processes: several clients on one session see the same
//! events, a late joiner gets the partial turn then the rest with no gap or duplicate, only the
//! driver sends, driving is handed over and taken back, another org cannot attach, and a client
//! that stops reading neither delays the others nor is silently dropped.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use outboard_shared::{
    ErrorCode, EventKind, PresenceEntry, Role, ServerFrame, SessionAttachResponse, SessionEvent,
};
use outboard_tests::fixture::{serve, turn_ended};
use outboard_tests::harness::{Api, TestServer, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use pretty_assertions::assert_eq;
use serde_json::json;

fn not_presence(e: &SessionEvent) -> bool {
    !matches!(e.kind, EventKind::Presence { .. } | EventKind::DriveRequested { .. })
}

fn roles(e: &SessionEvent) -> Option<Vec<(String, Role)>> {
    match &e.kind {
        EventKind::Presence { attached } => Some(
            attached.iter().map(|PresenceEntry { user, role, .. }| (user.clone(), *role)).collect(),
        ),
        _ => None,
    }
}

async fn create(c: &mut WsClient) -> String {
    let created = c.request("session/create", json!({})).await.unwrap().unwrap();
    created["session"]["id"].as_str().unwrap().to_owned()
}

async fn attach(c: &mut WsClient, sid: &str, role: &str) -> SessionAttachResponse {
    let r = c
        .request("session/attach", json!({"session_id": sid, "role": role}))
        .await
        .unwrap()
        .unwrap();
    serde_json::from_value(r).unwrap()
}

/// Waits for the presence event listing exactly `want`.
async fn presence_until(c: &mut WsClient, want: &[(&str, Role)]) {
    let want: Vec<(String, Role)> = want.iter().map(|(u, r)| ((*u).to_owned(), *r)).collect();
    c.events_until(|e| roles(e).as_ref() == Some(&want)).await.unwrap();
}

struct World {
    _mock: MockLlm,
    server: TestServer,
    alice: String,
    bob: String,
}

async fn world(steps: Vec<MockStep>) -> World {
    let mock = MockLlm::start(steps).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let alice = server.add_user("alice", "acme").unwrap();
    let bob = server.add_user("bob", "acme").unwrap();
    World { _mock: mock, server, alice, bob }
}

#[tokio::test]
async fn driver_and_watcher_see_identical_events() {
    let w = world(vec![
        MockStep::tool_call("Bash", json!({"command": "echo hi"})),
        MockStep::text("Done: **hi**.").chunk_delay(5),
    ])
    .await;
    let mut a = WsClient::connect(&w.server.url, &w.alice).await.unwrap();
    let sid = create(&mut a).await;
    attach(&mut a, &sid, "driver").await;
    let mut b = WsClient::connect(&w.server.url, &w.bob).await.unwrap();
    let snap = attach(&mut b, &sid, "watcher").await;
    assert_eq!(snap.role, Role::Watcher);
    let both = [("alice", Role::Driver), ("bob", Role::Watcher)];
    presence_until(&mut a, &both).await;
    presence_until(&mut b, &both).await;

    a.request("turn/send", json!({"session_id": sid, "text": "say hi"})).await.unwrap().unwrap();
    let from_a: Vec<SessionEvent> =
        a.events_until(turn_ended).await.unwrap().into_iter().filter(not_presence).collect();
    let from_b: Vec<SessionEvent> =
        b.events_until(turn_ended).await.unwrap().into_iter().filter(not_presence).collect();
    assert!(from_a.iter().any(|e| matches!(e.kind, EventKind::AssistantDelta { .. })));
    assert_eq!(from_a, from_b);
}

#[tokio::test]
async fn a_client_joining_mid_stream_gets_the_partial_turn_then_the_rest() {
    let deltas: Vec<String> = (0..60).map(|i| format!("word{i} ")).collect();
    let deltas: Vec<&str> = deltas.iter().map(String::as_str).collect();
    let full: String = deltas.concat();
    let w = world(vec![MockStep::text(&full).with_deltas(&deltas).chunk_delay(20)]).await;
    let mut a = WsClient::connect(&w.server.url, &w.alice).await.unwrap();
    let sid = create(&mut a).await;
    attach(&mut a, &sid, "driver").await;
    a.request("turn/send", json!({"session_id": sid, "text": "talk"})).await.unwrap().unwrap();
    // Wait until some text has streamed.
    a.events_until(
        |e| matches!(&e.kind, EventKind::AssistantDelta { text } if text.contains("word5")),
    )
    .await
    .unwrap();

    let mut c = WsClient::connect(&w.server.url, &w.bob).await.unwrap();
    let snap = attach(&mut c, &sid, "watcher").await;
    let partial = snap.in_flight.expect("a turn in flight").assistant_text;
    assert!(partial.starts_with("word0 word1"), "{partial:?}");
    let live = c.events_until(turn_ended).await.unwrap();
    let mut text = partial;
    for e in &live {
        match &e.kind {
            EventKind::AssistantDelta { text: t } => text.push_str(t),
            EventKind::AssistantMessage { .. } => break,
            _ => {}
        }
    }
    assert_eq!(text, full, "the partial text and the live deltas join without gap or duplicate");
    let mut seqs: Vec<u64> = snap.events.iter().map(|e| e.seq).collect();
    seqs.extend(live.iter().filter(|e| e.kind.is_durable()).map(|e| e.seq));
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "no gap, no duplicate");
}

#[tokio::test]
async fn only_the_driver_sends_and_driving_is_handed_over_and_back() {
    let w =
        world(vec![MockStep::text("one"), MockStep::text("two"), MockStep::text("three")]).await;
    let mut a = WsClient::connect(&w.server.url, &w.alice).await.unwrap();
    let sid = create(&mut a).await;
    attach(&mut a, &sid, "driver").await;
    let mut b = WsClient::connect(&w.server.url, &w.bob).await.unwrap();

    // Bob may not drive by attaching, and as a watcher may neither send nor interrupt.
    let err = b
        .request("session/attach", json!({"session_id": sid, "role": "driver"}))
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Forbidden);
    attach(&mut b, &sid, "watcher").await;
    let err = b.request("turn/send", json!({"session_id": sid, "text": "hi"})).await.unwrap();
    assert_eq!(err.unwrap_err().code, ErrorCode::Forbidden);
    let err = b.request("turn/interrupt", json!({"session_id": sid})).await.unwrap();
    assert_eq!(err.unwrap_err().code, ErrorCode::Forbidden);
    // Nor hand driving to himself, nor take it.
    let err = b.request("session/drive_grant", json!({"session_id": sid, "user": "bob"})).await;
    assert_eq!(err.unwrap().unwrap_err().code, ErrorCode::Forbidden);
    let err = b.request("session/drive_take", json!({"session_id": sid})).await;
    assert_eq!(err.unwrap().unwrap_err().code, ErrorCode::Forbidden);

    // Bob asks; Alice sees the request and grants it.
    b.request("session/drive_request", json!({"session_id": sid})).await.unwrap().unwrap();
    a.events_until(|e| matches!(&e.kind, EventKind::DriveRequested { user } if user == "bob"))
        .await
        .unwrap();
    a.request("session/drive_grant", json!({"session_id": sid, "user": "bob"}))
        .await
        .unwrap()
        .unwrap();
    let swapped = [("bob", Role::Driver), ("alice", Role::Watcher)];
    presence_until(&mut b, &swapped).await;
    presence_until(&mut a, &swapped).await;

    // Now Bob drives and Alice watches.
    b.request("turn/send", json!({"session_id": sid, "text": "hi"})).await.unwrap().unwrap();
    let events = b.events_until(turn_ended).await.unwrap();
    assert!(events
        .iter()
        .any(|e| matches!(&e.kind, EventKind::TurnStarted { by, .. } if by == "bob")));
    let err = a.request("turn/send", json!({"session_id": sid, "text": "me"})).await.unwrap();
    assert_eq!(err.unwrap_err().code, ErrorCode::Forbidden);

    // The owner takes it back at any time.
    a.request("session/drive_take", json!({"session_id": sid})).await.unwrap().unwrap();
    let back = [("alice", Role::Driver), ("bob", Role::Watcher)];
    presence_until(&mut a, &back).await;
    presence_until(&mut b, &back).await;
    let err = b.request("turn/send", json!({"session_id": sid, "text": "again"})).await.unwrap();
    assert_eq!(err.unwrap_err().code, ErrorCode::Forbidden);
    a.request("turn/send", json!({"session_id": sid, "text": "mine"})).await.unwrap().unwrap();
    a.events_until(turn_ended).await.unwrap();

    // When Bob leaves, presence says so.
    b.request("session/detach", json!({"session_id": sid})).await.unwrap().unwrap();
    presence_until(&mut a, &[("alice", Role::Driver)]).await;
}

#[tokio::test]
async fn a_client_of_another_org_cannot_attach() {
    let w = world(vec![]).await;
    let eve = w.server.add_user("eve", "globex").unwrap();
    let mut a = WsClient::connect(&w.server.url, &w.alice).await.unwrap();
    let sid = create(&mut a).await;
    let mut e = WsClient::connect(&w.server.url, &eve).await.unwrap();
    for (method, params) in [
        ("session/attach", json!({"session_id": sid, "role": "watcher"})),
        ("session/drive_request", json!({"session_id": sid})),
        ("session/drive_take", json!({"session_id": sid})),
    ] {
        let err = e.request(method, params).await.unwrap().unwrap_err();
        assert_eq!(err.code, ErrorCode::NotFound, "{method}");
    }
}

/// Deltas in the flood: more than a stalled connection's queues (1024 broadcast + 512 outbound
/// frames) and, most likely, its socket buffers hold.
const N: usize = 5_000;

/// Reads a session's events to the end of the turn the way a real client does: when the server
/// says this connection lagged, it re-attaches after the last durable `seq`. Returns the durable
/// events seen (snapshots included).
async fn drain(mut client: WsClient, sid: String) -> Vec<SessionEvent> {
    let mut durable: Vec<SessionEvent> = Vec::new();
    loop {
        match client.event().await {
            Ok(e) => {
                let end = turn_ended(&e);
                if e.kind.is_durable() && durable.last().is_none_or(|l| e.seq > l.seq) {
                    durable.push(e);
                }
                if end {
                    return durable;
                }
            }
            Err(err) if err.to_string().contains("Lagged") => {
                let after = durable.last().map_or(0, |e| e.seq);
                let snap = client
                    .request(
                        "session/attach",
                        json!({"session_id": sid, "role": "watcher", "after_seq": after}),
                    )
                    .await
                    .unwrap()
                    .unwrap();
                let snap: SessionAttachResponse = serde_json::from_value(snap).unwrap();
                let done = snap.events.iter().any(turn_ended);
                durable.extend(snap.events);
                if done {
                    return durable;
                }
            }
            Err(err) => panic!("{err:#}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_client_does_not_delay_the_others() {
    let deltas: Vec<String> = (0..N).map(|i| format!("{i:05}{}", "x".repeat(55))).collect();
    let deltas: Vec<&str> = deltas.iter().map(String::as_str).collect();
    let full = deltas.concat();
    let w = world(vec![MockStep::text(&full).with_deltas(&deltas)]).await;
    let mut a = WsClient::connect(&w.server.url, &w.alice).await.unwrap();
    let sid = create(&mut a).await;
    attach(&mut a, &sid, "driver").await;

    // Bob attaches and then reads nothing at all.
    let mut stalled = Stalled::attach(&w.server.url, &w.bob, &sid).await;
    let mut c = WsClient::connect(&w.server.url, &w.bob).await.unwrap();
    attach(&mut c, &sid, "watcher").await;

    a.request("turn/send", json!({"session_id": sid, "text": "flood"})).await.unwrap().unwrap();
    let read = |client: WsClient| {
        let sid = sid.clone();
        tokio::spawn(async move {
            tokio::time::timeout(Duration::from_secs(300), drain(client, sid))
                .await
                .expect("the turn reached this client although another one stalls")
        })
    };
    let (from_a, from_c) = (read(a), read(c));
    let (from_a, from_c) = (from_a.await.unwrap(), from_c.await.unwrap());
    // Both have the whole log, in order, with the complete answer.
    assert_eq!(from_a, from_c);
    let seqs: Vec<u64> = from_a.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());
    assert!(from_a
        .iter()
        .any(|e| matches!(&e.kind, EventKind::AssistantMessage { text, .. } if *text == full)));

    // The stalled client, reading at last, was either kept up by its buffers or told that it
    // lagged, with what to do: never silently left with a gap.
    let (text_seen, error) = stalled.until_error_or_turn_end().await;
    match error {
        Some(error) => {
            assert_eq!(error.code, ErrorCode::Lagged, "{error:?}");
            assert!(error.message.contains("after_seq"), "{}", error.message);
        }
        None => assert!(text_seen == full, "no lagged notice, so nothing may be missing"),
    }
}

/// A raw client with a tiny receive buffer, so that not reading shows up at the server at once
/// instead of disappearing into megabytes of kernel buffers.
struct Stalled {
    ws: tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
}

impl Stalled {
    async fn attach(url: &str, token: &str, sid: &str) -> Stalled {
        use futures_util::SinkExt as _;
        use tokio_tungstenite::tungstenite::Message;
        let addr: std::net::SocketAddr = url.trim_start_matches("ws://").parse().unwrap();
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let tcp = socket.connect(addr).await.unwrap();
        let (mut ws, _) = tokio_tungstenite::client_async(url, tcp).await.unwrap();
        let hello =
            json!({"type": "hello", "protocol_version": 1, "token": token, "client": "stalled"});
        ws.send(Message::Text(hello.to_string().into())).await.unwrap();
        let attach = json!({"type": "request", "id": 1, "method": "session/attach",
            "params": {"session_id": sid, "role": "watcher"}});
        ws.send(Message::Text(attach.to_string().into())).await.unwrap();
        let mut s = Stalled { ws };
        // Read up to the attach response, then stop reading.
        loop {
            match s.frame().await {
                ServerFrame::Response(r) => {
                    assert!(r.error.is_none(), "{r:?}");
                    break;
                }
                _ => continue,
            }
        }
        s
    }

    async fn frame(&mut self) -> ServerFrame {
        use futures_util::StreamExt as _;
        loop {
            let msg = tokio::time::timeout(Duration::from_secs(30), self.ws.next())
                .await
                .expect("a frame within 30 s")
                .expect("open")
                .unwrap();
            if let tokio_tungstenite::tungstenite::Message::Text(t) = msg {
                return serde_json::from_str(&t).unwrap();
            }
        }
    }

    /// Deltas received until a connection error (returned) or the end of the turn.
    /// The text of the assistant deltas read until an error or the turn's end. (Deltas may be
    /// coalesced on the way when the session is busy: what is kept is their text.)
    async fn until_error_or_turn_end(&mut self) -> (String, Option<outboard_shared::ErrorBody>) {
        let mut text = String::new();
        loop {
            match self.frame().await {
                ServerFrame::Error(e) => return (text, Some(e.error)),
                ServerFrame::Event(e) if turn_ended(&e.event) => return (text, None),
                ServerFrame::Event(e) => {
                    if let EventKind::AssistantDelta { text: more } = &e.event.kind {
                        text.push_str(more);
                    }
                }
                _ => {}
            }
        }
    }
}

#[tokio::test]
async fn two_connections_of_one_user_are_told_apart_by_connection_id() {
    let w = world(vec![]).await;
    let mut one = WsClient::connect(&w.server.url, &w.alice).await.unwrap();
    let mut two = WsClient::connect(&w.server.url, &w.alice).await.unwrap();
    let id = |c: &WsClient| c.welcome.as_ref().unwrap().connection_id;
    let (id1, id2) = (id(&one), id(&two));
    assert!(id1 != 0 && id2 != 0 && id1 != id2, "{id1} {id2}");
    let sid = create(&mut one).await;
    attach(&mut one, &sid, "driver").await;
    assert_eq!(attach(&mut two, &sid, "watcher").await.role, Role::Watcher);
    let both = [("alice", Role::Driver), ("alice", Role::Watcher)];
    for c in [&mut one, &mut two] {
        let events = c
            .events_until(|e| {
                roles(e).as_deref().is_some_and(|r| {
                    r.iter().map(|(u, r)| (u.as_str(), *r)).eq(both.iter().copied())
                })
            })
            .await
            .unwrap();
        let EventKind::Presence { attached } = &events.last().unwrap().kind else { panic!() };
        let by_conn: Vec<(u64, Role)> =
            attached.iter().map(|p| (p.connection_id, p.role)).collect();
        assert_eq!(by_conn, [(id1, Role::Driver), (id2, Role::Watcher)]);
    }
}

/// Feeds a TUI connection task's events into `app` until `done` holds.
async fn pump(
    app: &mut outboard_tui::app::App,
    rx: &mut tokio::sync::mpsc::Receiver<outboard_tui::app::AppEvent>,
    what: &str,
    done: impl Fn(&outboard_tui::app::App) -> bool,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !done(app) {
        let event = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {what}: {:?}", app.presence))
            .expect("the connection task is alive");
        app.handle(event);
    }
}

#[tokio::test]
async fn two_tuis_of_one_user_each_show_their_own_role() {
    use outboard_tui::app::App;
    use outboard_tui::net::{self, Initial};
    use outboard_tui::theme::Theme;
    use tokio::sync::mpsc;
    let w = world(vec![]).await;
    let tui = |initial| {
        let (app_tx, rx) = mpsc::channel(1024);
        let (fx, effects) = mpsc::channel(16);
        tokio::spawn(net::run(w.server.url.clone(), w.alice.clone(), initial, effects, app_tx));
        (App::new(Theme { color: false }, 80, 24), rx, fx)
    };
    // Alice's first terminal creates a session and drives it; her second one watches it.
    let (mut first, mut first_rx, _first_fx) = tui(Initial::New);
    pump(&mut first, &mut first_rx, "the first terminal to drive", |a| {
        a.session.is_some() && a.presence.len() == 1 && a.driving()
    })
    .await;
    let sid = first.session.as_ref().unwrap().id.clone();
    let (mut second, mut second_rx, _second_fx) = tui(Initial::Attach(sid, false));
    pump(&mut second, &mut second_rx, "the second terminal's presence", |a| a.presence.len() == 2)
        .await;
    pump(&mut first, &mut first_rx, "the first terminal's presence", |a| a.presence.len() == 2)
        .await;
    assert!(first.presence.iter().all(|p| p.user == "alice"), "{:?}", first.presence);
    assert!(first.driving(), "the first terminal drives");
    assert!(!second.driving(), "the second terminal only watches: {:?}", second.presence);
}

/// An answered attach is already in the room: a grant sent on another connection the moment
/// the answer arrives finds the new watcher (the answer once left before the join).
#[tokio::test]
async fn a_watcher_whose_attach_was_answered_can_be_granted_at_once() {
    let w = world(vec![]).await;
    let mut a = WsClient::connect(&w.server.url, &w.alice).await.unwrap();
    let sid = create(&mut a).await;
    attach(&mut a, &sid, "driver").await;
    for round in 0..40 {
        let mut b = WsClient::connect(&w.server.url, &w.bob).await.unwrap();
        attach(&mut b, &sid, "watcher").await;
        let granted =
            a.request("session/drive_grant", json!({"session_id": sid, "user": "bob"})).await;
        if let Err(e) = granted.unwrap() {
            panic!("round {round}: {e:?}");
        }
        // Alice takes the wheel back; Bob's connection goes.
        attach(&mut a, &sid, "driver").await;
        drop(b);
    }
}
