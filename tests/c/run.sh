#!/usr/bin/env bash
# Builds the C tests as C11 and as C++17 against libmindlite, runs them, runs the C builds again
# under valgrind memcheck (0 errors, 0 definitely-lost bytes), and builds and runs examples/c
# against the static library. Expects `cargo build -p mindlite-ffi` to have run.
# Usage: tests/c/run.sh [TARGET_DIR]   (default: $CARGO_TARGET_DIR or ./target)
set -euo pipefail
cd "$(dirname "$0")/../.."
lib_dir="${1:-${CARGO_TARGET_DIR:-target}}/debug"
if [ ! -f "$lib_dir/libmindlite.so" ] || [ ! -f "$lib_dir/libmindlite.a" ]; then
  echo "no libmindlite in $lib_dir: run cargo build -p mindlite-ffi first"; exit 1
fi
lib_dir=$(cd "$lib_dir" && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

flags=(-Wall -Wextra -Werror -g -Iinclude -Itests/c)
tests=()
for source in tests/c/test_*.c; do
  name=$(basename "$source" .c)
  cc -std=c11 "${flags[@]}" "$source" -L"$lib_dir" -lmindlite -lpthread -o "$out/$name"
  c++ -std=c++17 -x c++ "${flags[@]}" "$source" -x none -L"$lib_dir" -lmindlite -lpthread -o "$out/$name-cpp"
  tests+=("$name")
done
echo "compiled ${#tests[@]} tests as C11 and C++17 with -Wall -Wextra -Werror"

run() { # name binary [runner...]
  local name=$1 binary=$2
  shift 2
  local dir="$out/data-$binary-$RANDOM"
  mkdir -p "$dir"
  local args=()
  case $name in test_basic | test_errors) args=("$dir") ;; esac
  LD_LIBRARY_PATH="$lib_dir" "$@" "$out/$binary" "${args[@]}"
}

for name in "${tests[@]}"; do
  run "$name" "$name"
  run "$name" "$name-cpp"
done

if command -v valgrind >/dev/null 2>&1; then
  checked=0
  for name in "${tests[@]}"; do
    # valgrind runs one thread at a time; its default scheduler lets a busy thread keep the
    # turn, so test_interrupt's endless statement starved the thread meant to interrupt it
    # (for minutes, once without end). The fair scheduler hands the turn round in order.
    run "$name" "$name" valgrind --quiet --fair-sched=yes --error-exitcode=99 --leak-check=full \
      --show-leak-kinds=definite --errors-for-leak-kinds=definite
    checked=$((checked + 1))
  done
  echo "valgrind memcheck: 0 errors, 0 definitely lost in $checked tests"
else
  echo "SKIPPED valgrind: not installed (apt-get install valgrind)"
  if [ "${CI:-}" = "true" ]; then exit 1; fi
fi

# The example links the static library, so it runs without LD_LIBRARY_PATH.
cc -std=c11 -Wall -Wextra -Werror -Iinclude examples/c/hello.c "$lib_dir/libmindlite.a" \
  -lpthread -ldl -lm -o "$out/hello"
"$out/hello" "$out/hello.redb" > "$out/hello.txt"
grep -q '^Lisbon ' "$out/hello.txt" && grep -q '"Porto"' "$out/hello.txt" || {
  echo "examples/c/hello printed:"; cat "$out/hello.txt"; exit 1
}
echo "examples/c/hello: ok"
# Each test ran as C and as C++, those under valgrind once more; the example counts once.
echo "C tests: $((${#tests[@]} * 2 + ${checked:-0} + 1)) passed"
