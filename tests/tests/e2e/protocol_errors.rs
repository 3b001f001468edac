//! Bad input at the gateway, over a real WebSocket to a real `outboard-server` process: each gets
//! a clear error and nothing breaks — the same connection (or a new one) still works afterwards.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use outboard_shared::*;
use outboard_tests::harness::{Api, TestServer};
use pretty_assertions::assert_eq;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message as Ws;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

async fn connect(url: &str) -> Socket {
    let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(64 << 20))
        .max_frame_size(Some(64 << 20));
    let (ws, _) =
        tokio_tungstenite::connect_async_with_config(url, Some(config), false).await.unwrap();
    ws
}

async fn send(ws: &mut Socket, value: serde_json::Value) {
    ws.send(Ws::Text(value.to_string().into())).await.unwrap();
}

/// The next server frame, or `None` once the server closed the connection.
async fn recv(ws: &mut Socket) -> Option<ServerFrame> {
    loop {
        let msg = tokio::time::timeout(Duration::from_secs(10), ws.next()).await.unwrap()?;
        match msg {
            Ok(Ws::Text(t)) => return Some(serde_json::from_str(&t).unwrap()),
            Ok(Ws::Close(_)) | Err(_) => return None,
            Ok(_) => continue,
        }
    }
}

async fn hello(ws: &mut Socket, token: &str) -> ServerFrame {
    send(ws, json!({"type": "hello", "protocol_version": PROTOCOL_VERSION, "token": token, "client": "test"}))
        .await;
    recv(ws).await.unwrap()
}

fn expect_fatal(frame: Option<ServerFrame>, code: ErrorCode) {
    match frame {
        Some(ServerFrame::Error(e)) => {
            assert_eq!(e.error.code, code, "{}", e.error.message);
            assert!(e.fatal);
            assert!(!e.error.message.is_empty());
        }
        other => panic!("expected a fatal {code:?}, got {other:?}"),
    }
}

async fn request(ws: &mut Socket, id: u64, method: &str, params: serde_json::Value) -> Response {
    send(ws, json!({"type": "request", "id": id, "method": method, "params": params})).await;
    loop {
        match recv(ws).await {
            Some(ServerFrame::Response(r)) => {
                assert_eq!(r.id, RequestId(id));
                return r;
            }
            Some(ServerFrame::Event(_)) => continue,
            other => panic!("expected a response, got {other:?}"),
        }
    }
}

fn server() -> (TestServer, String) {
    // The model is never called in these tests.
    let server = TestServer::start(Api::Anthropic, "http://127.0.0.1:9").unwrap();
    let token = server.add_user("alice", "acme").unwrap();
    (server, token)
}

#[tokio::test]
async fn handshake_errors_are_fatal_and_clear() {
    let (server, token) = server();

    // A request before hello.
    let mut ws = connect(&server.url).await;
    send(&mut ws, json!({"type": "request", "id": 1, "method": "ping", "params": {}})).await;
    expect_fatal(recv(&mut ws).await, ErrorCode::HandshakeRequired);
    assert!(recv(&mut ws).await.is_none(), "the server closes after a fatal error");

    // A wrong token.
    let mut ws = connect(&server.url).await;
    expect_fatal(Some(hello(&mut ws, "ob_not-a-token").await), ErrorCode::Unauthorized);

    // Another protocol version.
    let mut ws = connect(&server.url).await;
    send(&mut ws, json!({"type": "hello", "protocol_version": 99, "token": token})).await;
    expect_fatal(recv(&mut ws).await, ErrorCode::ProtocolVersion);

    // Garbage as the first frame.
    let mut ws = connect(&server.url).await;
    ws.send(Ws::Text("{not json".into())).await.unwrap();
    expect_fatal(recv(&mut ws).await, ErrorCode::HandshakeRequired);

    // And the right token still works.
    let mut ws = connect(&server.url).await;
    match hello(&mut ws, &token).await {
        ServerFrame::Welcome(w) => {
            assert_eq!(w.user.name, "alice");
            assert_eq!(w.user.org, "acme");
            assert_eq!(w.protocol_version, PROTOCOL_VERSION);
        }
        other => panic!("expected welcome, got {other:?}"),
    }
    // The token never appears in the server's log.
    assert!(!server.log().contains(&token));
}

#[tokio::test]
async fn bad_frames_after_the_handshake_change_nothing() {
    let (server, token) = server();
    let mut ws = connect(&server.url).await;
    assert!(matches!(hello(&mut ws, &token).await, ServerFrame::Welcome(_)));

    // Malformed JSON: a non-fatal error, the connection stays.
    ws.send(Ws::Text("{\"type\": \"request\", ".into())).await.unwrap();
    match recv(&mut ws).await {
        Some(ServerFrame::Error(e)) => {
            assert_eq!(e.error.code, ErrorCode::BadRequest);
            assert!(!e.fatal);
        }
        other => panic!("{other:?}"),
    }
    // A binary frame.
    ws.send(Ws::Binary(vec![0, 1, 2].into())).await.unwrap();
    match recv(&mut ws).await {
        Some(ServerFrame::Error(e)) => assert_eq!(e.error.code, ErrorCode::BadRequest),
        other => panic!("{other:?}"),
    }
    // An unknown method, and bad params: errors tied to the request id.
    let r = request(&mut ws, 7, "session/teleport", json!({})).await;
    assert_eq!(r.error.unwrap().code, ErrorCode::UnknownMethod);
    let r = request(&mut ws, 8, "turn/send", json!({"session_id": 42})).await;
    assert_eq!(r.error.unwrap().code, ErrorCode::BadRequest);
    // An unknown session.
    let r =
        request(&mut ws, 9, "session/attach", json!({"session_id": "s_nope", "role": "driver"}))
            .await;
    let e = r.error.unwrap();
    assert_eq!(e.code, ErrorCode::NotFound);
    assert!(e.message.contains("s_nope"));
    let r = request(&mut ws, 10, "turn/send", json!({"session_id": "s_nope", "text": "hi"})).await;
    assert_eq!(r.error.unwrap().code, ErrorCode::NotFound);

    // The connection still works.
    let r = request(&mut ws, 11, "ping", json!({})).await;
    assert_eq!(r.result, Some(json!({})));
    let r = request(&mut ws, 12, "session/list", json!({})).await;
    assert_eq!(r.result, Some(json!({"sessions": []})));

    // An oversize frame is refused and the connection closed; the server goes on.
    let big = "x".repeat(MAX_FRAME_BYTES + 10);
    send(
        &mut ws,
        json!({"type": "request", "id": 13, "method": "turn/send",
                         "params": {"session_id": "s_x", "text": big}}),
    )
    .await;
    expect_fatal(recv(&mut ws).await, ErrorCode::TooLarge);
    let mut ws = connect(&server.url).await;
    assert!(matches!(hello(&mut ws, &token).await, ServerFrame::Welcome(_)));
}

/// Every method of the table is known to the server: sent with params of the wrong shape, each
/// gets `bad_request` naming the method, never `unknown_method`, and the connection goes on.
#[tokio::test]
async fn every_method_with_bad_params_is_a_bad_request() {
    let (server, token) = server();
    let mut ws = connect(&server.url).await;
    assert!(matches!(hello(&mut ws, &token).await, ServerFrame::Welcome(_)));
    assert_eq!(Method::NAMES.len(), MethodKind::ALL.len());
    for (i, name) in Method::NAMES.iter().enumerate() {
        // No method's params are a number.
        let r = request(&mut ws, 100 + i as u64, name, json!(42)).await;
        let e = r.error.unwrap_or_else(|| panic!("{name} with params 42 succeeded"));
        assert_eq!(e.code, ErrorCode::BadRequest, "{name}: {}", e.message);
        assert!(e.message.contains(name), "{name}: the message names the method: {}", e.message);
    }
    let r = request(&mut ws, 1, "session/teleport", json!({})).await;
    let e = r.error.unwrap();
    assert_eq!(e.code, ErrorCode::UnknownMethod);
    for name in Method::NAMES {
        assert!(e.message.contains(name), "the unknown-method message lists {name}: {}", e.message);
    }
    let r = request(&mut ws, 2, "ping", json!({})).await;
    assert_eq!(r.result, Some(json!({})));
}

#[tokio::test]
async fn orgs_do_not_see_each_other() {
    let (server, alice) = server();
    let bob = server.add_user("bob", "globex").unwrap();
    let carol = server.add_user("carol", "acme").unwrap();

    let mut a = connect(&server.url).await;
    hello(&mut a, &alice).await;
    let r = request(&mut a, 1, "session/create", json!({"title": "secret plans"})).await;
    let created: SessionCreateResponse = serde_json::from_value(r.result.unwrap()).unwrap();
    let sid = created.session.id.0.clone();
    assert_eq!(created.session.owner, "alice");

    // Bob (another org) cannot list, attach, or send to it: not found, as if it did not exist.
    let mut b = connect(&server.url).await;
    hello(&mut b, &bob).await;
    let r = request(&mut b, 1, "session/list", json!({})).await;
    assert_eq!(r.result, Some(json!({"sessions": []})));
    let r =
        request(&mut b, 2, "session/attach", json!({"session_id": sid, "role": "watcher"})).await;
    assert_eq!(r.error.unwrap().code, ErrorCode::NotFound);
    let r = request(&mut b, 3, "turn/send", json!({"session_id": sid, "text": "hi"})).await;
    assert_eq!(r.error.unwrap().code, ErrorCode::NotFound);

    // Carol (same org) sees it, may watch, may not drive or send.
    let mut c = connect(&server.url).await;
    hello(&mut c, &carol).await;
    let r = request(&mut c, 1, "session/list", json!({})).await;
    let list: SessionListResponse = serde_json::from_value(r.result.unwrap()).unwrap();
    assert_eq!(list.sessions.len(), 1);
    let r =
        request(&mut c, 2, "session/attach", json!({"session_id": sid, "role": "driver"})).await;
    assert_eq!(r.error.unwrap().code, ErrorCode::Forbidden);
    let r =
        request(&mut c, 3, "session/attach", json!({"session_id": sid, "role": "watcher"})).await;
    let snap: SessionAttachResponse = serde_json::from_value(r.result.unwrap()).unwrap();
    assert_eq!(snap.role, Role::Watcher);
    assert!(snap.events.is_empty());
    let r = request(&mut c, 4, "turn/send", json!({"session_id": sid, "text": "hi"})).await;
    assert_eq!(r.error.unwrap().code, ErrorCode::Forbidden);
}
