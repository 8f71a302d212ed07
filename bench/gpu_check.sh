#!/usr/bin/env bash
# GPU check for a machine with an NVIDIA GPU (A100 / H100 / H200 class) and
# network access to PyPI: builds ragged-mlir from scratch, then runs
#   (a) bench/gpu_numerics.py: reduce, softmax, matmul, layer_norm, attention
#       and an encoder layer (f32, plus f16 variants) compiled for cuda and
#       compared with float64 numpy references: PASS / FAIL per op;
#   (b) bench/gpu_bench.py: W3 attention and a W4 encoder layer on cuda
#       against torch padded SDPA and torch NJT SDPA (if torch sees CUDA),
#       fp32 and fp16, printing ratios.
# Hopper (sm_90) runs the sm_80 PTX IREE emits through the driver's JIT:
# IREE 3.13 cannot target sm_90 directly.
#
#   bash bench/gpu_check.sh
#
# Everything goes to $OUT if set (the device tool collects it), else to
# bench/gpu_results/: gpu_check.log (all output), gpu_numerics.json,
# gpu_bench.jsonl, gpu_bench.md, gpu_check_summary.txt.
# The whole run stays under BUDGET_S seconds (default 480 = 8 min): each
# phase gets a timeout from what is left.
#
# Environment:
#   JOBS=16            build parallelism (the build takes ~1 min with 16 cores)
#   PYTHON=python3     interpreter for the venv (3.11 or newer)
#   SYSTEM_SITE=1      create the venv with --system-site-packages
#   SKIP_BUILD=1       reuse an existing .venv and build/ (no pip, no cmake)
#   TARGET=cuda        IREE target (llvm-cpu for a CPU dry run)
#   DEVICE=            IREE driver (default: the target's, cuda for cuda)
#   IREE_FLAGS="..."   extra iree-compile flags, space-separated
#   BENCH_ARGS="..."   extra arguments for gpu_bench.py (e.g. --quick)
#   BUDGET_S=480       total time limit in seconds
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
start=$(date +%s)
budget="${BUDGET_S:-480}"
out="${OUT:-$root/bench/gpu_results}"
mkdir -p "$out"
exec > >(tee "$out/gpu_check.log") 2>&1
tee_pid=$!
finish() {  # let tee write the whole log before the caller collects $OUT
  exec >&- 2>&-
  wait "$tee_pid" 2>/dev/null
}
trap finish EXIT
export PYTHONUNBUFFERED=1
target="${TARGET:-cuda}"
device="${DEVICE:-}"
summary=()

elapsed() { echo $(( $(date +%s) - start )); }
left() { echo $(( budget - $(elapsed) )); }
phase() { echo; echo "=== [$(elapsed) s] $*"; }
note() { summary+=("$*"); echo "# $*"; }

phase "machine"
uname -a
nproc
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv || echo "no nvidia-smi"

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  phase "venv + requirements + build (JOBS=${JOBS:-16}, WITH_TEST_DEPS=1)"
  t0=$(date +%s)
  python="${PYTHON:-python3}"
  if [ ! -x .venv/bin/python ]; then
    if [ "${SYSTEM_SITE:-0}" = 1 ]; then
      "$python" -m venv --system-site-packages .venv
    else
      "$python" -m venv .venv
    fi
  fi
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  # setup.sh installs build_tools/requirements.txt, requirements-test.txt and
  # requirements-torch.txt (WITH_TEST_DEPS=1 implies WITH_TORCH=1), then builds.
  if ! PYTHON="$python" JOBS="${JOBS:-16}" WITH_TEST_DEPS=1 timeout -k 10 "$(left)" bash build_tools/setup.sh; then
    note "build: FAILED after $(( $(date +%s) - t0 )) s"
    printf '%s\n' "${summary[@]}" > "$out/gpu_check_summary.txt"
    exit 1
  fi
  note "build: ok in $(( $(date +%s) - t0 )) s"
else
  note "build: skipped (SKIP_BUILD=1)"
fi

# The development environment: the venv, ragged_mlir on PYTHONPATH.
. build_tools/env.sh

phase "devices"
python - <<'EOF'
import iree.runtime as rt
for d in ("cuda", "local-task"):
    try:
        print(f"iree {d}:", [x["name"] if isinstance(x, dict) else x for x in rt.get_driver(d).query_available_devices()])
    except Exception as e:
        print(f"iree {d}: unavailable: {str(e).splitlines()[0]}")
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(),
          torch.cuda.get_device_name() if torch.cuda.is_available() else "")
except ImportError:
    print("torch: not installed")
EOF

common=(--target "$target")
[ -n "$device" ] && common+=(--device "$device")
for f in ${IREE_FLAGS:-}; do common+=("--iree-flag=$f"); done

phase "(a) numerics on $target"
t0=$(date +%s)
limit=$(( $(left) - 120 )); [ "$limit" -gt 240 ] && limit=240
if [ "$limit" -lt 30 ]; then
  note "numerics: skipped (no time left)"
  rc_num=124
else
  timeout -k 10 "$limit" python bench/gpu_numerics.py "${common[@]}" --out "$out"
  rc_num=$?
  note "numerics: rc $rc_num in $(( $(date +%s) - t0 )) s (limit $limit s; 0 = all PASS, 1 = some FAIL/ERROR, 124 = timed out)"
fi

phase "(b) benchmark on $target"
t0=$(date +%s)
limit=$(( $(left) - 15 ))
if [ "$limit" -lt 30 ]; then
  note "bench: skipped (no time left)"
  rc_bench=124
else
  # shellcheck disable=SC2086
  timeout -k 10 "$limit" python bench/gpu_bench.py "${common[@]}" --out "$out" ${BENCH_ARGS:-}
  rc_bench=$?
  note "bench: rc $rc_bench in $(( $(date +%s) - t0 )) s (limit $limit s)"
fi

phase "summary"
note "total: $(elapsed) s (budget $budget s)"
printf '%s\n' "${summary[@]}" > "$out/gpu_check_summary.txt"
ls -l "$out"
[ "$rc_num" = 0 ] && [ "$rc_bench" = 0 ]
