//! `scripts/bench.sh mcp`: what an MCP tool call costs through Outboard's hub
//! ([`outboard_server::mcp::McpHub::call`]: definition lookup, the shared connection, the call,
//! the result rendered as the model's text) against the same call made directly with the same
//! SDK client (`rmcp`) on a connection of its own, both to the test stdio server on the official
//! Python SDK (`tests/mcp/stdio_server.py`). The model loop is left out: through a whole turn
//! the mock model's latency would swamp a sub-millisecond difference. Then calls per second with
//! 16 concurrent callers (sessions) sharing the hub's one connection, and the same with 16
//! callers on the direct connection. Nothing here asserts: the numbers are for people.
//! `bench_mcp [--quick]`.

use std::time::{Duration, Instant};

use outboard_server::mcp::config::{ServerDef, Transport};
use outboard_server::mcp::McpHub;
use outboard_server::store::{Durability, Store};
use outboard_tests::bench::{percentile, us};
use rmcp::model::CallToolRequestParams;
use rmcp::ServiceExt as _;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const CALLERS: usize = 16;

fn server_script() -> String {
    format!("{}/mcp/stdio_server.py", env!("CARGO_MANIFEST_DIR"))
}

fn row(label: &str, mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let (p50, p99) = (percentile(&samples, 0.50), percentile(&samples, 0.99));
    println!("{label:<34} {:>10.1} {:>10.1}", us(p50), us(p99));
    (p50, p99)
}

/// An MCP tool call through the server's hub against the same call made directly, and calls per
/// second with 16 callers on one connection (tables; asserts nothing).
#[derive(clap::Parser)]
struct Args {
    /// Fewer calls, to try the bench itself.
    #[arg(long)]
    quick: bool,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> anyhow::Result<()> {
    let quick = outboard_tests::bench::args::<Args>(|_| Ok(())).quick;
    let calls = if quick { 200 } else { 2000 };
    let data = tempfile::tempdir()?;
    let store = Store::open(&data.path().join("outboard.db"), Durability::Normal)?;
    store.add_user("bench", "bench").await?;
    let org = store
        .call(|c| outboard_server::store::org_id_by_name(c, "bench"))
        .await?
        .ok_or_else(|| anyhow::anyhow!("no org"))?;
    let def = ServerDef {
        name: "bench".into(),
        transport: Transport::Stdio {
            command: "python3".into(),
            args: vec![server_script()],
            env: vec![],
        },
    };
    outboard_server::mcp::config::put(&store, &org, &def).await?;
    let hub = McpHub::new(store.clone(), None);
    let tools = hub.org_tools(&org).await;
    anyhow::ensure!(!tools.specs.is_empty(), "the hub did not connect: {}", tools.prompt);

    let mut cmd = tokio::process::Command::new("python3");
    cmd.arg(server_script());
    // Its log lines ("Processing request …") would flood the table; the hub drains its own.
    let (process, _) = rmcp::transport::TokioChildProcess::builder(cmd)
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let direct = ().serve(process).await?;
    let peer = direct.peer().clone();
    let params = || {
        let args = json!({"text": "hello"}).as_object().cloned().unwrap_or_default();
        CallToolRequestParams::new("echo").with_arguments(args)
    };
    let cancel = CancellationToken::new();
    let input = json!({"text": "hello"});
    // Warm both paths.
    for _ in 0..50 {
        peer.call_tool(params()).await?;
        hub.call(&org, "mcp__bench__echo", &input, &cancel).await;
    }
    let (mut d, mut h) = (Vec::with_capacity(calls), Vec::with_capacity(calls));
    // Interleaved, so a drift of the machine's load hits both alike.
    for _ in 0..calls {
        let t = Instant::now();
        peer.call_tool(params()).await?;
        d.push(t.elapsed());
        let t = Instant::now();
        let out = hub.call(&org, "mcp__bench__echo", &input, &cancel).await;
        h.push(t.elapsed());
        anyhow::ensure!(!out.is_error, "{}", out.output);
    }
    println!("one MCP tool call (echo), {calls} calls each, µs");
    println!("{:<34} {:>10} {:>10}", "", "p50", "p99");
    let (d50, d99) = row("direct rmcp client", d);
    let (h50, h99) = row("through Outboard's McpHub", h);
    println!(
        "{:<34} {:>10.1} {:>10.1}",
        "added by Outboard",
        us(h50.saturating_sub(d50)),
        us(h99.saturating_sub(d99))
    );

    let total = calls * 2;
    let per = total / CALLERS;
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CALLERS {
        let (hub, org, input, cancel) = (hub.clone(), org.clone(), input.clone(), cancel.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..per {
                hub.call(&org, "mcp__bench__echo", &input, &cancel).await;
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    let hub_rate = (per * CALLERS) as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CALLERS {
        let peer = peer.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..per {
                let args = json!({"text": "hello"}).as_object().cloned().unwrap_or_default();
                let _ =
                    peer.call_tool(CallToolRequestParams::new("echo").with_arguments(args)).await;
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    let direct_rate = (per * CALLERS) as f64 / t.elapsed().as_secs_f64();
    println!();
    println!("{CALLERS} concurrent callers on one server connection, {} calls", per * CALLERS);
    println!("{:<34} {:>10.0} calls/s", "direct rmcp client", direct_rate);
    println!("{:<34} {:>10.0} calls/s", "through Outboard's McpHub", hub_rate);
    let _ = direct.cancel().await;
    Ok(())
}
