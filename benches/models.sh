#!/usr/bin/env bash
# The models benchmark: training time of the built-in engine (100k rows × 10 columns, regression
# and classification) and prediction rows/s through `t JOIN model`, release build. Not part of
# CI. Usage: benches/models.sh [ROWS] [PREDICT_ROWS] [RUNS]
#   or: benches/models.sh --vs-sklearn [--big] [--only NAME[,NAME]] — held-out scores and
# training times beside scikit-learn's defaults on its datasets (benches/models_vs_sklearn.py).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--vs-sklearn" ]; then
  shift
  # The same venv and release wheel as benches/python.sh: the Python package is what this side
  # measures, and a debug extension's timings mean nothing.
  venv=.venv-bench
  if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
  fi
  "$venv/bin/pip" install -q maturin pyarrow numpy scikit-learn
  "$venv/bin/maturin" build --release --out benches/data/wheels
  "$venv/bin/pip" install -q --force-reinstall --no-deps benches/data/wheels/mindlite-*.whl
  (cd benches && "../$venv/bin/python" models_vs_sklearn.py "$@")
  exit 0
fi
cargo build --release -p mindlite-benches --bin mindlite-bench
target/release/mindlite-bench models --rows "${1:-100000}" --predict-rows "${2:-1000000}" --runs "${3:-3}"
