#!/usr/bin/env bash
# The main job: set up and build (build_tools/setup.sh with the PyTorch
# integration), then compute all-MiniLM-L6-v2 sentence embeddings with
# torch.compile(backend="ragged") on real sentences, and compare them with a
# padded eager reference (agreement and time) and with PyTorch NJT eager.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
WITH_TORCH=1 bash build_tools/setup.sh
. build_tools/env.sh
python samples/minilm_embeddings.py "$@"
