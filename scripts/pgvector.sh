#!/usr/bin/env bash
# A throwaway PostgreSQL with pgvector, for the knowledge bases kept in PostgreSQL. Debian has no
# pgvector package for these machines; the PyPI package `pgserver` ships PostgreSQL 16 with
# pgvector's vector.so. Its wheel is fetched once (pip, checked by its hash), unpacked into
# CACHE, and its binaries run by scripts/postgres.sh.
#   scripts/pgvector.sh start CACHE DIR PORT   prints "export PGVECTOR_TEST_URL=…" lines for eval
#   scripts/pgvector.sh stop CACHE DIR
set -euo pipefail
cd "$(dirname "$0")/.."

version=0.1.4
wheel=pgserver-$version-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
sha256=d595789b47624a3d963aa9aa6359da9be31beb7e61f1a45541953242068b8813

unpack() {
  local cache=$1 python=${PYTHON:-python3}
  local install="$cache/pgserver-$version/pgserver/pginstall"
  if [ ! -x "$install/bin/postgres" ]; then
    mkdir -p "$cache"
    if [ ! -f "$cache/$wheel" ]; then
      # The wheel's binaries do not depend on Python: the same one serves any interpreter.
      "$python" -m pip download --quiet --disable-pip-version-check --no-deps \
        --only-binary=:all: --python-version 3.11 --platform manylinux2014_x86_64 \
        -d "$cache" "pgserver==$version" >&2
    fi
    echo "$sha256  $cache/$wheel" | sha256sum --check --quiet >&2
    rm -rf "$cache/pgserver-$version"
    "$python" -m zipfile -e "$cache/$wheel" "$cache/pgserver-$version" >&2
    chmod -R a+rX "$cache/pgserver-$version"
    chmod a+x "$install"/bin/*
  fi
  if [ ! -f "$install/lib/postgresql/vector.so" ]; then
    echo "pgvector (vector.so) is missing from $install" >&2; exit 1
  fi
  echo "$install/bin"
}

case "${1:-}" in
  start)
    cache=$(mkdir -p "$2" && cd "$2" && pwd) dir=$3 port=$4
    bin=$(unpack "$cache")
    # The server runs as `postgres` when started by root: it must reach the binaries.
    parent=$cache
    while [ "$parent" != / ]; do chmod o+x "$parent" 2>/dev/null || true; parent=$(dirname "$parent"); done
    PG_BIN=$bin bash scripts/postgres.sh start "$dir" "$port" | sed 's/PGTEST_/PGVECTOR_TEST_/'
    ;;
  stop)
    cache=$2 dir=$3
    bin="$cache/pgserver-$version/pgserver/pginstall/bin"
    if [ -x "$bin/pg_ctl" ]; then PG_BIN=$bin bash scripts/postgres.sh stop "$dir"; fi
    ;;
  *)
    echo "usage: $0 start CACHE DIR PORT | stop CACHE DIR" >&2; exit 2 ;;
esac
