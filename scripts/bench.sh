#!/usr/bin/env bash
# Benchmarks: prints tables, asserts nothing. `scripts/bench.sh [harness|durable|tui|all]`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "tui" ]; then
  # The TUI's own binary: frame time, idle CPU (needs tmux and the release `outboard`).
  cargo build --quiet --release -p outboard-cli -p outboard-server
  exec cargo run --quiet --release -p outboard-tests --bin bench_tui
fi
exec cargo run --quiet --release -p outboard-tests --bin bench -- "${@:-all}"
