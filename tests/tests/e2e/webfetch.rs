//! `WebFetch` through the real server: the model (the mock, over real HTTP) calls it, the server
//! fetches in its own process under the session's network policy and audit, and the model gets
//! the page as Markdown in its next request. A local page allowed by IP literal is converted; a
//! host the org does not allow is refused by policy (and the refusal is a row of `admin network
//! log` and a `network` event); a redirect from an allowed page to an address nobody allowed is
//! refused at that hop; a body over the cap is cut with a note; `--network none` refuses every
//! fetch. No sandbox is started for any of it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::net::SocketAddr;

use axum::response::{Html, Redirect};
use axum::routing::get;
use outboard_shared::{EventKind, SessionEvent};
use outboard_tests::fixture::{self, admin_ok};
use outboard_tests::harness::{outboard, Api, TestServer, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep, MockToolCall};
use serde_json::{json, Value};

/// The page the model fetches: a heading, a link, a script and a style that must not survive.
const PAGE: &str = "<!doctype html><html><head><title>Release notes</title>\
    <style>.x { color: red }</style><script>var tracking = 'SCRIPT-BODY';</script></head>\
    <body><h1>Version 2.0</h1><p>Read the <a href=\"https://example.com/upgrade\">upgrade \
    guide</a> first.</p><script>document.write('INLINE-SCRIPT')</script>\
    <h2>Fixes</h2><ul><li>faster start</li></ul></body></html>";

/// The same bytes as the server's `MAX_BODY_BYTES` (5 MiB).
const BODY_CAP: usize = 5 << 20;

async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// The allowed upstream (`/`, `/big`, `/away` to `elsewhere`) and one nobody allowed.
async fn upstreams() -> (SocketAddr, SocketAddr) {
    let elsewhere =
        serve(axum::Router::new().route("/", get(|| async { "ELSEWHERE-CONTENT" }))).await;
    let big = format!("BIG-START {}", "y".repeat(BODY_CAP + 4096));
    let app = axum::Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .route("/big", get(move || async move { big }))
        .route(
            "/away",
            get(move || async move { Redirect::temporary(&format!("http://{elsewhere}/")) }),
        );
    (serve(app).await, elsewhere)
}

fn fetch(id: &str, url: &str) -> MockToolCall {
    MockToolCall::new("WebFetch", json!({"url": url, "prompt": "What changed?"})).with_id(id)
}

/// The text of every `tool_result` block the model was sent, by call id (Anthropic's format).
fn results_sent(mock: &MockLlm) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    for request in mock.requests() {
        for message in request.body["messages"].as_array().into_iter().flatten() {
            for block in message["content"].as_array().into_iter().flatten() {
                if block["type"] != "tool_result" {
                    continue;
                }
                let text = match &block["content"] {
                    Value::String(s) => s.clone(),
                    Value::Array(parts) => {
                        parts.iter().filter_map(|p| p["text"].as_str()).collect::<Vec<_>>().join("")
                    }
                    _ => String::new(),
                };
                let id = block["tool_use_id"].as_str().unwrap_or_default().to_owned();
                let entry = (id, text, block["is_error"] == true);
                if !out.contains(&entry) {
                    out.push(entry);
                }
            }
        }
    }
    out
}

fn sent<'a>(results: &'a [(String, String, bool)], id: &str) -> &'a (String, String, bool) {
    results.iter().find(|r| r.0 == id).unwrap_or_else(|| panic!("no result for {id}: {results:#?}"))
}

fn log_rows(server: &TestServer, org: &str) -> Vec<Value> {
    let (code, out, err) = server.admin(&["network", "log", "--org", org, "--json"], None).unwrap();
    assert_eq!(code, 0, "{err}");
    out.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn sandbox_events(events: &[SessionEvent]) -> usize {
    events.iter().filter(|e| matches!(e.kind, EventKind::Sandbox { .. })).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webfetch_returns_markdown_under_the_policy_and_refuses_what_it_does_not_allow() {
    let (up, elsewhere) = upstreams().await;
    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = fixture::serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("bob", "acme").unwrap();
    admin_ok(&server, &["network", "set", "--org", "acme", "allow", &up.to_string()], None);

    mock.push(MockStep::tool_calls(vec![
        fetch("page", &format!("http://{up}/")),
        fetch("blocked", "http://blocked.example/docs"),
        fetch("away", &format!("http://{up}/away")),
        fetch("big", &format!("http://{up}/big")),
    ]));
    mock.push(MockStep::text("done"));
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();
    let events = c.turn(&sid, "read the release notes").await.unwrap();

    // The model was offered the tool.
    let first = &mock.requests()[0];
    let tools: Vec<&str> =
        first.body["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
    assert!(tools.contains(&"WebFetch"), "{tools:?}");

    let results = results_sent(&mock);
    // 1. The allowed page, as Markdown under the header that carries the prompt.
    let (_, page, is_error) = sent(&results, "page");
    assert!(!is_error, "{page}");
    assert!(page.starts_with(&format!("URL: http://{up}/\nStatus: 200 OK\n")), "{page}");
    assert!(page.contains("Content-Type: text/html"), "{page}");
    assert!(page.contains("Title: Release notes"), "{page}");
    assert!(page.contains("Answer from this page: What changed?"), "{page}");
    assert!(page.contains("# Version 2.0"), "{page}");
    assert!(page.contains("## Fixes"), "{page}");
    assert!(page.contains("[upgrade guide](https://example.com/upgrade)"), "{page}");
    for gone in ["SCRIPT-BODY", "INLINE-SCRIPT", "color: red", "<h1>", "<a href"] {
        assert!(!page.contains(gone), "{gone:?} reached the model: {page}");
    }

    // 2. A host the org does not allow: refused by policy, saying who and how to allow it.
    let (_, blocked, is_error) = sent(&results, "blocked");
    assert!(is_error, "{blocked}");
    assert!(blocked.contains("blocked.example:80"), "{blocked}");
    assert!(blocked.contains("refused by: the org's network policy"), "{blocked}");
    assert!(blocked.contains("policy: org acme: allow"), "{blocked}");
    assert!(
        blocked.contains("outboard-server admin network set --org acme allow"),
        "the admin command that would allow it: {blocked}"
    );

    // 3. A redirect from the allowed page to an address nobody allowed: refused at that hop.
    let (_, away, is_error) = sent(&results, "away");
    assert!(is_error, "{away}");
    assert!(
        away.contains(&format!(
            "could not follow redirect 1 of http://{up}/away (from http://{up}/away to \
             http://{elsewhere}/)"
        )),
        "{away}"
    );
    assert!(away.contains(&format!("refused {elsewhere}")), "{away}");
    assert!(!away.contains("ELSEWHERE-CONTENT"), "{away}");

    // 4. A body over the cap: cut, and the model is told.
    let (_, big, is_error) = sent(&results, "big");
    assert!(!is_error, "{}", &big[..big.len().min(600)]);
    assert!(big.contains("Note: the page was cut"), "{}", &big[..600]);
    assert!(big.contains("BIG-START"), "{}", &big[..600]);

    // The refusals are `network` events of the session, and rows of the org's network log.
    let refused: Vec<(String, u16)> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Network { host, port, .. } => Some((host.clone(), *port)),
            _ => None,
        })
        .collect();
    assert!(refused.contains(&("blocked.example".into(), 80)), "{refused:?}");
    assert!(refused.contains(&("127.0.0.1".into(), elsewhere.port())), "{refused:?}");
    let rows = log_rows(&server, "acme");
    let row = rows.iter().find(|r| r["host"] == "blocked.example").expect("a row for the refusal");
    assert_eq!(row["allowed"], false, "{row}");
    assert_eq!(row["session_id"], sid.as_str(), "{row}");
    assert!(row["reason"].as_str().unwrap().starts_with("WebFetch: org acme"), "{row}");
    let hop = rows
        .iter()
        .find(|r| r["port"] == elsewhere.port())
        .expect("a row for the refused redirect hop");
    assert_eq!(hop["allowed"], false, "{hop}");
    let fetched = rows
        .iter()
        .filter(|r| r["port"] == up.port() && r["allowed"] == true)
        .map(|r| r["bytes_down"].as_u64().unwrap())
        .collect::<Vec<_>>();
    assert_eq!(fetched.len(), 3, "/, /away and /big: {rows:#?}");
    assert!(fetched.contains(&(BODY_CAP as u64)), "the cut body's bytes: {fetched:?}");

    // None of it ran in (or woke) a sandbox.
    assert_eq!(sandbox_events(&events), 0, "{events:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_without_network_refuses_every_webfetch() {
    let (up, _) = upstreams().await;
    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = fixture::serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    admin_ok(&server, &["network", "set", "--org", "acme", "allow", &up.to_string()], None);
    mock.push(MockStep::tool_calls(vec![fetch("page", &format!("http://{up}/"))]));
    mock.push(MockStep::text("done"));
    let run = outboard(
        &["run", "--json", "--network", "none", "--server", &server.url, "--token", &token, "go"],
        None,
    )
    .unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = run.json_lines().unwrap();
    let result = lines.iter().find(|l| l["type"] == "tool_result").expect("a tool result");
    let output = result["output"].as_str().unwrap();
    assert_eq!(result["is_error"], true, "{result}");
    assert!(output.contains("refused by: this session's narrowing"), "{output}");
    assert!(output.contains("policy: session none"), "{output}");
    assert!(!output.contains("Version 2.0"), "{output}");
    let (_, sent_output, _) = sent(&results_sent(&mock), "page").clone();
    assert_eq!(sent_output, output, "the model got the refusal");
    let net: Vec<&Value> = lines.iter().filter(|l| l["type"] == "network").collect();
    assert_eq!(net.len(), 1, "{lines:#?}");
    assert_eq!(net[0]["policy"], "session none");
}
