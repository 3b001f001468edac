//! `scripts/bench.sh hooks`: what a hook adds to a tool call, through the real server binary
//! (beside the bench), its real sandbox and the mock model over HTTP. One turn makes
//! `--calls` `Bash true` calls one after another, with no hook, with a repository
//! `PreToolUse` hook (`true`, run in the session's awake sandbox), and with an org webhook on a
//! loopback HTTP server answering `{}` (signed, checked by nothing). It prints each case's
//! median turn time over `--turns` turns and the time added per call against no hook. Nothing
//! here asserts: the numbers are for people. `bench_hooks [--calls N] [--turns N]`.

use std::time::{Duration, Instant};

use axum::routing::post;
use clap::Parser;
use outboard_tests::fixture::{self, admin_ok};
use outboard_tests::harness::{Api, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep, MockToolCall};
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// Tool calls a turn.
    #[arg(long, default_value_t = 20)]
    calls: usize,
    /// Turns a case (the median is shown).
    #[arg(long, default_value_t = 5)]
    turns: usize,
}

#[derive(Clone, Copy, PartialEq)]
enum Case {
    None,
    Sandboxed,
    Webhook,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::None => "no hook",
            Case::Sandboxed => "repository hook (sandbox)",
            Case::Webhook => "org webhook (loopback)",
        }
    }
}

async fn run(case: Case, args: &Args, webhook: &str) -> anyhow::Result<Duration> {
    let mock = MockLlm::start(vec![]).await?;
    let server = fixture::serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("bench", "acme")?;
    let mut client = WsClient::connect(&server.url, &token).await?;
    let sid = client.new_session().await?;
    let workspace = server.workspace(&sid);
    std::fs::create_dir_all(workspace.join(".claude"))?;
    match case {
        Case::None => {}
        Case::Sandboxed => std::fs::write(
            workspace.join(".claude/settings.json"),
            json!({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"command": "true"}]}]}})
                .to_string(),
        )?,
        Case::Webhook => {
            let host = webhook.trim_start_matches("http://").split('/').next().unwrap_or_default();
            admin_ok(
                &server,
                &["secret", "set", "--org", "acme", "--host", host, "k"],
                Some("key"),
            );
            let args = ["hook", "add", "--org", "acme", "--event", "PreToolUse", webhook];
            admin_ok(&server, &args, None);
        }
    }
    // A first turn wakes the sandbox.
    mock.push(MockStep::tool_calls(vec![MockToolCall::new("Bash", json!({"command": "true"}))]));
    mock.push(MockStep::text("awake"));
    client.turn(&sid, "wake").await?;
    let mut times = Vec::new();
    for _ in 0..args.turns {
        for _ in 0..args.calls {
            let call = MockToolCall::new("Bash", json!({"command": "true"}));
            mock.push(MockStep::tool_calls(vec![call]));
        }
        mock.push(MockStep::text("done"));
        let start = Instant::now();
        client.turn(&sid, "go").await?;
        times.push(start.elapsed());
    }
    times.sort();
    Ok(times[times.len() / 2])
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let app = axum::Router::new().route("/hook", post(|| async { axum::Json(json!({})) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let webhook = format!("http://{}/hook", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    println!("hooks: a turn of {} `Bash true` calls, median of {} turns", args.calls, args.turns);
    println!("{:<28} {:>12} {:>16}", "case", "turn (ms)", "added/call (ms)");
    let mut base = None;
    for case in [Case::None, Case::Sandboxed, Case::Webhook] {
        let turn = run(case, &args, &webhook).await?;
        let base = *base.get_or_insert(turn);
        let added = (turn.as_secs_f64() - base.as_secs_f64()) * 1000.0 / args.calls as f64;
        let added = if case == Case::None { "—".to_owned() } else { format!("{added:.2}") };
        println!("{:<28} {:>12.1} {:>16}", case.name(), turn.as_secs_f64() * 1000.0, added);
    }
    Ok(())
}
