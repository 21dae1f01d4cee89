#!/usr/bin/env bash
# The datasources benchmark: a filtered query over a 1M-row PostgreSQL table, with push-down and
# without (rows transferred and time), release build. Starts a throwaway PostgreSQL with
# scripts/postgres.sh. Not part of CI. Usage: benches/datasources.sh [ROWS] [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
rows=${1:-1000000}
cargo build --release -p mindlite-benches --bin mindlite-bench
dir=$(mktemp -d)
trap 'bash scripts/postgres.sh stop "$dir/pg"; rm -rf "$dir"' EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pg_env=$(bash scripts/postgres.sh start "$dir/pg" "$port")
eval "$pg_env"
export PGTEST_URL
psql "$PGTEST_URL" -q -v ON_ERROR_STOP=1 -c "
  CREATE TABLE bench_rows AS
    SELECT i AS id, i % 100 AS category, ((i::int8 * 7919) % 1000)::float8 AS amount, 'name ' || i AS name
    FROM generate_series(1, $rows) i;
  ANALYZE bench_rows;"
target/release/mindlite-bench datasources --rows "$rows" --runs "${2:-5}"
