#!/usr/bin/env bash
# The long crash run: `scripts/crash.sh [SESSIONS] [KILLS] [SEED]` (default 8 sessions, 30 kills
# per provider). Prints a table; exits non-zero if any session ends incomplete or inconsistent.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --quiet -p outboard-server -p outboard-cli --bins
exec cargo run --quiet -p outboard-tests --bin crash -- "$@"
