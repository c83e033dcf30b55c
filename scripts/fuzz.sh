#!/usr/bin/env bash
# Run every fuzz target under fuzz/fuzz_targets/ for SECONDS each (default 60):
#   scripts/fuzz.sh [SECONDS]
# cargo-fuzz asks for nightly; stable Rust builds the targets with
# RUSTC_BOOTSTRAP=1 and no sanitizer. Build output stays in fuzz/target,
# apart from the main build's. Crashes land in fuzz/artifacts/TARGET/;
# each one becomes a regression test beside the code it broke.
set -euo pipefail

seconds=${1:-60}
cd "$(dirname "$0")/.."
unset CARGO_TARGET_DIR
export RUSTC_BOOTSTRAP=1

command -v cargo-fuzz >/dev/null || {
    echo "cargo-fuzz is missing: cargo install cargo-fuzz --locked" >&2
    exit 1
}

for source in fuzz/fuzz_targets/*.rs; do
    target=$(basename "$source" .rs)
    corpus=fuzz/corpus/$target
    mkdir -p "$corpus"
    seeds=()
    [ -d "fuzz/seeds/$target" ] && seeds=("fuzz/seeds/$target")
    echo "== $target: ${seconds}s"
    cargo fuzz run "$target" --sanitizer none --target-dir fuzz/target \
        "$corpus" "${seeds[@]}" -- -max_total_time="$seconds" -rss_limit_mb=2048
done
