#!/usr/bin/env bash
# Runs a GPU check folder (bench/gpu/prepare.py wrote it; this script is
# copied into it) with nothing but Python, numpy and the IREE runtime: on
# the GPU machine, which has no build of ragged-mlir and no network, or on
# any machine for the smoke test.
#
#   bash FOLDER/run.sh [run.py arguments]
#
# - The IREE runtime: the interpreter's own if it has one, else the wheels
#   in FOLDER/wheels (ml_dtypes's only where the interpreter lacks it),
#   installed into a temporary folder (no network).
# - Vulkan: if the system has no Vulkan loader, the one in FOLDER/debs,
#   unpacked into a temporary folder (never into /), with the NVIDIA
#   driver's ICD where the driver mount has one.
# - Results: $OUT (else FOLDER/results): gpu_check.json, gpu_check.md and
#   gpu_check.log.
#
# Environment: PYTHON (default python3), BUDGET_S (default 450 seconds for
# run.py; the device machine allows one command 10 minutes).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out="${OUT:-$here/results}"
mkdir -p "$out"
python="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1

if ! "$python" -c 'import iree.runtime' 2>/dev/null; then
  # The runtime's wheel, and ml_dtypes's where the interpreter lacks it.
  wheels=("$here"/wheels/iree_base_runtime-*.whl)
  "$python" -c 'import ml_dtypes' 2>/dev/null || wheels+=("$here"/wheels/ml_dtypes-*.whl)
  for w in "${wheels[@]}"; do
    if [ ! -f "$w" ]; then
      echo "run.sh: $python cannot import iree.runtime and $w is missing" >&2
      exit 2
    fi
  done
  site="$(mktemp -d)"
  "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
    --target "$site" "${wheels[@]}" || exit 2
  export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi

if ls "$here"/debs/*.deb >/dev/null 2>&1 && ! ldconfig -p 2>/dev/null | grep -q 'libvulkan.so.1 '; then
  vk="$(mktemp -d)"
  for f in "$here"/debs/*.deb; do dpkg -x "$f" "$vk"; done
  loader="$(find "$vk" -name 'libvulkan.so.1' | head -n 1)"
  [ -n "$loader" ] && export IREE_HAL_VULKAN_LIBVULKAN_PATH="$loader"
  icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  [ -f "$icd" ] && export VK_DRIVER_FILES="$icd"
fi

{
  command -v nvidia-smi >/dev/null &&
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  "$python" "$here/run.py" "$here" --out "$out" --budget "${BUDGET_S:-450}" "$@"
} 2>&1 | tee "$out/gpu_check.log"
exit "${PIPESTATUS[0]}"
