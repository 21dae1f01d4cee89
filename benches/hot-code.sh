#!/usr/bin/env bash
# Rewrites examples/http-server/hot-symbols.txt, the functions the linker places first in
# mindlite-server (see benches/hot_code.py and examples/http-server/build.rs), then relinks.
# Run after a toolchain or dependency update, when benches/http.sh reports the list matching
# less than nine in ten functions. Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is missing: apt-get install valgrind"; exit 1; }
cargo build --release -p mindlite-server
target_dir=${CARGO_TARGET_DIR:-target}
python3 benches/hot_code.py "$target_dir/release/mindlite-server" examples/http-server/hot-symbols.txt
cargo build --release -p mindlite-server
