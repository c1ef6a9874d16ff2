#!/usr/bin/env bash
# Installs what the harness-acp tests need, idempotently, on a fresh Debian machine (as root):
# Node.js and npm (from Debian if missing), then, from the committed package-lock.json, the
# npm package @zed-industries/agent-client-protocol 0.4.5 (its example agent,
# typescript/examples/agent.ts, is the real third-party agent the tests drive) and tsx (which
# runs that TypeScript file), into adapters/acp/tests/agent/node_modules.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=adapters/acp/tests/agent
agent=$dir/node_modules/@zed-industries/agent-client-protocol/typescript/examples/agent.ts

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq nodejs npm >/dev/null
fi

installed_version() {
    node -p "require('./$dir/node_modules/@zed-industries/agent-client-protocol/package.json').version" 2>/dev/null || true
}

if [ -x "$dir/node_modules/.bin/tsx" ] && [ -f "$agent" ] && [ "$(installed_version)" = "0.4.5" ]; then
    echo "acp test agent already installed ($dir)"
    exit 0
fi

(cd "$dir" && npm ci --no-audit --no-fund)

test -x "$dir/node_modules/.bin/tsx"
test -f "$agent"
test "$(installed_version)" = "0.4.5"
echo "acp test agent installed ($dir): node $(node --version)"
