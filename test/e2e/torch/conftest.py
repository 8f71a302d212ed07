"""The torch tests run with fallback off: a graph the backend cannot
compile raises instead of running eagerly, so no test passes because its
model silently ran in eager mode. Tests of the fallback itself pass
``options={"fallback": True}``."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _no_fallbacks(monkeypatch):
    monkeypatch.setenv("RAGGED_FALLBACK", "0")
