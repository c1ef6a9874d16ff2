#!/usr/bin/env bash
# Installs what harness-server's OTLP export test (tests/otlp.rs) needs, idempotently, on a
# fresh Debian machine (as root): Python 3 with venv (from Debian if missing), then the
# official OpenTelemetry protocol bindings (PyPI's opentelemetry-proto) and protobuf at the
# versions pinned in harness-server/tests/otlp/requirements.txt, into the git-ignored virtual
# environment harness-server/tests/otlp/.venv. The test's receiver (receiver.py) decodes what
# `harness serve` exports with them. (No OpenTelemetry Collector binary: its releases are on
# GitHub only.)
set -euo pipefail
cd "$(dirname "$0")/.."

dir=harness-server/tests/otlp
venv=$dir/.venv
wanted=$(grep '^opentelemetry-proto==' "$dir/requirements.txt" | cut -d= -f3)

installed() {
    "$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("opentelemetry-proto"))' 2>/dev/null
}

if [ -x "$venv/bin/python" ] && [ "$(installed)" = "$wanted" ]; then
    echo "opentelemetry-proto $wanted already installed ($venv)"
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
test "$(installed)" = "$wanted"
echo "install-otlp: installed opentelemetry-proto $wanted"
