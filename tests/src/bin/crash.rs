//! The long crash run: `crash [SESSIONS] [KILLS] [SEED]` (see `outboard_tests::crash`), printed
//! as a table. `scripts/crash.sh` runs it.

use outboard_tests::crash::{run, CrashConfig};
use outboard_tests::harness::Api;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: u64| -> anyhow::Result<u64> {
        Ok(match args.get(i) {
            Some(a) => a.parse()?,
            None => default,
        })
    };
    let sessions = arg(0, 8)? as usize;
    let kills = arg(1, 30)? as usize;
    let seed = arg(
        2,
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_nanos() as u64,
    )?;
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    println!(
        "| provider | sessions | kills | seed | model calls | unknown outcomes | events | result |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let mut failed = false;
    for api in [Api::Anthropic, Api::OpenAi] {
        let config = CrashConfig { sessions, kills, api, gap_ms: (100, 900), seed };
        match rt.block_on(run(config)) {
            Ok(r) => println!(
                "| {} | {} | {} | {seed} | {} | {} | {} | all complete and consistent |",
                api.provider(),
                r.sessions,
                r.kills,
                r.model_calls,
                r.unknown_outcomes,
                r.events
            ),
            Err(e) => {
                failed = true;
                println!(
                    "| {} | {sessions} | {kills} | {seed} | | | | FAILED: {e:#} |",
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
