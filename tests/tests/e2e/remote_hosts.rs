//! `outboard-server sandbox-host` as the real binary with real bubblewrap sandboxes, driven by
//! the real harness-side client: on 127.0.0.1 (commands and file tools over the wire, the token
//! kept only as a hash, a restart the client rides out), and two hosts each in its own network
//! namespace made by the test, reached over a veth pair (a host killed mid-command is lost by
//! name while the other serves on; a wrong token is refused; a restart on the same port keeps
//! the workspace). The fixture is `outboard_tests::hosts`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::process::Command;
use std::time::{Duration, Instant};

use outboard_server::remote::client::{HostClient, RemoteError};
use outboard_server::remote::trust::new_join_token;
use outboard_server::tools::ReadLedger;
use outboard_tests::harness::bin;
use outboard_tests::hosts::{net_ns_of, HostProcess, NetNs};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const T: Duration = Duration::from_secs(60);

/// A host in a fresh namespace of its own, with data in `dir/name`.
fn host_in_netns(
    dir: &tempfile::TempDir,
    name: &str,
) -> anyhow::Result<(NetNs, HostProcess, String)> {
    let ns = NetNs::create()?;
    let token = new_join_token()?;
    let host = HostProcess::spawn(Some(&ns), &dir.path().join(name), &token, &[])?;
    Ok((ns, host, token))
}

/// Runs `command` on the host; its exit code and output (checked equal to what streamed).
async fn sh(
    client: &HostClient,
    workspace: &str,
    command: &str,
) -> anyhow::Result<(Option<i32>, String)> {
    let mut streamed = String::new();
    let r = client
        .exec(
            workspace,
            command,
            T,
            &mut |_, text| streamed.push_str(text),
            CancellationToken::new(),
        )
        .await?;
    anyhow::ensure!(streamed == r.output, "streamed {streamed:?}, the result has {:?}", r.output);
    Ok((r.exit_code, r.output))
}

/// Runs file tool `name` in workspace `s1`; its output, an error when the tool failed.
async fn tool(
    client: &HostClient,
    reads: &mut ReadLedger,
    name: &str,
    input: Value,
) -> anyhow::Result<String> {
    let r = client.tool("s1", name, &input, reads, CancellationToken::new()).await?;
    anyhow::ensure!(!r.is_error, "{name} failed: {}", r.output);
    Ok(r.output)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_host_binary_serves_commands_and_files_and_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("host");
    let token = new_join_token().unwrap();
    let mut host = HostProcess::spawn(None, &data, &token, &[]).unwrap();
    assert!(host.addr().ip().is_loopback(), "{}", host.addr());
    let client = HostClient::new(host.endpoint("h1"), T).unwrap();

    let r = sh(&client, "s1", "echo from-the-host; echo kept > kept.txt").await.unwrap();
    assert_eq!(r, (Some(0), "from-the-host\n".into()));
    assert_eq!(client.pinned().as_deref(), Some(host.fingerprint()), "the printed certificate");
    let mut reads = ReadLedger::new();
    let read = tool(&client, &mut reads, "Read", json!({"file_path": "/workspace/kept.txt"}))
        .await
        .unwrap();
    assert_eq!(read, "     1\tkept\n");

    // The host keeps the token's hash, never the token.
    for entry in std::fs::read_dir(&data).unwrap().flatten() {
        if entry.path().is_file() {
            let text = String::from_utf8_lossy(&std::fs::read(entry.path()).unwrap()).into_owned();
            assert!(!text.contains(&token), "{} holds the token", entry.path().display());
        }
    }

    // The process goes away and comes back on the same port, without the token this time.
    let addr = host.addr();
    host.restart().unwrap();
    assert_eq!(host.addr(), addr);
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
    assert_eq!(sh(&client, "s1", "cat kept.txt").await.unwrap(), (Some(0), "edited\n".into()));
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

#[test]
fn a_namespace_and_its_veth_pair_are_gone_after_a_panic() {
    let made = std::sync::Mutex::new(None);
    let panicked = std::panic::catch_unwind(|| {
        let ns = NetNs::create().unwrap();
        *made.lock().unwrap() = Some((ns.path(), ns.host_interface().to_owned()));
        assert!(ns.path().exists());
        assert!(std::path::Path::new(&format!("/sys/class/net/{}", ns.host_interface())).exists());
        panic!("a test failing with a namespace up");
    });
    assert!(panicked.is_err());
    let (path, interface) = made.into_inner().unwrap().expect("the namespace was made");
    assert!(!path.exists(), "{} is still there", path.display());
    let link = format!("/sys/class/net/{interface}");
    assert!(!std::path::Path::new(&link).exists(), "{link} is still there");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hosts_in_their_own_network_namespaces_serve_commands_and_files_over_veth() {
    let dir = tempfile::tempdir().unwrap();
    let (ns_a, host_a, _) = host_in_netns(&dir, "a").unwrap();
    let (ns_b, host_b, _) = host_in_netns(&dir, "b").unwrap();

    // Each host process is in its namespace, not in the test's nor the other's…
    let ours = net_ns_of(std::process::id()).unwrap();
    let in_a = net_ns_of(host_a.pid().unwrap()).unwrap();
    let in_b = net_ns_of(host_b.pid().unwrap()).unwrap();
    assert_eq!((in_a, in_b), (ns_a.inode().unwrap(), ns_b.inode().unwrap()));
    assert!(in_a != ours && in_b != ours && in_a != in_b, "{ours} {in_a} {in_b}");
    for (ns, host) in [(&ns_a, &host_a), (&ns_b, &host_b)] {
        // …listens on the namespace's address, which is not one of this namespace's…
        assert_eq!(host.addr().ip(), ns.address());
        let bound = std::net::TcpListener::bind((ns.address(), 0));
        assert!(bound.is_err(), "{} is an address of the test's namespace", ns.address());
        // …and is reached over the veth pair.
        let route = Command::new("ip").args(["route", "get", &ns.address().to_string()]).output();
        let route = String::from_utf8_lossy(&route.unwrap().stdout).into_owned();
        assert!(route.contains(&format!("dev {} ", ns.host_interface())), "{route}");
    }

    let client_a = HostClient::new(host_a.endpoint("alpha"), T).unwrap();
    let client_b = HostClient::new(host_b.endpoint("beta"), T).unwrap();
    for (client, name) in [(&client_a, "alpha"), (&client_b, "beta")] {
        let r = sh(client, "s1", &format!("echo {name} > mark.txt; cat mark.txt")).await.unwrap();
        assert_eq!(r, (Some(0), format!("{name}\n")));
        let mut reads = ReadLedger::new();
        let read = json!({"file_path": "/workspace/mark.txt"});
        assert_eq!(
            tool(client, &mut reads, "Read", read).await.unwrap(),
            format!("     1\t{name}\n")
        );
        let write = json!({"file_path": "notes/w.txt", "content": format!("written on {name}\n")});
        tool(client, &mut reads, "Write", write).await.unwrap();
        let edit =
            json!({"file_path": "notes/w.txt", "old_string": "written", "new_string": "edited"});
        tool(client, &mut reads, "Edit", edit).await.unwrap();
        let r = sh(client, "s1", "cat notes/w.txt").await.unwrap();
        assert_eq!(r, (Some(0), format!("edited on {name}\n")));
    }
    // The host in a namespace still sees the cgroup hierarchy: its sandbox has its groups
    // (limits, freezer), as a host on its own machine would.
    let cgroups: Vec<String> = ns_a
        .pids()
        .into_iter()
        .filter(|pid| Some(*pid) != host_a.pid())
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).ok())
        .collect();
    assert!(cgroups.iter().any(|c| c.contains("/outboard/")), "{cgroups:?}");
    // Same workspace id, two hosts: two directories.
    let a = std::fs::read_to_string(host_a.data().join("workspaces/s1/mark.txt")).unwrap();
    let b = std::fs::read_to_string(host_b.data().join("workspaces/s1/mark.txt")).unwrap();
    assert_eq!((a.as_str(), b.as_str()), ("alpha\n", "beta\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_mid_command_is_lost_by_name_and_the_other_host_serves_on() {
    let dir = tempfile::tempdir().unwrap();
    let (ns_a, mut host_a, _) = host_in_netns(&dir, "a").unwrap();
    let (_ns_b, host_b, _) = host_in_netns(&dir, "b").unwrap();
    // A short reconnect window, so the call after the kill gives up soon.
    let client_a = HostClient::new(host_a.endpoint("alpha"), Duration::from_secs(2)).unwrap();
    let client_b = HostClient::new(host_b.endpoint("beta"), T).unwrap();
    assert_eq!(sh(&client_b, "s1", "echo up").await.unwrap(), (Some(0), "up\n".into()));

    let (started, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut on_output = |_, text: &str| {
        if text.contains("started") {
            let _ = started.send(());
        }
    };
    let exec =
        client_a.exec("s1", "echo started; sleep 30", T, &mut on_output, CancellationToken::new());
    tokio::pin!(exec);
    tokio::select! {
        r = &mut exec => panic!("the command ended before the host was killed: {r:?}"),
        _ = started_rx.recv() => {}
    }
    let killed = Instant::now();
    host_a.kill();
    let r = tokio::time::timeout(Duration::from_secs(20), exec)
        .await
        .expect("the loss is seen long before the command's 30 s");
    let e = r.expect_err("a command on a killed host cannot succeed");
    assert!(matches!(e, RemoteError::Lost { .. }), "{e:?}");
    assert!(e.to_string().contains("sandbox host alpha at wss://"), "{e}");
    assert!(killed.elapsed() < Duration::from_secs(20));

    // The host's sandboxes went with it: nothing runs in its namespace any more.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !ns_a.pids().is_empty() {
        assert!(Instant::now() < deadline, "still in {}: {:?}", ns_a.name(), ns_a.pids());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The next call finds no host within the client's window.
    let e = client_a
        .exec("s1", "true", T, &mut |_, _| {}, CancellationToken::new())
        .await
        .expect_err("the host is down");
    assert!(matches!(e, RemoteError::Unreachable { .. }), "{e:?}");
    assert!(e.to_string().contains("sandbox host alpha at"), "{e}");

    // The other host was not disturbed: its connection and its sandbox are as they were.
    assert!(client_b.is_connected().await);
    assert_eq!(
        sh(&client_b, "s1", "echo still-here").await.unwrap(),
        (Some(0), "still-here\n".into())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_join_token_is_refused_over_veth() {
    let dir = tempfile::tempdir().unwrap();
    let (_ns, host, _) = host_in_netns(&dir, "a").unwrap();
    let wrong = new_join_token().unwrap();
    let mut endpoint = host.endpoint("alpha");
    endpoint.token = wrong.clone();
    let e = HostClient::new(endpoint, T).unwrap().connect().await.expect_err("a wrong token");
    let message = e.to_string();
    assert!(matches!(e, RemoteError::Refused { .. }), "{e:?}");
    assert!(message.contains("sandbox host alpha") && message.contains("join token is wrong"));
    assert!(!message.contains(&wrong), "the token is in the error: {message}");
    // The same host, the same path, the right token: joined.
    let client = HostClient::new(host.endpoint("alpha"), T).unwrap();
    client.connect().await.unwrap();
    assert!(client.is_connected().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_restarted_on_the_same_port_in_its_namespace_keeps_the_workspace() {
    let dir = tempfile::tempdir().unwrap();
    let (ns, mut host, _) = host_in_netns(&dir, "a").unwrap();
    let client = HostClient::new(host.endpoint("alpha"), T).unwrap();
    let mut reads = ReadLedger::new();
    let write = json!({"file_path": "kept.txt", "content": "before the restart\n"});
    tool(&client, &mut reads, "Write", write).await.unwrap();
    let (addr, fingerprint, pid) = (host.addr(), host.fingerprint().to_owned(), host.pid());

    host.restart().unwrap();
    assert_eq!(host.addr(), addr, "the same address and port");
    assert_ne!(host.pid(), pid, "a new process");
    assert_eq!(net_ns_of(host.pid().unwrap()).unwrap(), ns.inode().unwrap());
    assert_eq!(host.fingerprint(), fingerprint, "the same certificate, from its data dir");

    // Read changes nothing, so a call lost with the old connection is sent again.
    let read = json!({"file_path": "kept.txt"});
    assert_eq!(
        tool(&client, &mut reads, "Read", read).await.unwrap(),
        "     1\tbefore the restart\n"
    );
    assert_eq!(client.pinned().as_deref(), Some(fingerprint.as_str()));
    assert_eq!(
        sh(&client, "s1", "cat kept.txt").await.unwrap(),
        (Some(0), "before the restart\n".into())
    );
}

/// Keeps `n` TCP connections from `source` to `addr` open without a byte of TLS, reopening each
/// as the host closes it, until `stop`; returns how many were opened.
fn hold_joins(
    addr: std::net::SocketAddr,
    source: std::net::IpAddr,
    n: usize,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<usize> {
    tokio::spawn(async move {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..n {
            let stop = stop.clone();
            tasks.spawn(async move {
                use tokio::io::AsyncReadExt as _;
                let mut opened = 0;
                while !stop.is_cancelled() {
                    let socket = tokio::net::TcpSocket::new_v4().unwrap();
                    socket.bind((source, 0).into()).unwrap();
                    let Ok(mut tcp) = socket.connect(addr).await else { continue };
                    opened += 1;
                    let mut buf = [0u8; 64];
                    tokio::select! {
                        _ = tcp.read(&mut buf) => {}
                        () = stop.cancelled() => {}
                    }
                }
                opened
            });
        }
        let mut opened = 0;
        while let Some(n) = tasks.join_next().await {
            opened += n.unwrap();
        }
        opened
    })
}

/// A peer without the token keeps more idle connections open than the host lets join at once,
/// reopening each as it is closed: a harness from another address still joins at its first
/// attempt, and the host's log does not grow with the refusals. Before, the peer held every
/// join slot ("tls handshake eof") and each refusal was a warning line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_of_one_peer_leave_the_harness_room_to_join() {
    let dir = tempfile::tempdir().unwrap();
    let token = new_join_token().unwrap();
    let host = HostProcess::spawn(None, &dir.path().join("host"), &token, &[]).unwrap();
    let logged_before = host.log().lines().count();
    let stop = CancellationToken::new();
    let attacker: std::net::IpAddr = "127.0.0.2".parse().unwrap();
    let holding = hold_joins(host.addr(), attacker, 32, stop.clone());
    tokio::time::sleep(Duration::from_secs(2)).await; // the peer has taken what it can

    let client = HostClient::new(host.endpoint("h1"), T).unwrap();
    client.connect_within(Duration::from_secs(10)).await.unwrap();
    assert_eq!(sh(&client, "s1", "echo joined").await.unwrap(), (Some(0), "joined\n".into()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.cancel();
    let opened = holding.await.unwrap();
    assert!(opened > 100, "the peer reopened only {opened} connections");

    let log = host.log();
    let lines: Vec<&str> = log.lines().skip(logged_before).collect();
    let about_peer = lines.iter().filter(|l| l.contains("127.0.0.2")).count();
    assert!(about_peer <= 12, "{about_peer} lines for {opened} connections:\n{}", lines.join("\n"));
    assert!(log.contains("left_out"), "{log}");
}

/// `outboard-server admin ARGS --data DATA`: exit code, stdout, stderr.
fn admin(data: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    // The store the test itself opens (`open_store`): PostgreSQL in CI's second pass.
    std::fs::create_dir_all(data).unwrap();
    let out = Command::new(bin("outboard-server").unwrap())
        .arg("admin")
        .args(args)
        .arg("--data")
        .arg(data)
        .args(outboard_tests::harness::store_args(data).unwrap())
        .env_remove("OUTBOARD_STORE")
        .output()
        .unwrap();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    (out.status.code().unwrap_or(-1), text(&out.stdout), text(&out.stderr))
}

/// `admin hosts ls --json`'s object for the one host.
fn listed(data: &std::path::Path) -> Value {
    let (code, out, err) = admin(data, &["hosts", "ls", "--json"]);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(out.lines().next().unwrap()).unwrap()
}

/// A host whose key changed (its data directory was rebuilt) while a session is placed on it:
/// it cannot be joined (not the pinned certificate) nor removed (a session is placed on it);
/// `admin hosts repin` shows the pinned and the new fingerprints, changes nothing without
/// `--yes`, and with it the host is joined again under its new pin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_key_changed_is_repinned_by_the_admin() {
    let dir = tempfile::tempdir().unwrap();
    let harness = dir.path().join("harness");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("wss://127.0.0.1:{port}");
    let (code, token, err) = admin(&harness, &["hosts", "add", "h1", "--url", &url]);
    assert_eq!(code, 0, "{err}");
    let exe = bin("outboard-server").unwrap();
    let spawn = |data: &str| {
        let path = dir.path().join(data);
        HostProcess::spawn_exe(&exe, None, &path, token.trim(), &[], port, "info")
    };
    let mut first = spawn("host-a").unwrap();
    let old = first.fingerprint().to_owned();
    assert_eq!(
        (listed(&harness)["state"].as_str(), listed(&harness)["pin"].as_str()),
        (Some("up"), Some(old.as_str()))
    );
    let (sid, _) = outboard_tests::fixture::craft_log(&harness, "m", vec![]).await;
    let store = outboard_tests::harness::open_store(&harness).unwrap();
    store
        .call(move |c| c.execute("UPDATE sessions SET host = 'h1' WHERE id = ?1", [&sid]))
        .await
        .unwrap();

    // The host comes back with a new key on the same address.
    first.kill();
    let deadline = Instant::now() + Duration::from_secs(30);
    let second = loop {
        match spawn("host-b") {
            Ok(host) => break host,
            Err(e) if Instant::now() < deadline && e.to_string().contains("in use") => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => panic!("{e}"),
        }
    };
    let new = second.fingerprint().to_owned();
    assert_ne!(old, new);
    let down = listed(&harness);
    assert_eq!(down["state"], "down", "{down}");
    assert!(down["error"].as_str().unwrap().contains("is not sandbox host h1"), "{down}");
    let (code, _, err) = admin(&harness, &["hosts", "rm", "h1"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("still holds 1 session"), "{err}");

    // Asked without --yes: shown, not changed.
    let (code, out, err) = admin(&harness, &["hosts", "repin", "h1"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains(&format!("pinned:   {old}")) && out.contains(&format!("presents: {new}")),
        "{out}"
    );
    assert!(err.contains("--yes"), "{err}");
    assert_eq!(listed(&harness)["pin"], old.as_str());
    // Confirmed: pinned, and the host is joined again.
    let (code, out, err) = admin(&harness, &["hosts", "repin", "h1", "--yes"]);
    assert_eq!(code, 0, "{out}{err}");
    let up = listed(&harness);
    assert_eq!(
        (up["state"].as_str(), up["pin"].as_str()),
        (Some("up"), Some(new.as_str())),
        "{up}"
    );
    assert_eq!(up["sessions"], 1);
}
