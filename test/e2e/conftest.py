"""Shared fixtures for the end-to-end tests (compile -> IREE CPU -> numpy).

* ``compiled``: a session-wide cache, ``compiled(text)`` compiles a module
  text once per session with ``ragged_mlir.compile`` (a compile costs about a
  second, so every test file puts many functions into one module).
* ``lengths``: any test that takes an argument named ``lengths`` is
  parametrized over the edge-case length sets of :data:`LENGTH_SETS` plus a
  random set (fixed seed, so failures replay).
* ``rng``: a numpy Generator seeded from the test id (reproducible per test).
* ``random_lengths``, ``ragged``: helpers to draw lengths and build
  :class:`ragged_mlir.RaggedArray` batches of random float32 items.

Run from the repository root after ``. build_tools/env.sh``:
``pytest -q test/e2e``.
"""

from __future__ import annotations

import os
import tempfile
import zlib

import numpy as np
import pytest

import ragged_mlir

# Compiles go to a cache of the test run's own (build_tools/test.sh shares one
# between its workers), never to the user's (docs/cache.md).
os.environ.setdefault("RAGGED_CACHE_DIR", tempfile.mkdtemp(prefix="ragged-test-cache-"))

#: Edge-case batches of item lengths (the extent of the ragged dim per item).
LENGTH_SETS = {
    "empty_mixed": [3, 0, 5, 0],  # empty items between non-empty ones
    "batch1": [7],  # B = 1
    "one_long": [1, 2, 300, 1],  # one very long item among short ones
    "all_equal": [4] * 8,  # no raggedness at all
    "all_empty": [0, 0, 0],  # every item empty: zero rows of values
}


def draw_lengths(
    rng: np.random.Generator, batch: int | None = None, max_len: int = 9, p_empty: float = 0.2
) -> list[int]:
    """Random item lengths in [0, max_len], about ``p_empty`` of them 0."""
    if batch is None:
        batch = int(rng.integers(1, 9))
    lens = rng.integers(1, max_len + 1, size=batch)
    lens[rng.random(batch) < p_empty] = 0
    return [int(x) for x in lens]


#: The random set every ``lengths``-parametrized test also runs on.
RANDOM_LENGTHS = draw_lengths(np.random.default_rng(20240611), batch=6, max_len=11)
#: Enough items that every scan over items crosses several of its chunks
#: (the lowering's prefix sums and the attention schedule's sort work in
#: chunks of 64 items).
MANY_LENGTHS = draw_lengths(np.random.default_rng(20261203), batch=200, max_len=9)
ALL_LENGTH_SETS = {**LENGTH_SETS, "random": RANDOM_LENGTHS, "many_items": MANY_LENGTHS}


def pytest_generate_tests(metafunc):
    if "lengths" in metafunc.fixturenames:
        metafunc.parametrize("lengths", list(ALL_LENGTH_SETS.values()), ids=list(ALL_LENGTH_SETS.keys()))


@pytest.fixture(scope="session")
def compiled():
    """``compiled(text) -> CompiledModule``, compiling each distinct text once."""
    cache: dict[str, object] = {}

    def get(text: str):
        if text not in cache:
            cache[text] = ragged_mlir.compile(text)
        return cache[text]

    return get


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A Generator seeded from the test's node id: stable across runs."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(scope="session")
def random_lengths():
    """``random_lengths(rng, batch=None, max_len=9, p_empty=0.2) -> list[int]``."""
    return draw_lengths


def _items(rng, lengths, trailing, low, high, dtype):
    return [rng.uniform(low, high, size=(n, *trailing)).astype(dtype) for n in lengths]


@pytest.fixture(scope="session")
def ragged():
    """``ragged(rng, lengths, trailing=(), low=-1, high=1, dtype=float32)``
    -> ``(RaggedArray, items)``: random uniform items of shape
    ``[lengths[b], *trailing]`` and the batch packed from them."""

    def make(rng, lengths, trailing=(), low=-1.0, high=1.0, dtype=np.float32):
        items = _items(rng, lengths, tuple(trailing), low, high, dtype)
        if not items:
            raise ValueError("use at least one item")
        return ragged_mlir.RaggedArray.from_list(items), items

    return make
