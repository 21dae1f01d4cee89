#!/usr/bin/env bash
# The index benchmark: a point lookup on a 10M-row table, through a secondary index and by a
# full scan, on mindlite (release build, benches/src/index.rs), DuckDB and sqlite3
# (benches/index_bench.py), in one run. Not part of CI.
# Usage: benches/index.sh [ROWS] [LOOKUPS]
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-10000000}
lookups=${2:-1000}
venv=.venv-bench
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q pyarrow numpy duckdb
cargo build --release -p mindlite-benches
mkdir -p benches/data
target/release/mindlite-bench index --rows "$rows" --lookups "$lookups" | tee benches/data/index-mindlite.json
# The peers, and the table of all three (the mindlite line read from the file above).
"$venv/bin/python" benches/index_bench.py "$rows" "$lookups" --engines duckdb,sqlite \
  --with benches/data/index-mindlite.json
