#!/usr/bin/env bash
# Installs the system packages weir needs to build, when they are missing.
set -euo pipefail

missing=()
dpkg -s libclang-dev >/dev/null 2>&1 || missing+=(libclang-dev)
command -v cc >/dev/null 2>&1 || missing+=(build-essential)
# psql: tests/psql.rs runs its meta-commands against weir.
command -v psql >/dev/null 2>&1 || missing+=(postgresql-client)

if ((${#missing[@]})); then
  echo "installing: ${missing[*]}" >&2
  sudo_cmd=()
  [[ $(id -u) -ne 0 ]] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# psycopg 3: the Python driver the driver tests and the benchmarks use.
if ! python3 -c "import psycopg" >/dev/null 2>&1; then
  echo "installing: psycopg (pip)" >&2
  python3 -m pip install --quiet --disable-pip-version-check "psycopg[binary]"
fi

# The catalog clients tests/catalog_clients.rs runs: SQLAlchemy 2 with
# psycopg2, and pgcli (its completion queries).
if ! python3 -c "import sqlalchemy, psycopg2" >/dev/null 2>&1; then
  echo "installing: sqlalchemy, psycopg2-binary (pip)" >&2
  python3 -m pip install --quiet --disable-pip-version-check "sqlalchemy>=2" psycopg2-binary
fi
if ! python3 -c "import pgcli.pgexecute" >/dev/null 2>&1; then
  echo "installing: pgcli (pip)" >&2
  python3 -m pip install --quiet --disable-pip-version-check pgcli
fi
