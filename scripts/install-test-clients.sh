#!/usr/bin/env bash
# Installs the clients no one here wrote that the end-to-end tests drive Outboard with, each in
# its own folder under the target directory (never system-wide), at a pinned version. Idempotent:
# a folder that already holds the right version is left alone.
#
#   claude-agent-sdk (PyPI): the Python Claude Agent SDK, which runs `outboard` as its `cli_path`
#   and speaks Claude Code's stream-json protocol to it (tests/tests/e2e/stream_json.rs,
#   tests/sdk/claude_sdk_check.py). Its wheel bundles a `claude` binary the tests never run.
#
# The tests find the folder beside the binaries they run: ${CARGO_TARGET_DIR:-target}/test-clients.
set -euo pipefail
cd "$(dirname "$0")/.."

CLAUDE_AGENT_SDK_VERSION="0.2.190"

target="${CARGO_TARGET_DIR:-$PWD/target}"
clients="$target/test-clients"
venv="$clients/claude-agent-sdk"
mkdir -p "$clients"

have="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("claude-agent-sdk"))' 2>/dev/null || true)"
if [ "$have" = "$CLAUDE_AGENT_SDK_VERSION" ]; then
  echo "== claude-agent-sdk $have is installed in $venv"
  exit 0
fi
echo "== installing claude-agent-sdk $CLAUDE_AGENT_SDK_VERSION into $venv"
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
  "claude-agent-sdk==$CLAUDE_AGENT_SDK_VERSION"
"$venv/bin/python" -c 'import claude_agent_sdk; print("== claude-agent-sdk", claude_agent_sdk.__version__)'
