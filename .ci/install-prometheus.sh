#!/usr/bin/env bash
# Installs what harness-observe's tests need on a fresh Debian machine, as root:
# `prometheus` (the server, scraped by tests/prometheus.rs) and `promtool` (the exposition
# linter). Debian's `prometheus` package ships both. Idempotent: does nothing when both are
# already on PATH.
set -euo pipefail

if command -v promtool >/dev/null 2>&1 && command -v prometheus >/dev/null 2>&1; then
    echo "install-prometheus: prometheus and promtool already installed"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-prometheus: run as root (apt-get installs Debian's prometheus package)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends prometheus

# The package may start a system service on machines with an init system; the tests start
# their own server on a free loopback port and need no service.
command -v promtool
command -v prometheus
