//! A PostgreSQL outage in the middle of a turn (issue #35, item 9), against the real server on
//! a PostgreSQL cluster of the test's own, the mock LLM and a real sandbox: the cluster is
//! stopped (a fast shutdown: every pooled connection ends with `57P01`) for a few seconds while a
//! command runs, longer than the lease, and started again. The turn completes with the
//! command's own result (not "the harness restarted"), no SQLSTATE reaches the client, and a
//! client connecting during the outage is told the store is unreachable rather than that no
//! server answers.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::{Duration, Instant};

use outboard_server::store::pgtest::Cluster;
use outboard_shared::EventKind;
use outboard_tests::fixture::{base_url, bash, cli, driver, result_of, turn_ended, until};
use outboard_tests::harness::{outboard, Api, TestServer, STORE_URL_FILE};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use serde_json::json;

/// How long the store is away: longer than the lease (`--lease-secs 2`), shorter than the
/// command.
const OUTAGE: Duration = Duration::from_secs(4);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_outlives_a_postgres_outage_and_clients_hear_why_meanwhile() {
    let cluster: &'static Cluster = Box::leak(Box::new(
        tokio::task::spawn_blocking(|| Cluster::start(false)).await.unwrap().unwrap(),
    ));
    let data = tempfile::tempdir().unwrap();
    std::fs::write(data.path().join(STORE_URL_FILE), cluster.fresh_url().unwrap()).unwrap();
    let mock = MockLlm::start(vec![
        bash("c1", "sleep 7; echo survived"),
        MockStep::text("The command survived."),
    ])
    .await
    .unwrap();
    let server = TestServer::start_in(
        data,
        Api::Anthropic,
        &base_url(&mock, Api::Anthropic),
        &["--lease-secs", "2"],
    )
    .unwrap();
    let (token, mut c, sid) = driver(&server).await;

    c.request("turn/send", json!({"session_id": sid, "text": "Run it."})).await.unwrap().unwrap();
    until(&mut c, "the command's start", Duration::from_secs(30), |e| {
        matches!(e.kind, EventKind::ToolCall { .. })
    })
    .await;
    let down_at = Instant::now();
    tokio::task::spawn_blocking(move || cluster.down()).await.unwrap();

    // A client connecting meanwhile is told what is wrong.
    let (url_server, token2) = (server.url.clone(), token.clone());
    let during = tokio::task::spawn_blocking(move || {
        outboard(&["sessions", "--server", &url_server, "--token", &token2], None).unwrap()
    })
    .await
    .unwrap();
    assert_ne!(during.code, 0, "{}", during.stdout);
    assert!(
        during.stderr.contains("the server's store (PostgreSQL) is unreachable"),
        "{}",
        during.stderr
    );
    assert!(!during.stderr.contains("is outboard-server running"), "{}", during.stderr);
    assert!(!during.stderr.contains("57P01"), "{}", during.stderr);
    assert!(down_at.elapsed() < OUTAGE, "the refusal came within the outage");

    tokio::time::sleep(OUTAGE.saturating_sub(down_at.elapsed())).await;
    tokio::task::spawn_blocking(move || cluster.up()).await.unwrap().unwrap();

    let events = until(&mut c, "the turn's end", Duration::from_secs(60), turn_ended).await;
    let end = events.last().unwrap();
    assert!(matches!(end.kind, EventKind::TurnCompleted { .. }), "{:?}", end.kind);
    let (output, is_error) = result_of(&events, "c1");
    assert!(output.contains("survived") && !is_error, "{output}");
    let shown = serde_json::to_string(&events).unwrap();
    assert!(!shown.contains("57P01") && !shown.contains("restarted"), "{shown}");
    // And the store serves again.
    let after = cli(&server, &token, &["sessions"], None);
    assert_eq!(after.code, 0, "{}", after.stderr);
    let log = server.log();
    assert!(log.contains("the store (PostgreSQL) is unreachable; retrying"), "the log says it");
    assert!(log.contains("the store (PostgreSQL) is reachable again"));
}
