"""bench/images.py --smoke runs end to end in this process: two tiny images
through the ResNet-18, every eager variant and ragged-mlir, the fp64
per-image check of ragged-mlir and the final table. The ViT front end is
only built here (its IREE compile alone takes ~30 s; `--smoke` runs it).

Benchmarks are not tests: nothing here looks at a time, only that every
requested variant either has one or is listed as failed with its reason.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
VARIANTS = ["padded", "padded32", "per_image", "danling", "ragged_mlir"]


@pytest.fixture(scope="module")
def images_bench():
    """bench/images.py as a module. Importing it (and bench/harness.py)
    sets torch's thread count: restored afterwards for the other tests."""
    import torch

    threads = torch.get_num_threads()
    path = ROOT / "bench" / "images.py"
    spec = importlib.util.spec_from_file_location("bench_images", path)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        torch.set_num_threads(threads)


def test_images_bench_smoke(images_bench, capsys):
    assert images_bench.main(["--smoke", "--nets", "resnet18", "--variants", *VARIANTS]) == 0
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert lines and "gemm_peak_gflops" in lines[0]
    cases = [x for x in lines if "net" in x]
    assert [c["net"] for c in cases] == ["resnet18"], out[-2000:]
    for case in cases:
        assert "error" not in case, case.get("error")
        assert case["B"] == 2 and case["S"] == 32
        # ragged-mlir ran and agrees with the fp64 per-image reference.
        assert "ragged_mlir" in case["ms"], case.get("failed")
        assert case["max_rel_err"]["ragged_mlir"] < 1e-4
        assert case["checked_images"] == 2
        for v in VARIANTS:
            if v in case["ms"]:
                assert case["ms"][v] > 0
            else:
                assert case["failed"].get(v), f"{case['net']}: {v} has neither a time nor a reason"
        # Every image's own per-image FLOPs are counted, fewer than padded.
        assert 0 < case["useful_gflop"] <= case["padded_gflop"]
        assert 0 < case["util"] <= 1
    assert "| net | S | occ |" in out


def test_vit_program_builds(images_bench):
    """The ViT front end's builders program verifies: patch conv, flatten,
    layer norms, linears, multi-head attention on each image's own tokens."""
    prog, names = images_bench.ragged_program("vit", images_bench.vit_params(0))
    text = prog.module_text()
    for op in ("ragged.conv2d", "ragged.flatten", "ragged.layer_norm", "ragged.attention", "ragged.reduce"):
        assert op in text, op
    assert names[0] == "patch"
