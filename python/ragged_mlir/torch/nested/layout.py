"""What the NestedTensor class and its op families share about layouts: the
errors, the traced shape, dim normalisation, and building the packed
storage from items (promotion, ragged dims, offsets checks)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from .tensor import NestedTensor


class NestedBroadcastError(ValueError, RuntimeError):
    """A dense operand does not broadcast against a NestedTensor's logical shape.

    A ``ValueError`` (bad argument) and a ``RuntimeError`` (what torch raises
    for dense tensors whose sizes do not match)."""


def _is_compiling() -> bool:
    try:
        return torch.compiler.is_compiling()
    except AttributeError:  # pragma: no cover - older torch
        return False


def _mark_batch_dims(values: torch.Tensor, partitions: Sequence[torch.Tensor]) -> None:
    """Marks the dims that change from batch to batch (the packed rows, the
    partitions' entries) dynamic for ``torch.compile``, weakly (a hint that
    a static graph may still override): a compile without ``dynamic=True``
    then traces lengths and batch sizes symbolically on its first call and
    keeps every other size static, such as a captured weight's, whose GEMMs
    IREE can then data-tile. Tensors carry the mark as an attribute; their
    data are untouched."""
    if _is_compiling():
        return
    for t in (values, *partitions):
        if t.dim() > 0:
            torch._dynamo.maybe_mark_dynamic(t, 0)


def _prod(sizes) -> Any:
    out = 1
    for s in sizes:
        out = out * s
    return out


def _norm_dim(dim: int, n: int, fname: str) -> int:
    if isinstance(dim, bool) or not isinstance(dim, (int, numbers.Integral, torch.SymInt)):
        raise TypeError(f"{fname}: dim must be an int, got {type(dim).__name__}")
    dim = int(dim)
    if not -n <= dim < n:
        raise IndexError(
            f"{fname}: dim {dim} is out of range for a NestedTensor of {n} dims ([{-n}, {n - 1}])"
        )
    return dim % n


class _TracedShape(tuple):
    """``NestedTensor.shape`` under ``torch.compile``: each entry is computed
    when read, so ``x.shape[0]`` and ``x.shape[-1]`` do not ask for the maximum
    extent of a ragged dim (a device read); iterating reads all of them."""

    def __new__(cls, owner: NestedTensor):
        obj = super().__new__(cls, [None] * owner.dim())
        obj._owner = owner
        return obj

    def __getitem__(self, i):
        if isinstance(i, slice):
            return tuple(self._owner.size(j) for j in range(*i.indices(len(self))))
        return self._owner.size(i)

    def __iter__(self):
        return iter([self._owner.size(j) for j in range(len(self))])

    def __eq__(self, other):
        return tuple(self) == tuple(other)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = tuple.__hash__

    def numel(self):
        return _prod(tuple(self))


_KEEP = object()
_LAYOUTS: dict[str, tuple[int, ...]] = {"": ()}


# -- construction helpers -------------------------------------------------------------------


def _layout_key(ragged: Sequence[int]) -> str:
    """The string key of a tuple of ragged dims (see ``NestedTensor._ragged``)."""
    key = ",".join([str(int(r)) for r in ragged])
    if not _is_compiling() and key not in _LAYOUTS:
        _LAYOUTS[key] = tuple(int(r) for r in ragged)
    return key


def _check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return value


def _check_float(value: Any, name: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be float-convertible, got {type(value).__name__} {value!r}") from e


def _check_offsets(offsets: torch.Tensor, rows: int, name: str) -> None:
    bounds = offsets.tolist()
    if bounds[0] != 0:
        raise ValueError(f"{name}: must start at 0, got {bounds[0]}")
    for i in range(1, len(bounds)):
        if bounds[i] < bounds[i - 1]:
            raise ValueError(
                f"{name}: must be non-decreasing, but offsets[{i}] = {bounds[i]} < offsets[{i - 1}] = {bounds[i - 1]}"
            )
    if bounds[-1] != rows:
        raise ValueError(
            f"{name}: the last offset must equal the number of rows of values ({rows}), got {bounds[-1]}"
        )


def _pin(values: torch.Tensor) -> torch.Tensor:
    if values.device.type != "cpu":
        return values
    try:
        return values.pin_memory()
    except RuntimeError as e:
        raise RuntimeError(f"pin_memory: cannot pin the packed values: {e}") from e


def _items_from_args(tensors: tuple, dtype: Any, device: Any, nested: type) -> list[torch.Tensor]:
    """The items of ``NestedTensor(*tensors)`` as tensors; ``nested`` is the
    class (a NestedTensor is refused as an item)."""
    if len(tensors) == 1 and not isinstance(tensors[0], torch.Tensor):
        arg = tensors[0]
        if isinstance(arg, nested):
            raise TypeError(
                "NestedTensor: items must be tensors, got a NestedTensor (nesting is not supported; use .clone())"
            )
        if isinstance(arg, (str, bytes)) or not isinstance(arg, Iterable):
            raise ValueError(
                f"tensors: expected tensors or one iterable of tensors (or of nested lists of numbers), got "
                f"{type(arg).__name__} {arg!r}"
            )
        tensors = tuple(arg)
    if len(tensors) == 1 and isinstance(tensors[0], torch.Tensor) and tensors[0].is_nested:
        tensors = tuple(tensors[0].unbind())
    items: list[torch.Tensor] = []
    for i, x in enumerate(tensors):
        if isinstance(x, nested):
            raise TypeError(
                f"tensors[{i}]: items must be tensors, got a NestedTensor (nesting is not supported; use .unbind())"
            )
        if isinstance(x, torch.Tensor):
            t = x if type(x) is torch.Tensor else x.as_subclass(torch.Tensor)
        else:
            try:
                t = torch.tensor(x, dtype=dtype, device=device)
            except (TypeError, ValueError, RuntimeError) as e:
                raise ValueError(
                    f"tensors[{i}]: cannot convert {type(x).__name__} {x!r} to a tensor: {e}"
                ) from e
        items.append(t)
    if items:
        rank = items[0].dim()
        for i, t in enumerate(items):
            if t.dim() != rank:
                raise ValueError(
                    f"tensors[{i}]: expected rank {rank} like tensors[0] (shape {tuple(items[0].shape)}), got shape "
                    f"{tuple(t.shape)}; all items must have the same number of dims"
                )
        if device is None:
            for i, t in enumerate(items):
                if t.device != items[0].device:
                    raise ValueError(
                        f"tensors[{i}]: expected device {items[0].device} like tensors[0], got {t.device} (pass "
                        f"device= to move them)"
                    )
    return items


def _resolve_ragged(shapes: list[tuple[int, ...]], ragged_dims: Sequence[int] | None) -> tuple[int, ...]:
    rank = len(shapes[0]) if shapes else 0
    if ragged_dims is None:
        if rank == 0:
            return ()
        varying = tuple(d for d in range(rank) if len({s[d] for s in shapes}) > 1)
        return varying or (0,)
    norm = []
    for d in ragged_dims:
        if isinstance(d, bool) or not isinstance(d, (int, numbers.Integral)):
            raise TypeError(f"ragged_dims: expected ints, got {type(d).__name__} {d!r}")
        nd = int(d) + rank if int(d) < 0 else int(d)
        if not 0 <= nd < rank:
            raise ValueError(
                f"ragged_dims: expected item dims in [0, {rank}) (items have rank {rank}), got {tuple(ragged_dims)}"
            )
        if nd in norm:
            raise ValueError(f"ragged_dims: duplicate dim {d} in {tuple(ragged_dims)}")
        norm.append(nd)
    for i, s in enumerate(shapes):
        for d in range(rank):
            if d not in norm and s[d] != shapes[0][d]:
                raise ValueError(
                    f"tensors[{i}]: dim {d} is not ragged (ragged_dims={tuple(norm)}) and must match tensors[0] "
                    f"(shape {shapes[0]}), got shape {s}"
                )
    return tuple(norm)


def _pack(items: list[torch.Tensor], ragged_dims: Any, dtype: Any, device: Any):
    if not items:
        values = torch.empty(0, dtype=dtype or torch.get_default_dtype(), device=device)
        offsets = torch.zeros(1, dtype=torch.int64, device=values.device)
        return values, offsets, [], (), []
    if dtype is None:
        dtype = items[0].dtype
        for t in items[1:]:
            dtype = torch.promote_types(dtype, t.dtype)
    shapes = [tuple(int(s) for s in t.shape) for t in items]
    ragged = _resolve_ragged(shapes, ragged_dims)
    rank = len(shapes[0])
    static = [d for d in range(rank) if d not in ragged]
    order = list(ragged) + static
    identity = order == list(range(rank))
    packed = []
    for t, s in zip(items, shapes, strict=True):
        rows = math.prod(s[d] for d in ragged)
        p = t if identity else t.permute(order)
        packed.append(p.reshape((rows,) + tuple(s[d] for d in static)))
    target = torch.device(device) if device is not None else items[0].device
    values = (
        torch.cat([p.to(device=target, dtype=dtype) for p in packed])
        if rank
        else torch.stack([t.to(device=target, dtype=dtype) for t in items])
    )
    rows = [math.prod(s[d] for d in ragged) for s in shapes]
    offsets = torch.tensor([0] + rows, dtype=torch.int64, device=target).cumsum(0)
    if len(ragged) == 1:
        partitions = [offsets]
    else:
        partitions = [
            torch.tensor([0] + [s[d] for s in shapes], dtype=torch.int64, device=target).cumsum(0)
            for d in ragged
        ]
    return values, offsets, partitions, ragged, shapes


# torch.load(weights_only=True) may rebuild NestedTensors: their state is
# plain tensors, tuples, lists and numbers.
