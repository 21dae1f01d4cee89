#!/usr/bin/env bash
# TPC-H over PostgreSQL or MariaDB: loads TPC-H data into a throwaway server (scripts/postgres.sh
# or scripts/mariadb.sh), times the 22 queries of benches/tpch/ on the server itself (median of
# 3, one run past 60 s, TPCH_TIMEOUT seconds a statement), then runs them through mindlite with
# push-down and without (`mindlite-bench tpch`, release build), which also checks that both
# return the same rows. Not part of CI. Usage: benches/tpch.sh [QUERIES, e.g. 1,3,17]
#   TPCH_SERVER   postgres (default) or mariadb
#   TPCH_SF       scale factor (1)
#   TPCH_DATA     where the generated CSVs and the results go (target/tpch-sf$TPCH_SF)
#   TPCH_TIMEOUT  seconds a query may run (300)
#   TPCH_TOOLS    where tpchgen-cli is, or is installed with cargo (/work/tools)
#   CARGO         the cargo to build with (cargo)
set -euo pipefail
cd "$(dirname "$0")/.."
server=${TPCH_SERVER:-postgres}
sf=${TPCH_SF:-1}
data=${TPCH_DATA:-$PWD/target/tpch-sf$sf}
timeout=${TPCH_TIMEOUT:-300}
tools=${TPCH_TOOLS:-/work/tools}
queries=${1:-$(seq -s, 1 22)}
tables="region nation part supplier partsupp customer orders lineitem"
keys="
  alter table region add primary key (r_regionkey);
  alter table nation add primary key (n_nationkey);
  alter table part add primary key (p_partkey);
  alter table supplier add primary key (s_suppkey);
  alter table partsupp add primary key (ps_partkey, ps_suppkey);
  alter table customer add primary key (c_custkey);
  alter table orders add primary key (o_orderkey);
  alter table lineitem add primary key (l_orderkey, l_linenumber);"

if [ ! -f "$data/lineitem.csv" ]; then
  if [ ! -x "$tools/bin/tpchgen-cli" ]; then
    cargo install tpchgen-cli --root "$tools" --target-dir "$tools/target"
  fi
  mkdir -p "$data"
  "$tools/bin/tpchgen-cli" csv -s "$sf" -o "$data" --overwrite -q
fi
mkdir -p "$data/results"

dir=$(mktemp -d)
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
case "$server" in
  postgres)
    trap 'bash scripts/postgres.sh stop "$dir/pg"; rm -rf "$dir"' EXIT
    eval "$(bash scripts/postgres.sh start "$dir/pg" "$port")"
    export PGTEST_URL
    psql "$PGTEST_URL" -X -q -v ON_ERROR_STOP=1 -f benches/tpch/schema.sql
    for t in $tables; do
      echo "loading $t" >&2
      psql "$PGTEST_URL" -X -q -v ON_ERROR_STOP=1 \
        -c "\\copy $t from '$data/$t.csv' with (format csv, header true)"
    done
    psql "$PGTEST_URL" -X -q -v ON_ERROR_STOP=1 -c "$keys analyze;"
    ;;
  mariadb)
    trap 'bash scripts/mariadb.sh stop "$dir/my"; rm -rf "$dir"' EXIT
    # A buffer pool that holds SF1 (InnoDB reads past the page cache).
    eval "$(MARIADB_BUFFER_POOL=${MARIADB_BUFFER_POOL:-3G} bash scripts/mariadb.sh start "$dir/my" "$port")"
    export MYTEST_URL
    my() { mariadb --no-defaults -uroot --socket="$MYTEST_SOCKET" mindlite "$@"; }
    my < benches/tpch/schema.sql
    # Keys first: InnoDB clusters rows by them, and the files come in key order.
    my -e "$keys"
    for t in $tables; do
      echo "loading $t" >&2
      my --local-infile=1 -e "load data local infile '$data/$t.csv' into table $t
        character set utf8mb4 fields terminated by ',' optionally enclosed by '\"' ignore 1 lines"
    done
    my -e "analyze table $(echo $tables | tr ' ' ',')" >/dev/null
    # The statement log is for the tests; here it would only cost.
    my -e "set global general_log = 0"
    ;;
  *) echo "TPCH_SERVER is postgres or mariadb, not $server" >&2; exit 2 ;;
esac

${CARGO:-cargo} build --release -p mindlite-benches --bin mindlite-bench

# One run of query $1 on the server: its seconds, or "timeout".
server_run() {
  local out start end
  case "$server" in
    postgres)
      out=$(psql "$PGTEST_URL" -X -q -c "set statement_timeout = '${timeout}s'" -c '\timing on' \
        -c '\o /dev/null' -f "benches/tpch/q$1.sql" 2>&1 || true)
      case "$out" in
        *"statement timeout"*) echo timeout ;;
        *ERROR*) echo "q$1 failed on PostgreSQL: $out" >&2; echo error ;;
        *) sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' <<<"$out" | tail -1 | awk '{printf "%.2f\n", $1 / 1000}' ;;
      esac
      ;;
    mariadb)
      # Wall time of the client, which starts in milliseconds.
      start=$(date +%s.%N)
      out=$( (echo "set session max_statement_time = $timeout;"; cat "benches/tpch/q$1.sql") \
        | my 2>&1 >/dev/null || true)
      end=$(date +%s.%N)
      case "$out" in
        *max_statement_time*) echo timeout ;;
        *ERROR*) echo "q$1 failed on MariaDB: $out" >&2; echo error ;;
        *) awk "BEGIN { printf \"%.2f\n\", $end - $start }" ;;
      esac
      ;;
  esac
}

times="$data/results/${server}_times.txt"
: >"$times"
for q in ${queries//,/ }; do
  runs=()
  for _ in 1 2 3; do
    t=$(server_run "$q")
    runs+=("$t")
    if [ "$t" = timeout ] || [ "$t" = error ] || awk "BEGIN { exit !($t > 60) }"; then break; fi
  done
  # The median: the middle of the sorted runs (the one run when there is one).
  median=$(printf '%s\n' "${runs[@]}" | sort -g | sed -n "$(( (${#runs[@]} + 1) / 2 ))p")
  echo "q$q $median" | tee -a "$times" >&2
done

target/release/mindlite-bench tpch --server "$server" --queries "$queries" --timeout "$timeout" \
  --server-times "$times" | tee "$data/results/mindlite-$server.txt"
