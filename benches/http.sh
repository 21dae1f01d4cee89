#!/usr/bin/env bash
# HTTP server benchmark, run on demand (not in CI): builds mindlite-server in release mode and
# measures start-up, idle RSS, SELECT 1 throughput and latency (wrk) and 1M-row results.
# Needs wrk (apt-get install wrk). Figures go into docs/benchmarks.md by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install wrk"; exit 1; }
binary=$(bash scripts/release.sh)
python3 benches/http_bench.py "$binary"
