"""Views re-labelling dims, and functions over whole items: cat, stack, where, repeat_interleave."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .common import _as_nested, _bind, _first_nt, _operand
from .layout import _is_compiling, _norm_dim
from .per_item import _per_item_fn
from .pointwise import _pointwise
from .registry import register
from .tensor import NestedTensor

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
    register(_fs, "view", _method_view(_name))


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


register(
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


register([torch.stack], "batch", _stack, "a new static dim after the batch dim")


def _where(func: Callable, args: tuple, kwargs: dict) -> Any:
    if func is torch.where and len(args) + len(kwargs) == 1:
        raise NotImplementedError("where: the one-argument form (nonzero) is not supported for NestedTensor")
    return _pointwise(func, args, kwargs)


register([torch.where, torch.Tensor.where], "per-token", _where)


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


register([torch.repeat_interleave, torch.Tensor.repeat_interleave], "batch", _repeat_interleave)


def _dist(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind("dist", args, kwargs, ("input", "other", "p"), {"p": 2})
    ref = _first_nt((p["input"], p["other"]), {})
    a, b = _operand(ref, p["input"], "dist"), _operand(ref, p["other"], "dist")
    return torch.linalg.vector_norm(a - b, ord=p["p"])


register([torch.dist, torch.Tensor.dist], "reduction", _dist, "over the real elements")
