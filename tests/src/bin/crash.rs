//! The long crash run: `crash [SESSIONS] [KILLS] [SEED]` (see `outboard_tests::crash`), printed
//! as a table. `scripts/crash.sh` runs it.

use outboard_tests::crash::{run, CrashConfig};
use outboard_tests::harness::Api;

/// Mock sessions on one real server killed at random; every session must end complete and
/// consistent (a table per provider; exits 1 if one does not).
#[derive(clap::Parser)]
struct Args {
    /// Concurrent sessions.
    #[arg(default_value_t = 8)]
    sessions: usize,
    /// Kills per provider.
    #[arg(default_value_t = 30)]
    kills: usize,
    /// The random seed (default: the clock), to replay a run.
    seed: Option<u64>,
    /// The org's live-sandbox quota for the run (default: the server's, 8; sessions beyond it
    /// wait in the org's queue).
    #[arg(long)]
    live_sandboxes: Option<u64>,
}

fn main() -> anyhow::Result<()> {
    let Args { sessions, kills, seed, live_sandboxes } =
        outboard_tests::bench::args(|_: &Args| Ok(()));
    let seed = match seed {
        Some(seed) => seed,
        None => {
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos() as u64
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    println!(
        "| provider | sessions | kills | seed | model calls | approvals | MCP calls | compactions | unknown outcomes | events | result |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut failed = false;
    for api in [Api::Anthropic, Api::OpenAi] {
        let config = CrashConfig { sessions, kills, api, gap_ms: (100, 900), seed, live_sandboxes };
        match rt.block_on(run(config)) {
            Ok(r) => println!(
                "| {} | {} | {} | {seed} | {} | {} | {} | {} | {} | {} | all complete and consistent |",
                api.provider(),
                r.sessions,
                r.kills,
                r.model_calls,
                r.approvals,
                r.mcp_calls,
                r.compactions,
                r.unknown_outcomes,
                r.events
            ),
            Err(e) => {
                failed = true;
                println!(
                    "| {} | {sessions} | {kills} | {seed} | | | | | | | FAILED: {e:#} |",
                    api.provider()
                );
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
    Ok(())
}
