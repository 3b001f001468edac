//! The crash harness, short version (the long one is `scripts/crash.sh`): concurrent sessions,
//! the server SIGKILLed at random moments and restarted; every session must end complete and
//! consistent. See `outboard_tests::crash` for what is checked.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use outboard_tests::crash::{run, seed, CrashConfig};
use outboard_tests::harness::Api;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_survive_repeated_sigkills() {
    for api in [Api::Anthropic, Api::OpenAi] {
        let config = CrashConfig {
            sessions: 7,
            kills: 5,
            api,
            gap_ms: (150, 700),
            seed: seed(),
            live_sandboxes: None,
            nodes: 1,
        };
        eprintln!("crash harness: {config:?}");
        let seed = config.seed;
        let report = match run(config).await {
            Ok(report) => report,
            Err(e) => {
                panic!("crash harness failed ({api:?}): {e:#}\nreplay with CRASH_SEED={seed}")
            }
        };
        eprintln!("crash harness: {report:?}");
        assert_eq!(report.kills, 5);
    }
}
