#!/usr/bin/env bash
# TPC-H over PostgreSQL: loads TPC-H data into a throwaway PostgreSQL (scripts/postgres.sh),
# times the 22 queries of benches/tpch/ on PostgreSQL itself (psql's \timing; median of 3, one
# run past 60 s, TPCH_TIMEOUT seconds a statement), then runs them through mindlite with
# push-down and without (`mindlite-bench tpch`, release build), which also checks that both
# return the same rows. Not part of CI. Usage: benches/tpch.sh [QUERIES, e.g. 1,3,17]
#   TPCH_SF       scale factor (1)
#   TPCH_DATA     where the generated CSVs and the results go (target/tpch-sf$TPCH_SF)
#   TPCH_TIMEOUT  seconds a query may run (300)
#   TPCH_TOOLS    where tpchgen-cli is, or is installed with cargo (/work/tools)
#   CARGO         the cargo to build with (cargo)
set -euo pipefail
cd "$(dirname "$0")/.."
sf=${TPCH_SF:-1}
data=${TPCH_DATA:-$PWD/target/tpch-sf$sf}
timeout=${TPCH_TIMEOUT:-300}
tools=${TPCH_TOOLS:-/work/tools}
queries=${1:-$(seq -s, 1 22)}
tables="region nation part supplier partsupp customer orders lineitem"

if [ ! -f "$data/lineitem.csv" ]; then
  if [ ! -x "$tools/bin/tpchgen-cli" ]; then
    cargo install tpchgen-cli --root "$tools" --target-dir "$tools/target"
  fi
  mkdir -p "$data"
  "$tools/bin/tpchgen-cli" csv -s "$sf" -o "$data" --overwrite -q
fi
mkdir -p "$data/results"

dir=$(mktemp -d)
trap 'bash scripts/postgres.sh stop "$dir/pg"; rm -rf "$dir"' EXIT
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
pg_env=$(bash scripts/postgres.sh start "$dir/pg" "$port")
eval "$pg_env"
export PGTEST_URL
psql "$PGTEST_URL" -X -q -v ON_ERROR_STOP=1 -f benches/tpch/schema.sql
for t in $tables; do
  echo "loading $t" >&2
  psql "$PGTEST_URL" -X -q -v ON_ERROR_STOP=1 \
    -c "\\copy $t from '$data/$t.csv' with (format csv, header true)"
done
psql "$PGTEST_URL" -X -q -v ON_ERROR_STOP=1 -c "
  alter table region add primary key (r_regionkey);
  alter table nation add primary key (n_nationkey);
  alter table part add primary key (p_partkey);
  alter table supplier add primary key (s_suppkey);
  alter table partsupp add primary key (ps_partkey, ps_suppkey);
  alter table customer add primary key (c_custkey);
  alter table orders add primary key (o_orderkey);
  alter table lineitem add primary key (l_orderkey, l_linenumber);
  analyze;"

${CARGO:-cargo} build --release -p mindlite-benches --bin mindlite-bench

# One run of query $1 on PostgreSQL: its seconds, or "timeout".
pg_run() {
  local out
  out=$(psql "$PGTEST_URL" -X -q -c "set statement_timeout = '${timeout}s'" -c '\timing on' \
    -c '\o /dev/null' -f "benches/tpch/q$1.sql" 2>&1 || true)
  case "$out" in
    *"statement timeout"*) echo timeout ;;
    *ERROR*) echo "q$1 failed on PostgreSQL: $out" >&2; echo error ;;
    *) sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' <<<"$out" | tail -1 | awk '{printf "%.2f\n", $1 / 1000}' ;;
  esac
}

times="$data/results/postgres_times.txt"
: >"$times"
for q in ${queries//,/ }; do
  runs=()
  for _ in 1 2 3; do
    t=$(pg_run "$q")
    runs+=("$t")
    if [ "$t" = timeout ] || [ "$t" = error ] || awk "BEGIN { exit !($t > 60) }"; then break; fi
  done
  # The median: the middle of the sorted runs (the one run when there is one).
  median=$(printf '%s\n' "${runs[@]}" | sort -g | sed -n "$(( (${#runs[@]} + 1) / 2 ))p")
  echo "q$q $median" | tee -a "$times" >&2
done

target/release/mindlite-bench tpch --queries "$queries" --timeout "$timeout" \
  --postgres-times "$times" | tee "$data/results/mindlite.txt"
