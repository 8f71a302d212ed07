"""The GPU check end to end on the CPU: ``TARGET=llvm-cpu bash
bench/gpu_check.sh`` prepares the folder (modules, float64 references) and
runs it with the runtime-only script the GPU machine runs, in a process
that has no ragged_mlir on its path; every numerics case must pass and
every timed workload (attention, an encoder layer, a training step) must
report. A corrupted reference must fail, and the
inputs both machines draw must be the same bits everywhere.

Benchmarks are not tests: nothing here looks at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "gpu"))

from inputs import uniform  # noqa: E402

#: One case of each family that the quick folder covers, f32 and f16.
CASES = [
    "elementwise",
    "reduce_max",
    "attention_causal",
    "attention_grad_causal",
    "conv2d_s2",
    "max_pool",
    "nested_softmax",
    "encoder_layer",
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> tuple[Path, Path]:
    """(the prepared folder, the results of its run)."""
    folder = tmp_path_factory.mktemp("gpu_check")
    out = tmp_path_factory.mktemp("gpu_check_out")
    env = {
        **os.environ,
        "TARGET": "llvm-cpu",
        "QUICK": "1",
        "FOLDER": str(folder),
        "OUT": str(out),
        "PREPARE_ARGS": "--only " + " ".join(CASES),
    }
    r = subprocess.run(
        ["bash", str(ROOT / "bench" / "gpu_check.sh")],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=ROOT,
        env=env,
    )
    assert r.returncode == 0, (r.stdout + r.stderr)[-4000:]
    return folder, out


def test_the_check_runs_end_to_end_on_the_cpu(folder):
    folder, out = folder
    report = json.loads((out / "gpu_check.json").read_text())
    assert report["imported_ragged_mlir"] is False
    names = {(r["case"], r["dtype"]) for r in report["numerics"]}
    assert {(c, "f32") for c in CASES} <= names
    assert {("attention_grad_causal_f16", "f16"), ("conv2d_s2_f16", "f16")} <= names
    assert [r for r in report["numerics"] if r["status"] != "PASS"] == []
    # Every batch of every op case ran, the edge cases included.
    for r in report["numerics"]:
        assert len(r["batches"]) >= (1 if r["family"] == "training_step" else 4), r
    timed = {r["workload"] for r in report["bench"] if "ms" in r}
    assert timed == {
        "w3_attention_f32",
        "w3_attention_f16",
        "w4_encoder_1l_f32",
        "w4_encoder_1l_f16",
        "train_step_1l_f32",
    }
    # The training step's graphs, captured from torch.compile(backend="ragged").
    assert {"train_forward", "train_backward"} <= {r["case"] for r in report["numerics"]}
    for r in report["bench"]:
        assert r["flops"] > 0 and r["ms"]["ragged-mlir"] > 0
    assert report["gemm_peak"]["f32"] > 0
    table = (out / "gpu_check.md").read_text()
    assert "| attention_grad_causal | f32 | llvm-cpu | PASS |" in table
    assert (out / "gpu_check.log").exists()
    # The folder carries what the runner needs and nothing of the build.
    for f in ("manifest.json", "run.py", "run.sh", "inputs.py", "peers.py"):
        assert (folder / f).exists(), f


def test_a_wrong_reference_fails(folder, tmp_path):
    """The runner compares, it does not just run: one value of one
    reference off by 1 % makes that case FAIL and the run exit 1."""
    folder, _ = folder
    copy = tmp_path / "folder"
    shutil.copytree(folder, copy)
    manifest = json.loads((copy / "manifest.json").read_text())
    case = next(c for c in manifest["numerics"] if c["name"] == "conv2d_s2")
    data = copy / case["batches"][0]["data"]
    arrays = dict(np.load(data))
    ref = arrays["ref_0"]
    ref.reshape(-1)[ref.size // 2] *= 1.01
    np.savez_compressed(data, **arrays)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run(
        [sys.executable, str(copy / "run.py"), str(copy), "--no-bench", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 1, r.stdout[-2000:]
    report = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    status = {r["case"]: r["status"] for r in report["numerics"]}
    assert status["conv2d_s2"] == "FAIL"
    assert status["conv2d"] == "PASS" if "conv2d" in status else True
    assert sum(s != "PASS" for s in status.values()) == 1


def test_inputs_are_the_same_bits_everywhere():
    """The runner draws the inputs again on another machine: the generator
    is integer arithmetic, pinned here to its first values."""
    a = uniform(7, (2, 3), -1.0, 1.0, np.float64)
    again = uniform(7, (6,), -1.0, 1.0, np.float64).reshape(2, 3)
    np.testing.assert_array_equal(a, again)
    assert a.ravel().tolist() == [_splitmix_uniform(7, i, -1.0, 1.0) for i in range(6)]
    assert a.ravel()[:3].tolist() == [-0.6522642680806343, 0.754697373528346, 0.4527072290334955]
    assert uniform(7, (0, 4), 0, 1, np.float32).shape == (0, 4)
    assert not np.array_equal(uniform(8, (6,), -1, 1, np.float64), again.ravel())
    f16 = uniform(7, (6,), -1, 1, np.float16)
    np.testing.assert_array_equal(f16, again.ravel().astype(np.float16))


def _splitmix_uniform(seed: int, i: int, lo: float, hi: float) -> float:
    """splitmix64 in Python integers: the reference the numpy version must
    match bit for bit."""
    mask = (1 << 64) - 1
    x = (i + seed * 0x9E3779B97F4A7C15) & mask
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & mask
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & mask
    x ^= x >> 31
    return lo + (hi - lo) * ((x >> 11) * 2.0**-53)
