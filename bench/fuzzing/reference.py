"""A float64 interpreter of fuzz programs, item by item, with error bounds.

Written from the op descriptions of the dialect (``dialect/RaggedOps.td``,
the type's storage rules in ``dialect/RaggedBase.td``), never from the
lowering: every op is evaluated on one item at a time in numpy float64.

Alongside each value it carries a first-order bound of the error that a
correct implementation in the program's element type may make: the
rounding of the op itself (a few units of roundoff ``u`` of the element
type, ``n * u`` for a sum of ``n`` terms, more for polynomial
approximations of transcendental functions) plus the propagation of its
operands' bounds through the op's derivative. A compiled result is then
checked against ``value +- SAFETY * bound`` (:mod:`fuzzing.check`): tight for
well-conditioned programs, loose exactly where the math is ill-conditioned,
and zero for ops that only move data (which must be bit-exact).

The interpreter also draws the inputs of a call (:class:`Evaluator` with a
random generator and a length plan), because what an argument may hold
depends on what came before it: the lengths of a ``split`` are at most the
extents of its source, a ``match`` source must repeat the partition of its
reference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ragged_mlir import RaggedArray

from .program import NP_DTYPES, Dyn, Function, Node, RType, Run, Sym, TType

__all__ = [
    "PLANS",
    "DVal",
    "Evaluator",
    "Num",
    "RVal",
    "ROUNDOFF",
    "TINY",
    "Unrepresentable",
    "offsets_of",
]

#: Unit roundoff of each element type.
ROUNDOFF = {"f16": 2.0**-11, "f32": 2.0**-24, "f64": 2.0**-53}
#: Smallest normal number: a result may flush to zero below it.
TINY = {"f16": 6.2e-5, "f32": 1.2e-38, "f64": 2.3e-308}
#: Largest finite number of each float type.
FMAX = {"f16": 65504.0, "f32": 3.4e38, "f64": 1.7e308}
#: Ulps granted to polynomial approximations of exp, log, tanh, erf, ...
TRANSCENDENTAL_ULPS = 8.0

#: Length plans: how the batch and the lengths of the first top-level symbol
#: are drawn. empty_mixed: every other item empty; batch1: a single item;
#: one_long: one item of ``long`` rows among short ones; all_equal: no
#: raggedness; all_empty: zero rows; random: lengths 0..11; empty_batch: no
#: items at all; many_items: 40 to 89 items of random lengths.
PLANS = ("empty_mixed", "batch1", "one_long", "all_equal", "all_empty", "random", "empty_batch", "many_items")


class Unrepresentable(Exception):
    """The drawn inputs make a value overflow the element type or leave the
    domain of an op: the inputs are redrawn (never a finding)."""


@dataclass
class Num:
    """Values (float64, or int64 / bool for integer data) and an absolute
    error bound of the same shape."""

    v: np.ndarray
    e: np.ndarray

    @staticmethod
    def exact(v) -> Num:
        v = np.asarray(v)
        return Num(v, np.zeros(v.shape))


Item = Num | list


@dataclass
class RVal:
    type: RType
    items: list


@dataclass
class DVal:
    type: TType
    num: Num


def offsets_of(lengths) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(np.asarray(lengths, np.int64), out=out[1:])
    return out


# --------------------------------------------------------------------------
# Elementwise rules: value and error bound
# --------------------------------------------------------------------------

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _rounding(v, dt: str, ulps: float = 1.0) -> np.ndarray:
    """Rounding of a result ``v`` to the element type (and flush to zero)."""
    return ulps * ROUNDOFF[dt] * np.abs(v) + TINY[dt]


def _unary(fn: str, v: np.ndarray, e: np.ndarray, dt: str) -> tuple[np.ndarray, np.ndarray]:
    t = TRANSCENDENTAL_ULPS
    u = ROUNDOFF[dt]
    if fn == "neg":
        return -v, e
    if fn == "abs":
        return np.abs(v), e
    if fn == "relu":
        return np.maximum(v, 0.0), e
    if fn == "exp":
        y = np.exp(v)
        return y, y * np.expm1(e) + t * u * y * (1 + np.abs(v)) + TINY[dt]
    if fn == "log":  # |log(v +- e) - log v| <= e / (v - e)
        y = np.log(v)
        return y, np.where(v > e, e / (v - e), np.inf) + t * u * (np.abs(y) + 1) + TINY[dt]
    if fn == "sqrt":  # |sqrt(v +- e) - sqrt v| <= e / sqrt v
        y = np.sqrt(v)
        return y, np.where(v >= e, e / y, np.inf) + t * u * y + TINY[dt]
    if fn == "rsqrt":  # |1/sqrt(v +- e) - 1/sqrt v| <= e / (v sqrt(v - e))
        y = 1 / np.sqrt(v)
        return y, np.where(v > e, e / (v * np.sqrt(v - e)), np.inf) + t * u * y + TINY[dt]
    if fn == "tanh":
        y = np.tanh(v)
        d = 1 - y * y
        return y, np.minimum(d * e, 2.0) + t * u * (np.abs(y) + np.abs(v) * d) + TINY[dt]
    if fn == "sigmoid":
        y = 1 / (1 + np.exp(-v))
        d = y * (1 - y)
        return y, d * e + t * u * (y + np.abs(v) * d) + TINY[dt]
    if fn == "gelu":  # exact form: x * Phi(x), |d/dx| <= 1.13
        cdf = 0.5 * (1 + _erf(v / math.sqrt(2))) if v.size else v.copy()
        y = v * cdf
        d = np.abs(cdf + v * np.exp(-0.5 * v * v) / math.sqrt(2 * math.pi))
        return y, 1.13 * e + t * u * (np.abs(y) + np.abs(v) * d) + TINY[dt]
    raise ValueError(f"fn: unknown unary function {fn!r}")


def unary(fn: str, x: Num, dt: str) -> Num:
    with np.errstate(all="ignore"):
        y, e = _unary(fn, x.v, x.e, dt)
        # Infinite operands (a causal -inf) and results are exact.
        e = np.where(np.isfinite(x.v) & np.isfinite(y), e, 0.0)
    return Num(y, np.broadcast_to(e, y.shape).copy())


def binary(fn: str, x: Num, y: Num, dt: str) -> Num:
    a, ea, b, eb = x.v, x.e, y.v, y.e
    with np.errstate(all="ignore"):
        if fn == "add":
            r = a + b
            return Num(r, ea + eb + _rounding(r, dt))
        if fn == "sub":
            r = a - b
            return Num(r, ea + eb + _rounding(r, dt))
        if fn == "mul":
            r = a * b
            return Num(r, np.abs(b) * ea + np.abs(a) * eb + ea * eb + _rounding(r, dt))
        if fn == "div":
            r = a / b
            low = np.abs(b) - eb
            e = np.where(low > 0, (ea + np.abs(r) * eb) / low, np.inf)
            return Num(r, e + _rounding(r, dt))
        if fn == "max":
            return Num(np.maximum(a, b), np.maximum(ea, eb))
        if fn == "min":
            return Num(np.minimum(a, b), np.maximum(ea, eb))
    raise ValueError(f"fn: unknown binary function {fn!r}")


def _fix_inf(n: Num) -> Num:
    """Infinite results are exact (e.g. causal -inf): their bound is 0."""
    bad = ~np.isfinite(n.v)
    if bad.any():
        e = n.e.copy()
        e[bad] = 0.0
        return Num(n.v, e)
    return n


# --------------------------------------------------------------------------
# Reductions, normalisations, contractions (one item at a time)
# --------------------------------------------------------------------------


def reduce_segment(kind: str, x: Num, empty: float, dt: str) -> Num:
    """Reduces ``x`` (``[n, dense...]``) over axis 0; ``empty`` when n == 0."""
    n = x.v.shape[0]
    if n == 0:
        return Num(np.full(x.v.shape[1:], float(empty)), np.zeros(x.v.shape[1:]))
    u = ROUNDOFF[dt]
    if kind in ("max", "min"):
        f = np.max if kind == "max" else np.min
        return Num(f(x.v, axis=0), np.max(x.e, axis=0))
    s = x.v.sum(axis=0)
    es = x.e.sum(axis=0) + n * u * np.abs(x.v).sum(axis=0)
    if kind == "sum":
        return Num(s, es + _rounding(s, dt))
    m = s / n
    return Num(m, es / n + _rounding(m, dt, 2.0))


def softmax(x: Num, axis: int, dt: str) -> Num:
    """Softmax over ``axis`` (max subtracted); -inf entries give exact 0."""
    v = x.v
    if v.shape[axis] == 0 or v.size == 0:
        return Num(v.copy(), np.zeros(v.shape))
    u = ROUNDOFF[dt]
    t = TRANSCENDENTAL_ULPS
    n = v.shape[axis]
    with np.errstate(all="ignore"):
        m = v.max(axis=axis, keepdims=True)
        z = np.exp(v - m)
        p = z / z.sum(axis=axis, keepdims=True)
        finite = np.isfinite(v)
        ex = np.where(finite, x.e, 0.0)
        emax = ex.max(axis=axis, keepdims=True)
        arg = np.where(finite, np.abs(v - m), 0.0)
        local = t * u * (1 + arg)
        mix = (p * local).sum(axis=axis, keepdims=True)
        e = p * (2 * emax * (1 + 2 * emax) + local + mix + (n + 2) * u) + TINY[dt]
    e = np.where(finite, e, 0.0)
    return Num(p, e)


def layer_norm(x: Num, gamma: Num, beta: Num, eps: float, dt: str) -> Num:
    """Normalisation over the last axis, then ``* gamma + beta``."""
    v = x.v
    if v.size == 0:
        return Num(v.copy(), np.zeros(v.shape))
    u = ROUNDOFF[dt]
    d = v.shape[-1]
    mu = v.mean(axis=-1, keepdims=True)
    c = v - mu
    var = (c * c).mean(axis=-1, keepdims=True)
    # epsilon is an f64 attribute; a lower-precision kernel adds it rounded.
    sig = np.sqrt(var + eps)
    z = c / sig
    y = z * gamma.v + beta.v
    emax = x.e.max(axis=-1, keepdims=True)
    # Rounding of the mean / centred values / variance, as an error on x.
    ex_eff = emax + (d + 4) * u * np.abs(v).max(axis=-1, keepdims=True) + u * eps / sig
    ez = (ex_eff / sig) * (2 + 2 * np.abs(z))
    e = (
        np.abs(gamma.v) * ez
        + np.abs(z) * gamma.e
        + beta.e
        + TRANSCENDENTAL_ULPS * u * np.abs(z * gamma.v)
        + 2 * u * (np.abs(y) + np.abs(beta.v))
        + TINY[dt]
    )
    return Num(y, e)


def matmul(x: Num, w: Num, dt: str) -> Num:
    """``x [..., K] @ w [K, N]``."""
    k = w.v.shape[0]
    u = ROUNDOFF[dt]
    y = x.v @ w.v
    ay = np.abs(x.v) @ np.abs(w.v)
    e = x.e @ np.abs(w.v) + np.abs(x.v) @ w.e + x.e @ w.e + (k + 1) * u * ay + TINY[dt]
    return Num(y, e)


def scores(q: Num, k: Num, scale: float, causal: bool, dt: str) -> Num:
    """``[L, H, d]`` twice -> ``[L, L, H]``: ``scale * q_i . k_j``."""
    u = ROUNDOFF[dt]
    d = q.v.shape[2]
    s = scale * np.einsum("ihd,jhd->ijh", q.v, k.v)
    a = abs(scale) * np.einsum("ihd,jhd->ijh", np.abs(q.v), np.abs(k.v))
    e = abs(scale) * (
        np.einsum("ihd,jhd->ijh", q.e, np.abs(k.v)) + np.einsum("ihd,jhd->ijh", np.abs(q.v) + q.e, k.e)
    )
    e = e + (d + 2) * u * a + TINY[dt]
    if causal:
        n = s.shape[0]
        above = np.triu(np.ones((n, n), bool), 1)[:, :, None]
        s = np.where(above, -np.inf, s)
        e = np.where(above, 0.0, e)
    return Num(s, e)


def apply(p: Num, v: Num, dt: str) -> Num:
    """``[L, L, H] x [L, H, d] -> [L, H, d]``."""
    u = ROUNDOFF[dt]
    n = v.v.shape[0]
    o = np.einsum("ijh,jhd->ihd", p.v, v.v)
    a = np.einsum("ijh,jhd->ihd", np.abs(p.v), np.abs(v.v))
    e = np.einsum("ijh,jhd->ihd", p.e, np.abs(v.v)) + np.einsum("ijh,jhd->ihd", np.abs(p.v) + p.e, v.e)
    return Num(o, e + (n + 2) * u * a + TINY[dt])


# --------------------------------------------------------------------------
# Items: nested lists of Num for nested levels, one Num per item otherwise
# --------------------------------------------------------------------------


def leaf_map(f, *items):
    """Applies ``f`` to the aligned leaves (Num) of nested items."""
    first = items[0]
    if isinstance(first, Num):
        return f(*items)
    return [leaf_map(f, *parts) for parts in zip(*items, strict=True)]


def leaves(item) -> list[Num]:
    if isinstance(item, Num):
        return [item]
    return [leaf for part in item for leaf in leaves(part)]


def _levels(t: RType) -> int:
    """Number of nested ragged levels (1 for a single-level type)."""
    return len(t.symbols) if t.nested else 1


def _dense_size(d) -> int:
    if isinstance(d, Dyn):
        return d.size
    if isinstance(d, int):
        return d
    raise TypeError(f"dim: expected a dense size, got {d!r}")


def unpack(t: RType, values: np.ndarray, partitions: list, errors: np.ndarray | None = None) -> list:
    """Items of a packed ragged tensor, following the storage rules of the
    type: values item after item, row-major; one offsets array per distinct
    symbol in order of first appearance."""
    parts = dict(zip(t.distinct, partitions, strict=True))
    err = np.zeros(values.shape) if errors is None else errors
    batch = len(parts[t.distinct[0]]) - 1
    if t.nested:
        syms = [d.name for d in t.dims if isinstance(d, Sym)]

        def level(i: int, lo: int, hi: int) -> list:
            # Element j of level i spans children p[j]:p[j + 1] of level
            # i + 1 (rows of values at the last level).
            p = parts[syms[i]]
            if i == len(syms) - 1:
                return [Num(values[p[j] : p[j + 1]], err[p[j] : p[j + 1]]) for j in range(lo, hi)]
            return [level(i + 1, int(p[j]), int(p[j + 1])) for j in range(lo, hi)]

        return level(0, 0, batch)
    lengths = {s: np.diff(parts[s]) for s in t.distinct}
    trailing = tuple(values.shape[1:])
    prefix = t.dims[: t.last_ragged + 1]
    items, at = [], 0
    for b in range(batch):
        ext = tuple(int(lengths[d.name][b]) if isinstance(d, Sym) else _dense_size(d) for d in prefix)
        rows = math.prod(ext)
        items.append(
            Num(
                values[at : at + rows].reshape(ext + trailing),
                err[at : at + rows].reshape(ext + trailing),
            )
        )
        at += rows
    if at != values.shape[0]:
        raise ValueError(f"values: the partitions describe {at} rows, got {values.shape[0]}")
    return items


def pack(t: RType, items: list, trailing: tuple) -> tuple[Num, dict[str, np.ndarray]]:
    """Inverse of :func:`unpack`: packed values (and bounds) and the lengths
    of each symbol."""
    rows_v, rows_e = [], []
    for leaf in (leaf for item in items for leaf in leaves(item)):
        rows = math.prod(leaf.v.shape[: leaf.v.ndim - len(trailing)])
        rows_v.append(leaf.v.reshape((rows,) + trailing))
        rows_e.append(leaf.e.reshape((rows,) + trailing))
    v = np.concatenate(rows_v) if rows_v else np.zeros((0,) + trailing)
    e = np.concatenate(rows_e) if rows_e else np.zeros((0,) + trailing)
    return Num(v, e), structure(t, items)


def structure(t: RType, items: list) -> dict[str, np.ndarray]:
    """Lengths of each symbol (per outer item, outer items flattened)."""
    out: dict[str, list[int]] = {s: [] for s in t.distinct}
    if t.nested:
        syms = [d.name for d in t.dims if isinstance(d, Sym)]

        # Level 0 lengths are per batch item, level k per element of level
        # k - 1 in order: breadth first.
        frontier = list(items)
        for level, s in enumerate(syms):
            nxt = []
            for part in frontier:
                if level == len(syms) - 1:
                    out[s].append(part.v.shape[0])
                else:
                    out[s].append(len(part))
                    nxt.extend(part)
            frontier = nxt
        return {s: np.asarray(v, np.int64) for s, v in out.items()}
    for item in items:
        seen = set()
        for i, d in enumerate(t.dims[: t.last_ragged + 1]):
            if isinstance(d, Sym) and d.name not in seen:
                seen.add(d.name)
                out[d.name].append(item.v.shape[i])
    return {s: np.asarray(v, np.int64) for s, v in out.items()}


# --------------------------------------------------------------------------
# Drawing lengths and data
# --------------------------------------------------------------------------


def plan_lengths(plan: str, batch: int, rng: np.random.Generator, long: int) -> list[int]:
    if batch == 0:
        return []
    if plan == "empty_mixed":
        lens = [int(x) for x in rng.integers(1, 7, size=batch)]
        for i in range(0, batch, 2):
            lens[i] = 0
        if batch > 1 and all(x == 0 for x in lens):
            lens[-1] = 3
        return lens
    if plan == "one_long":
        lens = [int(x) for x in rng.integers(0, 4, size=batch)]
        lens[int(rng.integers(0, batch))] = long
        return lens
    if plan == "all_equal":
        return [int(rng.integers(1, 7))] * batch
    if plan == "all_empty":
        return [0] * batch
    lens = rng.integers(1, 12, size=batch)
    lens[rng.random(batch) < 0.2] = 0
    return [int(x) for x in lens]


def plan_batch(plan: str, rng: np.random.Generator) -> int:
    if plan == "many_items":
        return int(rng.integers(40, 90))
    return {"batch1": 1, "empty_batch": 0}.get(plan, int(rng.integers(2, 8)))


def _draw_floats(rng, shape, attrs: dict, dtype: str) -> np.ndarray:
    lo, hi = attrs.get("lo", -2.0), attrs.get("hi", 2.0)
    x = rng.uniform(lo, hi, size=shape)
    if attrs.get("away"):  # magnitudes in [lo, hi] > 0, random signs
        x = x * rng.choice([-1.0, 1.0], size=shape)
    return np.asarray(x, dtype=NP_DTYPES[dtype])


# --------------------------------------------------------------------------
# The interpreter
# --------------------------------------------------------------------------


class Evaluator:
    """Evaluates one :class:`Function` on one set of inputs.

    With ``inputs=None`` the inputs are drawn as the arguments are reached
    (``rng``, ``plan``, ``long`` decide lengths and data); otherwise the
    given arrays are used. After :meth:`run`, ``inputs`` holds the call's
    arguments and ``outputs`` the expected results (:class:`RVal` /
    :class:`DVal`)."""

    def __init__(
        self,
        fn: Function,
        rng: np.random.Generator | None = None,
        plan: str = "random",
        long: int = 300,
        inputs: list | None = None,
    ):
        self.fn = fn
        self.rng = rng
        self.plan = plan
        self.long = long
        self.given = inputs
        self.inputs: list = []
        self.lengths: dict[str, np.ndarray] = {}
        self.batch: int | None = None
        self._planned = False
        self.env: dict = {}
        self.outputs: list = []

    # -- structure ---------------------------------------------------------
    def _bind(self, symbol: str, lengths: np.ndarray, where: str) -> None:
        lengths = np.asarray(lengths, np.int64)
        if symbol in self.lengths:
            if not np.array_equal(self.lengths[symbol], lengths):
                raise ValueError(f"{where}: symbol {symbol} gets a different partition than before")
        else:
            self.lengths[symbol] = lengths

    def _batch(self, static: int | None) -> int:
        if self.batch is None:
            self.batch = static if static is not None else plan_batch(self.plan, self.rng)
        return self.batch

    def _draw_symbol(self, t: RType, sym: str, copy: dict) -> np.ndarray:
        if sym in self.lengths:
            return self.lengths[sym]
        if sym in copy:
            return self.lengths[copy[sym]]
        rng = self.rng
        parent = t.parent(sym)
        if parent is None:
            batch = self._batch(t.batch)
            if not self._planned:
                self._planned = True
                # An item ragged in two dims of one symbol holds long^2 rows.
                long = self.long if t.symbols.count(sym) == 1 else min(self.long, 300)
                lens = plan_lengths(self.plan, batch, rng, long)
            elif self.plan == "all_empty":
                lens = [0] * batch
            else:
                lens = [int(x) for x in rng.integers(0, 7, size=batch)]
            return np.asarray(lens, np.int64)
        outer = int(self.lengths[parent].sum())
        lens = rng.integers(0, 5, size=outer)
        lens[rng.random(outer) < 0.25] = 0
        if self.plan == "one_long" and outer:
            lens[int(rng.integers(0, outer))] = min(self.long, 60)
        return np.asarray(lens, np.int64)

    def _draw_ragged(self, node: Node) -> RaggedArray:
        t: RType = node.types[0]
        a = node.attrs
        copy = a.get("copy", {})
        for s in t.distinct:
            self._bind(s, self._draw_symbol(t, s, copy), "argument")
        rows, trailing = self._rows(t), tuple(_dense_size(d) for d in t.trailing)
        shape = (rows,) + trailing
        if t.dtype in ("i32", "i64"):
            values = self.rng.integers(0, a.get("vocab", 10), size=shape).astype(NP_DTYPES[t.dtype])
        else:
            values = _draw_floats(self.rng, shape, a, t.dtype)
        parts = [offsets_of(self.lengths[s]) for s in t.distinct]
        layout = None if t.nested else self._layout(t)
        return RaggedArray(values, parts, layout=layout)

    @staticmethod
    def _layout(t: RType):
        syms = t.distinct
        if t.is_seq:
            return None
        return tuple(
            (syms.index(d.name),) if isinstance(d, Sym) else _dense_size(d)
            for d in t.dims[: t.last_ragged + 1]
        )

    def _rows(self, t: RType) -> int:
        if t.nested:
            return int(self.lengths[t.symbols[-1]].sum())
        batch = len(self.lengths[t.distinct[0]])
        ext = [
            self.lengths[d.name] if isinstance(d, Sym) else np.full(batch, _dense_size(d))
            for d in t.dims[: t.last_ragged + 1]
        ]
        return int(np.prod(ext, axis=0, dtype=np.int64).sum()) if batch else 0

    def _draw_dense(self, node: Node) -> np.ndarray:
        t: TType = node.types[0]
        a = node.attrs
        role = a["role"]
        if role == "lengths":
            return self._draw_lengths(t, a)
        shape = []
        extent = int(self.rng.integers(0, 7))  # one padded extent for all ragged dims
        for d in t.shape:
            if isinstance(d, Run):
                if d.kind == "batch":
                    shape.append(self._batch(None))
                elif d.kind == "extent":
                    shape.append(extent)
                else:
                    raise ValueError(f"dim: unknown run-time dim {d}")
            else:
                shape.append(_dense_size(d))
        if t.dtype in ("i64", "i32"):
            return np.asarray(self.rng.integers(0, a.get("vocab", 10), size=shape), dtype=NP_DTYPES[t.dtype])
        return _draw_floats(self.rng, tuple(shape), a, t.dtype)

    def _draw_lengths(self, t: TType, a: dict) -> np.ndarray:
        kind, *what = a["of"]
        if kind == "sym":
            bound = self.lengths[what[0]]
        else:  # ("dim", node ref, axis): at most that dim of a dense value
            ref, axis = what
            dense = self.env[tuple(ref)]
            bound = np.full(dense.num.v.shape[0], dense.num.v.shape[axis], np.int64)
        n = np.array([int(self.rng.integers(0, int(b) + 1)) for b in bound], np.int64)
        if n.size > 1:  # both extremes
            n[0], n[-1] = 0, bound[-1]
        return n

    # -- argument reading (given or drawn) ---------------------------------
    def _arg(self, k: int, node: Node):
        t = node.types[0]
        position = len(self.inputs)
        if self.given is not None:
            arg = self.given[position]
        elif isinstance(t, RType):
            arg = self._draw_ragged(node)
        else:
            arg = self._draw_dense(node)
        self.inputs.append(arg)
        if isinstance(t, RType):
            values = np.asarray(arg.values)
            items = unpack(
                t, values.astype(np.float64) if t.dtype in ("f16", "f32", "f64") else values, arg.partitions
            )
            if self.batch is None:
                self.batch = len(arg.partitions[0]) - 1
            for s, lens in structure(t, items).items():
                self._bind(s, lens, f"argument {position}")
            return RVal(t, items)
        arr = np.asarray(arg)
        if self.batch is None:
            for d, size in zip(t.shape, arr.shape, strict=True):
                if isinstance(d, Run) and d.kind == "batch":
                    self.batch = size
        v = arr.astype(np.float64) if t.dtype in ("f16", "f32", "f64") else arr
        return DVal(t, Num.exact(v))

    # -- ops ---------------------------------------------------------------
    def run(self) -> Evaluator:
        for k, node in enumerate(self.fn.nodes):
            if node.op == "arg":
                self.env[(k, 0)] = self._arg(k, node)
                continue
            outs = self._op(node, [self.env[r] for r in node.operands])
            for j, out in enumerate(outs):
                self._check_range(out, node)
                self.env[(k, j)] = out
        self.outputs = [self.env[r] for r in self.fn.outputs]
        return self

    def _check_range(self, val, node: Node) -> None:
        t = val.type
        if t.dtype not in FMAX:
            return
        nums = [val.num] if isinstance(val, DVal) else [x for item in val.items for x in leaves(item)]
        for n in nums:
            if n.v.size == 0:
                continue
            if np.isnan(n.v).any() or np.isnan(n.e).any():
                raise Unrepresentable(f"{node.op}: NaN in the float64 reference")
            finite = np.isfinite(n.v)
            big = np.abs(np.where(finite, n.v, 0.0)).max() + np.where(finite, n.e, 0.0).max()
            if big > FMAX[t.dtype] / 16:
                raise Unrepresentable(f"{node.op}: magnitude {big:.3g} overflows {t.dtype}")
            if np.isinf(n.e).any():
                raise Unrepresentable(f"{node.op}: unbounded error (an op left its domain)")

    def _op(self, node: Node, args: list) -> list:
        a = node.attrs
        op = node.op
        t = node.types[0]
        dt = t.dtype
        x = args[0]
        if op == "unary":
            return [RVal(t, [leaf_map(lambda n: _fix_inf(unary(a["fn"], n, dt)), i) for i in x.items])]
        if op == "binary":
            y = args[1]
            if isinstance(y, RVal):
                items = [
                    leaf_map(lambda p, q: _fix_inf(binary(a["fn"], p, q, dt)), i, j)
                    for i, j in zip(x.items, y.items, strict=True)
                ]
            else:
                items = [leaf_map(lambda p: _fix_inf(binary(a["fn"], p, y.num, dt)), i) for i in x.items]
            return [RVal(t, items)]
        if op == "matmul":
            w = args[1].num
            return [RVal(t, [leaf_map(lambda p: matmul(p, w, dt), i) for i in x.items])]
        if op == "layer_norm":
            g, b = args[1].num, args[2].num
            return [RVal(t, [leaf_map(lambda p: layer_norm(p, g, b, a["epsilon"], dt), i) for i in x.items])]
        if op == "reduce":
            return [self._reduce(x, a, t)]
        if op == "softmax":
            axis = 0 if x.type.nested else x.type.last_ragged
            return [RVal(t, [leaf_map(lambda p: softmax(p, axis, dt), i) for i in x.items])]
        if op == "reshape":
            dims = tuple(a["dims"])
            return [
                RVal(
                    t,
                    [
                        Num(i.v.reshape((i.v.shape[0],) + dims), i.e.reshape((i.e.shape[0],) + dims))
                        for i in x.items
                    ],
                )
            ]
        if op == "to_padded":
            return [self._to_padded(x, a["padding"], t)]
        if op == "mask":
            return [self._mask(x, t)]
        if op == "values":
            num, _ = pack(x.type, x.items, self._trailing_of(x))
            return [DVal(t, num)]
        if op == "offsets":
            return [DVal(t, Num.exact(offsets_of(self.lengths[a["symbol"]])))]
        if op == "pack":
            values = x.num
            parts = [p.num.v for p in args[1:]]
            items = unpack(t, values.v, parts, values.e)
            for s, lens in structure(t, items).items():
                self._bind(s, lens, "pack")
            return [RVal(t, items)]
        if op == "from_padded":
            return [self._from_padded(x, args[1:], t)]
        if op == "match":
            ref = args[1]
            got = structure(x.type, x.items)
            want = {s: self.lengths[s] for s in ref.type.distinct}
            for (s, g), (r, w) in zip(got.items(), want.items(), strict=True):
                if not np.array_equal(g, w):
                    raise ValueError(f"match: partitions of {s} and {r} differ in the drawn inputs")
            return [RVal(t, x.items)]
        if op == "scores":
            k = args[1]
            return [
                RVal(
                    t,
                    [
                        scores(q, kk, a["scale"], a["causal"], dt)
                        for q, kk in zip(x.items, k.items, strict=True)
                    ],
                )
            ]
        if op == "apply":
            v = args[1]
            return [RVal(t, [apply(p, vv, dt) for p, vv in zip(x.items, v.items, strict=True)])]
        if op == "attention":
            k, v = args[1], args[2]
            out = []
            for q, kk, vv in zip(x.items, k.items, v.items, strict=True):
                s = scores(q, kk, a["scale"], a["causal"], dt)
                out.append(apply(softmax(s, 1, dt), vv, dt))
            return [RVal(t, out)]
        if op == "gather":
            table = x.num
            ids = args[1]
            vocab = table.v.shape[0]

            def look(p: Num) -> Num:
                idx = p.v.astype(np.int64)
                if idx.size and (idx.min() < 0 or idx.max() >= vocab):
                    raise ValueError("gather: drawn ids out of range")
                return Num(table.v[idx], table.e[idx])

            return [RVal(t, [leaf_map(look, i) for i in ids.items])]
        if op == "concat":
            y = args[1]
            items = [
                Num(np.concatenate([p.v, q.v]), np.concatenate([p.e, q.e]))
                for p, q in zip(x.items, y.items, strict=True)
            ]
            self._bind(t.symbols[0], [i.v.shape[0] for i in items], "concat")
            return [RVal(t, items)]
        if op == "split":
            n = args[1].num.v.astype(np.int64)
            heads = [Num(p.v[: int(c)], p.e[: int(c)]) for p, c in zip(x.items, n, strict=True)]
            tails = [Num(p.v[int(c) :], p.e[int(c) :]) for p, c in zip(x.items, n, strict=True)]
            self._bind(t.symbols[0], [h.v.shape[0] for h in heads], "split")
            self._bind(node.types[1].symbols[0], [h.v.shape[0] for h in tails], "split")
            return [RVal(t, heads), RVal(node.types[1], tails)]
        raise ValueError(f"node.op: unknown op {op!r}")

    def _trailing_of(self, x: RVal) -> tuple:
        return tuple(_dense_size(d) for d in x.type.trailing)

    def _reduce(self, x: RVal, a: dict, t) -> RVal | DVal:
        kind = a["kind"]
        empty = a.get("empty")
        if empty is None:
            empty = 0.0
        dt = x.type.dtype
        if not x.type.nested:
            trailing = self._trailing_of(x)
            rows = [reduce_segment(kind, i, empty, dt) for i in x.items]
            v = np.stack([r.v for r in rows]) if rows else np.zeros((0,) + trailing)
            e = np.stack([r.e for r in rows]) if rows else np.zeros((0,) + trailing)
            return DVal(t, Num(v, e))
        trailing = self._trailing_of(x)
        levels = len(x.type.symbols)

        def reduce_level(part: list, level: int):
            if level < levels - 2:
                return [reduce_level(p, level + 1) for p in part]
            # The children of `part` are the segments (leaves).
            rows = [reduce_segment(kind, p, empty, dt) for p in part]
            if not rows:
                return Num(np.zeros((0,) + trailing), np.zeros((0,) + trailing))
            return Num(np.stack([r.v for r in rows]), np.stack([r.e for r in rows]))

        return RVal(t, [reduce_level(i, 0) for i in x.items])

    def _extents(self, x: RVal) -> list[int]:
        """Padded extent of each item dim up to the last ragged dim."""
        t = x.type
        out = []
        for d in t.dims[: t.last_ragged + 1]:
            if isinstance(d, Sym):
                lens = self.lengths[d.name]
                out.append(int(lens.max()) if lens.size else 0)
            else:
                out.append(_dense_size(d))
        return out

    def _to_padded(self, x: RVal, pad, t: TType) -> DVal:
        ext = self._extents(x)
        trailing = self._trailing_of(x)
        batch = self.batch
        v = np.full(
            (batch, *ext, *trailing),
            float(pad) if x.type.dtype in FMAX else pad,
            np.float64 if x.type.dtype in FMAX else np.int64,
        )
        e = np.zeros(v.shape)
        for b, item in enumerate(x.items):
            self._fill(v[b], e[b], item)
        return DVal(t, Num(v, e))

    def _fill(self, v: np.ndarray, e: np.ndarray, item) -> None:
        if isinstance(item, Num):
            sl = tuple(slice(0, s) for s in item.v.shape)
            v[sl] = item.v
            e[sl] = item.e
            return
        for i, part in enumerate(item):
            self._fill(v[i], e[i], part)

    def _mask(self, x: RVal, t: TType) -> DVal:
        ext = self._extents(x)
        ragged_axes = [i for i, d in enumerate(x.type.dims[: x.type.last_ragged + 1]) if isinstance(d, Sym)]
        m = np.zeros((self.batch, *ext), bool)
        for b, item in enumerate(x.items):
            if x.type.nested:
                self._fill_mask(m[b], item)
            else:
                m[b][tuple(slice(0, s) for s in item.v.shape[: len(ext)])] = True
        # Dense dims are dropped: any true along them.
        dense_axes = tuple(1 + i for i in range(len(ext)) if i not in ragged_axes)
        if dense_axes:
            m = m.any(axis=dense_axes)
        return DVal(t, Num.exact(m))

    def _fill_mask(self, m: np.ndarray, item) -> None:
        if isinstance(item, Num):
            m[: item.v.shape[0]] = True
            return
        for i, part in enumerate(item):
            self._fill_mask(m[i], part)

    def _from_padded(self, padded: DVal, lengths: list, t: RType) -> RVal:
        lens = {s: np.asarray(n.num.v, np.int64) for s, n in zip(t.distinct, lengths, strict=True)}
        pv, pe = padded.num.v, padded.num.e
        batch = pv.shape[0]
        items = []
        for b in range(batch):
            sl = []
            for i, d in enumerate(t.dims):
                if isinstance(d, Sym):
                    n = int(lens[d.name][b])
                    if not 0 <= n <= pv.shape[1 + i]:
                        raise ValueError(f"from_padded: drawn length {n} outside [0, {pv.shape[1 + i]}]")
                    sl.append(slice(0, n))
                else:
                    sl.append(slice(None))
            items.append(Num(pv[b][tuple(sl)], pe[b][tuple(sl)]))
        for s, n in lens.items():
            self._bind(s, n, "from_padded")
        return RVal(t, items)
