//! MCP servers on the official Python SDK (`tests/mcp/*.py`, `pip install 'mcp>=1,<2'`) reached
//! from scripted sessions of the real server: a stdio server run by the server with only the
//! environment given, a Streamable HTTP server that requires a bearer token from an org secret
//! (which appears nowhere else: not in the events, the tool results, the server's log or the
//! sandbox), the HTTP server killed mid-session (a tool error, the turn goes on) and restarted
//! (the next call reconnects), and `admin mcp add|ls|rm|test` with their refusals.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::io::BufRead as _;
use std::process::{Child, Command, Stdio};

use outboard_shared::EventKind;
use outboard_tests::fixture::{admin_ok, serve};
use outboard_tests::harness::{bash_outputs, outboard, tool_results, Api, TestServer, WsClient};
use outboard_tests::scripted::{say, script, tool};
use serde_json::json;

const TOKEN: &str = "mcp-bearer-5f3a9c1e7d2b4a60";

fn script_path(name: &str) -> String {
    format!("{}/mcp/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The HTTP test server, killed when dropped.
struct HttpServer {
    child: Child,
    port: u16,
}

impl HttpServer {
    fn start(port: u16) -> HttpServer {
        let mut child = Command::new("python3")
            .arg(script_path("http_server.py"))
            .arg(port.to_string())
            .env("MCP_TOKEN", TOKEN)
            .stdout(Stdio::piped())
            .spawn()
            .expect("python3 with the mcp package (pip install 'mcp>=1,<2')");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        let port = line.trim().strip_prefix("listening ").unwrap_or_else(|| {
            panic!("the MCP HTTP server did not start: {line:?} (is `mcp` installed?)")
        });
        HttpServer { child, port: port.parse().unwrap() }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn add_stdio(server: &TestServer) {
    let (code, out, err) = server
        .admin(
            &[
                "mcp",
                "add",
                "--org",
                "acme",
                "local",
                "--env",
                "TOKEN={secret:stdio-token}",
                "--command",
                "python3",
                &script_path("stdio_server.py"),
            ],
            None,
        )
        .unwrap();
    assert_eq!(code, 0, "{out}{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_servers_tools_reach_the_model_from_outboard_run() {
    let mock = outboard_tests::scripted::start().await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    let set = ["secret", "set", "--org", "acme", "--host", "mcp.example", "stdio-token"];
    admin_ok(&server, &set, Some("stdio-secret-value-123456\n"));
    add_stdio(&server);
    let prompt = script(&[
        tool("mcp__local__echo", json!({"text": "hi from the model"})),
        tool("mcp__local__add", json!({"a": 2, "b": 3})),
        tool("mcp__local__pixel", json!({})),
        tool("mcp__local__fail", json!({"reason": "testing"})),
        tool("mcp__local__env_names", json!({})),
        tool("mcp__local__secret_digest", json!({"var": "TOKEN"})),
        tool("mcp__local__nope", json!({})),
        say("done"),
    ]);
    let run = tokio::task::spawn_blocking(move || {
        outboard(&["run", "--server", &server.url, "--token", &token, "--json", &prompt], None)
            .map(|r| (r, server))
    })
    .await
    .unwrap()
    .unwrap();
    let (run, server) = run;
    assert_eq!(run.code, 0, "{}\n{}", run.stderr, server.log());
    let requests = mock.requests();
    let first = &requests[0];
    // The tools are offered with their schemas, and the prompt lists the server.
    let tools = first.body["tools"].as_array().unwrap();
    let echo = tools.iter().find(|t| t["name"] == "mcp__local__echo").expect("echo offered");
    assert_eq!(echo["input_schema"]["properties"]["text"]["type"], "string", "{echo}");
    let system = first.system_text();
    assert!(system.contains("# MCP servers"), "{system}");
    assert!(system.contains("- local (stdio, server outboard-stdio-test"), "{system}");
    // Each result reached the model, in order.
    let last = serde_json::to_string(&requests.last().unwrap().body).unwrap();
    for want in [
        "echo: hi from the model",
        "[image: image/png, 70 bytes]",
        "failed on purpose: testing",
        "set, 25 characters",
        "has no tool mcp__local__nope",
    ] {
        assert!(last.contains(want), "{want} not in {last}");
    }
    let events: Vec<serde_json::Value> = run.json_lines().unwrap();
    let outputs: Vec<(String, bool)> = events
        .iter()
        .filter(|e| e["type"] == "tool_result")
        .map(|e| (e["output"].as_str().unwrap_or_default().to_owned(), e["is_error"] == true))
        .collect();
    assert_eq!(outputs.len(), 7, "{events:?}");
    assert_eq!(outputs[1], ("5".to_owned(), false));
    assert!(outputs[3].1, "an isError result is a tool error: {outputs:?}");
    // Only PATH and the given variable (and what Python itself sets) reach the server.
    let env_names = &outputs[4].0;
    assert!(env_names.split(',').any(|n| n == "PATH"), "{env_names}");
    assert!(env_names.split(',').any(|n| n == "TOKEN"), "{env_names}");
    for leaked in ["ANTHROPIC_API_KEY", "OUTBOARD_LOG", "HOME", "OUTBOARD_CONTEXT_WINDOW"] {
        assert!(!env_names.split(',').any(|n| n == leaked), "{leaked} in {env_names}");
    }
    assert!(!server.log().contains("stdio-secret-value-123456"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_servers_token_stays_in_the_server_and_a_killed_server_is_reconnected() {
    let mut http = HttpServer::start(0);
    let port = http.port;
    let mock = outboard_tests::scripted::start().await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("alice", "acme").unwrap();
    let host = format!("127.0.0.1:{port}");
    let set = ["secret", "set", "--org", "acme", "--host", &host, "mcp-token"];
    admin_ok(&server, &set, Some(&format!("{TOKEN}\n")));
    let url = format!("http://{host}/mcp");
    let add = [
        "mcp",
        "add",
        "--org",
        "acme",
        "remote",
        "--url",
        &url,
        "--header",
        "Authorization: Bearer {secret:mcp-token}",
    ];
    let (code, out, err) = server.admin(&add, None).unwrap();
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = server.admin(&["mcp", "test", "--org", "acme", "remote"], None).unwrap();
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("mcp__remote__echo"), "{out}");
    assert!(!out.contains(TOKEN) && !err.contains(TOKEN));

    let mut c = WsClient::connect(&server.url, &token).await.unwrap();
    let sid = c.new_session().await.unwrap();
    // Parts of the token the sandbox looks for (the whole one is never in a command either).
    let (head, tail) = (&TOKEN[..12], &TOKEN[12..]);
    let probe = format!(
        "env | grep -c -e '{head}' -e '{tail}'; grep -rls -e '{head}' -e '{tail}' /workspace \
         /tmp /etc /run /home /root 2>/dev/null | head -3; echo end"
    );
    let events = c
        .turn(
            &sid,
            &script(&[
                tool("mcp__remote__echo", json!({"text": "over http"})),
                tool("Bash", json!({"command": probe})),
                say("first"),
            ]),
        )
        .await
        .unwrap();
    let got = tool_results(&events);
    assert_eq!(got[0], ("mcp__remote__echo".into(), "echo: over http".into(), false), "{got:?}");
    assert_eq!(bash_outputs(&events)[0], "0\nend\n");

    // Killed mid-session: the next call is a tool error and the turn goes on to its end.
    drop(http);
    let events = c
        .turn(
            &sid,
            &script(&[tool("mcp__remote__echo", json!({"text": "while down"})), say("second")]),
        )
        .await
        .unwrap();
    let got = tool_results(&events);
    assert!(got[0].2, "a call to a dead server is a tool error: {got:?}");
    assert!(got[0].1.contains("remote"), "{got:?}");
    assert!(
        events.iter().any(|e| matches!(e.kind, EventKind::TurnCompleted { .. })),
        "the turn goes on: {events:?}"
    );
    // Back at the same address: the next call reconnects.
    http = HttpServer::start(port);
    let events = c
        .turn(&sid, &script(&[tool("mcp__remote__echo", json!({"text": "back"})), say("third")]))
        .await
        .unwrap();
    let got = tool_results(&events);
    assert_eq!(got[0], ("mcp__remote__echo".into(), "echo: back".into(), false), "{got:?}");

    // The token is nowhere: the stored log, what the model was sent, the server's log.
    let mut c2 = WsClient::connect(&server.url, &token).await.unwrap();
    let replay = c2
        .request("session/attach", json!({"session_id": sid, "role": "watcher", "after_seq": 0}))
        .await
        .unwrap()
        .unwrap();
    let replay = replay.to_string();
    assert!(replay.contains("echo: back"), "{replay}");
    assert!(!replay.contains(TOKEN), "the log holds the token");
    for request in mock.requests() {
        assert!(!request.body.to_string().contains(TOKEN), "the model was sent the token");
    }
    assert!(!server.log().contains(TOKEN), "the server's log holds the token");
    drop(http);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_mcp_adds_lists_tests_and_removes_with_clear_refusals() {
    let mock = outboard_tests::scripted::start().await.unwrap();
    let server = serve(&mock, Api::Anthropic, &[]);
    server.add_user("alice", "acme").unwrap();
    let stdio = |org: &str, secret: &str| {
        let env = format!("TOKEN={{secret:{secret}}}");
        let script = script_path("stdio_server.py");
        let args =
            ["mcp", "add", "--org", org, "local", "--env", &env, "--command", "python3", &script];
        server.admin(&args, None).unwrap()
    };
    // Unknown org, missing secret: refused, nothing stored.
    let (code, _, err) = stdio("nobody", "stdio-token");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("nobody"), "{err}");
    let (code, _, err) = stdio("acme", "stdio-token");
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no secret \"stdio-token\""), "{err}");
    assert!(err.contains("admin secret set"), "{err}");
    let (_, listed, _) = server.admin(&["mcp", "ls", "--org", "acme"], None).unwrap();
    assert!(!listed.contains("local"), "{listed}");
    // A bad name, a secret in argv.
    let (code, _, err) = server
        .admin(&["mcp", "add", "--org", "acme", "Bad__Name", "--url", "http://127.0.0.1:9/"], None)
        .unwrap();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("not valid"), "{err}");
    let (code, _, err) = server
        .admin(&["mcp", "add", "--org", "acme", "x", "--command", "srv", "--key={secret:a}"], None)
        .unwrap();
    assert_ne!(code, 0, "{err}");

    let set = ["secret", "set", "--org", "acme", "--host", "mcp.example", "stdio-token"];
    assert_eq!(server.admin(&set, Some("value-never-listed-98765\n")).unwrap().0, 0);
    let (code, out, err) = stdio("acme", "stdio-token");
    assert_eq!(code, 0, "{out}{err}");
    let down = ["mcp", "add", "--org", "acme", "down", "--url", "http://127.0.0.1:9/mcp"];
    assert_eq!(server.admin(&down, None).unwrap().0, 0);
    let (code, listed, _) = server.admin(&["mcp", "ls", "--org", "acme"], None).unwrap();
    assert_eq!(code, 0);
    assert!(listed.contains("local") && listed.contains("stdio"), "{listed}");
    assert!(listed.contains("TOKEN={secret:stdio-token}"), "{listed}");
    assert!(listed.contains("down") && listed.contains("http://127.0.0.1:9/mcp"), "{listed}");
    assert!(!listed.contains("value-never-listed"), "{listed}");

    let (code, out, err) = server.admin(&["mcp", "test", "--org", "acme", "local"], None).unwrap();
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("mcp__local__echo") && out.contains("Answers with the text"), "{out}");
    let (code, out, err) = server.admin(&["mcp", "test", "--org", "acme", "down"], None).unwrap();
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("cannot connect to MCP server down"), "{err}");
    let (code, _, err) = server.admin(&["mcp", "test", "--org", "acme", "ghost"], None).unwrap();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no MCP server \"ghost\""), "{err}");

    assert_eq!(server.admin(&["mcp", "rm", "--org", "acme", "down"], None).unwrap().0, 0);
    let (code, _, err) = server.admin(&["mcp", "rm", "--org", "acme", "down"], None).unwrap();
    assert_eq!(code, 1, "{err}");
    let (_, listed, _) = server.admin(&["mcp", "ls", "--org", "acme"], None).unwrap();
    assert!(!listed.contains("down"), "{listed}");
}

/// The hub on its own (as the server holds it) with the stdio server: sessions share one
/// connection; a call past the call timeout is a tool error and the next call gets a new
/// connection; a big result is cut; the org's server count is bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hub_shares_one_connection_cuts_big_results_and_replaces_a_hung_one() {
    use outboard_server::mcp::config::{put, ServerDef, Transport};
    use outboard_server::mcp::{McpError, McpHub, MAX_RESULT_BYTES, MAX_SERVERS_PER_ORG};
    use outboard_server::store::{org_id_by_name, Durability, Store};
    use std::time::Duration;
    use tokio_util::sync::CancellationToken;

    let data = tempfile::tempdir().unwrap();
    let store = Store::open(&data.path().join("outboard.db"), Durability::Normal).unwrap();
    store.add_user("acme", "alice").await.unwrap();
    let org = store.call(|c| org_id_by_name(c, "acme")).await.unwrap().unwrap();
    let def = |name: &str| ServerDef {
        name: name.into(),
        transport: Transport::Stdio {
            command: "python3".into(),
            args: vec![script_path("stdio_server.py")],
            env: vec![],
        },
    };
    put(&store, &org, &def("local")).await.unwrap();
    let hub =
        McpHub::with_timeouts(store.clone(), None, Duration::from_secs(20), Duration::from_secs(2));
    let cancel = CancellationToken::new();
    let tools = hub.org_tools(&org).await;
    assert!(tools.specs.iter().any(|s| s.name == "mcp__local__pid"), "{}", tools.prompt);

    // Eight callers at once (sessions of the org), one server process.
    let calls = (0..8).map(|_| {
        let (hub, org, cancel) = (hub.clone(), org.clone(), cancel.clone());
        tokio::spawn(async move { hub.call(&org, "mcp__local__pid", &json!({}), &cancel).await })
    });
    let mut pids = Vec::new();
    for call in calls {
        let out = call.await.unwrap();
        assert!(!out.is_error, "{}", out.output);
        pids.push(out.output);
    }
    pids.dedup();
    assert_eq!(pids.len(), 1, "one connection for all: {pids:?}");

    let big = hub.call(&org, "mcp__local__big", &json!({"kib": 300}), &cancel).await;
    assert!(!big.is_error);
    assert!(big.output.len() < MAX_RESULT_BYTES + 200, "{}", big.output.len());
    assert!(big.output.ends_with(&format!("cut at {MAX_RESULT_BYTES} of {} bytes]", 300 * 1024)));

    let slow = hub.call(&org, "mcp__local__sleep", &json!({"seconds": 60}), &cancel).await;
    assert!(slow.is_error, "{}", slow.output);
    assert!(slow.output.contains("did not answer within 2 s"), "{}", slow.output);
    let after = hub.call(&org, "mcp__local__pid", &json!({}), &cancel).await;
    assert!(!after.is_error, "{}", after.output);
    assert_ne!(after.output, pids[0], "the hung connection was replaced");

    for i in 1..MAX_SERVERS_PER_ORG {
        put(&store, &org, &def(&format!("s{i}"))).await.unwrap();
    }
    let refused = put(&store, &org, &def("one-too-many")).await;
    assert!(matches!(refused, Err(McpError::TooMany)), "{refused:?}");
    // Replacing an existing one is not adding.
    put(&store, &org, &def("local")).await.unwrap();
}
