//! `mock-llm`: the scripted mock LLM server as a process, for manual runs and for suites that
//! drive the real server binary. The script format is documented in
//! `outboard_tests::mock_llm`. Prints `listening on http://ADDR` as its first stdout line, then
//! serves until killed; `GET /_mock/requests` returns what it received.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use outboard_tests::mock_llm::{MockLlm, MockScript};

/// Serve a scripted mock of the Anthropic and OpenAI streaming APIs.
#[derive(Debug, clap::Parser)]
#[command(name = "mock-llm")]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// The JSON script: an array of steps or `{"steps": [...], "openai": {...}}`.
    #[arg(long)]
    script: PathBuf,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = outboard_tests::bench::args::<Args>(|_| Ok(()));
    let text = std::fs::read_to_string(&args.script)
        .with_context(|| format!("while reading the script {}", args.script.display()))?;
    let script = MockScript::from_json(&text)
        .with_context(|| format!("while parsing the script {}", args.script.display()))?;
    let mock = MockLlm::start_script(script, &args.listen).await?;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "listening on http://{}", mock.addr()).context("while writing to stdout")?;
    stdout.flush().context("while flushing stdout")?;
    drop(stdout);
    tokio::signal::ctrl_c().await.context("while waiting for a signal")?;
    Ok(())
}
