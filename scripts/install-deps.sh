#!/usr/bin/env bash
# Installs the system packages weir needs to build, when they are missing.
set -euo pipefail

missing=()
dpkg -s libclang-dev >/dev/null 2>&1 || missing+=(libclang-dev)
# clang compiles RocksDB's C++ in three quarters of gcc's time
# (scripts/toolchain/, docs/operations.md).
command -v clang++ >/dev/null 2>&1 || missing+=(clang)
# OpenSSL for librdkafka: Kafka connections over TLS and SASL/SCRAM logins.
dpkg -s libssl-dev >/dev/null 2>&1 || missing+=(libssl-dev)
command -v pkg-config >/dev/null 2>&1 || missing+=(pkg-config)
# openssl and curl: the TLS tests make certificates and fetch over HTTPS.
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v curl >/dev/null 2>&1 || missing+=(curl)
# prometheus: tests/prometheus.rs scrapes a node with it; chromium:
# tests/dashboard.rs opens the dashboard in it, headless.
command -v prometheus >/dev/null 2>&1 || missing+=(prometheus)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v cc >/dev/null 2>&1 || missing+=(build-essential)
# psql: tests/psql.rs runs its meta-commands against weir.
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)

if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# psycopg 3: the Python driver the driver tests and the benchmarks use.
if ! python3 -c "import psycopg" >/dev/null 2>&1; then
  echo "installing: psycopg (pip)" >&2
  python3 -m pip install --quiet --disable-pip-version-check "psycopg[binary]"
fi

# The drivers and catalog clients the client tests run (tests/drivers.rs,
# tests/catalog_clients.rs): psycopg2, asyncpg, SQLAlchemy 2, pgcli, and
# node-postgres.
if ! python3 -c "import psycopg2, asyncpg, sqlalchemy" >/dev/null 2>&1; then
  echo "installing: psycopg2-binary asyncpg sqlalchemy (pip)" >&2
  python3 -m pip install --quiet --disable-pip-version-check psycopg2-binary asyncpg "sqlalchemy>=2"
fi
if ! python3 -c "import pgcli.pgexecute" >/dev/null 2>&1; then
  echo "installing: pgcli (pip)" >&2
  python3 -m pip install --quiet --disable-pip-version-check pgcli
fi
node_tests="$(dirname "$0")/../tests/drivers/node"
if [[ ! -d $node_tests/node_modules/pg ]]; then
  echo "installing: node-postgres (npm ci in tests/drivers/node)" >&2
  (cd "$node_tests" && npm ci --no-audit --no-fund --silent)
fi
# playwright-core drives Chromium for tests/dashboard.rs; it uses Debian's
# chromium and downloads no browser of its own.
dashboard_tests="$(dirname "$0")/../tests/dashboard"
if [[ ! -d $dashboard_tests/node_modules/playwright-core ]]; then
  echo "installing: playwright-core (npm ci in tests/dashboard)" >&2
  (cd "$dashboard_tests" && npm ci --no-audit --no-fund --silent)
fi
