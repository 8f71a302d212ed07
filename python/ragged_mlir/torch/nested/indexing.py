"""Indexing and assignment of :class:`~ragged_mlir.torch.nested.NestedTensor`.

DanLing's conventions: an index tuple addresses the batch first (whatever
``batch_first``), then the item dims. Integer, slice, list, bool and tensor
batch indices select items; the rest of a tuple indexes inside every item.

Vectorized cases (no loop over items): static dims indexed with ints and
slices (a view of the values), an int on the ragged dim of a sequence batch
(``x[:, 0]``, one row per item, a dense result) and a slice of it
(``x[:, 1:]``). Other cases index item by item on the host.
"""

from __future__ import annotations

import numbers
from typing import Any

import torch

from .layout import _is_compiling
from .tensor import NestedTensor

__all__ = ["getitem", "setitem"]


def _is_int(x: Any) -> bool:
    return isinstance(x, (int, numbers.Integral)) and not isinstance(x, bool)


def _int_tensor(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and not x.is_floating_point() and x.dtype != torch.bool


def _batch_picks(nt: NestedTensor, index: Any) -> list[int] | None:
    """Item indices for a batch selector (slice, list, 1-D tensor), else None."""
    b = len(nt)
    if isinstance(index, slice):
        return list(range(*index.indices(b)))
    if isinstance(index, torch.Tensor) and index.dim() == 1:
        index = index.tolist() if index.dtype != torch.bool else [bool(v) for v in index.tolist()]
    if isinstance(index, list):
        if index and all(isinstance(i, bool) for i in index):
            if len(index) != b:
                raise IndexError(f"Boolean index has length {len(index)} but batch size is {b}")
            return [i for i, flag in enumerate(index) if flag]
        picks = []
        for i in index:
            if not _is_int(i):
                raise IndexError(f"NestedTensor batch index: expected ints or bools in the list, got {i!r}")
            if not -b <= int(i) < b:
                raise IndexError(f"index {int(i)} is out of range for a NestedTensor of {b} items")
            picks.append(int(i) % b)
        return picks
    return None


def _take_traced(nt: NestedTensor, index: torch.Tensor) -> NestedTensor:
    """``nt[index]`` for an int tensor under ``torch.compile``: its values
    stay on the device (checked there, negatives counted from the end)."""
    b = len(nt)
    index = index.to(torch.int64)
    torch._assert_async(
        ((index >= -b) & (index < b)).all(),
        "NestedTensor batch index: an index is out of range for the batch size",
    )
    return nt._take_items(torch.where(index < 0, index + b, index))


def _select_items(nt: NestedTensor, picks: list[int]) -> NestedTensor:
    b = len(nt)
    if _is_compiling() and picks != list(range(b)):
        # A slice of the values would start at a device-held offset.
        return nt._take_items(torch.tensor(picks, dtype=torch.int64, device=nt.offsets.device))
    if picks and picks == list(range(picks[0], picks[-1] + 1)):
        a, z = picks[0], picks[-1] + 1
        lo, hi = int(nt.offsets[a]), int(nt.offsets[z])
        offsets = nt.offsets[a : z + 1] - nt.offsets[a]
        parts = [offsets] if len(nt.ragged_dims) == 1 else [p[a : z + 1] - p[a] for p in nt.partitions]
        shapes = None if nt._shapes is None else nt._shapes[a:z]
        if a == 0 and z == b:
            return nt._derive(nt.values)
        return nt._derive(nt.values[lo:hi], offsets=offsets, partitions=parts, shapes=shapes)
    return nt._take_items(torch.tensor(picks, dtype=torch.int64, device=nt.offsets.device))


def _item_index(nt: NestedTensor, i: Any) -> torch.Tensor:
    b = len(nt)
    i = int(i)
    if not -b <= i < b:
        raise IndexError(f"index {i} is out of range for a NestedTensor of {b} items")
    return nt._item(i % b)


def getitem(nt: NestedTensor, index: Any) -> Any:
    if isinstance(index, torch.Tensor) and index.is_nested:
        index = NestedTensor.from_njt(index)
    if isinstance(index, NestedTensor):
        return _nested_index(nt, index)
    if _is_int(index) or (isinstance(index, torch.Tensor) and index.dim() == 0 and _int_tensor(index)):
        return _item_index(nt, index)
    if index is None:
        return nt.unsqueeze(0)
    if index is Ellipsis:
        return nt
    if isinstance(index, (slice, list)) or (isinstance(index, torch.Tensor) and index.dim() == 1):
        if isinstance(index, torch.Tensor) and index.is_floating_point():
            raise IndexError(f"NestedTensor batch index: expected an int or bool tensor, got {index.dtype}")
        if _is_compiling() and isinstance(index, torch.Tensor) and _int_tensor(index):
            return _take_traced(nt, index)
        return _select_items(nt, _batch_picks(nt, index))  # type: ignore[arg-type]
    if isinstance(index, torch.Tensor):
        return _nested_index(nt, nt.nested_like(index, strict=False))
    if isinstance(index, tuple):
        return _tuple_index(nt, index)
    raise ValueError(
        f"NestedTensor indices must be ints, slices, lists, tensors, NestedTensors or tuples, got "
        f"{type(index).__name__} {index!r}"
    )


def _expand(nt: NestedTensor, index: tuple) -> tuple:
    if sum(1 for e in index if e is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    explicit = sum(1 for e in index if e is not Ellipsis and e is not None)
    if explicit > nt.dim():
        raise IndexError(f"too many indices for a NestedTensor of {nt.dim()} dims: {index}")
    if Ellipsis in index:
        k = index.index(Ellipsis)
        index = index[:k] + (slice(None),) * (nt.dim() - explicit) + index[k + 1 :]
    return index


def _tuple_index(nt: NestedTensor, index: tuple) -> Any:
    if not index:
        return nt
    index = _expand(nt, index)
    if any(e is None for e in index):
        # Index without the new axes, then insert them where torch would.
        stripped = tuple(e for e in index if e is not None)
        out = _tuple_index(nt, stripped) if stripped else nt
        pos, kept = [], 0
        for e in index:
            if e is None:
                pos.append(kept + len(pos))
            elif not _is_int(e):
                kept += 1
        for p in pos:
            out = out.unsqueeze(p)
        return out
    head, rest = index[0], tuple(index[1:])
    if isinstance(head, slice) and head == slice(None):
        return _index_items(nt, rest) if rest else nt
    if isinstance(head, torch.Tensor) and head.dim() >= 1 and not isinstance(head, NestedTensor):
        return nt.tensor[index]
    if _is_int(head) or (isinstance(head, torch.Tensor) and head.dim() == 0):
        item = _item_index(nt, head)
        return item[rest] if rest else item
    picks = _batch_picks(nt, head)
    if picks is None:
        raise ValueError(f"NestedTensor batch index: unsupported type {type(head).__name__} {head!r}")
    sel = _select_items(nt, picks)
    if not rest:
        return sel
    return _index_items(sel, rest)


def _plain(e: Any) -> bool:
    return _is_int(e) or isinstance(e, slice)


def _index_items(nt: NestedTensor, rest: tuple) -> Any:
    rank = nt._item_rank()
    rest = rest + (slice(None),) * (rank - len(rest))
    ragged = nt.ragged_dims
    full = slice(None)
    if all(_plain(e) for e in rest):
        on_ragged = [(d, rest[d]) for d in ragged if rest[d] != full]
        if not on_ragged:
            return _static_index(nt, rest)
        if len(ragged) == 1 and len(on_ragged) == 1:
            d, e = on_ragged[0]
            if _is_int(e):
                return _ragged_select(nt, d, int(e), rest)
            if e.step is None or e.step > 0:
                return _ragged_slice(nt, d, e, rest)
    return _per_item_index(nt, rest)


def _static_index(nt: NestedTensor, rest: tuple) -> NestedTensor:
    ragged = nt.ragged_dims
    vidx: list[Any] = [slice(None)]
    dropped = []
    for d in nt._static_dims():
        vidx.append(rest[d])
        if _is_int(rest[d]):
            dropped.append(d)
    values = nt.values[tuple(vidx)]
    new_ragged = tuple(r - sum(1 for d in dropped if d < r) for r in ragged)
    return nt._derive(values, ragged=new_ragged)


def _ragged_select(nt: NestedTensor, d: int, p: int, rest: tuple) -> torch.Tensor:
    """``x[:, p]`` on the ragged dim: row ``p`` of every item, a dense ``[B, ...]``."""
    lengths = nt.lengths
    if _is_compiling():
        torch._assert_async(
            (lengths > p).all() if p >= 0 else (lengths >= -p).all(),
            f"index {p} is out of range for an item of the NestedTensor (ragged dim {d + 1})",
        )
    else:
        short = (lengths <= p).nonzero() if p >= 0 else (lengths < -p).nonzero()
        if short.numel():
            i = int(short[0])
            raise IndexError(
                f"index {p} is out of range for item {i} of length {int(lengths[i])} (ragged dim {d + 1})"
            )
    rows = nt.offsets[:-1] + p if p >= 0 else nt.offsets[1:] + p
    values = nt.values.index_select(0, rows)
    vidx: list[Any] = [slice(None)] + [rest[s] for s in nt._static_dims()]
    values = values[tuple(vidx)]
    if not nt.batch_first and d != 0:
        values = values.movedim(0, 1)
    return values


def _ragged_slice(nt: NestedTensor, d: int, e: slice, rest: tuple) -> NestedTensor:
    """``x[:, a:b:k]`` on the ragged dim of a sequence batch."""
    if _is_compiling():
        raise NotImplementedError(
            "slicing the ragged dim changes every item's length (a data-dependent size); call it outside "
            "torch.compile"
        )
    lengths = nt.lengths
    step = 1 if e.step is None else int(e.step)

    def bound(v: Any, default: torch.Tensor) -> torch.Tensor:
        if v is None:
            return default
        v = int(v)
        t = torch.full_like(lengths, v)
        return torch.where(t < 0, (lengths + t).clamp_min(0), t.minimum(lengths))

    start = bound(e.start, torch.zeros_like(lengths))
    stop = bound(e.stop, lengths)
    ids, coords = nt._row_coords()
    c = coords[0]
    keep = (c >= start[ids]) & (c < stop[ids]) & ((c - start[ids]) % step == 0)
    new_len = torch.where(stop > start, torch.div(stop - start + step - 1, step, rounding_mode="floor"), 0)
    offsets = torch.cat([new_len.new_zeros(1), new_len.cumsum(0)])
    values = nt.values[keep]
    out = nt._derive(values, offsets=offsets, partitions=[offsets], shapes=None)
    statics = list(rest)
    statics[d] = slice(None)
    return _static_index(out, tuple(statics))


def _per_item_index(nt: NestedTensor, rest: tuple) -> Any:
    if _is_compiling():
        raise NotImplementedError(
            f"indexing inside the items with {rest} runs item by item on the host; call it outside torch.compile"
        )
    items = [t[rest] for t in nt._items()]
    if not items:
        return nt._empty()
    left = [d for d in nt.ragged_dims if not _is_int(rest[d])]
    if not left and all(t.shape == items[0].shape for t in items):
        return torch.stack(items)
    return type(nt)(items, **nt._state())


def _canonical(nt: NestedTensor) -> bool:
    return nt.packed_dim_order == tuple(range(nt._item_rank()))


def _nested_index(nt: NestedTensor, index: NestedTensor) -> NestedTensor:
    if len(index) != len(nt):
        raise ValueError(
            f"NestedTensor index: batch length mismatch between self and index: self={len(nt)}, index={len(index)}"
        )
    if (
        index.dtype == torch.bool
        and index.values.shape == nt.values.shape
        and index.ragged_dims == nt.ragged_dims
        and _canonical(nt)
    ):
        nt._check_same_structure(index, "NestedTensor index")
        keep = index.values
        per_row = keep.reshape(keep.shape[0], -1).sum(dim=1) if keep.dim() > 1 else keep.to(torch.int64)
        ids, _ = nt._row_coords()
        lengths = torch.zeros(len(nt), dtype=torch.int64, device=nt.device).index_add_(
            0, ids, per_row.to(torch.int64)
        )
        offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        return NestedTensor._new(nt.values[keep], offsets, [offsets], (0,), None, **nt._state())
    if _is_compiling():
        raise NotImplementedError(
            "indexing a NestedTensor with a NestedTensor runs item by item (eager only)"
        )
    items = [t[i] for t, i in zip(nt._items(), index._items(), strict=True)]
    if not items:
        return nt._empty()
    return type(nt)(items, **nt._state())


# -- assignment -----------------------------------------------------------------------------------------


def _packed_chunk(nt: NestedTensor, item: torch.Tensor) -> torch.Tensor:
    """An item in the packed layout of ``nt``: ``[rows, *static]``."""
    ragged = nt.ragged_dims
    static = nt._static_dims()
    rows = 1
    for d in ragged:
        rows *= item.shape[d]
    return item.permute(list(ragged) + list(static)).reshape((rows,) + tuple(item.shape[d] for d in static))


def _as_item(nt: NestedTensor, value: Any, what: str) -> torch.Tensor:
    if isinstance(value, NestedTensor):
        if len(value) != 1:
            raise ValueError(f"{what}: a NestedTensor value must hold exactly one item, got {len(value)}")
        value = value._item(0)
    if not isinstance(value, torch.Tensor):
        value = torch.tensor(value, dtype=nt.dtype, device=nt.device)
    return value.to(device=nt.device, dtype=nt.dtype)


def _replace_items(nt: NestedTensor, new: dict[int, torch.Tensor]) -> None:
    """Items ``new[i]`` in place of the old ones: written into the values when
    every shape is unchanged, else the batch is repacked."""
    shapes = nt._item_shapes()
    if all(tuple(t.shape) == shapes[i] for i, t in new.items()):
        for i, t in new.items():
            a, b = int(nt.offsets[i]), int(nt.offsets[i + 1])
            nt.values[a:b] = _packed_chunk(nt, t)
        return
    items = list(nt._items())
    for i, t in new.items():
        items[i] = t
    rank = nt._item_rank()
    for i, t in new.items():
        if t.dim() != rank:
            raise ValueError(
                f"NestedTensor assignment: item {i} must have rank {rank} like the others, got shape {tuple(t.shape)}"
            )
    try:
        rebuilt = type(nt)(items, ragged_dims=nt.ragged_dims, **nt._state())
    except ValueError:
        rebuilt = type(nt)(items, **nt._state())
    if nt.values.requires_grad and not rebuilt.values.requires_grad:
        rebuilt.values.requires_grad_(True)
    nt.values = rebuilt.values
    nt.offsets = rebuilt.offsets
    nt.partitions = rebuilt.partitions
    nt._layout = rebuilt._layout
    nt._shapes = rebuilt._shapes


def setitem(nt: NestedTensor, index: Any, value: Any) -> None:
    if isinstance(index, torch.Tensor) and index.is_nested:
        index = NestedTensor.from_njt(index)
    if isinstance(index, NestedTensor) or (
        isinstance(index, torch.Tensor) and index.dtype == torch.bool and index.dim() >= 2
    ):
        mask = index if isinstance(index, NestedTensor) else nt.nested_like(index, strict=False)
        nt._check_same_structure(mask, "NestedTensor assignment")
        if mask.dtype != torch.bool:
            raise IndexError(f"NestedTensor assignment: a NestedTensor index must be bool, got {mask.dtype}")
        keep = mask.values.expand(nt.values.shape)
        if isinstance(value, NestedTensor):
            nt._check_same_structure(value, "NestedTensor assignment")
            nt.values[keep] = value.values.to(nt.dtype).expand(nt.values.shape)[keep]
        elif isinstance(value, torch.Tensor) and value.dim() > 0:
            nt.values[keep] = value.to(device=nt.device, dtype=nt.dtype)
        else:
            nt.values.masked_fill_(keep, value)
        return
    if _is_int(index) or (isinstance(index, torch.Tensor) and index.dim() == 0 and _int_tensor(index)):
        b = len(nt)
        i = int(index)
        if not -b <= i < b:
            raise IndexError(f"index {i} is out of range for a NestedTensor of {b} items")
        item = _as_item(nt, value, "NestedTensor assignment")
        if item.dim() != nt._item_rank():
            raise ValueError(
                f"NestedTensor assignment: Assigned tensor ndim must match existing ndim {nt._item_rank()}, but got "
                f"{item.dim()} (shape {tuple(item.shape)})"
            )
        _replace_items(nt, {i % b: item})
        return
    if isinstance(index, (slice, list)) or (isinstance(index, torch.Tensor) and index.dim() == 1):
        picks = _batch_picks(nt, index)
        assert picks is not None
        if isinstance(value, NestedTensor):
            vals = list(value._items())
        elif isinstance(value, torch.Tensor):
            vals = list(value.unbind(0)) if value.dim() > nt._item_rank() else [value]
        else:
            raise TypeError(
                "NestedTensor assignment: Replacing complete batch elements requires tensor values"
            )
        if len(vals) == 1 and len(picks) > 1:
            vals = vals * len(picks)
        if len(vals) != len(picks):
            raise ValueError(
                f"NestedTensor assignment: Size mismatch: tried to assign {len(vals)} values to {len(picks)} indices"
            )
        _replace_items(
            nt, {i: _as_item(nt, v, "NestedTensor assignment") for i, v in zip(picks, vals, strict=True)}
        )
        return
    if isinstance(index, tuple):
        if not index:
            return
        index = _expand(nt, index)
        if len(index) == 1:
            setitem(nt, index[0], value)
            return
        head, rest = index[0], tuple(index[1:])
        if _is_int(head):
            picks = [int(head) % len(nt) if -len(nt) <= int(head) < len(nt) else None]
            if picks[0] is None:
                raise IndexError(f"index {int(head)} is out of range for a NestedTensor of {len(nt)} items")
        else:
            picks = _batch_picks(nt, head)
            if picks is None:
                raise ValueError(
                    f"NestedTensor assignment: unsupported batch index {type(head).__name__} {head!r}"
                )
        rank = nt._item_rank()
        full = rest + (slice(None),) * (rank - len(rest))
        scalar = not isinstance(value, (torch.Tensor, NestedTensor)) or (
            isinstance(value, torch.Tensor) and not isinstance(value, NestedTensor) and value.dim() == 0
        )
        if (
            picks == list(range(len(nt)))
            and scalar
            and all(_plain(e) for e in full)
            and all(full[d] == slice(None) for d in nt.ragged_dims)
        ):
            vidx: list[Any] = [slice(None)] + [full[d] for d in nt._static_dims()]
            nt.values[tuple(vidx)] = value
            return
        if isinstance(value, NestedTensor):
            if len(value) != len(picks):
                raise ValueError(
                    f"NestedTensor assignment: Size mismatch: tried to assign {len(value)} values to {len(picks)} indices"
                )
            vals: list[Any] = list(value._items())
        else:
            vals = [value] * len(picks)
        new = {}
        for i, v in zip(picks, vals, strict=True):
            elem = nt._item(i).clone()
            elem[rest] = v
            new[i] = elem
        _replace_items(nt, new)
        return
    raise ValueError(f"NestedTensor assignment: unsupported index type {type(index).__name__} {index!r}")
