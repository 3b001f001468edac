//! The sandbox's one way out (issue #13, items 1, 3 and 7): real sandboxes (`bwrap`, the
//! launcher and the agent of the real `outboard-server` binary; as root in CI, so each sandbox
//! runs as its own unprivileged host uid) whose commands reach local HTTP, HTTPS and git
//! upstreams on 127.0.0.1 only through the server's proxy, allowed by IP literal in the test's
//! policy, and nothing else.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use outboard_server::netproxy::{Decide, Injection, NetLimits, Verdict};
use outboard_server::sandbox::{Sandbox, SandboxConfig};
use outboard_tests::fixture::{exec, net_sandbox, NetSandbox, VIA_PROXY};
use outboard_tests::harness::bin;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const HELLO: &str = "hello from the upstream";

/// Allows every host but `refused.example`; lifts the forbidden ranges for `literals` only.
struct Policy {
    literals: Vec<(IpAddr, u16)>,
}

impl Decide for Policy {
    fn decide(&self, host: &str, _port: u16) -> Verdict {
        if host == "refused.example" {
            Verdict::Refuse {
                policy: "org acme: allow list".into(),
                reason: "refused.example is not on the org's list".into(),
                hint: "`outboard-server admin network set --org acme registries+ refused.example`"
                    .into(),
            }
        } else {
            Verdict::Allow
        }
    }

    fn allows_literal(&self, ip: IpAddr, port: u16) -> bool {
        self.literals.contains(&(ip, port))
    }

    fn injections(&self, _host: &str, _port: u16) -> Vec<Arc<Injection>> {
        Vec::new()
    }
}

fn sandbox(literals: Vec<(IpAddr, u16)>, limits: NetLimits, server_ports: Vec<u16>) -> NetSandbox {
    net_sandbox("s_network", Arc::new(Policy { literals }), limits, None, server_ports)
}

/// An HTTP upstream on 127.0.0.1: `/` answers [`HELLO`], `/big` one MiB.
async fn http_upstream() -> SocketAddr {
    use axum::routing::get;
    let app = axum::Router::new()
        .route("/", get(|| async { format!("{HELLO}\n") }))
        .route("/big", get(|| async { vec![b'x'; 1 << 20] }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    addr
}

/// An HTTPS upstream on 127.0.0.1 with a certificate from a throwaway CA (written to
/// `dir/ca.pem`); answers every request with `hello over tls`.
async fn https_upstream(dir: &Path) -> SocketAddr {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.distinguished_name.push(DnType::CommonName, "outboard network test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(DnType::CommonName, "the upstream itself");
    params.subject_alt_names.push(SanType::IpAddress(LOCAL));
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else { return };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if !matches!(tls.read(&mut byte).await, Ok(1)) {
                        return;
                    }
                    head.push(byte[0]);
                }
                let body = "hello over tls\n";
                let answer = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = tls.write_all(answer.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_reaches_a_named_http_upstream_through_the_proxy() {
    let up = http_upstream().await;
    let net = sandbox(vec![(LOCAL, up.port())], NetLimits::DEFAULT, vec![]);
    let r = exec(
        &net.sandbox,
        &format!(
            "echo \"$HTTP_PROXY $HTTPS_PROXY $http_proxy $https_proxy $ALL_PROXY $NO_PROXY \
             $no_proxy\"; {VIA_PROXY} curl -sS http://{up}/"
        ),
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{}", r.output);
    let proxy = "http://127.0.0.1:3128";
    assert_eq!(
        r.output,
        format!(
            "{proxy} {proxy} {proxy} {proxy} {proxy} localhost,127.0.0.1 localhost,127.0.0.1\n\
             {HELLO}\n"
        )
    );
    let e = net.audit.wait_for("the request", "127.0.0.1", up.port(), |e| e.allowed).await;
    assert!(e.reason.is_none(), "{e:?}");
    assert!(e.bytes_up > 0 && e.bytes_down as usize > HELLO.len(), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_goes_through_connect_and_the_client_sees_the_upstreams_own_certificate() {
    let pki = tempfile::tempdir().unwrap();
    let up = https_upstream(pki.path()).await;
    let net = sandbox(vec![(LOCAL, up.port())], NetLimits::DEFAULT, vec![]);
    std::fs::copy(pki.path().join("ca.pem"), net.ws.join("ca.pem")).unwrap();
    let r =
        exec(&net.sandbox, &format!("{VIA_PROXY} curl -sS -v --cacert ca.pem https://{up}/ 2>&1"))
            .await;
    assert_eq!(r.exit_code, Some(0), "{}", r.output);
    assert!(r.output.contains("CONNECT tunnel established, response 200"), "{}", r.output);
    assert!(r.output.contains("subject: CN=the upstream itself"), "{}", r.output);
    assert!(r.output.contains("issuer: CN=outboard network test CA"), "{}", r.output);
    assert!(r.output.ends_with("hello over tls\n"), "{}", r.output);
    let e = net.audit.wait_for("the tunnel", "127.0.0.1", up.port(), |e| e.allowed).await;
    // The TLS handshake went both ways through the tunnel.
    assert!(e.bytes_up > 200 && e.bytes_down > 500, "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_the_policy_refuses_gets_a_403_that_explains() {
    let net = sandbox(vec![], NetLimits::DEFAULT, vec![]);
    let r = exec(
        &net.sandbox,
        "curl -sS -w '%{http_code}\\n' http://refused.example/; \
         curl -sS https://refused.example/ 2>&1; true",
    )
    .await;
    assert!(
        r.output.starts_with("Outboard's network proxy refused refused.example:80.\n"),
        "{}",
        r.output
    );
    assert!(r.output.contains("policy: org acme: allow list\n"), "{}", r.output);
    assert!(
        r.output.contains("reason: refused.example is not on the org's list\n"),
        "{}",
        r.output
    );
    assert!(
        r.output.contains(
            "to allow it: `outboard-server admin network set --org acme registries+ refused.example`\n403\n"
        ),
        "{}",
        r.output
    );
    assert!(r.output.contains("CONNECT tunnel failed, response 403"), "{}", r.output);
    for port in [80, 443] {
        let e = net.audit.wait_for("the refusal", "refused.example", port, |e| !e.allowed).await;
        assert!(e.reason.as_deref().unwrap().contains("not on the org's list"), "{e:?}");
        assert_eq!((e.bytes_up, e.bytes_down), (0, 0));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loopback_is_refused_after_resolution_unless_that_literal_and_port_were_named() {
    let named = http_upstream().await;
    let other = http_upstream().await;
    let net = sandbox(vec![(LOCAL, named.port())], NetLimits::DEFAULT, vec![]);
    let r = exec(
        &net.sandbox,
        &format!(
            "{VIA_PROXY} curl -sS http://localhost:{p}/; echo; \
             curl -sS http://127.0.0.1:{p}/; echo; curl -sS http://{named}/",
            p = other.port()
        ),
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{}", r.output);
    let sections: Vec<&str> = r.output.split("\n\n").collect();
    assert_eq!(sections.len(), 3, "{}", r.output);
    assert!(sections[0].contains(&format!("refused localhost:{}", other.port())), "{}", r.output);
    assert!(sections[0].contains("localhost resolves to"), "{}", r.output);
    assert!(sections[0].contains("a loopback address"), "{}", r.output);
    assert!(sections[1].contains("127.0.0.1 is a loopback address"), "{}", r.output);
    assert!(
        sections[1].contains(&format!("--org acme registries+ 127.0.0.1:{}", other.port())),
        "{}",
        r.output
    );
    assert_eq!(sections[2], format!("{HELLO}\n"));
    net.audit.wait_for("localhost", "localhost", other.port(), |e| !e.allowed).await;
    net.audit.wait_for("the unnamed port", "127.0.0.1", other.port(), |e| !e.allowed).await;
    net.audit.wait_for("the named port", "127.0.0.1", named.port(), |e| e.allowed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_gets_out_without_the_proxy_and_the_metadata_address_is_refused() {
    // Stands for the server's own port (and is a named upstream for the proxy).
    let up = http_upstream().await;
    let net = sandbox(vec![(LOCAL, up.port())], NetLimits::DEFAULT, vec![up.port()]);
    let r = exec(
        &net.sandbox,
        &format!(
            "(echo > /dev/tcp/127.0.0.1/{p}) 2>/dev/null && echo tcp-open || echo tcp-closed; \
             curl -sS --noproxy '*' http://127.0.0.1:{p}/ >/dev/null 2>&1 && echo direct-open \
             || echo direct-closed; \
             {VIA_PROXY} curl -sS http://169.254.169.254/latest/meta-data/; \
             curl -sS -o /dev/null -w '%{{http_code}}\\n' http://[fd00:ec2::254]/",
            p = up.port()
        ),
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{}", r.output);
    assert!(r.output.starts_with("tcp-closed\ndirect-closed\n"), "{}", r.output);
    assert!(r.output.contains("169.254.169.254 is the cloud metadata address"), "{}", r.output);
    assert!(r.output.ends_with("\n403\n"), "{}", r.output);
    net.audit.wait_for("metadata", "169.254.169.254", 80, |e| !e.allowed).await;
    net.audit.wait_for("metadata v6", "fd00:ec2::254", 80, |e| !e.allowed).await;
    // Nothing reached the upstream from the direct attempts: no entry for its port.
    assert!(net.audit.entries().iter().all(|e| e.port != up.port()), "{:?}", net.audit.entries());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_clone_over_http_goes_through_the_proxy() {
    use outboard_tests::git_http::{make_repo, GitHttp};
    let root = tempfile::tempdir().unwrap();
    make_repo(
        root.path(),
        "demo.git",
        &[("README.md", b"# demo\n"), ("src/lib.rs", b"fn f() {}\n")],
    )
    .unwrap();
    let host = GitHttp::start(root.path(), "git", "s3cret").unwrap();
    let port: u16 = host.authority().rsplit(':').next().unwrap().parse().unwrap();
    let net = sandbox(vec![(LOCAL, port)], NetLimits::DEFAULT, vec![]);
    let url = host.url("demo.git").replacen("http://", "http://git:s3cret@", 1);
    let r = exec(
        &net.sandbox,
        &format!("{VIA_PROXY} git clone -q {url} demo 2>&1 && cat demo/README.md"),
    )
    .await;
    assert_eq!(r.exit_code, Some(0), "{}", r.output);
    assert_eq!(r.output, "# demo\n");
    assert!(net.ws.join("demo/src/lib.rs").is_file());
    assert!(host.requests().len() >= 2, "{:?}", host.requests());
    net.audit.wait_for("the clone", "127.0.0.1", port, |e| e.allowed && e.bytes_down > 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_byte_budget_cuts_a_download_and_refuses_the_next_with_the_reason() {
    let up = http_upstream().await;
    let limits = NetLimits { session_bytes: 200_000, ..NetLimits::DEFAULT };
    let net = sandbox(vec![(LOCAL, up.port())], limits, vec![]);
    let r = exec(
        &net.sandbox,
        &format!(
            "{VIA_PROXY} curl -sS -o big http://{up}/big 2>&1; echo \"exit $?\"; wc -c < big; \
             curl -sS -w '%{{http_code}}\\n' http://{up}/"
        ),
    )
    .await;
    let lines: Vec<&str> = r.output.lines().collect();
    let exit = lines.iter().find(|l| l.starts_with("exit ")).unwrap();
    assert_ne!(*exit, "exit 0", "{}", r.output);
    let got: usize = lines.iter().find_map(|l| l.trim().parse().ok()).unwrap();
    assert!(got < 1 << 20, "the whole MiB came through: {}", r.output);
    assert!(r.output.contains("the session's network byte budget is spent"), "{}", r.output);
    assert!(r.output.ends_with("\n503\n"), "{}", r.output);
    let cut = net.audit.wait_for("the cut download", "127.0.0.1", up.port(), |e| e.allowed).await;
    assert!(cut.reason.as_deref().unwrap_or("").contains("budget"), "{cut:?}");
    net.audit.wait_for("the refusal", "127.0.0.1", up.port(), |e| !e.allowed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_network_the_sandbox_has_no_proxy_at_all() {
    let ws = tempfile::tempdir().unwrap();
    let config =
        SandboxConfig { agent_exe: Some(bin("outboard-server").unwrap()), ..SandboxConfig::Bwrap };
    let sandbox = Sandbox::new(config, ws.path().to_path_buf());
    let r = exec(
        &sandbox,
        "env | grep -ic proxy; ls /run/outboard; (echo > /dev/tcp/127.0.0.1/3128) 2>/dev/null \
         && echo open || echo closed",
    )
    .await;
    assert_eq!(r.output, "0\nagent\nclosed\n");
}
