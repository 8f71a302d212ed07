"""The torch tests run with fallback off: a graph the backend cannot
compile raises instead of running eagerly, so no test passes because its
model silently ran in eager mode. Tests of the fallback itself pass
``options={"fallback": True}``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The samples' models (samples/ragged_bert.py), as the samples import them.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "samples"))


@pytest.fixture(autouse=True)
def _no_fallbacks(monkeypatch):
    monkeypatch.setenv("RAGGED_FALLBACK", "0")


@pytest.fixture
def fresh_dynamo_no_grad():
    """A fresh Dynamo cache, and inference mode (a test that trains turns
    gradients back on). A module asks for it in every test with
    ``pytestmark = pytest.mark.usefixtures("fresh_dynamo_no_grad")``."""
    import torch

    torch._dynamo.reset()
    with torch.no_grad():
        yield
