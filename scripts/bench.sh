#!/usr/bin/env bash
# Benchmarks: prints tables, asserts nothing. `scripts/bench.sh [harness|durable|sandbox|tui|all]`.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-all}" in
  sandbox)
    # The sandbox agent lives in outboard-server: build it next to the bench binary.
    cargo build --quiet --release -p outboard-server --bin outboard-server
    exec cargo run --quiet --release -p outboard-tests --bin bench_sandbox
    ;;
  tui)
    # The TUI's own binary: frame time, idle CPU (needs tmux and the release `outboard`).
    cargo build --quiet --release -p outboard-cli -p outboard-server
    exec cargo run --quiet --release -p outboard-tests --bin bench_tui
    ;;
  harness|durable)
    # In-process servers use the sandbox agent of the release outboard-server beside the bench.
    cargo build --quiet --release -p outboard-server --bin outboard-server
    exec cargo run --quiet --release -p outboard-tests --bin bench -- "$1"
    ;;
  all)
    cargo build --quiet --release -p outboard-cli -p outboard-server
    cargo run --quiet --release -p outboard-tests --bin bench -- all
    cargo run --quiet --release -p outboard-tests --bin bench_sandbox
    exec cargo run --quiet --release -p outboard-tests --bin bench_tui
    ;;
  *)
    echo "usage: scripts/bench.sh [harness|durable|sandbox|tui|all]" >&2
    exit 2
    ;;
esac
