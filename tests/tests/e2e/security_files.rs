//! The file tools against a hostile workspace, through a real server, the real bubblewrap
//! sandbox and the mock LLM: the model starts a background loop in the sandbox that keeps
//! exchanging a directory with a symlink to a host directory next to the workspace, then issues
//! many `Write`s (and `Grep`s) through that directory. Nothing outside the workspace may change
//! or be shown, and the server stays responsive. The server needs bubblewrap: without it the
//! server does not start and this test fails (it never skips).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::path::Path;
use std::time::Duration;

use outboard_shared::{EventKind, SessionEvent};
use outboard_tests::fixture::turn_ended;
use outboard_tests::harness::{Api, TestServer, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep, MockToolCall};
use serde_json::json;

/// A deep directory (in the workspace) makes each lookup through it slow, widening the window
/// that a check-then-open-by-path tool leaves to the swapping loop.
const DEPTH: usize = 300;

/// The background loop, run with `python3` from the sandbox's read-only `/usr`: it exchanges
/// `d` and `lnk` atomically (`renameat2(RENAME_EXCHANGE)`) as fast as it can, and records how
/// many swaps it made in `/tmp/swaps` (the sandbox's private `/tmp`).
const SWAPPER: &str = r#"
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD, RENAME_EXCHANGE = -100, 2
n = 0
while True:
    if libc.renameat2(AT_FDCWD, b"d", AT_FDCWD, b"lnk", RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")
    n += 1
    if n % 2000 == 0:
        with open("/tmp/swaps.new", "w") as f:
            f.write(str(n))
        os.replace("/tmp/swaps.new", "/tmp/swaps")
"#;

fn results<'a>(events: &'a [SessionEvent], tool: &'a str) -> impl Iterator<Item = &'a str> {
    events.iter().filter_map(move |e| match &e.kind {
        EventKind::ToolResult { name, output, .. } if name == tool => Some(output.as_str()),
        _ => None,
    })
}

/// What a host directory holds, name by name.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap())
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_swapping_background_loop_cannot_lead_writes_out_of_the_workspace() {
    let data = tempfile::tempdir().unwrap();
    // The host directory the symlink points at: next to the workspaces, in the server's data
    // dir (where another session's or org's files live).
    let outside = data.path().join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("target.txt"), "HOST ORIGINAL\n").unwrap();
    std::fs::write(outside.join("secret.txt"), "HOST-SECRET-7f3a\n").unwrap();
    let before = snapshot(&outside);

    let deep = "a/".repeat(DEPTH);
    let setup = format!(
        "mkdir -p {deep}d && ln -s {outside} {deep}lnk && cd {deep} && \
         {{ python3 -c '{SWAPPER}' > /tmp/swapper.log 2>&1 & echo $! > /tmp/swapper.pid; }} && \
         sleep 0.5 && echo started",
        outside = outside.display(),
    );
    let writes = |round: usize| {
        MockStep::tool_calls(
            (0..40)
                .map(|i| {
                    let n = round * 40 + i;
                    MockToolCall::new(
                        "Write",
                        json!({"file_path": format!("{deep}d/new{n}.txt"), "content": "created\n"}),
                    )
                })
                .chain((0..5).map(|_| {
                    MockToolCall::new(
                        "Grep",
                        json!({"pattern": "HOST", "output_mode": "content", "path": format!("{deep}d")}),
                    )
                }))
                .collect(),
        )
    };
    let mut steps = vec![MockStep::tool_call("Bash", json!({"command": setup}))];
    steps.extend((0..5).map(writes));
    steps.push(MockStep::tool_call(
        "Bash",
        json!({"command": "cat /tmp/swaps; echo; cat /tmp/swapper.log; kill $(cat /tmp/swapper.pid)"}),
    ));
    steps.push(MockStep::text("Done."));
    let mock = MockLlm::start(steps).await.unwrap();

    let server = TestServer::start_in(
        data,
        Api::Anthropic,
        &mock.anthropic_base_url(),
        &["--sandbox-freeze-after", "600"],
    )
    .unwrap();
    let token = server.add_user("mallory", "acme").unwrap();
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();
    c.request("turn/send", json!({"session_id": sid, "text": "go"})).await.unwrap().unwrap();

    // A second client pings while the turn runs: the server answers (its runtime is not held
    // by a tool). The timeout only detects a stalled server.
    let mut watcher = WsClient::connect(&server.url, &token).await.unwrap();
    for _ in 0..5 {
        let pong =
            tokio::time::timeout(Duration::from_secs(30), watcher.request("ping", json!({})))
                .await
                .expect("the server stopped answering")
                .unwrap();
        assert!(pong.is_ok(), "{pong:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let events = tokio::time::timeout(Duration::from_secs(600), c.events_until(turn_ended))
        .await
        .expect("the turn never turn_ended")
        .unwrap();
    assert!(
        matches!(events.last().unwrap().kind, EventKind::TurnCompleted { .. }),
        "{:?}",
        events.last()
    );
    let bash: Vec<&str> = results(&events, "Bash").collect();
    assert!(bash[0].contains("started"), "the swapper did not start: {}", bash[0]);
    let swaps: u64 = bash[1].lines().next().unwrap_or("").trim().parse().unwrap_or(0);
    assert!(swaps > 0, "the swapper never swapped: {}", bash[1]);

    let writes: Vec<&str> = results(&events, "Write").collect();
    assert_eq!(writes.len(), 200);
    let written = writes.iter().filter(|w| w.starts_with("File created successfully")).count();
    assert!(written > 0, "no Write went through: {writes:?}");
    for output in results(&events, "Grep").chain(writes.iter().copied()) {
        assert!(!output.contains("HOST-SECRET") && !output.contains("HOST ORIGINAL"), "{output}");
    }
    assert_eq!(snapshot(&outside), before, "a file outside the workspace was changed");

    // Still serving: a new session answers.
    let ping = watcher.request("ping", json!({})).await.unwrap();
    assert!(ping.is_ok(), "{ping:?}");
}
