"""Along a dim: softmax, scans and flips over a ragged dim, per-token functions over a static dim."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .. import ops as _ops
from .common import _MISSING, _as_nested, _bind, _dims, _first_nt, _operand
from .per_item import _per_item_fn
from .reductions import _segment
from .registry import _fname, register
from .tensor import NestedTensor

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


register(
    [torch.softmax, torch.Tensor.softmax, F.softmax, torch.special.softmax],
    "ragged-dim",
    _softmax_handler("softmax"),
)
register(
    [torch.log_softmax, torch.Tensor.log_softmax, F.log_softmax, torch.special.log_softmax],
    "ragged-dim",
    _softmax_handler("log_softmax"),
)
register([F.softmin], "ragged-dim", _softmax_handler("softmin"))


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


register([torch.cumsum, torch.Tensor.cumsum], "ragged-dim", _scan_handler("cumsum"))
register([torch.cumprod, torch.Tensor.cumprod], "ragged-dim", _scan_handler("cumprod"))
register([torch.logcumsumexp, torch.Tensor.logcumsumexp], "ragged-dim", _scan_handler("logcumsumexp"))


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


register([torch.flip, torch.Tensor.flip], "ragged-dim", _flip)


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


register([torch.sort, torch.Tensor.sort], "per-token", _dim_op("dim", 1, -1))
register([torch.argsort, torch.Tensor.argsort], "per-token", _dim_op("dim", 1, -1))
register([torch.topk, torch.Tensor.topk], "per-token", _dim_op("dim", 2, -1))
register([torch.diff, torch.Tensor.diff], "per-token", _dim_op("dim", 2, -1))


def _roll(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind("roll", args, kwargs, ("input", "shifts", "dims"), {"dims": None})
    if p["dims"] is None:  # over the flattened item, like torch on one tensor
        return _per_item_fn()(func, (p["input"], p["shifts"]), {})
    return _dim_op("dims", 2)(func, (p["input"], p["shifts"], p["dims"]), {})


register([torch.roll, torch.Tensor.roll], "per-token", _roll)
register([F.normalize], "per-token", _dim_op("dim", 2, 1))
register([F.glu], "per-token", _dim_op("dim", 1, -1))
register([F.cosine_similarity], "per-token", _dim_op("dim", 2, 1))
register(
    [torch.cummax, torch.Tensor.cummax, torch.cummin, torch.Tensor.cummin], "per-token", _dim_op("dim", 1)
)


def _index_select(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind("index_select", args, kwargs, ("input", "dim", "index"), {})
    nt = _as_nested(p["input"])
    if nt._item_dim(p["dim"], "index_select") is None:
        return nt[p["index"]]  # items
    return _dim_op("dim", 1, dense="pass")(func, (nt, p["dim"], p["index"]), {})


register([torch.index_select, torch.Tensor.index_select], "per-token", _index_select)
