//! `scripts/bench.sh network`: the sandbox's way out through the server's proxy, measured on
//! loopback with the real sandbox, relay and proxy. Prints tables, asserts nothing.
//!
//! - throughput of a 100 MiB download: `curl` on the host straight to the upstream, against
//!   `curl` in a sandbox through the proxy, tunnelled (`CONNECT`, `curl -p`) and forwarded
//!   (plain HTTP);
//! - the same over HTTPS: host `curl` straight to a TLS upstream, against the sandbox's `curl`
//!   tunnelled to it and intercepted (the proxy terminates TLS with the org CA's leaf, injects a
//!   header, re-originates verified TLS and scrubs the body);
//! - time to first byte of a new connection (`curl`'s `time_starttransfer`), direct against
//!   tunnelled: the difference is what the relay, the proxy's decision and its connect add;
//! - memory per open connection: RSS growth of this process (which hosts the proxy) and of the
//!   sandbox's agent (the relay) over 100 idle tunnels;
//! - sandbox cold start (first `exec("true")`) with the proxy wiring against without.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use outboard_server::netproxy::ca::OrgCa;
use outboard_server::netproxy::{
    Audit, AuditEntry, Decide, Injection, NetLimits, SessionNet, Verdict,
};
use outboard_server::sandbox::{Sandbox, SandboxConfig};
use outboard_shared::{OrgId, SessionId};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

/// The download's size.
const BIG: u64 = 100 << 20;
/// Downloads per path (best of, to keep the other engineer's build out of the number).
const DOWNLOADS: usize = 5;
/// New connections timed for the first byte.
const TTFB_RUNS: usize = 200;
/// Batches they are timed in, direct and tunnelled in turn.
const TTFB_BATCHES: usize = 10;
/// Idle tunnels held open for the memory figure.
const TUNNELS: usize = 100;
/// Cold starts per configuration.
const COLD_RUNS: usize = 30;
const T: Duration = Duration::from_secs(120);

/// Allows everything, and the upstream ports by literal; injects a secret into one port.
struct Open {
    ports: Vec<u16>,
    inject: Option<(u16, Arc<Injection>)>,
}

impl Decide for Open {
    fn decide(&self, _host: &str, _port: u16) -> Verdict {
        Verdict::Allow
    }

    fn allows_literal(&self, ip: IpAddr, port: u16) -> bool {
        ip == IpAddr::V4(Ipv4Addr::LOCALHOST) && self.ports.contains(&port)
    }

    fn injections(&self, _host: &str, port: u16) -> Vec<Arc<Injection>> {
        self.inject.iter().filter(|(p, _)| *p == port).map(|(_, i)| i.clone()).collect()
    }
}

/// Drops the records (the integrator's sink is a bounded channel; this measures the proxy).
struct Discard;

impl Audit for Discard {
    fn record(&self, _entry: AuditEntry) {}
}

fn pct(samples: &mut [f64], p: f64) -> f64 {
    samples.sort_by(f64::total_cmp);
    let i = ((samples.len() as f64 - 1.0) * p).round() as usize;
    samples[i]
}

/// A TLS configuration for 127.0.0.1 from a throwaway CA, and that CA (PEM).
fn test_tls() -> anyhow::Result<(Arc<rustls::ServerConfig>, String)> {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.distinguished_name.push(DnType::CommonName, "bench CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key)?;
    let key = KeyPair::generate()?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.subject_alt_names.push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    let cert = params.signed_by(&key, &ca, &ca_key)?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls_pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )?;
    Ok((Arc::new(config), ca.pem()))
}

/// Answers one connection: `/big` is [`BIG`] bytes, anything else 2.
async fn answer<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut s: S) {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf).await {
            Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
            _ => return,
        }
    }
    let big = head.starts_with(b"GET /big ");
    let len = if big { BIG } else { 2 };
    let answer = format!("HTTP/1.1 200 OK\r\ncontent-length: {len}\r\n\r\n");
    if s.write_all(answer.as_bytes()).await.is_err() {
        return;
    }
    let chunk = vec![b'x'; 256 * 1024];
    let mut left = len;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        if s.write_all(&chunk[..n]).await.is_err() {
            return;
        }
        left -= n as u64;
    }
    let _ = s.flush().await;
    // Idle tunnels stay open until the client goes.
    while matches!(s.read(&mut buf).await, Ok(n) if n > 0) {}
}

/// [`upstream`] over TLS with `config`.
fn tls_upstream(config: Arc<rustls::ServerConfig>) -> anyhow::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    let acceptor = tokio_rustls::TlsAcceptor::from(config);
    std::thread::spawn(move || {
        runtime.block_on(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
            while let Ok((s, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let _ = s.set_nodelay(true);
                    if let Ok(tls) = acceptor.accept(s).await {
                        answer(tls).await;
                    }
                });
            }
        });
    });
    Ok(addr)
}

/// An HTTP upstream on its own thread and runtime: `/big` is [`BIG`] bytes, anything else 2.
fn upstream() -> anyhow::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build()?;
    std::thread::spawn(move || {
        runtime.block_on(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else { return };
            while let Ok((s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let _ = s.set_nodelay(true);
                    answer(s).await;
                });
            }
        });
    });
    Ok(addr)
}

async fn exec(sandbox: &Sandbox, cmd: &str) -> anyhow::Result<String> {
    let r = sandbox.exec(cmd, T, &mut |_, _| {}, CancellationToken::new()).await?;
    if r.exit_code != Some(0) {
        bail!("{cmd} failed: {}", r.output);
    }
    Ok(r.output)
}

fn host_curl(args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new("curl").args(args).env_clear().output()?;
    if !out.status.success() {
        bail!("curl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|t| {
            t.lines().find_map(|l| l.strip_prefix("VmRSS:")?.trim().split(' ').next()?.parse().ok())
        })
        .unwrap_or(0)
}

fn network(ports: Vec<u16>, inject: Option<(u16, Arc<Injection>)>) -> anyhow::Result<SessionNet> {
    Ok(SessionNet {
        org: OrgId::from("bench"),
        org_name: "bench".into(),
        session: SessionId::from("s_bench"),
        user: "bench".into(),
        decide: Arc::new(Open { ports, inject }),
        audit: Arc::new(Discard),
        limits: NetLimits { max_connections: 4 * TUNNELS, ..NetLimits::DEFAULT },
        ca: Some(Arc::new(OrgCa::generate("bench")?)),
        env: Vec::new(),
    })
}

/// The sandbox's way out through the server's proxy on loopback: throughput, latency, tunnels and
/// injection (tables; asserts nothing). No arguments.
#[derive(clap::Parser)]
struct Args {}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    outboard_tests::bench::args::<Args>(|_| Ok(()));
    let up = upstream()?;
    let (tunnel_tls, tunnel_ca) = test_tls()?;
    let (inject_tls, inject_ca) = test_tls()?;
    let (tunnelled, intercepted) = (tls_upstream(tunnel_tls)?, tls_upstream(inject_tls)?);
    let injection = Arc::new(Injection {
        name: "BENCH".into(),
        header: "authorization".into(),
        header_value: "Bearer bench-secret-0123456789".into(),
        value: "bench-secret-0123456789".into(),
        placeholders: Vec::new(),
        upstream_ca: Some(inject_ca.clone()),
    });
    let plain = SandboxConfig {
        agent_exe: Some(outboard_tests::bench::server_exe("network")?),
        ..SandboxConfig::Bwrap
    };
    let net = network(
        vec![up.port(), tunnelled.port(), intercepted.port()],
        Some((intercepted.port(), injection)),
    )?;
    // A session whose org binds no secret has no CA (and no bundle to write and bind).
    let without_ca = SessionNet { ca: None, ..net.clone() };
    let proxy_only = SandboxConfig { network: Some(without_ca), ..plain.clone() };
    let wired = SandboxConfig { network: Some(net), ..plain.clone() };
    let ws = tempfile::tempdir()?;
    std::fs::write(ws.path().join("tunnel-ca.pem"), &tunnel_ca)?;
    std::fs::write(ws.path().join("inject-ca.pem"), &inject_ca)?;
    let sandbox = Sandbox::new(wired.clone(), ws.path().to_path_buf());
    exec(&sandbox, "true").await?;
    // The upstream is on the host's 127.0.0.1, which is NO_PROXY inside (see the tests).
    let via = "unset NO_PROXY no_proxy;";
    let url = format!("http://{up}/big");

    println!("## 100 MiB download on loopback (best of {DOWNLOADS}, interleaved)\n");
    println!("| path | MiB/s | ratio to direct |");
    println!("|---|---:|---:|");
    let speed = |out: &str| out.trim().parse::<f64>().unwrap_or(0.0) / f64::from(1 << 20);
    // Round by round, so a build running beside the bench weighs on every path alike.
    let paths = [("tunnelled (CONNECT)", "-p"), ("forwarded (plain HTTP)", "")];
    let mut direct: f64 = 0.0;
    let mut best = [0.0f64; 2];
    for _ in 0..DOWNLOADS {
        let out = host_curl(&["-sS", "-o", "/dev/null", "-w", "%{speed_download}", &url])?;
        direct = direct.max(speed(&out));
        for ((_, flag), best) in paths.iter().zip(best.iter_mut()) {
            let cmd = format!("{via} curl -sS {flag} -o /dev/null -w '%{{speed_download}}' {url}");
            *best = best.max(speed(&exec(&sandbox, &cmd).await?));
        }
    }
    println!("| direct (host curl) | {direct:.0} | 1.00 |");
    for ((name, _), best) in paths.iter().zip(best) {
        println!("| {name} | {best:.0} | {:.2} |", best / direct);
    }

    println!("\n## 100 MiB download over HTTPS on loopback (best of {DOWNLOADS})\n");
    println!("| path | MiB/s | ratio to direct |");
    println!("|---|---:|---:|");
    let mut direct_tls: f64 = 0.0;
    let direct_url = format!("https://{tunnelled}/big");
    let ca_file = ws.path().join("tunnel-ca.pem");
    let ca_file = ca_file.to_string_lossy();
    for _ in 0..DOWNLOADS {
        let out = host_curl(&[
            "-sS",
            "--cacert",
            &ca_file,
            "-o",
            "/dev/null",
            "-w",
            "%{speed_download}",
            &direct_url,
        ])?;
        direct_tls = direct_tls.max(speed(&out));
    }
    println!("| direct (host curl) | {direct_tls:.0} | 1.00 |");
    let rows = [
        ("tunnelled (CONNECT, the upstream's TLS)", format!("--cacert tunnel-ca.pem {direct_url}")),
        (
            "intercepted (TLS terminated, header injected, body scrubbed)",
            format!("https://{intercepted}/big"),
        ),
    ];
    for (name, args) in rows {
        let mut best: f64 = 0.0;
        for _ in 0..DOWNLOADS {
            let cmd = format!("{via} curl -sS -o /dev/null -w '%{{speed_download}}' {args}");
            best = best.max(speed(&exec(&sandbox, &cmd).await?));
        }
        println!("| {name} | {best:.0} | {:.2} |", best / direct_tls);
    }

    println!("\n## time to first byte of a new connection, ms (n={TTFB_RUNS})\n");
    println!("| path | p50 | p99 |");
    println!("|---|---:|---:|");
    let small = format!("http://{up}/small");
    // In batches, direct and tunnelled in turn, so a neighbour's load weighs on both alike.
    let mut direct_t = Vec::with_capacity(TTFB_RUNS);
    let mut tunnel_t = Vec::with_capacity(TTFB_RUNS);
    let per_batch = TTFB_RUNS / TTFB_BATCHES;
    let cmd = format!(
        "{via} for i in $(seq {per_batch}); do curl -sS -p -o /dev/null \
         -w '%{{time_starttransfer}}\\n' {small}; done"
    );
    for _ in 0..TTFB_BATCHES {
        for _ in 0..per_batch {
            let out =
                host_curl(&["-sS", "-o", "/dev/null", "-w", "%{time_starttransfer}", &small])?;
            direct_t.push(out.trim().parse::<f64>().unwrap_or(0.0) * 1000.0);
        }
        tunnel_t.extend(
            exec(&sandbox, &cmd)
                .await?
                .lines()
                .filter_map(|l| l.trim().parse::<f64>().ok())
                .map(|s| s * 1000.0),
        );
    }
    let (d50, d99) = (pct(&mut direct_t, 0.5), pct(&mut direct_t, 0.99));
    let (t50, t99) = (pct(&mut tunnel_t, 0.5), pct(&mut tunnel_t, 0.99));
    println!("| direct (host curl) | {d50:.3} | {d99:.3} |");
    println!("| tunnelled | {t50:.3} | {t99:.3} |");
    println!("| added by the proxy path | {:.3} | {:.3} |", t50 - d50, t99 - d99);

    println!("\n## memory per open connection ({TUNNELS} idle tunnels)\n");
    let agent = sandbox.pid().await.context("no agent pid")?;
    let (server_before, agent_before) = (rss_kib(std::process::id()), rss_kib(agent));
    let script = format!(
        "import socket,time\n\
         s=[]\n\
         for i in range({TUNNELS}):\n\
         \x20   c=socket.create_connection(('127.0.0.1',3128))\n\
         \x20   c.sendall(b'CONNECT {up} HTTP/1.1\\r\\n\\r\\n')\n\
         \x20   assert c.recv(4096).startswith(b'HTTP/1.1 200')\n\
         \x20   s.append(c)\n\
         open('/tmp/ready','w').write('ready')\n\
         time.sleep(600)\n"
    );
    std::fs::write(ws.path().join("tunnels.py"), script)?;
    exec(&sandbox, "rm -f /tmp/ready; (python3 tunnels.py > /tmp/tunnels.log 2>&1 &); true")
        .await?;
    let deadline = Instant::now() + T;
    while exec(&sandbox, "test -f /tmp/ready").await.is_err() {
        if Instant::now() > deadline {
            bail!("the tunnels did not open: {}", exec(&sandbox, "cat /tmp/tunnels.log").await?);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (server_after, agent_after) = (rss_kib(std::process::id()), rss_kib(agent));
    let per = |before: u64, after: u64| after.saturating_sub(before) as f64 / TUNNELS as f64;
    println!("| side | RSS before, KiB | after, KiB | per connection, KiB |");
    println!("|---|---:|---:|---:|");
    println!(
        "| server (proxy; this process, upstream included) | {server_before} | {server_after} | {:.1} |",
        per(server_before, server_after)
    );
    println!(
        "| sandbox agent (relay) | {agent_before} | {agent_after} | {:.1} |",
        per(agent_before, agent_after)
    );
    sandbox.stop().await;
    drop(sandbox);

    println!("\n## sandbox cold start, first exec(\"true\"), ms (n={COLD_RUNS} each)\n");
    println!("| wiring | p50 | p99 |");
    println!("|---|---:|---:|");
    // Interleaved, so a build running beside the bench weighs on both alike.
    let configs = [
        ("no network", &plain),
        ("proxy wired", &proxy_only),
        ("proxy wired, with the org CA bundle", &wired),
    ];
    let mut samples = [
        Vec::with_capacity(COLD_RUNS),
        Vec::with_capacity(COLD_RUNS),
        Vec::with_capacity(COLD_RUNS),
    ];
    for _ in 0..COLD_RUNS {
        for (i, (_, config)) in configs.iter().enumerate() {
            let sandbox = Sandbox::new((*config).clone(), ws.path().to_path_buf());
            let start = Instant::now();
            exec(&sandbox, "true").await?;
            samples[i].push(start.elapsed().as_secs_f64() * 1000.0);
            sandbox.stop().await;
        }
    }
    let mut rows = Vec::new();
    for ((name, _), samples) in configs.iter().zip(samples.iter_mut()) {
        let (p50, p99) = (pct(samples, 0.5), pct(samples, 0.99));
        println!("| {name} | {p50:.2} | {p99:.2} |");
        rows.push(p50);
    }
    println!("| difference, proxy (p50) | {:.2} | |", rows[1] - rows[0]);
    println!("| difference, proxy and CA bundle (p50) | {:.2} | |", rows[2] - rows[0]);
    Ok(())
}
