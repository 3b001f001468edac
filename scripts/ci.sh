#!/usr/bin/env bash
# What CI runs, and what developers run before pushing: format, lints, the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each step's heading says when it began, so a slow run shows where its time went.
ci_start=$SECONDS
step() {
  echo "== [$((SECONDS - ci_start)) s] $*"
}
trap 'echo "== [$((SECONDS - ci_start)) s] ci.sh ends (exit $?)"' EXIT

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

# The notebook tests validate what NotebookEdit writes with Jupyter's own nbformat package.
if ! python3 -c 'import nbformat' >/dev/null 2>&1; then
  echo "== pip install 'nbformat>=5,<6' (the notebook tests' validator)"
  python3 -m pip install --quiet 'nbformat>=5,<6'
fi

# The clients the end-to-end tests drive Outboard with (the Python Claude Agent SDK), each in
# its own folder under target/.
scripts/install-test-clients.sh

# A fresh clone builds everything once: incremental state would only cost disk (~1.7 GB).
export CARGO_INCREMENTAL=0


step "cargo fmt --check"
cargo fmt --all -- --check

# `cargo clippy --workspace --all-targets -- -D warnings`, in the test build. `cargo clippy` is
# `cargo check` with clippy-driver compiling the workspace's own crates (RUSTC_WORKSPACE_WRAPPER)
# and its lint flags in CLIPPY_ARGS. Exported here, the same wrapper and flags make the test
# build below lint every target of every workspace crate (libraries and their tests, binaries,
# integration tests, examples: all that --all-targets names, as there are no benches) with
# -D warnings while it compiles them, and a lint fails that build as it fails `cargo clippy`. The
# dependencies are then compiled once, instead of checked by clippy and compiled again by the
# tests: on a fresh clone on 2 cores the separate clippy pass was a third of CI's build time.
step "cargo clippy --workspace --all-targets -- -D warnings (in the test build)"
RUSTC_WORKSPACE_WRAPPER="$(command -v clippy-driver || true)"
if [ -z "$RUSTC_WORKSPACE_WRAPPER" ]; then
  echo "ci.sh: clippy-driver is missing: rustup component add clippy" >&2
  exit 1
fi
export RUSTC_WORKSPACE_WRAPPER
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
benches="$(cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
print(" ".join(t["name"] for p in json.load(sys.stdin)["packages"] for t in p["targets"] if "bench" in t["kind"]))')"
if [ -n "$benches" ]; then
  echo "ci.sh: bench targets ($benches) are not built by cargo test: lint them with --benches here" >&2
  exit 1
fi
step "tests (the README's test command)"
# The end-to-end suites are one binary (tests/tests/e2e/) at libtest's default of a thread per
# core, as each suite's own binary ran before: on 2 cores, 4 threads overload the machine enough
# for a test that kills a node inside a 3 s command to miss it.
step "tests: build"
cargo test --workspace --no-run
step "tests: run"
cargo test --workspace
# The same store tests and the end-to-end suites that exercise the log, recovery, org files and
# attach, on PostgreSQL (a schema of a throwaway cluster per test; see server/store/src/pgtest.rs).
# The test binaries the pass above built, run again from their package's directory as cargo
# does: `cargo test -p A -p B` would unify other features and build them all again (~2 min).
step "tests on PostgreSQL"
pg_bins="$(cargo test --workspace --no-run --message-format=json 2>/dev/null | python3 -c '
import json, os, sys
libs = {"outboard_store", "outboard_org", "outboard_server"}
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    name, kind = m["target"]["name"], m["target"]["kind"]
    if (kind == ["lib"] and name in libs) or (kind == ["test"] and name == "e2e"):
        print(name, os.path.dirname(m["manifest_path"]), m["executable"])
')"
if [ "$(printf '%s\n' "$pg_bins" | grep -c .)" != 4 ]; then
  echo "ci.sh: expected the store, org, server and e2e test binaries, found: $pg_bins" >&2
  exit 1
fi
pg_failed=0
while read -r name dir exe; do
  step "on PostgreSQL: $name"
  # The end-to-end suites are the modules of one binary (tests/tests/e2e/): every suite whose
  # subject is something the store keeps (sessions and their log, leases, drive grants, usage,
  # org files, quotas, secrets, hooks, tool policies, network rules and log, MCP servers, search
  # settings, sandbox hosts, pushes, uploads), but `nodes`, which runs its nodes on PostgreSQL in
  # both passes. The suites skipped here test the sandbox, the model providers, the tools' media,
  # the TUI, headless and embedded runs, the network edge, the manual, telemetry and the test
  # fixtures: their sessions are ordinary ones, which the suites above cover on PostgreSQL, and
  # the SQLite pass runs them. All of the rest run, failed or not.
  if [ "$name" = e2e ]; then
    set -- --skip nodes::
    for m in llm_providers provider_errors context_probe read_media notebook \
      webfetch sandbox_intercept sandbox_network sandbox_orphans sandbox_session \
      security_sandbox launch_errors tui_tmux e2e_run security_net upload_limits \
      workspace_in_place git_http_fixture otlp manual connection_bounds protocol_errors \
      config_files hostile_host security_files long_load run_reconnect models; do
      set -- "$@" --skip "$m::"
    done
  else
    set --
  fi
  (cd "$dir" && OUTBOARD_TEST_STORE=postgres "$exe" "$@") || pg_failed=1
done <<<"$pg_bins"
if [ "$pg_failed" != 0 ]; then
  echo "ci.sh: tests failed on PostgreSQL" >&2
  exit 1
fi
# The Debian package, from the binaries the tests built (no release build): installed, checked,
# purged. Before the client-only build, which replaces target/debug/outboard.
step "the Debian package"
scripts/package-check.sh
# Last: it leaves target/debug/outboard built without the embedded server (the next default
# build links the full one again).
step "the client-only build"
scripts/client-only.sh
