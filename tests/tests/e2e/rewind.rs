//! Checkpoints and rewind (issue 38, item 2) through a real server, real bubblewrap sandboxes,
//! the `outboard` binary and the mock model over HTTP: a rewind after a turn that changed
//! files with `Write`, `Edit` and `Bash` restores them exactly (new, changed, deleted, binary,
//! exec bit, symlink); the next model request carries the rewound conversation, also after a
//! crash (the log's replay); a rewind is refused while a turn runs and from a non-driver, and
//! watchers see it; a SIGKILL during a rewind leaves the old files or the new, never a mix.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use outboard_shared::{CheckpointInfo, ErrorCode, EventKind, SessionEvent};
use outboard_tests::fixture::{attach, bash, cli, cli_ok, crash_and_restart, until, World};
use outboard_tests::harness::{Api, TestServer};
use outboard_tests::mock_llm::{MockStep, MockToolCall};
use serde_json::{json, Value};

/// Generous: the machine is shared and loaded; every wait is on a condition.
const WAIT: Duration = Duration::from_secs(90);

/// A file as a rewind must bring it back: its bytes (a symlink's target), whether it is a
/// symlink, and whether its owner may execute it.
type Files = BTreeMap<String, (Vec<u8>, bool, bool)>;

/// Every file and symlink under `root` (directories only as the paths they hold).
fn files(root: &Path) -> Files {
    let mut out = Files::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                out.insert(name, (target.to_string_lossy().as_bytes().to_vec(), true, false));
            } else if meta.is_dir() {
                dirs.push(path);
            } else {
                let exec = meta.permissions().mode() & 0o100 != 0;
                out.insert(name, (std::fs::read(&path).unwrap(), false, exec));
            }
        }
    }
    out
}

fn call(id: &str, name: &str, input: Value) -> MockStep {
    MockStep::tool_calls(vec![MockToolCall::new(name, input).with_id(id)])
}

const SET_UP: &str = "printf 'keep\\n' > keep.txt && printf 'old line\\n' > edit.txt && \
    printf 'gone\\n' > del.txt && printf '\\000\\001\\002\\377bin' > bin.dat && \
    printf '#!/bin/sh\\necho hi\\n' > run.sh && mkdir -p sub && echo deep > sub/deep.txt && \
    ln -s keep.txt link";

const CHANGE: &str = "rm del.txt && printf '\\003\\004' >> bin.dat && chmod +x run.sh && \
    echo bashnew > sub/bash.txt && rm sub/deep.txt && rm link && ln -s edit.txt link && sleep 3";

/// The messages of the first model request whose last message says `marker`, without that
/// last message: the conversation the prompt was sent on.
fn sent_before(requests: &[Value], marker: &str) -> Vec<Value> {
    let body = requests
        .iter()
        .find(|b| b["messages"].as_array().unwrap().last().unwrap().to_string().contains(marker))
        .unwrap_or_else(|| panic!("no request ends with {marker:?}"));
    let messages = body["messages"].as_array().unwrap();
    messages[..messages.len() - 1].to_vec()
}

fn bodies(world_mock: &outboard_tests::mock_llm::MockLlm) -> Vec<Value> {
    world_mock.requests().into_iter().map(|r| r.body).collect()
}

async fn checkpoints(server: &TestServer, token: &str, sid: &str) -> Vec<CheckpointInfo> {
    let listed = tokio::task::block_in_place(|| {
        cli_ok(server, token, &["checkpoints", sid, "--json"], None)
    });
    serde_json::from_str(&listed.stdout).unwrap()
}

fn rewound(e: &SessionEvent) -> bool {
    matches!(e.kind, EventKind::Rewound { .. })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewind_restores_the_files_and_the_conversation_the_next_request_carries() {
    let World { mock, server, mut c, sid, token } = World::anthropic(
        vec![
            bash("b1", SET_UP),
            MockStep::text("set up done"),
            call("w1", "Write", json!({"file_path": "new.txt", "content": "brand new\n"})),
            call("r1", "Read", json!({"file_path": "edit.txt"})),
            call(
                "e1",
                "Edit",
                json!({"file_path": "edit.txt", "old_string": "old line", "new_string": "edited"}),
            ),
            bash("b2", CHANGE),
            MockStep::text("changed everything"),
            MockStep::text("third answered"),
            MockStep::text("fourth answered"),
        ],
        &[],
    )
    .await;
    let workspace = server.workspace(&sid);
    c.completed_turn(&sid, "first prompt: set up", WAIT).await.unwrap();
    let before = files(&workspace);
    assert_eq!(before.len(), 7, "{before:?}");

    c.request("turn/send", json!({"session_id": sid, "text": "second prompt: change it"}))
        .await
        .unwrap()
        .unwrap();
    until(
        &mut c,
        "the slow command's start",
        WAIT,
        |e| matches!(&e.kind, EventKind::ToolCall { call, .. } if call.call_id == "b2"),
    )
    .await;
    let refused = c
        .request(
            "session/rewind",
            json!({"session_id": sid, "checkpoint": 1, "code": true, "conversation": true}),
        )
        .await
        .unwrap()
        .unwrap_err();
    assert_eq!(refused.code, ErrorCode::Conflict, "{refused:?}");
    assert!(refused.message.contains("a turn is running"), "{refused:?}");
    until(&mut c, "the second turn's end", WAIT, outboard_tests::fixture::turn_ended).await;
    let after = files(&workspace);
    assert_ne!(after, before);
    assert_eq!(after["edit.txt"].0, b"edited\n");
    assert!(after["run.sh"].2 && after.contains_key("new.txt") && !after.contains_key("del.txt"));

    // Only the driver rewinds: `c` drives, so a second connection is refused.
    let not_driver =
        tokio::task::block_in_place(|| cli(&server, &token, &["rewind", &sid, "2"], None));
    assert_ne!(not_driver.code, 0);
    assert!(not_driver.stderr.contains("only its driver"), "{}", not_driver.stderr);
    assert_eq!(files(&workspace), after, "a refused rewind changes nothing");

    // Nobody drives now; a watcher follows.
    c.request("session/detach", json!({"session_id": sid})).await.unwrap().unwrap();
    let (mut watcher, _) = attach(&server, &token, &sid, "watcher").await;
    let started = Instant::now();
    let done =
        tokio::task::block_in_place(|| cli_ok(&server, &token, &["rewind", &sid, "2"], None));
    let rewind_ms = started.elapsed().as_millis();
    assert!(done.stdout.contains("second prompt: change it"), "{}", done.stdout);
    let seen = until(&mut watcher, "the rewound event", WAIT, rewound).await;
    match &seen.last().unwrap().kind {
        EventKind::Rewound {
            checkpoint: 2, code: true, conversation: true, from_tree, by, ..
        } => {
            assert!(from_tree.is_some() && by == "alice");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(files(&workspace), before, "the files are exactly as before the second prompt");
    let listed = checkpoints(&server, &token, &sid).await;
    let marks: Vec<(u32, bool, bool)> = listed.iter().map(|c| (c.n, c.code, c.current)).collect();
    assert_eq!(marks, [(1, true, true), (2, true, false)]);

    // The next request is the conversation as it was before the second prompt.
    let (mut c, _) = attach(&server, &token, &sid, "driver").await;
    c.completed_turn(&sid, "third prompt: after the rewind", WAIT).await.unwrap();
    let requests = bodies(&mock);
    let original = sent_before(&requests, "second prompt");
    assert!(original.iter().any(|m| m.to_string().contains("set up done")));
    assert_eq!(sent_before(&requests, "third prompt"), original);

    // Conversation only, then a crash: the replay of the log carries the rewind.
    let answered = c
        .request(
            "session/rewind",
            json!({"session_id": sid, "checkpoint": 3, "code": false, "conversation": true}),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(answered["prompt"], "third prompt: after the rewind");
    let server = crash_and_restart(server, &mock, Api::Anthropic, &[], || {});
    let (mut c, _) = attach(&server, &token, &sid, "driver").await;
    c.completed_turn(&sid, "fourth prompt: after the crash", WAIT).await.unwrap();
    assert_eq!(sent_before(&bodies(&mock), "fourth prompt"), original);
    assert_eq!(files(&workspace), before, "a conversation rewind leaves the files");
    eprintln!("rewind (outboard rewind, 7 files, process start included): {rewind_ms} ms");
}

/// Writes `n` files with `tag` in each, as a command: the workspace a rewind restores.
fn many(n: usize, tag: &str) -> String {
    format!(
        "mkdir -p d && for i in $(seq {n}); do echo {tag}$i > d/f$i; done && echo {tag} > state"
    )
}

/// The state `files` shows: all of one tag, or a panic naming the mix.
fn whole_state(files: &Files) -> String {
    let tags: std::collections::BTreeSet<String> = files
        .iter()
        .filter(|(name, _)| name.starts_with("d/"))
        .map(|(_, (bytes, _, _))| String::from_utf8_lossy(bytes).chars().take(1).collect())
        .collect();
    assert_eq!(tags.len(), 1, "a mix of states: {tags:?}");
    let tag = tags.into_iter().next().unwrap();
    assert_eq!(files["state"].0, format!("{tag}\n").as_bytes());
    tag
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigkill_during_a_rewind_leaves_the_old_files_or_the_new() {
    const FILES: usize = 3000;
    let World { mock, mut server, mut c, sid, token } = World::anthropic(
        vec![
            bash("a", &many(FILES, "a")),
            MockStep::text("a written"),
            bash("b", &format!("rm -r d && {}", many(FILES, "b"))),
            MockStep::text("b written"),
            MockStep::text("nothing to do"),
        ],
        &[],
    )
    .await;
    let workspace = server.workspace(&sid);
    c.completed_turn(&sid, "write a", WAIT).await.unwrap();
    c.completed_turn(&sid, "write b", WAIT).await.unwrap();
    c.completed_turn(&sid, "look", WAIT).await.unwrap();
    // Checkpoint 2 holds the a files, checkpoint 3 the b files.
    assert_eq!(whole_state(&files(&workspace)), "b");
    drop(c);
    let marker = |data: &Path| data.join("git").join(format!("{sid}.rewind"));
    let (mut interrupted, mut seen) = (0, Vec::new());
    for delay_ms in [0u64, 50, 100, 200, 300, 500, 800, 1200, 2000, 3000, 6000] {
        let from = whole_state(&files(&workspace));
        let to = if from == "a" { 3 } else { 2 };
        let (mut c, _) = attach(&server, &token, &sid, "driver").await;
        let params =
            json!({"session_id": sid, "checkpoint": to, "code": true, "conversation": false});
        // The answer never comes for a kill that lands first.
        tokio::spawn(async move { c.request("session/rewind", params).await });
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        let mut cut = false;
        server = crash_and_restart(server, &mock, Api::Anthropic, &[], || {});
        if marker(server.data_dir()).exists() {
            cut = true;
        }
        // The restart finishes it: wait until the marker is gone, then look.
        let deadline = Instant::now() + WAIT;
        while marker(server.data_dir()).exists() {
            if Instant::now() > deadline {
                let log = server.log();
                let lines: Vec<&str> = log.lines().filter(|l| l.contains("rewind")).collect();
                panic!("the interrupted rewind was never finished: {lines:#?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let log = outboard_tests::fixture::attached_log(&server, &token, &sid).await;
        let logged = log
            .iter()
            .rev()
            .take_while(|e| !matches!(e.kind, EventKind::TurnCompleted { .. }))
            .filter(|e| rewound(e))
            .count();
        let now = whole_state(&files(&workspace));
        let expected = if logged > seen.len() {
            if to == 3 {
                "b"
            } else {
                "a"
            }
        } else {
            from.as_str()
        };
        assert_eq!(
            now, expected,
            "after a kill {delay_ms} ms into a rewind to {to}: the log has {logged} rewinds"
        );
        if logged > seen.len() {
            seen.push(delay_ms);
        }
        interrupted += usize::from(cut);
    }
    // And one that nothing interrupts, timed.
    let from = whole_state(&files(&workspace));
    let (to, tag) = if from == "a" { (3, "b") } else { (2, "a") };
    let (mut c, _) = attach(&server, &token, &sid, "driver").await;
    let started = Instant::now();
    let params = json!({"session_id": sid, "checkpoint": to, "code": true, "conversation": false});
    c.request("session/rewind", params).await.unwrap().unwrap();
    let whole_ms = started.elapsed().as_millis();
    assert_eq!(whole_state(&files(&workspace)), tag);
    eprintln!(
        "SIGKILL during a rewind of {FILES} changed files: {interrupted} of 11 kills cut a \
         restore (finished at restart), {} rewinds reached the log (killed at {seen:?} ms); \
         an uninterrupted rewind took {whole_ms} ms",
        seen.len()
    );
    assert!(interrupted > 0, "no kill landed inside a restore: the test proved nothing");
    assert!(!seen.is_empty(), "no rewind reached the log before its kill");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_starts_from_the_checkpoint_and_leaves_the_original_untouched() {
    let World { mock, server, mut c, sid, token } = World::anthropic(
        vec![
            bash("b1", "echo one > a.txt && printf '#!/bin/sh\\n' > run.sh && chmod +x run.sh"),
            MockStep::text("first done"),
            bash("b2", "echo two > a.txt && echo new > b.txt && rm run.sh"),
            MockStep::text("second done"),
            MockStep::text("the fork answers"),
        ],
        &[],
    )
    .await;
    let workspace = server.workspace(&sid);
    c.completed_turn(&sid, "first prompt", WAIT).await.unwrap();
    let at_two = files(&workspace);
    c.completed_turn(&sid, "second prompt", WAIT).await.unwrap();
    let original = files(&workspace);
    let log = outboard_tests::fixture::attached_log(&server, &token, &sid).await;

    let started = Instant::now();
    let forked =
        tokio::task::block_in_place(|| cli_ok(&server, &token, &["fork", &sid, "2"], None));
    let fork_ms = started.elapsed().as_millis();
    let fork = forked.stdout.trim().to_owned();
    assert!(fork.starts_with("s_") && fork != sid, "{fork}");
    assert_eq!(files(&server.workspace(&fork)), at_two, "the fork has checkpoint 2's files");
    assert_eq!(files(&workspace), original, "the original's files are untouched");
    assert_eq!(outboard_tests::fixture::attached_log(&server, &token, &sid).await, log);
    let listed = checkpoints(&server, &token, &fork).await;
    let prompts: Vec<&str> = listed.iter().map(|c| c.prompt.as_str()).collect();
    assert_eq!(prompts, ["first prompt"]);

    // The fork's next request is the conversation up to checkpoint 2.
    let (mut f, _) = attach(&server, &token, &fork, "driver").await;
    f.completed_turn(&fork, "the fork's prompt", WAIT).await.unwrap();
    let requests = bodies(&mock);
    assert_eq!(
        sent_before(&requests, "the fork's prompt"),
        sent_before(&requests, "second prompt")
    );
    assert_eq!(files(&workspace), original, "the fork's turn left the original alone");

    // A fork of now has the files as they are.
    let now = tokio::task::block_in_place(|| cli_ok(&server, &token, &["fork", &sid], None));
    assert_eq!(files(&server.workspace(now.stdout.trim())), original);
    eprintln!("fork (outboard fork, process start included): {fork_ms} ms");
}
