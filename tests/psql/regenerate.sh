#!/usr/bin/env bash
# Regenerates expected/*.out: PostgreSQL 15's answers to commands.txt on
# ddl.sql, from a scratch cluster whose superuser is named weir, like
# weir's one role. Needs PostgreSQL 15's server binaries and psql 15.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${PG_BIN:-/usr/lib/postgresql/15/bin}
work=$(mktemp -d)
run=()
if [[ $(id -u) -eq 0 ]]; then
  # initdb and postgres refuse to run as root.
  chown postgres "$work"
  run=(runuser -u postgres --)
fi
port=$((20000 + RANDOM % 20000))
"${run[@]}" "$bin/initdb" -D "$work/data" -U weir --auth=trust --no-sync -E UTF8 --locale=C.UTF-8 >/dev/null
"${run[@]}" "$bin/pg_ctl" -D "$work/data" -l "$work/log" -w \
  -o "-p $port -k $work -c listen_addresses=''" start >/dev/null
trap '"${run[@]}" "$bin/pg_ctl" -D "$work/data" -m fast -w stop >/dev/null; rm -rf "$work"' EXIT
export PGHOST=$work PGPORT=$port PGUSER=weir
createdb weir
psql -X -q -v ON_ERROR_STOP=1 -d weir -f "$here/ddl.sql"
mkdir -p "$here/expected"
rm -f "$here/expected/"*.out
n=0
grep -v '^#' "$here/commands.txt" | while IFS=$'\t' read -r _mode command; do
  n=$((n + 1))
  psql -X -d weir -c "$command" >"$here/expected/$(printf %02d "$n").out" 2>&1
done
