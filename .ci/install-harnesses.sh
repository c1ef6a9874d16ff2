#!/usr/bin/env bash
# Installs the real harnesses the harness-acp tests drive (tests/real_harnesses.rs), and the
# mock model server they talk to, idempotently, on a fresh Debian machine (as root): Node.js
# and npm (from Debian if missing), then, from the committed package-lock.json, the pinned npm
# packages of adapters/acp/tests/harnesses/package.json into its node_modules (git-ignored;
# about 1.3 GB, ~30 s). A second run with the same lockfile does nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=adapters/acp/tests/harnesses

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq nodejs npm >/dev/null
fi

# The stamp is the lockfile the install came from: when it matches the committed one, the
# install is current.
stamp=$dir/node_modules/.installed-from
if [ -f "$stamp" ] && cmp -s "$stamp" "$dir/package-lock.json"; then
    echo "real harnesses already installed ($dir)"
    exit 0
fi

(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
cp "$dir/package-lock.json" "$stamp"

for file in \
    @copilotkit/aimock/dist/cli.js \
    @google/gemini-cli/bundle/gemini.js \
    @agentclientprotocol/claude-agent-acp/dist/index.js \
    @zed-industries/claude-agent-acp/dist/index.js \
    @agentclientprotocol/codex-acp/dist/index.js \
    @zed-industries/codex-acp-linux-x64/bin/codex-acp; do
    test -e "$dir/node_modules/$file" || { echo "install-harnesses: $file missing" >&2; exit 1; }
done
echo "real harnesses installed ($dir): node $(node --version)"
