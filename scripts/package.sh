#!/usr/bin/env bash
# Release binaries with their line tables in separate debug files: `scripts/package.sh [DIR]`
# (default `dist/`) writes `outboard`, `outboard-server` (stripped: the size `cargo install`
# gives) and `outboard.debug`, `outboard-server.debug` (line tables and symbols). Each binary names
# its debug file (`.gnu_debuglink`); a panic's backtrace (`RUST_BACKTRACE=1`) resolves function,
# file and line from it when it lies beside the binary, in a `.debug/` directory beside it, or
# under `/usr/lib/debug`, and so do gdb and perf. Without it, a panic still names its file and
# line; the backtrace has no frames.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-dist}"
# The `profiling` profile is the release code with line tables (Cargo.toml).
cargo build --profile profiling -p outboard-cli -p outboard-server --bin outboard --bin outboard-server
mkdir -p "$out"
for bin in outboard outboard-server; do
  cp "target/profiling/$bin" "$out/$bin"
  objcopy --only-keep-debug "$out/$bin" "$out/$bin.debug"
  objcopy --strip-all --add-gnu-debuglink="$out/$bin.debug" "$out/$bin"
  ls -l "$out/$bin" "$out/$bin.debug"
done
