#!/usr/bin/env bash
# What CI runs, and what developers run before pushing: format, lints, the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v bwrap >/dev/null 2>&1; then
  echo "ci.sh: bubblewrap (bwrap) is missing: install it (apt-get install bubblewrap); the sandbox tests need it" >&2
  exit 1
fi

if ! command -v promtool >/dev/null 2>&1; then
  echo "ci.sh: promtool is missing: install it (apt-get install prometheus); the metrics test checks /metrics with it" >&2
  exit 1
fi

# The store's PostgreSQL tests start their own cluster from Debian's server binaries.
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  echo "ci.sh: PostgreSQL is missing: install it (apt-get install postgresql); the store tests run on it too" >&2
  exit 1
fi

# The MCP tests and bench talk to servers built on the official Python SDK (tests/mcp/).
if ! python3 -c 'import mcp' >/dev/null 2>&1; then
  echo "== pip install 'mcp>=1,<2' (the MCP tests' servers)"
  python3 -m pip install --quiet 'mcp>=1,<2'
fi

# A fresh clone builds everything once: incremental state would only cost disk (~1.7 GB).
export CARGO_INCREMENTAL=0

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== tests (the README's test command)"
# The end-to-end suites are one binary (tests/tests/e2e/) at libtest's default of a thread per
# core, as each suite's own binary ran before: on 2 cores, 4 threads overload the machine enough
# for a test that kills a node inside a 3 s command to miss it.
cargo test --workspace
# The same store tests and the end-to-end suites that exercise the log, recovery, org files and
# attach, on PostgreSQL (a schema of a throwaway cluster per test; see server/store/src/pgtest.rs).
echo "== tests on PostgreSQL"
OUTBOARD_TEST_STORE=postgres cargo test -p outboard-store -p outboard-org -p outboard-server --lib
# The end-to-end suites are the modules of one binary (tests/tests/e2e/): every suite but `nodes`,
# which runs its nodes on PostgreSQL in both passes.
OUTBOARD_TEST_STORE=postgres cargo test -p outboard-tests --no-fail-fast --test e2e -- --skip nodes::
# The Debian package, from the binaries the tests built (no release build): installed, checked,
# purged. Before the client-only build, which replaces target/debug/outboard.
echo "== the Debian package"
scripts/package-check.sh
# Last: it leaves target/debug/outboard built without the embedded server (the next default
# build links the full one again).
echo "== the client-only build"
scripts/client-only.sh
