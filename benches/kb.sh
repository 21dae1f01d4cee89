#!/usr/bin/env bash
# The knowledge-base benchmark: 1M vectors of 384 dimensions (clustered, fixed seed) searched by
# mindlite's HNSW index, FAISS's HNSW (faiss-cpu, same M and efConstruction) and sqlite-vec
# (exact), plus mindlite's ingestion through SQL, SQL searches and hybrid search on 100k text
# documents (benches/src/kb.rs), and the local embedding model's speed (benches/src/minilm.rs),
# in one run. Not part of CI. Needs ~8 GiB of memory.
# Usage: benches/kb.sh [N] [QUERIES]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-1000000}
queries=${2:-1000}
venv=.venv-bench
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/pip" install -q numpy faiss-cpu sqlite-vec pysqlite3-binary
cargo build --release -p mindlite-benches
mkdir -p benches/data/kb
target/release/mindlite-bench kb --dir benches/data/kb --n "$n" --queries "$queries" | tee benches/data/kb-mindlite.jsonl
"$venv/bin/python" benches/kb_peers.py benches/data/kb --with benches/data/kb-mindlite.jsonl \
  | tee benches/data/kb-peers.txt
# The local embedding provider on all-MiniLM-L6-v2 (benches/src/minilm.rs).
model=$(bash scripts/minilm.sh "${CARGO_TARGET_DIR:-target}/minilm")
target/release/mindlite-bench minilm --model "$model" | tee benches/data/kb-minilm.jsonl
