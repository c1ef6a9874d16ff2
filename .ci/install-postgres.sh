#!/usr/bin/env bash
# Installs what harness-store's PostgreSQL tests need on a fresh Debian machine, as root:
# Debian's `postgresql` package (its server programs: initdb, postgres, pg_ctl). The tests
# start their own throwaway cluster in a temporary directory on a free loopback port, as the
# `postgres` user the package creates; no system cluster or service is used. Idempotent.
set -euo pipefail

found() {
    command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null
}

if found && id postgres >/dev/null 2>&1; then
    echo "install-postgres: PostgreSQL already installed"
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "install-postgres: run as root (apt-get installs Debian's postgresql package)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends postgresql >/dev/null
found
id postgres
echo "install-postgres: installed"
