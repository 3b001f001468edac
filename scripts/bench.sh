#!/usr/bin/env bash
# Benchmarks: prints tables, asserts nothing. `scripts/bench.sh [harness|durable|all]`.
set -euo pipefail
cd "$(dirname "$0")/.."
exec cargo run --quiet --release -p outboard-tests --bin bench -- "${@:-all}"
