//! The long crash run: `crash [SESSIONS] [KILLS] [SEED] [--nodes N]` (see `outboard_tests::crash`), printed
//! as a table. `scripts/crash.sh` runs it.

use outboard_tests::crash::{run, CrashConfig};
use outboard_tests::harness::Api;

/// Mock sessions on one real server (or several nodes) killed at random; every session must end complete and
/// consistent (a table per provider; exits 1 if one does not).
#[derive(clap::Parser)]
struct Args {
    /// Concurrent sessions.
    #[arg(default_value_t = 8)]
    sessions: usize,
    /// Kills per provider.
    #[arg(default_value_t = 30)]
    kills: usize,
    /// The random seed (default: `CRASH_SEED`, else the clock), to replay a run.
    seed: Option<u64>,
    /// The org's live-sandbox quota for the run (default: the server's, 8; sessions beyond it
    /// wait in the org's queue).
    #[arg(long)]
    live_sandboxes: Option<u64>,
    /// Nodes of one PostgreSQL store (a random one killed each time, its sessions taken over by
    /// the others); 1: one server on SQLite.
    #[arg(long, default_value_t = 1)]
    nodes: usize,
}

fn main() -> anyhow::Result<()> {
    let Args { sessions, kills, seed, live_sandboxes, nodes } =
        outboard_tests::bench::args(|_: &Args| Ok(()));
    let seed = seed.unwrap_or_else(outboard_tests::crash::seed);
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    println!(
        "| provider | nodes | sessions | kills | seed | model calls | approvals | MCP calls | compactions | unknown outcomes | events | result |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut failed = false;
    for api in [Api::Anthropic, Api::OpenAi] {
        let config =
            CrashConfig { sessions, kills, api, gap_ms: (100, 900), seed, live_sandboxes, nodes };
        match rt.block_on(run(config)) {
            Ok(r) => println!(
                "| {} | {nodes} | {} | {} | {seed} | {} | {} | {} | {} | {} | {} | all complete and consistent |",
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
                    "| {} | {nodes} | {sessions} | {kills} | {seed} | | | | | | | FAILED: {e:#} |",
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
