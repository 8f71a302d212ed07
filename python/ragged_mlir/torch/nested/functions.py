"""The torch function table of :class:`~ragged_mlir.torch.nested_tensor.NestedTensor`.

:data:`FUNCTIONS` maps every torch callable the class supports (``torch.*``,
``torch.Tensor.*`` methods and operators, ``torch.nn.functional.*``,
``torch.special.*``) to a :class:`NestedFunction`: its handler and a short
category. ``NestedTensor.__torch_function__`` looks the callable up here, and
:func:`supported_functions` enumerates the table (the documentation is
generated from it).

Categories (:data:`CATEGORIES`):

* ``per-token``: elementwise functions (built from aten's ``pointwise`` tag,
  not listed by hand) and functions over static item dims: they run on the
  packed values and keep the offsets;
* ``reduction``: over any dims: static dims on the values, ragged dims through
  ``torch.ops.ragged.segment_reduce`` (and vectorized torch over the
  offsets), the batch dim eagerly on the padded view;
* ``ragged-dim``: shape-preserving functions along a ragged dim (softmax,
  cumulative sums, flips);
* ``view``: dims re-labelled or selected without compute;
* ``batch``: items concatenated, stacked or selected;
* ``attention``: scaled dot-product attention over the ragged dim;
* ``predicate``: returns a Python bool;
* ``factory``: a new NestedTensor of the same structure;
* ``per-item``: eager only; loops over the items on the host and raises under
  ``torch.compile``.

A dense tensor operand broadcasts against the logical shape: in the batch dim
it is 1 or B, in a ragged dim 1 or the maximum extent (a padded tensor, read at
the real positions), in the static dims as usual.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from .. import ops as _ops
from .tensor import NestedTensor, _is_compiling, _norm_dim, _prod

__all__ = ["CATEGORIES", "FUNCTIONS", "NestedFunction", "function_name", "supported_functions"]

CATEGORIES: dict[str, str] = {
    "per-token": "elementwise, or over static item dims: runs on the packed values, keeps the offsets",
    "reduction": "over any dims: static dims on the values, ragged dims through torch.ops.ragged.segment_reduce, "
    "the batch dim eagerly on the padded view",
    "ragged-dim": "shape-preserving along a ragged dim (softmax through torch.ops.ragged.segment_softmax, scans, "
    "flips)",
    "view": "re-labels or selects dims without compute",
    "batch": "concatenates, stacks or selects whole items",
    "attention": "scaled dot-product attention over the ragged dim (torch.ops.ragged.attention)",
    "predicate": "returns a Python bool",
    "factory": "a new NestedTensor with the same structure",
    "image": "convolution and pooling of [C, H(b), W(b)] images at their own sizes, packed "
    "(torch.ops.ragged.conv2d / pool2d); other layouts run per item, eagerly",
    "per-item": "eager only: loops over the items on the host (raises under torch.compile)",
}


@dataclass(frozen=True)
class NestedFunction:
    """One entry of the function table."""

    func: Callable
    name: str
    category: str
    handler: Callable[[Callable, tuple, dict], Any]
    note: str = ""
    inplace: bool = False
    short: str = ""


FUNCTIONS: dict[Callable, NestedFunction] = {}


def function_name(func: Callable) -> str:
    """A readable name of a torch callable (``torch.add``, ``torch.Tensor.add_``, ...)."""
    try:
        name = torch.overrides.resolve_name(func)
    except Exception:  # pragma: no cover - defensive
        name = None
    if name:
        return name
    qual = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    mod = getattr(func, "__module__", None)
    if qual and mod:
        return f"{mod}.{qual}"
    return qual or repr(func)


def supported_functions(category: str | None = None) -> list[NestedFunction]:
    """The table's entries (one per callable), sorted by name; optionally of one category."""
    if category is not None and category not in CATEGORIES:
        raise ValueError(f"category: expected one of {sorted(CATEGORIES)}, got {category!r}")
    out = [e for e in FUNCTIONS.values() if category is None or e.category == category]
    return sorted(out, key=lambda e: e.name)


def _register(funcs: Iterable[Callable | None], category: str, handler: Callable, note: str = "") -> None:
    for f in funcs:
        if f is None or f in FUNCTIONS:
            continue
        name = function_name(f)
        short = name.removeprefix("torch.nn.functional.").removeprefix("torch.")
        FUNCTIONS[f] = NestedFunction(f, name, category, handler, note, _inplace_name(f), short)


def _fname(func: Callable) -> str:
    """The short name of a registered callable (traceable)."""
    entry = lookup(func)
    return entry.short if entry is not None else "function"


# -- operands -------------------------------------------------------------------------------


def _first_nt(args: tuple, kwargs: dict) -> NestedTensor:
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, NestedTensor):
            return a
    raise TypeError("expected a NestedTensor argument")  # pragma: no cover - dispatch guarantees one


def _as_nested(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.is_nested:
        return NestedTensor.from_njt(x)
    return x


def _operand(ref: NestedTensor, x: Any, fname: str) -> Any:
    """``x`` as an operand of ``ref.values``."""
    x = _as_nested(x)
    if isinstance(x, NestedTensor):
        if x is not ref:
            ref._check_same_structure(x, fname)
        return x.values
    if isinstance(x, torch.Tensor):
        return ref._dense_operand(x, fname)
    return x


def _wrap(ref: NestedTensor, out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return ref._derive(out)
    if isinstance(out, tuple):
        items = [_wrap(ref, o) for o in out]
        return tuple(items) if type(out) is tuple else type(out)(items)
    if isinstance(out, list):
        return [_wrap(ref, o) for o in out]
    return out


def _inplace_name(func: Callable) -> bool:
    name = getattr(func, "__name__", "") or ""
    if name.startswith("__i") and name.endswith("__"):
        return True
    return name.endswith("_") and not name.endswith("__")


def _is_inplace(func: Callable, kwargs: dict) -> bool:
    """In-place variants are known when registered (a dict lookup: traceable)."""
    if kwargs.get("inplace", False) is True:
        return True
    entry = lookup(func)
    return entry is not None and entry.inplace


# -- per-token: elementwise ---------------------------------------------------------------------


def _pointwise(func: Callable, args: tuple, kwargs: dict) -> Any:
    fname = _fname(func)
    ref = _first_nt(args, kwargs)
    if _is_inplace(func, kwargs):
        target = args[0] if args else None
        if not isinstance(target, NestedTensor):
            raise TypeError(
                f"{fname}: an in-place op on a dense tensor cannot take a NestedTensor operand (the result "
                f"would be ragged); use the out-of-place form"
            )
        ref = target
    conv = tuple(_operand(ref, a, fname) for a in args)
    kconv = {k: _operand(ref, v, fname) for k, v in kwargs.items()}
    out = func(*conv, **kconv)
    if _is_inplace(func, kwargs):
        if isinstance(out, torch.Tensor) and out is not ref.values:
            ref.values = out
        return ref
    return _wrap(ref, out)


def _pointwise_callables() -> list[Callable]:
    names = set()
    # Every aten op the registry holds: ``dir(torch.ops.aten)`` lists only
    # the packets loaded so far, which depends on what was imported before.
    all_ops = {
        s.name.split("::", 1)[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::")
    }
    for name in sorted(all_ops):
        if name.startswith("_"):
            continue
        try:
            packet = getattr(torch.ops.aten, name)
        except Exception:  # pragma: no cover - defensive
            continue
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        try:
            tags = {t for ov in packet.overloads() for t in getattr(packet, ov).tags}
        except Exception:  # pragma: no cover - defensive
            continue
        if torch.Tag.pointwise in tags:
            names.add(name)
    # Reductions and selection share names with pointwise overloads; they have handlers of their own.
    # ``equal`` is tagged pointwise but returns a Python bool (a predicate).
    names -= {"max", "min", "clone", "equal"}
    names = {n for n in names if not n.endswith("_backward")}
    names |= {
        "zeros_like",
        "ones_like",
        "full_like",
        "empty_like",
        "rand_like",
        "randn_like",
        "randint_like",
        "isclose",
        "float_power",
        "dropout",
        "alpha_dropout",
        "feature_alpha_dropout",
        "dropout1d",
        "logsigmoid",
        "softsign",
        "tanhshrink",
        "hardswish",
        "rrelu",
        "fill_",
        "zero_",
        "copy_",
        "normal_",
        "uniform_",
        "bernoulli_",
        "exponential_",
        "cauchy_",
        "log_normal_",
        "geometric_",
        "random_",
        "type_as",
        "masked_fill",
        "sub",
        "subtract",
        "multiply",
        "divide",
        "true_divide",
        "floor_divide",
        "absolute",
        "negative",
        "arccos",
        "arcsin",
        "arctan",
        "arctan2",
        "arccosh",
        "arcsinh",
        "arctanh",
        "greater",
        "greater_equal",
        "less",
        "less_equal",
        "not_equal",
        "fix",
        "logical_not",
        "conj",
        "real",
        "imag",
        "sigmoid",
        "tanh",
        "relu",
        "square",
    }
    out: list[Callable] = []
    for name in sorted(names):
        cands = []
        for base in (name, name.removeprefix("special_")):
            cands += [getattr(torch, base, None), getattr(torch.special, base, None), getattr(F, base, None)]
            cands += [getattr(torch.Tensor, base, None)]
            if not base.endswith("_"):
                cands += [getattr(torch.Tensor, base + "_", None), getattr(torch, base + "_", None)]
        for c in cands:
            if c is not None and callable(c) and c not in out:
                out.append(c)
    dunders = [
        "add",
        "sub",
        "mul",
        "truediv",
        "div",
        "floordiv",
        "mod",
        "pow",
        "and",
        "or",
        "xor",
        "lshift",
        "rshift",
    ]
    for d in dunders:
        for form in (f"__{d}__", f"__r{d}__", f"__i{d}__"):
            c = getattr(torch.Tensor, form, None)
            if c is not None and c not in out:
                out.append(c)
    for form in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__neg__", "__pos__", "__abs__"):
        c = getattr(torch.Tensor, form, None)
        if c is not None and c not in out:
            out.append(c)
    c = getattr(torch.Tensor, "__invert__", None)
    if c is not None:
        out.append(c)
    # torch's Python-level operators (``Tensor.__rsub__``, ``__rpow__``, ...)
    # dispatch ``__torch_function__`` with their undecorated function; under
    # Dynamo ``nt - dense`` arrives as ``dense.__rsub__(nt)`` that way.
    for c in list(out):
        inner = getattr(c, "__wrapped__", None)
        if inner is not None and inner not in out:
            out.append(inner)
    return out


def _rtruediv(func: Callable, args: tuple, kwargs: dict) -> Any:
    # torch's ``__rdiv__`` multiplies by the reciprocal; divide, as ``a / b`` does eagerly.
    return _pointwise(torch.true_divide, (args[1], args[0]), kwargs)


_register(
    [torch.Tensor.__rtruediv__, getattr(torch.Tensor.__rtruediv__, "__wrapped__", None)],
    "per-token",
    _rtruediv,
)
_register(_pointwise_callables(), "per-token", _pointwise)


def _isin(func: Callable, args: tuple, kwargs: dict) -> Any:
    names = ("elements", "test_elements", "assume_unique", "invert")
    p = _bind("isin", args, kwargs, names, {"assume_unique": False, "invert": False})
    elements, test = _as_nested(p["elements"]), _as_nested(p["test_elements"])
    if isinstance(test, NestedTensor):
        raise NotImplementedError(
            "isin: test_elements must be a dense tensor or a scalar, got a NestedTensor"
        )
    if not isinstance(elements, NestedTensor):
        raise TypeError(f"isin: expected elements to be a NestedTensor, got {type(elements).__name__}")
    out = torch.isin(elements.values, test, assume_unique=p["assume_unique"], invert=p["invert"])
    return elements._derive(out)


_register([torch.isin], "per-token", _isin)


# -- argument binding -----------------------------------------------------------------------------


_MISSING = object()


def _bind(fname: str, args: tuple, kwargs: dict, names: tuple, defaults: dict) -> dict:
    out: dict[str, Any] = {}
    if len(args) > len(names):
        raise TypeError(f"{fname}: takes at most {len(names)} positional arguments, got {len(args)}")
    for n, a in zip(names, args, strict=False):
        out[n] = a
    for k, v in kwargs.items():
        if k in out:
            raise TypeError(f"{fname}: got multiple values for argument {k!r}")
        if k not in names:
            raise TypeError(f"{fname}: got an unexpected keyword argument {k!r}")
        out[k] = v
    for n in names:
        if n not in out:
            if n not in defaults:
                raise TypeError(f"{fname}: missing required argument {n!r}")
            out[n] = defaults[n]
    return out


def _dims(dim: Any) -> list[int] | None:
    if dim is None:
        return None
    if isinstance(dim, (tuple, list, torch.Size)):
        return [int(d) for d in dim]
    return [int(dim)]


# -- reductions -------------------------------------------------------------------------------------

_ELEMENTWISE_REDUCE = {
    "sum",
    "mean",
    "amax",
    "amin",
    "prod",
    "all",
    "any",
    "count_nonzero",
    "nansum",
    "nanmean",
    "std",
    "var",
    "logsumexp",
    "norm",
}
_INDEXED = {"max", "min", "argmax", "argmin"}


def _torch_reduce(t: torch.Tensor, kind: str, dims: list[int] | None, keepdim: bool, opts: dict) -> Any:
    """``kind`` over ``dims`` of a dense tensor (torch semantics)."""
    if kind in ("sum", "nansum", "mean", "nanmean"):
        fn = getattr(torch, kind)
        if dims is None:
            return fn(t, dtype=opts.get("dtype"))
        return fn(t, dim=dims, keepdim=keepdim, dtype=opts.get("dtype"))
    if kind in ("amax", "amin"):
        return getattr(torch, kind)(t, dim=dims if dims is not None else (), keepdim=keepdim)
    if kind == "prod":
        if dims is None:
            return torch.prod(t, dtype=opts.get("dtype"))
        out = t if opts.get("dtype") is None else t.to(opts["dtype"])
        for d in sorted(dims, reverse=True):
            out = torch.prod(out, dim=d, keepdim=keepdim)
        return out
    if kind in ("all", "any"):
        if dims is None:
            return getattr(torch, kind)(t)
        return getattr(torch, kind)(t, dim=tuple(dims), keepdim=keepdim)
    if kind == "count_nonzero":
        return torch.count_nonzero(t, dim=dims)
    if kind in ("std", "var"):
        return getattr(torch, kind)(t, dim=dims, correction=opts.get("correction", 1), keepdim=keepdim)
    if kind == "logsumexp":
        return torch.logsumexp(t, dim=dims if dims is not None else list(range(t.dim())), keepdim=keepdim)
    if kind == "norm":
        return torch.linalg.vector_norm(
            t, ord=opts.get("p", 2), dim=dims, keepdim=keepdim, dtype=opts.get("dtype")
        )
    if kind in ("max", "min"):
        if dims is None:
            return getattr(torch, kind)(t)
        return getattr(torch, kind)(t, dim=dims[0], keepdim=keepdim)
    if kind in ("argmax", "argmin"):
        return getattr(torch, kind)(t, dim=None if dims is None else dims[0], keepdim=keepdim)
    raise AssertionError(kind)  # pragma: no cover


def _scatter(kind: str, v: torch.Tensor, ids: torch.Tensor, b: Any, init: Any) -> torch.Tensor:
    out = v.new_full((b,) + tuple(v.shape[1:]), init)
    index = ids.view((-1,) + (1,) * (v.dim() - 1)).expand_as(v)
    return out.scatter_reduce_(0, index, v, reduce=kind, include_self=True)


def _segment(kind: str, v: torch.Tensor, offsets: torch.Tensor, opts: dict) -> Any:
    """``kind`` over each segment of rows of ``v`` ``[R, ...]`` -> ``[B, ...]``.

    Floating sums, means and extrema go through ``torch.ops.ragged.segment_reduce``
    (empty segments: 0, 0, -inf, +inf); the other kinds are composed from it
    or use vectorized torch over the segment ids."""
    b = offsets.shape[0] - 1
    rows = v.shape[0]
    floating = v.dtype.is_floating_point
    seg = torch.ops.ragged.segment_reduce
    if kind in ("sum", "mean", "amax", "amin") and floating:
        k = {"amax": "max", "amin": "min"}.get(kind, kind)
        empty = float("-inf") if k == "max" else float("inf") if k == "min" else 0.0
        return seg(v, offsets, k, empty)
    ids = _ops.segment_ids(offsets, rows)
    if kind == "sum":
        acc = v if v.dtype != torch.bool else v.to(torch.int64)
        return acc.new_zeros((b,) + tuple(acc.shape[1:])).index_add_(0, ids, acc)
    if kind == "mean":
        raise RuntimeError(
            f"mean(): could not infer output dtype. Input dtype must be floating, got {v.dtype}"
        )
    if kind in ("amax", "amin"):
        if v.dtype == torch.bool:
            return _scatter(kind, v.to(torch.uint8), ids, b, 0 if kind == "amax" else 1).to(torch.bool)
        info = torch.iinfo(v.dtype)
        return _scatter(kind, v, ids, b, info.min if kind == "amax" else info.max)
    if kind == "prod":
        acc = v if v.dtype != torch.bool else v.to(torch.int64)
        return _scatter("prod", acc, ids, b, 1)
    if kind in ("all", "any"):
        u = (v != 0).to(torch.uint8)
        return _scatter("amin" if kind == "all" else "amax", u, ids, b, 1 if kind == "all" else 0).to(
            torch.bool
        )
    if kind == "count_nonzero":
        return _segment("sum", (v != 0).to(torch.int64), offsets, opts)
    if kind == "nansum":
        return _segment("sum", torch.where(torch.isnan(v), torch.zeros_like(v), v), offsets, opts)
    if kind == "nanmean":
        s = _segment("sum", torch.where(torch.isnan(v), torch.zeros_like(v), v), offsets, opts)
        n = _segment("sum", (~torch.isnan(v)).to(v.dtype), offsets, opts)
        return s / n
    if kind in ("var", "std"):
        correction = opts.get("correction", 1)
        mu = seg(v, offsets, "mean", 0.0)
        dev = v - mu[ids]
        ss = seg(dev * dev, offsets, "sum", 0.0)
        n = (offsets[1:] - offsets[:-1]).to(v.dtype).view((-1,) + (1,) * (v.dim() - 1))
        denom = n - correction
        var = torch.where(denom > 0, ss / denom.clamp_min(1e-30), torch.full_like(ss, float("nan")))
        return var.sqrt() if kind == "std" else var
    if kind == "logsumexp":
        m = seg(v, offsets, "max", float("-inf"))
        safe = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        s = seg(torch.exp(v - safe[ids]), offsets, "sum", 0.0)
        return torch.log(s) + safe
    if kind == "norm":
        p = opts.get("p", 2)
        p = 2 if p in ("fro", None) else p
        a = v.abs()
        if p == float("inf"):
            return seg(a, offsets, "max", 0.0)
        if p == 0:
            return _segment("sum", (v != 0).to(v.dtype), offsets, opts)
        return seg(a.pow(p), offsets, "sum", 0.0).pow(1.0 / p)
    if kind in _INDEXED:
        ext = "amax" if kind in ("max", "argmax") else "amin"
        m = _segment(ext, v, offsets, opts)
        pos = (torch.arange(rows, device=v.device) - offsets[ids]).view((-1,) + (1,) * (v.dim() - 1))
        big = torch.iinfo(torch.int64).max
        cand = torch.where(v == m[ids], pos.expand_as(v), torch.full_like(v, big, dtype=torch.int64))
        idx = _scatter("amin", cand, ids, b, big)
        idx = torch.where(idx == big, torch.zeros_like(idx), idx)
        if kind in ("argmax", "argmin"):
            return idx
        return m, idx
    raise AssertionError(kind)  # pragma: no cover


def reduce(nt: NestedTensor, kind: str, dim: Any, keepdim: bool, fname: str, **opts: Any) -> Any:
    """``kind`` over logical ``dim`` (None: every element) of ``nt``."""
    dtype = opts.get("dtype")
    values = nt.values
    dims = _dims(dim)
    if dims is None or (not dims and kind in ("sum", "mean", "nansum", "nanmean", "amax", "amin")):
        if kind in _INDEXED and kind in ("argmax", "argmin"):
            return _reduce_with_batch(nt, kind, list(range(nt.dim())), keepdim, fname, opts)
        out = _torch_reduce(values, kind, None, False, opts)
        if keepdim and isinstance(out, torch.Tensor):
            out = out.reshape((1,) * nt.dim())
        return out
    n = nt.dim()
    dims = sorted({_norm_dim(d, n, fname) for d in dims})
    if kind in _INDEXED and len(dims) != 1:
        raise ValueError(f"{fname}: dim must be a single int, got {dim}")
    items = [nt._item_dim(d, fname) for d in dims]
    if None in items:
        return _reduce_with_batch(nt, kind, dims, keepdim, fname, opts)
    rag = [i for i in items if i in nt._ragged]
    sta = [i for i in items if i not in nt._ragged]
    if not rag:
        vdims = [nt._value_dim(i) for i in sta]
        out = _torch_reduce(values, kind, vdims, keepdim, opts)
        if keepdim and kind != "count_nonzero":
            ragged = nt._ragged
        else:
            ragged = tuple(r - sum(1 for i in sta if i < r) for r in nt._ragged)
        if isinstance(out, tuple):
            return type(out)([nt._derive(o, ragged=ragged) for o in out])
        return nt._derive(out, ragged=ragged)
    if len(rag) != len(nt._ragged) or (kind in _INDEXED and (sta or len(nt._ragged) != 1)):
        item_dims = items

        def per_item(t: torch.Tensor) -> torch.Tensor:
            r = _torch_reduce(t, kind, item_dims, keepdim, opts)
            return r[0] if isinstance(r, tuple) else r

        if kind in _INDEXED and kind in ("max", "min"):
            vals = nt._per_item(per_item, fname)
            idx = nt._per_item(lambda t: _torch_reduce(t, kind, item_dims, keepdim, opts)[1], fname)
            return getattr(torch.return_types, kind)((vals, idx))
        return nt._per_item(per_item, fname)
    # Every ragged dim reduced (and maybe static dims): segments of rows.
    vdims = [nt._value_dim(i) for i in sta]
    k = _prod([values.shape[d] for d in vdims])
    v = values if dtype is None or kind in ("norm",) else values.to(dtype)
    if vdims:
        v = v.movedim(vdims, list(range(1, 1 + len(vdims))))
        v = v.reshape((-1,) + tuple(v.shape[1 + len(vdims) :]))
    offsets = nt.offsets if not vdims else nt.offsets * k
    out = _segment(kind, v, offsets, opts)
    if isinstance(out, tuple):
        res = [_dense_result(nt, o, items, keepdim) for o in out]
        return getattr(torch.return_types, kind)(res)
    return _dense_result(nt, out, items, keepdim and kind != "count_nonzero")


def _dense_result(nt: NestedTensor, out: torch.Tensor, reduced: list[int], keepdim: bool) -> torch.Tensor:
    """``[B, kept static dims...]`` -> the logical layout of the reduction's result."""
    rank = nt._item_rank()
    if keepdim:
        shape = [out.shape[0]]
        k = 1
        for d in range(rank):
            if d in reduced:
                shape.append(1)
            else:
                shape.append(out.shape[k])
                k += 1
        out = out.reshape(shape)
        if not nt.batch_first and rank >= 1:
            out = out.movedim(0, 1)
        return out
    if not nt.batch_first and rank >= 1 and 0 not in reduced:
        out = out.movedim(0, 1)
    return out


_IDENTITY = {
    "sum": 0,
    "nansum": 0,
    "prod": 1,
    "all": True,
    "any": False,
    "count_nonzero": 0,
}


def _reduce_with_batch(
    nt: NestedTensor, kind: str, dims: list[int], keepdim: bool, fname: str, opts: dict
) -> Any:
    """Reductions that include the batch dim: over the padded view, padding
    excluded (eager: the padded view needs the maximum extents)."""
    if kind in ("amax", "amin", "max", "min", "argmax", "argmin"):
        big = kind in ("amax", "max", "argmax")
        if nt.dtype.is_floating_point:
            fill: Any = float("-inf") if big else float("inf")
        elif nt.dtype == torch.bool:
            fill = not big
        else:
            info = torch.iinfo(nt.dtype)
            fill = info.min if big else info.max
    elif kind in _IDENTITY:
        fill = _IDENTITY[kind]
    elif kind in ("mean", "nanmean"):
        fill = 0
    else:
        raise NotImplementedError(
            f"{fname}: {kind} over the batch dim is not supported for a NestedTensor; reduce the items' dims, "
            f"or use .tensor/.mask"
        )
    padded = nt._physical_to_logical(nt._padded_physical(fill))
    if kind in ("mean", "nanmean"):
        vals = (
            padded if kind == "mean" else torch.where(torch.isnan(padded), torch.zeros_like(padded), padded)
        )
        real = nt._real_mask()
        if kind == "nanmean":
            real = real & ~torch.isnan(padded)
        s = torch.sum(vals, dim=dims, keepdim=keepdim, dtype=opts.get("dtype"))
        c = torch.sum(real.to(s.dtype), dim=dims, keepdim=keepdim)
        return s / c
    return _torch_reduce(padded, kind, dims, keepdim, opts)


def _reduction_handler(kind: str) -> Callable:
    def handler(func: Callable, args: tuple, kwargs: dict) -> Any:
        fname = _fname(func)
        if kind in ("max", "min") and (
            len(args) > 1 and isinstance(args[1], (torch.Tensor, NestedTensor)) or "other" in kwargs
        ):
            return _pointwise(
                getattr(torch, "maximum" if kind == "max" else "minimum"), args[:1] + args[1:2], {}
            )
        opts: dict[str, Any] = {}
        if kind in ("sum", "mean", "nansum", "nanmean"):
            p = _bind(
                fname,
                args,
                kwargs,
                ("input", "dim", "keepdim", "dtype", "out"),
                {"dim": None, "keepdim": False, "dtype": None, "out": None},
            )
            opts["dtype"] = p["dtype"]
        elif kind == "prod":
            p = _bind(
                fname,
                args,
                kwargs,
                ("input", "dim", "keepdim", "dtype", "out"),
                {"dim": None, "keepdim": False, "dtype": None, "out": None},
            )
            opts["dtype"] = p["dtype"]
        elif kind in ("std", "var"):
            p = _bind(
                fname,
                args,
                kwargs,
                ("input", "dim", "unbiased", "keepdim", "correction", "out"),
                {"dim": None, "unbiased": None, "keepdim": False, "correction": None, "out": None},
            )
            if isinstance(p["dim"], bool):  # std(input, unbiased)
                p["unbiased"], p["dim"] = p["dim"], None
            c = p["correction"]
            if c is None:
                c = 1 if p["unbiased"] in (None, True) else 0
            opts["correction"] = c
        elif kind == "norm":
            p = _bind(
                fname,
                args,
                kwargs,
                ("input", "p", "dim", "keepdim", "out", "dtype"),
                {"p": "fro", "dim": None, "keepdim": False, "out": None, "dtype": None},
            )
            opts["p"], opts["dtype"] = p["p"], p["dtype"]
        elif kind == "count_nonzero":
            p = _bind(fname, args, kwargs, ("input", "dim"), {"dim": None})
            p["keepdim"], p["out"] = False, None
        else:
            p = _bind(
                fname,
                args,
                kwargs,
                ("input", "dim", "keepdim", "out"),
                {"dim": None, "keepdim": False, "out": None},
            )
        if p["out"] is not None:
            raise NotImplementedError(f"{fname}: out= is not supported for NestedTensor")
        nt = _as_nested(p["input"])
        if not isinstance(nt, NestedTensor):
            raise TypeError(f"{fname}: expected input to be a NestedTensor, got {type(nt).__name__}")
        if isinstance(p["dim"], bool):
            raise TypeError(f"{fname}: dim must be an int or a tuple of ints, got {p['dim']!r}")
        return reduce(nt, kind, p["dim"], bool(p["keepdim"]), fname, **opts)

    return handler


_REDUCTIONS = {
    "sum": ["sum"],
    "mean": ["mean"],
    "nansum": ["nansum"],
    "nanmean": ["nanmean"],
    "prod": ["prod"],
    "amax": ["amax"],
    "amin": ["amin"],
    "max": ["max"],
    "min": ["min"],
    "argmax": ["argmax"],
    "argmin": ["argmin"],
    "all": ["all"],
    "any": ["any"],
    "std": ["std"],
    "var": ["var"],
    "logsumexp": ["logsumexp"],
    "norm": ["norm"],
    "count_nonzero": ["count_nonzero"],
}
for _kind, _names in _REDUCTIONS.items():
    _fns = []
    for _n in _names:
        _fns += [getattr(torch, _n, None), getattr(torch.Tensor, _n, None)]
    _register(_fns, "reduction", _reduction_handler(_kind))
_register([torch.linalg.vector_norm], "reduction", lambda f, a, k: _vector_norm(a, k))


def _vector_norm(args: tuple, kwargs: dict) -> Any:
    p = _bind(
        "linalg.vector_norm",
        args,
        kwargs,
        ("x", "ord", "dim", "keepdim", "dtype", "out"),
        {"ord": 2, "dim": None, "keepdim": False, "dtype": None, "out": None},
    )
    nt = p["x"]
    return reduce(
        nt, "norm", p["dim"], bool(p["keepdim"]), "linalg.vector_norm", p=p["ord"], dtype=p["dtype"]
    )


# -- along a dim: softmax, scans, flips, per-token dim ops -----------------------------------------------


def _softmax_handler(kind: str) -> Callable:
    def handler(func: Callable, args: tuple, kwargs: dict) -> Any:
        fname = _fname(func)
        if func in (F.softmax, F.log_softmax, F.softmin):
            p = _bind(
                fname,
                args,
                kwargs,
                ("input", "dim", "_stacklevel", "dtype"),
                {"dim": None, "_stacklevel": 3, "dtype": None},
            )
        else:
            p = _bind(fname, args, kwargs, ("input", "dim", "dtype"), {"dtype": None})
        nt = _as_nested(p["input"])
        if p["dim"] is None:
            raise ValueError(
                f"{fname}: give dim explicitly for a NestedTensor (e.g. 1 = the ragged dim of [B, L, d])"
            )
        return softmax(nt, kind, p["dim"], p["dtype"], fname)

    return handler


def softmax(nt: NestedTensor, kind: str, dim: int, dtype: Any, fname: str) -> NestedTensor:
    values = nt.values if dtype is None else nt.values.to(dtype)
    item = nt._item_dim(dim, fname)
    if item is None:
        raise ValueError(
            f"{fname}: Cannot translate the batch dimension for NestedTensor (dim {dim} is the batch dim)"
        )
    if item not in nt._ragged:
        vd = nt._value_dim(item)
        fn = {"softmax": torch.softmax, "log_softmax": torch.log_softmax}.get(kind)
        if kind == "softmin":
            return nt._derive(torch.softmax(-values, vd))
        return nt._derive(fn(values, vd))  # type: ignore[misc]
    if len(nt._ragged) != 1:
        sub = {"softmax": torch.softmax, "log_softmax": torch.log_softmax}.get(kind)
        if kind == "softmin":
            return nt._per_item(lambda t: torch.softmax(-t.to(values.dtype), item), fname)
        return nt._per_item(lambda t: sub(t.to(values.dtype), item), fname)  # type: ignore[misc]
    if kind == "softmin":
        values = -values
    if kind == "log_softmax":
        lse = _segment("logsumexp", values, nt.offsets, {})
        ids = _ops.segment_ids(nt.offsets, values.shape[0])
        return nt._derive(values - lse[ids])
    if not values.dtype.is_floating_point:
        raise RuntimeError(f"{fname}: expected a floating point NestedTensor, got {values.dtype}")
    return nt._derive(torch.ops.ragged.segment_softmax(values, nt.offsets))


_register(
    [torch.softmax, torch.Tensor.softmax, F.softmax, torch.special.softmax],
    "ragged-dim",
    _softmax_handler("softmax"),
)
_register(
    [torch.log_softmax, torch.Tensor.log_softmax, F.log_softmax, torch.special.log_softmax],
    "ragged-dim",
    _softmax_handler("log_softmax"),
)
_register([F.softmin], "ragged-dim", _softmax_handler("softmin"))


def _scan_handler(kind: str) -> Callable:
    def handler(func: Callable, args: tuple, kwargs: dict) -> Any:
        fname = _fname(func)
        p = _bind(fname, args, kwargs, ("input", "dim", "dtype", "out"), {"dtype": None, "out": None})
        if p["out"] is not None:
            raise NotImplementedError(f"{fname}: out= is not supported for NestedTensor")
        nt = _as_nested(p["input"])
        values = nt.values if p["dtype"] is None else nt.values.to(p["dtype"])
        fn = getattr(torch, kind)
        item = nt._item_dim(p["dim"], fname)
        if item is None:
            raise ValueError(f"{fname}: cannot scan over the batch dim of a NestedTensor")
        if item not in nt._ragged:
            return nt._derive(fn(values, nt._value_dim(item)))
        if len(nt._ragged) != 1:
            return nt._per_item(lambda t: fn(t.to(values.dtype), item), fname)
        # One segmented scan: the rows of every item in a padded slab (so no
        # value crosses from one item into the next), scanned, read back.
        ident = {"cumsum": 0, "cumprod": 1, "logcumsumexp": float("-inf")}[kind]
        padded = nt._padded_physical(ident, values)
        scanned = fn(padded, 1)
        ids, coords = nt._row_coords()
        return nt._derive(scanned[ids, coords[0]])

    return handler


_register([torch.cumsum, torch.Tensor.cumsum], "ragged-dim", _scan_handler("cumsum"))
_register([torch.cumprod, torch.Tensor.cumprod], "ragged-dim", _scan_handler("cumprod"))
_register([torch.logcumsumexp, torch.Tensor.logcumsumexp], "ragged-dim", _scan_handler("logcumsumexp"))


def _flip(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind("flip", args, kwargs, ("input", "dims"), {})
    nt = _as_nested(p["input"])
    dims = _dims(p["dims"]) or []
    items = [nt._item_dim(d, "flip") for d in dims]
    if None in items:
        raise ValueError("flip: cannot flip the batch dim of a NestedTensor; index it with nt[::-1]")
    values = nt.values
    rag = [i for i in items if i in nt._ragged]
    if rag:
        if len(nt._ragged) != 1:
            return nt._per_item(lambda t: torch.flip(t, items), "flip")
        ids, coords = nt._row_coords()
        src = nt.offsets[ids] + (nt.lengths[ids] - 1 - coords[0])
        values = values.index_select(0, src)
    vd = [nt._value_dim(i) for i in items if i not in nt._ragged]
    if vd:
        values = torch.flip(values, vd)
    return nt._derive(values)


_register([torch.flip, torch.Tensor.flip], "ragged-dim", _flip)


def _dim_op(dim_name: str, dim_pos: int, default: Any = _MISSING, dense: str = "operand") -> Callable:
    """Functions of one NestedTensor along a static dim (given as ``dim_name``
    at position ``dim_pos``); along a ragged dim they run per item (eager).
    Dense tensor arguments broadcast against the NestedTensor
    (``dense="operand"``) or pass unchanged (``"pass"``, e.g. an index)."""

    def handler(func: Callable, args: tuple, kwargs: dict) -> Any:
        fname = _fname(func)
        args = list(args)
        kwargs = dict(kwargs)
        if dim_name in kwargs:
            dim = kwargs[dim_name]
        elif len(args) > dim_pos:
            dim = args[dim_pos]
        elif default is not _MISSING:
            dim = default
            kwargs[dim_name] = dim
        else:
            raise TypeError(f"{fname}: missing argument {dim_name!r}")
        ref = _first_nt(tuple(args), kwargs)
        many = isinstance(dim, (tuple, list))
        dims = list(dim) if many else [dim]
        items = [ref._item_dim(d, fname) for d in dims]
        if None in items:
            raise ValueError(f"{fname}: cannot apply along the batch dim of a NestedTensor")
        if any(i in ref._ragged for i in items):
            return _per_item_fn(((dim_name, dim_pos),))(func, tuple(args), kwargs)
        vdims = [ref._value_dim(i) for i in items]
        newdim = tuple(vdims) if many else vdims[0]

        def conv(a: Any) -> Any:
            if dense == "pass" and isinstance(a, torch.Tensor) and not a.is_nested:
                return a
            return _operand(ref, a, fname)

        a2 = [conv(a) for a in args]
        k2 = {k: conv(v) for k, v in kwargs.items()}
        if dim_name in k2:
            k2[dim_name] = newdim
        elif len(a2) > dim_pos:
            a2[dim_pos] = newdim
        else:
            k2[dim_name] = newdim
        out = func(*a2, **k2)
        return _wrap_dim_result(ref, out, items)

    return handler


def _wrap_dim_result(ref: NestedTensor, out: Any, items: list[int]) -> Any:
    if isinstance(out, tuple):
        res = [_wrap_dim_result(ref, o, items) for o in out]
        return tuple(res) if type(out) is tuple else type(out)(res)
    if not isinstance(out, torch.Tensor):
        return out
    lost = ref.values.dim() - out.dim()
    ragged = ref._ragged
    if lost == len(items) and lost > 0:
        ragged = tuple(r - sum(1 for i in items if i < r) for r in ragged)
    return ref._derive(out, ragged=ragged)


_register([torch.sort, torch.Tensor.sort], "per-token", _dim_op("dim", 1, -1))
_register([torch.argsort, torch.Tensor.argsort], "per-token", _dim_op("dim", 1, -1))
_register([torch.topk, torch.Tensor.topk], "per-token", _dim_op("dim", 2, -1))
_register([torch.diff, torch.Tensor.diff], "per-token", _dim_op("dim", 2, -1))


def _roll(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind("roll", args, kwargs, ("input", "shifts", "dims"), {"dims": None})
    if p["dims"] is None:  # over the flattened item, like torch on one tensor
        return _per_item_fn()(func, (p["input"], p["shifts"]), {})
    return _dim_op("dims", 2)(func, (p["input"], p["shifts"], p["dims"]), {})


_register([torch.roll, torch.Tensor.roll], "per-token", _roll)
_register([F.normalize], "per-token", _dim_op("dim", 2, 1))
_register([F.glu], "per-token", _dim_op("dim", 1, -1))
_register([F.cosine_similarity], "per-token", _dim_op("dim", 2, 1))
_register(
    [torch.cummax, torch.Tensor.cummax, torch.cummin, torch.Tensor.cummin], "per-token", _dim_op("dim", 1)
)


def _index_select(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind("index_select", args, kwargs, ("input", "dim", "index"), {})
    nt = _as_nested(p["input"])
    if nt._item_dim(p["dim"], "index_select") is None:
        return nt[p["index"]]  # items
    return _dim_op("dim", 1, dense="pass")(func, (nt, p["dim"], p["index"]), {})


_register([torch.index_select, torch.Tensor.index_select], "per-token", _index_select)


# -- per item (eager): linear algebra, order statistics, search ------------------------------------


def _per_item_fn(
    dims: tuple[tuple[str, int], ...] = (), reduces: bool = False, whole: bool = True
) -> Callable:
    """Functions applied to every item on the host (DanLing's per-element
    fallback): NestedTensor arguments are taken item by item, dense ones as
    they are; the logical dims named by ``dims`` (name, position) become item
    dims. Results are NestedTensors of the per-item results; when ``reduces``
    and the call reduced every ragged dim, a dense ``[B, ...]`` tensor; when
    ``reduces`` and ``whole`` and no dim is given, the function of all the
    elements."""

    def handler(func: Callable, args: tuple, kwargs: dict) -> Any:
        fname = _fname(func)
        args = [_as_nested(a) for a in args]
        kwargs = {k: _as_nested(v) for k, v in kwargs.items()}
        ref = _first_nt(tuple(args), kwargs)
        nts = [a for a in list(args) + list(kwargs.values()) if isinstance(a, NestedTensor)]
        for other in nts:
            if len(other) != len(ref):
                raise ValueError(
                    f"{fname}: NestedTensor arguments have different batch sizes ({len(ref)} and {len(other)})"
                )
        touched: list[int] = []
        for name, pos in dims:
            where = "kw" if name in kwargs else ("pos" if pos < len(args) else None)
            if where is None:
                continue
            value = kwargs[name] if where == "kw" else args[pos]
            if value is None:
                continue
            many = isinstance(value, (tuple, list))
            items = [ref._item_dim(d, fname) for d in (value if many else [value])]
            if None in items:
                raise ValueError(f"{fname}: {name}={value} is the batch dim of the NestedTensor")
            touched += items  # type: ignore[arg-type]
            new = tuple(items) if many else items[0]
            if where == "kw":
                kwargs[name] = new
            else:
                args[pos] = new
        if reduces and whole and not touched:
            # No dim: over every element, like torch on a dense tensor.
            a2 = [a.values if isinstance(a, NestedTensor) else a for a in args]
            k2 = {k: (v.values if isinstance(v, NestedTensor) else v) for k, v in kwargs.items()}
            return func(*a2, **k2)
        if _is_compiling():
            raise NotImplementedError(
                f"{fname}: runs item by item on the host and is not traceable; call it outside torch.compile"
            )
        outs = []
        for b in range(len(ref)):
            a2 = [a._item(b) if isinstance(a, NestedTensor) else a for a in args]
            k2 = {k: (v._item(b) if isinstance(v, NestedTensor) else v) for k, v in kwargs.items()}
            outs.append(func(*a2, **k2))
        dense = reduces and bool(ref.ragged_dims) and all(r in touched for r in ref.ragged_dims)
        if not outs:
            return ref._empty()
        if isinstance(outs[0], tuple):
            fields = [_collect(ref, [o[i] for o in outs], dense) for i in range(len(outs[0]))]
            return tuple(fields) if type(outs[0]) is tuple else type(outs[0])(fields)
        return _collect(ref, outs, dense)

    return handler


def _collect(ref: NestedTensor, outs: list, dense: bool) -> Any:
    if not all(isinstance(o, torch.Tensor) for o in outs):
        return outs
    if dense and all(o.shape == outs[0].shape for o in outs):
        return torch.stack(outs)
    return type(ref)(outs, **ref._state())


_PER_ITEM_PLAIN = [
    torch.det,
    torch.logdet,
    torch.slogdet,
    torch.inverse,
    torch.trace,
    torch.triu,
    torch.tril,
    torch.diag,
    torch.diagflat,
    torch.matrix_power,
    torch.matrix_exp,
    torch.mv,
    torch.dot,
    torch.vdot,
    torch.inner,
    torch.outer,
    torch.ger,
    torch.kron,
    torch.nonzero,
    torch.searchsorted,
    torch.bucketize,
    torch.linalg.det,
    torch.linalg.slogdet,
    torch.linalg.inv,
    torch.linalg.solve,
    torch.linalg.cholesky,
    torch.linalg.qr,
    torch.linalg.svd,
    torch.linalg.svdvals,
    torch.linalg.eigh,
    torch.linalg.eigvalsh,
    torch.linalg.pinv,
    torch.linalg.matrix_exp,
    torch.linalg.matrix_power,
]
for _f in list(_PER_ITEM_PLAIN):
    _m = getattr(torch.Tensor, getattr(_f, "__name__", ""), None)
    if _m is not None and not getattr(_f, "__module__", "").startswith("torch.linalg"):
        _PER_ITEM_PLAIN.append(_m)
_register(_PER_ITEM_PLAIN, "per-item", _per_item_fn())
_register([torch.diagonal, torch.Tensor.diagonal], "per-item", _per_item_fn((("dim1", 2), ("dim2", 3))))
_register([torch.rot90, torch.Tensor.rot90], "per-item", _per_item_fn((("dims", 2),)))
_register([torch.gather, torch.Tensor.gather], "per-item", _per_item_fn((("dim", 1),)))
_register([torch.take_along_dim, torch.Tensor.take_along_dim], "per-item", _per_item_fn((("dim", 2),)))
_register(
    [torch.linalg.norm, torch.linalg.matrix_norm],
    "per-item",
    _per_item_fn((("dim", 2),), reduces=True, whole=False),
)
for _f, _spec in (
    ("kthvalue", (("dim", 2),)),
    ("median", (("dim", 1),)),
    ("nanmedian", (("dim", 1),)),
    ("mode", (("dim", 1),)),
    ("quantile", (("dim", 2),)),
    ("nanquantile", (("dim", 2),)),
    ("aminmax", (("dim", 99),)),
    ("var_mean", (("dim", 1),)),
    ("std_mean", (("dim", 1),)),
):
    _fns = [getattr(torch, _f, None), getattr(torch.Tensor, _f, None)]
    _register(_fns, "per-item", _per_item_fn(_spec, reduces=True))


# -- images: [C, H(b), W(b)] items, packed channels-last -------------------------------------


def _is_image(x: Any) -> bool:
    return isinstance(x, NestedTensor) and x._ragged == (1, 2) and x._item_rank() == 3


def _is_regular_image(x: Any) -> bool:
    """Images that all have one size: DanLing's default layout then makes the
    channel dim the ragged one (values ``[sum C(b), H, W]``)."""
    return isinstance(x, NestedTensor) and x._ragged == (0,) and x._item_rank() == 3


def _regular_batch(nt: NestedTensor, channels: int, fname: str) -> torch.Tensor:
    """The dense ``[B, C, H, W]`` batch of images of one size."""
    if not _is_compiling():
        counts = nt.offsets[1:] - nt.offsets[:-1]
        if bool((counts != channels).any()):
            raise ValueError(f"{fname}: expected images of {channels} channels, got {counts.tolist()}")
    return nt.values.reshape(-1, channels, *nt.values.shape[1:])


def _compiled_training(*tensors: Any) -> bool:
    """A traced convolution whose gradient is needed: images of one size then
    take the packed path too, whose gradient compiles (the dense
    convolution's backward does not lower under dynamic shapes)."""
    return (
        _is_compiling()
        and torch.is_grad_enabled()
        and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)
    )


def _from_regular(nt: NestedTensor, y: torch.Tensor, channels: int | None = None) -> NestedTensor:
    """Images of one size ``[B, C, Ho, Wo]`` as an image NestedTensor
    (channels-last values, ragged dims (1, 2)); ``channels``, where given,
    is C as a plain int (traced shapes may carry it as an expression)."""
    b, c, h, w = y.shape
    c = c if channels is None else channels
    steps = torch.arange(b + 1, device=y.device, dtype=torch.int64)
    values = y.permute(0, 2, 3, 1).reshape(-1, c)
    return nt._derive(
        values, ragged=(1, 2), offsets=steps * (h * w), partitions=[steps * h, steps * w], shapes=None
    )


def _pair(v: Any) -> list[int] | None:
    """An int or two ints as [H, W]; None when not of that form."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return [v, v]
    if (
        isinstance(v, (tuple, list))
        and len(v) == 2
        and all(isinstance(i, int) and not isinstance(i, bool) for i in v)
    ):
        return [int(i) for i in v]
    if isinstance(v, (tuple, list)) and len(v) == 1 and isinstance(v[0], int):
        return [int(v[0])] * 2
    return None


def _windowed(nt: NestedTensor, values: torch.Tensor, windows: list[tuple[int, int, int, int]], ceil: bool):
    """The image NestedTensor of ``values`` after a window per spatial dim
    (kernel, stride, padding, dilation): new height and width offsets (kept
    where the window keeps every extent), and row offsets."""
    parts = []
    for offsets, (k, s, p, d) in zip(nt.partitions, windows, strict=True):
        keeps = s == 1 and 2 * p == d * (k - 1)
        parts.append(offsets if keeps else _ops.window_offsets(offsets, k, s, p, d, ceil))
    if parts[0] is nt.partitions[0] and parts[1] is nt.partitions[1]:
        return nt._derive(values, shapes=None)
    heights, widths = parts
    pixels = (heights[1:] - heights[:-1]) * (widths[1:] - widths[:-1])
    rows = torch.cat([heights.new_zeros(1), torch.cumsum(pixels, 0)])
    return nt._derive(values, ragged=(1, 2), offsets=rows, partitions=[heights, widths], shapes=None)


def _conv2d(func: Callable, args: tuple, kwargs: dict) -> Any:
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
    p = _bind(
        "conv2d", args, kwargs, names, {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1}
    )
    nt, weight, bias = _as_nested(p["input"]), p["weight"], p["bias"]
    stride, dilation = _pair(p["stride"]), _pair(p["dilation"])
    padding = p["padding"]
    if padding == "valid":
        padding = 0
    if padding == "same" and stride == [1, 1] and isinstance(weight, torch.Tensor) and dilation is not None:
        # Symmetric when the window's span is odd; PyTorch pads the extra on the far side otherwise.
        total = [dilation[i] * (weight.shape[2 + i] - 1) for i in range(2)]
        padding = [t // 2 for t in total] if all(t % 2 == 0 for t in total) else None
    padding = _pair(padding) if padding is not None and not isinstance(padding, str) else None
    plain = (
        isinstance(weight, torch.Tensor)
        and not isinstance(bias, NestedTensor)
        and weight.dim() == 4
        and None not in (stride, padding, dilation)
    )
    groups = int(p["groups"])
    if plain and _is_regular_image(nt):
        x = _regular_batch(nt, weight.shape[1] * groups, "conv2d")
        if not _compiled_training(x, weight, bias):
            return _from_regular(nt, F.conv2d(x, weight, bias, stride, padding, dilation, groups))
        nt = _from_regular(nt, x, weight.shape[1] * groups)
    if not (plain and _is_image(nt)):
        return _per_item_fn()(func, args, kwargs)
    channels = nt.values.shape[1]
    if weight.shape[1] * groups != channels:
        raise ValueError(
            f"conv2d: weight {tuple(weight.shape)} with groups={groups} expects {weight.shape[1] * groups} input "
            f"channels, got images of {channels}"
        )
    hwio = weight.permute(2, 3, 1, 0)
    h, w = nt.partitions
    out = torch.ops.ragged.conv2d(nt.values, h, w, hwio, bias, stride, padding, dilation, groups)
    return _windowed(
        nt, out, [(weight.shape[2 + i], stride[i], padding[i], dilation[i]) for i in range(2)], False
    )


def _pool2d(kind: str) -> Callable:
    def handler(func: Callable, args: tuple, kwargs: dict) -> Any:
        fname = "max_pool2d" if kind == "max" else "avg_pool2d"
        if kind == "max":
            names = ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")
            defaults = {
                "stride": None,
                "padding": 0,
                "dilation": 1,
                "ceil_mode": False,
                "return_indices": False,
            }
        else:
            names = (
                "input",
                "kernel_size",
                "stride",
                "padding",
                "ceil_mode",
                "count_include_pad",
                "divisor_override",
            )
            defaults = {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True}
            defaults["divisor_override"] = None
        p = _bind(fname, args, kwargs, names, defaults)
        nt = _as_nested(p["input"])
        kernel = _pair(p["kernel_size"])
        stride = kernel if p["stride"] is None or p["stride"] == [] else _pair(p["stride"])
        padding = _pair(p["padding"])
        dilation = _pair(p.get("dilation", 1))
        plain = not p.get("return_indices") and p.get("divisor_override") is None
        if _is_regular_image(nt) and plain:
            # Images of one size: each channel pooled as a dense batch.
            return nt._derive(func(nt.values[:, None], *args[1:], **kwargs)[:, 0], shapes=None)
        if not (_is_image(nt) and plain and None not in (kernel, stride, padding, dilation)):
            return _per_item_fn()(func, args, kwargs)
        if any(2 * padding[i] > kernel[i] for i in range(2)):
            raise ValueError(f"{fname}: padding {padding} must be at most half the kernel {kernel}")
        ceil, include = bool(p["ceil_mode"]), bool(p.get("count_include_pad", False))
        h, w = nt.partitions
        out = torch.ops.ragged.pool2d(nt.values, h, w, kind, kernel, stride, padding, dilation, ceil, include)
        return _windowed(nt, out, [(kernel[i], stride[i], padding[i], dilation[i]) for i in range(2)], ceil)

    return handler


def _adaptive_avg_pool2d(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind("adaptive_avg_pool2d", args, kwargs, ("input", "output_size"), {})
    nt = _as_nested(p["input"])
    one = _pair(p["output_size"]) == [1, 1]
    if _is_regular_image(nt) and one:
        return nt.values.mean(dim=(1, 2)).reshape(nt.offsets.shape[0] - 1, -1, 1, 1)
    if not (_is_image(nt) and one):
        return _per_item_fn()(func, args, kwargs)
    # Every image pools to [C, 1, 1]: a dense [B, C, 1, 1] (an empty image gives 0).
    pooled = torch.ops.ragged.segment_reduce(nt.values, nt.offsets, "mean", 0.0)
    return pooled[:, :, None, None]


def _image_group_norm(nt: NestedTensor, groups: int, weight, bias, eps: float, fname: str) -> NestedTensor:
    """Each image's channels in ``groups`` groups, normalised over the
    group's channels and the image's real pixels (two passes: the mean, then
    the mean square deviation), then the per-channel affine."""
    rows, channels = nt.values.shape
    if channels % groups:
        raise ValueError(f"{fname}: {channels} channels do not split into {groups} groups")
    v = nt.values.reshape(rows, groups, channels // groups)
    ops = torch.ops.ragged

    def per_image_mean(t: torch.Tensor) -> torch.Tensor:  # [rows, groups] -> [rows, groups]
        return ops.segment_broadcast(ops.segment_reduce(t, nt.offsets, "mean", 0.0), t, nt.offsets)

    centred = v - per_image_mean(v.mean(-1))[..., None]
    var = per_image_mean((centred * centred).mean(-1))
    out = (centred * torch.rsqrt(var + eps)[..., None]).reshape(rows, channels)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return nt._derive(out)


def _group_norm(func: Callable, args: tuple, kwargs: dict) -> Any:
    names = ("input", "num_groups", "weight", "bias", "eps")
    p = _bind("group_norm", args, kwargs, names, {"weight": None, "bias": None, "eps": 1e-5})
    nt = _as_nested(p["input"])
    if _is_regular_image(nt) and p["weight"] is not None:
        x = _regular_batch(nt, p["weight"].shape[0], "group_norm")
        return _from_regular(nt, F.group_norm(x, p["num_groups"], p["weight"], p["bias"], p["eps"]))
    if not _is_image(nt):
        return _per_item_fn()(func, args, kwargs)
    return _image_group_norm(nt, int(p["num_groups"]), p["weight"], p["bias"], float(p["eps"]), "group_norm")


def _instance_norm(func: Callable, args: tuple, kwargs: dict) -> Any:
    names = ("input", "running_mean", "running_var", "weight", "bias", "use_input_stats", "momentum", "eps")
    defaults = {"running_mean": None, "running_var": None, "weight": None, "bias": None}
    defaults.update({"use_input_stats": True, "momentum": 0.1, "eps": 1e-5})
    p = _bind("instance_norm", args, kwargs, names, defaults)
    nt = _as_nested(p["input"])
    known = p["weight"] if p["weight"] is not None else p["running_mean"]
    if _is_regular_image(nt) and (known is not None or not _is_compiling()):
        channels = known.shape[0] if known is not None else int(nt.offsets[1] - nt.offsets[0])
        x = _regular_batch(nt, channels, "instance_norm")
        rest = {k: p[k] for k in names[1:]}
        return _from_regular(nt, F.instance_norm(x, **rest))
    if not _is_image(nt):
        return _per_item_fn()(func, args, kwargs)
    if not p["use_input_stats"]:  # eval with running statistics: a scale and shift, as batch norm
        return _batch_norm(
            F.batch_norm, (nt, p["running_mean"], p["running_var"], p["weight"], p["bias"]), {}
        )
    if p["running_mean"] is not None:
        raise NotImplementedError("instance_norm: updating running statistics from NestedTensor images")
    channels = nt.values.shape[1]
    return _image_group_norm(nt, channels, p["weight"], p["bias"], float(p["eps"]), "instance_norm")


_register(
    [F.conv2d], "image", _conv2d, "zero padding, or 'same' with an even window span; other cases run per item"
)
_register([F.max_pool2d], "image", _pool2d("max"), "return_indices runs per item")
_register([F.avg_pool2d], "image", _pool2d("mean"), "divisor_override runs per item")
_register([F.group_norm], "image", _group_norm, "statistics over each image's real pixels")
_register([F.instance_norm], "image", _instance_norm, "statistics over each image's real pixels")
_register(
    [F.adaptive_avg_pool2d],
    "image",
    _adaptive_avg_pool2d,
    "output size 1: a dense [B, C, 1, 1]; other sizes run per item",
)


# Spatial functions on unbatched items ([C, H(b), W(b)] images, [C, L(b)] signals), like DanLing.
_SPATIAL = [
    getattr(F, name, None)
    for name in (
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "max_pool1d",
        "max_pool2d",
        "max_pool3d",
        "avg_pool1d",
        "avg_pool2d",
        "avg_pool3d",
        "lp_pool1d",
        "lp_pool2d",
        "lp_pool3d",
        "adaptive_max_pool1d",
        "adaptive_max_pool2d",
        "adaptive_max_pool3d",
        "adaptive_avg_pool1d",
        "adaptive_avg_pool2d",
        "adaptive_avg_pool3d",
        "max_unpool1d",
        "max_unpool2d",
        "max_unpool3d",
        "max_pool1d_with_indices",
        "max_pool2d_with_indices",
        "max_pool3d_with_indices",
        "adaptive_max_pool1d_with_indices",
        "adaptive_max_pool2d_with_indices",
        "adaptive_max_pool3d_with_indices",
        "fractional_max_pool2d",
        "fractional_max_pool3d",
        "pad",
        "pixel_shuffle",
        "pixel_unshuffle",
        "channel_shuffle",
        "unfold",
        "fold",
        "local_response_norm",
        "pairwise_distance",
        "pdist",
    )
]
_SPATIAL += [
    getattr(torch, n, None)
    for n in (
        "conv1d",
        "conv2d",
        "conv3d",
        "pixel_shuffle",
        "pixel_unshuffle",
        "channel_shuffle",
        "pairwise_distance",
        "pdist",
    )
]
_register(_SPATIAL, "per-item", _per_item_fn(), "on every unbatched item (e.g. [C, H(b), W(b)] images)")


def _batched_per_item(func: Callable, args: tuple, kwargs: dict) -> Any:
    # interpolate has no unbatched form: each item gets a batch dim of 1.
    nt = _as_nested(args[0])
    if not isinstance(nt, NestedTensor):
        raise TypeError(f"{_fname(func)}: expected input to be a NestedTensor, got {type(nt).__name__}")
    return nt._per_item(lambda t: func(t[None], *args[1:], **kwargs)[0], _fname(func))


_register([F.interpolate, getattr(F, "upsample", None)], "per-item", _batched_per_item)


def _batch_norm(func: Callable, args: tuple, kwargs: dict) -> Any:
    nt = _as_nested(args[0])
    if not isinstance(nt, NestedTensor) or nt._item_rank() < 1 or 0 in nt.ragged_dims:
        raise ValueError(
            "batch_norm: needs a NestedTensor whose channel dim (dim 1, the items' dim 0) is static, "
            f"e.g. [B, C, H(b), W(b)]; got ragged dims {getattr(nt, 'ragged_dims', None)}"
        )
    names = ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")
    defaults = {"weight": None, "bias": None, "training": False, "momentum": 0.1, "eps": 1e-5}
    p = _bind("batch_norm", args, kwargs, names, defaults)
    if not p["training"] and p["running_mean"] is not None and p["running_var"] is not None:
        # Inference: a per-channel scale and shift of the rows, written out so
        # that rows counted only at run time (after a strided convolution)
        # meet no size check.
        scale = torch.rsqrt(p["running_var"] + p["eps"])
        if p["weight"] is not None:
            scale = scale * p["weight"]
        shift = -p["running_mean"] * scale
        if p["bias"] is not None:
            shift = shift + p["bias"]
        return nt._derive(nt.values * scale + shift)
    # The statistics of a channel over every real element: the packed rows are the batch.
    out = func(nt.values, *args[1:], **kwargs)
    return nt._derive(out)


_register([F.batch_norm], "per-token", _batch_norm, "statistics over the real elements of every channel")


def _take(func: Callable, args: tuple, kwargs: dict) -> Any:
    nt = _as_nested(args[0])
    index = args[1] if len(args) > 1 else kwargs["index"]
    if isinstance(index, NestedTensor):
        return _per_item_fn()(func, (nt, index), {})
    return torch.take(nt.values, index)  # DanLing: a plain index addresses the packed values


_register([torch.take, torch.Tensor.take], "per-token", _take, "a dense index addresses the packed values")


def _masked_select(func: Callable, args: tuple, kwargs: dict) -> Any:
    nt, mask = _as_nested(args[0]), _as_nested(args[1] if len(args) > 1 else kwargs["mask"])
    return nt[mask]


_register([torch.masked_select, torch.Tensor.masked_select], "per-item", _masked_select)


def _broadcast_tensors(func: Callable, args: tuple, kwargs: dict) -> Any:
    seq = [_as_nested(a) for a in args]
    ref = _first_nt(tuple(seq), {})
    out = []
    for a in seq:
        if isinstance(a, NestedTensor):
            ref._check_same_structure(a, "broadcast_tensors") if a is not ref else None
            out.append(a)
        else:
            out.append(ref._derive(_operand(ref, a, "broadcast_tensors").expand(ref.values.shape)))
    return tuple(out)


_register([torch.broadcast_tensors], "per-token", _broadcast_tensors)


# -- per-token functions with weights --------------------------------------------------------------


def _last_static(nt: NestedTensor, k: int, fname: str) -> bool:
    rank = nt._item_rank()
    return rank >= k and all((rank - 1 - i) not in nt._ragged for i in range(k))


def _linear(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind("linear", args, kwargs, ("input", "weight", "bias"), {"bias": None})
    nt = _as_nested(p["input"])
    if not isinstance(nt, NestedTensor):
        raise TypeError(f"linear: expected input to be a NestedTensor, got {type(nt).__name__}")
    if isinstance(p["weight"], NestedTensor) or isinstance(p["bias"], NestedTensor):
        raise TypeError("linear: the weight and bias must be dense tensors")
    if not _last_static(nt, 1, "linear"):
        raise ValueError(
            f"linear: the last dim of the input is ragged (ragged dims {nt.ragged_dims} of items of rank "
            f"{nt._item_rank()}); linear needs a static last dim (transpose the ragged dim away first)"
        )
    return nt._derive(F.linear(nt.values, p["weight"], p["bias"]))


_register([F.linear], "per-token", _linear)


def _rmatmul(func: Callable, args: tuple, kwargs: dict) -> Any:
    return _matmul(func, (args[1], args[0]), kwargs)


def _traced_operands(func: Callable, a: Any, b: Any) -> tuple[Any, Any]:
    """Dynamo (torch 2.13) traces ``nt @ dense`` as ``Tensor.matmul(dense,
    nt)``: it swaps a binary operator's operands when the left one is not a
    tensor, then calls the reflected method, and ``@`` has none. Under
    compile, ``Tensor.matmul(dense, nt)`` is therefore read as ``nt @ dense``
    when only that order fits the shapes; where both orders fit, it is
    refused rather than guessed."""
    if not (
        func is torch.Tensor.matmul
        and _is_compiling()
        and isinstance(b, NestedTensor)
        and isinstance(a, torch.Tensor)
        and not isinstance(a, NestedTensor)
        and a.dim() in (1, 2)
    ):
        return a, b
    rank, static = b._item_rank(), b._static_dims()

    def size(d: int) -> Any:
        return b.values.shape[1 + static.index(d)] if d in static else None

    nt_left = size(rank - 1) is not None and size(rank - 1) == a.shape[0]
    dense_left = rank >= 2 and size(rank - 2) is not None and size(rank - 2) == a.shape[-1]
    if nt_left and dense_left:
        raise ValueError(
            "matmul: under torch.compile, `nested @ dense` and `dense.matmul(nested)` reach the "
            "NestedTensor alike and both fit these shapes; write torch.matmul(a, b)"
        )
    return (b, a) if nt_left else (a, b)


def _matmul(func: Callable, args: tuple, kwargs: dict) -> Any:
    a, b = _traced_operands(func, _as_nested(args[0]), _as_nested(args[1]))
    fname = "matmul"
    if isinstance(a, NestedTensor) and isinstance(b, torch.Tensor) and b.dim() in (1, 2):
        if _last_static(a, 1, fname):
            out = torch.matmul(a.values, b)
            ragged = a._ragged
            return a._derive(out, ragged=ragged)
    if isinstance(a, NestedTensor) and isinstance(b, NestedTensor):
        if _is_compiling():
            raise NotImplementedError(
                "matmul: NestedTensor @ NestedTensor runs item by item on the host; under torch.compile use "
                "F.scaled_dot_product_attention for attention"
            )
        if len(a) != len(b):
            raise ValueError(f"matmul: NestedTensors of different batch sizes ({len(a)} and {len(b)})")
        items = [torch.matmul(x, y) for x, y in zip(a._items(), b._items(), strict=True)]
        if not items:
            return a._empty()
        # The rows keep a's ragged dims, the columns b's: [L, d] @ [d, S] is ragged in both.
        rank = items[0].dim()
        ragged = sorted(
            {r for r in a.ragged_dims if r < a._item_rank() - 1}
            | {rank - 1 for r in b.ragged_dims if r == b._item_rank() - 1}
        )
        try:
            return type(a)(items, ragged_dims=tuple(ragged) or None, **a._state())
        except ValueError:
            return type(a)(items, **a._state())
    nt = a if isinstance(a, NestedTensor) else b
    if isinstance(a, NestedTensor):
        return nt._per_item(lambda t: torch.matmul(t, b), fname)
    return nt._per_item(lambda t: torch.matmul(a, t), fname)


_register(
    [
        torch.matmul,
        torch.Tensor.matmul,
        torch.Tensor.__matmul__,
        torch.mm,
        torch.bmm,
        torch.Tensor.mm,
        torch.Tensor.bmm,
    ],
    "per-token",
    _matmul,
    "NestedTensor @ dense matrix on the packed values; NestedTensor @ NestedTensor per item (eager)",
)
_register(
    [torch.Tensor.__rmatmul__, getattr(torch.Tensor.__rmatmul__, "__wrapped__", None)],
    "per-token",
    _rmatmul,
    "dense @ NestedTensor: per item (eager)",
)


def _norm_layer(kind: str) -> Callable:
    def handler(func: Callable, args: tuple, kwargs: dict) -> Any:
        if kind == "layer_norm":
            p = _bind(
                kind,
                args,
                kwargs,
                ("input", "normalized_shape", "weight", "bias", "eps"),
                {"weight": None, "bias": None, "eps": 1e-5},
            )
        else:
            p = _bind(
                kind,
                args,
                kwargs,
                ("input", "normalized_shape", "weight", "eps"),
                {"weight": None, "eps": None},
            )
        nt = _as_nested(p["input"])
        shape = p["normalized_shape"]
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        fn = getattr(F, kind)
        rest = {k: v for k, v in p.items() if k not in ("input", "normalized_shape")}
        if not _last_static(nt, len(shape), kind):
            return nt._per_item(lambda t: fn(t, shape, **rest), kind)
        return nt._derive(fn(nt.values, shape, **rest))

    return handler


_register([F.layer_norm], "per-token", _norm_layer("layer_norm"))
if hasattr(F, "rms_norm"):
    _register([F.rms_norm], "per-token", _norm_layer("rms_norm"))


def _embedding(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind(
        "embedding",
        args,
        kwargs,
        ("input", "weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"),
        {
            "padding_idx": None,
            "max_norm": None,
            "norm_type": 2.0,
            "scale_grad_by_freq": False,
            "sparse": False,
        },
    )
    nt = _as_nested(p["input"])
    if not isinstance(nt, NestedTensor):
        raise TypeError(f"embedding: expected the ids (input) to be a NestedTensor, got {type(nt).__name__}")
    if isinstance(p["weight"], NestedTensor):
        raise TypeError("embedding: the weight must be a dense tensor, got a NestedTensor")
    if p["max_norm"] is not None:
        raise NotImplementedError(
            "embedding: max_norm renormalises the weight in place; not supported for NestedTensor"
        )
    out = F.embedding(
        nt.values, p["weight"], p["padding_idx"], None, p["norm_type"], p["scale_grad_by_freq"], p["sparse"]
    )
    return nt._derive(out)


_register([F.embedding], "per-token", _embedding, "appends the embedding dim as a static dim")


def _one_hot(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind("one_hot", args, kwargs, ("tensor", "num_classes"), {"num_classes": -1})
    nt = _as_nested(p["tensor"])
    return nt._derive(F.one_hot(nt.values, p["num_classes"]))


_register([F.one_hot], "per-token", _one_hot, "appends the class dim as a static dim")


def _loss(func: Callable, args: tuple, kwargs: dict) -> Any:
    fname = _fname(func)
    ref = _first_nt(args, kwargs)
    a2 = [_operand(ref, a, fname) for a in args]
    k2 = {k: _operand(ref, v, fname) for k, v in kwargs.items()}
    out = func(*a2, **k2)
    if isinstance(out, torch.Tensor) and out.dim() >= 1 and out.shape[0] == ref.values.shape[0]:
        return ref._derive(out)
    return out


_register(
    [
        F.mse_loss,
        F.l1_loss,
        F.smooth_l1_loss,
        F.huber_loss,
        F.binary_cross_entropy,
        F.binary_cross_entropy_with_logits,
        F.soft_margin_loss,
        F.kl_div,
        F.poisson_nll_loss,
    ],
    "per-token",
    _loss,
    "elementwise losses over the real elements (reduction='mean' averages them)",
)


def _class_loss(func: Callable, args: tuple, kwargs: dict) -> Any:
    fname = _fname(func)
    nt = _as_nested(args[0])
    target = _as_nested(args[1] if len(args) > 1 else kwargs.get("target"))
    if (
        not isinstance(nt, NestedTensor)
        or nt._item_dim(1, fname) is None
        or nt._item_dim(1, fname) in nt._ragged
    ):
        raise ValueError(
            f"{fname}: needs a NestedTensor input with a static class dim at dim 1 ([B, C, L(b), ...]), got "
            f"{nt!r}"
        )
    if isinstance(target, NestedTensor):
        if target._ragged != tuple(r - 1 for r in nt._ragged) or len(target) != len(nt):
            raise ValueError(f"{fname}: the target's ragged dims must be the input's minus the class dim")
        nt._check_same_structure(nt._derive(nt.values, ragged=nt._ragged), fname)
        tv = target.values
    else:
        raise TypeError(f"{fname}: the target must be a NestedTensor like the input without its class dim")
    logits = nt.values.movedim(nt._value_dim(0), 1)
    rest = dict(kwargs)
    rest.pop("target", None)
    out = func(logits, tv, *args[2:], **rest)
    if isinstance(out, torch.Tensor) and out.dim() >= 1:
        return target._derive(out)
    return out


_register(
    [F.cross_entropy, F.nll_loss],
    "per-token",
    _class_loss,
    "class dim at dim 1 must be static ([B, C, L(b)]), like torch",
)


# -- views -------------------------------------------------------------------------------------------


def _method_view(name: str) -> Callable:
    def handler(func: Callable, args: tuple, kwargs: dict) -> Any:
        nt = _as_nested(args[0])
        if not isinstance(nt, NestedTensor):
            raise TypeError(f"{name}: expected a NestedTensor, got {type(nt).__name__}")
        return getattr(nt, name)(*args[1:], **kwargs)

    return handler


for _name in (
    "transpose",
    "permute",
    "flatten",
    "unflatten",
    "reshape",
    "squeeze",
    "unsqueeze",
    "movedim",
    "moveaxis",
    "swapaxes",
    "swapdims",
    "narrow",
    "select",
    "unbind",
    "split",
    "chunk",
    "detach",
    "clone",
    "contiguous",
    "view",
    "view_as",
    "reshape_as",
    "expand_as",
    "to",
    "type",
    "numel",
    "dim",
    "size",
    "is_floating_point",
    "is_complex",
    "t",
):
    _fs = [getattr(torch, _name, None), getattr(torch.Tensor, _name, None)]
    if _name == "t":
        continue
    _register(_fs, "view", _method_view(_name))


# -- batch ---------------------------------------------------------------------------------------------


def _cat(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind("cat", args, kwargs, ("tensors", "dim", "out"), {"dim": 0, "out": None})
    if p["out"] is not None:
        raise NotImplementedError("cat: out= is not supported for NestedTensor")
    seq = [_as_nested(t) for t in p["tensors"]]
    ref = next(t for t in seq if isinstance(t, NestedTensor))
    return cat(seq, p["dim"], ref)


def cat(seq: list, dim: int, ref: NestedTensor) -> NestedTensor:
    n = ref.dim()
    d = _norm_dim(dim, n, "cat")
    if d == ref._batch_axis():
        nts = []
        for i, t in enumerate(seq):
            if isinstance(t, NestedTensor):
                nts.append(t)
            elif isinstance(t, torch.Tensor):
                nts.append(
                    NestedTensor(
                        [t], ragged_dims=ref._ragged if t.dim() == ref._item_rank() else None, **ref._state()
                    )
                )
            else:
                raise TypeError(
                    f"cat: tensors[{i}] must be a tensor or a NestedTensor, got {type(t).__name__}"
                )
        same = all(
            t._ragged == ref._ragged and t.values.shape[1:] == ref.values.shape[1:] and t.dtype == ref.dtype
            for t in nts
        )
        if same:
            values = torch.cat([t.values for t in nts])
            offsets = [nts[0].offsets]
            base = nts[0].offsets[-1:]
            for t in nts[1:]:
                offsets.append(t.offsets[1:] + base)
                base = base + t.offsets[-1:]
            off = torch.cat(offsets)
            if len(ref._ragged) == 1:
                parts = [off]
            else:
                parts = []
                for j in range(len(ref._ragged)):
                    pj = [nts[0].partitions[j]]
                    pb = nts[0].partitions[j][-1:]
                    for t in nts[1:]:
                        pj.append(t.partitions[j][1:] + pb)
                        pb = pb + t.partitions[j][-1:]
                    parts.append(torch.cat(pj))
            shapes = None
            if all(t._shapes is not None for t in nts) and not _is_compiling():
                shapes = [s for t in nts for s in t._shapes]
            return ref._derive(values, offsets=off, partitions=parts, shapes=shapes)
        if _is_compiling():
            raise NotImplementedError(
                "cat: NestedTensors of different layouts along the batch dim (eager only)"
            )
        items = [x for t in nts for x in t._items()]
        return type(ref)(items, **ref._state())
    nts = []
    for i, t in enumerate(seq):
        if not isinstance(t, NestedTensor):
            if not isinstance(t, torch.Tensor) or t.dim() != ref.dim():
                raise TypeError(
                    f"cat: tensors[{i}] must be a NestedTensor, or a padded tensor of rank {ref.dim()}, to "
                    f"concatenate along dim {dim}; got {type(t).__name__}"
                    f"{' of shape ' + str(tuple(t.shape)) if isinstance(t, torch.Tensor) else ''}"
                )
            t = _padded_items(ref, t, _norm_dim(dim, ref.dim(), "cat"), f"cat: tensors[{i}]")
        nts.append(t)
    item = ref._item_dim(d, "cat")
    if item not in ref._ragged:
        for t in nts[1:]:
            if t._ragged != ref._ragged or t._item_rank() != ref._item_rank():
                raise ValueError(
                    f"cat: NestedTensors of different structure: {ref._describe()} and {t._describe()}"
                )
            ref._check_same_structure(t, "cat")
        vd = ref._value_dim(item)  # type: ignore[arg-type]
        return ref._derive(torch.cat([t.values for t in nts], dim=vd))
    if len(ref._ragged) == 1 and all(t._ragged == ref._ragged and len(t) == len(ref) for t in nts):
        # Per item, the rows of every operand one after another.
        lengths = [t.lengths for t in nts]
        total = lengths[0]
        for ln in lengths[1:]:
            total = total + ln
        offsets = torch.cat([total.new_zeros(1), total.cumsum(0)])
        rows = sum(t.values.shape[0] for t in nts)
        values = nts[0].values.new_empty((rows,) + tuple(nts[0].values.shape[1:]))
        before = torch.zeros_like(total)
        for t, ln in zip(nts, lengths, strict=True):
            if t.values.shape[1:] != values.shape[1:]:
                raise ValueError(
                    f"cat: static sizes differ: {tuple(values.shape[1:])} and {tuple(t.values.shape[1:])}"
                )
            ids, coords = t._row_coords()
            dst = offsets[ids] + before[ids] + coords[0]
            values = values.index_copy(0, dst, t.values.to(values.dtype))
            before = before + ln
        return ref._derive(values, offsets=offsets, partitions=[offsets], shapes=None)
    if _is_compiling():
        raise NotImplementedError("cat: along a ragged dim of a multi-ragged NestedTensor (eager only)")
    items = [torch.cat(list(xs), dim=item) for xs in zip(*[t._items() for t in nts], strict=True)]
    return type(ref)(items, **ref._state()) if items else ref._empty()


def _padded_items(ref: NestedTensor, dense: torch.Tensor, along: int, what: str) -> NestedTensor:
    """A padded dense tensor read item by item with ``ref``'s extents (the
    ``along`` dim taken whole): eager."""
    if _is_compiling():
        raise NotImplementedError(f"{what}: a dense tensor concatenated along an item dim (eager only)")
    axis = ref._batch_axis()
    if dense.shape[axis] != len(ref):
        raise ValueError(f"{what}: batch length mismatch: {dense.shape[axis]} vs {len(ref)}")
    d = dense if axis == 0 else dense.movedim(1, 0)
    k = ref._item_dim(along, "cat")
    items = []
    for b, shape in enumerate(ref._item_shapes()):
        idx = tuple(
            slice(None) if j == k or j not in ref.ragged_dims else slice(0, e) for j, e in enumerate(shape)
        )
        items.append(d[b][idx])
    return type(ref)(items, ragged_dims=ref.ragged_dims, **ref._state()) if items else ref._empty()


_register(
    [torch.cat, torch.concat, torch.concatenate],
    "batch",
    _cat,
    "dim 0: items appended (tensors become items); static dims on the values; a ragged dim per item",
)


def _stack(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind("stack", args, kwargs, ("tensors", "dim", "out"), {"dim": 0, "out": None})
    seq = [_as_nested(t) for t in p["tensors"]]
    ref = next(t for t in seq if isinstance(t, NestedTensor))
    n = ref.dim() + 1
    d = _norm_dim(p["dim"], n, "stack")
    if d <= ref._batch_axis():
        raise NotImplementedError(
            f"stack: dim {p['dim']} must be after the NestedTensor batch dimension ({ref._batch_axis()})"
        )
    return cat(
        [t.unsqueeze(d) if isinstance(t, NestedTensor) else t.unsqueeze(d) for t in seq], d, ref.unsqueeze(d)
    )


_register([torch.stack], "batch", _stack, "a new static dim after the batch dim")


def _where(func: Callable, args: tuple, kwargs: dict) -> Any:
    if func is torch.where and len(args) + len(kwargs) == 1:
        raise NotImplementedError("where: the one-argument form (nonzero) is not supported for NestedTensor")
    return _pointwise(func, args, kwargs)


_register([torch.where, torch.Tensor.where], "per-token", _where)


def _repeat_interleave(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind(
        "repeat_interleave",
        args,
        kwargs,
        ("input", "repeats", "dim", "output_size"),
        {"dim": None, "output_size": None},
    )
    nt = _as_nested(p["input"])
    if p["dim"] is not None and nt._item_dim(p["dim"], "repeat_interleave") is None:
        return nt.repeat_batch(int(p["repeats"]))
    if p["dim"] is None:  # per item, flattened (torch on one tensor)
        return _per_item_fn()(func, (nt, p["repeats"]), {})
    item = nt._item_dim(p["dim"], "repeat_interleave")
    if item in nt._ragged:
        return nt._per_item(lambda t: torch.repeat_interleave(t, p["repeats"], dim=item), "repeat_interleave")
    return nt._derive(torch.repeat_interleave(nt.values, p["repeats"], dim=nt._value_dim(item)))


_register([torch.repeat_interleave, torch.Tensor.repeat_interleave], "batch", _repeat_interleave)


def _dist(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind("dist", args, kwargs, ("input", "other", "p"), {"p": 2})
    ref = _first_nt((p["input"], p["other"]), {})
    a, b = _operand(ref, p["input"], "dist"), _operand(ref, p["other"], "dist")
    return torch.linalg.vector_norm(a - b, ord=p["p"])


_register([torch.dist, torch.Tensor.dist], "reduction", _dist, "over the real elements")


# -- predicates ---------------------------------------------------------------------------------------------


def _equal(func: Callable, args: tuple, kwargs: dict) -> bool:
    a, b = _as_nested(args[0]), _as_nested(args[1])
    if isinstance(a, NestedTensor) and isinstance(b, NestedTensor):
        if len(a) != len(b) or a._ragged != b._ragged or a._item_rank() != b._item_rank():
            return False
        if a.values.shape != b.values.shape or a.dtype != b.dtype:
            return False
        for x, y in [(a.offsets, b.offsets)] + list(zip(a.partitions, b.partitions, strict=True)):
            if not torch.equal(x, y.to(x.device)):
                return False
        return torch.equal(a.values, b.values.to(a.device))
    nt, dense = (a, b) if isinstance(a, NestedTensor) else (b, a)
    if (
        not isinstance(dense, torch.Tensor)
        or tuple(dense.shape) != tuple(nt.shape)
        or dense.dtype != nt.dtype
    ):
        return False
    return torch.equal(nt.values, nt._dense_operand(dense, "equal").expand(nt.values.shape))


def _allclose(func: Callable, args: tuple, kwargs: dict) -> bool:
    p = _bind(
        "allclose",
        args,
        kwargs,
        ("input", "other", "rtol", "atol", "equal_nan"),
        {"rtol": 1e-5, "atol": 1e-8, "equal_nan": False},
    )
    a, b = _as_nested(p["input"]), _as_nested(p["other"])
    opts = {"rtol": p["rtol"], "atol": p["atol"], "equal_nan": p["equal_nan"]}
    if isinstance(a, NestedTensor) and isinstance(b, NestedTensor):
        try:
            a._check_same_structure(b, "allclose")
        except ValueError:
            return False
        return torch.allclose(a.values, b.values, **opts)
    nt, dense = (a, b) if isinstance(a, NestedTensor) else (b, a)
    other = nt._dense_operand(dense, "allclose").expand(nt.values.shape)
    x, y = (nt.values, other) if nt is a else (other, nt.values)
    return torch.allclose(x, y, **opts)


_register([torch.equal, torch.Tensor.equal], "predicate", _equal)
_register([torch.allclose, torch.Tensor.allclose], "predicate", _allclose)

# The attention functions (their own module) and Tensor methods generated from the table.
from . import sdpa as _nested_sdpa  # noqa: E402

_register(
    [F.scaled_dot_product_attention],
    "attention",
    _nested_sdpa.sdpa_handler,
    "[B, ..., L(b), d] with the ragged dim at -2 maps onto torch.ops.ragged.attention without copies",
)
_register([F.multi_head_attention_forward], "attention", _nested_sdpa.mha_handler)


# Tensor's Python-level operators (``Tensor.__rsub__``, ``__rpow__``, ...): under
# Dynamo a dict lookup keyed by them misses (torch 2.13) and leaves a guard
# that fails at once; an identity test works. They are grouped by name (a
# name can hold a wrapper and the function it wraps): Dynamo traces
# ``lookup`` on every op, and a scan of all of them was a quarter of the
# bytecode it ran for a six-layer encoder.
_TENSOR_PY_FUNCTIONS: dict[str, list[tuple[Callable, NestedFunction]]] = {}
for _f, _e in FUNCTIONS.items():
    if getattr(_f, "__module__", None) == "torch._tensor":
        _TENSOR_PY_FUNCTIONS.setdefault(_f.__name__, []).append((_f, _e))


def lookup(func: Callable) -> NestedFunction | None:
    """The table entry of ``func`` (None when unsupported)."""
    for f, e in _TENSOR_PY_FUNCTIONS.get(getattr(func, "__name__", None), ()):
        if func is f:
            return e
    return FUNCTIONS.get(func)


def _make_method(func: Callable) -> Callable:
    entry = FUNCTIONS[func]
    handler = entry.handler

    def method(self: NestedTensor, *args: Any, **kwargs: Any) -> Any:
        return handler(func, (self,) + args, kwargs)

    method.__name__ = getattr(func, "__name__", "method")
    method.__doc__ = f"``{entry.name}`` on a NestedTensor ({entry.category})."
    return method


for _f in list(FUNCTIONS):
    _mname = getattr(_f, "__name__", None)
    if _mname and getattr(torch.Tensor, _mname, None) is _f and _mname not in vars(NestedTensor):
        if _mname.startswith("__") or _mname in ("t",):
            continue
        setattr(NestedTensor, _mname, _make_method(_f))

del _f, _e, _mname, _name, _fs, _kind, _names, _n, _fns
del math
