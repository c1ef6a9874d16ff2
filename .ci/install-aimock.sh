#!/usr/bin/env bash
# Installs what harness-openai's tests need, idempotently, on a fresh Debian machine (as
# root): Node.js and npm (from Debian if missing), then, from the committed package-lock.json,
# the mock model server @copilotkit/aimock 1.43.0 into adapters/openai/tests/aimock/node_modules
# (one package, no dependencies).
set -euo pipefail
cd "$(dirname "$0")/.."

dir=adapters/openai/tests/aimock
want=1.43.0

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq nodejs npm >/dev/null
fi

installed_version() {
    node -p "require('./$dir/node_modules/@copilotkit/aimock/package.json').version" 2>/dev/null || true
}

if [ "$(installed_version)" = "$want" ]; then
    echo "@copilotkit/aimock already installed ($dir)"
    exit 0
fi

(cd "$dir" && npm ci --no-audit --no-fund)
test "$(installed_version)" = "$want"
echo "install-aimock: installed @copilotkit/aimock $want"
