//! A host that cannot run sandboxes (no bubblewrap), through the real binaries. The embedded
//! server checks the sandbox beside its start, off the path to the first model request (issue
//! #37): commands that need no sandbox work, and the first command that does fails with the
//! install hint, which the model and the user both see. `outboard-server serve` still refuses to
//! start with the same hint.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::process::{Command, Stdio};

use outboard_tests::harness::bin;
use outboard_tests::mock_llm::{MockLlm, MockStep};
use serde_json::{json, Value};

/// `BIN ARGS` with a `PATH` under which no `bwrap` exists (the server looks bubblewrap up on
/// its `PATH`), `env` and nothing else from the developer's environment.
fn without_bwrap(
    name: &str,
    args: &[&str],
    env: &[(&str, &str)],
    home: &std::path::Path,
) -> (i32, String, String) {
    let empty_bin = home.join("no-bwrap-here");
    std::fs::create_dir_all(&empty_bin).unwrap();
    let out = Command::new(bin(name).unwrap())
        .args(args)
        .env_clear()
        .env("PATH", &empty_bin)
        .env("HOME", home)
        .env("USER", "tester")
        .envs(env.iter().copied())
        .current_dir(home)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

fn assert_install_hint(said: &str) {
    assert!(said.contains("bubblewrap (bwrap) was not found"), "{said}");
    assert!(said.contains("apt-get install bubblewrap"), "{said}");
    assert!(said.contains("dnf install bubblewrap"), "{said}");
}

#[tokio::test]
async fn a_missing_bubblewrap_fails_the_first_command_with_the_install_hint_not_the_start() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("data");
    let data = data.to_str().unwrap().to_owned();
    let mock = MockLlm::start(vec![
        MockStep::tool_call("Bash", json!({"command": "echo hi"})),
        MockStep::tool_call("Bash", json!({"command": "echo again"})),
        MockStep::text("No sandbox here."),
    ])
    .await
    .unwrap();
    let base = mock.anthropic_base_url();
    let home_path = home.path().to_path_buf();
    let (code, stdout, stderr) = tokio::task::spawn_blocking(move || {
        let args = ["run", "--json", "--provider", "anthropic", "--base-url", &base, "--data"];
        let mut args: Vec<&str> = args.to_vec();
        args.extend([data.as_str(), "--workspace", ".", "say hi"]);
        without_bwrap("outboard", &args, &[("ANTHROPIC_API_KEY", "sk-test")], &home_path)
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "the turn ends normally\nstdout: {stdout}\nstderr: {stderr}");
    assert_eq!(mock.requests().len(), 3, "the model was asked before any sandbox: {stdout}");
    let results: Vec<Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|l| l["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2, "{stdout}");
    for result in &results {
        assert_eq!(result["is_error"], true, "{result}");
        let output = result["output"].as_str().unwrap();
        assert!(output.contains("the sandbox is unavailable on this host"), "{output}");
        assert_install_hint(output);
    }
    // The model saw the same explanation.
    assert_install_hint(&mock.requests()[1].raw);

    // What needs no sandbox works on such a host.
    let home2 = home.path().to_path_buf();
    let data = home.path().join("data").to_str().unwrap().to_owned();
    let (code, stdout, stderr) =
        without_bwrap("outboard", &["sessions", "--data", &data], &[], &home2);
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
}

#[test]
fn serve_refuses_to_start_without_bubblewrap_with_the_install_hint() {
    let home = tempfile::tempdir().unwrap();
    let data = home.path().join("data");
    let args = ["serve", "--listen", "127.0.0.1:0", "--data", data.to_str().unwrap()];
    let (code, stdout, stderr) =
        without_bwrap("outboard-server", &args, &[("ANTHROPIC_API_KEY", "sk-test")], home.path());
    assert_ne!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(!stdout.contains("listening on"), "{stdout}");
    assert_install_hint(&stderr);
}
