#!/usr/bin/env bash
# CI's check of the Debian package: packages the binaries the test build already made (no
# release build), installs the .deb on this machine with dpkg -i, checks what it installed, and
# purges it. Needs root (CI runs as root). Run it before scripts/client-only.sh, which replaces
# target/debug/outboard with the client-only build.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
  echo "package-check.sh: installs a package with dpkg -i: run it as root (CI does)" >&2
  exit 1
fi
if dpkg -s outboard >/dev/null 2>&1; then
  echo "package-check.sh: a package \`outboard\` is installed already: remove it first (dpkg --purge outboard)" >&2
  exit 1
fi

scripts/package.sh --profile dev --no-build --fast
deb=$(ls target/package/outboard_*.deb)

fail() {
  echo "package-check.sh: $*" >&2
  exit 1
}

echo "== dpkg -i $deb"
dpkg -i "$deb"
# From here on the package is removed whatever happens.
trap 'dpkg --purge outboard >/dev/null 2>&1 || true' EXIT

echo "== the installed package"
outboard --version | grep -q '^outboard ' || fail "outboard --version: $(outboard --version 2>&1)"
outboard-server --help | grep -q 'serve' || fail "outboard-server --help names no serve"
getent passwd outboard | grep -q ':/var/lib/outboard:/usr/sbin/nologin$' ||
  fail "no system user outboard with home /var/lib/outboard: $(getent passwd outboard)"
[ "$(stat -c '%U:%G %a' /etc/outboard/server.toml)" = "root:outboard 640" ] ||
  fail "/etc/outboard/server.toml is $(stat -c '%U:%G %a' /etc/outboard/server.toml)"
dpkg-query -W -f='${Conffiles}\n' outboard | grep -q '/etc/outboard/server.toml' ||
  fail "/etc/outboard/server.toml is not a conffile"
for page in outboard outboard-run outboard-server outboard-server-serve; do
  [ -s "/usr/share/man/man1/$page.1.gz" ] || [ -s "/usr/share/man/man1/$page.1" ] || fail "no man page $page"
done
for file in /usr/share/bash-completion/completions/outboard \
  /usr/share/zsh/vendor-completions/_outboard-server /usr/share/fish/vendor_completions.d/outboard.fish; do
  [ -s "$file" ] || fail "no completion $file"
done
unit=/lib/systemd/system/outboard-server.service
[ -f "$unit" ] || unit=/usr/lib/systemd/system/outboard-server.service
echo "== systemd-analyze verify $unit"
# Offline: systemd need not be running. Prints nothing when the unit is sound; any output (an
# unknown option, a missing binary or user, a man page of Documentation= missing) fails.
verify=$(systemd-analyze verify "$unit" 2>&1) || fail "systemd-analyze verify: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify: $verify"

echo "== dpkg --purge outboard"
trap - EXIT
dpkg --purge outboard
for path in /usr/bin/outboard /usr/bin/outboard-server "$unit" /etc/outboard \
  /usr/share/man/man1/outboard.1.gz; do
  [ ! -e "$path" ] || fail "$path is left after the purge"
done
# What the package keeps on purge by design (postrm): the user and its data directory. A CI
# machine is thrown away, a developer's is not: remove them as an administrator would.
deluser --system outboard >/dev/null
if getent group outboard >/dev/null; then delgroup --system outboard >/dev/null; fi
rm -rf /var/lib/outboard
echo "ok: installed, checked and purged $deb"
