#!/usr/bin/env bash
# The release build of mindlite-server, hot code first: builds it, runs it under valgrind's
# callgrind through start-up and common requests (scripts/hot_code.py writes the functions that
# ran, in order, to <target>/hot-symbols.txt), then relinks it with that order
# (MINDLITE_HOT_SYMBOLS, read by server/build.rs). The list is read from the build it orders, so
# it always matches; without valgrind the server is built without it (about 40 MiB more code
# resident when idle, nothing else). Prints the binary's path last.
set -euo pipefail
cd "$(dirname "$0")/.."
target_dir=${CARGO_TARGET_DIR:-target}
case "$target_dir" in /*) ;; *) target_dir="$(pwd)/$target_dir" ;; esac
binary="$target_dir/release/mindlite-server"
list="$target_dir/hot-symbols.txt"
unset MINDLITE_HOT_SYMBOLS
cargo build --release -p mindlite-server >&2
if command -v valgrind >/dev/null 2>&1; then
  python3 scripts/hot_code.py "$binary" "$list" >&2
  MINDLITE_HOT_SYMBOLS="$list" cargo build --release -p mindlite-server >&2
else
  echo "valgrind is missing (apt-get install valgrind): built without the hot-code order" >&2
fi
echo "$binary"
