//! The real `outboard` TUI binary in tmux: a prompt typed into it streams its answer from the
//! mock model onto the screen, and a second TUI attached as a watcher shows the same transcript;
//! a watcher sees a subagent's steps nested under its `Task`; the driver answers approval
//! requests with the prompt's keys while a watcher only sees them; `/rewind` (Esc Esc) and `/fork`.
//! tmux is required: a missing tmux fails the test (`.ci/run` installs it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::time::Duration;

use outboard_tests::fixture::{bash, driver, serve};
use outboard_tests::harness::{bin, outboard, wait_until, Api, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep, MockToolCall};
use outboard_tests::tmux::Tmux;

// Multi-threaded: the test thread blocks while polling tmux, and the mock model must go on
// serving from another worker meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prompt_streams_its_answer_and_a_watcher_sees_the_same_transcript() {
    // CI installs tmux (.ci/run); a missing tmux is a failure, never a skip.
    let tmux = Tmux::new("stream").expect("tmux is required: apt-get install tmux");
    let answer = "The **answer** is forty-two, streamed slowly.";
    let mock = MockLlm::start(vec![MockStep::text(answer).chunk_delay(30)]).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let alice = server.add_user("alice", "acme").unwrap();
    let bob = server.add_user("bob", "acme").unwrap();
    let exe = bin("outboard").unwrap();
    let exe = exe.to_str().unwrap();

    let env = [("TERM", "xterm-256color"), ("NO_COLOR", "1")];
    tmux.spawn("a", &env, &[exe, "--server", &server.url, "--token", &alice]);
    tmux.wait_for("a", "connected", &server);
    tmux.wait_for("a", "Type a message", &server);
    tmux.keys("a", &["-l", "What is the answer?"]);
    tmux.keys("a", &["Enter"]);
    tmux.wait_for("a", "What is the answer?", &server);
    // Mid-stream the partial answer is already on screen; then the whole of it.
    tmux.wait_for("a", "The answer is", &server);
    tmux.wait_for("a", "forty-two, streamed slowly.", &server);
    // The header took the title the first message gave the session (it said "untitled").
    let screen = tmux.screen("a");
    let header = screen.lines().next().unwrap_or_default();
    assert!(header.contains(" What is the answer? ") && !header.contains("untitled"), "{screen}");

    // A second TUI, attached as a watcher, shows the same transcript.
    let listed =
        outboard(&["sessions", "--json", "--server", &server.url, "--token", &bob], None).unwrap();
    assert_eq!(listed.code, 0, "{}", listed.stderr);
    let sessions: serde_json::Value = serde_json::from_str(&listed.stdout).unwrap();
    // A bare array (the format) or wrapped in {"sessions": …} (today's).
    let list = sessions.get("sessions").unwrap_or(&sessions);
    let sid = list[0]["id"].as_str().unwrap().to_owned();
    tmux.spawn("b", &env, &[exe, "attach", &sid, "--server", &server.url, "--token", &bob]);
    tmux.wait_for("b", "watching (read-only)", &server);
    tmux.wait_for("b", "What is the answer?", &server);
    tmux.wait_for("b", "The answer is forty-two, streamed slowly.", &server);
    // Both see both in the presence bar.
    tmux.wait_for("a", "bob (watching)", &server);
    tmux.wait_for("b", "alice (driving)", &server);

    // Ctrl-C twice quits and gives the terminal back.
    tmux.keys("a", &["C-c"]);
    tmux.wait_for("a", "press Ctrl-C again", &server);
    tmux.keys("a", &["C-c"]);
    let gone = wait_until("the TUI to exit", Duration::from_secs(10), || {
        !tmux.cmd(&["list-sessions"]).contains("a:")
    });
    assert!(gone.is_ok(), "still running:\n{}", tmux.screen("a"));
}

// Multi-threaded for the same reason as above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watcher_sees_a_subagents_steps_nested_under_its_task() {
    let tmux = Tmux::new("nest").expect("tmux is required: apt-get install tmux");
    let scripts = outboard_tests::conversations::Scripts::default();
    scripts.add(
        "delegate the nap",
        vec![MockStep::tool_calls(vec![MockToolCall::new(
            "Task",
            serde_json::json!({"description": "Nap time", "prompt": "child-n: nap",
                               "subagent_type": "general-purpose"}),
        )
        .with_id("task_n")])],
    );
    scripts.add(
        "child-n",
        vec![MockStep::tool_calls(vec![MockToolCall::new(
            "Bash",
            serde_json::json!({"command": "echo napping; sleep 7654321"}),
        )])],
    );
    let mock = scripts.start().await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let (alice, mut driver, sid) = driver(&server).await;
    let exe = bin("outboard").unwrap();
    let exe = exe.to_str().unwrap();
    let env = [("TERM", "xterm-256color"), ("NO_COLOR", "1")];
    tmux.spawn("w", &env, &[exe, "attach", &sid, "--server", &server.url, "--token", &alice]);
    tmux.wait_for("w", "watching (read-only)", &server);

    let params = serde_json::json!({"session_id": sid, "text": "delegate the nap"});
    driver.request("turn/send", params).await.unwrap().unwrap();
    tmux.wait_for("w", "Task(Nap time)", &server);
    tmux.wait_for("w", "sleep 7654321", &server);
    let screen = tmux.screen("w");
    let line = screen.lines().find(|l| l.contains("sleep 7654321")).unwrap();
    assert!(line.trim_start().starts_with('│'), "the child's call is nested: {line:?}\n{screen}");
    let header = screen.lines().find(|l| l.contains("Task(Nap time)")).unwrap();
    assert!(header.contains("running"), "{header:?}\n{screen}");

    driver
        .request("turn/interrupt", serde_json::json!({"session_id": sid}))
        .await
        .unwrap()
        .unwrap();
    tmux.wait_for("w", "interrupted", &server);
}

// Multi-threaded for the same reason as above.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_answers_approvals_in_the_tui_and_a_watcher_only_sees_them() {
    let tmux = Tmux::new("approve").expect("tmux is required: apt-get install tmux");
    let mock = MockLlm::start(vec![
        bash("b_ok", "echo approved > approved.txt"),
        bash("b_no", "echo refused > refused.txt"),
        MockStep::text("Finished what was allowed."),
    ])
    .await
    .unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let alice = server.add_user("alice", "acme").unwrap();
    let bob = server.add_user("bob", "acme").unwrap();
    let (code, out, err) =
        server.admin(&["policy", "set", "--org", "acme", "Bash", "ask"], None).unwrap();
    assert_eq!(code, 0, "{out}{err}");
    let exe = bin("outboard").unwrap();
    let exe = exe.to_str().unwrap();
    let env = [("TERM", "xterm-256color"), ("NO_COLOR", "1")];
    tmux.spawn("a", &env, &[exe, "--server", &server.url, "--token", &alice]);
    tmux.wait_for("a", "Type a message", &server);
    tmux.keys("a", &["-l", "Write both files"]);
    tmux.keys("a", &["Enter"]);
    tmux.wait_for("a", "approval needed", &server);
    tmux.wait_for("a", "[y] allow once", &server);

    let mut c = WsClient::connect(&server.url, &bob).await.unwrap();
    let listed = c.request("session/list", serde_json::json!({})).await.unwrap().unwrap();
    let sid = listed["sessions"][0]["id"].as_str().unwrap().to_owned();
    let workspace = server.workspace(&sid);
    tmux.spawn("b", &env, &[exe, "attach", &sid, "--server", &server.url, "--token", &bob]);
    tmux.wait_for("b", "waiting for the driver", &server);
    // The watcher's keys answer nothing.
    tmux.keys("b", &["y"]);
    assert!(!workspace.join("approved.txt").exists());

    tmux.keys("a", &["y"]);
    tmux.wait_for("a", "allowed by alice", &server);
    let ran = wait_until("the allowed command to run", Duration::from_secs(60), || {
        workspace.join("approved.txt").exists()
    });
    assert!(ran.is_ok(), "{}", tmux.screen("a"));
    // The next call asks again; this one is denied with a reason typed in the composer.
    tmux.wait_for("a", "refused.txt", &server);
    // A new request's keys answer once it has been on screen a moment (issue 51, item 2).
    tmux.wait_for("a", "[y] allow once", &server);
    tmux.keys("a", &["n"]);
    tmux.wait_for("a", "reason for denying", &server);
    tmux.keys("a", &["-l", "not that file"]);
    tmux.keys("a", &["Enter"]);
    tmux.wait_for("a", "denied by alice: not that file", &server);
    tmux.wait_for("a", "Finished what was allowed.", &server);
    tmux.wait_for("b", "denied by alice: not that file", &server);
    assert!(!workspace.join("refused.txt").exists());
    let last = mock.requests().last().unwrap().body.to_string();
    assert!(last.contains("not that file"), "the model read the reason: {last}");
}

/// `/rewind` in the TUI (issue 38, item 2): Esc Esc on an empty composer lists the checkpoints,
/// `/rewind 2` restores the files and puts the prompt back into the composer, a watcher sees
/// the rewind; `/fork 1` attaches to a new session made from checkpoint 1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewind_and_fork_in_the_tui() {
    let tmux = Tmux::new("rewind").expect("tmux is required: apt-get install tmux");
    let mock = MockLlm::start(vec![
        bash("b1", "echo one > notes.txt"),
        MockStep::text("First done."),
        bash("b2", "echo two > notes.txt && echo extra > extra.txt"),
        MockStep::text("Second done."),
    ])
    .await
    .unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let alice = server.add_user("alice", "acme").unwrap();
    let bob = server.add_user("bob", "acme").unwrap();
    let exe = bin("outboard").unwrap();
    let exe = exe.to_str().unwrap();
    let env = [("TERM", "xterm-256color"), ("NO_COLOR", "1")];
    tmux.spawn("a", &env, &[exe, "--server", &server.url, "--token", &alice]);
    tmux.wait_for("a", "Type a message", &server);
    for (prompt, done) in [("write one", "First done."), ("make it two", "Second done.")] {
        tmux.keys("a", &["-l", prompt]);
        tmux.keys("a", &["Enter"]);
        tmux.wait_for("a", done, &server);
    }
    let listed =
        outboard(&["sessions", "--json", "--server", &server.url, "--token", &bob], None).unwrap();
    let sessions: serde_json::Value = serde_json::from_str(&listed.stdout).unwrap();
    let list = sessions.get("sessions").unwrap_or(&sessions);
    let sid = list[0]["id"].as_str().unwrap().to_owned();
    let workspace = server.workspace(&sid);
    assert_eq!(std::fs::read_to_string(workspace.join("notes.txt")).unwrap(), "two\n");
    tmux.spawn("b", &env, &[exe, "attach", &sid, "--server", &server.url, "--token", &bob]);
    tmux.wait_for("b", "Second done.", &server);

    tmux.keys("a", &["Escape"]);
    tmux.wait_for("a", "Esc again", &server);
    tmux.keys("a", &["Escape"]);
    // The picker, the newest checkpoint highlighted: Enter picks it, Enter restores both.
    tmux.wait_for("a", "rewind to the state before which prompt?", &server);
    tmux.wait_for("a", "alice  make it two", &server);
    tmux.keys("a", &["Enter"]);
    tmux.wait_for("a", "checkpoint 2: restore what?", &server);
    tmux.keys("a", &["Enter"]);
    tmux.wait_for("a", "rewound to checkpoint 2", &server);
    tmux.wait_for("b", "rewound to checkpoint 2", &server);
    assert_eq!(std::fs::read_to_string(workspace.join("notes.txt")).unwrap(), "one\n");
    assert!(!workspace.join("extra.txt").exists());
    // The prompt comes back into the composer, at the bottom of the screen.
    let in_composer = || {
        let screen = tmux.screen("a");
        let bottom: Vec<&str> = screen.lines().rev().take(4).collect();
        bottom.iter().any(|l| l.contains("make it two"))
    };
    let back = wait_until("the prompt in the composer", Duration::from_secs(30), in_composer);
    assert!(back.is_ok(), "{}", tmux.screen("a"));

    tmux.keys("a", &["C-u"]);
    tmux.keys("a", &["-l", "/fork 1"]);
    tmux.keys("a", &["Enter"]);
    tmux.wait_for("a", "(fork)", &server);
    let listed =
        outboard(&["sessions", "--json", "--server", &server.url, "--token", &alice], None)
            .unwrap();
    assert!(listed.stdout.contains("(fork)"), "{}", listed.stdout);
}
