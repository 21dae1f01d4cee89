#!/usr/bin/env bash
# A throwaway MariaDB for the MySQL/MariaDB datasource tests and benchmarks, on 127.0.0.1 with
# its own data directory. Installs Debian's package when no server binary is found.
#   scripts/mariadb.sh start DIR PORT   prints "export MYTEST_URL=…" lines for eval
#   scripts/mariadb.sh stop DIR
# Every statement the server receives goes to DIR/general.log (the general query log): the tests
# read it to prove what was pushed down. The tests log in as `mindlite` with a password, over
# TCP, as a user's datasource would.
# MARIADB_BUFFER_POOL sets innodb_buffer_pool_size (256M; the TPC-H bench gives it more).
set -euo pipefail

if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ] && [ "${1:-}" = start ]; then
  echo "installing MariaDB from Debian's packages" >&2
  if [ "$(id -u)" -eq 0 ]; then sudo=""; else sudo="sudo"; fi
  $sudo apt-get update -qq >&2
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mariadb-server mariadb-client >&2
fi
server=$(command -v mariadbd || echo /usr/sbin/mariadbd)

case "${1:-}" in
  start)
    dir=$2 port=$3
    mkdir -p "$dir"
    dir=$(cd "$dir" && pwd)
    # mariadbd will not run as root: it runs as the package's `mysql` user then.
    user=$(id -un)
    if [ "$(id -u)" -eq 0 ]; then
      user=mysql
      chown mysql "$dir"; chmod 700 "$dir"
      chmod o+x "$(dirname "$dir")"
    fi
    mariadb-install-db --no-defaults --user="$user" --datadir="$dir/data" \
      --auth-root-authentication-method=normal --skip-test-db >"$dir/install.log" 2>&1 \
      || { cat "$dir/install.log" >&2; exit 1; }
    "$server" --no-defaults --user="$user" --datadir="$dir/data" --bind-address=127.0.0.1 \
      --port="$port" --socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" \
      --general-log=1 --general-log-file="$dir/general.log" --log-error="$dir/error.log" \
      --character-set-server=utf8mb4 --collation-server=utf8mb4_unicode_ci \
      --innodb-flush-log-at-trx-commit=0 --innodb-buffer-pool-size="${MARIADB_BUFFER_POOL:-256M}" \
      --skip-name-resolve >/dev/null 2>&1 &
    for _ in $(seq 1 100); do
      if mariadb --no-defaults -uroot --socket="$dir/mysqld.sock" -e 'SELECT 1' >/dev/null 2>&1; then
        break
      fi
      sleep 0.2
    done
    mariadb --no-defaults -uroot --socket="$dir/mysqld.sock" -e "
      CREATE USER 'mindlite'@'127.0.0.1' IDENTIFIED BY 'mindlite';
      GRANT ALL ON *.* TO 'mindlite'@'127.0.0.1';
      CREATE DATABASE mindlite;" \
      || { cat "$dir/error.log" >&2; exit 1; }
    echo "export MYTEST_URL=mysql://mindlite:mindlite@127.0.0.1:$port/mindlite"
    echo "export MYTEST_LOG=$dir/general.log"
    echo "export MYTEST_SOCKET=$dir/mysqld.sock"
    ;;
  stop)
    dir=$2
    if [ -f "$dir/mysqld.pid" ]; then
      pid=$(cat "$dir/mysqld.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    ;;
  *)
    echo "usage: $0 start DIR PORT | stop DIR" >&2; exit 2 ;;
esac
