//! The org's shared `/memory` and `/skills` through real servers, sessions and sandboxes: two
//! sessions of one org see each other's writes at once, concurrent edits both land, a stale
//! write is refused naming its author, history keeps every version, another org sees nothing,
//! the prompt carries MEMORY.md and the skills index, and Bash sees the files read-only.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use outboard_shared::{EventKind, SessionEvent};
use outboard_tests::fixture::{ok, results, script_turn, send_script, turn_ended, Org};
use outboard_tests::harness::WsClient;
use outboard_tests::scripted::{say, tool};
use serde_json::json;

fn memory_changes(events: &[SessionEvent]) -> Vec<(String, u64, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::MemoryChanged { path, version, author, .. } => {
                Some((path.clone(), *version, author.clone()))
            }
            _ => None,
        })
        .collect()
}

async fn start(args: &[&str]) -> Org {
    Org::start(args).await
}

#[tokio::test]
async fn two_sessions_of_one_org_share_memory_and_another_org_sees_nothing() {
    let org = start(&[]).await;
    let (alice, bob, eve) = (
        org.server.add_user("alice", "acme").unwrap(),
        org.server.add_user("bob", "acme").unwrap(),
        org.server.add_user("eve", "evil").unwrap(),
    );
    let mut a = WsClient::connect(&org.server.url, &alice).await.unwrap();
    let mut b = WsClient::connect(&org.server.url, &bob).await.unwrap();
    let mut e = WsClient::connect(&org.server.url, &eve).await.unwrap();
    let sa = a.new_session().await.unwrap();
    let sb = b.new_session().await.unwrap();
    let se = e.new_session().await.unwrap();

    // A writes; B, attached and idle, is told at once; B's very next step reads it.
    let events = script_turn(
        &mut a,
        &sa,
        &[
            tool(
                "Write",
                json!({"file_path": "/memory/deploys.md", "content": "api v1.2 is live\n"}),
            ),
            say("noted"),
        ],
    )
    .await;
    let r = results(&events);
    assert!(!r[0].1 && r[0].2.contains("/memory/deploys.md (v1, shared with your org)"), "{r:?}");
    let told = b.events_until(|e| matches!(e.kind, EventKind::MemoryChanged { .. })).await.unwrap();
    assert_eq!(memory_changes(&told), [("/memory/deploys.md".into(), 1, "alice".into())]);
    let events = script_turn(
        &mut b,
        &sb,
        &[tool("Read", json!({"file_path": "/memory/deploys.md"})), say("ok")],
    )
    .await;
    let r = results(&events);
    assert_eq!(r[0].2, "     1\tapi v1.2 is live\n");

    // Another org: nothing to read, list, glob or grep, and no notice.
    let events = script_turn(
        &mut e,
        &se,
        &[
            tool("Read", json!({"file_path": "/memory/deploys.md"})),
            tool("Glob", json!({"pattern": "**/*", "path": "/"})),
            tool("Grep", json!({"pattern": "live", "path": "/"})),
            tool("Grep", json!({"pattern": "live", "path": "/memory"})),
            say("nothing"),
        ],
    )
    .await;
    let r = results(&events);
    assert!(r[0].1 && r[0].2.contains("does not exist"), "{r:?}");
    assert_eq!(r[1].2, "No files found");
    assert_eq!(r[2].2, "No files found");
    assert_eq!(r[3].2, "No files found");
    assert!(memory_changes(&events).is_empty());
    assert!(memory_changes(&e.backlog.iter().cloned().collect::<Vec<_>>()).is_empty());
    let listed = ok(&mut e, "files/list", json!({"path": "/", "include_deleted": true})).await;
    assert_eq!(listed["files"], json!([]));
    let refused = e.request("files/read", json!({"path": "/memory/deploys.md"})).await.unwrap();
    assert_eq!(refused.unwrap_err().code, outboard_shared::ErrorCode::NotFound);

    // Both sessions edit different lines of one file at the same time: both changes land.
    ok(
        &mut a,
        "files/write",
        json!({"path": "/memory/shared.md", "content": "alpha\nbeta\ngamma\n"}),
    )
    .await;
    let edit = |old: &str, new: &str| {
        vec![
            tool("Read", json!({"file_path": "/memory/shared.md"})),
            tool(
                "Edit",
                json!({"file_path": "/memory/shared.md", "old_string": old, "new_string": new}),
            ),
            say("edited"),
        ]
    };
    send_script(&mut a, &sa, &edit("alpha", "alpha (alice)")).await;
    send_script(&mut b, &sb, &edit("gamma", "gamma (bob)")).await;
    let (ea, eb) =
        (a.events_until(turn_ended).await.unwrap(), b.events_until(turn_ended).await.unwrap());
    for r in [results(&ea), results(&eb)] {
        assert!(r.iter().all(|(_, err, _)| !err), "{r:?}");
    }
    let read = ok(&mut a, "files/read", json!({"path": "/memory/shared.md"})).await;
    assert_eq!(read["content"], "alpha (alice)\nbeta\ngamma (bob)\n");
    assert_eq!(read["file"]["version"], 3);

    // A read v1 of notes; B changed it; A's overwrite is refused naming bob, and A's next turn
    // is told in its prompt that the file changed.
    ok(&mut b, "files/write", json!({"path": "/memory/notes.md", "content": "one\n"})).await;
    script_turn(
        &mut a,
        &sa,
        &[tool("Read", json!({"file_path": "/memory/notes.md"})), say("read")],
    )
    .await;
    let events = script_turn(
        &mut b,
        &sb,
        &[
            tool("Read", json!({"file_path": "/memory/notes.md"})),
            tool(
                "Edit",
                json!({"file_path": "/memory/notes.md", "old_string": "one", "new_string": "two"}),
            ),
            say("changed"),
        ],
    )
    .await;
    assert!(results(&events).iter().all(|(_, err, _)| !err));
    let events = script_turn(
        &mut a,
        &sa,
        &[
            tool("Write", json!({"file_path": "/memory/notes.md", "content": "mine\n"})),
            say("tried"),
        ],
    )
    .await;
    let r = results(&events);
    assert!(r[0].1, "{r:?}");
    assert!(
        r[0].2.contains("changed since v1 was read") && r[0].2.contains("v2, written by bob"),
        "{}",
        r[0].2
    );
    assert!(r[0].2.contains(&format!("in session {sb}")), "{}", r[0].2);
    let requests = org.mock.requests();
    let told = requests.iter().any(|q| {
        let body = q.body.to_string();
        body.contains("changed by someone else") && body.contains("/memory/notes.md (you read v1")
    });
    assert!(told, "the model was told /memory/notes.md changed");
    let read = ok(&mut a, "files/read", json!({"path": "/memory/notes.md"})).await;
    assert_eq!(read["content"], "two\n");

    // History keeps every version with its author; an old version can be restored.
    let history = ok(&mut a, "files/history", json!({"path": "/memory/shared.md"})).await;
    let versions: Vec<(u64, String, String)> = history["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["version"].as_u64().unwrap(),
                v["op"].as_str().unwrap().into(),
                v["author"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(versions.len(), 3);
    assert_eq!(versions[0], (1, "write".into(), "alice".into()));
    assert!(versions[1..].iter().all(|(_, op, _)| op == "edit"));
    let mut authors: Vec<&str> = versions[1..].iter().map(|(_, _, a)| a.as_str()).collect();
    authors.sort();
    assert_eq!(authors, ["alice", "bob"]);
    let restored =
        ok(&mut b, "files/restore", json!({"path": "/memory/shared.md", "version": 1})).await;
    assert_eq!(
        (restored["file"]["version"].as_u64(), restored["changed"].as_bool()),
        (Some(4), Some(true))
    );
    let read = ok(&mut b, "files/read", json!({"path": "/memory/shared.md"})).await;
    assert_eq!(read["content"], "alpha\nbeta\ngamma\n");
    let bad = b.request("files/read", json!({"path": "/memory/../etc/passwd"})).await.unwrap();
    assert_eq!(bad.unwrap_err().code, outboard_shared::ErrorCode::BadRequest);
}

#[tokio::test]
async fn the_prompt_carries_memory_md_and_the_skills_index() {
    let org = start(&[]).await;
    let token = org.server.add_user("alice", "acme").unwrap();
    let mut c = WsClient::connect(&org.server.url, &token).await.unwrap();
    ok(
        &mut c,
        "files/write",
        json!({"path": "/memory/MEMORY.md", "content": "Deploys happen on Tuesdays.\n"}),
    )
    .await;
    let imported = ok(
        &mut c,
        "skills/import",
        json!({"files": [
            {"path": "deploy/SKILL.md", "content": "---\nname: deploy\ndescription: Ship the API to production\n---\nRun make deploy.\n"},
            {"path": "deploy/checklist.md", "content": "- tests green\n"},
            {"path": "broken/SKILL.md", "content": "no front matter"},
        ]}),
    )
    .await;
    assert_eq!(imported["written"].as_array().unwrap().len(), 3);
    let skills = ok(&mut c, "skills/list", json!({})).await;
    assert_eq!(skills["skills"][1]["name"], "deploy");
    assert_eq!(skills["skills"][1]["files"], 2);
    assert!(skills["skills"][0]["problem"].is_string(), "{skills}");
    let flat =
        c.request("skills/import", json!({"files": [{"path": "x.md", "content": "x"}]})).await;
    assert_eq!(flat.unwrap().unwrap_err().code, outboard_shared::ErrorCode::BadRequest);

    let sid = c.new_session().await.unwrap();
    script_turn(&mut c, &sid, &[say("hello")]).await;
    let body = org.mock.requests().last().unwrap().body.to_string();
    assert!(body.contains("Deploys happen on Tuesdays."), "MEMORY.md in the prompt");
    assert!(
        body.contains("- deploy (/skills/deploy/SKILL.md v1 by alice): Ship the API to production"),
        "skills index in the prompt, the entry attributed: {body}"
    );
    assert!(!body.contains("broken"), "a broken skill is not offered");
    assert!(body.contains("/memory is your org's shared memory"), "the paths are explained");

    // The next turn reads MEMORY.md fresh.
    ok(
        &mut c,
        "files/write",
        json!({"path": "/memory/MEMORY.md", "content": "Deploys moved to Thursdays.\n"}),
    )
    .await;
    script_turn(&mut c, &sid, &[say("hello again")]).await;
    let body = org.mock.requests().last().unwrap().body.to_string();
    assert!(body.contains("Deploys moved to Thursdays.") && !body.contains("Tuesdays"));
}

#[tokio::test]
async fn bash_sees_org_files_read_only_and_writes_are_refused() {
    let org = start(&[]).await;
    let token = org.server.add_user("alice", "acme").unwrap();
    let mut c = WsClient::connect(&org.server.url, &token).await.unwrap();
    ok(&mut c, "files/write", json!({"path": "/memory/MEMORY.md", "content": "a memory\n"})).await;
    let sid = c.new_session().await.unwrap();
    // The first Bash starts the sandbox; the skill is imported after that, a moment before the
    // grep, and must be visible to it.
    script_turn(&mut c, &sid, &[tool("Bash", json!({"command": "ls /memory"})), say("ok")]).await;
    ok(
        &mut c,
        "skills/import",
        json!({"files": [{"path": "grepme/SKILL.md", "content": "---\nname: grepme\ndescription: d\n---\nneedle-term-42\n"}]}),
    )
    .await;
    let writes = [
        "echo x > /memory/a",
        "cd /memory && touch b",
        "cp /etc/hostname /skills/x/",
        "sed -i s/a/b/ /memory/MEMORY.md",
        "echo x > \"/memory/quoted\"",
        "echo x > \\/memory/escaped",
        "d=/mem; echo x > ${d}ory/hidden",
        "mkdir -p /skills/new && echo x > /skills/new/f",
    ];
    let mut steps = vec![tool("Bash", json!({"command": "grep -r needle-term-42 /skills"}))];
    steps.extend(writes.iter().map(|w| tool("Bash", json!({"command": w}))));
    steps.push(tool("Write", json!({"file_path": "/memory/new.md", "content": "fresh\n"})));
    steps.push(tool("Bash", json!({"command": "cat /memory/new.md && ls /memory"})));
    steps.push(tool("Read", json!({"file_path": "/memory/../workspace/x"})));
    steps.push(tool("Read", json!({"file_path": "//memory//MEMORY.md"})));
    steps.push(tool("Read", json!({"file_path": "/skills"})));
    steps.push(tool("Write", json!({"file_path": "/skills/", "content": "x"})));
    steps.push(tool("Read", json!({"file_path": "/memoryx/a"})));
    steps.push(say("done"));
    let events = script_turn(&mut c, &sid, &steps).await;
    let r = results(&events);
    assert!(!r[0].1 && r[0].2.contains("/skills/grepme/SKILL.md:needle-term-42"), "{:?}", r[0]);
    for (i, w) in writes.iter().enumerate() {
        let (_, is_error, output) = &r[1 + i];
        assert!(*is_error, "{w} must fail: {output}");
        assert!(
            output.contains("Refused before running") || output.contains("Read-only file system"),
            "{w}: {output}"
        );
        assert!(
            output.contains("Write") && output.contains("Edit"),
            "{w} is told what to use: {output}"
        );
    }
    let n = writes.len();
    assert_eq!(r[n + 2].2, "fresh\nMEMORY.md\nnew.md\n", "the projection follows a Write at once");
    assert!(r[n + 3].1 && r[n + 3].2.contains("climbs out of /memory"), "{:?}", r[n + 3]);
    assert_eq!(r[n + 4].2, "     1\ta memory\n");
    assert!(r[n + 5].1 && r[n + 5].2.contains("/skills is a directory"), "{:?}", r[n + 5]);
    assert!(r[n + 6].1 && r[n + 6].2.contains("/skills is a directory"), "{:?}", r[n + 6]);
    assert!(r[n + 7].1 && r[n + 7].2.contains("outside the file tools' roots"), "{:?}", r[n + 7]);

    // The store is unchanged by every refused write.
    let listed = ok(&mut c, "files/list", json!({"path": "/", "include_deleted": true})).await;
    let paths: Vec<&str> =
        listed["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["/memory/MEMORY.md", "/memory/new.md", "/skills/grepme/SKILL.md"]);
    let memory = ok(&mut c, "files/read", json!({"path": "/memory/MEMORY.md"})).await;
    assert_eq!(
        (memory["content"].as_str(), memory["file"]["version"].as_u64()),
        (Some("a memory\n"), Some(1))
    );
}

#[tokio::test]
async fn the_bash_guard_follows_the_directory_a_previous_command_left() {
    let org = start(&[]).await;
    let token = org.server.add_user("alice", "acme").unwrap();
    let mut c = WsClient::connect(&org.server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();
    let steps = [
        tool("Bash", json!({"command": "cd /memory"})),
        tool("Bash", json!({"command": "touch x"})),
        tool("Bash", json!({"command": "mkdir -p /workspace/sub && cd /workspace/sub"})),
        tool("Bash", json!({"command": "touch y && pwd"})),
        say("done"),
    ];
    let r = results(&script_turn(&mut c, &sid, &steps).await);
    assert_eq!(r[0], ("Bash".into(), false, "(no output)".into()));
    // Refused by the parse, before it runs, naming the path: not left to the read-only mount.
    let (_, is_error, output) = &r[1];
    assert!(*is_error, "{output}");
    assert!(output.contains("Refused before running") && output.contains("/memory/x"), "{output}");
    // Back in the workspace, a relative write is the workspace's and runs.
    assert_eq!(r[3], ("Bash".into(), false, "/workspace/sub\n".into()));
    assert!(org.server.workspace(&sid).join("sub/y").exists());
}
