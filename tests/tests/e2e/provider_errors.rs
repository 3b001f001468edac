//! A model provider that misbehaves, each way a person meets (issue #56, item 2): the real
//! `outboard` binary runs one turn — embedded, as a new user starts it, and against a running
//! `outboard-server` — whose provider is a loopback server that refuses the connection, speaks
//! plain HTTP to `https://`, rejects the key, does not know the model, rate-limits, fails with
//! 5xx and an HTML page, or cuts its stream midway. Each ends in one line that says what to do,
//! with the exit status of its class (docs/PROTOCOL.md's table), and only what can succeed later
//! is retried.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use outboard_tests::fixture::serve;
use outboard_tests::harness::{outboard, outboard_in, Api, CliRun, TestServer};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use serde_json::Value;

/// A loopback port nothing listens on.
fn dead_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// `outboard run --json PROMPT` against `server`, off the async runtime.
async fn run_on(server: &TestServer, prompt: &str) -> CliRun {
    let token = server.add_user("ada", "acme").unwrap();
    let (url, prompt) = (server.url.clone(), prompt.to_owned());
    tokio::task::spawn_blocking(move || {
        outboard(&["run", "--json", "--server", &url, "--token", &token, &prompt], None).unwrap()
    })
    .await
    .unwrap()
}

/// `outboard run` in embedded mode with the provider at `base_url` (`--json` when `json`).
async fn run_embedded(provider: &str, base_url: &str, json: bool) -> CliRun {
    let (provider, base_url) = (provider.to_owned(), base_url.to_owned());
    tokio::task::spawn_blocking(move || {
        let data = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let data_path = data.path().to_str().unwrap().to_owned();
        let mut args = vec!["run"];
        if json {
            args.push("--json");
        }
        args.extend([
            "--provider",
            &provider,
            "--base-url",
            &base_url,
            "--model",
            "m",
            "--data",
            &data_path,
            "hello",
        ]);
        outboard_in(Some(project.path()), &[("OPENAI_API_KEY", "sk-test")], &args, None).unwrap()
    })
    .await
    .unwrap()
}

/// The `--json` lines of a run whose type is `kind`.
fn of_type(run: &CliRun, kind: &str) -> Vec<Value> {
    run.json_lines().unwrap().into_iter().filter(|l| l["type"] == kind).collect()
}

/// The run's one error line (`error: …` on stderr), checked to be one short line of text.
fn error_line(run: &CliRun) -> String {
    let errors: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "one error line: {}", run.stderr);
    let line = errors[0].to_owned();
    assert!(line.chars().count() < 400, "a line, not a wall: {line}");
    assert!(!line.contains('<'), "no HTML: {line}");
    line
}

/// `run_finished`'s exit status is the process's.
fn finished_with(run: &CliRun, code: i32) {
    assert_eq!(run.code, code, "{}\n{}", run.stdout, run.stderr);
    let finished = of_type(run, "run_finished");
    assert_eq!(finished[0]["exit_code"], code);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_loopback_connection_is_reported_at_once_with_exit_4() {
    // Embedded, as a new user first meets it: nothing listens at the base URL.
    let base = format!("http://127.0.0.1:{}/v1", dead_port());
    let run = run_embedded("openai", &base, true).await;
    finished_with(&run, 4);
    assert_eq!(
        error_line(&run),
        format!("error: nothing listens at {base} — start the model server or fix --base-url")
    );
    assert!(of_type(&run, "model_retry").is_empty(), "not retried: {}", run.stdout);
    assert_eq!(of_type(&run, "turn_failed")[0]["class"], "provider_unreachable");
    assert!(!run.stderr.contains("tcp connect error"), "no error chain: {}", run.stderr);

    // The plain run says the same, once.
    let run = run_embedded("openai", &base, false).await;
    assert_eq!(run.code, 4, "{}", run.stderr);
    assert_eq!(run.stderr.matches("nothing listens at").count(), 1, "{}", run.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_spoken_to_a_plain_http_port_fails_at_once_with_exit_4() {
    let mock = MockLlm::start(vec![MockStep::text("never")]).await.unwrap();
    let base = mock.openai_base_url().replace("http://", "https://");
    let data = tempfile::tempdir().unwrap();
    let server = TestServer::start_in(data, Api::OpenAi, &base, &[]).unwrap();
    let run = run_on(&server, "hello").await;
    finished_with(&run, 4);
    let line = error_line(&run);
    assert!(line.starts_with(&format!("error: TLS with {base} failed")), "{line}");
    assert!(of_type(&run, "model_retry").is_empty(), "not retried: {}", run.stdout);
    assert!(mock.requests().is_empty(), "no request was understood");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_key_exits_5_and_a_missing_model_exits_6() {
    let body = r#"{"error":{"message":"Incorrect API key provided: sk-te**st.","type":"invalid_request_error","code":"invalid_api_key"}}"#;
    let mock = MockLlm::start(vec![MockStep::status(401).body(body)]).await.unwrap();
    let server = serve(&mock, Api::OpenAi, &[]);
    let run = run_on(&server, "hello").await;
    finished_with(&run, 5);
    let line = error_line(&run);
    assert!(line.starts_with("error: OPENAI_API_KEY is rejected by http://127.0.0.1:"), "{line}");
    assert!(line.contains("(401): check the key — Incorrect API key provided"), "{line}");
    assert_eq!(mock.requests().len(), 1, "not retried");

    let body = r#"{"error":{"message":"The model `m` does not exist or you do not have access to it.","type":"invalid_request_error","code":"model_not_found"}}"#;
    let mock = MockLlm::start(vec![MockStep::status(404).body(body)]).await.unwrap();
    let server = serve(&mock, Api::OpenAi, &[]);
    let run = run_on(&server, "hello").await;
    finished_with(&run, 6);
    let line = error_line(&run);
    assert!(line.contains("does not serve model \"mock-model\" (404): fix --model"), "{line}");
    assert_eq!(of_type(&run, "turn_failed")[0]["class"], "model_not_found");
    assert_eq!(mock.requests().len(), 1, "not retried");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_and_server_errors_are_retried_then_exit_7() {
    // 429 with retry-after, five times: the retries wait as asked, then one line.
    let steps = (0..5).map(|_| MockStep::status(429).retry_after_ms(20)).collect();
    let mock = MockLlm::start(steps).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let run = run_on(&server, "hello").await;
    finished_with(&run, 7);
    let line = error_line(&run);
    assert!(line.contains("is rate-limiting this server (429)"), "{line}");
    let retries = of_type(&run, "model_retry");
    assert_eq!(retries.len(), 4, "{}", run.stdout);
    assert_eq!(retries[0]["delay_ms"], 20, "the provider's retry-after");
    let reason = retries[0]["reason"].as_str().unwrap();
    assert!(reason.starts_with("http://127.0.0.1:") && reason.contains("answered 429"), "{reason}");
    assert_eq!(mock.requests().len(), 5);

    // A proxy's HTML 502 page: retried, never printed.
    let html = "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad \
                Gateway</h1></center><hr><center>nginx</center></body></html>";
    let steps = (0..5).map(|_| MockStep::status(502).body(html).retry_after_ms(20)).collect();
    let mock = MockLlm::start(steps).await.unwrap();
    let server = serve(&mock, Api::OpenAi, &[]);
    let run = run_on(&server, "hello").await;
    finished_with(&run, 7);
    let line = error_line(&run);
    assert!(line.contains("is failing (502)") && line.contains("try again later"), "{line}");
    assert!(!run.stdout.contains("<html>"), "no HTML in any event: {}", run.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_midway_is_retried_and_then_exits_7() {
    let steps = (0..5).map(|_| MockStep::text("a long answer cut short").cut(2)).collect();
    let mock = MockLlm::start(steps).await.unwrap();
    let server = serve(&mock, Api::OpenAi, &[]);
    let run = run_on(&server, "hello").await;
    finished_with(&run, 7);
    let line = error_line(&run);
    assert!(line.contains("answer was cut midway"), "{line}");
    assert_eq!(of_type(&run, "model_retry").len(), 4);
    assert_eq!(of_type(&run, "turn_failed")[0]["class"], "provider_unavailable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_exits_1() {
    let mock = MockLlm::start(vec![MockStep::status(400)]).await.unwrap();
    let server = serve(&mock, Api::OpenAi, &[]);
    let run = run_on(&server, "hello").await;
    finished_with(&run, 1);
    let line = error_line(&run);
    assert!(line.starts_with("error: the model provider refused the request (400)"), "{line}");
    assert_eq!(of_type(&run, "turn_failed")[0]["class"], "provider_rejected");
}
