#!/usr/bin/env bash
# Installs what harness-server's schemathesis run needs, idempotently, on a fresh Debian
# machine (as root): Python 3 with venv (from Debian if missing), then schemathesis and its
# dependencies at the versions pinned in harness-server/tests/schemathesis/requirements.txt,
# into the git-ignored virtual environment harness-server/tests/schemathesis/.venv.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=harness-server/tests/schemathesis
venv=$dir/.venv
wanted=$(grep '^schemathesis==' "$dir/requirements.txt" | cut -d= -f3)

if [ -x "$venv/bin/st" ] && [ "$("$venv/bin/st" --version 2>/dev/null | awk '{print $3}')" = "$wanted" ]; then
    echo "schemathesis $wanted already installed ($venv)"
    exit 0
fi

if ! python3 -c 'import venv, ensurepip' >/dev/null 2>&1; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq python3 python3-venv python3-pip >/dev/null
fi

rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --disable-pip-version-check -r "$dir/requirements.txt"
test "$("$venv/bin/st" --version | awk '{print $3}')" = "$wanted"
echo "install-schemathesis: installed schemathesis $wanted"
