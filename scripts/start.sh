#!/usr/bin/env bash
# Builds weir (release) and starts a node on its embedded defaults:
# pgwire on 127.0.0.1:6544, /metrics on 127.0.0.1:6545, data in ./weir-data.
# Extra arguments go to `weir serve`, e.g. --listen 0.0.0.0:6544.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/weir-target}
scripts/install-deps.sh
cargo build --release --bin weir
exec "$CARGO_TARGET_DIR/release/weir" serve "$@"
