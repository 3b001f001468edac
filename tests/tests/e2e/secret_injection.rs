//! An org secret bound to a host's outbound HTTP, end to end through the real server: set with
//! `admin secret set --inject-header --placeholder --upstream-ca`, used by a session's sandbox
//! through the proxy (the upstream gets the header, the sandbox only a placeholder), and the
//! value nowhere else: not in the sandbox's environment or files, not in a tool result, an event,
//! the database, what the model was sent, or the server's log.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use outboard_tests::fixture::{admin_ok, serve};
use outboard_tests::harness::{bash_outputs, Api, TestServer, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use outboard_tests::tls::echo_upstream;
use serde_json::json;

const VALUE: &str = "s3cr3t-token-0123456789abcdef";

/// `admin secret set --org acme --host HOST NAME --inject-header HEADER EXTRA… --upstream-ca
/// FILE` with the value on stdin, FILE holding `upstream_ca` (in the data dir), which must
/// succeed; returns its stdout.
fn bind(
    server: &TestServer,
    host: &str,
    name: &str,
    header: &str,
    extra: &[&str],
    upstream_ca: &str,
    value: &str,
) -> String {
    let ca_file = server.data_dir().join(format!("{name}-ca.pem"));
    std::fs::write(&ca_file, upstream_ca).unwrap();
    let mut args = vec!["secret", "set", "--org", "acme", "--host", host, name];
    args.extend(["--inject-header", header]);
    args.extend_from_slice(extra);
    args.extend(["--upstream-ca", ca_file.to_str().unwrap()]);
    admin_ok(server, &args, Some(value))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sandbox_uses_the_credential_and_never_holds_it() {
    let (up, up_ca, seen) = echo_upstream("the upstream itself", "upstream test CA").await.unwrap();
    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    let host = up.to_string();
    let bearer = "Authorization: Bearer {}";
    let placeholder = ["--placeholder", "GH_TOKEN"];
    let out = bind(&server, &host, "api", bearer, &placeholder, &up_ca, &format!("{VALUE}\n"));
    assert!(out.contains("GH_TOKEN holds outboard-placeholder-GH_TOKEN"), "{out}");
    let (_, listed, _) = server.admin(&["secret", "ls", "--org", "acme"], None).unwrap();
    assert!(
        listed.contains("injects `authorization: Bearer {}`; placeholders GH_TOKEN"),
        "{listed}"
    );
    admin_ok(&server, &["network", "set", "--org", "acme", "registries+", &host], None);

    for step in [
        // A value that reached the workspace some other way is scrubbed from what tools show.
        MockStep::tool_call(
            "Write",
            json!({"file_path": "leak.txt", "content": format!("{VALUE}\n")}),
        ),
        MockStep::tool_call(
            "Bash",
            json!({"command": format!(
                "cat leak.txt; echo \"GH=$GH_TOKEN\"; env | grep -c 'token-0123' ; \
                 grep -rl 'token-0123' /run /etc 2>/dev/null | grep -v '^/proc' | head -3; \
                 unset NO_PROXY no_proxy; curl -sS https://{up}/first; echo ==; \
                 curl -sS -H \"Authorization: token $GH_TOKEN\" https://{up}/second"
            )}),
        ),
        MockStep::text("done"),
    ] {
        mock.push(step);
    }
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();
    let events = c.turn(&sid, "go").await.unwrap();

    // The upstream got the real value, both ways of asking.
    let seen: Vec<String> = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[0].contains(&format!("authorization: Bearer {VALUE}")), "{}", seen[0]);
    assert!(seen[1].contains(&format!("authorization: Bearer {VALUE}")), "{}", seen[1]);

    let output = bash_outputs(&events).remove(0);
    assert!(output.starts_with("[secret api]\nGH=outboard-placeholder-GH_TOKEN\n0\n"), "{output}");
    // The echo came back scrubbed.
    assert!(output.contains("authorization: Bearer [secret api]"), "{output}");
    assert!(!output.contains(VALUE), "{output}");

    // Nowhere else either: the stream, the log in the database, the model's requests, the
    // server's own log.
    for e in &events {
        let text = serde_json::to_string(e).unwrap();
        assert!(!text.contains(VALUE), "an event holds the value: {text}");
    }
    let requests = mock.requests();
    let last = serde_json::to_string(&requests.last().unwrap().body).unwrap();
    assert!(last.contains("[secret api]\\nGH=outboard-placeholder-GH_TOKEN"), "{last}");
    // Only where the model itself wrote it (the `Write` call's input).
    assert_eq!(last.matches(VALUE).count(), 1, "{last}");
    let log = outboard_tests::harness::outboard(
        &["sessions", "--json", "--server", &server.url, "--token", &token],
        None,
    )
    .unwrap();
    assert!(!log.stdout.contains(VALUE));
    let mut c2 = WsClient::connect(&server.url, &token).await.unwrap();
    let replay = c2
        .request("session/attach", json!({"session_id": sid, "role": "watcher", "after_seq": 0}))
        .await
        .unwrap()
        .unwrap();
    assert!(!replay.to_string().contains(VALUE), "the stored log holds the value");
    for file in ["outboard.db", "outboard.db-wal"] {
        let bytes = std::fs::read(server.data_dir().join(file)).unwrap_or_default();
        let hit = bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes());
        assert!(!hit, "{file} holds the value in clear");
    }
    assert!(!server.log().contains(VALUE), "the server's log holds the value");
    // The audit log marks the intercepted connections (and holds no value either).
    let port = u64::from(up.port());
    let log = || server.admin(&["network", "log", "--org", "acme", "--json"], None).unwrap().1;
    let intercepted = |text: &str| {
        text.lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .filter(|r| r["port"] == port && r["intercepted"] == true)
            .count()
    };
    outboard_tests::harness::wait_until(
        "both intercepted connections in the network log",
        std::time::Duration::from_secs(10),
        || intercepted(&log()) >= 2,
    )
    .unwrap();
    assert!(!log().contains(VALUE));
}

/// `git clone https://…` of a repository that needs a credential, with the credential injected by
/// the proxy: the sandbox's git has no credential at all and trusts the org's CA through
/// `GIT_SSL_CAINFO`; the host (git's own `http-backend` behind TLS) verifies Basic auth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_clones_over_https_with_a_credential_it_never_sees() {
    use outboard_tests::git_http::{basic_auth, make_repo, GitHttp};
    const PASSWORD: &str = "pw-never-in-the-sandbox-42";
    let root = tempfile::tempdir().unwrap();
    make_repo(root.path(), "demo.git", &[("README", b"cloned over https\n")]).unwrap();
    let git = GitHttp::start(root.path(), "alice", PASSWORD).unwrap();
    let backend: std::net::SocketAddr = git.authority().parse().unwrap();
    let (front, front_ca) = outboard_tests::tls::tls_front(backend, "git front CA").await.unwrap();

    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    let host = front.to_string();
    let value = basic_auth("alice", PASSWORD).trim_start_matches("Basic ").to_owned();
    bind(&server, &host, "git", "Authorization: Basic {}", &[], &front_ca, &value);
    admin_ok(&server, &["network", "set", "--org", "acme", "registries+", &host], None);
    mock.push(MockStep::tool_call(
        "Bash",
        json!({"command": format!(
            "unset NO_PROXY no_proxy; git clone -q https://{host}/git/demo.git demo 2>&1 && \
             cat demo/README; git -C demo config --get remote.origin.url; env | grep -c {PASSWORD}"
        )}),
    ));
    mock.push(MockStep::text("done"));
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();
    let events = c.turn(&sid, "go").await.unwrap();
    let output = bash_outputs(&events).remove(0);
    assert!(
        output.starts_with(&format!("cloned over https\nhttps://{host}/git/demo.git\n0\n")),
        "{output}"
    );
    // The host saw the credential on every request of the clone.
    let requests = git.requests();
    assert!(!requests.is_empty());
    assert!(requests.iter().all(|r| r.status != 401), "{requests:?}");
    let want = basic_auth("alice", PASSWORD);
    assert!(
        requests.iter().all(|r| r.authorization.as_deref() == Some(want.as_str())),
        "{requests:?}"
    );
}

/// A secret bound while a session runs is injected from the next policy refresh on: the
/// session's sandbox already trusts the org's CA, since the org had a secret when it started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_bound_while_the_session_runs_is_injected_without_a_new_session() {
    let (up, up_ca, seen) = echo_upstream("late upstream", "late test CA").await.unwrap();
    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    let host = up.to_string();
    // A git credential: the org has a secret, none bound to outbound HTTP yet.
    let git = ["secret", "set", "--org", "acme", "--host", "git.example.com", "ci"];
    admin_ok(&server, &git, Some("git-token-0123456789"));
    admin_ok(&server, &["network", "set", "--org", "acme", "registries+", &host], None);
    mock.push(MockStep::tool_call("Bash", json!({"command": "echo started"})));
    mock.push(MockStep::text("started"));
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();
    c.turn(&sid, "go").await.unwrap();

    bind(&server, &host, "late", "Authorization: Bearer {}", &[], &up_ca, VALUE);
    // Until the refresh the host is tunnelled (its own certificate, which the sandbox does not
    // trust): the command retries until the proxy intercepts, for at most 20 s.
    mock.push(MockStep::tool_call(
        "Bash",
        json!({"command": format!(
            "unset NO_PROXY no_proxy; for i in $(seq 1 80); do \
               out=$(curl -sS https://{up}/late 2>&1); \
               case \"$out\" in *'[secret late]'*) echo \"$out\"; exit 0;; esac; sleep 0.25; \
             done; echo \"never intercepted: $out\"; exit 1"
        )}),
    ));
    mock.push(MockStep::text("done"));
    let events = c.turn(&sid, "again").await.unwrap();
    let output = bash_outputs(&events).remove(0);
    assert!(output.contains("authorization: Bearer [secret late]"), "{output}");
    let seen = seen.lock().unwrap().clone();
    assert!(seen.iter().any(|h| h.contains(&format!("authorization: Bearer {VALUE}"))), "{seen:?}");
}
