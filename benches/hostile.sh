#!/usr/bin/env bash
# Hostile-tenant benchmark, run on demand (not in CI): builds mindlite-server in release mode and
# measures how fast a second tenant's `SELECT 1` and one-row INSERTs stay while another tenant
# attacks the hosted server (runaway and memory-heavy queries, long writes, hostile LLM replies,
# a Parquet bomb, slowloris, idle connections, endless bodies, SSRF, floods), the server's peak
# RSS, and that it survives. `--seconds N` sets each phase's length (default 30).
# Needs python3 with requests and pyarrow. Figures go into the README by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
binary=$(bash scripts/release.sh)
python3 benches/hostile_bench.py "$binary" "$@"
