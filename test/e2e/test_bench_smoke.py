"""bench/harness.py --smoke runs end to end: one tiny W4 case through every
eager baseline and ragged-mlir, the recompile draws, the reports, and a
final JSON summary line with the keys the harness promises.

Benchmarks are not tests: nothing here looks at a time.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

ROOT = Path(__file__).resolve().parents[2]

SUMMARY_KEYS = {
    "w4_ceiling_attainment",
    "w4_roofline_attainment",
    "w4_ratio_to_best_peer",
    "ragged_overhead",
    "recompiles",
    "cold_compile_s_6_layers",
    "peak_mem_ratio_vs_padded",
}
CASE_KEYS = {
    "workload",
    "dataset",
    "util",
    "flop_ceiling",
    "median_ms",
    "p90_ms",
    "peak_mem_mib",
    "max_abs_err",
    "roofline",
    "roofline_ours",
}


def _run(script: str, *args: str) -> str:
    """stdout of ``bench/<script> args``, which must succeed."""
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), *args],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout


def test_harness_smoke(tmp_path):
    stdout = _run("harness.py", "--smoke", "--out", str(tmp_path), "--no-plot")
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    summary = lines[-1]
    assert summary.get("summary") is True
    assert SUMMARY_KEYS <= summary.keys(), SUMMARY_KEYS - summary.keys()

    cases = [x for x in lines if "workload" in x]
    assert cases, stdout[-2000:]
    case = cases[0]
    assert "error" not in case, case.get("error")
    assert CASE_KEYS <= case.keys(), CASE_KEYS - case.keys()
    # ragged-mlir really ran compiled (no eager fallback) and agrees with fp64.
    assert case["ragged_fallbacks"] == 0
    assert "ragged_mlir" in case["median_ms"]
    assert case["max_rel_err"]["ragged_mlir"] < 1e-4
    assert summary["recompile_draws"] > 0
    # Roofline attainment for every timed baseline (a ratio of two timings: its size is not
    # checked here, only that it is there and positive).
    assert summary["gemm_peak_gflops"] > 0 and summary["copy_bandwidth_gbs"] > 0
    assert set(case["roofline"]) == {k for k in case["median_ms"] if k in case["useful_gflops"]}
    assert all(math.isfinite(v) and v > 0 for v in case["roofline"].values()), case["roofline"]

    assert (tmp_path / "smoke.jsonl").read_text().count("\n") == len(lines)
    assert (tmp_path / "summary-smoke.md").exists()


def test_scale_smoke(tmp_path):
    """bench/scale.py: the batch sweep (one compile, no recompiles across
    B) and the long-document case, each checked against fp64 per item."""
    out = tmp_path / "scale.jsonl"
    _run("scale.py", "--batches", "2", "5", "--long", "40", "--short-batch", "3", "--out", str(out))
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    batch = [x for x in rows if x["case"] == "batch"]
    assert [x["B"] for x in batch] == [2, 5]
    assert [x["compiles"] for x in batch] == [1, 0]
    assert all(x["max_rel_err"] < 1e-4 and x["attainment"] > 0 for x in batch)
    (long,) = [x for x in rows if x["case"] == "long document"]
    assert long["compiles"] == 0 and long["max_rel_err"] < 1e-4
    assert set(long["ms"]) == {"short", "long", "mix"}


def test_train_step_smoke():
    """bench/train_step.py (W6): one MNLI layer, padded eager against the
    compiled step, one timed round and one fresh draw; the first losses
    agree, nothing is traced again, and every promised field is there."""
    stdout = _run(
        "train_step.py",
        "--datasets",
        "mnli",
        "--variants",
        "padded",
        "ragged_mlir",
        "--rounds",
        "1",
        "--draws",
        "1",
    )
    lines = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert lines[0]["gemm_peak_gflops"] > 0
    (case,) = lines[1:]
    assert case["dataset"] == "mnli" and case["layers"] == 1
    assert (
        set(case["ms"])
        == set(case["attainment"])
        == set(case["page_faults_per_step"])
        == {"padded", "ragged_mlir"}
    )
    assert case["loss_diff_vs_padded"]["ragged_mlir"] < 1e-4
    assert case["recompiles_over_draws"]["graphs_traced"] == 0
    assert case["failed"] == {}


def test_hf_zoo_smoke():
    """bench/hf_zoo.py at the tiny size: a row per variant with its ratios,
    unpadding applied to a decoder on left padding too, nothing eager."""
    pytest.importorskip("transformers")
    stdout = _run(
        "hf_zoo.py", "--size", "tiny", "--rounds", "1", "--no-inductor", "--arch", "llama", "--batch", "4"
    )
    rows = [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
    assert {(r["padding"], r["variant"]) for r in rows} == {
        (p, v) for p in ("right", "left") for v in ("padded_eager", "ragged", "ragged_unpad")
    }
    for r in rows:
        assert r["max_abs_err"] < 1e-4 and r["roofline"] > 0, r
        if r["variant"] != "padded_eager":
            assert r["fallbacks"] == 0, r
        if r["variant"] == "ragged_unpad":
            assert r["unpadded"] is True, r


def test_startup_smoke(tmp_path):
    """bench/startup.py --smoke: a tiny encoder compiled cold in one process,
    then warm in fresh ones from the same cache directory (no iree-compile),
    and its first call under aot_eager; the table and the JSON say so."""
    out = tmp_path / "startup.json"
    stdout = _run("startup.py", "--smoke", "--out", str(out))
    assert "| six_layers |" in stdout, stdout[-2000:]
    (row,) = json.loads(out.read_text())["rows"]
    summary, phases = row["summary"], row["phases"]
    assert summary["errors"] == {}, summary["errors"]
    assert summary["iree_compile_runs_cold"] >= 1
    assert summary["iree_compile_runs_warm"] == 0 and summary["artifact_hits_warm"] >= 1
    assert summary["iree_compile_runs_new"] == 0
    warm = phases["warm"]["ragged"]
    assert warm["graphs"] >= 1 and warm["fallbacks"] == 0
    assert {"import_s", "lower_s", "iree_compile_s", "dynamo_aot_s"} <= warm.keys()
    assert summary["aot_eager_first_call_s"] > 0 and summary["warm_over_aot_eager"] > 0


@pytest.mark.parametrize("mode", [[], ["--backward"]], ids=["forward", "backward"])
def test_attention_kernel_smoke(mode):
    """bench/attention_kernel.py --smoke: the kernel, IREE's codegen and
    torch's SDPA per item (and FlexAttention, forward) on one tiny MNLI
    batch, each within fp32 error of fp64."""
    rows = [json.loads(line) for line in _run("attention_kernel.py", "--smoke", *mode).splitlines()]
    assert len(rows) == 1
    row = rows[0]
    assert {"kernel", "iree_codegen", "torch_sdpa_per_item"} <= set(row["ms"])
    assert row["host"]["gemm_peak_gflops"] > 0
    for name, err in row["max_abs_err"].items():
        assert err < 1e-4, (name, err)
