#!/usr/bin/env bash
# Installs jq on a fresh Debian machine, as root: .ci/msrv and .ci/package read
# `cargo metadata`'s JSON with it. Idempotent.
set -euo pipefail

if command -v jq >/dev/null 2>&1; then
    echo "install-jq: jq already installed"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-jq: run as root (apt-get installs Debian's jq package)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends jq >/dev/null
command -v jq
echo "install-jq: installed"
