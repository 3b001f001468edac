//! The tools through [`run`], as the agent calls them: a real workspace in a temp dir and the
//! real bubblewrap sandbox.

use std::time::{Duration, SystemTime};

use outboard_shared::OutputStream;
use pretty_assertions::assert_eq;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::*;
use crate::search::MAX_GREP_OUTPUT_BYTES;
use outboard_sandbox::{Sandbox, SandboxConfig};
use outboard_vfs::Workspace;

struct Fixture {
    dir: tempfile::TempDir,
    workspace: Workspace,
    sandbox: Sandbox,
    reads: ReadLedger,
    streamed: Vec<(OutputStream, String)>,
    cancel: CancellationToken,
}

impl Fixture {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let workspace = Workspace::new(dir.path().join("ws")).unwrap();
        let config = SandboxConfig {
            agent_exe: Some(outboard_sandbox::testing::agent_exe_for_tests().unwrap()),
            ..SandboxConfig::Bwrap
        };
        let sandbox = Sandbox::new(config, workspace.root().to_path_buf());
        Fixture {
            dir,
            workspace,
            sandbox,
            reads: ReadLedger::new(),
            streamed: Vec::new(),
            cancel: CancellationToken::new(),
        }
    }

    fn put(&self, rel: &str, content: &str) {
        let path = self.workspace.root().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    fn get(&self, rel: &str) -> String {
        std::fs::read_to_string(self.workspace.root().join(rel)).unwrap()
    }

    async fn call(&mut self, name: &str, input: Value) -> ToolOutcome {
        let mut streamed = std::mem::take(&mut self.streamed);
        let r = self
            .call_with(name, input, &mut |stream, text| streamed.push((stream, text.into())))
            .await;
        self.streamed = streamed;
        r
    }

    /// [`Fixture::call`] with its own output callback.
    async fn call_with(
        &mut self,
        name: &str,
        input: Value,
        on_output: &mut (dyn FnMut(OutputStream, &str) + Send),
    ) -> ToolOutcome {
        let ctx = ToolCtx {
            workspace: &self.workspace,
            sandbox: &self.sandbox,
            on_output,
            cancel: self.cancel.clone(),
            default_timeout: Duration::from_secs(20),
            events: None,
            reads: &mut self.reads,
            org: None,
            remote: None,
            read_only: false,
        };
        run(name, &input, ctx).await
    }
}

fn ok(output: &str) -> ToolOutcome {
    ToolOutcome::ok(output)
}

fn err(output: &str) -> ToolOutcome {
    ToolOutcome::error(output)
}

#[test]
fn specs_cover_every_tool_with_object_schemas() {
    let specs = specs();
    let names: Vec<&str> = specs.iter().map(|s| s.name.as_str()).collect();
    let harness = [crate::plan::EXIT_PLAN_MODE, crate::plan::ASK_USER_QUESTION];
    assert_eq!(names, [TOOL_NAMES, &harness].concat());
    for spec in &specs {
        assert_eq!(spec.input_schema["type"], "object", "{}", spec.name);
        assert!(spec.input_schema["required"].is_array(), "{}", spec.name);
        assert!(!spec.description.is_empty());
    }
}

#[tokio::test]
async fn invalid_input_is_an_error_naming_the_problem() {
    let mut f = Fixture::new();
    let r = f.call("Read", json!({"path": "a.txt"})).await;
    assert!(r.is_error);
    assert!(
        r.output.starts_with("Invalid input for Read: missing field `file_path`"),
        "{}",
        r.output
    );
    assert!(r.output.contains("Expected parameters: {\"file_path\": string (required)"));

    let r = f.call("Edit", json!({"file_path": "a", "old_string": 1, "new_string": "x"})).await;
    assert!(
        r.is_error && r.output.contains("invalid type: integer `1`, expected a string"),
        "{}",
        r.output
    );

    let raw = format!("{{\"command\": \"echo {}", "x".repeat(300));
    let r = f.call("Bash", Value::String(raw.clone())).await;
    assert_eq!(
        r,
        err(&format!(
            "The tool arguments were not valid JSON: {}…; send a JSON object",
            &raw[..200]
        ))
    );
    let r = f.call("Glob", json!([1, 2])).await;
    assert!(
        r.is_error && r.output.contains("expected a JSON object, got an array"),
        "{}",
        r.output
    );

    let r = f.call("Frobnicate", json!({})).await;
    assert_eq!(
        r,
        err("Unknown tool \"Frobnicate\". Available tools: Bash, BashOutput, KillShell, Glob, \
             Grep, Read, Edit, Write, NotebookEdit, TodoWrite, WebFetch")
    );
}

#[tokio::test]
async fn read_formats_like_cat_n_with_offset_and_limit() {
    let mut f = Fixture::new();
    f.put("a.txt", "one\ntwo\r\nthree\nfour\n");
    let r = f.call("Read", json!({"file_path": "/workspace/a.txt"})).await;
    assert_eq!(r, ok("     1\tone\n     2\ttwo\n     3\tthree\n     4\tfour\n"));

    let r = f.call("Read", json!({"file_path": "a.txt", "offset": 2, "limit": 2})).await;
    assert_eq!(
        r,
        ok("     2\ttwo\n     3\tthree\n\n(Showing lines 2-3 of 4. Read with offset 4 to continue.)\n")
    );
    // Lenient numbers: a float and a string.
    let r = f.call("Read", json!({"file_path": "a.txt", "offset": 4.0, "limit": "5"})).await;
    assert_eq!(r, ok("     4\tfour\n"));

    let r = f.call("Read", json!({"file_path": "a.txt", "offset": 9})).await;
    assert_eq!(
        r,
        ok("<system-reminder>Warning: the file exists but is shorter than the provided offset \
            (9). The file has 4 lines.</system-reminder>")
    );
}

#[tokio::test]
async fn read_truncates_long_lines_and_defaults_to_2000_lines() {
    let mut f = Fixture::new();
    let long = "é".repeat(2500);
    let many: String = (1..=2500).map(|i| format!("l{i}\n")).collect();
    f.put("long.txt", &format!("{long}\n"));
    f.put("many.txt", &many);
    let r = f.call("Read", json!({"file_path": "long.txt"})).await;
    assert_eq!(r, ok(&format!("     1\t{}\n", "é".repeat(2000))));
    let r = f.call("Read", json!({"file_path": "many.txt"})).await;
    assert!(r.output.contains("  2000\tl2000\n"));
    assert!(!r.output.contains("l2001"));
    assert!(r
        .output
        .ends_with("(Showing lines 1-2000 of 2500. Read with offset 2001 to continue.)\n"));
}

#[tokio::test]
async fn read_errors_empty_dir_binary_missing() {
    let mut f = Fixture::new();
    f.put("empty.txt", "");
    f.put("dir/x", "x");
    std::fs::write(f.workspace.root().join("bin"), b"ab\0cd").unwrap();
    let r = f.call("Read", json!({"file_path": "empty.txt"})).await;
    assert_eq!(
        r,
        ok("<system-reminder>Warning: the file exists but the contents are empty.</system-reminder>")
    );
    let r = f.call("Read", json!({"file_path": "dir"})).await;
    assert_eq!(
        r,
        err("/workspace/dir is a directory, not a file. To list it, use Glob (e.g. pattern \"*\" \
             with path \"/workspace/dir\") or `ls /workspace/dir` via Bash.")
    );
    let r = f.call("Read", json!({"file_path": "bin"})).await;
    assert!(r.is_error && r.output.contains("binary file"), "{}", r.output);
    let r = f.call("Read", json!({"file_path": "nope.txt"})).await;
    assert_eq!(
        r,
        err("File does not exist: /workspace/nope.txt. Use Glob to find files, or Write to create it.")
    );
    let r = f.call("Read", json!({"file_path": "/etc/passwd"})).await;
    assert_eq!(
        r,
        err("/etc/passwd is outside the file tools' roots: file tools work on /workspace/... \
             (this session's files; relative paths too), /memory/... (your org's shared memory), \
             /skills/... (your org's shared skills), /agents/... (your org's agent types) and \
             /plans/... (your org's plans). Use Bash for other files")
    );
}

#[tokio::test]
async fn file_tools_refuse_symlinks_out_and_never_show_host_paths() {
    let mut f = Fixture::new();
    let outside = confinement::lay_out(f.workspace.root(), f.dir.path());
    let host = f.dir.path().to_string_lossy().into_owned();
    for (tool, input, expect) in confinement::cases(&outside) {
        let r = f.call(tool, input.clone()).await;
        confinement::check(tool, &input, &expect, &r, &host);
    }
    confinement::check_untouched(&outside);
}

#[tokio::test]
async fn write_creates_and_requires_a_fresh_read_to_overwrite() {
    let mut f = Fixture::new();
    let r =
        f.call("Write", json!({"file_path": "/workspace/new/deep/a.txt", "content": "v1\n"})).await;
    assert_eq!(r, ok("File created successfully at: /workspace/new/deep/a.txt"));
    assert_eq!(f.get("new/deep/a.txt"), "v1\n");
    // Written by this session: it may write again.
    let r = f.call("Write", json!({"file_path": "new/deep/a.txt", "content": "v2\n"})).await;
    assert_eq!(r, ok("The file /workspace/new/deep/a.txt has been updated."));

    f.put("existing.txt", "old\n");
    let r = f.call("Write", json!({"file_path": "existing.txt", "content": "x"})).await;
    assert_eq!(
        r,
        err("File has not been read yet. Read it first before writing to it. (/workspace/existing.txt)")
    );
    assert_eq!(f.get("existing.txt"), "old\n");
    f.call("Read", json!({"file_path": "existing.txt", "limit": 1})).await;
    f.put("existing.txt", "changed by a command\n");
    let r = f.call("Write", json!({"file_path": "existing.txt", "content": "x"})).await;
    assert!(
        r.is_error && r.output.starts_with("File has been modified since read"),
        "{}",
        r.output
    );
    f.call("Read", json!({"file_path": "existing.txt"})).await;
    let r = f.call("Write", json!({"file_path": "existing.txt", "content": "x"})).await;
    assert_eq!(r, ok("The file /workspace/existing.txt has been updated."));
    assert_eq!(f.get("existing.txt"), "x");
    // No temp files are left behind.
    let names: Vec<String> = std::fs::read_dir(f.workspace.root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.ends_with(".tmp")), "{names:?}");
}

#[tokio::test]
async fn write_keeps_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let mut f = Fixture::new();
    f.put("run.sh", "echo 1\n");
    let path = f.workspace.root().join("run.sh");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    f.call("Read", json!({"file_path": "run.sh"})).await;
    let r = f.call("Write", json!({"file_path": "run.sh", "content": "echo 2\n"})).await;
    assert!(!r.is_error, "{}", r.output);
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o755);
}

#[tokio::test]
async fn edit_replaces_unique_strings_and_answers_with_a_snippet() {
    let mut f = Fixture::new();
    let content: String = (1..=12).map(|i| format!("line {i}\n")).collect();
    f.put("a.txt", &content);
    let r = f
        .call(
            "Edit",
            json!({"file_path": "a.txt", "old_string": "line 6\n", "new_string": "six\n"}),
        )
        .await;
    assert_eq!(
        r,
        err("File has not been read yet. Read it first before writing to it. (/workspace/a.txt)")
    );
    f.call("Read", json!({"file_path": "a.txt"})).await;
    let r = f
        .call(
            "Edit",
            json!({"file_path": "a.txt", "old_string": "line 6\n", "new_string": "six\n"}),
        )
        .await;
    assert_eq!(
        r,
        ok("The file /workspace/a.txt has been updated at line 6. Here's the result of running \
            `cat -n` on a snippet of the edited file:\n     2\tline 2\n     3\tline 3\n     4\tline 4\n     5\t\
            line 5\n     6\tsix\n     7\tline 7\n     8\tline 8\n     9\tline 9\n    10\tline 10\n")
    );
    assert!(f.get("a.txt").contains("line 5\nsix\nline 7\n"));

    // Our own edit keeps the ledger fresh: a second edit needs no new Read.
    let r = f
        .call("Edit", json!({"file_path": "a.txt", "old_string": "line 1", "new_string": "L1"}))
        .await;
    assert_eq!(
        r,
        err("Found 4 matches of the string to replace, but replace_all is false. To replace all \
             occurrences, set replace_all to true. To replace only one occurrence, please provide \
             more context to uniquely identify the instance.\nString: line 1")
    );
    let r = f
        .call("Edit", json!({"file_path": "a.txt", "old_string": "line 1", "new_string": "L1", "replace_all": true}))
        .await;
    assert!(!r.is_error && r.output.contains("All 4 occurrences"), "{}", r.output);
    assert!(!r.output.contains(" at line "), "several replacements have no one line: {}", r.output);
    assert!(f.get("a.txt").starts_with("L1\nline 2\n"));
    assert!(f.get("a.txt").contains("L10\nL11\nL12\n"));

    let r = f
        .call("Edit", json!({"file_path": "a.txt", "old_string": "nope", "new_string": "x"}))
        .await;
    assert!(
        r.is_error && r.output.starts_with("String to replace not found in file /workspace/a.txt")
    );
    let r = f
        .call("Edit", json!({"file_path": "a.txt", "old_string": "six", "new_string": "six"}))
        .await;
    assert_eq!(r, err("No changes to make: old_string and new_string are exactly the same."));
}

#[tokio::test]
async fn edit_refuses_a_stale_read_and_creates_with_empty_old_string() {
    let mut f = Fixture::new();
    f.put("a.txt", "alpha\n");
    f.call("Read", json!({"file_path": "a.txt"})).await;
    let r = f.call("Bash", json!({"command": "echo beta >> a.txt"})).await;
    assert_eq!(r, ok("(no output)"));
    let r = f
        .call("Edit", json!({"file_path": "a.txt", "old_string": "alpha", "new_string": "x"}))
        .await;
    assert!(
        r.is_error && r.output.starts_with("File has been modified since read"),
        "{}",
        r.output
    );
    assert_eq!(f.get("a.txt"), "alpha\nbeta\n");

    let r = f
        .call("Edit", json!({"file_path": "b.txt", "old_string": "", "new_string": "new\n"}))
        .await;
    assert_eq!(r, ok("File created successfully at: /workspace/b.txt"));
    let r =
        f.call("Edit", json!({"file_path": "c.txt", "old_string": "x", "new_string": "y"})).await;
    assert!(r.is_error && r.output.starts_with("File does not exist: /workspace/c.txt"));
}

fn set_mtime(f: &Fixture, rel: &str, secs_ago: u64) {
    let file = std::fs::File::options().write(true).open(f.workspace.root().join(rel)).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(secs_ago)).unwrap();
}

#[tokio::test]
async fn glob_sorts_newest_first_and_respects_gitignore() {
    let mut f = Fixture::new();
    for (rel, age) in
        [("src/old.rs", 300), ("src/mid.rs", 200), ("src/deep/new.rs", 100), ("top.rs", 50)]
    {
        f.put(rel, "fn x() {}\n");
        set_mtime(&f, rel, age);
    }
    f.put(".gitignore", "target/\n");
    f.put("target/debug/gen.rs", "x");
    f.put(".git/config.rs", "x");
    let r = f.call("Glob", json!({"pattern": "**/*.rs"})).await;
    assert_eq!(
        r,
        ok("/workspace/top.rs\n/workspace/src/deep/new.rs\n/workspace/src/mid.rs\n/workspace/src/old.rs")
    );
    let r = f.call("Glob", json!({"pattern": "*.rs", "path": "/workspace/src"})).await;
    assert_eq!(r, ok("/workspace/src/mid.rs\n/workspace/src/old.rs"));
    let r = f.call("Glob", json!({"pattern": "/workspace/src/**/new.rs"})).await;
    assert_eq!(r, ok("/workspace/src/deep/new.rs"));
    let r = f.call("Glob", json!({"pattern": "**/*.py"})).await;
    assert_eq!(r, ok("No files found"));
    let r = f.call("Glob", json!({"pattern": "/etc/*"})).await;
    assert!(r.is_error, "{}", r.output);
}

#[tokio::test]
async fn glob_truncates_at_100() {
    let mut f = Fixture::new();
    for i in 0..130 {
        f.put(&format!("f{i:03}.txt"), "");
    }
    let r = f.call("Glob", json!({"pattern": "*.txt"})).await;
    let lines: Vec<&str> = r.output.lines().collect();
    assert_eq!(lines.len(), 101);
    assert_eq!(
        lines[100],
        "(Results are truncated: showing 100 of 130. Consider using a more specific path or pattern.)"
    );
}

#[tokio::test]
async fn grep_modes_filters_and_context() {
    let mut f = Fixture::new();
    f.put("src/a.rs", "fn main() {\n    let x = 1;\n    println!(\"Hello\");\n}\n");
    f.put("src/b.rs", "// hello there\nfn b() {}\n");
    f.put("notes.md", "Hello from markdown\n");
    set_mtime(&f, "src/a.rs", 100);
    set_mtime(&f, "src/b.rs", 50);
    set_mtime(&f, "notes.md", 200);

    let r = f.call("Grep", json!({"pattern": "hello", "-i": true})).await;
    assert_eq!(
        r,
        ok("Found 3 files\n/workspace/src/b.rs\n/workspace/src/a.rs\n/workspace/notes.md")
    );
    let r = f.call("Grep", json!({"pattern": "Hello", "output_mode": "count"})).await;
    assert_eq!(r, ok("/workspace/notes.md:1\n/workspace/src/a.rs:1"));
    let r =
        f.call("Grep", json!({"pattern": "Hello", "output_mode": "content", "type": "rust"})).await;
    assert_eq!(r, ok("/workspace/src/a.rs:3:    println!(\"Hello\");"));
    let r = f
        .call(
            "Grep",
            json!({"pattern": "x = 1", "output_mode": "content", "-C": 1, "glob": "*.rs"}),
        )
        .await;
    assert_eq!(
        r,
        ok("/workspace/src/a.rs-1-fn main() {\n/workspace/src/a.rs:2:    let x = 1;\n\
            /workspace/src/a.rs-3-    println!(\"Hello\");")
    );
    let r = f
        .call(
            "Grep",
            json!({"pattern": "fn", "output_mode": "content", "-n": false, "path": "src/b.rs"}),
        )
        .await;
    assert_eq!(r, ok("/workspace/src/b.rs:fn b() {}"));
    let r = f
        .call(
            "Grep",
            json!({"pattern": "main.*\\n.*let", "output_mode": "content", "multiline": true}),
        )
        .await;
    assert_eq!(r, ok("/workspace/src/a.rs:1:fn main() {\n/workspace/src/a.rs:2:    let x = 1;"));
    let r = f.call("Grep", json!({"pattern": "main.*let"})).await;
    assert_eq!(r, ok("No files found"));
    let r =
        f.call("Grep", json!({"pattern": ".", "output_mode": "content", "head_limit": 2})).await;
    assert_eq!(r.output.lines().count(), 3, "{}", r.output);
    assert!(r.output.ends_with("(Showing the first 2 of 7 entries: head_limit.)"), "{}", r.output);

    let r = f.call("Grep", json!({"pattern": "fn(", "output_mode": "content"})).await;
    assert!(r.is_error && r.output.starts_with("Invalid regex \"fn(\""), "{}", r.output);
    let r = f.call("Grep", json!({"pattern": "x", "type": "klingon"})).await;
    assert!(r.is_error && r.output.starts_with("Unknown file type \"klingon\""), "{}", r.output);
    let r = f.call("Grep", json!({"pattern": "x", "path": "missing"})).await;
    assert!(
        r.is_error && r.output.starts_with("Path does not exist: /workspace/missing"),
        "{}",
        r.output
    );
}

#[tokio::test]
async fn bash_runs_in_workspace_and_reports_failures() {
    let mut f = Fixture::new();
    f.put("seen.txt", "visible\n");
    let r = f
        .call(
            "Bash",
            json!({"command": "pwd; cat seen.txt; echo made > out.txt", "description": "test"}),
        )
        .await;
    assert_eq!(r, ok("/workspace\nvisible\n"));
    assert_eq!(f.get("out.txt"), "made\n");
    // Streamed to on_output as it came (chunking is up to the pipes), and all of it.
    let all: String = f.streamed.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(all, "/workspace\nvisible\n");

    let r = f.call("Bash", json!({"command": "echo oops >&2; exit 3"})).await;
    assert_eq!(r, err("oops\nExit code 3"));
    let r = f.call("Bash", json!({"command": "echo start; sleep 30", "timeout": 300})).await;
    assert_eq!(
        r,
        err("start\nCommand timed out after 300 ms and was killed. Give a longer timeout (at \
             most 600000 ms), or run it with run_in_background and read its output with \
             BashOutput.")
    );
    let r = f.call("Bash", json!({"command": "  "})).await;
    assert!(r.is_error);
}

#[tokio::test]
async fn bash_cancel_is_interrupted_by_the_user() {
    let mut f = Fixture::new();
    let trigger = f.cancel.clone();
    // Cancelled once the command has demonstrably started (its first line is out), not after a
    // guessed delay; the outcome, not the time taken, is what is checked.
    let mut on_output = |_: OutputStream, text: &str| {
        if text.contains("started") {
            trigger.cancel();
        }
    };
    let input = json!({"command": "echo started; sleep 61.4142; echo finished"});
    let r = f.call_with("Bash", input, &mut on_output).await;
    assert_eq!(r, err("started\nInterrupted by the user"));
    // The command is gone (killed, not left behind), and the sandbox takes the next one.
    outboard_sandbox::testing::wait_until_gone("61.4142").await;
    f.cancel = CancellationToken::new();
    assert_eq!(f.call("Bash", json!({"command": "echo next"})).await, ok("next\n"));
}

#[tokio::test]
async fn grep_caps_its_answer() {
    let mut f = Fixture::new();
    let body: String =
        (0..3000).map(|i| format!("match line number {i:05} with some padding\n")).collect();
    f.put("big.txt", &body);
    let r = f.call("Grep", json!({"pattern": "match", "output_mode": "content"})).await;
    assert!(!r.is_error);
    assert!(r.output.len() <= MAX_GREP_OUTPUT_BYTES + 200, "{}", r.output.len());
    assert!(r.output.starts_with("/workspace/big.txt:1:match line number 00000"));
    assert!(r.output.ends_with("entries: narrow the search with path, glob, type or head_limit.)"));
}

#[tokio::test]
async fn bash_output_returns_at_most_a_results_worth_and_checks_its_filter() {
    let mut f = Fixture::new();
    let r = f
        .call(
            "Bash",
            json!({"command": "head -c 50000 /dev/zero | tr '\\0' y", "run_in_background": true}),
        )
        .await;
    assert!(!r.is_error, "{}", r.output);
    let id: String = r.output["Command running in background with ID: ".len()..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !f.sandbox.untold_jobs().await.iter().any(|j| j.shell_id == id) {
        assert!(std::time::Instant::now() < deadline, "the job did not end");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let r = f.call("BashOutput", json!({"bash_id": id, "filter": "(unclosed"})).await;
    assert!(r.is_error && r.output.contains("not a valid regular expression"), "{}", r.output);
    let long = "a".repeat(1001);
    let r = f.call("BashOutput", json!({"bash_id": id, "filter": long})).await;
    assert_eq!(r, err("The filter is 1001 bytes; at most 1000 are allowed."));
    // The refused reads consumed nothing; this one gets the newest 30,000 bytes.
    let r = f.call("BashOutput", json!({"bash_id": id})).await;
    let body = r.output.split("<output>\n").nth(1).unwrap_or("");
    let kept = body.trim_end_matches("\n</output>").len();
    assert_eq!(kept, crate::background::MAX_READ_BYTES, "{}", &r.output[..200]);
    assert!(
        r.output.contains("<note>20000 bytes of earlier output were not kept"),
        "{}",
        &r.output[..200]
    );
    let r = f.call("BashOutput", json!({"bash_id": "bash_nope"})).await;
    assert!(r.is_error && r.output.starts_with("No background shell with ID bash_nope"));
}
