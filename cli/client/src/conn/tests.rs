use super::*;
use outboard_shared::{ConnectionError, ErrorBody};

#[test]
fn a_handshake_refused_as_unavailable_says_the_servers_words() {
    let refusal = ConnectionError {
        error: ErrorBody::new(
            ErrorCode::Unavailable,
            "the server's store (PostgreSQL) is unreachable; retrying… try again shortly",
        ),
        fatal: true,
    };
    let e = ClientError::from_connection_error(Some("ws://127.0.0.1:1"), refusal);
    let text = e.to_string();
    assert!(text.contains("store (PostgreSQL) is unreachable"), "{text}");
    assert!(!text.contains("is this an outboard-server address"), "{text}");
    assert!(!text.contains("is outboard-server running"), "{text}");
    assert_eq!(e.code(), Some(ErrorCode::Unavailable));
}
use outboard_shared::{EventFrame, EventKind, OrgId, SessionListResponse, UserId, UserInfo};
use pretty_assertions::assert_eq;
use tokio::net::TcpListener;

pub(crate) fn welcome() -> Welcome {
    Welcome {
        protocol_version: PROTOCOL_VERSION,
        server: "outboard-server/test".into(),
        user: UserInfo {
            id: UserId::from("u_1"),
            name: "ada".into(),
            org_id: OrgId::from("o_1"),
            org: "acme".into(),
        },
        connection_id: 1,
    }
}

type ServerSocket = WebSocketStream<TcpStream>;

async fn send(ws: &mut ServerSocket, frame: &ServerFrame) {
    ws.send(Message::text(serde_json::to_string(frame).unwrap())).await.unwrap();
}

async fn recv(ws: &mut ServerSocket) -> ClientFrame {
    loop {
        match ws.next().await.unwrap().unwrap() {
            Message::Text(t) => return serde_json::from_str(&t).unwrap(),
            _ => continue,
        }
    }
}

/// A one-connection server on 127.0.0.1:0 running `script` on the accepted socket.
async fn serve<F, Fut>(script: F) -> String
where
    F: FnOnce(ServerSocket) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        script(ws).await;
    });
    url
}

fn event(seq: u64, kind: EventKind) -> SessionEvent {
    SessionEvent {
        session_id: SessionId::from("s_1"),
        seq,
        ts: "2026-01-01T00:00:00.000Z".into(),
        kind,
        parent: None,
    }
}

#[test]
fn backoff_doubles_to_the_cap_and_resets() {
    let mut b = Backoff::new();
    let delays: Vec<Duration> = (0..8).map(|_| b.next_delay()).collect();
    assert!(delays[0] >= Backoff::BASE && delays[0] < Backoff::BASE * 2, "{delays:?}");
    assert!(delays[1] >= Backoff::BASE * 2, "{delays:?}");
    assert_eq!(delays[7], Backoff::MAX);
    assert!(delays.windows(2).all(|w| w[0] <= w[1]), "{delays:?}");
    assert_eq!(b.attempt(), 8);
    b.reset();
    assert!(b.next_delay() < Backoff::BASE * 2);
}

#[tokio::test]
async fn hello_is_answered_with_welcome() {
    let url = serve(|mut ws| async move {
        let ClientFrame::Hello(hello) = recv(&mut ws).await else { panic!("no hello") };
        assert_eq!(hello.protocol_version, PROTOCOL_VERSION);
        assert_eq!(hello.token, "tok");
        assert_eq!(hello.client, client_name());
        send(&mut ws, &ServerFrame::Welcome(welcome())).await;
        // Keep the socket open until the client goes away.
        while ws.next().await.is_some() {}
    })
    .await;
    let client = Client::connect(&url, "tok").await.unwrap();
    assert_eq!(client.welcome(), &welcome());
}

#[tokio::test]
async fn a_refused_token_is_unauthorized() {
    let url = serve(|mut ws| async move {
        recv(&mut ws).await;
        let err = ConnectionError {
            error: ErrorBody::new(ErrorCode::Unauthorized, "unknown token"),
            fatal: true,
        };
        send(&mut ws, &ServerFrame::Error(err)).await;
        let _ = ws.close(None).await;
    })
    .await;
    let err = Client::connect(&url, "wrong").await.unwrap_err();
    assert!(matches!(&err, ClientError::Unauthorized { message } if message == "unknown token"));
    assert_eq!(
        err.to_string(),
        "the server refused the token — create one with: outboard-server admin user add NAME --org ORG"
    );
}

#[tokio::test]
async fn another_protocol_version_is_refused() {
    let url = serve(|mut ws| async move {
        recv(&mut ws).await;
        let err = ConnectionError {
            error: ErrorBody::new(ErrorCode::ProtocolVersion, "server speaks 2"),
            fatal: true,
        };
        send(&mut ws, &ServerFrame::Error(err)).await;
    })
    .await;
    let err = Client::connect(&url, "tok").await.unwrap_err();
    assert!(
        matches!(&err, ClientError::ProtocolVersion { message } if message == "server speaks 2")
    );
}

#[tokio::test]
async fn connection_refused_says_what_to_check_and_names_no_flag() {
    // Bind then drop to get a port nobody listens on.
    let port = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap().port();
    let url = format!("ws://127.0.0.1:{port}");
    let err = Client::connect(&url, "tok").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("cannot connect to {url}: connection refused — is outboard-server running?")
    );
}

#[tokio::test]
async fn an_idle_client_pings() {
    let (seen_tx, seen_rx) = oneshot::channel::<usize>();
    let url = serve(|mut ws| async move {
        recv(&mut ws).await;
        send(&mut ws, &ServerFrame::Welcome(welcome())).await;
        let mut pings = 0;
        while let Some(Ok(msg)) = ws.next().await {
            if matches!(msg, Message::Ping(_)) {
                pings += 1;
                if pings == 3 {
                    break;
                }
            }
        }
        let _ = seen_tx.send(pings);
    })
    .await;
    let options =
        ConnectOptions { ping_interval: Duration::from_millis(50), ..ConnectOptions::default() };
    let _client = Client::connect_with(&url, "tok", false, &options).await.unwrap();
    let pings = tokio::time::timeout(Duration::from_secs(10), seen_rx).await.unwrap().unwrap();
    assert_eq!(pings, 3);
    assert_eq!(ConnectOptions::default().ping_interval, CLIENT_PING_INTERVAL);
}

#[tokio::test]
async fn clear_text_tokens_stay_on_loopback() {
    for url in ["ws://10.0.0.1:7700", "ws://example.com", "ws://[2001:db8::1]:7700/"] {
        let err = Client::connect(url, "tok").await.unwrap_err();
        assert!(matches!(err, ClientError::Insecure { .. }), "{url}: {err:?}");
    }
    for url in ["ws://127.0.0.1:9", "ws://localhost:9", "ws://[::1]:9"] {
        let err = Client::connect(url, "tok").await.unwrap_err();
        assert!(!matches!(err, ClientError::Insecure { .. }), "{url}: {err:?}");
    }
}

#[tokio::test]
async fn an_attach_waits_for_a_takeover_only_so_long() {
    let script = crate::testing::Script { unreachable_attaches: 1000, ..Default::default() };
    let (url, mut seen) = crate::testing::fake_server(script).await;
    let client = Client::connect(&url, "tok").await.unwrap();
    let told = Arc::new(AtomicU64::new(0));
    let counted = told.clone();
    let waiting = move || {
        counted.fetch_add(1, Ordering::Relaxed);
    };
    let wait = Duration::from_millis(1500);
    let call = client.attach_through_takeover("s_1".into(), Role::Watcher, None, wait, waiting);
    let err = tokio::time::timeout(Duration::from_secs(10), call).await.unwrap().unwrap_err();
    assert!(owner_unreachable(&err), "{err:?}");
    assert_eq!(told.load(Ordering::Relaxed), 1, "the user is told once");
    let attaches = std::iter::from_fn(|| seen.try_recv().ok()).count();
    assert!((2..=8).contains(&attaches), "retried with a pause: {attaches} attaches");
}

#[tokio::test]
async fn a_bad_url_is_a_usage_error() {
    let err = Client::connect("http://localhost:1", "tok").await.unwrap_err();
    assert!(matches!(err, ClientError::InvalidUrl { .. }), "{err:?}");
}

#[tokio::test]
async fn responses_are_matched_by_id_with_events_interleaved() {
    let url = serve(|mut ws| async move {
        recv(&mut ws).await;
        send(&mut ws, &ServerFrame::Welcome(welcome())).await;
        let ClientFrame::Request(first) = recv(&mut ws).await else { panic!() };
        let ClientFrame::Request(second) = recv(&mut ws).await else { panic!() };
        assert_eq!(first.method, Method::Ping(Empty {}));
        // An event before any response, then the responses in reverse order.
        let ev = event(1, EventKind::UserMessage { text: "hi".into(), attachments: Vec::new() });
        send(&mut ws, &ServerFrame::Event(EventFrame { event: ev })).await;
        let list = SessionListResponse { sessions: vec![] };
        send(&mut ws, &ServerFrame::Response(Response::ok(second.id, &list))).await;
        send(&mut ws, &ServerFrame::Response(Response::ok(first.id, &Empty {}))).await;
        let ClientFrame::Request(third) = recv(&mut ws).await else { panic!() };
        let err = ErrorBody::new(ErrorCode::NotFound, "no session s_9");
        send(&mut ws, &ServerFrame::Response(Response::err(third.id, err))).await;
        while ws.next().await.is_some() {}
    })
    .await;
    let mut client = Client::connect(&url, "tok").await.unwrap();
    let ping = client.ping();
    let list = client.list_sessions(None);
    // Send both before awaiting either, so they are in flight together.
    let (ping, list) = tokio::join!(ping, list);
    ping.unwrap();
    assert_eq!(list.unwrap(), vec![]);
    let ev = client.next_event().await.unwrap();
    assert_eq!(ev, event(1, EventKind::UserMessage { text: "hi".into(), attachments: Vec::new() }));

    let err = client.attach(SessionId::from("s_9"), Role::Driver, None).await.unwrap_err();
    assert!(
        matches!(&err, ClientError::Server { method: "session/attach", error }
            if *error == ErrorBody::new(ErrorCode::NotFound, "no session s_9")),
        "{err:?}"
    );
    assert!(!err.is_fatal());
}

#[tokio::test]
async fn an_oversize_request_fails_alone_and_the_connection_goes_on() {
    let url = serve(|mut ws| async move {
        recv(&mut ws).await;
        send(&mut ws, &ServerFrame::Welcome(welcome())).await;
        let ClientFrame::Request(ping) = recv(&mut ws).await else { panic!() };
        assert_eq!(ping.method, Method::Ping(Empty {}));
        send(&mut ws, &ServerFrame::Response(Response::ok(ping.id, &Empty {}))).await;
        while ws.next().await.is_some() {}
    })
    .await;
    let client = Client::connect(&url, "tok").await.unwrap();
    let huge = "x".repeat(MAX_FRAME_BYTES);
    let err = client.send_turn(SessionId::from("s_1"), huge, Vec::new()).await.unwrap_err();
    assert!(matches!(err, ClientError::TooLarge { .. }), "{err:?}");
    client.ping().await.unwrap();
}

#[tokio::test]
async fn a_close_ends_events_and_fails_requests_in_flight() {
    let url = serve(|mut ws| async move {
        recv(&mut ws).await;
        send(&mut ws, &ServerFrame::Welcome(welcome())).await;
        recv(&mut ws).await;
        let err = ConnectionError {
            error: ErrorBody::new(ErrorCode::ShuttingDown, "server restarting"),
            fatal: true,
        };
        send(&mut ws, &ServerFrame::Error(err)).await;
        let _ = ws.close(None).await;
    })
    .await;
    let mut client = Client::connect(&url, "tok").await.unwrap();
    let err = client.ping().await.unwrap_err();
    assert!(err.is_fatal(), "{err:?}");
    assert_eq!(err.code(), Some(ErrorCode::ShuttingDown));
    let first = client.next_event().await.unwrap_err();
    assert_eq!(first.to_string(), err.to_string());
    // And it stays over.
    assert_eq!(client.next_event().await.unwrap_err().to_string(), err.to_string());
}
