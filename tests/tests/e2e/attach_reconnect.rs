//! The TUI's connection task against a server that restarts: it shows `reconnecting`, comes
//! back on its own, re-attaches with its last `seq`, and the transcript continues with no gap
//! and no duplicate. The server is reached through a small TCP relay so the restarted server
//! (on a new port) is found at the same address, as a deployed server would be.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboard_shared::{EventKind, Role, SessionId};
use outboard_tests::fixture::serve;
use outboard_tests::harness::{Api, TestServer};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use outboard_tui::app::{AppEvent, ConnState, Effect};
use outboard_tui::net::{self, Initial};
use pretty_assertions::assert_eq;
use tokio::sync::mpsc;

/// Forwards every connection on its own port to the address in `target`.
async fn relay(target: Arc<Mutex<String>>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let to = target.lock().unwrap().clone();
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    url
}

fn addr(url: &str) -> String {
    url.trim_start_matches("ws://").to_owned()
}

async fn next_matching(
    rx: &mut mpsc::Receiver<AppEvent>,
    what: &str,
    mut f: impl FnMut(&AppEvent) -> bool,
    seen: &mut Vec<AppEvent>,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let ev = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("timed out waiting for {what}; saw {seen:#?}"))
            .expect("the connection task is alive");
        let done = f(&ev);
        seen.push(ev);
        if done {
            return;
        }
    }
}

#[tokio::test]
async fn a_restarted_server_is_reconnected_and_the_session_resumes_from_the_last_seq() {
    let mock =
        MockLlm::start(vec![MockStep::text("first answer"), MockStep::text("second answer")])
            .await
            .unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    let target = Arc::new(Mutex::new(addr(&server.url)));
    let url = relay(target.clone()).await;

    let (app_tx, mut rx) = mpsc::channel(1024);
    let (fx, effects) = mpsc::channel(16);
    tokio::spawn(net::run(url, token, Initial::New, effects, app_tx));
    let mut seen = Vec::new();
    next_matching(
        &mut rx,
        "the first attach",
        |e| matches!(e, AppEvent::Attached(_, false)),
        &mut seen,
    )
    .await;
    let sid: SessionId = seen
        .iter()
        .find_map(|e| match e {
            AppEvent::Attached(s, _) => Some(s.session.id.clone()),
            _ => None,
        })
        .unwrap();
    fx.send(Effect::Send("one".into())).await.unwrap();
    next_matching(
        &mut rx,
        "the first turn's end",
        |e| matches!(e, AppEvent::Server(ev) if matches!(ev.kind, EventKind::TurnCompleted { .. })),
        &mut seen,
    )
    .await;

    // Restart the server on the same data; the relay now points at the new one.
    let data = server.kill().unwrap();
    next_matching(
        &mut rx,
        "the reconnecting state",
        |e| matches!(e, AppEvent::Connection(ConnState::Reconnecting { .. }, _)),
        &mut seen,
    )
    .await;
    let server =
        TestServer::start_in(data, Api::Anthropic, &mock.anthropic_base_url(), &[]).unwrap();
    *target.lock().unwrap() = addr(&server.url);
    let before = seen.len();
    next_matching(
        &mut rx,
        "the resumed attach",
        |e| matches!(e, AppEvent::Attached(_, true)),
        &mut seen,
    )
    .await;
    let resumed = seen[before..]
        .iter()
        .find_map(|e| match e {
            AppEvent::Attached(s, true) => Some(s.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(resumed.session.id, sid);
    assert_eq!(resumed.role, Role::Driver);
    assert!(
        seen[before..].iter().any(|e| matches!(e, AppEvent::Connection(ConnState::Connected, _))),
        "{seen:#?}"
    );

    fx.send(Effect::Send("two".into())).await.unwrap();
    next_matching(
        &mut rx,
        "the second turn's end",
        |e| matches!(e, AppEvent::Server(ev) if matches!(ev.kind, EventKind::TurnCompleted { .. })),
        &mut seen,
    )
    .await;

    // Every durable event arrived once, in order, across the restart.
    let mut seqs = Vec::new();
    for e in &seen {
        match e {
            AppEvent::Attached(s, _) => seqs.extend(s.events.iter().map(|e| e.seq)),
            AppEvent::Server(ev) if ev.kind.is_durable() => seqs.push(ev.seq),
            _ => {}
        }
    }
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>(), "no gap, no duplicate");
    drop(fx);
}
