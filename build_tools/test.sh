#!/usr/bin/env bash
# Sets everything up (build_tools/setup.sh with test dependencies) and runs
# every check: ruff (lint and format), clang-format (.clang-format: LLVM),
# the lit suite (ragged-opt and Python bindings) and pytest (end-to-end
# numerics on IREE, API errors, the PyTorch integration, samples, the
# benchmark smoke run), in two pytest workers.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
WITH_TEST_DEPS=1 bash build_tools/setup.sh
. build_tools/env.sh
ruff check .
ruff format --check .
clang-format --dry-run --Werror $(git ls-files '*.cpp' '*.h')
lit -sv build/test
# One compile cache for the run, shared by the workers (docs/cache.md): a
# module two tests compile is compiled once; the user's cache is left alone.
export RAGGED_CACHE_DIR="${RAGGED_TEST_CACHE_DIR:-$(mktemp -d -t ragged-test-cache.XXXXXX)}"
# Two workers, one test file each at a time: a file's tests share its compiled
# modules and fixtures. RAGGED_TEST_WORKERS=0 runs in this process.
workers="${RAGGED_TEST_WORKERS:-2}"
if [ "$workers" = 0 ]; then
  pytest -q test/e2e "$@"
else
  pytest -q -n "$workers" --dist loadfile test/e2e "$@"
fi
