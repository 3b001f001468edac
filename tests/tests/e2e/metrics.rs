//! `serve --metrics-listen`: a real server's `/metrics` after a scripted session (two model calls,
//! one `Bash` in the real sandbox that goes out through the proxy once allowed and once refused,
//! a refused hello) moves every counter by what happened, passes `promtool check metrics`, and a
//! tool name the model invents adds no series. The alert rules of `docs/OPERATIONS.md` pass
//! `promtool check rules`.
//!
//! promtool comes with Debian's `prometheus` package (`scripts/ci.sh` installs it); without it
//! these tests fail and say so.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use outboard_shared::{EventKind, SessionEvent, Usage};
use outboard_tests::fixture::{admin_ok, serve};
use outboard_tests::harness::{bash_outputs, Api, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use serde_json::json;

/// The samples of one exposition, by series (`name{labels}`).
#[derive(Debug, Clone, Default)]
struct Samples(BTreeMap<String, f64>);

impl Samples {
    fn parse(text: &str) -> Samples {
        let mut map = BTreeMap::new();
        for line in text.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
            let (series, value) = line.rsplit_once(' ').expect("a sample line");
            map.insert(series.to_owned(), value.parse().expect("a number"));
        }
        Samples(map)
    }

    /// The value of a series; 0 when absent (a family's series appear at their first event).
    fn get(&self, series: &str) -> f64 {
        self.0.get(series).copied().unwrap_or(0.0)
    }
}

async fn scrape_text(url: &str) -> String {
    let response = reqwest::get(url).await.unwrap();
    assert!(response.status().is_success(), "{}", response.status());
    let kind = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    response.text().await.unwrap()
}

async fn scrape(url: &str) -> Samples {
    Samples::parse(&scrape_text(url).await)
}

/// Runs promtool with `args`, `input` on stdin; its exit status and output.
fn promtool(args: &[&str], input: &str) -> (bool, String) {
    use std::io::Write as _;
    let child = std::process::Command::new("promtool")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = child.expect(
        "promtool is needed by this test: `apt-get install prometheus` (scripts/ci.sh does)",
    );
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// An HTTP upstream on the host's 127.0.0.1 for the sandbox's allowed connection.
async fn upstream() -> SocketAddr {
    let app = axum::Router::new().route("/", axum::routing::get(|| async { "hello upstream\n" }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// The usage the server logged with its assistant messages, summed.
fn logged_usage(events: &[SessionEvent]) -> Usage {
    let mut total = Usage::default();
    for e in events {
        if let EventKind::AssistantMessage { usage: Some(u), .. } = &e.kind {
            total.add(*u);
        }
    }
    total
}

/// Scrapes until `ready` holds of the samples (what follows a turn's end — the session's status,
/// the closed connection, the proxy's last record — lands just after it), at most `within`.
async fn scrape_until(
    url: &str,
    what: &str,
    within: Duration,
    ready: impl Fn(&Samples) -> bool,
) -> Samples {
    let deadline = Instant::now() + within;
    loop {
        let samples = scrape(url).await;
        if ready(&samples) {
            return samples;
        }
        assert!(Instant::now() < deadline, "{what} within {within:?}; last scrape: {samples:#?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const MODEL_OK: &str =
    r#"outboard_model_requests_total{provider="anthropic",model="mock-model",outcome="ok"}"#;

fn tokens(kind: &str) -> String {
    format!(
        r#"outboard_model_tokens_total{{provider="anthropic",model="mock-model",kind="{kind}"}}"#
    )
}

#[tokio::test]
async fn a_scripted_session_moves_each_counter_by_what_happened() {
    let up = upstream().await;
    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &["--metrics-listen", "127.0.0.1:0"]);
    let url = server.metrics_url.clone().expect("the metrics address");
    assert_ne!(url.trim_start_matches("http://").trim_end_matches("/metrics"), server.addr());
    let token = server.add_user("alice", "acme").unwrap();
    admin_ok(&server, &["network", "set", "--org", "acme", "allow", &up.to_string()], None);

    let before = scrape(&url).await;
    assert!(WsClient::connect(&server.url, "ob_not_a_token").await.is_err());

    let command = format!(
        "unset NO_PROXY no_proxy; echo counted; curl -sS http://{up}/; \
         curl -sS -o /dev/null -w '%{{http_code}}\\n' http://blocked.example/"
    );
    mock.push(
        MockStep::tool_call("Bash", json!({ "command": command }))
            .with_text("Running it.")
            .usage(1200, 7),
    );
    mock.push(MockStep::text("Done.").usage(1300, 9));
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();
    let events = c.turn(&sid, "count this").await.unwrap();
    let out = bash_outputs(&events);
    assert!(out[0].contains("counted") && out[0].contains("hello upstream"), "{out:?}");
    assert!(out[0].contains("403"), "blocked.example is refused: {out:?}");

    let after = scrape_until(
        &url,
        "the session idle, one connection, both egress records",
        Duration::from_secs(20),
        |s| {
            s.get(r#"outboard_sessions{status="idle"}"#) == 1.0
                && s.get("outboard_connections") == 1.0
                && s.get(r#"outboard_egress_connections_total{outcome="allowed"}"#) >= 1.0
        },
    )
    .await;
    let delta = |series: &str| after.get(series) - before.get(series);

    assert_eq!(delta(MODEL_OK), 2.0, "two model calls");
    assert_eq!(
        delta(
            r#"outboard_model_request_duration_seconds_count{provider="anthropic",model="mock-model"}"#
        ),
        2.0
    );
    assert_eq!(
        delta(
            r#"outboard_model_time_to_first_token_seconds_count{provider="anthropic",model="mock-model"}"#
        ),
        2.0,
        "both answers streamed text"
    );
    let logged = logged_usage(&events);
    assert_eq!(logged.output_tokens, 16, "the scripted usage: {logged:?}");
    assert_eq!(delta(&tokens("output")), 16.0);
    assert_eq!(delta(&tokens("input")), logged.input_tokens as f64);
    assert_eq!(delta(&tokens("cache_read")), logged.cache_read_tokens as f64);
    assert_eq!(delta(&tokens("cache_write")), logged.cache_write_tokens as f64);
    assert!(logged.input_tokens >= 2500, "{logged:?}");

    assert_eq!(delta(r#"outboard_turns_total{outcome="end_turn"}"#), 1.0);
    assert_eq!(delta(r#"outboard_steps_total{loop="main"}"#), 2.0);
    assert_eq!(delta(r#"outboard_tool_calls_total{tool="Bash",outcome="ok"}"#), 1.0);
    assert_eq!(delta(r#"outboard_tool_call_duration_seconds_count{tool="Bash"}"#), 1.0);
    assert_eq!(after.get(r#"outboard_sessions{status="running"}"#), 0.0);
    assert_eq!(after.get("outboard_session_actors"), 1.0);

    assert_eq!(delta(r#"outboard_auth_failures_total{reason="unknown_token"}"#), 1.0);
    assert_eq!(delta("outboard_connections_opened_total"), 2.0, "the refused hello and ours");

    assert_eq!(delta(r#"outboard_sandbox_transitions_total{state="provisioning"}"#), 1.0);
    assert_eq!(delta(r#"outboard_sandbox_transitions_total{state="running"}"#), 1.0);
    assert_eq!(after.get(r#"outboard_sandboxes{state="running"}"#), 1.0);
    assert_eq!(delta("outboard_sandbox_cold_start_seconds_count"), 1.0);

    assert_eq!(delta(r#"outboard_egress_connections_total{outcome="allowed"}"#), 1.0);
    assert_eq!(delta(r#"outboard_egress_connections_total{outcome="refused"}"#), 1.0);

    assert!(delta("outboard_store_job_duration_seconds_count") > 0.0);
    assert_eq!(after.get("outboard_store_queue_depth"), 0.0);

    // The exposition is valid and passes promtool's lint.
    let text = scrape_text(&url).await;
    let (ok, report) = promtool(&["check", "metrics"], &text);
    assert!(ok && report.trim().is_empty(), "promtool check metrics:\n{report}\n{text}");
    assert!(!text.contains(&sid), "a session id became a label");
}

#[tokio::test]
async fn a_tool_name_the_model_invents_adds_no_series() {
    let mock = MockLlm::start(vec![
        MockStep::tool_call("Frobnicate_9f3a", json!({})),
        MockStep::tool_call("mcp__nosuch__thing", json!({})),
        MockStep::text("Sorry."),
    ])
    .await
    .unwrap();
    let server = serve(&mock, Api::Anthropic, &["--metrics-listen", "127.0.0.1:0"]);
    let url = server.metrics_url.clone().unwrap();
    let token = server.add_user("alice", "acme").unwrap();
    let before = scrape(&url).await;
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();
    let events = c.turn(&sid, "call something odd").await.unwrap();
    let results: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolResult { name, is_error, .. } => Some((name.clone(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [("Frobnicate_9f3a".to_owned(), true), ("mcp__nosuch__thing".to_owned(), true)]
    );

    let after = scrape(&url).await;
    let text = scrape_text(&url).await;
    assert!(!text.contains("Frobnicate") && !text.contains("nosuch"), "{text}");
    let tool_series = |s: &Samples| {
        s.0.keys()
            .filter(|k| k.starts_with("outboard_tool_calls_total{"))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        tool_series(&after),
        [
            r#"outboard_tool_calls_total{tool="mcp",outcome="error"}"#,
            r#"outboard_tool_calls_total{tool="other",outcome="error"}"#
        ],
        "before: {:?}",
        tool_series(&before)
    );
    assert_eq!(after.get(r#"outboard_tool_calls_total{tool="other",outcome="error"}"#), 1.0);
    assert_eq!(after.get(r#"outboard_tool_calls_total{tool="mcp",outcome="error"}"#), 1.0);
}

/// The metrics listener serves [`METRICS_CONNECTIONS`] connections at once; the next is answered
/// 503 by the edge, and a slot freed is taken again.
#[tokio::test]
async fn the_metrics_listener_refuses_connections_past_its_cap() {
    use outboard_server::gateway::METRICS_CONNECTIONS;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &["--metrics-listen", "127.0.0.1:0"]);
    let url = server.metrics_url.clone().unwrap();
    let addr = url.trim_start_matches("http://").trim_end_matches("/metrics").to_owned();
    let get = "GET /metrics HTTP/1.1\r\nHost: metrics\r\nConnection: close\r\n\r\n";
    // Each holder has sent a request and reads its answer, keeping its connection (and slot).
    let mut holders = Vec::new();
    for _ in 0..METRICS_CONNECTIONS {
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: metrics\r\n\r\n").await.unwrap();
        let mut head = [0u8; 12];
        s.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 200", "a connection within the cap is served");
        holders.push(s);
    }
    let mut over = tokio::net::TcpStream::connect(&addr).await.unwrap();
    over.write_all(get.as_bytes()).await.unwrap();
    let mut answer = String::new();
    over.read_to_string(&mut answer).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 503"), "past the cap: {answer}");
    drop(holders);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !reqwest::get(&url).await.is_ok_and(|r| r.status().is_success()) {
        assert!(Instant::now() < deadline, "a freed slot is served again within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn the_alert_rules_of_the_operations_guide_pass_promtool() {
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/OPERATIONS.md"))
            .unwrap();
    let rules = guide
        .split("```yaml\n")
        .skip(1)
        .filter_map(|block| block.split_once("```").map(|(yaml, _)| yaml))
        .find(|yaml| yaml.starts_with("groups:"))
        .expect("a ```yaml block starting with `groups:` in docs/OPERATIONS.md");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outboard.rules.yml");
    std::fs::write(&path, rules).unwrap();
    let (ok, report) = promtool(&["check", "rules", path.to_str().unwrap()], "");
    assert!(ok, "promtool check rules:\n{report}");
    assert!(report.contains("SUCCESS: 3 rules found"), "{report}");
    // Every metric the rules use is one the server exposes (a family shows once it has a
    // series: one of each kind is made here).
    let metrics = outboard_server::metrics::Metrics::new();
    let mut call = metrics.model_call("anthropic", "claude");
    call.delta(true, false);
    call.finish(Ok(&Usage::default()));
    metrics.store().job_done(Duration::from_micros(80));
    let names = metrics.render(&Default::default());
    for word in rules.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("outboard_") {
            assert!(names.contains(word), "the rules use {word}, which the server does not expose");
        }
    }
}
