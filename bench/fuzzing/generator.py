"""Random ragged programs that are type-correct by construction.

:func:`generate` builds one :class:`~fuzzing.program.Function` of a few ops
chained on a pool of values: it starts from one or two ragged arguments of
a random layout (one ragged dim ``[L]``, images ``[H], [W]``, nested
``[S], [T(S)]`` or three levels deep, attention scores ``[L], [L]``, a dense
dim before the ragged one), element type (f32, f64, f16) and dense dims
(static or dynamic), then applies ops whose preconditions (from the op
descriptions and verifiers of the dialect) hold, creating further arguments
as an op needs them (weights, a ragged operand of the same type, lengths).

Each value carries an interval of what it may hold, so that an op is only
applied inside its domain (log of positive values, division by values away
from zero) and nothing overflows the element type; where an op's domain is
not met the generator makes it so (``abs`` and the addition of a positive
scalar before a ``log``).

Known failure classes of the compiler are named in :data:`KNOWN_FAILURES`;
a :class:`GenConfig` lists those to avoid in ``exclude``, and the generator
then never emits a program of that class. Lifting a switch once the bug is
fixed is a one-word change.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np

from .program import Dyn, Function, Ref, RType, Run, Sym, TType

__all__ = ["KNOWN_FAILURES", "LAYOUTS", "OPS", "GenConfig", "generate"]

#: Failure classes seen by the fuzzer, by name: what the generator avoids
#: when the name is in ``GenConfig.exclude``.
KNOWN_FAILURES: dict[str, str] = {}

LAYOUTS = ("seq", "images", "nested", "nested3", "pairs", "prefixed")

#: Ops and their default weights.
OPS = {
    "unary": 3.0,
    "binary": 3.0,
    "matmul": 2.0,
    "layer_norm": 1.5,
    "reduce": 2.0,
    "softmax": 1.5,
    "reshape": 0.7,
    "to_padded": 1.0,
    "mask": 0.5,
    "values": 0.4,
    "offsets": 0.3,
    "repack": 0.5,
    "match": 0.6,
    "from_padded": 0.8,
    "gather": 0.8,
    "concat": 1.0,
    "split": 1.0,
    "scores": 0.6,
    "apply": 0.5,
    "attention": 1.0,
}

UNARY = ("neg", "exp", "log", "tanh", "relu", "gelu", "sqrt", "rsqrt", "abs", "sigmoid")
BINARY = ("add", "sub", "mul", "div", "max", "min")

#: Larger dense sizes, on both sides of vector widths and tile sizes.
LARGE_DIMS = (7, 15, 16, 17, 31, 33, 64, 65, 130)

#: Most elements per row of values (keeps large dims from multiplying).
MAX_ROW = 2048

#: Largest magnitude a value may reach, per element type.
LIMIT = {"f16": 2.0e3, "f32": 1.0e7, "f64": 1.0e9}


@dataclass
class GenConfig:
    """What the generator may emit."""

    #: Element types and their weights.
    dtypes: dict[str, float] = field(default_factory=lambda: {"f32": 3.0, "f64": 1.0, "f16": 1.0})
    #: Layouts of the first argument and their weights.
    layouts: dict[str, float] = field(
        default_factory=lambda: {
            "seq": 5.0,
            "images": 1.5,
            "nested": 1.5,
            "nested3": 0.4,
            "pairs": 0.6,
            "prefixed": 0.5,
        }
    )
    ops: dict[str, float] = field(default_factory=lambda: dict(OPS))
    min_ops: int = 1
    max_ops: int = 5
    #: Probability that a dense dim is dynamic (``?``).
    p_dynamic: float = 0.25
    #: Probability of a static batch size.
    p_static_batch: float = 0.15
    #: Probability of a dense dim of size 0.
    p_zero_dim: float = 0.02
    #: Probability of a larger dense dim (LARGE_DIMS: around vector and tile sizes).
    p_large_dim: float = 0.08
    #: Probability that a static dense argument is frozen (an IREE parameter).
    p_frozen: float = 0.0
    #: Gather from integer tables (the result takes structure ops only).
    int_tables: bool = True
    #: Length of the long item of the ``one_long`` input plan (bounds sums).
    long: int = 300
    #: Known failure classes to avoid (names of KNOWN_FAILURES).
    exclude: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        unknown = sorted(set(self.exclude) - set(KNOWN_FAILURES))
        if unknown:
            raise ValueError(f"exclude: unknown failure classes {unknown}; known: {sorted(KNOWN_FAILURES)}")
        self.exclude = frozenset(self.exclude)


@dataclass(frozen=True)
class Facts:
    """What a float value may hold: ``lo <= x <= hi``, ``|x| >= amin``;
    ``causal`` marks -inf entries that softmax may take (each group keeps a
    finite element)."""

    lo: float
    hi: float
    amin: float = 0.0
    causal: bool = False

    @property
    def mag(self) -> float:
        return max(abs(self.lo), abs(self.hi))

    @property
    def finite(self) -> bool:
        return math.isfinite(self.lo) and math.isfinite(self.hi)

    def union(self, other: Facts) -> Facts:
        return Facts(
            min(self.lo, other.lo),
            max(self.hi, other.hi),
            min(self.amin, other.amin),
            self.causal or other.causal,
        )


def _interval(lo: float, hi: float) -> Facts:
    amin = lo if lo > 0 else (-hi if hi < 0 else 0.0)
    return Facts(lo, hi, amin)


INTEGER = Facts(0.0, 0.0)  # placeholder facts of integer data


class _Gen:
    def __init__(self, cfg: GenConfig, rng: np.random.Generator, name: str):
        self.cfg = cfg
        self.rng = rng
        self.fn = Function(name)
        self.facts: dict[Ref, Facts] = {}
        self.used: dict[Ref, int] = {}
        self.nsym = 0
        dtypes = dict(cfg.dtypes)
        if not dtypes:
            raise ValueError("dtypes: no element type to draw from")
        self.dtype = self.pick(dtypes)
        self.batch = int(rng.integers(1, 6)) if rng.random() < cfg.p_static_batch else None

    # -- helpers -----------------------------------------------------------
    def pick(self, weights: dict):
        keys = [k for k, w in weights.items() if w > 0]
        p = np.array([weights[k] for k in keys], float)
        return keys[int(self.rng.choice(len(keys), p=p / p.sum()))]

    def chance(self, p: float) -> bool:
        return bool(self.rng.random() < p)

    def excluded(self, name: str) -> bool:
        return name in self.cfg.exclude

    def fresh(self, base: str = "L") -> str:
        self.nsym += 1
        return f"{base}{self.nsym}"

    def size(self, lo: int = 1, hi: int = 6, large: bool = True) -> int:
        if self.chance(self.cfg.p_zero_dim):
            return 0
        if large and self.chance(self.cfg.p_large_dim):
            return int(self.rng.choice(LARGE_DIMS))
        return int(self.rng.integers(lo, hi + 1))

    def dim(self, lo: int = 1, hi: int = 6, large: bool = True):
        n = self.size(lo, hi, large)
        return Dyn(n) if self.chance(self.cfg.p_dynamic) else n

    def as_dense_dim(self, d):
        """A dense-argument dim that agrees with ``d`` at run time: the same
        size, static or ``?`` at random."""
        n = d.size if isinstance(d, Dyn) else d
        return Dyn(n) if self.chance(self.cfg.p_dynamic) else n

    def ragged_values(self) -> list[Ref]:
        return [r for r in self.facts if isinstance(self.fn.type_of(r), RType)]

    def floats(self, pred: Callable[[RType, Facts], bool] = lambda t, f: True) -> list[Ref]:
        out = []
        for r in self.ragged_values():
            t = self.fn.type_of(r)
            if t.dtype in ("f16", "f32", "f64") and pred(t, self.facts[r]):
                out.append(r)
        return out

    def choose(self, refs: list[Ref]) -> Ref:
        # Prefer recent values, so that ops chain.
        w = np.arange(1, len(refs) + 1, dtype=float) ** 2
        return refs[int(self.rng.choice(len(refs), p=w / w.sum()))]

    def add(self, op: str, operands: list[Ref], attrs: dict, *types, facts: list[Facts | None]) -> list[Ref]:
        for r in operands:
            self.used[r] = self.used.get(r, 0) + 1
        refs = self.fn.add(op, operands, attrs, *types)
        for r, f in zip(refs, facts, strict=True):
            if f is not None:
                self.facts[r] = f
        return refs

    # -- arguments -----------------------------------------------------------
    def ragged_arg(self, t: RType, lo: float = -2.0, hi: float = 2.0, away: bool = False, **attrs) -> Ref:
        attrs = {"role": "ragged", "lo": lo, "hi": hi, "away": away, **attrs}
        if t.dtype == "i64":
            facts = INTEGER
        elif away:
            facts = Facts(-hi, hi, lo)
        else:
            facts = _interval(lo, hi)
        return self.add("arg", [], attrs, t, facts=[facts])[0]

    def dense_arg(self, shape: tuple, dtype: str | None = None, lo=-2.0, hi=2.0, away=False, **attrs) -> Ref:
        dtype = dtype or self.dtype
        attrs = {"role": attrs.pop("role", "dense"), "lo": lo, "hi": hi, "away": away, **attrs}
        return self.add("arg", [], attrs, TType(tuple(shape), dtype), facts=[None])[0]

    def lengths_arg(self, of: tuple) -> Ref:
        shape = (self.batch,) if self.batch is not None and self.chance(0.5) else (Run("batch"),)
        return self.add("arg", [], {"role": "lengths", "of": of}, TType(shape, "i64"), facts=[None])[0]

    def layout_type(self, layout: str, dtype: str, trailing: tuple | None = None) -> RType:
        def tr(k_max: int, large: bool = True) -> tuple:
            if trailing is not None:
                return trailing
            k = int(self.rng.integers(0, k_max + 1))
            dims = tuple(self.dim(large=large) for _ in range(k))
            if _numel(dims) > MAX_ROW:
                dims = tuple(self.dim(large=False) for _ in range(k))
            return dims

        if layout == "seq":
            dims = (Sym(self.fresh("L")),) + tr(3)
        elif layout == "images":
            dims = (Sym(self.fresh("H")), Sym(self.fresh("W"))) + tr(2)
        elif layout == "nested":
            s = self.fresh("S")
            dims = (Sym(s), Sym(self.fresh("T"), s)) + tr(2)
        elif layout == "nested3":
            a, b = self.fresh("A"), self.fresh("B")
            dims = (Sym(a), Sym(b, a), Sym(self.fresh("C"), b)) + tr(1)
        elif layout == "pairs":
            s = self.fresh("L")
            dims = (Sym(s), Sym(s)) + tr(2, large=False)
        elif layout == "prefixed":
            dims = (self.size(1, 3, large=False), Sym(self.fresh("L"))) + tr(2)
        else:
            raise ValueError(f"layout: unknown {layout!r}")
        return RType(self.batch, dims, dtype)

    def renamed(self, t: RType) -> RType:
        """``t`` with fresh symbols (same structure)."""
        names = {s: self.fresh(s.rstrip("0123456789") or "L") for s in t.distinct}
        dims = tuple(Sym(names[d.name], names.get(d.parent)) if isinstance(d, Sym) else d for d in t.dims)
        return t.with_(dims=dims)

    # -- ops -------------------------------------------------------------------
    def op_unary(self) -> bool:
        refs = self.floats(lambda t, f: f.finite)
        if not refs:
            return False
        x = self.choose(refs)
        t, f = self.fn.type_of(x), self.facts[x]
        fn = str(self.rng.choice(UNARY))
        if fn in ("log", "sqrt", "rsqrt") and f.lo < 0.25:
            # Into the domain: abs, then + a positive scalar.
            x = self.add("unary", [x], {"fn": "abs"}, t, facts=[Facts(f.amin, f.mag, f.amin)])[0]
            c = self.dense_arg((), lo=0.5, hi=2.0)
            f = Facts(f.amin + 0.5, f.mag + 2.0, f.amin + 0.5)
            x = self.add("binary", [x, c], {"fn": "add"}, t, facts=[f])[0]
        if fn == "exp" and (f.hi > 6 or f.lo < -40):
            fn = "tanh"
        lo, hi = f.lo, f.hi
        out = {
            "neg": lambda: Facts(-hi, -lo, f.amin),
            "abs": lambda: Facts(f.amin, f.mag, f.amin),
            "relu": lambda: _interval(max(lo, 0.0), max(hi, 0.0)),
            "exp": lambda: Facts(math.exp(lo), math.exp(hi), math.exp(lo)),
            "log": lambda: _interval(math.log(lo), math.log(hi)),
            "tanh": lambda: _interval(math.tanh(lo), math.tanh(hi)),
            "sigmoid": lambda: _interval(
                1 / (1 + math.exp(-lo)) if lo > -700 else 0.0, 1 / (1 + math.exp(-hi)) if hi > -700 else 0.0
            ),
            "gelu": lambda: _interval(-0.17 if lo < 0 else lo * 0.5, max(hi, 0.0)),
            "sqrt": lambda: _interval(math.sqrt(lo), math.sqrt(hi)),
            "rsqrt": lambda: _interval(1 / math.sqrt(hi), 1 / math.sqrt(lo)),
        }[fn]()
        self.add("unary", [x], {"fn": fn}, t, facts=[out])
        return True

    def op_binary(self) -> bool:
        refs = self.floats(lambda t, f: f.finite)
        if not refs:
            return False
        x = self.choose(refs)
        t, f = self.fn.type_of(x), self.facts[x]
        fn = str(self.rng.choice(BINARY))
        mode = self.pick({"ragged": 1.0, "dense": 1.0})
        if mode == "ragged":
            same = [r for r in self.floats(lambda tt, ff: tt == t and ff.finite)]
            if fn == "div":
                same = [r for r in same if self.facts[r].amin >= 0.25]
            if same and self.chance(0.6):
                y = self.choose(same)
            else:
                y = self.ragged_arg(t, *((0.5, 2.0, True) if fn == "div" else (-2.0, 2.0)))
            g = self.facts[y]
        else:
            trailing = t.trailing
            k = int(self.rng.integers(0, len(trailing) + 1))
            shape = tuple(self.as_dense_dim(d) for d in trailing[len(trailing) - k :])
            if fn == "div":
                y = self.dense_arg(shape, lo=0.5, hi=2.0, away=True)
                g = Facts(-2.0, 2.0, 0.5)
            else:
                y = self.dense_arg(shape)
                g = Facts(-2.0, 2.0)
        out = _binary_facts(fn, f, g)
        if out is None or out.mag > LIMIT[t.dtype]:
            return False
        self.add("binary", [x, y], {"fn": fn}, t, facts=[out])
        return True

    def op_matmul(self) -> bool:
        refs = self.floats(lambda t, f: f.finite and len(t.trailing) > 0)
        if not refs:
            return False
        x = self.choose(refs)
        t, f = self.fn.type_of(x), self.facts[x]
        k = t.dims[-1]
        kk = k.size if isinstance(k, Dyn) else k
        n = self.dim(1, 8)
        mag = max(kk, 1) * f.mag
        if mag > LIMIT[t.dtype] or _numel(t.trailing[:-1] + (n,)) > MAX_ROW:
            return False
        w = self.dense_arg((self.as_dense_dim(k), n), lo=-1.0, hi=1.0)
        out_t = t.with_(dims=t.dims[:-1] + (n,))
        self.add("matmul", [x, w], {}, out_t, facts=[Facts(-mag, mag)])
        return True

    def op_layer_norm(self) -> bool:
        refs = self.floats(lambda t, f: f.finite and len(t.trailing) > 0)
        if not refs:
            return False
        x = self.choose(refs)
        t = self.fn.type_of(x)
        d = t.dims[-1]
        dd = d.size if isinstance(d, Dyn) else d
        g = self.dense_arg((self.as_dense_dim(d),), lo=0.5, hi=1.5)
        b = self.dense_arg((self.as_dense_dim(d),), lo=-0.5, hi=0.5)
        eps = float(self.rng.choice([1e-5, 1e-3, 0.1, 1.0]))
        mag = 1.5 * math.sqrt(max(dd, 1)) + 0.5
        self.add("layer_norm", [x, g, b], {"epsilon": eps}, t, facts=[Facts(-mag, mag)])
        return True

    def op_reduce(self) -> bool:
        refs = self.floats(lambda t, f: (t.is_seq or t.is_chain) and f.finite)
        if not refs:
            return False
        x = self.choose(refs)
        t, f = self.fn.type_of(x), self.facts[x]
        kind = str(self.rng.choice(["sum", "mean", "max", "min"]))
        attrs: dict = {"kind": kind}
        if kind in ("max", "min"):
            inf = -math.inf if kind == "max" else math.inf
            attrs["empty"] = inf if self.chance(0.6) else float(self.rng.choice([-1.0, 0.0, 7.0]))
        elif self.chance(0.3):
            attrs["empty"] = float(self.rng.choice([2.5, -3.0]))
        empty = attrs.get("empty", 0.0)
        if kind == "sum":
            mag = self.cfg.long * f.mag
            if mag > LIMIT[t.dtype]:
                return False
            out = Facts(-mag, mag)
        else:
            out = f
        out = out.union(Facts(empty, empty))
        last = t.last_ragged
        dims = t.dims[:last] + t.dims[last + 1 :]
        if t.is_seq:
            shape = (self.batch if self.batch is not None else Run("batch"),) + dims
            rt = TType(shape, t.dtype)
        else:
            rt = t.with_(dims=dims)
        self.add("reduce", [x], attrs, rt, facts=[out if isinstance(rt, RType) else None])
        return True

    def op_softmax(self) -> bool:
        refs = self.floats(lambda t, f: f.finite or f.causal)
        if not refs:
            return False
        x = self.choose(refs)
        self.add("softmax", [x], {}, self.fn.type_of(x), facts=[Facts(0.0, 1.0)])
        return True

    def op_reshape(self) -> bool:
        refs = self.floats(lambda t, f: t.is_seq and all(isinstance(d, int) for d in t.trailing))
        if not refs:
            return False
        x = self.choose(refs)
        t = self.fn.type_of(x)
        total = math.prod(t.dims[1:])
        if total == 0:
            return False
        divisors = [d for d in range(1, total + 1) if total % d == 0]
        choice = self.pick({"flat": 1.0, "split": 2.0, "three": 0.5, "none": 0.5 if total == 1 else 0.0})
        if choice == "flat":
            dims = (total,)
        elif choice == "none":
            dims = ()
        else:
            a = int(self.rng.choice(divisors))
            dims = (a, total // a)
            if choice == "three":
                b = int(self.rng.choice([d for d in divisors if (total // a) % d == 0]))
                dims = (a, b, total // a // b)
        self.add("reshape", [x], {"dims": dims}, t.with_(dims=(t.dims[0],) + dims), facts=[self.facts[x]])
        return True

    def op_to_padded(self) -> bool:
        refs = self.ragged_values()
        if not refs:
            return False
        x = self.choose(refs)
        t = self.fn.type_of(x)
        pad = float(self.rng.choice([0.0, -7.0, 1.5])) if t.dtype != "i64" and t.dtype != "i32" else -1
        self.add("to_padded", [x], {"padding": pad}, self._padded_type(t), facts=[None])
        return True

    def _padded_type(self, t: RType) -> TType:
        batch = t.batch if t.batch is not None else Run("batch")
        dims = tuple(Run("extent") if isinstance(d, Sym) else d for d in t.dims)
        return TType((batch,) + dims, t.dtype)

    def op_mask(self) -> bool:
        refs = self.ragged_values()
        if not refs:
            return False
        x = self.choose(refs)
        t = self.fn.type_of(x)
        batch = t.batch if t.batch is not None else Run("batch")
        shape = (batch,) + tuple(Run("extent") for _ in t.symbols)
        self.add("mask", [x], {}, TType(shape, "i1"), facts=[None])
        return True

    def op_values(self) -> bool:
        refs = self.ragged_values()
        if not refs:
            return False
        x = self.choose(refs)
        t = self.fn.type_of(x)
        self.add("values", [x], {}, TType((Run("rows"),) + t.trailing, t.dtype), facts=[None])
        return True

    def op_offsets(self) -> bool:
        refs = self.ragged_values()
        if not refs:
            return False
        x = self.choose(refs)
        t = self.fn.type_of(x)
        s = str(self.rng.choice(t.distinct))
        n = t.batch + 1 if t.batch is not None and t.parent(s) is None else Run("batch+1")
        self.add("offsets", [x], {"symbol": s}, TType((n,), "i64"), facts=[None])
        return True

    def op_repack(self) -> bool:
        """pack(values(x), offsets(x, s)...) into ``x``'s structure, with
        fresh symbols or the same ones."""
        refs = self.ragged_values()
        if not refs:
            return False
        x = self.choose(refs)
        t = self.fn.type_of(x)
        v = self.add("values", [x], {}, TType((Run("rows"),) + t.trailing, t.dtype), facts=[None])[0]
        parts = []
        for s in t.distinct:
            n = t.batch + 1 if t.batch is not None and t.parent(s) is None else Run("batch+1")
            parts.append(self.add("offsets", [x], {"symbol": s}, TType((n,), "i64"), facts=[None])[0])
        out_t = self.renamed(t) if self.chance(0.6) else t
        self.add("pack", [v, *parts], {}, out_t, facts=[self.facts.get(x, INTEGER)])
        return True

    def op_match(self) -> bool:
        refs = self.ragged_values()
        if not refs:
            return False
        x = self.choose(refs)
        t = self.fn.type_of(x)
        src_t = self.renamed(t)
        copy = {a: b for a, b in zip(src_t.distinct, t.distinct, strict=True)}
        if src_t.trailing == () and self.chance(0.3):
            # Ids matched to the structure of x, then usable by a gather.
            src = self.ragged_arg(src_t.with_(dtype="i64"), copy=copy, vocab=int(self.rng.integers(1, 12)))
        else:
            dtype = self.dtype if t.dtype not in ("f16", "f32", "f64") else t.dtype
            src = self.ragged_arg(src_t.with_(dtype=dtype), copy=copy)
        st = self.fn.type_of(src)
        self.add("match", [src, x], {}, t.with_(dtype=st.dtype), facts=[self.facts[src]])
        return True

    def op_from_padded(self) -> bool:
        single = [r for r in self.ragged_values() if not self.fn.type_of(r).nested]
        if single and self.chance(0.7):  # a round trip through to_padded
            x = self.choose(single)
            t = self.fn.type_of(x)
            out_t = self.renamed(t)
        else:  # a padded argument
            x = None
            layout = self.pick({"seq": 2.0, "images": 1.0, "pairs": 0.3, "prefixed": 0.3})
            out_t = self.layout_type(layout, self.dtype)
        if x is not None:
            pad = 0.0 if t.dtype not in ("i64", "i32") else 0
            p = self.add("to_padded", [x], {"padding": pad}, self._padded_type(t), facts=[None])[0]
            facts = self.facts[x].union(Facts(0.0, 0.0)) if t.dtype in ("f16", "f32", "f64") else INTEGER
        else:
            p = self.dense_arg(self._padded_type(out_t).shape)
            facts = Facts(-2.0, 2.0)
        lengths = []
        for s in out_t.distinct:
            axis = 1 + next(i for i, d in enumerate(out_t.dims) if isinstance(d, Sym) and d.name == s)
            lengths.append(self.lengths_arg(("dim", p, axis)))
        self.add("from_padded", [p, *lengths], {}, out_t, facts=[facts])
        return True

    def op_gather(self) -> bool:
        # Ids from the pool (a match), ids sharing the partitions of a value,
        # or ids of a structure of their own.
        pool = [r for r in self.ragged_values() if self._ids_ok(r)]
        shares = self.ragged_values()
        if pool and self.chance(0.5):
            ids = self.choose(pool)
            ids_t = self.fn.type_of(ids)
            vocab = self.fn.nodes[self._arg_of(ids)].attrs["vocab"]
        else:
            if shares and self.chance(0.6):
                base = self.fn.type_of(self.choose(shares))
                ids_t = base.with_(dims=base.dims[: base.last_ragged + 1], dtype="i64")
            else:
                layout = self.pick({"seq": 3.0, "images": 1.0, "nested": 1.0, "pairs": 0.3})
                ids_t = self.layout_type(layout, "i64", trailing=())
            vocab = int(self.rng.integers(1, 12))
            ids = self.ragged_arg(ids_t, vocab=vocab)
        dtype = self.dtype
        if self.cfg.int_tables and self.chance(0.1):
            dtype = str(self.rng.choice(["i32", "i64"]))
        d = self.dim(1, 6)
        table = self.dense_arg((self.as_dense_dim(vocab), d), dtype=dtype, vocab=50)
        out_t = ids_t.with_(dims=ids_t.dims + (d,), dtype=dtype)
        facts = Facts(-2.0, 2.0) if dtype in ("f16", "f32", "f64") else INTEGER
        self.add("gather", [table, ids], {}, out_t, facts=[facts])
        return True

    def _ids_ok(self, r: Ref) -> bool:
        t = self.fn.type_of(r)
        return t.dtype == "i64" and t.trailing == () and self._arg_of(r) is not None

    def _arg_of(self, r: Ref) -> int | None:
        """The argument node whose ids ``r`` holds (through a match)."""
        node = self.fn.nodes[r[0]]
        if node.op == "match":
            return self._arg_of(node.operands[0])
        if node.op == "arg" and "vocab" in node.attrs:
            return r[0]
        return None

    def op_concat(self) -> bool:
        seqs = [r for r in self.ragged_values() if self.fn.type_of(r).is_seq]
        if not seqs:
            return False
        x = self.choose(seqs)
        t = self.fn.type_of(x)
        same = [r for r in seqs if self._resequence_ok(self.fn.type_of(r), t)]
        if same and self.chance(0.5):
            y = self.choose(same)
        else:
            y = self.ragged_arg(self.renamed(t), vocab=5)
        if self.chance(0.5):
            x, y = y, x
        out_t = t.with_(dims=(Sym(self.fresh("N")),) + t.dims[1:])
        f = self.facts.get(x, INTEGER).union(self.facts.get(y, INTEGER))
        self.add("concat", [x, y], {}, out_t, facts=[f])
        return True

    @staticmethod
    def _resequence_ok(a: RType, b: RType) -> bool:
        return a.is_seq and a.dims[1:] == b.dims[1:] and a.dtype == b.dtype and a.batch == b.batch

    def op_split(self) -> bool:
        seqs = [r for r in self.ragged_values() if self.fn.type_of(r).is_seq]
        if not seqs:
            return False
        x = self.choose(seqs)
        t = self.fn.type_of(x)
        n = self.lengths_arg(("sym", t.symbols[0]))
        head = t.with_(dims=(Sym(self.fresh("P")),) + t.dims[1:])
        tail = t.with_(dims=(Sym(self.fresh("Q")),) + t.dims[1:])
        f = self.facts.get(x, INTEGER)
        self.add("split", [x, n], {}, head, tail, facts=[f, f])
        return True

    # attention family ----------------------------------------------------------
    def heads_value(self, like: RType | None = None) -> Ref | None:
        """A ``[B, L(b), H, d]`` float value: from the pool, a reshape of a
        pool value, or a new argument."""
        if like is not None:
            same = self.floats(lambda t, f: t == like and f.finite and f.mag <= 8)
            if same and self.chance(0.6):
                return self.choose(same)
            return self.ragged_arg(like)
        pool = self.floats(lambda t, f: t.is_seq and len(t.dims) == 3 and f.finite and f.mag <= 8)
        if pool and self.chance(0.5):
            return self.choose(pool)
        flat = self.floats(
            lambda t, f: (
                t.is_seq
                and len(t.dims) == 2
                and isinstance(t.dims[1], int)
                and t.dims[1] > 1
                and f.finite
                and f.mag <= 8
            )
        )
        if flat and self.chance(0.5):
            x = self.choose(flat)
            t = self.fn.type_of(x)
            total = t.dims[1]
            h = int(self.rng.choice([d for d in range(1, total + 1) if total % d == 0]))
            return self.add(
                "reshape",
                [x],
                {"dims": (h, total // h)},
                t.with_(dims=(t.dims[0], h, total // h)),
                facts=[self.facts[x]],
            )[0]
        t = self.layout_type("seq", self.dtype, trailing=(self.dim(1, 4, large=False), self.dim(1, 8)))
        return self.ragged_arg(t)

    def _scale(self, t: RType) -> float:
        d = t.dims[2].size if isinstance(t.dims[2], Dyn) else t.dims[2]
        return float(self.rng.choice([1.0 / math.sqrt(max(d, 1)), 0.35, 1.0]))

    def op_scores(self) -> bool:
        q = self.heads_value()
        t = self.fn.type_of(q)
        k = self.heads_value(t)
        fq, fk = self.facts[q], self.facts[k]
        d = t.dims[2].size if isinstance(t.dims[2], Dyn) else t.dims[2]
        scale = self._scale(t)
        causal = self.chance(0.5)
        mag = scale * max(d, 1) * fq.mag * fk.mag
        if mag > LIMIT[t.dtype]:
            return False
        out_t = t.with_(dims=(t.dims[0], t.dims[0], t.dims[1]))
        f = Facts(-math.inf if causal else -mag, mag, 0.0, causal)
        self.add("scores", [q, k], {"scale": scale, "causal": causal}, out_t, facts=[f])
        return True

    def op_apply(self) -> bool:
        pairs = self.floats(
            lambda t, f: (
                len(t.dims) == 3
                and isinstance(t.dims[0], Sym)
                and t.dims[0] == t.dims[1]
                and f.finite
                and not t.nested
            )
        )
        if pairs and self.chance(0.7):
            p = self.choose(pairs)
        else:  # softmax(scores(q, k)): attention weights
            if not self.op_scores():
                return False
            s = (len(self.fn.nodes) - 1, 0)
            p = self.add("softmax", [s], {}, self.fn.type_of(s), facts=[Facts(0.0, 1.0)])[0]
        pt = self.fn.type_of(p)
        d = self.dim(1, 6)
        vt = pt.with_(dims=(pt.dims[0], pt.dims[2], d))
        v = self.heads_value(vt)
        fp, fv = self.facts[p], self.facts[v]
        mag = self.cfg.long * fp.mag * fv.mag
        if mag > LIMIT[pt.dtype]:
            return False
        self.add("apply", [p, v], {}, vt, facts=[Facts(-mag, mag)])
        return True

    def op_attention(self) -> bool:
        q = self.heads_value()
        t = self.fn.type_of(q)
        k = self.heads_value(t)
        v = self.heads_value(t)
        scale = self._scale(t)
        causal = self.chance(0.5)
        fv = self.facts[v]
        self.add("attention", [q, k, v], {"scale": scale, "causal": causal}, t, facts=[Facts(fv.lo, fv.hi)])
        return True

    # -- the whole function --------------------------------------------------------
    def start(self, layout: str | None = None) -> None:
        layout = layout or self.pick(self.cfg.layouts)
        t = self.layout_type(layout, self.dtype)
        self.ragged_arg(t)
        if self.chance(0.3):
            self.ragged_arg(self.layout_type(self.pick(self.cfg.layouts), self.dtype))

    def outputs(self, return_all: bool) -> list[Ref]:
        refs = [(k, j) for k, n in enumerate(self.fn.nodes) if n.op != "arg" for j in range(len(n.types))]
        if return_all:
            return refs
        sinks = [r for r in refs if not self.used.get(r)]
        extra = [r for r in refs if self.used.get(r) and self.chance(0.2)]
        out = sorted(set(sinks + extra))
        return out[-6:]


def _numel(dims: tuple) -> int:
    return math.prod(d.size if isinstance(d, Dyn) else d for d in dims)


def _binary_facts(fn: str, f: Facts, g: Facts) -> Facts | None:
    if fn == "add":
        return _interval(f.lo + g.lo, f.hi + g.hi)
    if fn == "sub":
        return _interval(f.lo - g.hi, f.hi - g.lo)
    if fn == "mul":
        c = [f.lo * g.lo, f.lo * g.hi, f.hi * g.lo, f.hi * g.hi]
        out = _interval(min(c), max(c))
        return replace(out, amin=max(out.amin, f.amin * g.amin))
    if fn == "div":
        if g.amin < 0.25:
            return None
        m = f.mag / g.amin
        return Facts(-m, m, f.amin / g.mag if g.mag else 0.0)
    if fn == "max":
        return _interval(max(f.lo, g.lo), max(f.hi, g.hi))
    if fn == "min":
        return _interval(min(f.lo, g.lo), min(f.hi, g.hi))
    raise ValueError(fn)


def generate(
    seed: int,
    cfg: GenConfig | None = None,
    name: str | None = None,
    return_all: bool = False,
    layout: str | None = None,
) -> Function:
    """One random function (deterministic in ``seed`` and ``cfg``); its
    first argument has ``layout`` (one of LAYOUTS) when given. With
    ``return_all`` every intermediate result is an output."""
    if layout is not None and layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    cfg = cfg or GenConfig()
    rng = np.random.default_rng(seed)
    g = _Gen(cfg, rng, name or f"f{seed}")
    g.start(layout)
    n_ops = int(rng.integers(cfg.min_ops, cfg.max_ops + 1))
    done, tries = 0, 0
    while done < n_ops and tries < 10 * n_ops:
        tries += 1
        op = g.pick(cfg.ops)
        if getattr(g, f"op_{op}")():
            done += 1
    if done == 0:
        g.op_unary() or g.op_to_padded()
    g.fn.outputs = g.outputs(return_all)
    if cfg.p_frozen:
        frozen = []
        for pos, k in enumerate(g.fn.arg_nodes):
            t = g.fn.nodes[k].types[0]
            if (
                isinstance(t, TType)
                and t.static
                and g.fn.nodes[k].attrs["role"] == "dense"
                and g.chance(cfg.p_frozen)
            ):
                frozen.append(pos)
        g.fn.frozen = tuple(frozen)
    return g.fn
