#!/usr/bin/env bash
# Installs what harness-mcp's tests need, idempotently, on a fresh Debian machine (as root):
# Node.js and npm (from Debian if missing), then, from the committed package-lock.json, the
# reference MCP server @modelcontextprotocol/server-everything 2026.8.31 into
# harness-mcp/tests/servers/node_modules (~32 MB).
set -euo pipefail
cd "$(dirname "$0")/.."

dir=harness-mcp/tests/servers
want=2026.8.31

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq nodejs npm >/dev/null
fi

installed_version() {
    node -p "require('./$dir/node_modules/@modelcontextprotocol/server-everything/package.json').version" 2>/dev/null || true
}

if [ "$(installed_version)" = "$want" ]; then
    echo "@modelcontextprotocol/server-everything already installed ($dir)"
    exit 0
fi

(cd "$dir" && npm ci --no-audit --no-fund)
test "$(installed_version)" = "$want"
echo "install-mcp: installed @modelcontextprotocol/server-everything $want"
