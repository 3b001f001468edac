#!/usr/bin/env bash
# Benchmarks: prints tables, asserts nothing. `scripts/bench.sh [harness|durable|sandbox|all]`.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ "${1:-}" == "sandbox" ]]; then
    # The sandbox agent lives in outboard-server: build it next to the bench binary.
    cargo build --quiet --release -p outboard-server --bin outboard-server
    exec cargo run --quiet --release -p outboard-tests --bin bench_sandbox
fi
exec cargo run --quiet --release -p outboard-tests --bin bench -- "${@:-all}"
