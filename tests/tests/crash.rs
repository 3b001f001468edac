//! The crash harness, short version (the long one is `scripts/crash.sh`): concurrent sessions,
//! the server SIGKILLed at random moments and restarted; every session must end complete and
//! consistent. See `outboard_tests::crash` for what is checked.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers may panic

use outboard_tests::crash::{run, CrashConfig};
use outboard_tests::harness::Api;

fn seed() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_survive_repeated_sigkills() {
    for api in [Api::Anthropic, Api::OpenAi] {
        let config = CrashConfig { sessions: 3, kills: 5, api, gap_ms: (150, 700), seed: seed() };
        eprintln!("crash harness: {config:?}");
        let report = run(config).await.unwrap();
        eprintln!("crash harness: {report:?}");
        assert_eq!(report.kills, 5);
    }
}
