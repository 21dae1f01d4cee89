#!/usr/bin/env bash
# The engine-core GROUP BY benchmark: mindlite (release build) against DuckDB and SQLite on the
# same 5M rows, in one run. Not part of CI. Usage: benches/groupby.sh [ROWS] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-5000000}
runs=${2:-5}
venv=.venv-bench
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q duckdb
fi
mkdir -p benches/data
cargo build --release -p mindlite-benches
csv=benches/data/groupby-$rows.csv
target/release/mindlite-bench groupby --rows "$rows" --runs "$runs" --csv "$csv" | tee benches/data/mindlite.json
"$venv/bin/python" benches/groupby_peers.py "$csv" "$runs" | tee benches/data/peers.json
"$venv/bin/python" - <<'PY'
import json
ml = json.load(open("benches/data/mindlite.json"))
peers = [json.loads(line) for line in open("benches/data/peers.json")]
duck = next(p for p in peers if p["engine"].startswith("duckdb"))
print(f"\n| engine | load s | query median ms | vs DuckDB |")
print("|---|---|---|---|")
print(f"| mindlite (chunk cache warm) | {ml['load_s']:.2f} | {ml['warm_median_ms']:.1f} | {ml['warm_median_ms'] / duck['median_ms']:.2f}x |")
print(f"| mindlite (no chunk cache) | | {ml['uncached_median_ms']:.1f} | {ml['uncached_median_ms'] / duck['median_ms']:.2f}x |")
print(f"| mindlite (first query after open) | | {ml['first_query_ms']:.1f} | {ml['first_query_ms'] / duck['median_ms']:.2f}x |")
print(f"| mindlite (second query: chunks enter the cache) | | {ml['second_query_ms']:.1f} | {ml['second_query_ms'] / duck['median_ms']:.2f}x |")
for p in peers:
    print(f"| {p['engine']} | {p['load_s']:.2f} | {p['median_ms']:.1f} | {p['median_ms'] / duck['median_ms']:.2f}x |")
PY
