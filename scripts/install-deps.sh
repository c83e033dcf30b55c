#!/usr/bin/env bash
# Installs the system packages weir needs to build, when they are missing.
set -euo pipefail

missing=()
dpkg -s libclang-dev >/dev/null 2>&1 || missing+=(libclang-dev)
command -v cc >/dev/null 2>&1 || missing+=(build-essential)

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
