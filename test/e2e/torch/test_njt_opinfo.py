"""PyTorch's NJT OpInfo samples (the first three kinds of each op) compile through
backend="ragged" with fallback off and equal eager NJT, NJT in and NJT out.
``bench/njt_opinfo.py`` runs every sample."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")
pytest.importorskip("expecttest")  # PyTorch's OpInfo definitions import it

# The cases live with bench/njt_opinfo.py, which runs all of them. Appended, not
# prepended: a bench script never shadows a test module of the same name.
sys.path.append(str(Path(__file__).resolve().parents[3] / "bench"))

from njt_opinfo_cases import cases, check  # noqa: E402

import ragged_mlir.torch  # noqa: E402, F401  (registers the backend)

CASES = list(cases(per_kind=1, per_op=3))


@pytest.mark.parametrize("case", CASES, ids=[f"{c.op}-{c.index}" for c in CASES])
def test_njt_opinfo_sample(case):
    if not check(case):
        pytest.skip("eager NJT raises on this sample")
