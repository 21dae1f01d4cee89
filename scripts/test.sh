#!/usr/bin/env bash
# Builds everything and runs every test. The README's test command; .ci/run calls it.
# Rust today; the C, Python and HTTP suites join here as their issues land.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

step "format"
if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all --check
else
  echo "SKIPPED: rustfmt is not installed (rustup component add rustfmt)"
  if [ "${CI:-}" = "true" ]; then exit 1; fi
fi

step "lint"
if cargo clippy --version >/dev/null 2>&1; then
  cargo clippy --workspace --all-targets -- -D warnings
else
  echo "SKIPPED: clippy is not installed (rustup component add clippy)"
  if [ "${CI:-}" = "true" ]; then exit 1; fi
fi

step "build"
cargo build --workspace --all-targets

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

step "Rust tests"
cargo test --workspace 2>&1 | tee "$tmp/cargo-test.log"
rust_passed=$(awk '/^test result:/ { for (i = 1; i <= NF; i++) if ($i == "passed;") n += $(i - 1) } END { print n + 0 }' "$tmp/cargo-test.log")

step "example: mindlite-shell end to end"
shell() { cargo run -q -p mindlite-shell -- "$@"; }
shell "$tmp/demo.redb" "CREATE TABLE demo (id INT, name VARCHAR)" "INSERT INTO demo VALUES (1, 'one'), (2, 'two')" >/dev/null
printf 'SELECT name FROM demo\nWHERE id = 2;\n' | shell --format json "$tmp/demo.redb" > "$tmp/out.json"
expected='{"type":"table","data":[["two"]],"column_names":["name"],"context":{"show_secrets":false,"db":"mindsdb"}}'
if [ "$(cat "$tmp/out.json")" != "$expected" ]; then
  echo "mindlite-shell printed: $(cat "$tmp/out.json")"; echo "expected:              $expected"; exit 1
fi
if shell "$tmp/demo.redb" "SELECT * FROM nosuch" 2>/dev/null; then
  echo "mindlite-shell should fail on a missing table"; exit 1
fi

step "summary"
echo "all: $((rust_passed + 1)) passed, 0 failed"
