//! `WebSearch` through the real server (issue 55, item 2): off until an admin turns it on; a
//! SearXNG-shaped JSON service on loopback answers, its results reach the model's next request
//! held to the org's network policy (a result on a host the org does not allow is dropped),
//! and every way the service fails (down, HTML, a hang, a query too long) is one clear tool
//! error; Brave's key stays on the server; the Anthropic API's own server tool is passed
//! through, its blocks sent back verbatim (after a restart too) and shown with their sources.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::Query;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::get;
use outboard_shared::{EventKind, SessionEvent};
use outboard_tests::fixture::{self, admin_ok};
use outboard_tests::harness::{outboard, outboard_in, Api, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep, MockToolCall};
use serde_json::{json, Value};

async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// A SearXNG-shaped service: `/ok` answers JSON results (one on a host the org does not
/// allow), `/html` a web page, `/hang` nothing.
async fn searxng() -> SocketAddr {
    let ok = |q: Query<HashMap<String, String>>| async move {
        assert_eq!(q.get("format").map(String::as_str), Some("json"), "{q:?}");
        axum::Json(json!({"query": q.get("q"), "number_of_results": 3, "results": [
            {"url": "https://docs.allowed.example/release", "title": "Release 2.0",
             "content": "What changed in 2.0", "engine": "duckduckgo"},
            {"url": "https://blocked.example/mirror", "title": "A mirror",
             "content": "BLOCKED-SNIPPET"},
            {"url": "https://allowed.example/faq", "title": "FAQ", "content": "Answers"},
            {"url": "https://crates.io/crates/release", "title": "release on crates.io",
             "content": "A crate"}
        ]}))
    };
    let app = axum::Router::new()
        .route("/ok/search", get(ok))
        .route(
            "/html/search",
            get(|| async { axum::response::Html("<!doctype html><title>SearXNG</title>") }),
        )
        .route(
            "/hang/search",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(120)).await;
                "late"
            }),
        );
    serve(app).await
}

fn search(id: &str, query: &str) -> MockToolCall {
    MockToolCall::new("WebSearch", json!({"query": query})).with_id(id)
}

/// The text and error flag of the `tool_result` the model was sent for `id` (Anthropic's
/// format), from the last request that carries it.
fn sent(mock: &MockLlm, id: &str) -> (String, bool) {
    for request in mock.requests().iter().rev() {
        for message in request.body["messages"].as_array().into_iter().flatten() {
            for block in message["content"].as_array().into_iter().flatten() {
                if block["type"] == "tool_result" && block["tool_use_id"] == id {
                    let text = match &block["content"] {
                        Value::String(s) => s.clone(),
                        Value::Array(parts) => {
                            parts.iter().filter_map(|p| p["text"].as_str()).collect()
                        }
                        _ => String::new(),
                    };
                    return (text, block["is_error"] == true);
                }
            }
        }
    }
    panic!("no result for {id} was sent to the model");
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

fn sandbox_events(events: &[SessionEvent]) -> usize {
    events.iter().filter(|e| matches!(e.kind, EventKind::Sandbox { .. })).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn searxng_results_reach_the_model_under_the_policy_and_failures_are_clear_errors() {
    let service = searxng().await;
    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = fixture::serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("bob", "acme").unwrap();
    admin_ok(&server, &["network", "set", "--org", "acme", "allow", "*.allowed.example"], None);
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();

    // Off until an admin turns it on: not offered at all.
    mock.push(MockStep::text("no search here"));
    c.turn(&sid, "hello").await.unwrap();
    assert!(!tool_names(&mock.requests()[0].body).contains(&"WebSearch".to_owned()));
    let shown = admin_ok(&server, &["search", "show", "--org", "acme"], None);
    assert!(shown.starts_with("web search: off"), "{shown}");

    let set = format!("searxng:http://{service}/ok");
    let shown = admin_ok(&server, &["search", "set", "--org", "acme", &set], None);
    assert!(shown.starts_with(&format!("web search: {set}\n")), "{shown}");
    mock.push(MockStep::tool_calls(vec![
        search("found", "release notes"),
        search("long", &"x".repeat(10_000)),
    ]));
    mock.push(MockStep::text("done"));
    let events = c.turn(&sid, "what changed?").await.unwrap();
    let offered = tool_names(&mock.requests()[1].body);
    assert!(offered.contains(&"WebSearch".to_owned()), "{offered:?}");

    let (found, is_error) = sent(&mock, "found");
    assert!(!is_error, "{found}");
    assert!(
        found.starts_with("Web search results for query: \"release notes\" (from SearXNG)\n"),
        "{found}"
    );
    assert!(
        found.contains("1. Release 2.0\n   https://docs.allowed.example/release\n   What changed"),
        "{found}"
    );
    // `*.allowed.example` does not cover allowed.example itself, nor blocked.example.
    assert!(!found.contains("blocked.example") && !found.contains("BLOCKED-SNIPPET"), "{found}");
    assert!(!found.contains("https://allowed.example/faq"), "{found}");
    assert!(found.contains("Note: 3 left out: their hosts are not allowed"), "{found}");
    let (long, is_error) = sent(&mock, "long");
    assert!(is_error, "{long}");
    assert!(long.contains("10000 characters long; WebSearch takes at most 1000"), "{long}");
    assert_eq!(sandbox_events(&events), 0, "a search wakes no sandbox: {events:#?}");

    // The service answers a web page: one clear error.
    let html = format!("searxng:http://{service}/html");
    admin_ok(&server, &["search", "set", "--org", "acme", &html], None);
    mock.push(MockStep::tool_calls(vec![search("html", "release notes")]));
    mock.push(MockStep::text("done"));
    c.turn(&sid, "again").await.unwrap();
    let (text, is_error) = sent(&mock, "html");
    assert!(is_error, "{text}");
    assert!(
        text.starts_with(&format!(
            "WebSearch could not search: SearXNG at http://{service}/html answered an HTML \
             page, not JSON"
        )),
        "{text}"
    );

    // The service hangs: an error at the deadline.
    let hang = format!("searxng:http://{service}/hang");
    admin_ok(&server, &["search", "set", "--org", "acme", &hang], None);
    mock.push(MockStep::tool_calls(vec![search("hang", "release notes")]));
    mock.push(MockStep::text("done"));
    c.turn(&sid, "once more").await.unwrap();
    let (text, is_error) = sent(&mock, "hang");
    assert!(is_error, "{text}");
    assert!(text.contains("did not answer within 10 s"), "{text}");

    // The service is down: one error saying where it was looked for.
    let down = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let gone = format!("searxng:http://{down}");
    admin_ok(&server, &["search", "set", "--org", "acme", &gone], None);
    mock.push(MockStep::tool_calls(vec![search("down", "release notes")]));
    mock.push(MockStep::text("done"));
    c.turn(&sid, "and now").await.unwrap();
    let (text, is_error) = sent(&mock, "down");
    assert!(is_error, "{text}");
    assert!(
        text.starts_with(&format!(
            "WebSearch could not search: SearXNG at http://{down} cannot be reached"
        )),
        "{text}"
    );

    // Off again: no longer offered.
    admin_ok(&server, &["search", "clear", "--org", "acme"], None);
    mock.push(MockStep::text("ok"));
    c.turn(&sid, "bye").await.unwrap();
    let last = mock.requests().last().unwrap().body.clone();
    assert!(!tool_names(&last).contains(&"WebSearch".to_owned()));
}

const BRAVE_KEY: &str = "BSAkey-0f1e2d3c4b5a69788796";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_brave_key_stays_on_the_server() {
    // A Brave-shaped API that wants its key and echoes it into a snippet (as a hostile or
    // buggy service might).
    let brave = serve(axum::Router::new().route(
        "/res/v1/web/search",
        get(|headers: HeaderMap| async move {
            if headers.get("x-subscription-token").and_then(|v| v.to_str().ok()) != Some(BRAVE_KEY)
            {
                return (StatusCode::UNAUTHORIZED, axum::Json(json!({"type": "ErrorResponse"})));
            }
            (
                StatusCode::OK,
                axum::Json(json!({"type": "search", "web": {"type": "search", "results": [
                    {"url": "https://docs.allowed.example/key", "title": "Keys",
                     "description": format!("you sent {BRAVE_KEY}")}
                ]}})),
            )
        }),
    ))
    .await;
    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = fixture::serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("bob", "acme").unwrap();
    admin_ok(&server, &["network", "set", "--org", "acme", "allow", "*.allowed.example"], None);
    let host = brave.to_string();
    admin_ok(
        &server,
        &["secret", "set", "--org", "acme", "--host", &host, "brave"],
        Some(BRAVE_KEY),
    );
    let set = format!("brave:http://{brave}");
    let shown = admin_ok(&server, &["search", "set", "--org", "acme", &set], None);
    assert!(shown.contains(&format!("its key: the org secret for {host}")), "{shown}");
    assert!(!shown.contains(BRAVE_KEY), "{shown}");

    mock.push(MockStep::tool_calls(vec![search("brave", "api keys")]));
    mock.push(MockStep::text("done"));
    let run =
        outboard(&["run", "--json", "--server", &server.url, "--token", &token, "find it"], None)
            .unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let (text, is_error) = sent(&mock, "brave");
    assert!(!is_error, "{text}");
    assert!(text.contains("1. Keys\n   https://docs.allowed.example/key\n   you sent "), "{text}");
    for (what, place) in [
        ("the model's requests", mock.requests().iter().map(|r| r.raw.clone()).collect::<String>()),
        ("the client's messages", run.stdout.clone()),
        ("the client's stderr", run.stderr.clone()),
    ] {
        assert!(!place.contains(BRAVE_KEY), "the key reached {what}");
    }
    let sid = run.json_lines().unwrap()[0]["session_id"].as_str().unwrap().to_owned();
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let attach = json!({"session_id": sid, "role": "watcher"});
    let log = c.request("session/attach", attach).await.unwrap().unwrap().to_string();
    assert!(log.contains("you sent "), "the result is in the log: {log}");
    assert!(!log.contains(BRAVE_KEY), "the key reached the event log");
    assert!(!server.log().contains(BRAVE_KEY), "the key reached the server's log");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_server_tool_is_passed_through_and_its_blocks_go_back_verbatim() {
    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = fixture::serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("bob", "acme").unwrap();
    admin_ok(&server, &["network", "set", "--org", "acme", "allow", "docs.rs"], None);
    admin_ok(&server, &["search", "set", "--org", "acme", "anthropic"], None);

    let call = json!({"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search",
                      "input": {"query": "tokio select macro"}});
    let result = json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01",
        "content": [{"type": "web_search_result", "url": "https://docs.rs/tokio/latest/tokio/macro.select.html",
                     "title": "select in tokio - Rust", "encrypted_content": "EqgfCioIARgBIiQ3YTAw",
                     "page_age": null}]});
    mock.push(
        MockStep::text("select! waits on several futures.")
            .with_server_blocks(vec![call.clone(), result.clone()]),
    );
    let connect = ["--server", server.url.as_str(), "--token", token.as_str()];
    let first =
        outboard(&[&["run", "--json"][..], &connect[..], &["what is select?"][..]].concat(), None)
            .unwrap();
    assert_eq!(first.code, 0, "{}", first.stderr);

    // Offered as the API's own tool, with the org's network policy as its domain filter.
    let tools = mock.requests()[0].body["tools"].clone();
    let server_tools: Vec<&Value> =
        tools.as_array().unwrap().iter().filter(|t| t.get("type").is_some()).collect();
    assert_eq!(
        server_tools,
        [&json!({"type": "web_search_20250305", "name": "web_search", "max_uses": 5,
                 "allowed_domains": ["docs.rs"]})],
        "{tools:#}"
    );
    assert!(!tool_names(&mock.requests()[0].body).contains(&"WebSearch".to_owned()));

    // The durable message carries the search with its sources.
    let lines = first.json_lines().unwrap();
    let sid = lines[0]["session_id"].as_str().unwrap().to_owned();
    let message = lines.iter().find(|l| l["type"] == "assistant_message").expect("a message");
    let searches = &message["searches"];
    assert_eq!(searches[0]["query"], "tokio select macro", "{message:#}");
    assert_eq!(
        searches[0]["sources"],
        json!([{"title": "select in tokio - Rust",
                "url": "https://docs.rs/tokio/latest/tokio/macro.select.html"}])
    );

    // After a restart the conversation is rebuilt from the log: the next request carries the
    // blocks back exactly as the API sent them. That turn searches again, shown with sources.
    let server = fixture::crash_and_restart(server, &mock, Api::Anthropic, &[], || {});
    let again = json!({"type": "server_tool_use", "id": "srvtoolu_02", "name": "web_search",
                       "input": {"query": "tokio join"}});
    let found = json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_02",
        "content": [{"type": "web_search_result", "url": "https://docs.rs/tokio/latest/tokio/macro.join.html",
                     "title": "join in tokio - Rust", "encrypted_content": "Eq8x", "page_age": "2 days"}]});
    mock.push(MockStep::text("join! too.").with_server_blocks(vec![again, found]));
    let connect = ["--server", server.url.as_str(), "--token", token.as_str()];
    let second = outboard(
        &[&["run"][..], &connect[..], &["--session", &sid, "and join?"][..]].concat(),
        None,
    )
    .unwrap();
    assert_eq!(second.code, 0, "{}", second.stderr);
    let request = mock.requests().last().unwrap().body.clone();
    let assistant = request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "assistant")
        .expect("the first answer")
        .clone();
    let content = assistant["content"].as_array().unwrap();
    assert_eq!(content[0], call, "{assistant:#}");
    assert_eq!(content[1], result, "{assistant:#}");
    assert_eq!(content[2], json!({"type": "text", "text": "select! waits on several futures."}));
    assert!(
        second.stderr.contains(
            "● web search \"tokio join\": 1 source\n  ⎿  join in tokio - Rust — \
             https://docs.rs/tokio/latest/tokio/macro.join.html\n"
        ),
        "{}",
        second.stderr
    );

    // A session with no network gets no provider search either (as WebFetch refuses there).
    mock.push(MockStep::text("no search here"));
    let none = outboard(
        &[&["run", "--json", "--network", "none"][..], &connect[..], &["search?"][..]].concat(),
        None,
    )
    .unwrap();
    assert_eq!(none.code, 0, "{}", none.stderr);
    let tools = mock.requests().last().unwrap().body["tools"].clone();
    assert!(
        tools.as_array().unwrap().iter().all(|t| t.get("type").is_none()),
        "a --network none session was offered the provider's search: {tools:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_mode_turns_it_on_with_outboard_web_search() {
    let service = searxng().await;
    let mock = MockLlm::start(vec![]).await.unwrap();
    let data = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let run = |search: Option<String>| {
        let (base, data) = (mock.anthropic_base_url(), data.path().to_str().unwrap().to_owned());
        let cwd = project.path().to_path_buf();
        tokio::task::spawn_blocking(move || {
            let env: Vec<(&str, &str)> =
                search.iter().map(|s| ("OUTBOARD_WEB_SEARCH", s.as_str())).collect();
            let args = ["run", "--provider", "anthropic", "--base-url", &base, "--model", "m"];
            outboard_in(
                Some(&cwd),
                &env,
                &[&args[..], &["--data", &data, "look it up"]].concat(),
                None,
            )
            .unwrap()
        })
    };
    mock.push(MockStep::tool_calls(vec![search("embedded", "release")]));
    mock.push(MockStep::text("done"));
    let on = run(Some(format!("searxng:http://{service}/ok"))).await.unwrap();
    assert_eq!(on.code, 0, "{}", on.stderr);
    let (text, is_error) = sent(&mock, "embedded");
    assert!(!is_error, "{text}");
    // The local org's default network policy is the registries: crates.io only.
    assert!(
        text.contains("1. release on crates.io\n   https://crates.io/crates/release"),
        "{text}"
    );
    assert!(!text.contains("allowed.example"), "{text}");

    // Without the setting it is off again.
    mock.push(MockStep::text("no search"));
    let off = run(None).await.unwrap();
    assert_eq!(off.code, 0, "{}", off.stderr);
    let last = mock.requests().last().unwrap().body.clone();
    assert!(!tool_names(&last).contains(&"WebSearch".to_owned()));
    let bad = run(Some("google".into())).await.unwrap();
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    assert!(
        bad.stderr.contains("--web-search (web_search, OUTBOARD_WEB_SEARCH)"),
        "{}",
        bad.stderr
    );
}
