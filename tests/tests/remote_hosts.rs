//! `outboard-server sandbox-host` as the real binary on 127.0.0.1:0 with real bubblewrap
//! sandboxes, driven by the real harness-side client: commands and file tools over the wire,
//! the token kept only as a hash, a restart of the host process that the client rides out.

use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::Context as _;
use outboard_server::remote::auth::new_join_token;
use outboard_server::remote::client::{HostClient, HostEndpoint, RemoteError};
use outboard_server::tools::ReadLedger;
use outboard_tests::harness::bin;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const T: Duration = Duration::from_secs(60);

/// A running `sandbox-host` process, stopped with SIGTERM when dropped.
struct HostProcess {
    child: Child,
    addr: SocketAddr,
}

impl HostProcess {
    /// Starts the binary and waits for its ready line (`sandbox host listening on ADDR …`).
    fn start(data: &Path, listen: &str, token: Option<&str>) -> anyhow::Result<HostProcess> {
        let mut command = Command::new(bin("outboard-server")?);
        command.args(["sandbox-host", "--listen", listen, "--data"]).arg(data);
        command.env_remove("OUTBOARD_JOIN_TOKEN");
        if let Some(token) = token {
            command.env("OUTBOARD_JOIN_TOKEN", token);
        }
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn()?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line)?;
        let addr = line
            .strip_prefix("sandbox host listening on ")
            .and_then(|rest| rest.split_whitespace().next())
            .with_context(|| format!("no ready line, got {line:?}"))?
            .parse()?;
        Ok(HostProcess { child, addr })
    }

    fn stop(mut self) {
        terminate(&mut self.child);
    }
}

fn terminate(child: &mut Child) {
    if let Ok(None) = child.try_wait() {
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let _ = child.wait();
    }
}

impl Drop for HostProcess {
    fn drop(&mut self) {
        terminate(&mut self.child);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_binary_serves_commands_and_files_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("host");
    let token = new_join_token().unwrap();
    let host = HostProcess::start(&data, "127.0.0.1:0", Some(&token)).unwrap();
    let addr = host.addr;
    let endpoint = HostEndpoint {
        name: "h1".into(),
        url: format!("ws://{addr}"),
        token: token.clone(),
        pin: None,
    };
    let client = HostClient::new(endpoint, T).unwrap();

    let mut streamed = String::new();
    let r = client
        .exec(
            "s1",
            "echo from-the-host; echo kept > kept.txt",
            T,
            &mut |_, text| streamed.push_str(text),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!((r.exit_code, streamed.as_str()), (Some(0), "from-the-host\n"));
    let mut reads = ReadLedger::new();
    let read = json!({"file_path": "/workspace/kept.txt"});
    let r = client.tool("s1", "Read", &read, &mut reads, CancellationToken::new()).await.unwrap();
    assert_eq!(r.output, "     1\tkept\n");

    // The host keeps the token's hash, never the token.
    for entry in std::fs::read_dir(&data).unwrap().flatten() {
        if entry.path().is_file() {
            let text = String::from_utf8_lossy(&std::fs::read(entry.path()).unwrap()).into_owned();
            assert!(!text.contains(&token), "{} holds the token", entry.path().display());
        }
    }

    // The process goes away and comes back on the same port, without the token this time.
    host.stop();
    let again = HostProcess::start(&data, &addr.to_string(), None).unwrap();
    let edit = json!({"file_path": "kept.txt", "old_string": "kept", "new_string": "edited"});
    let r = client.tool("s1", "Edit", &edit, &mut reads, CancellationToken::new()).await;
    let r = match r {
        // The first call may have gone out on the dead connection; a write is not resent.
        Err(RemoteError::Lost { .. }) => {
            client.tool("s1", "Edit", &edit, &mut reads, CancellationToken::new()).await
        }
        other => other,
    }
    .unwrap();
    assert!(!r.is_error, "{}", r.output);
    let r = client
        .exec("s1", "cat kept.txt", T, &mut |_, _| {}, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!((r.exit_code, r.output.as_str()), (Some(0), "edited\n"));
    again.stop();
}

#[test]
fn a_malformed_join_token_stops_the_host_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(bin("outboard-server").unwrap())
        .args(["sandbox-host", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path().join("host"))
        .env("OUTBOARD_JOIN_TOKEN", "not-a-token")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("admin hosts add"), "{stderr}");
    assert!(!stderr.contains("not-a-token"), "the token was echoed: {stderr}");
}
