#!/usr/bin/env bash
# Installs bubblewrap (`bwrap`) and perl on a fresh Debian machine, as root: harness-sandbox's
# tests (and the ACP adapter's sandboxed ones) make real sandboxes and try to escape them from
# inside, with perl for the network probes. Idempotent.
set -euo pipefail

if command -v bwrap >/dev/null 2>&1 && command -v perl >/dev/null 2>&1; then
    echo "install-bubblewrap: bwrap already installed ($(bwrap --version))"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-bubblewrap: run as root (apt-get installs Debian's bubblewrap package)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends bubblewrap perl >/dev/null
bwrap --version
echo "install-bubblewrap: installed"
