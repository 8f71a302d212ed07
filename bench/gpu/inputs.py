"""Inputs that the CPU machine and the GPU machine draw alike, so that the
check's folder carries references but not inputs.

:func:`uniform` is a counter-based generator (splitmix64 of the element's
index and a seed) in plain numpy integer arithmetic: the same bits on any
machine and any numpy version, which numpy's own generators do not promise.
It imports nothing but numpy, since the runner imports it on the GPU
machine.
"""

from __future__ import annotations

import math

import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def uniform(seed: int, shape, lo: float, hi: float, dtype) -> np.ndarray:
    """``shape`` values in ``[lo, hi)``, rounded to ``dtype``."""
    shape = tuple(int(s) for s in shape)
    n = math.prod(shape)
    with np.errstate(over="ignore"):
        x = np.arange(n, dtype=np.uint64) + np.uint64(seed) * _GOLDEN
        x ^= x >> np.uint64(30)
        x *= _M1
        x ^= x >> np.uint64(27)
        x *= _M2
        x ^= x >> np.uint64(31)
    u = (x >> np.uint64(11)).astype(np.float64) * 2.0**-53
    return np.asarray(lo + (hi - lo) * u, dtype).reshape(shape)


class Draws:
    """Hands out :func:`uniform` arrays under consecutive seeds and
    remembers how each was drawn, so that the runner can draw it again."""

    def __init__(self, seed: int, dtype):
        self.next_seed = seed
        self.dtype = np.dtype(dtype)
        self.specs: list[tuple[np.ndarray, dict]] = []

    def __call__(self, shape, lo: float = -1.0, hi: float = 1.0, dtype=None) -> np.ndarray:
        dtype = np.dtype(dtype or self.dtype)
        spec = {"seed": self.next_seed, "shape": list(shape), "lo": lo, "hi": hi, "dtype": dtype.name}
        self.next_seed += 1
        a = uniform(spec["seed"], shape, lo, hi, dtype)
        self.specs.append((a, spec))
        return a

    def spec_of(self, array: np.ndarray) -> dict | None:
        """How ``array`` was drawn, if it is one of ours (the same buffer)."""
        for a, spec in self.specs:
            if a is array or (
                a.shape == array.shape and a.dtype == array.dtype and np.shares_memory(a, array)
            ):
                return spec
        return None


def draw(spec: dict) -> np.ndarray:
    """The array a :class:`Draws` spec describes (transposed, for a
    ``transpose`` spec)."""
    a = uniform(spec["seed"], spec["shape"], spec["lo"], spec["hi"], np.dtype(spec["dtype"]))
    return np.ascontiguousarray(a.T) if spec.get("transpose") else a
