#!/usr/bin/env bash
# The long crash runs.
#   scripts/crash.sh [SESSIONS] [KILLS] [SEED] [--live-sandboxes N]
#                                               one server killed at random (default 8 sessions,
#                                               30 kills per provider); prints a table. Sessions
#                                               past the org's live-sandbox quota (8, or N) wait
#                                               for a sandbox.
#   scripts/crash.sh nodes [SESSIONS] [KILLS]   three nodes on one PostgreSQL killed and restarted
#                                               at random (default 20 sessions, 60 kills): the
#                                               suite's short multi-node test, sized up.
# Exits non-zero if any session ends incomplete or inconsistent.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == nodes ]]; then
  export OUTBOARD_NODES_SESSIONS="${2:-20}" OUTBOARD_NODES_KILLS="${3:-60}"
  # Turns long enough to outlast the kills (2 s apart): 45 steps (a turn stops at 50), each a
  # Bash command of 3 s.
  export OUTBOARD_NODES_STEPS="${OUTBOARD_NODES_STEPS:-45}"
  export OUTBOARD_NODES_STEP_MS="${OUTBOARD_NODES_STEP_MS:-$((OUTBOARD_NODES_KILLS * 2000 / 45 + 500))}"
  exec cargo test --quiet -p outboard-tests --test e2e nodes::three_nodes -- --nocapture
fi
cargo build --quiet -p outboard-server -p outboard-cli --bins
exec cargo run --quiet -p outboard-tests --bin crash -- "$@"
