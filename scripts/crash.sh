#!/usr/bin/env bash
# The long crash runs.
#   scripts/crash.sh [SESSIONS] [KILLS] [SEED] [--live-sandboxes N]
#                                               one server killed at random (default 8 sessions,
#                                               30 kills per provider); prints a table. Sessions
#                                               past the org's live-sandbox quota (8, or N) wait
#                                               for a sandbox.
#   scripts/crash.sh nodes [SESSIONS] [KILLS] [SEED]
#                                               the same sessions on three nodes of one PostgreSQL,
#                                               a random node killed and restarted each time
#                                               (default 20 sessions, 60 kills).
# Exits non-zero if any session ends incomplete or inconsistent.
set -euo pipefail
cd "$(dirname "$0")/.."
nodes=()
if [[ "${1:-}" == nodes ]]; then
  shift
  nodes=(--nodes 3)
  set -- "${1:-20}" "${2:-60}" "${@:3}"
fi
cargo build --quiet -p outboard-server -p outboard-cli --bins
exec cargo run --quiet -p outboard-tests --bin crash -- "$@" "${nodes[@]}"
