//! What one WebSocket connection can make the server hold is bounded (raw clients on a real
//! server): a client that sends requests and never reads their answers is cut once its unread
//! answers fill the connection's outbound bound, with the server's memory flat; a message begun
//! and never finished (fragments held open with pings between) is cut at the message timeout.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use outboard_shared::{ErrorCode, ServerFrame, PROTOCOL_VERSION};
use outboard_tests::harness::{wait_until, Api, TestServer, WsClient};
use outboard_tests::long_session;
use outboard_tests::speed::high_water;
use serde_json::json;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::Message as Ws;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Answers asked for and never read: each a history page of about 1 MiB.
const UNREAD: u64 = 150;
/// How much the server's peak RSS may grow meanwhile: the outbound bound (9 MiB), the socket's
/// buffers and the pages being read; keeping every answer is over 150 MiB.
const GROWTH_BOUND: u64 = 64 << 20;

async fn hello(url: &str, token: &str) -> Socket {
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let hello = json!({"type": "hello", "protocol_version": PROTOCOL_VERSION, "token": token, "client": "raw"});
    ws.send(Ws::Text(hello.to_string().into())).await.unwrap();
    match ws.next().await.unwrap().unwrap() {
        Ws::Text(t) => assert!(t.contains("\"welcome\""), "{t}"),
        other => panic!("{other:?}"),
    }
    ws
}

#[tokio::test]
async fn a_client_that_never_reads_its_answers_is_cut_at_its_bound() {
    let data = tempfile::tempdir().unwrap();
    let store = long_session::open(data.path()).unwrap();
    let (owner, token) = long_session::user(&store, "alice", "acme").await.unwrap();
    let (session, last) = long_session::seed(&store, &owner, 2_000, 8, 6_000).await.unwrap();
    drop(store);
    let server = TestServer::start_in(data, Api::Anthropic, "http://127.0.0.1:9", &[]).unwrap();

    let mut ws = hello(&server.url, &token).await;
    let before = high_water(server.pid());
    for id in 1..=UNREAD {
        let request = json!({"type": "request", "id": id, "method": "session/history",
            "params": {"session_id": session.0, "before": last + 1}});
        if ws.send(Ws::Text(request.to_string().into())).await.is_err() {
            break;
        }
    }
    let server_log = || server.log();
    let cut = wait_until("the server to cut the connection", Duration::from_secs(60), || {
        server_log().contains("cutting a connection")
    });
    let after = high_water(server.pid());
    let growth = after.saturating_sub(before);
    assert!(
        growth <= GROWTH_BOUND,
        "the server's peak RSS grew by {} MiB for one connection's unread answers (bound {} MiB)",
        growth >> 20,
        GROWTH_BOUND >> 20
    );
    cut.unwrap();
    assert!(server.log().contains("unread_output"), "the log names the reason");
    // The client gets what was already on its way, then the end: nothing more.
    let mut answers = 0;
    let end = tokio::time::timeout(Duration::from_secs(30), async {
        while let Some(Ok(message)) = ws.next().await {
            if let Ws::Text(_) = message {
                answers += 1;
            }
        }
    })
    .await;
    assert!(end.is_ok(), "the connection ends");
    assert!(answers < UNREAD, "{answers} answers of {UNREAD} reached the client");
    // The server serves others as before.
    let mut other = WsClient::connect(&server.url, &token).await.unwrap();
    other.request("ping", json!({})).await.unwrap().unwrap();
}

#[tokio::test]
async fn a_message_never_finished_is_cut_at_the_message_timeout() {
    let data = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(
        data,
        Api::Anthropic,
        "http://127.0.0.1:9",
        &["--message-timeout", "3"],
    )
    .unwrap();
    let token = server.add_user("alice", "acme").unwrap();
    let mut ws = hello(&server.url, &token).await;
    // The first fragment of a text message, 64 KiB, and then only pings, each well within the
    // idle timeout: the message never ends.
    let fragment = Frame::message(vec![b'x'; 64 * 1024], OpCode::Data(Data::Text), false);
    ws.send(Ws::Frame(fragment)).await.unwrap();
    let started = std::time::Instant::now();
    let cut = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            tokio::select! {
                message = ws.next() => match message {
                    Some(Ok(Ws::Text(t))) => return Some(serde_json::from_str::<ServerFrame>(&t).unwrap()),
                    Some(Ok(_)) => continue,
                    _ => return None,
                },
                () = tokio::time::sleep(Duration::from_millis(500)) => {
                    let _ = ws.send(Ws::Ping(vec![1, 2, 3].into())).await;
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        let log = server.log();
        panic!("the server did not end the connection: {}", &log[log.len().saturating_sub(3000)..])
    });
    match cut {
        Some(ServerFrame::Error(e)) => {
            assert!(e.fatal);
            assert_eq!(e.error.code, ErrorCode::BadRequest);
            assert!(e.error.message.contains("not finished"), "{}", e.error.message);
        }
        other => panic!("expected a fatal error, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_secs(3));
    assert!(server.log().contains("unfinished_message"));
}
