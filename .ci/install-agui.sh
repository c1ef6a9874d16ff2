#!/usr/bin/env bash
# Installs what harness-server's AG-UI test needs, idempotently, on a fresh Debian machine (as
# root): Node.js and npm (from Debian if missing), then, from the committed package-lock.json,
# the official AG-UI client @ag-ui/client 1.0.0 into harness-server/tests/agui/node_modules.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=harness-server/tests/agui

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq nodejs npm >/dev/null
fi

installed_version() {
    node -p "require('./$dir/node_modules/@ag-ui/client/package.json').version" 2>/dev/null || true
}

if [ "$(installed_version)" = "1.0.0" ]; then
    echo "@ag-ui/client already installed ($dir)"
    exit 0
fi

(cd "$dir" && npm ci --no-audit --no-fund)
test "$(installed_version)" = "1.0.0"
echo "install-agui: installed @ag-ui/client 1.0.0"
