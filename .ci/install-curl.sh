#!/usr/bin/env bash
# Installs curl on a fresh Debian machine, as root: harness-server's README test runs the
# README's `curl` examples as written. Idempotent.
set -euo pipefail

if command -v curl >/dev/null 2>&1; then
    echo "install-curl: curl already installed"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-curl: run as root (apt-get installs Debian's curl package)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends curl ca-certificates >/dev/null
command -v curl
echo "install-curl: installed"
