#!/usr/bin/env bash
# Sets everything up (build_tools/setup.sh with test dependencies) and runs
# every check: ruff (lint and format), the lit suite (ragged-opt and Python
# bindings) and pytest (end-to-end numerics on IREE, API errors, the PyTorch
# integration, samples, the benchmark smoke run).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
WITH_TEST_DEPS=1 bash build_tools/setup.sh
. build_tools/env.sh
ruff check .
ruff format --check .
lit -sv build/test
pytest -q test/e2e "$@"
