#!/usr/bin/env bash
# Benchmarks: prints tables, asserts nothing. `scripts/bench.sh [harness|durable|sandbox|network|tui|vfs|workspace|rewind|long|connections|tasks|mcp|hooks|hosts|nodes|uploads|streamjson|media|startup|task|tui-memory|all]`,
# `scripts/bench.sh compare REV [startup|task]`, `scripts/bench.sh peer` (beside Codex CLI).
set -euo pipefail
cd "$(dirname "$0")/.."

# The release `outboard` and `outboard-server` of the working tree, and bench_speed beside them.
build_speed() {
  cargo build --quiet --release -p outboard-cli -p outboard-server -p outboard-tests \
    --bin outboard --bin outboard-server --bin bench_speed
}

# What users install: the `dist` profile (one LTO unit; ~9 min from scratch on 2 cores, ~4 min
# a binary after a change), its hot functions laid out together where this machine can count
# them (scripts/build-dist.sh).
build_dist() {
  scripts/build-dist.sh >&2
}

case "${1:-all}" in
  startup|task|tui-memory)
    # The release `outboard` against the mock model over HTTP (issue #37). `startup`: spawn to the
    # first model request, embedded and against a running server, cold and warm data dir.
    # `task`: the 21-call task (Write, Bash echo, Read, Edit × 5, then an answer), embedded:
    # the gaps between model requests, CPU, peak RSS of the process and its tree. Extra
    # arguments go to the bench (`--runs N`, `--rounds N`, `--build LABEL=DIR`). Both the
    # release and the dist build, unless `--build` names others.
    # `tui-memory`: the TUI in tmux, one question, its peak RSS (bench_speed tui).
    build_speed
    which="${1%-memory}"
    shift
    # Unless told which builds (`--build LABEL=DIR`), both: the release build and what users
    # install (dist).
    case " $* " in
      *" --build "*) exec target/release/bench_speed "$which" "$@" ;;
    esac
    build_dist
    exec target/release/bench_speed "$which" --build release=target/release --build dist=target/dist "$@"
    ;;
  peer)
    # `outboard run` (dist) beside Codex CLI's `codex exec` on the same 21-call task against the
    # mock model, each timed from spawn to exit with a cold and a warm data dir (issue #56).
    # Codex comes from the npm registry into target/peer/codex (its version pinned here), unless
    # `--codex PATH` names one. Extra arguments go to the bench (`--runs N`, `--rounds N`).
    shift
    cargo build --quiet --release -p outboard-tests --bin bench_peer
    build_dist
    codex=(--codex target/peer/codex/node_modules/.bin/codex)
    case " $* " in
      *" --codex "*) codex=() ;;
      *)
        if [ ! -x target/peer/codex/node_modules/.bin/codex ]; then
          mkdir -p target/peer/codex
          (cd target/peer/codex && npm install --no-audit --no-fund --silent @openai/codex@0.171.0 >&2)
        fi
        ;;
    esac
    exec target/release/bench_peer --build dist=target/dist "${codex[@]}" "$@"
    ;;
  compare)
    # `compare REV [startup|task|all] [bench args]`: REV's release binaries, built in a
    # throwaway tree of REV under target/compare/ (its own target dir, seeded with hard links to
    # the dependencies already built here), against the working tree's, the same bench
    # alternating between them for three rounds; both printed side by side.
    rev="${2:?usage: scripts/bench.sh compare REV [startup|task|all] [bench args]}"
    which="${3:-all}"
    shift $(( $# < 3 ? $# : 3 ))
    sha="$(git rev-parse --verify "$rev^{commit}")"
    short="$(git rev-parse --short "$sha")"
    tree="target/compare/$short"
    if [ ! -f "$tree/Cargo.toml" ]; then
      rm -rf "$tree"
      mkdir -p "$tree/target/release"
      git archive "$sha" | tar -x -C "$tree"
      # Hard links, not copies: cargo writes new files rather than into these, and the
      # dependencies REV shares with the working tree need no second build.
      for d in deps build .fingerprint; do
        if [ -d "target/release/$d" ]; then cp -al "target/release/$d" "$tree/target/release/"; fi
      done
    fi
    (cd "$tree" && cargo build --quiet --release -p outboard-cli -p outboard-server --bin outboard --bin outboard-server)
    build_speed
    builds=(--build "$short=$tree/target/release" --build "work=target/release")
    for bench in startup task; do
      if [ "$which" = all ] || [ "$which" = "$bench" ]; then
        target/release/bench_speed "$bench" --rounds 3 "${builds[@]}" "$@"
      fi
    done
    ;;
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
  rewind)
    # Checkpoints and rewinds on a 10,000-file workspace: the checkpoint before each prompt
    # (first, after 10 files changed, nothing changed) and a rewind's restore. `rewind [--runs N]`.
    shift
    exec cargo run --quiet --release -p outboard-tests --bin bench_checkpoint -- "$@"
    ;;
  long)
    # Long sessions. `turn`: a 1,000-step turn in a 16k- and a 64k-token window through an
    # in-process server (request bytes per step, compactions, the prompt cache's share). `attach`,
    # `rss`: against the real release server, attach time to the first screen at 1k, 10k and 100k
    # events, server RSS with 1,000 idle sessions; `load`: RSS around the first turn after loading a
    # 1,000,000-event session with a compaction. `long [turn|attach|rss|load|all] [--quick]`.
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
  connections)
    # What one WebSocket connection makes the real server hold: VmRSS and peak per idle, slow
    # (a frame a second) and non-reading connection (cut at its 9 MiB outbound bound).
    # `connections [--quick]`.
    cargo build --quiet --release -p outboard-server --bin outboard-server
    shift
    exec cargo run --quiet --release -p outboard-tests --bin bench_connections -- "$@"
    ;;
  tasks)
    # Subagents: 8 children × 20 steps against one agent × 160 (wall time, the mock answering at
    # once and after 50 ms), and a child's start to its first model request (an in-process
    # server, which wants the release sandbox agent beside the bench). `tasks [--quick]`.
    cargo build --quiet --release -p outboard-server --bin outboard-server
    shift
    exec cargo run --quiet --release -p outboard-tests --bin bench_tasks -- "$@"
    ;;
  hooks)
    # Hooks: what a repository PreToolUse hook (run in the awake sandbox) and an org webhook on
    # loopback add to a `Bash true` call, through the real server binary. `hooks [--calls N]
    # [--turns N]`.
    cargo build --quiet --release -p outboard-server -p outboard-cli --bins
    shift
    exec cargo run --quiet --release -p outboard-tests --bin bench_hooks -- "$@"
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
  media)
    # Read of a screenshot or a PDF (issue 55): decode, scale, encode; request bytes and tokens.
    exec cargo run --quiet --release -p outboard-media --example bench_media
    ;;
  streamjson)
    # Claude Code's stream-json front end against `outboard run --json` (issue 53).
    cargo build --quiet --release -p outboard-cli -p outboard-server
    exec cargo run --quiet --release -p outboard-tests --bin bench_streamjson -- "${@:2}"
    ;;
  uploads)
    # Unpacking an upload by directory depth (issue 50): time and CPU per MiB, lookups.
    exec cargo run --quiet --release -p outboard-tests --bin bench_uploads -- "${@:2}"
    ;;
  all)
    cargo build --quiet --release -p outboard-cli -p outboard-server
    cargo run --quiet --release -p outboard-tests --bin bench -- all
    cargo run --quiet --release -p outboard-tests --bin bench_sandbox
    cargo run --quiet --release -p outboard-tests --bin bench_network
    cargo run --quiet --release -p outboard-tests --bin bench_vfs
    cargo run --quiet --release -p outboard-tests --bin bench_workspace
    cargo run --quiet --release -p outboard-tests --bin bench_checkpoint
    cargo run --quiet --release -p outboard-tests --bin bench_long_turn
    cargo run --quiet --release -p outboard-tests --bin bench_long -- all
    cargo run --quiet --release -p outboard-tests --bin bench_connections
    cargo run --quiet --release -p outboard-tests --bin bench_tasks
    cargo run --quiet --release -p outboard-tests --bin bench_mcp
    cargo run --quiet --release -p outboard-tests --bin bench_hooks
    cargo run --quiet --release -p outboard-tests --bin bench_hosts
    cargo run --quiet --release -p outboard-tests --bin bench_nodes
    cargo run --quiet --release -p outboard-tests --bin bench_speed -- startup
    cargo run --quiet --release -p outboard-tests --bin bench_speed -- task
    cargo run --quiet --release -p outboard-tests --bin bench_uploads
    cargo run --quiet --release -p outboard-tests --bin bench_streamjson
    cargo run --quiet --release -p outboard-media --example bench_media
    exec cargo run --quiet --release -p outboard-tests --bin bench_tui
    ;;
  *)
    echo "usage: scripts/bench.sh [harness|durable|sandbox|network|tui|vfs|workspace|rewind|long|tasks|mcp|hooks|hosts|nodes|uploads|streamjson|media|startup|task|tui-memory|all] | compare REV [startup|task|all]" >&2
    exit 2
    ;;
esac
