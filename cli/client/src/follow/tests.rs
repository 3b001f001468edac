//! The follow stream against the scripted fake server: each event once across a lag and a
//! reconnect, the re-attach after the last `seq` delivered, a driver refused who watches, and
//! the ends (a refused token, a budget that runs out).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use outboard_shared::{EventKind, Method, Response, SessionAttachParams};
use pretty_assertions::assert_eq;

use super::*;
use crate::testing::{
    self, ev, fake_connections, lagged, next_request, push, snapshot, FakeSocket,
};

fn text(seq: u64) -> SessionEvent {
    let kind = EventKind::UserMessage { text: format!("m{seq}"), attachments: Vec::new() };
    ev("s_1", seq, kind)
}

fn delta() -> SessionEvent {
    ev("s_1", 0, EventKind::AssistantDelta { text: "…".into() })
}

/// Answers the next request, which must be an attach, with `events`; returns its params.
async fn answer_attach(
    ws: &mut FakeSocket,
    role: Role,
    events: Vec<SessionEvent>,
) -> SessionAttachParams {
    let request = next_request(ws).await.unwrap();
    let Method::SessionAttach(params) = request.method else { panic!("{:?}", request.method) };
    let response = Response::ok(request.id, &snapshot("s_1", role, events));
    testing::send(ws, &outboard_shared::ServerFrame::Response(response)).await;
    params
}

fn dial(url: &str) -> Dial {
    Dial {
        url: url.to_owned(),
        token: "tok".into(),
        options: ConnectOptions::default(),
        room: false,
    }
}

/// What the follow delivered: each durable `seq` (live or in a snapshot), in order, and the
/// updates in a few words.
#[derive(Default, Debug)]
struct Seen {
    seqs: Vec<u64>,
    log: Vec<String>,
}

impl Seen {
    fn take(&mut self, update: Update) {
        let line = match update {
            Update::Connecting { attempt, reason } => {
                format!("connecting {attempt} {}", reason.is_some())
            }
            Update::Connected { welcome, attempts, lost } => {
                format!(
                    "connected #{} after {attempts} lost={}",
                    welcome.connection_id,
                    lost.is_some()
                )
            }
            Update::Takeover => "takeover".into(),
            Update::Attached { snapshot, resumed, after_seq } => {
                let seqs: Vec<u64> = snapshot.events.iter().map(|e| e.seq).collect();
                self.seqs.extend(&seqs);
                format!(
                    "attached {seqs:?} resumed={resumed} after={after_seq:?} as {:?}",
                    snapshot.role
                )
            }
            Update::AttachFailed { error, resumed } => format!("attach failed {resumed}: {error}"),
            Update::Event(e) if e.kind.is_durable() => {
                self.seqs.push(e.seq);
                format!("event {}", e.seq)
            }
            Update::Event(_) => "delta".into(),
            Update::Warning(e) => format!("warning {e}"),
        };
        self.log.push(line);
    }
}

#[tokio::test]
async fn a_lag_re_attaches_after_the_last_seq_and_each_event_arrives_once() {
    let url = fake_connections(
        |n| n == 0,
        |_, mut ws| async move {
            let first = answer_attach(&mut ws, Role::Driver, vec![text(1), text(2), text(3)]).await;
            assert_eq!(first.after_seq, None);
            // 3 again (it raced the snapshot), then new ones; then the server drops some for us.
            for e in [text(3), text(4), delta(), text(5)] {
                push(&mut ws, e).await;
            }
            lagged(&mut ws).await;
            // Live events that raced the re-attach, then the snapshot that overlaps them.
            push(&mut ws, text(6)).await;
            let again = answer_attach(&mut ws, Role::Driver, vec![text(5), text(6), text(7)]).await;
            assert_eq!(again.after_seq, Some(5), "after the last seq delivered before the lag");
            push(&mut ws, text(7)).await;
            push(&mut ws, text(8)).await;
            let _ = next_request(&mut ws).await;
        },
    )
    .await;
    let mut follow = Follow::connect(dial(&url), Retry::Never);
    let mut seen = Seen::default();
    while seen.seqs.last() != Some(&8) {
        let update = follow.next().await.unwrap();
        if matches!(update, Update::Connected { .. }) {
            follow.attach(SessionId::from("s_1"), Role::Driver);
        }
        seen.take(update);
    }
    assert_eq!(seen.seqs, (1..=8).collect::<Vec<_>>(), "{:#?}", seen.log);
    assert_eq!(
        seen.log,
        [
            "connecting 0 false",
            "connected #1 after 1 lost=false",
            "attached [1, 2, 3] resumed=false after=None as Driver",
            "event 4",
            "delta",
            "event 5",
            "event 6",
            "attached [7] resumed=true after=Some(5) as Driver",
            "event 8",
        ]
    );
    assert_eq!(follow.last_seq(), 8);
}

#[tokio::test]
async fn a_lost_connection_reconnects_and_resumes_after_the_last_seq_as_a_watcher_if_it_must() {
    let url = fake_connections(
        |n| n < 2,
        |n, mut ws| async move {
            if n == 0 {
                answer_attach(&mut ws, Role::Driver, vec![text(1), text(2)]).await;
                push(&mut ws, text(3)).await;
                let _ = ws.close(None).await;
                return;
            }
            // Driving was taken away meanwhile: the driver's attach is refused, the watcher's not.
            let request = next_request(&mut ws).await.unwrap();
            let Method::SessionAttach(params) = request.method else { panic!() };
            assert_eq!((params.role, params.after_seq), (Role::Driver, Some(3)));
            let error = outboard_shared::ErrorBody::new(
                outboard_shared::ErrorCode::Forbidden,
                "bob drives",
            );
            testing::send(
                &mut ws,
                &outboard_shared::ServerFrame::Response(Response::err(request.id, error)),
            )
            .await;
            let watch = answer_attach(&mut ws, Role::Watcher, vec![text(3), text(4)]).await;
            assert_eq!((watch.role, watch.after_seq), (Role::Watcher, Some(3)));
            push(&mut ws, text(4)).await;
            push(&mut ws, text(5)).await;
            let _ = next_request(&mut ws).await;
        },
    )
    .await;
    let mut follow = Follow::connect(dial(&url), Retry::Forever);
    let mut seen = Seen::default();
    let mut attached = false;
    while seen.seqs.last() != Some(&5) {
        let update = follow.next().await.unwrap();
        if matches!(update, Update::Connected { .. }) && !attached {
            attached = true;
            follow.attach(SessionId::from("s_1"), Role::Driver);
        }
        seen.take(update);
    }
    assert_eq!(seen.seqs, (1..=5).collect::<Vec<_>>(), "{:#?}", seen.log);
    assert_eq!(
        seen.log,
        [
            "connecting 0 false",
            "connected #1 after 1 lost=false",
            "attached [1, 2] resumed=false after=None as Driver",
            "event 3",
            "connecting 0 true",
            "connected #2 after 1 lost=true",
            "attached [4] resumed=true after=Some(3) as Watcher",
            "event 5",
        ]
    );
    assert_eq!(follow.session().map(|(_, role)| role), Some(Role::Watcher));
}

#[tokio::test]
async fn a_server_that_stays_away_is_retried_with_backoff_until_the_budget_runs_out() {
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    // The first connection ends at once; every later one is refused at the hello (closed).
    let url = fake_connections(
        move |_| {
            counted.fetch_add(1, Ordering::Relaxed);
            true
        },
        |n, mut ws| async move {
            if n == 0 {
                let _ = ws.close(None).await;
            }
        },
    )
    .await;
    let client = Client::connect(&url, "tok").await.unwrap();
    let budget = Duration::from_millis(900);
    let mut follow = Follow::attached(
        client,
        dial(&url),
        Retry::Within(budget),
        SessionId::from("s_1"),
        Role::Driver,
        3,
    );
    let mut connects = 0;
    let err = loop {
        match follow.next().await {
            Ok(Update::Connecting { .. }) => connects += 1,
            Ok(Update::Connected { .. }) => {}
            Ok(other) => panic!("{other:?}"),
            Err(err) => break err,
        }
    };
    let FollowError::GaveUp { budget: given, attempts, .. } = err else { panic!("{err:?}") };
    assert_eq!(given, budget);
    assert!(attempts >= 2, "retried: {attempts}");
    assert_eq!(attempts, connects, "one Connecting per attempt");
    assert!(!follow.is_connected());
}

#[tokio::test]
async fn a_refused_token_ends_the_follow_at_once() {
    let (url, _seen) = testing::fake_server(testing::Script::default()).await;
    let mut dial = dial(&url);
    dial.token = "wrong".into();
    let mut follow = Follow::connect(dial, Retry::Forever);
    assert!(matches!(follow.next().await, Ok(Update::Connecting { attempt: 0, reason: None })));
    let err = follow.next().await.unwrap_err();
    assert!(matches!(err, FollowError::Refused(ClientError::Unauthorized { .. })), "{err:?}");
}

#[tokio::test]
async fn without_retry_a_lost_connection_ends_the_follow() {
    let url = fake_connections(
        |n| n == 0,
        |_, mut ws| async move {
            push(&mut ws, text(4)).await;
            let _ = ws.close(None).await;
        },
    )
    .await;
    let client = Client::connect(&url, "tok").await.unwrap();
    let mut follow =
        Follow::attached(client, dial(&url), Retry::Never, SessionId::from("s_1"), Role::Driver, 3);
    assert!(matches!(follow.next().await, Ok(Update::Event(e)) if e.seq == 4));
    assert!(matches!(follow.next().await, Err(FollowError::Lost(_))));
}
