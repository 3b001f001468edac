//! `scripts/bench.sh streamjson`: what Claude Code's stream-json front end adds to a turn over
//! the same turn through `outboard run --json` (issue 53). The real `outboard` and
//! `outboard-server` binaries (beside the bench) and the mock model over HTTP; every turn is one
//! text answer in the same session. Three cases, each the median of `--turns` turns:
//!
//! - `run --json`: one process per turn (`outboard run --json --session ID PROMPT`), spawn to exit;
//! - `run --output-format stream-json`: the same, writing Claude Code's messages instead;
//! - `stream-json session`: one long-lived `outboard --input-format stream-json` process, from
//!   writing the user message to reading its `result` (no process start, no connect).
//!
//! The first two differ only in the output path, so their difference is what the translation
//! costs; the third is what a program driving a session through the SDK waits per turn. Nothing
//! here asserts: the numbers are for people. `bench_streamjson [--turns N]`.

use std::process::Stdio;
use std::time::{Duration, Instant};

use clap::Parser;
use outboard_tests::fixture;
use outboard_tests::harness::{bin, Api, WsClient};
use outboard_tests::mock_llm::{MockLlm, MockStep};
use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::process::Command;

#[derive(Parser)]
struct Args {
    /// Turns a case (the median is shown).
    #[arg(long, default_value_t = 15)]
    turns: usize,
}

fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times[times.len() / 2]
}

fn command(url: &str, token: &str) -> anyhow::Result<Command> {
    let mut cmd = Command::new(bin("outboard")?);
    cmd.env("OUTBOARD_SERVER", url)
        .env("OUTBOARD_TOKEN", token)
        .env("XDG_CONFIG_HOME", std::env::temp_dir().join("outboard-bench-no-config"))
        .stderr(Stdio::null());
    Ok(cmd)
}

async fn one_shot(
    mock: &MockLlm,
    url: &str,
    token: &str,
    sid: &str,
    flags: &[&str],
    turns: usize,
) -> anyhow::Result<Duration> {
    let mut times = Vec::new();
    for _ in 0..turns {
        mock.push(MockStep::text("done"));
        let start = Instant::now();
        let out = command(url, token)?
            .args(["run", "--session", sid])
            .args(flags)
            .arg("go")
            .stdin(Stdio::null())
            .output()
            .await?;
        times.push(start.elapsed());
        anyhow::ensure!(out.status.success(), "outboard run {flags:?} failed");
    }
    Ok(median(times))
}

async fn session(
    mock: &MockLlm,
    url: &str,
    token: &str,
    sid: &str,
    turns: usize,
) -> anyhow::Result<Duration> {
    let mut child = command(url, token)?
        .args(["--input-format", "stream-json", "--output-format", "stream-json", "--resume", sid])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or_else(|| anyhow::anyhow!("no stdin"))?;
    let stdout = child.stdout.take().ok_or_else(|| anyhow::anyhow!("no stdout"))?;
    let mut lines = BufReader::new(stdout).lines();
    let prompt = json!({"type": "user", "message": {"role": "user", "content": "go"}});
    let mut line = serde_json::to_vec(&prompt)?;
    line.push(b'\n');
    let mut times = Vec::new();
    // One turn first: the connection and the attach are not a turn's cost.
    for i in 0..=turns {
        mock.push(MockStep::text("done"));
        let start = Instant::now();
        stdin.write_all(&line).await?;
        stdin.flush().await?;
        loop {
            let Some(out) = lines.next_line().await? else { anyhow::bail!("stdout ended") };
            if out.contains("\"type\":\"result\"") {
                break;
            }
        }
        if i > 0 {
            times.push(start.elapsed());
        }
    }
    drop(stdin);
    child.wait().await?;
    Ok(median(times))
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mock = MockLlm::start(vec![]).await?;
    let server = fixture::serve(&mock, Api::Anthropic, &[]);
    let token = server.add_user("bench", "acme")?;
    let mut client = WsClient::connect(&server.url, &token).await?;
    let sid = client.new_session().await?;
    mock.push(MockStep::text("awake"));
    client.turn(&sid, "wake").await?;
    drop(client);
    let url = server.url.clone();
    let json = one_shot(&mock, &url, &token, &sid, &["--json"], args.turns).await?;
    let stream =
        one_shot(&mock, &url, &token, &sid, &["--output-format", "stream-json"], args.turns)
            .await?;
    let held = session(&mock, &url, &token, &sid, args.turns).await?;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("stream-json: a one-answer turn, median of {} turns", args.turns);
    println!("{:<36} {:>10} {:>18}", "case", "turn (ms)", "vs run --json (ms)");
    println!("{:<36} {:>10.2} {:>18}", "run --json (process per turn)", ms(json), "—");
    println!(
        "{:<36} {:>10.2} {:>18.2}",
        "run --output-format stream-json",
        ms(stream),
        ms(stream) - ms(json)
    );
    println!(
        "{:<36} {:>10.2} {:>18.2}",
        "stream-json session (held open)",
        ms(held),
        ms(held) - ms(json)
    );
    Ok(())
}
