//! The org's agent types (`/agents/NAME.md`) through a real server, the real `outboard` binary
//! and real sandboxes: a directory of Claude Code agent files is imported (checked whole, a bad
//! file refusing it all), listed with what was left out, shown, re-imported as new versions; a
//! model writes one with its file tools, teammates are told, it is listed at once, and Bash sees
//! `/agents` read-only.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use outboard_shared::{AgentInfo, EventKind, SessionEvent};
use outboard_tests::fixture::{self, cli, cli_ok, serve, turn_ended};
use outboard_tests::harness::{Api, CliRun, TestServer, WsClient};
use outboard_tests::scripted::{say, script, tool};
use serde_json::json;

fn run(server: &TestServer, token: &str, args: &[&str]) -> CliRun {
    cli(server, token, args, None)
}

fn ok(server: &TestServer, token: &str, args: &[&str]) -> CliRun {
    cli_ok(server, token, args, None)
}

fn ls(server: &TestServer, token: &str) -> Vec<AgentInfo> {
    serde_json::from_str(&ok(server, token, &["agents", "ls", "--json"]).stdout).unwrap()
}

const REVIEWER: &str = "---\nname: reviewer\ndescription: Reviews a diff for bugs. Use after \
                        changes.\ntools: Read, Grep, WebSearch\nmodel: haiku\ncolor: red\n---\n\
                        You are a careful reviewer.\n";
const EXPLORER: &str = "---\nname: explorer\ndescription: >\n  Finds where things are\n  in a \
                        codebase\ntools:\n  - Glob\n  - Grep\n  - Read\n---\nExplore, report \
                        paths.\n";

#[tokio::test]
async fn agent_files_are_imported_listed_shown_and_versioned() {
    let mock = outboard_tests::scripted::start().await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let alice = server.add_user("alice", "acme").unwrap();
    let eve = server.add_user("eve", "evil").unwrap();

    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("agents");
    std::fs::create_dir(&agents).unwrap();
    std::fs::write(agents.join("reviewer.md"), REVIEWER).unwrap();
    std::fs::write(agents.join("explorer.md"), EXPLORER).unwrap();
    std::fs::write(agents.join("notes.txt"), "not an agent").unwrap();
    let dir_arg = agents.to_str().unwrap();

    let imported = ok(&server, &alice, &["agents", "import", dir_arg]);
    assert_eq!(imported.stdout, "imported 2 agents: explorer v1, reviewer v1\n");
    assert!(
        imported.stderr.contains("notes.txt"),
        "the skipped file is named: {}",
        imported.stderr
    );
    assert!(
        imported.stderr.contains("agent reviewer: tool \"WebSearch\" is not available"),
        "the dropped tool is a warning: {}",
        imported.stderr
    );

    let listed = ls(&server, &alice);
    assert_eq!(listed.len(), 2, "{listed:?}");
    let (explorer, reviewer) = (&listed[0], &listed[1]);
    assert_eq!(explorer.name, "explorer");
    assert_eq!(explorer.description, "Finds where things are in a codebase");
    assert_eq!(explorer.tools, Some(vec!["Glob".into(), "Grep".into(), "Read".into()]));
    assert_eq!((explorer.model.as_deref(), &explorer.problem), (None, &None));
    assert_eq!(reviewer.tools, Some(vec!["Read".into(), "Grep".into()]));
    assert_eq!(reviewer.model.as_deref(), Some("haiku"));
    assert_eq!((reviewer.version, reviewer.author.as_str()), (1, "alice"));
    assert_eq!(reviewer.path, "/agents/reviewer.md");
    assert_eq!(reviewer.warnings.len(), 1, "{:?}", reviewer.warnings);
    assert!(reviewer.warnings[0].contains("WebSearch"), "{:?}", reviewer.warnings);
    assert_eq!(reviewer.problem, None);
    let text = ok(&server, &alice, &["agents", "ls"]).stdout;
    assert!(text.contains("Read,Grep") && text.contains("haiku") && text.contains("warning: tool"));
    assert!(text.contains("general-purpose is built in"), "{text}");

    assert_eq!(ok(&server, &alice, &["agents", "cat", "reviewer"]).stdout, REVIEWER);
    let missing = run(&server, &alice, &["agents", "cat", "nosuch"]);
    assert_eq!(missing.code, 1, "{}", missing.stderr);
    assert!(missing.stderr.contains("no agent \"nosuch\""), "{}", missing.stderr);
    let other_org = run(&server, &eve, &["agents", "cat", "reviewer"]);
    assert_eq!(other_org.code, 1, "another org's agent is missing: {}", other_org.stderr);
    assert!(ls(&server, &eve).is_empty(), "another org lists nothing");

    // A second import: the changed file gets a new version, the other none.
    std::fs::write(agents.join("reviewer.md"), REVIEWER.replace("careful", "strict")).unwrap();
    let again = ok(&server, &alice, &["agents", "import", dir_arg]);
    assert_eq!(again.stdout, "imported 2 agents: explorer v1 (unchanged), reviewer v2\n");
    let history = ok(&server, &alice, &["memory", "history", "/agents/reviewer.md"]).stdout;
    assert!(history.contains("v1  import") && history.contains("v2  import"), "{history}");

    // One bad file refuses the whole directory, naming it, its line and what is wrong.
    std::fs::write(agents.join("tester.md"), "---\nname: tester\ndescription: Runs tests\n---\nx")
        .unwrap();
    std::fs::write(agents.join("broken.md"), "---\nname: broken\ndescription: x\nnot yaml\n---\n")
        .unwrap();
    let refused = run(&server, &alice, &["agents", "import", dir_arg]);
    assert_eq!(refused.code, 1, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("broken.md: line 4: expected `key: value`")
            && refused.stderr.contains("nothing was imported"),
        "{}",
        refused.stderr
    );
    let names: Vec<String> = ls(&server, &alice).into_iter().map(|a| a.name).collect();
    assert_eq!(names, ["explorer", "reviewer"], "tester.md was not written either");
    std::fs::remove_file(agents.join("broken.md")).unwrap();
    std::fs::write(agents.join("general-purpose.md"), "---\nname: general-purpose\n---\n").unwrap();
    let refused = run(&server, &alice, &["agents", "import", dir_arg]);
    assert_eq!(refused.code, 2, "refused before connecting: {}", refused.stderr);
    assert!(refused.stderr.contains("built in"), "{}", refused.stderr);

    let not_dir = run(&server, &alice, &["agents", "import", &format!("{dir_arg}/reviewer.md")]);
    assert_eq!(not_dir.code, 2, "{}", not_dir.stderr);
    assert!(not_dir.stderr.contains("is not a directory"), "{}", not_dir.stderr);
}

/// The results of the turn's tool calls, in order: (is_error, output).
fn results(events: &[SessionEvent]) -> Vec<(bool, String)> {
    fixture::results(events).into_iter().map(|(_, is_error, output)| (is_error, output)).collect()
}

#[tokio::test]
async fn a_model_writes_an_agent_and_bash_sees_agents_read_only() {
    let mock = outboard_tests::scripted::start().await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let alice = server.add_user("alice", "acme").unwrap();
    let bob = server.add_user("bob", "acme").unwrap();
    let mut a = WsClient::connect(&server.url, &alice).await.unwrap();
    let mut b = WsClient::connect(&server.url, &bob).await.unwrap();
    let sa = a.new_session().await.unwrap();
    let _sb = b.new_session().await.unwrap();

    let agent = "---\nname: x\ndescription: Checks the docs\ntools: Read, NotebookRead\n---\n\
                 You check docs. marker-7781\n";
    let steps = [
        tool("Write", json!({"file_path": "/agents/x.md", "content": agent})),
        tool("Bash", json!({"command": "cat /agents/x.md"})),
        tool("Bash", json!({"command": "echo y > /agents/x.md"})),
        // Hidden from the guard's parse: the read-only mount stops it.
        tool("Bash", json!({"command": "d=/age; echo y > ${d}nts/y.md"})),
        tool("Grep", json!({"pattern": "marker-7781", "path": "/"})),
        tool("Glob", json!({"pattern": "*.md", "path": "/agents"})),
        say("done"),
    ];
    a.request("turn/send", json!({"session_id": sa, "text": script(&steps)}))
        .await
        .unwrap()
        .unwrap();
    let r = results(&a.events_until(turn_ended).await.unwrap());
    assert_eq!(r.len(), 6, "{r:?}");
    assert!(!r[0].0 && r[0].1.contains("/agents/x.md (v1, shared with your org)"), "{:?}", r[0]);
    assert_eq!(r[1], (false, agent.to_owned()), "Bash reads the agent at once");
    assert!(r[2].0 && r[2].1.contains("Refused before running"), "{:?}", r[2]);
    assert!(r[2].1.contains("/agents/x.md"), "{:?}", r[2]);
    assert!(r[3].0 && r[3].1.contains("Read-only file system"), "{:?}", r[3]);
    assert!(!r[4].0 && r[4].1.contains("/agents/x.md"), "Grep of / covers /agents: {:?}", r[4]);
    assert!(!r[5].0 && r[5].1.contains("/agents/x.md"), "{:?}", r[5]);

    // A teammate's session is told; people see the agent at once, its unknown tool a warning.
    let told = b.events_until(|e| matches!(e.kind, EventKind::MemoryChanged { .. })).await.unwrap();
    let changed: Vec<(&str, u64)> = told
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::MemoryChanged { path, version, .. } => Some((path.as_str(), *version)),
            _ => None,
        })
        .collect();
    assert_eq!(changed, [("/agents/x.md", 1)]);
    let listed = ls(&server, &alice);
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!((listed[0].name.as_str(), listed[0].version), ("x", 1));
    assert_eq!(listed[0].tools, Some(vec!["Read".into()]));
    assert!(listed[0].warnings[0].contains("NotebookRead"), "{:?}", listed[0].warnings);
    let content = ok(&server, &alice, &["agents", "cat", "x"]).stdout;
    assert_eq!(content, agent, "the Bash writes changed nothing");
    let files = ok(&server, &alice, &["memory", "ls", "/agents"]).stdout;
    assert!(files.contains("/agents/x.md") && !files.contains("y.md"), "{files}");
}
