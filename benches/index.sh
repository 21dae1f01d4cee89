#!/usr/bin/env bash
# The index benchmark: a release build of the package (what `pip install .` gives users)
# against DuckDB and sqlite3 on the same 10M rows, point lookups without and with
# CREATE INDEX. Not part of CI.
# Usage: benches/index.sh [ROWS] [LOOKUPS] [--engines mindlite,duckdb,sqlite] [--sqlite-rows N]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.venv-bench
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q maturin pyarrow numpy duckdb
# maturin builds the extension crate on its own (release profile) and installs the wheel.
"$venv/bin/maturin" build --release --out benches/data/wheels
"$venv/bin/pip" install -q --force-reinstall --no-deps benches/data/wheels/mindlite-*.whl
(cd benches && "../$venv/bin/python" index_bench.py "$@")
