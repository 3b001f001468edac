//! Test support: a scripted one-connection fake of `outboard-server`, speaking the real protocol
//! over a real WebSocket on `127.0.0.1:0`. The real server is tested against the real CLI in the
//! `tests` crate; this fake lets the CLI's own unit tests pin the client side of every exchange.

// Test support, built only for tests and the `test-support` feature: a broken fixture panics.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures_util::{SinkExt, StreamExt};
use outboard_shared::{
    ClientFrame, ConnectionError, ErrorBody, ErrorCode, EventFrame, EventKind, FileOp, FileVersion,
    FilesChangeResponse, FilesHistoryResponse, FilesListResponse, FilesReadResponse, Method, OrgId,
    Response, Role, ServerFrame, SessionAttachResponse, SessionCreateResponse, SessionEvent,
    SessionId, SessionInfo, SessionListResponse, SessionStatus, SkillInfo, SkillsImportResponse,
    SkillsListResponse, TurnId, TurnInterruptResponse, TurnSendResponse, UserId, UserInfo, Welcome,
    PROTOCOL_VERSION,
};
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// What the fake server does after `turn/send` and `turn/interrupt`.
#[derive(Clone, Default)]
pub struct Script {
    /// Events pushed after answering `turn/send`.
    pub turn: Vec<EventKind>,
    /// The `parent` of each event of `turn`, by position (a subagent's events; none past the end).
    pub parents: Vec<Option<String>>,
    /// Events pushed after answering `turn/interrupt`.
    pub interrupt: Vec<EventKind>,
    /// Close the connection after pushing `turn`.
    pub close_after_turn: bool,
    /// After pushing `turn`, report that the client lagged; a second attach gets these events.
    pub lag_then_snapshot: Option<Vec<SessionEvent>>,
    /// Refuse this many attaches first as a node whose owner of the session is unreachable
    /// (`unavailable` naming the owner's URL), as during a failover.
    pub unreachable_attaches: usize,
}

/// The owner a refused attach names ([`Script::unreachable_attaches`]).
pub const DEAD_NODE: &str = "ws://127.0.0.1:9";

pub fn session(id: &str, last_seq: u64) -> SessionInfo {
    SessionInfo {
        id: SessionId::from(id),
        title: "t".into(),
        owner_id: UserId::from("u_1"),
        owner: "ada".into(),
        status: SessionStatus::Idle,
        model: "mock/m".into(),
        model_name: None,
        last_seq,
        created_at: "2026-01-01T00:00:00Z".into(),
        updated_at: "2026-01-01T00:00:00Z".into(),
        failure: None,
        workspace: None,
        source: None,
        network: outboard_shared::SessionNetwork::Org,
        attached: Vec::new(),
        usage: None,
        context_window: None,
        context_window_source: None,
        context_window_from: None,
        todos: None,
    }
}

/// A version of an org file as the fake server reports it: written by ada from `s_1`.
pub fn file_version(path: &str, version: u64, op: FileOp) -> FileVersion {
    FileVersion {
        path: path.to_owned(),
        version,
        op,
        size: 27,
        sha256: "ab".repeat(32),
        author: "ada".into(),
        session: Some(SessionId::from("s_1")),
        at: "2026-01-01T00:00:00.123Z".into(),
        deleted: op == FileOp::Delete,
        restored_from: None,
    }
}

/// The content of every file the fake server reads back (no newline at the end).
pub const FAKE_CONTENT: &str = "line one\nno newline at end";

/// The fake server's answers to the org-file methods (`None` for other methods):
/// `/memory/missing.md` is `not_found` everywhere, a write to `/memory/stale.md` a `conflict`,
/// and imported content `same\n` is already current.
fn files_response(id: outboard_shared::RequestId, method: &Method) -> Option<Response> {
    let missing = "/memory/missing.md";
    let not_found = || Response::err(id, ErrorBody::new(ErrorCode::NotFound, "no file here"));
    Some(match method {
        Method::FilesList(p) => Response::ok(
            id,
            &FilesListResponse {
                files: vec![
                    file_version(&format!("{}/a.md", p.path), 3, FileOp::Edit),
                    file_version(&format!("{}/b.md", p.path), 2, FileOp::Delete),
                ],
            },
        ),
        Method::FilesRead(p) if p.path == missing => not_found(),
        Method::FilesRead(p) => Response::ok(
            id,
            &FilesReadResponse {
                file: file_version(&p.path, p.version.unwrap_or(3), FileOp::Write),
                content: FAKE_CONTENT.into(),
            },
        ),
        Method::FilesHistory(p) if p.path == missing => not_found(),
        Method::FilesHistory(p) => Response::ok(
            id,
            &FilesHistoryResponse {
                versions: vec![
                    file_version(&p.path, 1, FileOp::Write),
                    file_version(&p.path, 2, FileOp::Delete),
                ],
            },
        ),
        Method::FilesWrite(p) if p.path == "/memory/stale.md" => Response::err(
            id,
            ErrorBody::new(ErrorCode::Conflict, "/memory/stale.md is at v7 (by bob)"),
        ),
        Method::FilesWrite(p) => Response::ok(
            id,
            &FilesChangeResponse {
                file: FileVersion {
                    size: p.content.len() as u64,
                    ..file_version(&p.path, 4, FileOp::Write)
                },
                changed: true,
            },
        ),
        Method::FilesDelete(p) if p.path == missing => not_found(),
        Method::FilesDelete(p) => Response::ok(
            id,
            &FilesChangeResponse { file: file_version(&p.path, 5, FileOp::Delete), changed: true },
        ),
        Method::FilesRestore(p) => Response::ok(
            id,
            &FilesChangeResponse {
                file: FileVersion {
                    restored_from: Some(p.version),
                    ..file_version(&p.path, 6, FileOp::Restore)
                },
                changed: true,
            },
        ),
        Method::SkillsList(_) => Response::ok(
            id,
            &SkillsListResponse {
                skills: vec![SkillInfo {
                    name: "deploy".into(),
                    description: "Ship it".into(),
                    files: 2,
                    version: 1,
                    problem: Some("no front matter".into()),
                }],
            },
        ),
        Method::SkillsImport(p) => {
            let unchanged = p.files.iter().filter(|f| f.content == "same\n").count() as u64;
            let written = p
                .files
                .iter()
                .filter(|f| f.content != "same\n")
                .map(|f| file_version(&format!("/skills/{}", f.path), 1, FileOp::Import))
                .collect();
            Response::ok(id, &SkillsImportResponse { written, unchanged })
        }
        _ => return None,
    })
}

pub fn ev(session: &str, seq: u64, kind: EventKind) -> SessionEvent {
    SessionEvent {
        session_id: SessionId::from(session),
        seq,
        ts: "2026-01-01T00:00:00.000Z".into(),
        kind,
        parent: None,
    }
}

pub async fn send(ws: &mut WebSocketStream<TcpStream>, frame: &ServerFrame) {
    ws.send(Message::text(serde_json::to_string(frame).unwrap())).await.unwrap();
}

/// A one-connection fake of the server; the methods it received come back on the channel.
pub async fn fake_server(mut script: Script) -> (String, mpsc::UnboundedReceiver<Method>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    let (seen_tx, seen) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
        let mut attached = String::from("s_new");
        // The log holds 7 events; turn/send's user message is the 8th.
        let mut seq = 8;
        while let Some(Ok(message)) = ws.next().await {
            let Message::Text(text) = message else { continue };
            let request = match serde_json::from_str::<ClientFrame>(&text).unwrap() {
                ClientFrame::Hello(hello) if hello.token == "tok" => {
                    let welcome = Welcome {
                        protocol_version: PROTOCOL_VERSION,
                        server: "fake".into(),
                        user: UserInfo {
                            id: UserId::from("u_1"),
                            name: "ada".into(),
                            org_id: OrgId::from("o_1"),
                            org: "acme".into(),
                        },
                        connection_id: 1,
                    };
                    send(&mut ws, &ServerFrame::Welcome(welcome)).await;
                    continue;
                }
                ClientFrame::Hello(_) => {
                    let error = ErrorBody::new(ErrorCode::Unauthorized, "unknown token");
                    send(&mut ws, &ServerFrame::Error(ConnectionError { error, fatal: true }))
                        .await;
                    return;
                }
                ClientFrame::Request(request) => request,
            };
            let _ = seen_tx.send(request.method.clone());
            let id = request.id;
            let (response, push) = match request.method {
                Method::SessionCreate(_) => {
                    let created = SessionCreateResponse { session: session("s_new", 0) };
                    (Response::ok(id, &created), vec![])
                }
                Method::SessionList(_) => {
                    let list = SessionListResponse { sessions: vec![session("s_old", 7)] };
                    (Response::ok(id, &list), vec![])
                }
                Method::SessionAttach(_) if script.unreachable_attaches > 0 => {
                    script.unreachable_attaches -= 1;
                    let error = ErrorBody::new(ErrorCode::Unavailable, "the owner is gone")
                        .at_node(Some(DEAD_NODE.into()));
                    (Response::err(id, error), vec![])
                }
                Method::SessionAttach(params) => {
                    attached = params.session_id.to_string();
                    // Stale history that a run must not print, or what a lagging run missed.
                    let stale =
                        EventKind::UserMessage { text: "old".into(), attachments: Vec::new() };
                    let events = match (&script.lag_then_snapshot, params.after_seq) {
                        (Some(missed), Some(after)) if after > 7 => missed.clone(),
                        _ => vec![ev(&attached, 7, stale)],
                    };
                    let snapshot = SessionAttachResponse {
                        session: session(&attached, 7),
                        role: Role::Driver,
                        events,
                        in_flight: None,
                        has_more: false,
                        cursor: None,
                        standing: Vec::new(),
                    };
                    (Response::ok(id, &snapshot), vec![])
                }
                Method::TurnSend(_) => {
                    let sent = TurnSendResponse { turn_id: TurnId::from("t_1"), seq: 8 };
                    (Response::ok(id, &sent), script.turn.clone())
                }
                Method::TurnInterrupt(_) => {
                    let answer = TurnInterruptResponse { interrupted: true };
                    (Response::ok(id, &answer), script.interrupt.clone())
                }
                method => match files_response(id, &method) {
                    Some(response) => (response, vec![]),
                    None => (Response::ok(id, &json!({})), vec![]),
                },
            };
            let was_send = push.len() == script.turn.len() && !script.turn.is_empty();
            send(&mut ws, &ServerFrame::Response(response)).await;
            for (i, kind) in push.into_iter().enumerate() {
                // Durable events get the next seq; transient ones carry the last.
                if kind.is_durable() {
                    seq += 1;
                }
                let parent = if was_send { script.parents.get(i).cloned().flatten() } else { None };
                let event = SessionEvent { parent, ..ev(&attached, seq, kind) };
                send(&mut ws, &ServerFrame::Event(EventFrame { event })).await;
            }
            if was_send && script.lag_then_snapshot.is_some() {
                let error = ErrorBody::new(ErrorCode::Lagged, "re-attach");
                send(&mut ws, &ServerFrame::Error(ConnectionError { error, fatal: false })).await;
            }
            if was_send && script.close_after_turn {
                let _ = ws.close(None).await;
                return;
            }
        }
    });
    (url, seen)
}

/// One accepted connection of [`fake_connections`], after the hello/welcome exchange.
pub type FakeSocket = WebSocketStream<TcpStream>;

/// A fake that accepts connections one after another: the n-th (from 0) is welcomed as
/// connection `n + 1` and handed to `script(n, socket)`; the fake stops accepting when `script`
/// returns false for a connection's index before it is welcomed (`accept(n)`).
pub async fn fake_connections<A, F, Fut>(mut accept: A, mut script: F) -> String
where
    A: FnMut(usize) -> bool + Send + 'static,
    F: FnMut(usize, FakeSocket) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        for n in 0.. {
            if !accept(n) {
                return;
            }
            let Ok((tcp, _)) = listener.accept().await else { return };
            let Ok(mut ws) = tokio_tungstenite::accept_async(tcp).await else { continue };
            let Some(ClientFrame::Hello(_)) = next_frame(&mut ws).await else { continue };
            let welcome = Welcome {
                protocol_version: PROTOCOL_VERSION,
                server: "fake".into(),
                user: UserInfo {
                    id: UserId::from("u_1"),
                    name: "ada".into(),
                    org_id: OrgId::from("o_1"),
                    org: "acme".into(),
                },
                connection_id: n as u64 + 1,
            };
            send(&mut ws, &ServerFrame::Welcome(welcome)).await;
            tokio::spawn(script(n, ws));
        }
    });
    url
}

/// The next frame the client sent, or `None` once it is gone.
pub async fn next_frame(ws: &mut FakeSocket) -> Option<ClientFrame> {
    while let Some(Ok(message)) = ws.next().await {
        if let Message::Text(text) = message {
            return serde_json::from_str(&text).ok();
        }
    }
    None
}

/// The next request the client sent (panics on anything else), or `None` once it is gone.
pub async fn next_request(ws: &mut FakeSocket) -> Option<outboard_shared::Request> {
    match next_frame(ws).await? {
        ClientFrame::Request(request) => Some(request),
        ClientFrame::Hello(_) => panic!("a second hello"),
    }
}

/// A snapshot of session `id` holding `events`.
pub fn snapshot(id: &str, role: Role, events: Vec<SessionEvent>) -> SessionAttachResponse {
    let last = events.iter().map(|e| e.seq).max().unwrap_or(0);
    SessionAttachResponse {
        session: session(id, last),
        role,
        events,
        in_flight: None,
        has_more: false,
        cursor: None,
        standing: Vec::new(),
    }
}

/// Pushes `event` to the client.
pub async fn push(ws: &mut FakeSocket, event: SessionEvent) {
    send(ws, &ServerFrame::Event(EventFrame { event })).await;
}

/// Tells the client that it lagged (a non-fatal `lagged` error frame).
pub async fn lagged(ws: &mut FakeSocket) {
    let error = ErrorBody::new(ErrorCode::Lagged, "re-attach");
    send(ws, &ServerFrame::Error(ConnectionError { error, fatal: false })).await;
}
