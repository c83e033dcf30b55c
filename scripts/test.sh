#!/usr/bin/env bash
# Builds and runs every test: unit tests beside the code, end-to-end server
# tests, and every .slt file under sql-tests/ over both pgwire protocols,
# each against a real weir process with its own port and data directory.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}
scripts/install-deps.sh
cargo build --tests --bins
# Every slt query is also checked as a materialized view against the batch engine.
export WEIR_SLT_CHECK_VIEWS=${WEIR_SLT_CHECK_VIEWS:-1}
cargo test --no-fail-fast -- "$@"
