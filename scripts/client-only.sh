#!/usr/bin/env bash
# The client-only build (`outboard-cli --no-default-features`, no `embedded` feature), as CI
# checks it: it links none of the server's crates, passes clippy, and the real binary, run with
# no server configured, says that it needs --server (exit 2). docs/PLATFORMS.md says why.
#
# Run it last: it builds target/debug/outboard without the server in it. The next cargo command
# of the default build puts the full binary back (cargo links a fresh binary of each feature set
# again), so the end-to-end tests never run this one.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== client-only: cargo tree (no server crate)"
# Our own crates the client may link; any other outboard-* is part of the server.
allowed='^outboard-(cli|client|tui|shared|cmdline|flagfile|media) '
linked=$(cargo tree -p outboard-cli --no-default-features -e normal,build --prefix none |
  grep '^outboard-' | grep -Ev "$allowed" | sort -u || true)
if [ -n "$linked" ]; then
  echo "client-only.sh: outboard-cli --no-default-features links server crates:" >&2
  echo "$linked" >&2
  exit 1
fi

echo "== client-only: the client library and the TUI link no server crate either"
for lib in outboard-client outboard-tui; do
  linked=$(cargo tree -p "$lib" -e normal,build --prefix none |
    grep '^outboard-' | grep -Ev "$allowed" | sort -u || true)
  if [ -n "$linked" ]; then
    echo "client-only.sh: $lib links server crates:" >&2
    echo "$linked" >&2
    exit 1
  fi
done
# The library knows no command line and no terminal (docs/ARCHITECTURE.md, "CLI").
if cargo tree -p outboard-client -e normal --prefix none | grep -Eq '^(clap|ratatui|crossterm) '; then
  echo "client-only.sh: outboard-client links clap, ratatui or crossterm" >&2
  exit 1
fi

# `cargo clippy … --all-targets -- -D warnings` in the build, as scripts/ci.sh does for the whole
# workspace: clippy-driver compiles the three crates (and lints them) while the build compiles
# their dependencies once, instead of checking them for clippy and compiling them again.
echo "== client-only: cargo clippy --all-targets -- -D warnings (in the build)"
driver="$(command -v clippy-driver || true)"
if [ -z "$driver" ]; then
  echo "client-only.sh: clippy-driver is missing: rustup component add clippy" >&2
  exit 1
fi
export RUSTC_WORKSPACE_WRAPPER="$driver"
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
cargo build -p outboard-cli -p outboard-client -p outboard-tui --no-default-features --all-targets

echo "== client-only: the binary says it needs --server"
cargo build -p outboard-cli --no-default-features --bin outboard
# A home of its own: no client configuration of this machine names a server.
home=$(mktemp -d)
trap 'rm -rf "$home"' EXIT
expected="this outboard is a client only (built without the \`embedded\` feature)"
for args in "" "run hello" "sessions"; do
  status=0
  # shellcheck disable=SC2086 # the arguments are words on purpose
  output=$(env -u OUTBOARD_SERVER -u OUTBOARD_TOKEN -u OUTBOARD_TOKEN_FILE HOME="$home" \
    XDG_CONFIG_HOME="$home/.config" target/debug/outboard $args 2>&1 </dev/null) || status=$?
  if [ "$status" != 2 ] || [[ "$output" != *"$expected"*"--server"* ]]; then
    echo "client-only.sh: \`outboard $args\` exited $status, saying:" >&2
    echo "$output" >&2
    echo "(expected exit 2 and: $expected … --server)" >&2
    exit 1
  fi
done
echo "ok: outboard, outboard run and outboard sessions each said: $output"
