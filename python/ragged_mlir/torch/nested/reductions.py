"""Reductions over any dims: static dims on the values, ragged dims through ``torch.ops.ragged.segment_reduce``, the batch dim on the padded view."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .. import ops as _ops
from .common import _as_nested, _bind, _dims
from .layout import _norm_dim, _prod
from .pointwise import _pointwise
from .registry import _fname, register
from .tensor import NestedTensor

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
    register(_fns, "reduction", _reduction_handler(_kind))
register([torch.linalg.vector_norm], "reduction", lambda f, a, k: _vector_norm(a, k))


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
