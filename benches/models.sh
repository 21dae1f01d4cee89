#!/usr/bin/env bash
# The models benchmark: training time of the built-in engine (100k rows × 10 columns, regression
# and classification) and prediction rows/s through `t JOIN model`, release build. Not part of
# CI. Usage: benches/models.sh [ROWS] [PREDICT_ROWS] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p mindlite-benches --bin mindlite-bench
target/release/mindlite-bench models --rows "${1:-100000}" --predict-rows "${2:-1000000}" --runs "${3:-3}"
