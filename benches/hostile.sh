#!/usr/bin/env bash
# Hostile-tenant benchmark, run on demand (not in CI): builds mindlite-server in release mode and
# measures how fast a second tenant's `SELECT 1` and one-row INSERTs stay while another tenant
# attacks the hosted server (runaway and memory-heavy queries, long writes, hostile LLM replies,
# Parquet bombs, slowloris, idle and silent connections, endless bodies, SSRF, floods, huge KB
# LIMITs, list parameters, training rows, expression results and KB chunking, keyed inserts and
# index builds, costly callback filters, 30,000-column SELECTs, web-page requests, abandoned
# questions, deadline side doors), the server's peak RSS, and that it survives; goals: `SELECT 1` p99 < 50 ms, INSERT p99 < 100 ms, peak RSS < 512 MiB, no crash.
# `--seconds N` sets each phase's length (default 30); `--attacks a,b` runs a subset.
# Needs python3 with requests, numpy and pyarrow. Figures go into docs/benchmarks.md by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
binary=$(bash scripts/release.sh)
python3 benches/hostile_bench.py "$binary" "$@"
