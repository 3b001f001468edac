#!/usr/bin/env bash
# Builds the Debian package `outboard` (target/package/outboard_*.deb) with cargo-deb: both
# binaries, their man pages and shell completions, and the outboard-server systemd service (its
# own user, data in /var/lib/outboard, configuration in /etc/outboard/server.toml). See
# docs/PACKAGING.md.
#
#   scripts/package.sh                      builds the dist profile (scripts/build-dist.sh) and packages it (for users)
#   scripts/package.sh --profile dev --no-build --fast
#                                           packages the binaries a test build already made (CI)
set -euo pipefail
cd "$(dirname "$0")/.."

# Pinned so a new cargo-deb cannot change the package under CI's feet; --locked builds it with
# the dependency versions its authors tested.
CARGO_DEB_VERSION=3.8.0

profile=dist
build=yes
fast=()
while [ $# -gt 0 ]; do
  case "$1" in
    --profile) profile=$2; shift 2 ;;
    --no-build) build=no; shift ;;
    # Quicker, larger compression: for a package that is checked and thrown away.
    --fast) fast=(--fast); shift ;;
    *) echo "usage: scripts/package.sh [--profile NAME] [--no-build] [--fast]" >&2; exit 2 ;;
  esac
done
# Cargo's dev profile lives in target/debug; every other profile in a directory of its name.
case "$profile" in dev | debug) dir=target/debug ;; *) dir=target/$profile ;; esac

if [ "$(cargo deb --version 2>/dev/null)" != "cargo-deb $CARGO_DEB_VERSION" ]; then
  echo "== cargo install cargo-deb $CARGO_DEB_VERSION"
  # Built for a packaging tool, not for speed: no LTO and parallel codegen cut the build a
  # fresh CI machine pays.
  CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
    cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked
fi

if [ "$build" = yes ] && [ "$profile" = dist ]; then
  # The dist binaries with their hot functions laid out together (where this machine can count
  # them: see that script).
  scripts/build-dist.sh
elif [ "$build" = yes ]; then
  echo "== cargo build --profile $profile"
  cargo build --profile "$profile" -p outboard-server -p outboard-cli
fi

echo "== man pages and completions (from the binaries' own clap definitions)"
out=target/package
rm -rf "$out"
mkdir -p "$out/man" "$out/completions/bash" "$out/completions/zsh" "$out/completions/fish"
for bin in outboard outboard-server; do
  "$dir/$bin" man "$out/man" >/dev/null
  "$dir/$bin" completions bash >"$out/completions/bash/$bin"
  "$dir/$bin" completions zsh >"$out/completions/zsh/_$bin"
  "$dir/$bin" completions fish >"$out/completions/fish/$bin.fish"
done

echo "== cargo deb ($dir)"
# cargo-deb warns that a dev profile is not for releases: this one is a check of the package.
cargo deb -p outboard-server --no-build --profile "$profile" "${fast[@]}" --output "$out/"
ls "$out"/*.deb
