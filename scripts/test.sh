#!/usr/bin/env bash
# Builds everything and runs every test. The README's test command; .ci/run calls it.
# Rust and HTTP today; the C and Python suites join here as their issues land.
set -euo pipefail
cd "$(dirname "$0")/.."

started=$SECONDS
step() { printf '\n==> %s  [%ds]\n' "$*" "$((SECONDS - started))"; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

step "format"
if cargo fmt --version >/dev/null 2>&1; then
  cargo fmt --all --check
else
  echo "SKIPPED: rustfmt is not installed (rustup component add rustfmt)"
  if [ "${CI:-}" = "true" ]; then exit 1; fi
fi

# `cargo clippy` type-checks every dependency in a separate mode from `cargo build`, which costs
# a third of a clean run on two cores. Running clippy-driver as the workspace's rustc wrapper
# instead lints our crates while they build, so one compilation serves lint, build and tests;
# the wrapper stays set for every cargo command below so they reuse that compilation.
step "build with clippy's lints (warnings fail)"
clippy_driver=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver || true)
if [ -n "$clippy_driver" ] && "$clippy_driver" --version >/dev/null 2>&1; then
  export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
else
  echo "SKIPPED lints: clippy is not installed (rustup component add clippy)"
  if [ "${CI:-}" = "true" ]; then exit 1; fi
fi
cargo build --workspace --all-targets 2>&1 | tee "$tmp/build.log"
if grep -Eq '^(warning|error)' "$tmp/build.log"; then
  echo "the build printed warnings (clippy's included); fix them"; exit 1
fi

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

step "Python environment for the HTTP tests (.venv)"
venv=.venv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r tests/http/requirements.txt

step "HTTP tests (pytest against target/debug/mindlite-server)"
set +e
MLSERVER_BIN="$PWD/target/debug/mindlite-server" "$venv/bin/python" -m pytest tests/http -q -p no:cacheprovider 2>&1 | tee "$tmp/pytest.log"
pytest_status=${PIPESTATUS[0]}
set -e
if [ "$pytest_status" -ne 0 ]; then
  echo "HTTP tests failed (pytest exit $pytest_status)"; exit 1
fi
http_passed=$(grep -Eo '[0-9]+ passed' "$tmp/pytest.log" | tail -n 1 | grep -Eo '[0-9]+' || echo 0)
if [ "${http_passed:-0}" -eq 0 ]; then
  echo "no HTTP test ran"; exit 1
fi

step "summary"
echo "all: $((rust_passed + 1 + http_passed)) passed, 0 failed"
