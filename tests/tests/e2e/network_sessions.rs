//! A session's network through the real server, the real sandbox and its proxy: the org's policy
//! (`admin network set`) decides, `curl`, `git clone` and `pip download` reach an allowed
//! upstream, every refusal is a `403` that explains itself, a durable `network` event (in the
//! stream and in `run --json`) and a row of `admin network log`; `--network none` narrows;
//! the ranges that lead back into the host stay closed in every mode.
//!
//! The upstreams are on the host's 127.0.0.1, reached by the IP literal an admin allowed. Inside
//! the sandbox 127.0.0.1 is the sandbox's own loopback and in `NO_PROXY`, so the commands
//! unset it (an internal mirror in production has an address of its own).

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::net::SocketAddr;
use std::time::Duration;

use outboard_shared::{EventKind, SessionEvent};
use outboard_tests::fixture::{admin_ok, serve};
use outboard_tests::git_http::{make_repo, GitHttp};
use outboard_tests::harness::{bash_outputs, outboard, wait_until, Api, TestServer, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use serde_json::{json, Value};

const VIA_PROXY: &str = "unset NO_PROXY no_proxy; ";

/// An HTTP upstream on 127.0.0.1: `/` says hello, `/simple/demo/` is a package index with one
/// wheel, served from `/files/`.
async fn upstream(wheel: Vec<u8>) -> SocketAddr {
    use axum::routing::get;
    let index = format!("<html><body><a href=\"/files/{WHEEL}\">{WHEEL}</a></body></html>\n");
    let app = axum::Router::new()
        .route("/", get(|| async { "hello from upstream\n" }))
        .route("/simple/demo/", get(move || async move { axum::response::Html(index) }))
        .route(&format!("/files/{WHEEL}"), get(move || async move { wheel }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

const WHEEL: &str = "demo-1.0-py3-none-any.whl";

/// A real (tiny) wheel, made by the host's python3.
fn wheel(dir: &std::path::Path) -> Vec<u8> {
    let path = dir.join(WHEEL);
    let script = r#"
import base64, hashlib, sys, zipfile
files = {
    "demo/__init__.py": b"VALUE = 42\n",
    "demo-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: demo\nVersion: 1.0\n",
    "demo-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: outboard-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
}
record = []
with zipfile.ZipFile(sys.argv[1], "w") as z:
    for name, data in files.items():
        z.writestr(name, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    record.append("demo-1.0.dist-info/RECORD,,")
    z.writestr("demo-1.0.dist-info/RECORD", "\n".join(record) + "\n")
"#;
    let out =
        std::process::Command::new("python3").arg("-c").arg(script).arg(&path).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::read(path).unwrap()
}

fn push(mock: &MockLlm, steps: Vec<MockStep>) {
    for step in steps {
        mock.push(step);
    }
}

fn server_port(server: &TestServer) -> u16 {
    server.url.rsplit(':').next().unwrap().parse().unwrap()
}

fn network_events(events: &[SessionEvent]) -> Vec<(String, u16, String, String, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Network { host, port, policy, reason, hint, .. } => {
                Some((host.clone(), *port, policy.clone(), reason.clone(), hint.clone()))
            }
            _ => None,
        })
        .collect()
}

fn log_rows(server: &TestServer, org: &str) -> Vec<Value> {
    let (code, out, err) = server.admin(&["network", "log", "--org", org, "--json"], None).unwrap();
    assert_eq!(code, 0, "{err}");
    out.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_allowed_upstream_is_reached_and_every_refusal_explains_itself() {
    let files = tempfile::tempdir().unwrap();
    let up = upstream(wheel(files.path())).await;
    let git_root = tempfile::tempdir().unwrap();
    make_repo(git_root.path(), "demo.git", &[("README", b"cloned through the proxy\n")]).unwrap();
    let git = GitHttp::start(git_root.path(), "alice", "pw").unwrap();
    // A port nothing is allowed on: `localhost` is, by name, and resolves to loopback.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed = closed.local_addr().unwrap().port();

    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let own = server_port(&server);
    let token = server.add_user("bob", "acme").unwrap();
    let allow = [
        "network",
        "set",
        "--org",
        "acme",
        "registries+",
        &up.to_string(),
        &git.authority(),
        &format!("localhost:{closed}"),
    ];
    admin_ok(&server, &allow, None);

    let steps = vec![
        MockStep::tool_call(
            "Bash",
            json!({"command": format!(
                "{VIA_PROXY} curl -sS http://{up}/; \
                 curl -sS -w '%{{http_code}}\\n' http://blocked.example/; \
                 curl -sS -w '%{{http_code}}\\n' http://localhost:{closed}/; \
                 curl -sS -w '%{{http_code}}\\n' http://127.0.0.1:{own}/; \
                 curl -sS -w '%{{http_code}}\\n' http://169.254.169.254/latest/meta-data/; \
                 (echo > /dev/tcp/127.0.0.1/{own}) 2>/dev/null && echo direct-open || echo no-direct-route"
            )}),
        ),
        MockStep::tool_call(
            "Bash",
            json!({"command": format!(
                "{VIA_PROXY} git clone -q http://alice:pw@{}/git/demo.git demo 2>&1 && cat demo/README",
                git.authority()
            )}),
        ),
        MockStep::tool_call(
            "Bash",
            json!({"command": format!(
                "{VIA_PROXY} python3 -m pip download --no-deps --no-cache-dir -q \
                 --disable-pip-version-check --trusted-host 127.0.0.1 \
                 --index-url http://{up}/simple/ -d dl demo==1.0 2>&1; ls dl"
            )}),
        ),
        MockStep::text("done"),
    ];
    for step in steps {
        mock.push(step);
    }
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();
    let events = c.turn(&sid, "go").await.unwrap();
    let out = bash_outputs(&events);
    assert_eq!(out.len(), 3, "{out:?}");

    let first = &out[0];
    assert!(first.contains("hello from upstream"), "{first}");
    // The refusals: each a 403 whose body names the host, the policy and the fix.
    assert!(first.contains("blocked.example") && first.contains("org acme"), "{first}");
    assert!(first.contains("admin network set --org acme"), "{first}");
    assert!(first.contains("localhost resolves to 127.0.0.1"), "{first}");
    // Counted as whole lines (curl's `-w '%{http_code}\n'`): a port number may contain "403".
    assert_eq!(status_lines(first, "403"), 4, "four refusals, each a 403: {first}");
    assert!(first.contains("no-direct-route") && !first.contains("direct-open"), "{first}");
    assert!(out[1].contains("cloned through the proxy"), "git clone: {}", out[1]);
    assert!(out[2].contains(WHEEL), "pip download: {}", out[2]);

    // Every refusal is an event, and they came before the command's result.
    let refused = network_events(&events);
    let hosts: Vec<&str> = refused.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(
        hosts,
        ["blocked.example", "localhost", "127.0.0.1", "169.254.169.254"],
        "{refused:?}"
    );
    assert!(refused[0].2.starts_with("org acme"), "{refused:?}");
    assert!(refused[0].4.contains("admin network set"), "{refused:?}");
    assert!(refused[1].2.contains("no way back in"), "{refused:?}");
    let first_result =
        events.iter().position(|e| matches!(e.kind, EventKind::ToolResult { .. })).unwrap();
    let last_refusal =
        events.iter().rposition(|e| matches!(e.kind, EventKind::Network { .. })).unwrap();
    assert!(last_refusal < first_result, "the refusals precede the command's result");

    // The audit log: a row for each allowed connection (with its bytes) and each refusal.
    let rows = log_rows(&server, "acme");
    let allowed: Vec<&Value> = rows.iter().filter(|r| r["allowed"] == true).collect();
    assert!(
        allowed.iter().any(|r| r["host"] == "127.0.0.1"
            && r["port"] == up.port()
            && r["bytes_down"].as_u64().unwrap() > 0),
        "{rows:#?}"
    );
    assert!(
        allowed
            .iter()
            .any(|r| r["port"]
                == git.authority().rsplit(':').next().unwrap().parse::<u16>().unwrap()),
        "{rows:#?}"
    );
    for host in ["blocked.example", "localhost", "169.254.169.254"] {
        assert!(
            rows.iter()
                .any(|r| r["host"] == host && r["allowed"] == false && r["reason"].is_string()),
            "no refused row for {host}: {rows:#?}"
        );
    }
    assert!(
        rows.iter().all(|r| r["session_id"] == sid.as_str() && r["user"] == "bob"),
        "{rows:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_mode_still_refuses_the_way_back_in_and_none_refuses_everything() {
    let files = tempfile::tempdir().unwrap();
    let up = upstream(wheel(files.path())).await;
    let mock = MockLlm::start(vec![]).await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    admin_ok(&server, &["network", "set", "--org", "acme", "full"], None);
    push(
        &mock,
        vec![
            MockStep::tool_call(
                "Bash",
                json!({"command": format!(
                    "{VIA_PROXY} curl -sS -w '%{{http_code}}\\n' http://{up}/; \
                     curl -sS -w '%{{http_code}}\\n' http://169.254.169.254/; \
                     curl -sS -w '%{{http_code}}\\n' 'http://[::1]:{}/'",
                    up.port()
                )}),
            ),
            MockStep::text("done"),
        ],
    );
    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();
    let events = c.turn(&sid, "go").await.unwrap();
    let out = bash_outputs(&events).join("\n");
    assert!(!out.contains("hello from upstream"), "full mode reached loopback: {out}");
    assert_eq!(status_lines(&out, "403"), 3, "{out}");
    assert!(out.contains("is loopback") || out.contains("loopback"), "{out}");
    assert!(out.contains("169.254.169.254"), "{out}");
    let refused = network_events(&events);
    assert_eq!(refused.len(), 3, "{refused:?}");
    assert!(refused.iter().all(|r| r.2.contains("no way back in")), "{refused:?}");

    // `outboard run --network none`: the same org, nothing reachable, and the refusal in --json.
    let (code, _, err) = server
        .admin(&["network", "set", "--org", "acme", "registries+", &up.to_string()], None)
        .unwrap();
    assert_eq!(code, 0, "{err}");
    push(
        &mock,
        vec![
            MockStep::tool_call(
                "Bash",
                json!({"command": format!("{VIA_PROXY} curl -sS -w '%{{http_code}}\\n' http://{up}/")}),
            ),
            MockStep::text("done"),
        ],
    );
    let run = outboard(
        &["run", "--json", "--network", "none", "--server", &server.url, "--token", &token, "go"],
        None,
    )
    .unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    let lines = run.json_lines().unwrap();
    let net: Vec<&Value> = lines.iter().filter(|l| l["type"] == "network").collect();
    assert_eq!(net.len(), 1, "{lines:#?}");
    assert_eq!(net[0]["policy"], "session none");
    assert_eq!(net[0]["host"], "127.0.0.1");
    let result = lines.iter().find(|l| l["type"] == "tool_result").unwrap();
    assert_eq!(status_lines(result["output"].as_str().unwrap(), "403"), 1, "{result}");
    assert!(!result["output"].as_str().unwrap().contains("hello from upstream"), "{result}");
    let session = run.json_lines().unwrap()[0]["session_id"].as_str().unwrap().to_owned();
    let listed =
        outboard(&["sessions", "--json", "--server", &server.url, "--token", &token], None)
            .unwrap();
    let listed: Vec<Value> = serde_json::from_str(&listed.stdout).unwrap();
    let row = listed.iter().find(|s| s["id"] == session.as_str()).unwrap();
    assert_eq!(row["network"], "none", "the narrowing is stored with the session");

    // The text mode prints the refusal on stderr, one line.
    push(
        &mock,
        vec![
            MockStep::tool_call(
                "Bash",
                json!({"command": "curl -sS http://blocked.example/ >/dev/null; true"}),
            ),
            MockStep::text("done"),
        ],
    );
    let run = outboard(&["run", "--server", &server.url, "--token", &token, "go"], None).unwrap();
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains("network: blocked.example:80 refused by org acme"),
        "{}",
        run.stderr
    );
    wait_until("the refusal is in the network log", Duration::from_secs(10), || {
        log_rows(&server, "acme").into_iter().any(|r| r["host"] == "blocked.example")
    })
    .unwrap();
}

/// How many lines of `out` are exactly `status`, as curl's `-w '%{http_code}\n'` prints it.
fn status_lines(out: &str, status: &str) -> usize {
    out.lines().filter(|l| l.trim() == status).count()
}
