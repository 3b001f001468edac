//! The real `outboard` TUI in tmux (issue 51, items 2 and 3): keys typed as an approval prompt
//! opens go to the message, not to the prompt; Ctrl-C stops a running turn, the model then
//! reads the interruption before the next prompt, and on exit the TUI says how to come back.
//! tmux is required: a missing tmux fails the test (`.ci/run` installs it).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use outboard_tests::fixture::{bash, serve};
use outboard_tests::harness::{bin, Api, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use outboard_tests::tmux::Tmux;

/// The composer's lines (the bottom of the screen).
fn bottom(screen: &str) -> String {
    screen.lines().rev().take(4).collect::<Vec<_>>().join("\n")
}

// Multi-threaded: the test thread blocks while polling tmux, and the mock model must go on
// serving from another worker meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typing_while_an_approval_opens_does_not_answer_it() {
    let tmux = Tmux::new("typed").expect("tmux is required: apt-get install tmux");
    let mock = MockLlm::start(vec![bash("b1", "echo hi > typed.txt"), MockStep::text("Wrote it.")])
        .await
        .unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let alice = server.add_user("alice", "acme").unwrap();
    let (code, out, err) =
        server.admin(&["policy", "set", "--org", "acme", "Bash", "ask"], None).unwrap();
    assert_eq!(code, 0, "{out}{err}");
    let exe = bin("outboard").unwrap();
    let exe = exe.to_str().unwrap();
    let env = [("TERM", "xterm-256color"), ("NO_COLOR", "1")];
    tmux.spawn("a", &env, &[exe, "--server", &server.url, "--token", &alice]);
    tmux.wait_for("a", "Type a message", &server);
    tmux.keys("a", &["-l", "Write the file"]);
    tmux.keys("a", &["Enter"]);
    // The prompt opens while the user types the next message: `y`, `a` and `n` are letters of
    // it. (It starts with a space: however late it lands, a key that is no answer is typing,
    // and the prompt then waits for a pause before its keys answer.)
    tmux.wait_for("a", "approval needed", &server);
    tmux.keys("a", &["-l", " yes and always no"]);
    tmux.wait_for("a", "yes and always no", &server);
    let mut c = WsClient::connect(&server.url, &alice).await.unwrap();
    let listed = c.request("session/list", serde_json::json!({})).await.unwrap().unwrap();
    let sid = listed["sessions"][0]["id"].as_str().unwrap().to_owned();
    let workspace = server.workspace(&sid);
    let screen = tmux.screen("a");
    assert!(bottom(&screen).contains("yes and always no"), "nothing typed is lost:\n{screen}");
    assert!(screen.contains("approval needed"), "still open:\n{screen}");
    assert!(!workspace.join("typed.txt").exists(), "the typing answered the prompt:\n{screen}");
    // Once it has been seen with no typing, `y` answers it, and the message stays.
    tmux.wait_for("a", "[y] allow once", &server);
    tmux.keys("a", &["y"]);
    tmux.wait_for("a", "Wrote it.", &server);
    assert!(workspace.join("typed.txt").exists());
    assert!(bottom(&tmux.screen("a")).contains("yes and always no"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_stops_a_turn_the_model_reads_it_and_the_exit_says_how_to_come_back() {
    let tmux = Tmux::new("ctrlc").expect("tmux is required: apt-get install tmux");
    let mock = MockLlm::start(vec![
        bash("b1", "echo started; sleep 7654321"),
        MockStep::text("Only the tests, then."),
    ])
    .await
    .unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let alice = server.add_user("alice", "acme").unwrap();
    let exe = bin("outboard").unwrap();
    let exe = exe.to_str().unwrap();
    let env = [("TERM", "xterm-256color"), ("NO_COLOR", "1")];
    // In a shell that stays after the TUI exits, to read what it prints then.
    let line = format!("{exe} --server {} --token {alice}; echo EXITED; sleep 600", server.url);
    tmux.spawn("a", &env, &["sh", "-c", &line]);
    tmux.wait_for("a", "Type a message", &server);
    tmux.keys("a", &["-l", "rename every file"]);
    tmux.keys("a", &["Enter"]);
    tmux.wait_for("a", "sleep 7654321", &server);
    tmux.wait_for("a", "Esc stops", &server);
    let mut c = WsClient::connect(&server.url, &alice).await.unwrap();
    let listed = c.request("session/list", serde_json::json!({})).await.unwrap().unwrap();
    let sid = listed["sessions"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(listed["sessions"][0]["status"], "running", "{listed}");

    tmux.keys("a", &["C-c"]);
    tmux.wait_for("a", "[Request interrupted by user]", &server);
    // The turn has ended (the mark is drawn from its `turn_completed`), and the TUI is there.
    let listed = c.request("session/list", serde_json::json!({})).await.unwrap().unwrap();
    assert_ne!(listed["sessions"][0]["status"], "running", "the session left running: {listed}");
    assert!(!tmux.screen("a").contains("EXITED"));
    // The next prompt is a request of its own: the model reads the interruption before it.
    tmux.keys("a", &["-l", "no, only the tests"]);
    tmux.keys("a", &["Enter"]);
    tmux.wait_for("a", "Only the tests, then.", &server);
    let last = mock.requests().last().unwrap().body.to_string();
    let mark = last.find("[Request interrupted by user]").expect("the mark reaches the model");
    assert!(mark < last.find("no, only the tests").unwrap(), "{last}");

    // Idle: Ctrl-C twice quits, and the TUI says how to come back.
    tmux.keys("a", &["C-c"]);
    tmux.wait_for("a", "press Ctrl-C again", &server);
    tmux.keys("a", &["C-c"]);
    tmux.wait_for("a", "EXITED", &server);
    // The line is longer than the window: tmux wraps it.
    let screen = tmux.screen("a").replace('\n', "");
    let hint =
        format!("to come back to this session: outboard --server {} --session {sid}", server.url);
    assert!(screen.contains(&hint), "{screen}");
}

/// `outboard </dev/null`: the TUI says it needs a terminal and points to `outboard run`, instead
/// of `No such device or address (os error 6)` (issue 51, item 6).
#[test]
fn the_tui_without_a_terminal_points_to_outboard_run() {
    let run =
        outboard_tests::harness::outboard(&["--server", "ws://127.0.0.1:9", "--token", "t"], None)
            .unwrap();
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("the TUI needs a terminal"), "{}", run.stderr);
    assert!(run.stderr.contains("outboard run"), "{}", run.stderr);
    assert!(!run.stderr.contains("os error"), "{}", run.stderr);
}
