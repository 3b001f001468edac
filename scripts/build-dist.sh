#!/usr/bin/env bash
# What users install: `outboard` and `outboard-server` in the `dist` profile (Cargo.toml), their
# hot functions laid out together.
#
#   scripts/build-dist.sh [--no-order]
#
# 1. Builds the dist profile, laid out by target/dist/hot-functions.txt when an earlier run
#    left one (server/app/build.rs hands it to the linker as OUTBOARD_SYMBOL_ORDER).
# 2. Runs the speed bench's task, startup and TUI scenarios (embedded, a client against
#    outboard-server, each with its sandbox, and the TUI in tmux) on those binaries while
#    scripts/hot-functions.py counts every function entered (eBPF uprobes: root, Linux 6.6+).
# 3. Unless the file already says just that, writes the new list and links again (one LTO
#    link, ~4 min on 2 cores). The headless workloads' functions come first, then the TUI's.
#
# Laid out so, a process maps the ~4 MB of code it runs instead of the fault-around of ~12 MB
# of code spread over the whole file (scripts/bench.sh task: peak RSS 19.7 → 12.9 MB, the
# tree's 31.2 → 20.7 MB). The order names the symbols of one build (one rustc, one Cargo.lock): a build
# that lacks a name passes it over, so a stale file costs memory, never correctness. Where the
# counting cannot run (not root, an older kernel, --no-order), the binaries are built without
# an order and the script says so.
set -euo pipefail
cd "$(dirname "$0")/.."

order=yes
case "${1:-}" in
  "") ;;
  --no-order) order=no ;;
  *) echo "usage: scripts/build-dist.sh [--no-order]" >&2; exit 2 ;;
esac

dir=target/dist
list=$dir/hot-functions.txt
build() {
  if [ "$order" = yes ] && [ -f "$list" ]; then
    OUTBOARD_SYMBOL_ORDER="$PWD/$list" cargo build --profile dist -p outboard-cli -p outboard-server \
      --bin outboard --bin outboard-server
  else
    env -u OUTBOARD_SYMBOL_ORDER cargo build --profile dist -p outboard-cli -p outboard-server \
      --bin outboard --bin outboard-server
  fi
}

echo "== cargo build --profile dist"
build
if [ "$order" = no ]; then
  echo "build-dist.sh: built without a function order (--no-order)"
  exit 0
fi

# The workloads: the bench's own binary (a debug build will do: only the counted binaries'
# speed is beside the point). Counted apart and listed one after the other, so the code of a
# headless run is one stretch and the TUI's own code follows it (counted together, the TUI's
# functions would sit among the headless run's, most entered first).
cargo build --quiet -p outboard-tests --bin bench_speed
bench="target/debug/bench_speed"
workloads=("$bench task --runs 1 --build dist=$dir && $bench startup --runs 1 --build dist=$dir")
# And the TUI, where tmux is at hand to run it in.
if command -v tmux >/dev/null; then
  workloads+=("$bench tui --runs 1 --build dist=$dir")
else
  echo "build-dist.sh: no tmux: the TUI's functions are not counted"
fi
echo "== counting the functions a run enters"
: >"$list.new"
for i in "${!workloads[@]}"; do
  status=0
  python3 scripts/hot-functions.py "$list.part" "$dir/outboard" "$dir/outboard-server" -- \
    sh -c "${workloads[$i]}" >/dev/null || status=$?
  if [ "$status" = 2 ]; then
    rm -f "$list.new" "$list.part"
    echo "build-dist.sh: built without a function order (the counting needs root and Linux 6.6+)"
    exit 0
  elif [ "$status" != 0 ]; then
    rm -f "$list.new" "$list.part"
    exit "$status"
  fi
  # What an earlier workload listed keeps its place.
  cat "$list.part" >>"$list.new"
done
rm -f "$list.part"
awk '!seen[$0]++' "$list.new" >"$list.part" && mv "$list.part" "$list.new"
if [ -f "$list" ] && cmp -s "$list" "$list.new"; then
  rm "$list.new"
  echo "build-dist.sh: laid out by $list, which lists what this build runs"
  exit 0
fi
mv "$list.new" "$list"
echo "== cargo build --profile dist, laid out by $list"
build
echo "build-dist.sh: laid out by $list"
