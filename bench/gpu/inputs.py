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
        """How to draw ``array`` again, if it holds the values of one of our
        draws or of its transpose (torch hands a compiled graph copies of
        its parameters, and a backward some of them transposed)."""
        for a, spec in self.specs:
            if a.dtype != array.dtype or a.size != array.size:
                continue
            if a.shape == array.shape and np.array_equal(a, array):
                return spec
            if a.ndim == 2 and a.T.shape == array.shape and np.array_equal(a.T, array):
                return {**spec, "transpose": True}
        return None


def weight(draw: Draws, shape, fan_in: int) -> np.ndarray:
    """Uniform with the variance of a standard normal over ``fan_in``."""
    bound = math.sqrt(3.0 / fan_in)
    return draw(shape, -bound, bound)


def encoder_weights(draw: Draws, layers: int, d: int, ff: int) -> list[list[np.ndarray]]:
    """Per layer of a post-LN encoder, [wq, wk, wv, wo, g1, b1, w1, w2, g2,
    b2], scaled so that activations stay of order one."""
    out = []
    for _ in range(layers):
        ws = [weight(draw, (d, d), d) for _ in range(4)]
        g1, b1 = draw((d,), 0.5, 1.5), draw((d,), -0.1, 0.1)
        w1, w2 = weight(draw, (d, ff), d), weight(draw, (ff, d), ff)
        g2, b2 = draw((d,), 0.5, 1.5), draw((d,), -0.1, 0.1)
        out.append([*ws, g1, b1, w1, w2, g2, b2])
    return out


def draw(spec: dict) -> np.ndarray:
    """The array a :class:`Draws` spec describes (transposed, for a
    ``transpose`` spec)."""
    a = uniform(spec["seed"], spec["shape"], spec["lo"], spec["hi"], np.dtype(spec["dtype"]))
    return np.ascontiguousarray(a.T) if spec.get("transpose") else a
