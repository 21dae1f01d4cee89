#!/usr/bin/env bash
# The callbacks benchmark: delay from a model's status change to the receipt of its signed POST
# at a receiver on 127.0.0.1, p50 and p99 over N events, release build. Not part of CI.
# Usage: benches/callbacks.sh [EVENTS]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p mindlite-benches --bin mindlite-bench
target/release/mindlite-bench callbacks --events "${1:-1000}"
