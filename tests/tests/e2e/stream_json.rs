//! Claude Code's stream-json protocol (issue 53 item 2): the real `outboard` binary against a
//! real `outboard-server` and the mock model over HTTP, driven first with raw JSON lines on its
//! stdin (two turns of one session, the control protocol, `can_use_tool` answered both ways, an
//! interrupt, bad input and an oversized line, refused flags), then by the official Python
//! Claude Agent SDK with `cli_path` pointing at `outboard` (`query()` with a tool call, a
//! two-turn `ClaudeSDKClient`, a `can_use_tool` callback that allows once and denies once).
//! The SDK is installed by scripts/install-test-clients.sh into the target directory.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use outboard_tests::fixture::{bash, serve};
use outboard_tests::harness::{bin, bin_dir, outboard, Api, TestServer};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};

/// Generous: the machine is shared and loaded; every wait is on a condition.
const WAIT: Duration = Duration::from_secs(120);

const FLAGS: &[&str] = &[
    "--output-format",
    "stream-json",
    "--verbose",
    "--system-prompt=",
    "--input-format",
    "stream-json",
];

async fn start(steps: Vec<MockStep>, rules: &[(&str, &str)]) -> (MockLlm, TestServer, String) {
    let mock = MockLlm::start(steps).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    for (pattern, decision) in rules {
        let (code, out, err) =
            server.admin(&["policy", "set", "--org", "acme", pattern, decision], None).unwrap();
        assert_eq!(code, 0, "policy set {pattern} {decision}: {out}{err}");
    }
    (mock, server, token)
}

/// `outboard` speaking stream-json on pipes.
struct Peer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
    seen: Vec<Value>,
}

impl Peer {
    fn spawn(server: &TestServer, token: &str, extra: &[&str]) -> Peer {
        let mut cmd = Command::new(bin("outboard").unwrap());
        cmd.args(FLAGS).args(extra).args(["--server", &server.url]);
        for (k, _) in std::env::vars() {
            if k.starts_with("OUTBOARD_") || k.ends_with("_API_KEY") {
                cmd.env_remove(k);
            }
        }
        cmd.env("OUTBOARD_TOKEN", token)
            .env("XDG_CONFIG_HOME", std::env::temp_dir().join("outboard-tests-no-config"))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap();
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Peer { child, stdin, lines, seen: Vec::new() }
    }

    async fn send_raw(&mut self, bytes: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap();
        stdin.write_all(bytes).await.unwrap();
        stdin.flush().await.unwrap();
    }

    async fn send(&mut self, message: Value) {
        let mut line = serde_json::to_vec(&message).unwrap();
        line.push(b'\n');
        self.send_raw(&line).await;
    }

    async fn prompt(&mut self, text: &str) {
        self.send(json!({"type": "user", "message": {"role": "user", "content": text},
            "parent_tool_use_id": null, "session_id": ""}))
            .await;
    }

    /// The next stdout message.
    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("no output within {WAIT:?}; so far: {:#?}", self.seen))
            .unwrap()
            .unwrap_or_else(|| panic!("stdout ended; so far: {:#?}", self.seen));
        let value: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"));
        self.seen.push(value.clone());
        value
    }

    /// Messages up to and including the first that `until` accepts.
    async fn until(&mut self, until: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut got = Vec::new();
        loop {
            let m = self.next().await;
            let done = until(&m);
            got.push(m);
            if done {
                return got;
            }
        }
    }

    async fn until_result(&mut self) -> Vec<Value> {
        self.until(|m| m["type"] == "result").await
    }

    async fn close(mut self) -> (i32, Vec<Value>) {
        drop(self.stdin.take());
        let mut rest = Vec::new();
        while let Ok(Some(line)) = self.lines.next_line().await {
            rest.push(serde_json::from_str(&line).unwrap());
        }
        let status = tokio::time::timeout(WAIT, self.child.wait()).await.unwrap().unwrap();
        (status.code().unwrap_or(-1), rest)
    }
}

fn of_type<'a>(messages: &'a [Value], kind: &str) -> Vec<&'a Value> {
    messages.iter().filter(|m| m["type"] == kind).collect()
}

/// The content blocks of the messages of `kind`, flattened.
fn blocks(messages: &[Value], kind: &str) -> Vec<Value> {
    of_type(messages, kind)
        .iter()
        .flat_map(|m| m["message"]["content"].as_array().cloned().unwrap_or_default())
        .collect()
}

fn sessions_json(server: &TestServer, token: &str) -> Vec<Value> {
    let out =
        outboard(&["sessions", "--json", "--server", &server.url, "--token", token], None).unwrap();
    assert_eq!(out.code, 0, "{}", out.stderr);
    serde_json::from_str::<Value>(&out.stdout).unwrap().as_array().cloned().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_turns_over_raw_lines_in_one_outboard_session() {
    let (_mock, server, token) = start(
        vec![
            bash("b1", "echo stream-json-said-hi").with_text("Running it."),
            MockStep::text("It printed the greeting."),
            MockStep::text("This is the second answer."),
        ],
        &[],
    )
    .await;
    let mut peer = Peer::spawn(&server, &token, &[]);
    peer.send(json!({"type": "control_request", "request_id": "req_1",
        "request": {"subtype": "initialize", "hooks": null}}))
        .await;
    let init = peer.next().await;
    assert_eq!(init["type"], "control_response");
    assert_eq!(init["response"]["subtype"], "success");
    assert_eq!(init["response"]["request_id"], "req_1");

    peer.prompt("say hi with echo").await;
    let first = peer.until_result().await;
    let system = of_type(&first, "system");
    assert_eq!(system[0]["subtype"], "init");
    let sid = system[0]["session_id"].as_str().unwrap().to_owned();
    assert!(sid.starts_with("s_"), "{sid}");
    assert_eq!(system[0]["permissionMode"], "default");
    assert!(system[0]["tools"].as_array().unwrap().contains(&json!("Bash")));
    let assistant = blocks(&first, "assistant");
    assert_eq!(assistant[0], json!({"type": "text", "text": "Running it."}));
    assert_eq!(assistant[1]["type"], "tool_use");
    assert_eq!((&assistant[1]["id"], &assistant[1]["name"]), (&json!("b1"), &json!("Bash")));
    assert_eq!(assistant[2], json!({"type": "text", "text": "It printed the greeting."}));
    assert!(of_type(&first, "assistant").iter().all(|m| m["message"]["model"].is_string()));
    let results = blocks(&first, "user");
    assert_eq!(
        (&results[0]["type"], &results[0]["tool_use_id"]),
        (&json!("tool_result"), &json!("b1"))
    );
    assert!(results[0]["content"].as_str().unwrap().contains("stream-json-said-hi"), "{results:?}");
    let result = first.last().unwrap();
    assert_eq!(
        (&result["subtype"], &result["is_error"], &result["num_turns"], &result["session_id"]),
        (&json!("success"), &json!(false), &json!(2), &json!(sid))
    );
    assert_eq!(result["result"], "It printed the greeting.");
    for field in ["duration_ms", "duration_api_ms", "total_cost_usd", "usage"] {
        assert!(!result[field].is_null(), "{field} missing: {result}");
    }
    assert!(result["usage"]["output_tokens"].is_u64(), "{result}");

    // The session is an ordinary Outboard session: listed, with the id stream-json gave.
    let listed = sessions_json(&server, &token);
    assert!(listed.iter().any(|s| s["id"] == json!(sid)), "{listed:?}");

    peer.prompt("and now?").await;
    let second = peer.until_result().await;
    assert_eq!(of_type(&second, "system")[0]["session_id"], json!(sid));
    assert_eq!(second.last().unwrap()["result"], "This is the second answer.");
    assert_eq!(second.last().unwrap()["num_turns"], 1);
    let (code, rest) = peer.close().await;
    assert_eq!((code, rest), (0, vec![]));
    assert_eq!(sessions_json(&server, &token).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn can_use_tool_is_asked_for_what_the_policy_asks_and_its_answers_apply() {
    let (mock, server, token) = start(
        vec![
            bash("a1", "echo allowed-ran"),
            bash("a2", "echo denied-ran"),
            MockStep::text("Done."),
        ],
        &[("Bash(echo *)", "ask")],
    )
    .await;
    let mut peer = Peer::spawn(&server, &token, &["--permission-prompt-tool", "stdio"]);
    peer.prompt("two commands").await;
    let asked = peer.until(|m| m["type"] == "control_request").await;
    let request = asked.last().unwrap();
    assert_eq!(request["request"]["subtype"], "can_use_tool");
    assert_eq!(request["request"]["tool_name"], "Bash");
    assert_eq!(request["request"]["tool_use_id"], "a1");
    assert_eq!(request["request"]["input"], json!({"command": "echo allowed-ran"}));
    let id = request["request_id"].clone();
    peer.send(json!({"type": "control_response", "response": {"subtype": "success",
        "request_id": id, "response": {"behavior": "allow", "updatedInput": {"command": "echo allowed-ran"}}}}))
        .await;
    let asked = peer.until(|m| m["type"] == "control_request").await;
    let request = asked.last().unwrap();
    assert_eq!(request["request"]["tool_use_id"], "a2");
    let id = request["request_id"].clone();
    peer.send(json!({"type": "control_response", "response": {"subtype": "success",
        "request_id": id, "response": {"behavior": "deny", "message": "no second echo"}}}))
        .await;
    let rest = peer.until_result().await;
    let results: Vec<Value> = asked.iter().chain(&rest).cloned().collect();
    let tool_results = blocks(&results, "user");
    let a1 = tool_results.iter().find(|b| b["tool_use_id"] == "a1").unwrap();
    assert!(a1["content"].as_str().unwrap().contains("allowed-ran"), "{a1}");
    let a2 = tool_results.iter().find(|b| b["tool_use_id"] == "a2").unwrap();
    assert_eq!(a2["is_error"], true, "{a2}");
    assert!(a2["content"].as_str().unwrap().contains("no second echo"), "{a2}");
    let result = rest.last().unwrap();
    assert_eq!(result["subtype"], "success");
    assert_eq!(result["permission_denials"][0]["tool_use_id"], "a2");
    // The model saw the denial's message.
    let last = mock.requests().last().unwrap().body.to_string();
    assert!(last.contains("no second echo"), "{last}");
    assert_eq!(peer.close().await.0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_ends_the_turn_and_the_next_prompt_is_a_turn_of_its_own() {
    let (mock, server, token) =
        start(vec![bash("s1", "sleep 60; echo never"), MockStep::text("Fresh answer.")], &[]).await;
    let mut peer = Peer::spawn(&server, &token, &[]);
    peer.prompt("take your time").await;
    peer.until(|m| {
        blocks(std::slice::from_ref(m), "assistant").iter().any(|b| b["type"] == "tool_use")
    })
    .await;
    peer.send(json!({"type": "control_request", "request_id": "int_1",
        "request": {"subtype": "interrupt"}}))
        .await;
    let cut = peer.until_result().await;
    let answered = cut.iter().find(|m| m["type"] == "control_response").unwrap();
    assert_eq!(answered["response"]["request_id"], "int_1");
    assert_eq!(answered["response"]["subtype"], "success");
    let user_texts = blocks(&cut, "user");
    assert!(
        user_texts.iter().any(|b| b["text"] == "[Request interrupted by user]"),
        "{user_texts:?}"
    );
    let result = cut.last().unwrap();
    assert_eq!(
        (&result["subtype"], &result["is_error"]),
        (&json!("error_during_execution"), &json!(true))
    );

    peer.prompt("a new question").await;
    let next = peer.until_result().await;
    assert_eq!(next.last().unwrap()["result"], "Fresh answer.");
    assert_eq!(next.last().unwrap()["subtype"], "success");
    // The new prompt went to the model as a message of its own, after the interrupted turn.
    let body = mock.requests().last().unwrap().body.clone();
    let messages = body["messages"].as_array().unwrap();
    let last = messages.last().unwrap().to_string();
    assert!(last.contains("a new question") && !last.contains("take your time"), "{last}");
    assert_eq!(peer.close().await.0, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_lines_get_errors_and_the_session_goes_on() {
    let (_mock, server, token) = start(vec![MockStep::text("Still here.")], &[]).await;
    let mut peer = Peer::spawn(&server, &token, &[]);
    peer.send_raw(b"{not json\n").await;
    let e = peer.next().await;
    assert_eq!(
        (&e["type"], &e["subtype"], &e["line"]),
        (&json!("system"), &json!("input_error"), &json!(1))
    );
    assert!(e["error"].as_str().unwrap().contains("not JSON"), "{e}");
    peer.send(json!({"type": "assistant", "message": {}})).await;
    let e = peer.next().await;
    assert!(e["error"].as_str().unwrap().contains("unknown message type"), "{e}");
    // Over the 10 MiB bound: dropped whole, and the next line is read as usual.
    let mut huge = br#"{"type":"user","message":{"role":"user","content":""#.to_vec();
    huge.resize(huge.len() + 10 * 1024 * 1024 + 16, b'a');
    huge.extend_from_slice(b"\"}}\n");
    peer.send_raw(&huge).await;
    let e = peer.next().await;
    assert_eq!(e["line"], 3);
    assert!(e["error"].as_str().unwrap().contains("over the bound"), "{e}");
    peer.send(json!({"type": "control_request", "request_id": "r9",
        "request": {"subtype": "rewind_files", "user_message_id": "x"}}))
        .await;
    let e = peer.next().await;
    assert_eq!(
        (&e["response"]["subtype"], &e["response"]["request_id"]),
        (&json!("error"), &json!("r9"))
    );
    assert!(e["response"]["error"].as_str().unwrap().contains("rewind_files"), "{e}");
    peer.send(json!({"type": "control_response", "response": {"subtype": "success",
        "request_id": "never-asked", "response": {}}}))
        .await;
    let e = peer.next().await;
    assert!(e["error"].as_str().unwrap().contains("never-asked"), "{e}");
    peer.prompt("are you there?").await;
    let turn = peer.until_result().await;
    assert_eq!(turn.last().unwrap()["result"], "Still here.");
    assert_eq!(peer.close().await.0, 0);
}

#[tokio::test]
async fn flags_that_would_change_behaviour_are_refused_with_one_line() {
    for (flag, says) in [
        ("--append-system-prompt=be brief", "--append-system-prompt is not supported"),
        ("--disallowedTools=Bash", "--disallowedTools is not supported"),
        ("--fallback-model=x", "--fallback-model is not supported"),
        ("--permission-mode=auto", "permission mode `auto`"),
    ] {
        let mut args = FLAGS.to_vec();
        args.extend(["--server", "ws://127.0.0.1:9", "--token", "t", flag]);
        let out =
            tokio::task::spawn_blocking(move || outboard(&args, Some(""))).await.unwrap().unwrap();
        assert_eq!(out.code, 2, "{flag}: {}", out.stderr);
        let lines: Vec<&str> =
            out.stderr.lines().filter(|l| !l.contains("--token on the command line")).collect();
        assert_eq!(lines.len(), 1, "{flag}: {}", out.stderr);
        assert!(lines[0].starts_with("outboard: ") && lines[0].contains(says), "{}", lines[0]);
        assert_eq!(out.stdout, "");
    }
}

/// The Python Claude Agent SDK's interpreter, installed by scripts/install-test-clients.sh.
fn sdk_python() -> PathBuf {
    let target = bin_dir().unwrap().parent().unwrap().to_path_buf();
    let python = target.join("test-clients/claude-agent-sdk/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/install-test-clients.sh (scripts/ci.sh does)",
        python.display()
    );
    python
}

/// Runs one scenario of tests/sdk/claude_sdk_check.py against `server`; its summary.
async fn sdk(server: &TestServer, token: &str, scenario: &str) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("sdk/claude_sdk_check.py");
    let work = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(sdk_python());
    cmd.arg(script)
        .arg(bin("outboard").unwrap())
        .arg(work.path())
        .arg(scenario)
        .env("OUTBOARD_SERVER", &server.url)
        .env("OUTBOARD_TOKEN", token)
        .env("XDG_CONFIG_HOME", std::env::temp_dir().join("outboard-tests-no-config"))
        .env_remove("ANTHROPIC_API_KEY")
        .kill_on_drop(true);
    let out = tokio::time::timeout(WAIT * 2, cmd.output()).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{scenario}: {}\n{stdout}\n{stderr}", out.status);
    serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap_or_else(|e| {
        panic!("{scenario}: {e}\n{stdout}\n{stderr}");
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_query_runs_a_tool_call() {
    let (_mock, server, token) =
        start(vec![bash("q1", "echo from-the-sdk"), MockStep::text("The SDK saw it.")], &[]).await;
    let summary = sdk(&server, &token, "query").await;
    let messages = summary["messages"].as_array().unwrap();
    let types: Vec<&str> = messages.iter().map(|m| m["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["system", "assistant", "user", "assistant", "result"]);
    let sid = messages[0]["session_id"].as_str().unwrap();
    assert_eq!(messages[1]["content"][0]["tool_use"], "Bash");
    assert_eq!(messages[2]["content"][0]["tool_result"], "q1");
    assert!(messages[2]["content"][0]["content"].as_str().unwrap().contains("from-the-sdk"));
    let result = &messages[4];
    assert_eq!(
        (&result["subtype"], &result["is_error"], &result["num_turns"], &result["session_id"]),
        (&json!("success"), &json!(false), &json!(2), &json!(sid))
    );
    assert_eq!(result["result"], "The SDK saw it.");
    assert!(sessions_json(&server, &token).iter().any(|s| s["id"] == json!(sid)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_client_holds_a_two_turn_conversation() {
    let (mock, server, token) =
        start(vec![MockStep::text("First answer."), MockStep::text("Second answer.")], &[]).await;
    let summary = sdk(&server, &token, "client").await;
    let turns = summary["turns"].as_array().unwrap();
    assert_eq!(turns.len(), 2);
    let result = |turn: &Value| turn.as_array().unwrap().last().unwrap().clone();
    assert_eq!(result(&turns[0])["result"], "First answer.");
    assert_eq!(result(&turns[1])["result"], "Second answer.");
    assert_eq!(result(&turns[0])["session_id"], result(&turns[1])["session_id"]);
    // One session, and the second prompt's model call carried the first turn.
    assert_eq!(sessions_json(&server, &token).len(), 1);
    let body = mock.requests().last().unwrap().body.to_string();
    assert!(body.contains("first question") && body.contains("First answer."), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_can_use_tool_allows_once_and_denies_once() {
    let (_mock, server, token) = start(
        vec![
            bash("p1", "echo first-allowed"),
            bash("p2", "echo second-denied"),
            MockStep::text("Ok."),
        ],
        &[("Bash(echo *)", "ask")],
    )
    .await;
    let summary = sdk(&server, &token, "permissions").await;
    let asked = summary["asked"].as_array().unwrap();
    assert_eq!(asked.len(), 2, "{summary}");
    assert_eq!((&asked[0]["tool"], &asked[0]["tool_use_id"]), (&json!("Bash"), &json!("p1")));
    assert_eq!(asked[1]["input"], json!({"command": "echo second-denied"}));
    let messages = summary["messages"].as_array().unwrap();
    let results: Vec<&Value> = messages
        .iter()
        .filter(|m| m["type"] == "user")
        .flat_map(|m| m["content"].as_array().unwrap())
        .collect();
    assert!(results[0]["content"].as_str().unwrap().contains("first-allowed"), "{results:?}");
    assert_eq!(results[1]["is_error"], true);
    assert!(results[1]["content"].as_str().unwrap().contains("not this one, says the callback"));
    assert_eq!(messages.last().unwrap()["subtype"], "success");
}
