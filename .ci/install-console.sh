#!/usr/bin/env bash
# Installs what harness-server's console test needs, idempotently, on a fresh Debian machine
# (as root): Debian's Chromium (the browser the test drives headless), Node.js and npm (from
# Debian if missing), then playwright-core from the committed package-lock.json into
# harness-server/tests/console/node_modules. Playwright's own browser download is never used.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=harness-server/tests/console
export DEBIAN_FRONTEND=noninteractive

missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)
if [ ${#missing[@]} -gt 0 ]; then
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
fi

installed_version() {
    node -p "require('./$dir/node_modules/playwright-core/package.json').version" 2>/dev/null || true
}
wanted=$(node -p "require('./$dir/package.json').dependencies['playwright-core']")
if [ "$(installed_version)" = "$wanted" ]; then
    echo "playwright-core $wanted already installed ($dir); $(chromium --version)"
    exit 0
fi

(cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund)
test "$(installed_version)" = "$wanted"
echo "install-console: installed playwright-core $wanted; $(chromium --version)"
