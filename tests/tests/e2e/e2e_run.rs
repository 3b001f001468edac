//! The walking skeleton end to end: the real `outboard` binary, a real `outboard-server` process,
//! the mock LLM over real HTTP/SSE, the real bubblewrap sandbox and the real SQLite file.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use outboard_tests::fixture::serve;
use outboard_tests::harness::{
    outboard, outboard_in, wait_until, Api, CliRun, TestServer, TEST_API_KEY,
};
use outboard_tests::mock_llm::{MockLlm, MockStep, MockToolCall, RecordedRequest};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};

async fn start(api: Api, steps: Vec<MockStep>) -> (MockLlm, TestServer, String) {
    let mock = MockLlm::start(steps).await.unwrap();
    let server = serve(&mock, api, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    (mock, server, token)
}

async fn run(server: &TestServer, token: &str, extra: &[&str], prompt: &str) -> CliRun {
    let mut args = vec!["run", "--server", &server.url, "--token", token];
    args.extend_from_slice(extra);
    args.push(prompt);
    let args: Vec<String> = args.into_iter().map(str::to_owned).collect();
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        outboard(&refs, None)
    })
    .await
    .unwrap()
    .unwrap()
}

fn types(lines: &[Value]) -> Vec<String> {
    lines
        .iter()
        .map(|l| l["type"].as_str().unwrap_or("?").to_owned())
        .filter(|t| !matches!(t.as_str(), "assistant_delta" | "tool_output_delta" | "sandbox"))
        .collect()
}

fn session_id(lines: &[Value]) -> String {
    lines[0]["session_id"].as_str().unwrap().to_owned()
}

/// Write a file, Bash to read it back, Edit it, Read it, final answer.
fn scripted_task() -> Vec<MockStep> {
    vec![
        MockStep::tool_call(
            "Write",
            json!({"file_path": "/workspace/notes.txt", "content": "alpha\nbeta\n"}),
        )
        .with_text("I'll create the file."),
        MockStep::tool_call("Bash", json!({"command": "cat notes.txt && echo done-reading"})),
        MockStep::tool_call(
            "Edit",
            json!({"file_path": "notes.txt", "old_string": "beta", "new_string": "gamma"}),
        ),
        MockStep::tool_call("Read", json!({"file_path": "/workspace/notes.txt"})),
        MockStep::text("The file now reads alpha and gamma."),
    ]
}

fn sent_key(r: &RecordedRequest, api: Api) -> bool {
    match api {
        Api::Anthropic => r.x_api_key.as_deref() == Some(TEST_API_KEY),
        Api::OpenAi | Api::Responses => {
            r.authorization.as_deref() == Some(&format!("Bearer {TEST_API_KEY}"))
        }
    }
}

async fn scripted_task_end_to_end(api: Api) {
    let (mock, server, token) = start(api, scripted_task()).await;
    let out =
        run(&server, &token, &["--json"], "Make notes.txt, check it, change beta to gamma").await;
    assert_eq!(out.code, 0, "stderr: {}\nstdout: {}", out.stderr, out.stdout);
    let lines = out.json_lines().unwrap();
    assert_eq!(lines[0]["type"], "run_started");
    assert_eq!(lines[0]["schema_version"], 1);
    assert_eq!(
        types(&lines),
        [
            "run_started",
            "checkpoint",
            "turn_started",
            "user_message",
            "assistant_message",
            "tool_call",
            "tool_result",
            "assistant_message",
            "tool_call",
            "tool_result",
            "assistant_message",
            "tool_call",
            "tool_result",
            "assistant_message",
            "tool_call",
            "tool_result",
            "assistant_message",
            "turn_completed",
            "run_finished"
        ]
    );
    // The sandbox started for the Bash step (and only then), reported with its latency.
    let sandbox: Vec<&Value> = lines.iter().filter(|l| l["type"] == "sandbox").collect();
    assert!(sandbox.iter().any(|l| l["state"] == "running" && l["ms"].is_number()), "{sandbox:?}");
    let first_sandbox = lines.iter().position(|l| l["type"] == "sandbox").unwrap();
    let first_bash =
        lines.iter().position(|l| l["type"] == "tool_call" && l["name"] == "Bash").unwrap();
    assert!(first_sandbox > first_bash, "no sandbox before the first Bash");
    // Streaming happened: the first assistant text arrived as deltas before its message.
    assert!(lines.iter().any(|l| l["type"] == "assistant_delta"));
    let results: Vec<&Value> = lines.iter().filter(|l| l["type"] == "tool_result").collect();
    for r in &results {
        assert_eq!(r["is_error"], false, "{r}");
    }
    let bash = results[1]["output"].as_str().unwrap();
    assert!(bash.contains("alpha\nbeta\n") && bash.contains("done-reading"), "{bash}");
    assert!(lines.iter().any(|l| l["type"] == "tool_output_delta"
        && l["text"].as_str().unwrap_or("").contains("done-reading")));
    let read = results[3]["output"].as_str().unwrap();
    assert!(read.contains("alpha") && read.contains("gamma") && !read.contains("beta"), "{read}");
    let last = lines.iter().rev().find(|l| l["type"] == "assistant_message").unwrap();
    assert_eq!(last["text"], "The file now reads alpha and gamma.");
    let completed = lines.iter().find(|l| l["type"] == "turn_completed").unwrap();
    assert_eq!(completed["stop_reason"], "end_turn");
    assert_eq!(lines.last().unwrap()["exit_code"], 0);

    // Durable seqs are consecutive from 1.
    let seqs: Vec<u64> = lines
        .iter()
        .filter(|l| {
            l.get("seq").is_some()
                && !matches!(l["type"].as_str(), Some("assistant_delta" | "tool_output_delta"))
        })
        .map(|l| l["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, (1..=seqs.len() as u64).collect::<Vec<_>>());

    // The workspace holds what the steps did.
    let sid = session_id(&lines);
    let file = server.workspace(&sid).join("notes.txt");
    assert_eq!(std::fs::read_to_string(file).unwrap(), "alpha\ngamma\n");

    // The model got the tool results back, and the key in the right header.
    let requests = mock.requests();
    assert_eq!(requests.len(), 5);
    let last_body = requests[4].body.to_string();
    assert!(last_body.contains("done-reading"), "tool results reach the model");
    assert!(requests.iter().all(|r| sent_key(r, api)));
    // The key never leaves the server toward the client or the log.
    assert!(!out.stdout.contains(TEST_API_KEY) && !out.stderr.contains(TEST_API_KEY));
    assert!(!server.log().contains(TEST_API_KEY));
}

#[tokio::test]
async fn scripted_task_anthropic() {
    scripted_task_end_to_end(Api::Anthropic).await;
}

#[tokio::test]
async fn scripted_task_openai() {
    scripted_task_end_to_end(Api::OpenAi).await;
}

#[tokio::test]
async fn scripted_task_responses() {
    scripted_task_end_to_end(Api::Responses).await;
}

#[tokio::test]
async fn plain_output_streams_text_and_summarises_tools() {
    let (_mock, server, token) = start(
        Api::Anthropic,
        vec![
            MockStep::tool_call("Bash", json!({"command": "echo hi-from-bash"})),
            MockStep::text("All done."),
        ],
    )
    .await;
    let out = run(&server, &token, &[], "say hi").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert!(out.stdout.contains("All done."), "{}", out.stdout);
    assert!(!out.stdout.contains("hi-from-bash"), "tool output goes to stderr, not stdout");
    assert!(out.stderr.contains("Bash"), "{}", out.stderr);
}

/// Issue 49, item 7: the model's text and a tool's output in plain (not `--json`) output reach
/// the terminal with their control characters escaped: an OSC 52 clipboard write, an OSC 0
/// title, a screen clear, a C1 CSI and a bidi override show as text, and no ESC, BEL, C1 or
/// bidi control is written raw to stdout or stderr.
#[tokio::test]
async fn plain_output_escapes_the_models_and_the_tools_control_characters() {
    let hostile = "osc52:\u{1b}]52;c;aGktdGhlcmU=\u{7} title:\u{1b}]0;pwned-title\u{7} \
                   clear:\u{1b}[2J\u{1b}[H c1:\u{9b}31m bidi:\u{202e}txt.exe\u{2066}";
    // The command itself holds a raw ESC and BEL (the call's summary shows its start), and
    // prints the same sequences, a C1 CSI and a bidi override as its output's first line.
    let command = ": 'cmd:\u{1b}]0;cmd-title\u{7}'; \
                   printf 'tool:\\033]52;c;dG9vbA==\\007\\033]0;tool-title\\007\\033[2J\\302\\233\\342\\200\\256\\n'";
    let (_mock, server, token) = start(
        Api::Anthropic,
        vec![MockStep::tool_call("Bash", json!({ "command": command })), MockStep::text(hostile)],
    )
    .await;
    let out = run(&server, &token, &[], "say it").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    for (stream, text) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        let raw: Vec<char> = text
            .chars()
            .filter(|c| {
                (c.is_control() && !matches!(c, '\n' | '\t'))
                    || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
            })
            .collect();
        assert!(raw.is_empty(), "{stream} holds raw controls {raw:?}: {text:?}");
    }
    for shown in [
        "osc52:\\x1b]52;c;aGktdGhlcmU=\\x07",
        "title:\\x1b]0;pwned-title\\x07",
        "clear:\\x1b[2J\\x1b[H",
        "c1:\\u{9b}31m",
        "bidi:\\u{202e}txt.exe\\u{2066}",
    ] {
        assert!(out.stdout.contains(shown), "{shown} not in {:?}", out.stdout);
    }
    for shown in ["cmd:\\x1b]0;cmd-title\\x07", "tool:\\x1b]52;c;dG9vbA==\\x07\\x1b]0;tool-title"] {
        assert!(out.stderr.contains(shown), "{shown} not in {:?}", out.stderr);
    }
    assert!(out.stderr.contains("\\x1b[2J\\u{9b}\\u{202e}"), "{:?}", out.stderr);
}

#[tokio::test]
async fn a_session_continues_across_runs() {
    let (mock, server, token) =
        start(Api::OpenAi, vec![MockStep::text("First answer."), MockStep::text("Second answer.")])
            .await;
    let first = run(&server, &token, &["--json"], "first").await;
    assert_eq!(first.code, 0, "{}", first.stderr);
    let sid = session_id(&first.json_lines().unwrap());
    let second = run(&server, &token, &["--json", "--session", &sid], "second").await;
    assert_eq!(second.code, 0, "{}", second.stderr);
    let lines = second.json_lines().unwrap();
    assert_eq!(session_id(&lines), sid);
    // Only the new turn's events are printed.
    let users: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "user_message")
        .map(|l| l["text"].as_str().unwrap())
        .collect();
    assert_eq!(users, ["second"]);
    // The model saw the whole conversation.
    let body = mock.requests()[1].body.to_string();
    assert!(body.contains("first") && body.contains("First answer.") && body.contains("second"));

    // `outboard sessions --json` lists it, as an array of objects with their ids; a watcher
    // attached right now shows in `attached`.
    let mut watcher =
        outboard_tests::harness::WsClient::connect(&server.url, &token).await.unwrap();
    watcher
        .request("session/attach", json!({"session_id": sid, "role": "watcher"}))
        .await
        .unwrap()
        .unwrap();
    let (url, tok) = (server.url.clone(), token.clone());
    let listed = tokio::task::spawn_blocking(move || {
        outboard(&["sessions", "--json", "--server", &url, "--token", &tok], None)
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let listed: Value = serde_json::from_str(listed.stdout.trim()).unwrap();
    let entry = &listed.as_array().unwrap()[0];
    assert_eq!(entry["id"], sid.as_str());
    assert_eq!(entry["status"], "idle");
    assert_eq!(entry["attached"][0]["user"], "alice");
    assert_eq!(entry["attached"][0]["role"], "watcher");
}

#[tokio::test]
async fn model_faults_429_retry_and_cut_stream() {
    let (mock, server, token) = start(
        Api::Anthropic,
        vec![
            MockStep::status(429).retry_after(1),
            MockStep::text("partial answer that will be cut off").cut(4),
            MockStep::text("Recovered."),
        ],
    )
    .await;
    let out = run(&server, &token, &["--json"], "hello").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines = out.json_lines().unwrap();
    let retries: Vec<&Value> = lines.iter().filter(|l| l["type"] == "model_retry").collect();
    assert_eq!(retries.len(), 2, "{lines:#?}");
    assert!(retries[0]["reason"].as_str().unwrap().contains("429"));
    assert!(retries[0]["delay_ms"].as_u64().unwrap() >= 1000, "retry-after honoured");
    let messages: Vec<&Value> = lines.iter().filter(|l| l["type"] == "assistant_message").collect();
    assert_eq!(messages.len(), 1, "the log holds one answer");
    assert_eq!(messages[0]["text"], "Recovered.");
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test]
async fn a_model_that_keeps_failing_fails_the_turn_with_exit_1() {
    let (_mock, server, token) = start(
        Api::OpenAi,
        vec![MockStep::status(400).body(r#"{"error":{"message":"bad model name"}}"#)],
    )
    .await;
    let out = run(&server, &token, &["--json"], "hello").await;
    assert_eq!(out.code, 1, "{}", out.stderr);
    let lines = out.json_lines().unwrap();
    let failed = lines.iter().find(|l| l["type"] == "turn_failed").unwrap();
    assert!(failed["error"].as_str().unwrap().contains("bad model name"), "{failed}");
    assert_eq!(lines.last().unwrap()["exit_code"], 1);
    assert!(!out.stderr.contains(TEST_API_KEY));
}

#[tokio::test]
async fn invalid_tool_json_and_escaping_paths_are_error_results() {
    let (_mock, server, token) = start(
        Api::OpenAi,
        vec![
            MockStep::tool_calls(vec![MockToolCall::raw(
                "Write",
                r#"{"file_path": "x.txt", "content": "unterminated"#,
            )]),
            MockStep::tool_call("Read", json!({"file_path": "../../etc/passwd"})),
            MockStep::tool_call("Read", json!({"file_path": "/etc/passwd"})),
            MockStep::tool_call(
                "Write",
                json!({"file_path": "/workspace/../escape.txt", "content": "x"}),
            ),
            MockStep::tool_call("Bash", json!({"command": "ln -s /etc link && echo linked"})),
            MockStep::tool_call("Read", json!({"file_path": "link/passwd"})),
            MockStep::tool_call("Frobnicate", json!({})),
            MockStep::tool_call("Read", json!({"path": "missing file_path"})),
            MockStep::text("Done probing."),
        ],
    )
    .await;
    let out = run(&server, &token, &["--json"], "probe").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines = out.json_lines().unwrap();
    let results: Vec<&Value> = lines.iter().filter(|l| l["type"] == "tool_result").collect();
    assert_eq!(results.len(), 8);
    let errors: Vec<bool> = results.iter().map(|r| r["is_error"].as_bool().unwrap()).collect();
    assert_eq!(errors, [true, true, true, true, false, true, true, true], "{results:#?}");
    for (i, r) in results.iter().enumerate() {
        let output = r["output"].as_str().unwrap();
        assert!(!output.contains("root:x:0:0"), "result {i} leaked /etc/passwd: {output}");
        assert!(
            !output.contains(server.data_dir().to_str().unwrap()),
            "host path leaked: {output}"
        );
    }
    assert!(results[0]["output"].as_str().unwrap().contains("JSON"));
    let sid = session_id(&lines);
    assert!(!server.workspace(&sid).join("x.txt").exists());
    assert!(!server.data_dir().join("workspaces").join("escape.txt").exists());
}

#[tokio::test]
async fn the_sandbox_sees_no_secrets_no_host_files_no_server_ports() {
    let secret_file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret_file.path(), "TOP-SECRET-CONTENT").unwrap();
    let secret_path = secret_file.path().to_str().unwrap().to_owned();
    let port_probe = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = port_probe.local_addr().unwrap().port();

    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    let server_port = server.url.rsplit(':').next().unwrap().to_owned();
    let probes = [
        ("env", "env".to_owned()),
        ("environ", "tr '\\0' '\\n' < /proc/1/environ; echo environ-end".to_owned()),
        ("file", format!("cat {secret_path}")),
        ("data", format!("ls {}", server.data_dir().display())),
        ("port", format!("echo hi > /dev/tcp/127.0.0.1/{port} && echo CONNECTED")),
        ("server", format!("echo hi > /dev/tcp/127.0.0.1/{server_port} && echo CONNECTED")),
    ];
    for (_, command) in &probes {
        mock.push(MockStep::tool_call("Bash", json!({"command": command})));
    }
    mock.push(MockStep::text("Probed."));
    let out = run(&server, &token, &["--json"], "probe the sandbox").await;
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines = out.json_lines().unwrap();
    let results: Vec<String> = lines
        .iter()
        .filter(|l| l["type"] == "tool_result")
        .map(|l| l["output"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(results.len(), probes.len());
    let env = &results[0];
    assert!(!env.contains(TEST_API_KEY) && !env.contains("API_KEY"), "{env}");
    assert!(!env.contains("OUTBOARD"), "{env}");
    let environ = &results[1];
    // The agent (PID 1) is non-dumpable: its /proc entries are closed to commands. (Its
    // environment is empty besides.)
    assert!(
        environ.contains("/proc/1/environ: Permission denied") && environ.contains("environ-end"),
        "/proc/1/environ must not be readable: {environ}"
    );
    assert!(!results[2].contains("TOP-SECRET-CONTENT"), "{}", results[2]);
    assert!(!results[3].contains("outboard.db"), "{}", results[3]);
    assert!(!results[4].contains("CONNECTED"), "{}", results[4]);
    assert!(!results[5].contains("CONNECTED"), "{}", results[5]);
    drop(port_probe);
}

#[tokio::test]
async fn connection_and_usage_errors_have_their_exit_codes() {
    // Nothing listens on port 9: exit 3 with one clear line.
    let out =
        outboard(&["run", "--server", "ws://127.0.0.1:9", "--token", "x", "hi"], None).unwrap();
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(out.stderr.contains("127.0.0.1:9"), "{}", out.stderr);

    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    // A wrong token: exit 3.
    let out =
        outboard(&["run", "--server", &server.url, "--token", "ob_wrong", "hi"], None).unwrap();
    assert_eq!(out.code, 3, "{}", out.stderr);
    assert!(out.stderr.to_lowercase().contains("token"), "{}", out.stderr);
    // A server without a token: exit 2.
    let out = outboard(&["run", "--server", &server.url, "hi"], None).unwrap();
    assert_eq!(out.code, 2, "{}", out.stderr);
    // An unknown session: exit 1 or 2 with the id named.
    let token = server.add_user("alice", "acme").unwrap();
    let out = outboard(
        &["run", "--server", &server.url, "--token", &token, "--session", "s_nope", "hi"],
        None,
    )
    .unwrap();
    assert_ne!(out.code, 0);
    assert!(out.stderr.contains("s_nope"), "{}", out.stderr);
    assert_eq!(mock.requests().len(), 0);
}

#[tokio::test]
async fn embedded_mode_runs_without_a_server() {
    let mock = MockLlm::start(vec![
        MockStep::tool_call("Write", json!({"file_path": "hello.txt", "content": "hi\n"})),
        MockStep::text("Wrote it."),
    ])
    .await
    .unwrap();
    let data = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let base = mock.openai_base_url();
    let data_path = data.path().to_str().unwrap().to_owned();
    let cwd = project.path().to_path_buf();
    let out = tokio::task::spawn_blocking(move || {
        outboard_in(
            Some(&cwd),
            &[],
            &[
                "run",
                "--json",
                "--provider",
                "openai",
                "--base-url",
                &base,
                "--model",
                "m",
                "--data",
                &data_path,
                "-",
            ],
            Some("write hello.txt\n"),
        )
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(out.code, 0, "{}", out.stderr);
    let lines = out.json_lines().unwrap();
    assert_eq!(lines[0]["embedded"], true);
    let user = lines.iter().find(|l| l["type"] == "user_message").unwrap();
    assert_eq!(user["text"].as_str().unwrap().trim(), "write hello.txt");
    // Embedded mode works in the current directory, in place.
    let file = project.path().join("hello.txt");
    wait_until("the embedded server's file", Duration::from_secs(5), || file.exists()).unwrap();
    assert_eq!(std::fs::read_to_string(file).unwrap(), "hi\n");
    assert!(data.path().join("outboard.db").exists());
}
