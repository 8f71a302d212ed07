#!/usr/bin/env bash
# The GPU check, in two halves: everything heavy here, on the CPU machine,
# and only the IREE runtime on the machine with the GPU (no network there,
# no build of ragged-mlir).
#
#   bash bench/gpu_check.sh            # prepare build/gpu_check for cuda and vulkan-spirv,
#                                      # then print the command that runs it on the GPU machine
#   TARGET=llvm-cpu bash bench/gpu_check.sh
#                                      # prepare for the CPU and run it here, end to end
#
# The folder holds the compiled modules, the float64 references
# (bench/gpu/prepare.py), the runtime-only runner (bench/gpu/run.py,
# peers.py, inputs.py, run.sh), the IREE runtime's wheels for CPython 3.12
# and the Vulkan loader's Debian package: one path to carry, a few tens of MiB.
#
# Environment:
#   TARGET=...       one target instead of cuda and vulkan-spirv
#   FOLDER=...       where to write (default build/gpu_check)
#   QUICK=1          edge-case batches and small timed batches
#   PREPARE_ARGS=... more arguments for prepare.py (e.g. "--only attention")
#   RUNTIME_PY=3.12  the Python version of the runtime wheel to carry
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
folder="${FOLDER:-$root/build/gpu_check}"
. build_tools/env.sh

targets=()
if [ -n "${TARGET:-}" ]; then targets=(--target "$TARGET"); fi
quick=()
if [ "${QUICK:-0}" = 1 ]; then quick=(--quick); fi
# shellcheck disable=SC2086
python bench/gpu/prepare.py --out "$folder" "${targets[@]}" "${quick[@]}" ${PREPARE_ARGS:-}
cp bench/gpu/run.py bench/gpu/peers.py bench/gpu/inputs.py bench/gpu/run.sh "$folder/"

if [ "${TARGET:-}" = llvm-cpu ]; then
  # End to end here: the same folder and script, this venv's IREE runtime,
  # and no ragged_mlir on the path.
  env -u PYTHONPATH PYTHON="$(command -v python)" bash "$folder/run.sh" --no-peers
  exit
fi

# The IREE runtime and what it needs beyond numpy (ml_dtypes), at the
# versions this machine runs.
pins="$(python -c 'import importlib.metadata as m; print(*(f"{d}=={m.version(d)}" for d in ("iree-base-runtime", "ml_dtypes")))')"
mkdir -p "$folder/wheels" "$folder/debs"
# shellcheck disable=SC2086
python -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
  --python-version "${RUNTIME_PY:-3.12}" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$folder/wheels" $pins
# The Vulkan loader, for a machine that has the driver but not the loader.
lists="$(mktemp -d)"
mkdir -p "$lists/partial"
apt_opts=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 "-oDir::State::Lists=$lists")
if apt-get "${apt_opts[@]}" update >/dev/null 2>&1 &&
  (cd "$folder/debs" && apt-get "${apt_opts[@]}" download libvulkan1 >/dev/null 2>&1); then
  :
else
  echo "# no Vulkan loader package (apt-get download failed): Vulkan runs only where the system has one"
fi

rel="${folder#"$root"/}"
mib=$(( $(du -sk "$folder" | cut -f1) / 1024 ))
tree=$(( $(git ls-files -z | du -ck --files0-from=- | tail -n 1 | cut -f1) / 1024 ))
if [ $(( mib + tree )) -gt 62 ]; then
  echo "# warning: $rel ($mib MiB) and the tree ($tree MiB) come near the 64 MiB a device call carries"
fi
echo
echo "# $(du -sh "$folder" | cut -f1) in $rel. On the GPU machine, from the repository root,"
echo "# with $rel carried:"
echo "bash $rel/run.sh"
