#!/usr/bin/env bash
# The main job: set up and build (build_tools/setup.sh), then compile and run
# a ragged encoder block and compare it with the padded computation.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash build_tools/setup.sh
. build_tools/env.sh
python samples/ragged_encoder_block.py "$@"
