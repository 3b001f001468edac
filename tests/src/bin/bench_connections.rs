//! `scripts/bench.sh connections`: what one WebSocket connection makes the real server hold, as
//! a table (asserts nothing). `bench_connections [--quick]`.
//!
//! Against one `outboard-server` process and a session of 2,000 events whose history pages are
//! about 1 MiB each, three kinds of connection, one kind at a time, each kind's connections open
//! together (under the 64-per-address cap):
//!
//! - idle: `hello`, then nothing;
//! - slow: 20 history requests, then one frame read a second;
//! - non-reading: 150 history requests and nothing read (the server cuts each at its outbound
//!   bound, 9 MiB).
//!
//! For each: the server's VmRSS before, with them open (slow, non-reading: after 10 s), and its
//! peak (VmHWM), and the growth per connection.

use std::time::Duration;

use futures_util::{SinkExt as _, StreamExt as _};
use outboard_tests::harness::{Api, TestServer};
use outboard_tests::long_session;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message as Ws;

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// What one connection makes the server hold (a table; asserts nothing).
#[derive(clap::Parser)]
struct Args {
    /// Fewer connections, to try the bench itself.
    #[arg(long)]
    quick: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let Args { quick } = outboard_tests::bench::args(|_: &Args| Ok(()));
    let data = tempfile::tempdir()?;
    let store = long_session::open(data.path())?;
    let (owner, token) = long_session::user(&store, "alice", "acme").await?;
    let (session, last) = long_session::seed(&store, &owner, 2_000, 8, 6_000).await?;
    drop(store);
    let server = TestServer::start_in(data, Api::Anthropic, "http://127.0.0.1:9", &[])?;
    let pid = server.pid();
    let (idle_n, slow_n, unread_n) = if quick { (10, 4, 4) } else { (60, 20, 20) };
    let history = |id: u64| {
        json!({"type": "request", "id": id, "method": "session/history",
            "params": {"session_id": session.0, "before": last + 1}})
        .to_string()
    };

    println!("server memory per connection (real outboard-server, one kind at a time)");
    println!(
        "{:>12} {:>6} {:>12} {:>12} {:>12} {:>14} {:>14}",
        "kind", "conns", "RSS before", "RSS open", "RSS peak", "per conn", "peak per conn"
    );
    let row = |kind: &str, n: usize, before: u64, open: u64, peak_before: u64, peak: u64| {
        println!(
            "{:>12} {:>6} {:>8.1} MiB {:>8.1} MiB {:>8.1} MiB {:>10.1} KiB {:>10.1} KiB",
            kind,
            n,
            before as f64 / 1024.0,
            open as f64 / 1024.0,
            peak as f64 / 1024.0,
            open.saturating_sub(before) as f64 / n as f64,
            peak.saturating_sub(peak_before.max(before)) as f64 / n as f64,
        );
    };

    // Idle.
    let (before, peak_before) = (vm(pid, "VmRSS")?, vm(pid, "VmHWM")?);
    let mut idle = Vec::new();
    for _ in 0..idle_n {
        idle.push(hello(&server.url, &token).await?);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    row("idle", idle_n, before, vm(pid, "VmRSS")?, peak_before, vm(pid, "VmHWM")?);
    drop(idle);
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Slow: a frame a second.
    let (before, peak_before) = (vm(pid, "VmRSS")?, vm(pid, "VmHWM")?);
    let mut readers = Vec::new();
    for _ in 0..slow_n {
        let mut ws = hello(&server.url, &token).await?;
        for id in 1..=20 {
            ws.send(Ws::Text(history(id).into())).await?;
        }
        readers.push(tokio::spawn(async move {
            for _ in 0..30 {
                if ws.next().await.is_none() {
                    break;
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            ws
        }));
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    row("slow", slow_n, before, vm(pid, "VmRSS")?, peak_before, vm(pid, "VmHWM")?);
    for r in readers {
        r.abort();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Non-reading: cut at the bound.
    let (before, peak_before) = (vm(pid, "VmRSS")?, vm(pid, "VmHWM")?);
    let mut silent = Vec::new();
    for _ in 0..unread_n {
        let mut ws = hello(&server.url, &token).await?;
        for id in 1..=150 {
            if ws.send(Ws::Text(history(id).into())).await.is_err() {
                break;
            }
        }
        silent.push(ws);
    }
    tokio::time::sleep(Duration::from_secs(10)).await;
    let cut = server.log().matches("cutting a connection").count();
    row("non-reading", unread_n, before, vm(pid, "VmRSS")?, peak_before, vm(pid, "VmHWM")?);
    println!("({cut} of the {unread_n} non-reading connections cut by the server)");
    drop(silent);
    Ok(())
}

async fn hello(url: &str, token: &str) -> anyhow::Result<Socket> {
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await?;
    let hello = json!({"type": "hello", "protocol_version": outboard_shared::PROTOCOL_VERSION,
        "token": token, "client": "bench"});
    ws.send(Ws::Text(hello.to_string().into())).await?;
    ws.next().await.ok_or_else(|| anyhow::anyhow!("closed before welcome"))??;
    Ok(ws)
}

/// A `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`).
fn vm(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .ok_or_else(|| anyhow::anyhow!("no {field} in /proc/{pid}/status"))?;
    Ok(line.split_whitespace().nth(1).unwrap_or("0").parse()?)
}
