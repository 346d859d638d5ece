#!/usr/bin/env bash
# Install the PostgreSQL server binaries the Postgres reader tests start (initdb, pg_ctl).
# Does nothing when initdb is already on PATH or under /usr/lib/postgresql/*/bin.
set -euo pipefail

if command -v initdb >/dev/null 2>&1 || compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null; then
    echo "postgresql server binaries present"
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends postgresql
