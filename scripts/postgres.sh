#!/usr/bin/env bash
# A throwaway PostgreSQL for the datasource tests and benchmarks, on 127.0.0.1 with its own data
# directory. Installs Debian's package when no server binaries are found.
#   scripts/postgres.sh start DIR PORT   prints "export PGTEST_URL=…" lines for eval
#   scripts/postgres.sh stop DIR
# Every statement the server receives goes to DIR/postgres.log (log_statement = all): the tests
# read it to prove what was pushed down. PG_BIN names other server binaries (scripts/pgvector.sh
# passes those of PostgreSQL with pgvector).
set -euo pipefail

find_bin() {
  local dir
  for dir in /usr/lib/postgresql/*/bin; do
    if [ -x "$dir/initdb" ]; then echo "$dir"; return 0; fi
  done
  return 1
}

bin=${PG_BIN:-$(find_bin || true)}
if [ -z "$bin" ] && [ "${1:-}" = start ]; then
  echo "installing PostgreSQL from Debian's packages" >&2
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
  bin=$(find_bin)
fi

# initdb and postgres refuse to run as root: run them as the package's `postgres` user then.
as_owner() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "${1:-}" in
  start)
    dir=$2 port=$3
    mkdir -p "$dir"
    if [ "$(id -u)" -eq 0 ]; then
      chown postgres "$dir"; chmod 700 "$dir"
      # The server runs as `postgres`, which must be able to reach DIR.
      chmod o+x "$(dirname "$dir")"
      if ! runuser -u postgres -- test -w "$dir"; then
        echo "the postgres user cannot reach $dir; use a directory under /tmp" >&2; exit 1
      fi
    fi
    as_owner "$bin/initdb" -D "$dir/data" -U mindlite --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w -o \
      "-c listen_addresses=127.0.0.1 -p $port -k $dir -c log_statement=all -c fsync=off -c log_line_prefix= -c log_parameter_max_length=0" \
      start >/dev/null
    echo "export PGTEST_URL=postgresql://mindlite@127.0.0.1:$port/postgres"
    echo "export PGTEST_LOG=$dir/postgres.log"
    ;;
  stop)
    dir=$2
    if [ -n "$bin" ] && [ -f "$dir/data/postmaster.pid" ]; then
      as_owner "$bin/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null
    fi
    ;;
  *)
    echo "usage: $0 start DIR PORT | stop DIR" >&2; exit 2 ;;
esac
