#!/usr/bin/env bash
# Builds and runs every test: unit tests beside the code, end-to-end server
# tests, Kafka tests against a loopback broker, and every .slt file under
# sql-tests/ over both pgwire protocols, each against a real weir process with
# its own port and data directory.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}
scripts/install-deps.sh
# The Kafka tests need a broker: one named by KAFKA_BOOTSTRAP, or our own for
# this run. On a fresh machine its one-time install compiles beside weir.
if [[ -z ${KAFKA_BOOTSTRAP:-} ]]; then
  scripts/kafka-broker.sh install >/dev/null &
  broker_install=$!
fi
cargo build --tests --bins
if [[ -z ${KAFKA_BOOTSTRAP:-} ]]; then
  wait "$broker_install"
  kafka_dir=$(mktemp -d)
  # Stopping must not change the exit status, which is the tests'.
  trap 'scripts/kafka-broker.sh stop "$kafka_dir" || true; rm -rf "$kafka_dir"' EXIT
  KAFKA_BOOTSTRAP=$(scripts/kafka-broker.sh start "$kafka_dir")
  export KAFKA_BOOTSTRAP
  echo "Kafka tests use the broker at $KAFKA_BOOTSTRAP (log: $kafka_dir/broker.log)" >&2
fi
# Every slt query is also checked as a materialized view against the batch engine.
export WEIR_SLT_CHECK_VIEWS=${WEIR_SLT_CHECK_VIEWS:-1}
cargo test --no-fail-fast -- "$@"
