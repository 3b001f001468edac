#!/usr/bin/env bash
# Benchmarks: prints tables, asserts nothing. `scripts/bench.sh [harness|durable|sandbox|network|tui|vfs|workspace|long|tasks|mcp|hosts|nodes|all]`.
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-all}" in
  nodes)
    # Several nodes on one PostgreSQL (the bench makes its own cluster with initdb): checkpoint
    # cost vs SQLite, takeover after SIGKILL, fan-out to watchers, steps/s on 1 vs 3 nodes. `nodes [--kills N]
    # [--sessions N]` (default 20 kills, 200 sessions).
    cargo build --quiet --release -p outboard-server --bin outboard-server
    shift
    exec cargo run --quiet --release -p outboard-tests --bin bench_nodes -- "$@"
    ;;
  sandbox)
    # The sandbox agent lives in outboard-server: build it next to the bench binary.
    cargo build --quiet --release -p outboard-server --bin outboard-server
    exec cargo run --quiet --release -p outboard-tests --bin bench_sandbox
    ;;
  network)
    # The sandbox's way out: downloads, first byte, memory per connection and cold start with
    # and without the proxy (the sandbox agent beside the bench, as for `sandbox`).
    cargo build --quiet --release -p outboard-server --bin outboard-server
    exec cargo run --quiet --release -p outboard-tests --bin bench_network
    ;;
  tui)
    # The TUI's own binary: frame time, idle CPU (needs tmux and the release `outboard`).
    cargo build --quiet --release -p outboard-cli -p outboard-server
    exec cargo run --quiet --release -p outboard-tests --bin bench_tui
    ;;
  vfs)
    # Org files: OrgFs throughput, visibility (an in-process server, which wants the release
    # sandbox agent beside the bench), projection cost.
    cargo build --quiet --release -p outboard-server --bin outboard-server
    exec cargo run --quiet --release -p outboard-tests --bin bench_vfs
    ;;
  workspace)
    # A repository in and the changes out: `git clone` from git's own http-backend on loopback
    # against Outboard's clone, upload and diff (an in-process server, which wants the release
    # sandbox agent beside the bench). Extra arguments go to the bench (`--runs N`).
    cargo build --quiet --release -p outboard-server --bin outboard-server
    shift
    exec cargo run --quiet --release -p outboard-tests --bin bench_workspace -- "$@"
    ;;
  long)
    # Long sessions. `turn`: a 1,000-step turn in a 16k- and a 64k-token window through an
    # in-process server (request bytes per step, compactions, the prompt cache's share). `attach`,
    # `rss`: against the real release server, attach time to the first screen at 1k, 10k and 100k
    # events, server RSS with 1,000 idle sessions. `long [turn|attach|rss|all] [--quick]`.
    cargo build --quiet --release -p outboard-cli -p outboard-server
    shift
    section="${1:-all}"
    if [ "$section" = all ] || [ "$section" = turn ]; then
      cargo run --quiet --release -p outboard-tests --bin bench_long_turn
    fi
    if [ "$section" != turn ]; then
      exec cargo run --quiet --release -p outboard-tests --bin bench_long -- "${@:-all}"
    fi
    ;;
  tasks)
    # Subagents: 8 children × 20 steps against one agent × 160 (wall time, the mock answering at
    # once and after 50 ms), and a child's start to its first model request (an in-process
    # server, which wants the release sandbox agent beside the bench). `tasks [--quick]`.
    cargo build --quiet --release -p outboard-server --bin outboard-server
    shift
    exec cargo run --quiet --release -p outboard-tests --bin bench_tasks -- "$@"
    ;;
  mcp)
    # MCP: a tool call through the server's McpHub against the same call made directly with the
    # same SDK client, to the test stdio server on the Python SDK (`pip install 'mcp>=1,<2'`), and
    # calls per second with 16 callers sharing one connection. `mcp [--quick]`.
    shift
    exec cargo run --quiet --release -p outboard-tests --bin bench_mcp -- "$@"
    ;;
  hosts)
    # Sandbox hosts: the release `outboard-server sandbox-host` on loopback driven by the
    # harness's client against the same tools run locally (Read, Write, Edit, Bash `true`:
    # p50/p99 and the latency added), a cold client's connect + join and first command, resume
    # to the first answer in a frozen workspace, and commands per second with 1, 4 and 16
    # sessions. The host binary is also the local sandbox agent beside the bench. Extra
    # arguments go to the bench (`--runs N`, `--cold N`, `--resumes N`, `--seconds S`).
    cargo build --quiet --release -p outboard-server --bin outboard-server
    shift
    exec cargo run --quiet --release -p outboard-tests --bin bench_hosts -- "$@"
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
    cargo run --quiet --release -p outboard-tests --bin bench_network
    cargo run --quiet --release -p outboard-tests --bin bench_vfs
    cargo run --quiet --release -p outboard-tests --bin bench_workspace
    cargo run --quiet --release -p outboard-tests --bin bench_long_turn
    cargo run --quiet --release -p outboard-tests --bin bench_long -- all
    cargo run --quiet --release -p outboard-tests --bin bench_tasks
    cargo run --quiet --release -p outboard-tests --bin bench_mcp
    cargo run --quiet --release -p outboard-tests --bin bench_hosts
    cargo run --quiet --release -p outboard-tests --bin bench_nodes
    exec cargo run --quiet --release -p outboard-tests --bin bench_tui
    ;;
  *)
    echo "usage: scripts/bench.sh [harness|durable|sandbox|network|tui|vfs|workspace|long|tasks|mcp|hosts|all]" >&2
    exit 2
    ;;
esac
