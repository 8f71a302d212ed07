"""Compares compiled results with the reference: structure exactly, values
within ``SAFETY`` times the reference's error bound.

A value ``got`` passes against the reference value ``v`` with bound ``e``
when ``|got - v| <= SAFETY * e + FLOOR[dtype] * |v|``: ``e`` is a
first-order bound of what a correct implementation in the element type
may make (see :mod:`fuzzing.reference`), ``SAFETY`` covers what first order
leaves out, and the relative floor is the per-type tolerance below which a
difference is never reported (f16 ~1e-3, f32 ~1e-6, f64 1e-10). Infinite
reference values (a causal ``-inf``, an ``empty`` of ``-inf``) must be
matched exactly; ops that only move data have ``e = 0`` and must be
bit-exact; integer and boolean results are compared exactly. Offsets are
compared exactly against the ones the reference derives from the lengths.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ragged_mlir import RaggedArray

from .program import NP_DTYPES
from .reference import DVal, Num, leaves, offsets_of, structure, unpack

__all__ = ["FLOOR", "SAFETY", "Mismatch", "as_list", "compare", "compare_outputs"]

SAFETY = 4.0
FLOOR = {"f16": 1e-3, "f32": 1e-6, "f64": 1e-10}


@dataclass
class Mismatch:
    """The first difference found in one output."""

    output: int
    what: str

    def __str__(self) -> str:
        return f"output {self.output}: {self.what}"


def _close(got: np.ndarray, want: Num, dtype: str, where: str) -> str | None:
    if got.shape != want.v.shape:
        return f"{where}: shape {got.shape}, expected {want.v.shape}"
    if got.size == 0:
        return None
    if dtype not in FLOOR:
        if not np.array_equal(got, want.v.astype(got.dtype)):
            bad = tuple(int(i) for i in np.argwhere(got != want.v.astype(got.dtype))[0])
            return f"{where}: at {bad} got {got[bad]}, expected {want.v[bad]} (exact)"
        return None
    g = got.astype(np.float64)
    v = want.v
    finite = np.isfinite(v)
    with np.errstate(invalid="ignore"):
        tol = SAFETY * want.e + FLOOR[dtype] * np.abs(np.where(finite, v, 0.0))
        diff = np.abs(g - v)
    ok = np.where(finite, diff <= tol, g == v)
    if ok.all():
        return None
    bad = tuple(int(i) for i in np.argwhere(~ok)[0])
    worst = np.nanmax(np.where(finite & np.isfinite(g), diff / np.maximum(tol, 1e-300), np.inf))
    return (
        f"{where}: {int((~ok).sum())} of {ok.size} values out of tolerance; first at {bad}: got {float(g[bad])!r}, "
        f"expected {float(v[bad])!r} +- {tol[bad]:.3g} (bound {want.e[bad]:.3g}); worst |diff|/tol = {worst:.3g}"
    )


def compare(got, want, index: int = 0) -> Mismatch | None:
    """``got`` (a RaggedArray or an array) against ``want`` (RVal / DVal)."""
    if isinstance(want, DVal):
        if isinstance(got, RaggedArray):
            return Mismatch(index, "got a RaggedArray, expected a dense array")
        got = np.asarray(got)
        want_dtype = np.dtype(NP_DTYPES[want.type.dtype])
        if got.dtype != want_dtype:
            return Mismatch(index, f"dtype {got.dtype}, expected {want_dtype}")
        msg = _close(got, want.num, want.type.dtype, "values")
        return Mismatch(index, msg) if msg else None
    if not isinstance(got, RaggedArray):
        return Mismatch(index, f"got {type(got).__name__}, expected a RaggedArray")
    t = want.type
    lengths = structure(t, want.items)
    if len(got.partitions) != len(t.distinct):
        return Mismatch(index, f"{len(got.partitions)} partitions, expected {len(t.distinct)} ({t.distinct})")
    for s, p in zip(t.distinct, got.partitions, strict=True):
        exp = offsets_of(lengths[s])
        p = np.asarray(p)
        if p.dtype != np.int64 or not np.array_equal(p, exp):
            return Mismatch(index, f"offsets of {s}: got {p.tolist()} ({p.dtype}), expected {exp.tolist()}")
    values = np.asarray(got.values)
    want_dtype = np.dtype(NP_DTYPES[t.dtype])
    if values.dtype != want_dtype:
        return Mismatch(index, f"values dtype {values.dtype}, expected {want_dtype}")
    try:
        items = unpack(t, values, [np.asarray(p) for p in got.partitions])
    except ValueError as e:
        return Mismatch(index, f"values do not fit the offsets: {e}")
    for b, (g_item, w_item) in enumerate(zip(items, want.items, strict=True)):
        for j, (g, w) in enumerate(zip(leaves(g_item), leaves(w_item), strict=True)):
            where = f"item {b}" + (f" segment {j}" if not isinstance(w_item, Num) else "")
            msg = _close(np.asarray(g.v), w, t.dtype, where)
            if msg:
                return Mismatch(index, msg)
    return None


def compare_outputs(got: list, want: list) -> Mismatch | None:
    if len(got) != len(want):
        return Mismatch(-1, f"{len(got)} results, expected {len(want)}")
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        m = compare(g, w, i)
        if m:
            return m
    return None


def as_list(result, n: int) -> list:
    """A compiled function's result as a list of ``n`` results."""
    if n == 1:
        return [result]
    return list(result)
