//! Server nodes on one PostgreSQL store: `admin nodes`, and the refusal of a second serving node
//! while the session actors do not take leases yet (a node that stopped, or died and went quiet
//! past its lease, no longer counts).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use outboard_tests::harness::{Api, TestServer, STORE_URL_FILE};
use outboard_tests::mock_llm::MockLlm;
use serde_json::Value;

/// A data dir whose servers and admin commands use the store at `url`.
fn data_on(url: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join(STORE_URL_FILE), url).unwrap();
    dir
}

fn nodes(server: &TestServer) -> Vec<Value> {
    let (code, out, err) = server.admin(&["nodes", "--json"], None).unwrap();
    assert_eq!(code, 0, "{out}{err}");
    out.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test]
async fn a_second_node_waits_for_the_first_to_stop_or_go_quiet() {
    let url = outboard_server::store::pgtest::fresh_url().unwrap();
    let mock = MockLlm::start(vec![]).await.unwrap();
    let base = mock.anthropic_base_url();
    let lease = ["--lease-secs", "1"];
    let a = TestServer::start_in(data_on(&url), Api::Anthropic, &base, &lease).unwrap();
    let listed = nodes(&a);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["state"], "serving");
    assert_eq!(listed[0]["url"], a.url.as_str());
    assert_eq!(listed[0]["leases"], 0);
    let table = a.admin(&["nodes"], None).unwrap().1;
    assert!(table.starts_with("NODE ") && table.contains("serving"), "{table}");

    // A second node on the same database is refused, naming the first, once it has waited out
    // the lease (the first keeps heartbeating).
    let refused = TestServer::start_in(data_on(&url), Api::Anthropic, &base, &lease)
        .err()
        .expect("a second serving node started");
    let refused = refused.to_string();
    assert!(refused.contains("is serving this database"), "{refused}");
    assert!(refused.contains(a.url.trim_start_matches("ws://")), "{refused}");

    // Stopped cleanly: the next node starts at once, and the list shows both.
    let (data_a, clean) = a.terminate(Duration::from_secs(20));
    assert!(clean);
    let b = TestServer::start_in(data_on(&url), Api::Anthropic, &base, &lease).unwrap();
    let states: Vec<String> =
        nodes(&b).iter().map(|n| n["state"].as_str().unwrap().to_owned()).collect();
    assert_eq!(states, ["serving", "stopped"]);

    // Killed: its heartbeat stops, and a node starting after it waits that out and serves.
    let _ = b.kill();
    let c = TestServer::start_in(data_a.unwrap(), Api::Anthropic, &base, &lease).unwrap();
    let listed = nodes(&c);
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert_eq!(listed[0]["state"], "serving");
    let table = c.admin(&["nodes"], None).unwrap().1;
    assert!(table.contains(" lost "), "the killed node shows as lost: {table}");
}
