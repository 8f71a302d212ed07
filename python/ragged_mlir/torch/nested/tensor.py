"""The ``NestedTensor`` class: a batch of tensors of different shapes, stored packed.

Layout
------
Every item has the same rank ``r``; its dims are either *ragged* (their extent
differs between items) or *static* (the same for all items). The class keeps

* ``values``: ``[rows, *static]``, every item flattened row-major over its
  ragged dims into rows, the static dims kept, in their logical order;
* ``offsets``: int64 ``[B + 1]``, the first row of every item;
* ``partitions``: one int64 ``[B + 1]`` tensor per ragged dim, the cumulative
  extents of that dim over the items (``[offsets]`` with one ragged dim);
* ``ragged_dims``: the logical item dims that are ragged, in the order they
  are flattened into rows (DanLing's layout: ``packed_dim_order`` is
  ``ragged_dims`` followed by the static dims).

The logical position of a ragged dim is free: ``[B, L(b), H, d]`` and
``[B, H, L(b), d]`` (``x.transpose(1, 2)``) share the packed ``[N, H, d]``
values, only ``ragged_dims`` changes (``(0,)`` or ``(1,)``). Views that move
dims therefore never copy, and attention on ``[B, H, L(b), d]`` reads the
``[N, H, d]`` rows directly. Images ``[C, H_b, W_b]`` are ragged in dims
``(1, 2)`` and stored channels-last, ``values`` ``[sum H_b W_b, C]``.

Scalar items (rank 0) are one row each; the empty batch has rank 0 too.

Compute paths read no tensor data on the host: per-row batch ids and
coordinates come from the offsets with vectorized torch ops, so Dynamo traces
models into one graph. Python-side caches (per-item shapes, maxima) are only
filled eagerly. Views that need per-item shapes (``tensor``, ``mask``,
``unbind``, ``tolist``) and the few per-item fallbacks read them from the
host.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import torch

from .. import ops as _ops  # registers torch.ops.ragged.*

__all__ = ["NestedTensor", "NestedBroadcastError"]


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


class NestedTensor:
    r"""A batch of tensors of different shapes, stored packed (see the module doc).

    ``NestedTensor(*tensors, dtype=None, device=None, requires_grad=None,
    pin_memory=False, ragged_dims=None, batch_first=True, padding_value=0.0,
    mask_value=False)`` takes tensors (or nested lists of numbers) as separate
    arguments or as one iterable; one tensor is one item. Items must have the
    same rank; their dtypes are promoted together unless ``dtype`` is given;
    ``device`` moves them. The inputs are copied once into ``values`` and never
    modified (``requires_grad`` applies to the packed values).

    ``ragged_dims`` fixes which item dims may differ between items (others must
    agree); by default the dims that differ are ragged, and the first dim when
    none does. ``batch_first=False`` puts the batch dim second in the logical
    shape (``[L, B, ...]``). ``padding_value`` fills :attr:`tensor`;
    :attr:`mask` holds ``mask_value`` at padding and ``not mask_value`` on real
    elements.
    """

    # A zero-element tensor ``[0, max extents...]`` (physical order of the
    # ragged dims) built with a batch from the host's view of it: under
    # torch.compile its sizes are the ragged sizes, input sizes the host
    # knows, so ``x.size(1)`` needs no device read (see _max_extents). None
    # when the maxima are not known without one.
    _probe: torch.Tensor | None = None

    # -- construction ------------------------------------------------------------
    def __init__(
        self,
        *tensors: Any,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
        requires_grad: bool | None = None,
        pin_memory: bool = False,
        ragged_dims: Sequence[int] | None = None,
        batch_first: bool = True,
        padding_value: float = 0.0,
        mask_value: bool = False,
    ) -> None:
        items = _items_from_args(tensors, dtype, device)
        values, offsets, partitions, ragged, shapes = _pack(items, ragged_dims, dtype, device)
        if requires_grad is not None:
            values.requires_grad_(bool(requires_grad))
        if pin_memory:
            values = _pin(values)
        self._set(values, offsets, partitions, ragged, shapes, batch_first, padding_value, mask_value)
        _mark_batch_dims(self.values, [self.offsets, *self.partitions])
        self._attach_probe()

    def _set(
        self, values, offsets, partitions, ragged, shapes, batch_first, padding_value, mask_value
    ) -> None:
        self._assign(
            values,
            offsets,
            partitions,
            _layout_key(ragged),
            shapes,
            _check_bool(batch_first, "batch_first"),
            _check_float(padding_value, "padding_value"),
            _check_bool(mask_value, "mask_value"),
        )

    def _assign(
        self, values, offsets, partitions, layout, shapes, batch_first, padding_value, mask_value
    ) -> None:
        # Checked values only: Dynamo traces this for every op's result.
        self.values = values
        self.offsets = offsets
        self.partitions = list(partitions)
        self._layout = layout
        self._shapes_cache = shapes
        self._batch_first = batch_first
        self._padding_value = padding_value
        self._mask_value = mask_value

    @classmethod
    def _new(
        cls,
        values,
        offsets,
        partitions,
        ragged,
        shapes,
        batch_first=True,
        padding_value=0.0,
        mask_value=False,
    ) -> NestedTensor:
        obj = cls.__new__(cls)
        obj._set(values, offsets, partitions, ragged, shapes, batch_first, padding_value, mask_value)
        return obj

    def _state(self) -> dict[str, Any]:
        return {
            "batch_first": self._batch_first,
            "padding_value": self._padding_value,
            "mask_value": self._mask_value,
        }

    def _derive(
        self,
        values: torch.Tensor,
        ragged: tuple[int, ...] | None = None,
        offsets: torch.Tensor | None = None,
        partitions: list[torch.Tensor] | None = None,
        shapes: Any = _KEEP,
        batch_first: bool | None = None,
    ) -> NestedTensor:
        """A NestedTensor with the structure and state of ``self`` (unless
        overridden) and new packed values. Item shapes are kept as a cache
        only when the layout and static sizes did not change."""
        # Dynamo traces this for every op's result: the layout key and the
        # state are carried over, not rebuilt and checked again.
        if ragged is None:
            layout, count = self._layout, len(self._ragged)
        else:
            layout, count = _layout_key(ragged), len(ragged)
        offsets = self.offsets if offsets is None else offsets
        same_partitions = partitions is None and offsets is self.offsets
        if partitions is None:
            partitions = [offsets] if count == 1 else (self.partitions if offsets is self.offsets else [])
        if shapes is _KEEP:
            same = (
                layout == self._layout
                and offsets is self.offsets
                and values.shape[1:] == self.values.shape[1:]
            )
            shapes = self._shapes if same else None
        batch_first = self._batch_first if batch_first is None else _check_bool(batch_first, "batch_first")
        obj = type(self).__new__(type(self))
        obj._assign(
            values, offsets, partitions, layout, shapes, batch_first, self._padding_value, self._mask_value
        )
        # The maxima stay while the extents do: same partitions, or (eagerly,
        # moved to another device) the same host item shapes; with one ragged
        # dim wherever it moves (a transpose), with several in the same order.
        kept = same_partitions or (shapes is not None and shapes is self._shapes)
        if kept and (layout == self._layout or count == len(self._ragged) == 1) and self._probe is not None:
            obj._probe = self._probe.to(values.device)
        return obj

    @classmethod
    def from_packed(
        cls,
        values: torch.Tensor,
        offsets: torch.Tensor,
        *,
        batch_first: bool = True,
        padding_value: float = 0.0,
        mask_value: bool = False,
    ) -> NestedTensor:
        """Wraps packed ``values`` ``[rows, d...]`` and ``offsets`` ``[B + 1]``
        (one ragged dim, ``[B, L(b), d...]``) without copying them.

        Offsets of another integer dtype are converted to int64. Eagerly the
        offsets are checked (start at 0, non-decreasing, end at ``rows``);
        under ``torch.compile`` only their rank is."""
        if not isinstance(values, torch.Tensor) or values.dim() < 1:
            raise TypeError(
                f"values: expected a tensor of rank >= 1 ([rows, ...]), got "
                f"{tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__}"
            )
        if not isinstance(offsets, torch.Tensor):
            raise TypeError(f"offsets: expected an int64 tensor, got {type(offsets).__name__}")
        if offsets.dim() != 1 or offsets.shape[0] < 1:
            raise ValueError(
                f"offsets: expected a 1-D tensor of B + 1 >= 1 entries, got shape {tuple(offsets.shape)}"
            )
        if offsets.dtype.is_floating_point or offsets.dtype.is_complex or offsets.dtype == torch.bool:
            raise TypeError(f"offsets: expected an int64 tensor, got dtype {offsets.dtype}")
        if offsets.dtype != torch.int64:
            offsets = offsets.to(torch.int64)
        if offsets.device != values.device:
            raise ValueError(f"offsets: expected device {values.device} like values, got {offsets.device}")
        if not _is_compiling():
            _check_offsets(offsets, values.shape[0], "offsets")
        _mark_batch_dims(values, [offsets])
        out = cls._new(values, offsets, [offsets], (0,), None, batch_first, padding_value, mask_value)
        out._attach_probe()
        return out

    def _attach_probe(self) -> None:
        """Builds :attr:`_probe` from the host's item shapes (eagerly only)."""
        if _is_compiling() or not self._ragged:
            return
        if self._shapes is not None:
            maxes = self._max_extents()
        else:  # from_packed: one reduction, not a walk over the items
            maxes = [int(self._extents(j).max()) if len(self) else 0 for j in range(len(self._ragged))]
        probe = torch.empty((0, *maxes), dtype=torch.uint8, device=self.values.device)
        for d in range(1, probe.dim()):
            torch._dynamo.maybe_mark_dynamic(probe, d)
        self._probe = probe

    @classmethod
    def from_njt(cls, njt: torch.Tensor, **kwargs: Any) -> NestedTensor:
        """From a PyTorch nested tensor. A contiguous jagged-layout NJT with
        its ragged dim at 1 is wrapped without a copy; any other (strided
        layout, holes, another ragged dim) is unbound into items. ``kwargs``:
        ``batch_first``, ``padding_value``, ``mask_value``."""
        if not isinstance(njt, torch.Tensor) or not njt.is_nested:
            raise TypeError(f"from_njt: expected a torch.nested tensor, got {type(njt).__name__}")
        if njt.layout == torch.jagged and getattr(njt, "_ragged_idx", 1) == 1 and njt.lengths() is None:
            return cls.from_packed(njt.values(), njt.offsets(), **kwargs)
        return cls(list(njt.unbind()), **kwargs)

    def to_njt(self) -> torch.Tensor:
        """A ``torch.jagged`` nested tensor ``[B, j, d...]`` sharing ``values``
        (needs one ragged dim at item dim 0; NJTs are always batch-first)."""
        if self._ragged != (0,):
            raise NotImplementedError(
                f"to_njt: needs one ragged dim at item dim 0 ([B, L(b), ...]); this NestedTensor is ragged in "
                f"item dims {self._ragged}"
            )
        return torch.nested.nested_tensor_from_jagged(self.values, self.offsets)

    def to_torch_nested(self) -> torch.Tensor:
        """DanLing's name: a ``torch.jagged`` nested tensor of the items when
        they have rank >= 1 (the strided layout for scalar items)."""
        items = list(self._items())
        if not items or all(t.dim() > 0 for t in items):
            return torch.nested.nested_tensor(items, layout=torch.jagged)
        return torch.nested.nested_tensor(items)

    @classmethod
    def from_danling(cls, nt: Any) -> NestedTensor:
        """From a DanLing ``NestedTensor`` (duck-typed; DanLing is not needed).

        Uses its items (``_storage``) when it has them, else its ``.tensor``
        and ``.mask``. Keeps its ``batch_first``, ``padding_value`` and
        ``mask_value``."""
        state = {
            "batch_first": bool(getattr(nt, "batch_first", True)),
            "padding_value": float(getattr(nt, "padding_value", 0.0)),
            "mask_value": bool(getattr(nt, "mask_value", False)),
        }
        for name in ("storage", "_storage"):
            items = getattr(nt, name, None)
            if isinstance(items, (list, tuple)) and all(isinstance(x, torch.Tensor) for x in items):
                plain = [x.as_subclass(torch.Tensor) if type(x) is not torch.Tensor else x for x in items]
                ragged = getattr(nt, "ragged_dims", None)
                if plain:
                    return cls(plain, ragged_dims=ragged if ragged else None, **state)
                return cls([], dtype=getattr(nt, "dtype", None), **state)
        tensor = getattr(nt, "tensor", None)
        mask = getattr(nt, "mask", None)
        if callable(tensor):
            tensor = tensor()
        if callable(mask):
            mask = mask()
        if not isinstance(tensor, torch.Tensor) or not isinstance(mask, torch.Tensor):
            raise TypeError(
                f"from_danling: expected an object with a list of tensors (_storage) or .tensor and .mask, "
                f"got {type(nt).__name__}"
            )
        return cls.from_tensor_mask(tensor, mask, **state)

    @classmethod
    def from_tensor_mask(
        cls, tensor: torch.Tensor, mask: torch.Tensor, *, batched: bool = False, **kwargs: Any
    ) -> NestedTensor:
        """From a padded ``tensor`` and its ``mask`` (``mask_value`` marks
        padding: with the default ``False``, ``True`` marks real elements).

        ``mask`` is ``[B, ...]`` over a prefix of ``tensor``'s dims (the batch
        dim second when ``batch_first=False``); each item is the rectangle of
        its real elements, which must start at 0 in every dim. A 1-D ``mask``
        selects the real entries of a 1-D ``tensor`` as one item, or, with
        ``batched=True``, selects items along the batch dim."""
        if not isinstance(tensor, torch.Tensor) or not isinstance(mask, torch.Tensor):
            raise TypeError(
                f"from_tensor_mask: expected tensors for tensor and mask, got {type(tensor).__name__} "
                f"and {type(mask).__name__}"
            )
        mask_value = bool(kwargs.get("mask_value", False))
        batch_first = bool(kwargs.get("batch_first", True))
        kwargs.setdefault("dtype", tensor.dtype)
        real = mask.to(torch.bool)
        if mask_value:
            real = ~real
        if real.dim() == 1:
            if batched:
                axis = 0 if tensor.dim() <= 1 or batch_first else 1
                if real.shape[0] != tensor.shape[axis]:
                    raise ValueError(
                        f"from_tensor_mask: Tensor/mask batch dimension mismatch: mask has {real.shape[0]} "
                        f"entries, tensor {tensor.shape[axis]} along dim {axis}"
                    )
                picks = real.nonzero().flatten().tolist()
                return cls([tensor.select(axis, i) for i in picks], **kwargs)
            return cls([tensor[real]], **kwargs)
        if not batch_first:
            tensor = tensor.transpose(0, 1)
            real = real.transpose(0, 1)
        if real.shape[0] != tensor.shape[0]:
            raise ValueError(
                f"from_tensor_mask: Tensor/mask batch dimension mismatch: {tensor.shape[0]} vs {real.shape[0]}"
            )
        if tuple(real.shape) != tuple(tensor.shape[: real.dim()]):
            raise ValueError(
                f"from_tensor_mask: mask shape {tuple(real.shape)} must prefix tensor shape {tuple(tensor.shape)}"
            )
        items = []
        for b in range(real.shape[0]):
            m = real[b]
            extents = []
            for d in range(m.dim()):
                others = tuple(e for e in range(m.dim()) if e != d)
                along = m.any(dim=others) if others else m
                hit = along.nonzero()
                extents.append(int(hit[-1]) + 1 if hit.numel() else 0)
            box = tuple(slice(0, e) for e in extents)
            inside = torch.zeros_like(m)
            inside[box] = True
            if not torch.equal(inside, m):
                raise ValueError(
                    f"from_tensor_mask: mask[{b}] is not a valid prefix mask (its real elements must fill the "
                    f"rectangle {tuple(extents)} starting at 0; interior gaps cannot be represented)"
                )
            items.append(tensor[b][box])
        if not items:
            return cls([], **kwargs)
        return cls(items, **kwargs)

    @classmethod
    def from_concatenated(
        cls, concat: torch.Tensor, shapes: Sequence[Sequence[int]], **kwargs: Any
    ) -> NestedTensor:
        """Inverse of :meth:`concatenate`: items of the given ``shapes`` from
        the packed ``concat`` (laid out for ``ragged_dims``, which defaults to
        the dims in which ``shapes`` differ)."""
        shapes = [tuple(int(s) for s in shape) for shape in shapes]
        if not shapes:
            kwargs.setdefault("dtype", concat.dtype)
            kwargs.setdefault("device", concat.device)
            return cls([], **kwargs)
        total = sum(math.prod(s) for s in shapes)
        if concat.numel() != total:
            raise ValueError(
                f"from_concatenated: concat has {concat.numel()} elements but the shapes {shapes} hold {total}"
            )
        ragged = _resolve_ragged(shapes, kwargs.get("ragged_dims"))
        rank = len(shapes[0])
        static = [d for d in range(rank) if d not in ragged]
        items = []
        start = 0
        flat = concat.reshape(-1) if concat.dim() != 1 else concat
        for s in shapes:
            n = math.prod(s)
            phys = tuple(s[d] for d in ragged) + tuple(s[d] for d in static)
            chunk = flat[start : start + n].reshape(phys)
            inv = [0] * rank
            for pos, d in enumerate(list(ragged) + static):
                inv[d] = pos
            items.append(chunk.permute(inv) if rank else chunk)
            start += n
        kwargs["ragged_dims"] = ragged
        return cls(items, **kwargs)

    def concatenate(self) -> tuple[torch.Tensor, tuple[torch.Size, ...]]:
        """``(values, item shapes)``; :meth:`from_concatenated` with
        ``ragged_dims=self.ragged_dims`` rebuilds the NestedTensor."""
        if len(self) == 0:
            return self.values.new_empty(0), ()
        return self.values, self.item_shapes

    def nested_like(self, tensor: torch.Tensor | NestedTensor, strict: bool = True) -> NestedTensor:
        """A NestedTensor with the structure of ``self`` holding ``tensor``'s
        elements at the real positions (``tensor``: padded like :attr:`tensor`,
        or broadcastable to it; with ``strict`` its shape must equal
        :attr:`shape`; without, it may be larger). A NestedTensor is cloned."""
        if isinstance(tensor, NestedTensor):
            if len(tensor) != len(self):
                raise ValueError(
                    f"nested_like: The batch size of NestedTensor and input tensor does not match, "
                    f"{len(self)} != {len(tensor)}"
                )
            if strict:
                self._check_same_structure(tensor, "nested_like")
            return tensor.clone()
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"nested_like: expected a tensor, got {type(tensor).__name__}")
        if strict and not _is_compiling() and tuple(tensor.shape) != tuple(self.shape):
            raise ValueError(
                f"nested_like: The shape of NestedTensor and input tensor does not match, "
                f"{tuple(self.shape)} != {tuple(tensor.shape)}"
            )
        axis = self._batch_axis()
        if tensor.dim() == self.dim() and tensor.shape[axis] != len(self):
            raise ValueError(
                f"nested_like: The batch size of NestedTensor and input tensor does not match, "
                f"{len(self)} != {tensor.shape[axis]}"
            )
        if not strict and not _is_compiling() and tensor.dim() == self.dim():
            sizes = list(tensor.shape)
            sizes.pop(axis)
            shapes = self._item_shapes()
            if any(s[d] > sizes[d] for s in shapes for d in range(len(sizes))):
                # Smaller than some item: every item cropped to what the tensor holds (DanLing).
                dense = tensor if self._batch_first else tensor.movedim(1, 0)
                items = [
                    dense[b][tuple(slice(0, min(e, sizes[d])) for d, e in enumerate(s))]
                    for b, s in enumerate(shapes)
                ]
                return type(self)(items, device=self.device, **self._state())
        values = self._dense_operand(tensor, "nested_like", larger_ok=not strict)
        return self._derive(values.expand(self.values.shape).to(device=self.device).contiguous())

    def packed_like(self, values: torch.Tensor) -> NestedTensor:
        """New packed ``values`` of the same shape as :attr:`values`, with
        this structure (no copy)."""
        if not isinstance(values, torch.Tensor) or values.shape != self.values.shape:
            raise ValueError(
                f"packed_like: values must have the packed shape {tuple(self.values.shape)}, got "
                f"{tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__}"
            )
        return self._derive(values)

    def packed_with_static_tail(self, values: torch.Tensor) -> NestedTensor:
        """New packed ``values`` with the same rows and new static dims (no copy)."""
        if (
            not isinstance(values, torch.Tensor)
            or values.dim() < 1
            or values.shape[0] != self.values.shape[0]
        ):
            raise ValueError(
                f"packed_with_static_tail: values must have {self.values.shape[0]} rows, got "
                f"{tuple(values.shape) if isinstance(values, torch.Tensor) else type(values).__name__}"
            )
        if values.dim() == 1 and not self._ragged:
            raise ValueError("packed_with_static_tail: scalar items have no rows to keep")
        return self._derive(values)

    def packed_with_lengths(self, values: torch.Tensor, lengths: torch.Tensor) -> NestedTensor:
        """New packed ``values`` ``[sum(lengths), ...]`` with one ragged dim of
        the given per-item ``lengths`` (same batch size and state)."""
        lengths = torch.as_tensor(lengths, device=values.device)
        if lengths.dim() != 1 or lengths.shape[0] != len(self):
            raise ValueError(
                f"packed_with_lengths: lengths must be [B={len(self)}], got shape {tuple(lengths.shape)}"
            )
        offsets = torch.cat([lengths.new_zeros(1), lengths.to(torch.int64).cumsum(0)])
        if not _is_compiling():
            _check_offsets(offsets, values.shape[0], "lengths")
        return self._new(values, offsets, [offsets], (0,), None, **self._state())

    # -- runtime configuration ----------------------------------------------------
    @property
    def batch_first(self) -> bool:
        """Whether the batch dim is the first logical dim (else the second)."""
        return self._batch_first

    @batch_first.setter
    def batch_first(self, value: bool) -> None:
        self._batch_first = _check_bool(value, "batch_first")

    @property
    def padding_value(self) -> float:
        """The value :attr:`tensor` holds at padding positions."""
        return self._padding_value

    @padding_value.setter
    def padding_value(self, value: float) -> None:
        self._padding_value = _check_float(value, "padding_value")

    @property
    def mask_value(self) -> bool:
        """The value :attr:`mask` holds at padding positions."""
        return self._mask_value

    @mask_value.setter
    def mask_value(self, value: bool) -> None:
        self._mask_value = _check_bool(value, "mask_value")

    # -- layout -----------------------------------------------------------------
    @property
    def _shapes(self) -> list[tuple[int, ...]] | None:
        # Per-item shapes are a host-side cache: under torch.compile they are
        # never read, or Dynamo would guard on (and recompile for) every length.
        if _is_compiling():
            return None
        return self._shapes_cache

    @_shapes.setter
    def _shapes(self, value: list[tuple[int, ...]] | None) -> None:
        self._shapes_cache = value

    @property
    def _ragged(self) -> tuple[int, ...]:
        # The ragged dims live in a string key: Dynamo (torch 2.13, dynamic=True)
        # evaluates ``d in t`` wrongly for a tuple of ints held as an attribute
        # of a traced object, while tuples from a module-level table or parsed
        # from a string compare correctly.
        key = self._layout
        hit = _LAYOUTS.get(key)
        if hit is None:
            hit = tuple([int(c) for c in key.split(",")]) if key else ()
        return hit

    @property
    def ragged_dims(self) -> tuple[int, ...]:
        """The ragged item dims (0 = each item's first dim), in the order they
        are flattened into the rows of :attr:`values`."""
        return self._ragged

    @property
    def packed_dim_order(self) -> tuple[int, ...]:
        """Item dims in the order of the packed storage: the ragged dims, then
        the static dims (which :attr:`values` keeps in logical order)."""
        return self._ragged + self._static_dims()

    def _item_rank(self) -> int:
        return len(self._ragged) + self.values.dim() - 1

    def _static_dims(self) -> tuple[int, ...]:
        ragged = self._ragged
        return tuple(d for d in range(self._item_rank()) if d not in ragged)

    def _value_dim(self, item_dim: int) -> int:
        """The dim of :attr:`values` holding static item dim ``item_dim``."""
        return 1 + self._static_dims().index(item_dim)

    def _batch_axis(self) -> int:
        return 0 if self._batch_first or self._item_rank() == 0 else 1

    def _logical_axis(self, item_dim: int) -> int:
        """Logical dim of item dim ``item_dim``."""
        if self._batch_first:
            return item_dim + 1
        return 0 if item_dim == 0 else item_dim + 1

    def _item_dim(self, dim: int, fname: str) -> int | None:
        """Item dim of logical ``dim`` (None for the batch dim)."""
        dim = _norm_dim(dim, self.dim(), fname)
        if self._batch_first or self._item_rank() == 0:
            return None if dim == 0 else dim - 1
        if dim == 1:
            return None
        return 0 if dim == 0 else dim - 1

    def _extents(self, j: int) -> torch.Tensor:
        """Per-item extents of the ``j``-th ragged dim (physical order), ``[B]``."""
        p = self.partitions[j]
        return p[1:] - p[:-1]

    @property
    def lengths(self) -> torch.Tensor:
        """Rows of :attr:`values` per item, int64 ``[B]`` (the lengths of the
        ragged dim when there is one)."""
        return self.offsets[1:] - self.offsets[:-1]

    def _item_shapes(self) -> list[tuple[int, ...]]:
        """Per-item logical shapes (host read of the partitions; cached eagerly)."""
        if self._shapes is not None:
            return self._shapes
        b = len(self)
        static = [int(s) for s in self.values.shape[1:]]
        sdims = self._static_dims()
        rank = self._item_rank()
        extents = [self._extents(j).tolist() for j in range(len(self._ragged))]
        shapes = []
        for i in range(b):
            shape = [0] * rank
            for j, d in enumerate(self._ragged):
                shape[d] = int(extents[j][i])
            for k, d in enumerate(sdims):
                shape[d] = static[k]
            shapes.append(tuple(shape))
        if not _is_compiling():
            self._shapes = shapes
        return shapes

    @property
    def item_shapes(self) -> tuple[torch.Size, ...]:
        """The shape of every item."""
        return tuple(torch.Size(s) for s in self._item_shapes())

    ragged_shape = item_shapes

    def element_sizes(self) -> torch.Tensor:
        """Every item's shape as int64 ``[B, item rank]`` (on the CPU)."""
        shapes = self._item_shapes()
        return torch.tensor(shapes, dtype=torch.int64).reshape(len(shapes), self._item_rank())

    def packed_offsets(self) -> torch.Tensor:
        """The first row of every item in :attr:`values`, int64 ``[B + 1]``."""
        return self.offsets

    def _max_extents(self) -> list[Any]:
        """Maximum extent of every ragged dim (physical order): ints eagerly;
        under tracing the sizes of :attr:`_probe` (symbols of the call's
        input sizes), or a device read (``.item()``) for a batch built in the
        graph with new partitions."""
        if not self._ragged:
            return []
        if _is_compiling() and self._probe is not None:
            return list(self._probe.shape[1:])
        if _is_compiling():
            out = []
            for j in range(len(self._ragged)):
                e = self._extents(j)
                out.append(torch.cat([e.new_zeros(1), e]).max().item())
            return out
        shapes = self._item_shapes()
        return [max((s[d] for s in shapes), default=0) for d in self._ragged]

    def _row_coords(self) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Per row of :attr:`values`: its item and its coordinate in every
        ragged dim (physical order). Vectorized, no host reads."""
        rows = self.values.shape[0]
        ids = _ops.segment_ids(self.offsets, rows)
        nr = len(self._ragged)
        if nr == 0:
            return ids, []
        local = torch.arange(rows, device=self.offsets.device) - self.offsets[ids]
        if nr == 1:
            return ids, [local]
        coords: list[torch.Tensor] = [local] * nr
        for j in range(nr - 1, 0, -1):
            e = self._extents(j)[ids]
            coords[j] = local % e
            local = torch.div(local, e, rounding_mode="floor")
        coords[0] = local
        return ids, coords

    def _check_same_structure(self, other: NestedTensor, fname: str) -> None:
        if other is self:
            return
        if (
            self._ragged != other._ragged
            or self._item_rank() != other._item_rank()
            or len(self.partitions) != len(other.partitions)
        ):
            raise ValueError(
                f"{fname}: NestedTensors of different structure: {self._describe()} and {other._describe()}"
            )
        pairs = [(self.offsets, other.offsets)] + list(zip(self.partitions, other.partitions, strict=True))
        if all(a is b for a, b in pairs):
            return
        if self.offsets.shape != other.offsets.shape:
            raise ValueError(
                f"{fname}: NestedTensors of different structure (batch length mismatch: {len(self)} and "
                f"{len(other)}): "
                f"{self._describe()} and {other._describe()}"
            )
        if _is_compiling():
            for a, b in pairs:
                if a is not b:
                    torch._assert_async(
                        torch.eq(a, b).all(),
                        f"{fname}: NestedTensors of different structure (offsets differ)",
                    )
            return
        for a, b in pairs:
            if a is not b and not torch.equal(a, b.to(a.device)):
                raise ValueError(
                    f"{fname}: NestedTensors of different structure: {self._describe()} and {other._describe()}"
                )

    def _describe(self, limit: int = 8) -> str:
        if _is_compiling():
            return f"values {tuple(self.values.shape)}, offsets {tuple(self.offsets.shape)}"
        shapes = self._item_shapes()
        if self._ragged == (0,):
            lens = [s[0] for s in shapes]
            shown = ", ".join(map(str, lens[:limit])) + (", ..." if len(lens) > limit else "")
            tail = "".join(", " + str(int(t)) for t in self.values.shape[1:])
            return f"[{len(shapes)}, L=({shown}){tail}]"
        shown = ", ".join(str(s) for s in shapes[:limit]) + (", ..." if len(shapes) > limit else "")
        return f"[{len(shapes)}, items=({shown})]"

    # -- basic properties -------------------------------------------------------------
    @property
    def concat(self) -> torch.Tensor:
        """The packed values (every item's elements one after another, in the
        ``packed_dim_order``); also :attr:`values`."""
        return self.values

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @dtype.setter
    def dtype(self, value: Any) -> None:
        raise AttributeError("NestedTensor.dtype is read-only; use .to(dtype) for a converted copy")

    @property
    def device(self) -> torch.device:
        return self.values.device

    @device.setter
    def device(self, value: Any) -> None:
        raise AttributeError("NestedTensor.device is read-only; use .to(device) for a moved copy")

    @property
    def requires_grad(self) -> bool:
        return self.values.requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.values.requires_grad_(_check_bool(value, "requires_grad"))

    def requires_grad_(self, requires_grad: bool = True) -> NestedTensor:
        self.values.requires_grad_(requires_grad)
        return self

    @property
    def grad(self) -> NestedTensor | None:
        """The gradient of :attr:`values` with this structure (None before a backward)."""
        g = self.values.grad
        return None if g is None else self._derive(g)

    @property
    def grad_fn(self) -> Any:
        return self.values.grad_fn

    @property
    def is_leaf(self) -> bool:
        return self.values.is_leaf

    @property
    def layout(self) -> torch.layout:
        return self.values.layout

    @property
    def is_cuda(self) -> bool:
        return self.values.is_cuda

    @property
    def is_nested(self) -> bool:
        # False on purpose: torch modules (nn.MultiheadAttention) take other
        # code paths for torch's own nested tensors.
        return False

    def is_floating_point(self) -> bool:
        return self.values.is_floating_point()

    def is_complex(self) -> bool:
        return self.values.is_complex()

    def is_contiguous(self, memory_format: torch.memory_format = torch.contiguous_format) -> bool:
        return self.values.is_contiguous(memory_format=memory_format)

    def is_pinned(self) -> bool:
        return self.values.is_pinned()

    def element_size(self) -> int:
        return self.values.element_size()

    def dim(self) -> int:
        """Logical rank: batch dim + item rank."""
        return 1 + self._item_rank()

    @property
    def ndim(self) -> int:
        return self.dim()

    ndimension = dim

    def numel(self) -> int:
        """Number of real elements (padding not counted)."""
        return self.values.numel()

    nelement = numel

    def __len__(self) -> int:
        return self.offsets.shape[0] - 1

    def size(self, dim: int | None = None) -> Any:
        """The logical shape, each ragged dim shown as its maximum extent.

        ``size(d)`` for the batch dim and static dims reads only tensor shapes
        (``len(offsets) - 1`` and ``values.shape``); only a ragged dim's size
        needs the maximum of its extents (under ``torch.compile`` a device
        read)."""
        if dim is None:
            return self.shape
        item = self._item_dim(dim, "size")
        if item is None:
            return len(self)
        if item in self._ragged:
            j = self._ragged.index(item)
            return self._max_extents()[j]
        return self.values.shape[self._value_dim(item)]

    @property
    def shape(self) -> torch.Size:
        """Logical shape with each ragged dim shown as its maximum extent:
        ``[B, max L, d...]`` (``[max L, B, d...]`` when not batch_first)."""
        if _is_compiling():
            return _TracedShape(self)  # type: ignore[return-value]
        maxes = self._max_extents()
        return torch.Size(self._logical_sizes(maxes))

    def _logical_sizes(self, maxes: Sequence[Any]) -> list[Any]:
        rank = self._item_rank()
        item = [0] * rank
        for j, d in enumerate(self._ragged):
            item[d] = maxes[j]
        for k, d in enumerate(self._static_dims()):
            item[d] = self.values.shape[1 + k]
        full = [len(self)] + item
        if not self._batch_first and rank >= 1:
            full[0], full[1] = full[1], full[0]
        return full

    @property
    def occupancy(self) -> float:
        """Real elements over padded elements (0.0 for an empty batch)."""
        total = math.prod(self.shape)
        return self.numel() / total if total else 0.0

    # -- padded views -------------------------------------------------------------------
    def _padded_physical(self, fill: Any, values: torch.Tensor | None = None) -> torch.Tensor:
        """``[B, max ragged extents (physical order)..., static...]`` padded with ``fill``."""
        values = self.values if values is None else values
        maxes = self._max_extents()
        out = values.new_full((len(self), *maxes, *values.shape[1:]), fill)
        if values.shape[0]:
            ids, coords = self._row_coords()
            out[(ids, *coords)] = values
        return out

    def _physical_to_logical(self, phys: torch.Tensor) -> torch.Tensor:
        """Permutes a ``[B, ragged..., static...]`` tensor into the logical order."""
        nr = len(self._ragged)
        sdims = self._static_dims()
        perm = [0]
        for d in range(self._item_rank()):
            perm.append(1 + self._ragged.index(d) if d in self._ragged else 1 + nr + sdims.index(d))
        out = phys.permute(perm)
        if not self._batch_first and self._item_rank() >= 1:
            out = out.movedim(0, 1)
        return out

    @property
    def tensor(self) -> torch.Tensor:
        """Padded tensor of the logical :attr:`shape`, filled with ``padding_value``."""
        return self._physical_to_logical(self._padded_physical(self._padding_value)).contiguous()

    def _real_mask(self) -> torch.Tensor:
        """Bool, logical shape: True on real elements."""
        nr = len(self._ragged)
        maxes = self._max_extents()
        phys = torch.zeros((len(self), *maxes), dtype=torch.bool, device=self.device)
        if self.values.shape[0]:
            ids, coords = self._row_coords()
            phys[(ids, *coords)] = True
        phys = phys.reshape(phys.shape + (1,) * (self.values.dim() - 1))
        out = self._physical_to_logical(phys)
        del nr
        return out.expand(self._logical_sizes(maxes))

    @property
    def mask(self) -> torch.Tensor:
        """Bool mask of :attr:`tensor`: ``not mask_value`` on real elements,
        ``mask_value`` on padding. Like DanLing's, it drops the last dim when
        that dim is static (``[B, L]`` for ``[B, L, d]`` sequences)."""
        real = self._real_mask()
        rank = self._item_rank()
        if rank >= 2 and (rank - 1) not in self._ragged:
            real = real.select(-1, 0)
        real = real.contiguous()
        return ~real if self._mask_value else real

    @property
    def tensor_mask(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(tensor, mask)``."""
        return self.tensor, self.mask

    # -- items ----------------------------------------------------------------------
    def _item(self, i: int) -> torch.Tensor:
        """Item ``i`` as a view of the packed values."""
        shape = self._item_shapes()[i]
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        chunk = self.values[a:b]
        phys = tuple(shape[d] for d in self._ragged) + tuple(chunk.shape[1:])
        if not self._ragged:
            return chunk.reshape(chunk.shape[1:])
        chunk = chunk.reshape(phys)
        nr = len(self._ragged)
        sdims = self._static_dims()
        perm = [
            self._ragged.index(d) if d in self._ragged else nr + sdims.index(d) for d in range(len(shape))
        ]
        return chunk.permute(perm)

    def unbind(self, dim: int | None = None) -> tuple[Any, ...]:
        """The items (views of the packed values), for the batch dim (the
        default, whatever ``batch_first``); for a static dim, the NestedTensors
        of its slices."""
        if dim is None:
            return self._items()
        item = self._item_dim(dim, "unbind")
        if item is None:
            return self._items()
        if item in self._ragged:
            raise NotImplementedError(
                f"unbind: dim {dim} is ragged (item dim {item}); unbind the batch dim or a static dim"
            )
        vd = self._value_dim(item)
        ragged = tuple(r - 1 if r > item else r for r in self._ragged)
        return tuple(self._derive(v, ragged=ragged) for v in self.values.unbind(vd))

    def _items(self) -> tuple[torch.Tensor, ...]:
        if _is_compiling():
            raise NotImplementedError(
                "splitting a NestedTensor into its items reads the offsets on the host; do it outside "
                "torch.compile (or work on .values/.offsets)"
            )
        return tuple(self._item(i) for i in range(len(self)))

    def tolist(self) -> list:
        return [x.tolist() for x in self._items()]

    def __iter__(self):
        return iter(self._items())

    def numpy(self) -> Any:
        """The padded :attr:`tensor` as a NumPy array."""
        return self.tensor.detach().cpu().numpy()

    def item(self) -> Any:
        if self.values.numel() != 1:
            raise RuntimeError(
                f"item: a NestedTensor with {self.values.numel()} elements cannot be converted to a Python number"
            )
        return self.values.item()

    def __bool__(self) -> bool:
        raise RuntimeError(
            "Boolean value of NestedTensor is ambiguous. Use .numel(), .any(), .all(), or an explicit reduction."
        )

    __hash__ = object.__hash__

    def __repr__(self) -> str:
        extra = "" if self._ragged == (0,) else f", ragged_dims={self._ragged}"
        extra += "" if self._batch_first else ", batch_first=False"
        extra += ", requires_grad=True" if self.values.requires_grad else ""
        return f"NestedTensor({self._describe()}, dtype={self.dtype}, device={self.device}{extra})"

    # -- conversions --------------------------------------------------------------------
    def to(self, *args: Any, **kwargs: Any) -> NestedTensor:
        """Like ``Tensor.to``: dtype conversions apply to the values, device
        moves to values and offsets (offsets stay int64). A NestedTensor (or
        tensor) argument gives its dtype and device."""
        if args and isinstance(args[0], NestedTensor):
            args = (args[0].values,) + tuple(args[1:])
        values = self.values.to(*args, **kwargs)
        if values.device == self.offsets.device:
            return self._derive(values) if values is not self.values else self
        offsets = self.offsets.to(device=values.device)
        parts = [offsets] if len(self._ragged) == 1 else [p.to(device=values.device) for p in self.partitions]
        return self._derive(values, offsets=offsets, partitions=parts, shapes=self._shapes)

    def type(self, dtype: Any = None, non_blocking: bool = False) -> Any:
        if dtype is None:
            return self.values.type()
        return self._derive(self.values.type(dtype, non_blocking))

    def cpu(self) -> NestedTensor:
        return self.to("cpu")

    def cuda(self, device: Any = None, non_blocking: bool = False) -> NestedTensor:
        return self.to("cuda" if device is None else device, non_blocking=non_blocking)

    def float(self) -> NestedTensor:
        return self.to(torch.float32)

    def double(self) -> NestedTensor:
        return self.to(torch.float64)

    def half(self) -> NestedTensor:
        return self.to(torch.float16)

    def bfloat16(self) -> NestedTensor:
        return self.to(torch.bfloat16)

    def int(self) -> NestedTensor:
        return self.to(torch.int32)

    def long(self) -> NestedTensor:
        return self.to(torch.int64)

    def short(self) -> NestedTensor:
        return self.to(torch.int16)

    def char(self) -> NestedTensor:
        return self.to(torch.int8)

    def byte(self) -> NestedTensor:
        return self.to(torch.uint8)

    def bool(self) -> NestedTensor:
        return self.to(torch.bool)

    def pin_memory(self, device: Any = None) -> NestedTensor:
        return self._derive(_pin(self.values))

    def detach(self) -> NestedTensor:
        return self._derive(self.values.detach())

    def detach_(self) -> NestedTensor:
        self.values.detach_()
        return self

    def clone(self, *, memory_format: torch.memory_format = torch.preserve_format) -> NestedTensor:
        offsets = self.offsets.clone()
        parts = [offsets] if len(self._ragged) == 1 else [p.clone() for p in self.partitions]
        return self._derive(
            self.values.clone(memory_format=memory_format),
            offsets=offsets,
            partitions=parts,
            shapes=self._shapes,
        )

    def contiguous(self, memory_format: torch.memory_format = torch.contiguous_format) -> NestedTensor:
        return self._derive(self.values.contiguous(memory_format=memory_format))

    def new_tensor(self, data: Any, **kwargs: Any) -> torch.Tensor:
        return self.values.new_tensor(data, **kwargs)

    def new_zeros(self, *size: Any, **kwargs: Any) -> torch.Tensor:
        return self.values.new_zeros(*size, **kwargs)

    def new_ones(self, *size: Any, **kwargs: Any) -> torch.Tensor:
        return self.values.new_ones(*size, **kwargs)

    def new_empty(self, *size: Any, **kwargs: Any) -> torch.Tensor:
        return self.values.new_empty(*size, **kwargs)

    def new_full(self, size: Any, fill_value: Any, **kwargs: Any) -> torch.Tensor:
        return self.values.new_full(size, fill_value, **kwargs)

    # -- views of item dims ---------------------------------------------------------------
    def permute(self, *dims: Any) -> NestedTensor:
        """Reorders the item dims (the batch dim stays in place); the packed
        values are permuted as a view, ragged dims move without data movement."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list, torch.Size)):
            dims = tuple(dims[0])
        n = self.dim()
        if len(dims) != n:
            raise ValueError(
                f"permute: Expected {n} dimensions (one per dim of a NestedTensor of rank {n}), got dims={dims}"
            )
        try:
            norm = [_norm_dim(d, n, "permute") for d in dims]
        except IndexError as e:
            raise ValueError(f"permute: Invalid permutation dims {dims} for shape with {n} dims ({e})") from e
        if sorted(norm) != list(range(n)):
            raise ValueError(f"permute: Invalid permutation dims {dims} for shape with {n} dims")
        axis = self._batch_axis()
        if norm[axis] != axis:
            raise ValueError(
                f"permute: the batch dimension ({axis}) must stay in place, got dims={dims}; use "
                f"transpose(0, 1) to toggle batch_first"
            )
        order = [self._item_dim(d, "permute") for i, d in enumerate(norm) if i != axis]
        return self._permute_items(order)  # type: ignore[arg-type]

    def _permute_items(self, order: Sequence[int]) -> NestedTensor:
        """New item dim ``i`` is old item dim ``order[i]``."""
        order = list(order)
        if order == list(range(len(order))):
            return self._derive(self.values)
        inv = [0] * len(order)
        for new, old in enumerate(order):
            inv[old] = new
        ragged = tuple(inv[r] for r in self._ragged)
        old_static = self._static_dims()
        new_static = [order[i] for i in range(len(order)) if order[i] not in self._ragged]
        vperm = [0] + [1 + old_static.index(d) for d in new_static]
        values = self.values.permute(vperm) if vperm != list(range(len(vperm))) else self.values
        shapes = None if self._shapes is None else [tuple(s[o] for o in order) for s in self._shapes]
        return self._derive(values, ragged=ragged, shapes=shapes)

    def transpose(self, dim0: int, dim1: int) -> NestedTensor:
        """Swaps two item dims (a view); swapping the batch dim with the dim
        next to it toggles ``batch_first``."""
        n = self.dim()
        d0, d1 = _norm_dim(dim0, n, "transpose"), _norm_dim(dim1, n, "transpose")
        if d0 == d1:
            return self._derive(self.values)
        axis = self._batch_axis()
        if axis in (d0, d1):
            if {d0, d1} != {0, 1}:
                raise ValueError(
                    f"transpose: the batch dim ({axis}) can only swap with the dim next to it (toggling "
                    f"batch_first), got ({dim0}, {dim1})"
                )
            return self._derive(self.values, batch_first=not self._batch_first)
        i0, i1 = self._item_dim(d0, "transpose"), self._item_dim(d1, "transpose")
        order = list(range(self._item_rank()))
        order[i0], order[i1] = order[i1], order[i0]  # type: ignore[index]
        return self._permute_items(order)

    def swapaxes(self, axis0: int, axis1: int) -> NestedTensor:
        return self.transpose(axis0, axis1)

    swapdims = swapaxes

    @property
    def T(self) -> NestedTensor:
        """Reverses the item dims (the batch dim stays)."""
        return self._permute_items(list(range(self._item_rank()))[::-1])

    @property
    def mT(self) -> NestedTensor:
        """Swaps the last two item dims."""
        if self._item_rank() < 2:
            raise ValueError(f"mT: needs items of rank >= 2, got rank {self._item_rank()}")
        return self.transpose(-2, -1)

    def movedim(self, source: Any, destination: Any) -> NestedTensor:
        src = [source] if isinstance(source, int) else list(source)
        dst = [destination] if isinstance(destination, int) else list(destination)
        if len(src) != len(dst):
            raise ValueError(f"movedim: source {source} and destination {destination} differ in length")
        n = self.dim()
        src = [_norm_dim(d, n, "movedim") for d in src]
        dst = [_norm_dim(d, n, "movedim") for d in dst]
        rest = [d for d in range(n) if d not in src]
        perm = [-1] * n
        for s, d in zip(src, dst, strict=True):
            perm[d] = s
        it = iter(rest)
        perm = [p if p >= 0 else next(it) for p in perm]
        return self.permute(perm)

    moveaxis = movedim

    def unsqueeze(self, dim: int) -> NestedTensor:
        """Inserts a static dim of size 1 (inserting before the batch dim makes
        it the second logical dim: ``batch_first`` becomes False)."""
        n = self.dim() + 1
        dim = _norm_dim(dim, n, "unsqueeze")
        axis = self._batch_axis()
        full = ["b" if d == axis else "i" for d in range(n - 1)]
        full.insert(dim, "new")
        new_axis = full.index("b")
        if new_axis > 1:
            raise ValueError(f"unsqueeze: dim {dim} would move the batch dim to {new_axis}")
        items = [k for k in full if k != "b"]
        pos = items.index("new")
        ragged = tuple(r + 1 if r >= pos else r for r in self._ragged)
        static_before = sum(1 for d in range(self._item_rank()) if d < pos and d not in self._ragged)
        values = self.values.unsqueeze(1 + static_before)
        shapes = None if self._shapes is None else [s[:pos] + (1,) + s[pos:] for s in self._shapes]
        return self._derive(values, ragged=ragged, shapes=shapes, batch_first=new_axis == 0)

    def squeeze(self, dim: Any = None) -> NestedTensor:
        """Removes static item dims of size 1 (ragged dims and the batch dim stay)."""
        if dim is None:
            cands = list(range(self.dim()))
        else:
            cands = [dim] if isinstance(dim, int) else list(dim)
        drop = []
        for d in cands:
            item = self._item_dim(d, "squeeze")
            if item is None or item in self._ragged:
                continue
            if self.values.shape[self._value_dim(item)] == 1:
                drop.append(item)
        if not drop:
            return self._derive(self.values)
        values = self.values
        for item in sorted(drop, reverse=True):
            values = values.squeeze(self._value_dim(item))
        ragged = tuple(r - sum(1 for d in drop if d < r) for r in self._ragged)
        shapes = None
        if self._shapes is not None:
            shapes = [tuple(x for k, x in enumerate(s) if k not in drop) for s in self._shapes]
        return self._derive(values, ragged=ragged, shapes=shapes)

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Any:
        """Merges item dims ``start_dim..end_dim``. Static dims merge as a view
        of the values; a ragged dim merges with the static dims after it (its
        extents scale), or with ragged dims adjacent in the packed order.
        Ranges that include the batch dim flatten the padded :attr:`tensor`
        (DanLing's behaviour)."""
        n = self.dim()
        s, e = _norm_dim(start_dim, n, "flatten"), _norm_dim(end_dim, n, "flatten")
        if s > e:
            raise ValueError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
        axis = self._batch_axis()
        if s <= axis <= e:
            if s == e:
                return self._derive(self.values)
            return self.tensor.flatten(s, e)
        a, b = self._item_dim(s, "flatten"), self._item_dim(e, "flatten")
        return self._merge_items(a, b, "flatten")  # type: ignore[arg-type]

    def _merge_items(self, a: int, b: int, fname: str) -> NestedTensor:
        if a == b:
            return self._derive(self.values)
        span = list(range(a, b + 1))
        rag = [d for d in span if d in self._ragged]
        shapes = None
        if self._shapes is not None:
            shapes = [s[:a] + (math.prod(s[a : b + 1]),) + s[b + 1 :] for s in self._shapes]
        shift = b - a

        def renumber(r: int) -> int:
            return r - shift if r > b else r

        if not rag:
            va, vb = self._value_dim(a), self._value_dim(b)
            ragged = tuple(renumber(r) for r in self._ragged)
            return self._derive(self.values.flatten(va, vb), ragged=ragged, shapes=shapes)
        if len(rag) == 1 and rag[0] == a:
            # [.., L, s1, s2, ..] -> [.., L * s1 * s2, ..]: rows scale by the static product.
            statics = [self._value_dim(d) for d in span[1:]]
            k = _prod([self.values.shape[v] for v in statics])
            values = (
                self.values.movedim(statics, list(range(1, 1 + len(statics)))) if statics else self.values
            )
            values = values.reshape((-1,) + tuple(values.shape[1 + len(statics) :]))
            j = self._ragged.index(a)
            parts = [p * k if i == j else p for i, p in enumerate(self.partitions)]
            offsets = self.offsets * k
            if len(self._ragged) == 1:
                parts = [offsets]
            ragged = tuple(renumber(r) for r in self._ragged)
            return self._derive(values, ragged=ragged, offsets=offsets, partitions=parts, shapes=shapes)
        positions = [self._ragged.index(d) for d in rag]
        if len(rag) == len(span) and positions == list(range(positions[0], positions[0] + len(rag))):
            # Ragged dims adjacent in the packed order and in logical order: the
            # rows stay, their extents multiply.
            merged = self._extents(positions[0])
            for j in positions[1:]:
                merged = merged * self._extents(j)
            part = torch.cat([merged.new_zeros(1), merged.cumsum(0)])
            parts = self.partitions[: positions[0]] + [part] + self.partitions[positions[-1] + 1 :]
            ragged_list = [renumber(r) for r in self._ragged[: positions[0]]]
            ragged_list += [a]
            ragged_list += [renumber(r) for r in self._ragged[positions[-1] + 1 :]]
            if len(parts) == 1:
                parts = [self.offsets]
            return self._derive(self.values, ragged=tuple(ragged_list), partitions=parts, shapes=shapes)
        return self._per_item(lambda t: t.flatten(a, b), fname)

    def unflatten(self, dim: int, sizes: Sequence[int]) -> NestedTensor:
        """Splits an item dim. A static dim splits as a view; a ragged dim
        splits into itself (``-1`` first) and static dims after it."""
        item = self._item_dim(dim, "unflatten")
        if item is None:
            raise ValueError("unflatten: cannot unflatten the batch dim of a NestedTensor")
        sizes = [int(s) if not isinstance(s, torch.SymInt) else s for s in sizes]
        k = len(sizes)
        ragged = tuple(r + k - 1 if r > item else r for r in self._ragged)
        shapes = None
        if item not in self._ragged:
            vd = self._value_dim(item)
            values = self.values.unflatten(vd, sizes)
            if self._shapes is not None:
                tail = tuple(values.shape[vd : vd + k])
                shapes = [s[:item] + tail + s[item + 1 :] for s in self._shapes]
            return self._derive(values, ragged=ragged, shapes=shapes)
        if sizes[0] == -1 and all(not isinstance(s, int) or s > 0 for s in sizes[1:]):
            static_sizes = sizes[1:]
            m = _prod(static_sizes)
            j = self._ragged.index(item)
            if not _is_compiling():
                bad = (self._extents(j) % m).nonzero()
                if bad.numel():
                    i = int(bad[0])
                    raise ValueError(
                        f"unflatten: item {i}'s extent {int(self._extents(j)[i])} in dim {dim} is not divisible "
                        f"by {m} (sizes {tuple(sizes)})"
                    )
            if len(self._ragged) == 1:
                offsets = torch.div(self.offsets, m, rounding_mode="floor")
                parts = [offsets]
                values = self.values.reshape((-1, *static_sizes) + tuple(self.values.shape[1:]))
            else:
                return self._per_item(lambda t: t.unflatten(item, sizes), "unflatten")
            # The new static dims sit right after the ragged dim: move them to
            # their place among the static dims (logical order).
            sdims_after = sum(1 for d in self._static_dims() if d < item)
            src = list(range(1, 1 + len(static_sizes)))
            dst = [1 + sdims_after + t for t in range(len(static_sizes))]
            values = values.movedim(src, dst)
            return self._derive(values, ragged=ragged, offsets=offsets, partitions=parts)
        return self._per_item(lambda t: t.unflatten(item, sizes), "unflatten")

    def view(self, *shape: Any) -> NestedTensor:
        """Per-item view (see :meth:`reshape`)."""
        return self._reshape(shape, "view")

    def reshape(self, *shape: Any) -> NestedTensor:
        """Reshapes every item. ``shape`` lists the item dims, optionally with
        the batch dim first (DanLing's rule: the batch dim is included when
        its entry equals the batch size and the rank differs, or the ranks are
        equal and another entry is -1 or matches the current size). At a
        ragged dim write -1 (or its maximum; under ``torch.compile`` a traced
        size). A ragged dim may merge with the static dims after it or split
        off static dims after it without copying; other reshapes are done per
        item eagerly."""
        return self._reshape(shape, "reshape")

    def view_as(self, other: NestedTensor) -> NestedTensor:
        return self._reshape(tuple(other.shape), "view_as")

    reshape_as = view_as

    def _reshape(self, shape: tuple, fname: str) -> NestedTensor:
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])
        if not shape:
            raise TypeError(f"{fname}: missing shape")
        target = list(shape)
        b = len(self)
        axis = self._batch_axis()
        include = False
        # Under torch.compile a traced size is an int to this code (Dynamo
        # answers isinstance(s, SymInt) with False); with the ragged sizes
        # known as input sizes (_probe) the eager rule compares symbols.
        sizes_known = not _is_compiling() or self._probe is not None
        if len(target) > axis and not isinstance(target[axis], torch.SymInt) and sizes_known:
            if target[axis] == b and len(target) != self.dim():
                include = True
            elif target[axis] in (-1, b) and len(target) == self.dim():
                current = list(self.shape)
                current.pop(axis)
                others = [target[i] for i in range(len(target)) if i != axis]
                include = any(t == -1 or (j < len(current) and t == current[j]) for j, t in enumerate(others))
        elif len(target) > axis and (len(target) == self.dim() or isinstance(target[axis], torch.SymInt)):
            include = True
        if include:
            target.pop(axis)
        if not self._ragged:
            values = self.values.reshape((self.values.shape[0], *target))
            return self._new(values, self.offsets, [], (), None, **self._state())
        fast = self._reshape_fast(target)
        if fast is not None:
            return fast
        return self._per_item_reshape(target, fname)

    def _reshape_fast(self, target: list) -> NestedTensor | None:
        """One ragged dim kept whole, merged with static dims after it, or
        split off static dims after it; the static dims before it unchanged."""
        if len(self._ragged) != 1:
            return None
        r = self._ragged[0]
        compiling = _is_compiling()
        maxes = self._max_extents() if not compiling or self._probe is not None else None
        marks = []
        for i, t in enumerate(target):
            if isinstance(t, torch.SymInt) or (isinstance(t, int) and t == -1):
                marks.append(i)
            elif maxes is not None and i == r and t == maxes[0]:
                # Eagerly a size that is also a static size after it is
                # ambiguous; traced, the ragged size is its own symbol.
                if compiling or t not in target[r + 1 :]:
                    marks.append(i)
        if len(marks) != 1:
            return None
        t = marks[0]
        sizes = [int(self.values.shape[self._value_dim(d)]) for d in range(r)]
        if [int(x) for x in target[:t]] != sizes:
            return None
        post = [int(x) for x in target[t + 1 :]]
        if any(x < 0 for x in post):
            return None
        old_post = [int(s) for s in self.values.shape[1 + r :]]
        src = math.prod(old_post)
        dst = math.prod(post)
        if dst == 0 or src == 0:
            return None
        if src % dst == 0:
            num, den = src // dst, 1
        elif dst % src == 0:
            num, den = 1, dst // src
        else:
            return None
        if den > 1 and not compiling:
            bad = (self.lengths % den).nonzero()
            if bad.numel():
                return None
        # values: [rows, pre..., post_old...] -> [rows', pre..., post_new...]
        pre = len(sizes)
        v = self.values.movedim(
            list(range(1, 1 + pre)), list(range(self.values.dim() - pre, self.values.dim()))
        )
        v = v.reshape((self.values.shape[0] * num // den, *post, *sizes))
        v = v.movedim(list(range(v.dim() - pre, v.dim())), list(range(1, 1 + pre)))
        if num == den == 1:  # the ragged dim kept whole: same offsets and sizes
            return self._derive(v, ragged=(t,), shapes=None)
        offsets = self.offsets * num if den == 1 else torch.div(self.offsets, den, rounding_mode="floor")
        return self._derive(v, ragged=(t,), offsets=offsets, partitions=[offsets], shapes=None)

    def _per_item_reshape(self, target: list, fname: str) -> NestedTensor:
        if _is_compiling():
            raise NotImplementedError(
                f"{fname}: reshaping to {tuple(target)} moves elements across items' ragged dims; under "
                f"torch.compile only reshapes that keep a ragged dim whole (-1 at its place) or merge/split it with "
                f"the static dims after it are supported"
            )
        maxes = list(self.shape)
        maxes.pop(self._batch_axis())
        items = []
        for item in self._items():
            adjusted = list(target)
            avail = list(range(len(maxes)))
            for i in range(min(len(adjusted), len(maxes))):
                if adjusted[i] == -1:
                    continue
                if adjusted[i] == maxes[i]:
                    adjusted[i] = item.shape[i]
                    if i in avail:
                        avail.remove(i)
                    continue
                cands = [j for j in avail if maxes[j] == adjusted[i]]
                if len(cands) == 1:
                    adjusted[i] = item.shape[cands[0]]
                    avail.remove(cands[0])
            try:
                items.append(item.reshape(adjusted))
            except RuntimeError as e:
                raise RuntimeError(
                    f"{fname}: item of shape {tuple(item.shape)} cannot become {adjusted}: {e}"
                ) from e
        return (
            type(self)(items, dtype=self.dtype, device=self.device, **self._state())
            if items
            else self._empty()
        )

    def _empty(self) -> NestedTensor:
        return type(self)([], dtype=self.dtype, device=self.device, **self._state())

    def _per_item(self, fn: Callable[[torch.Tensor], torch.Tensor], fname: str) -> NestedTensor:
        """Applies ``fn`` to every item and repacks (eager only: loops on the host)."""
        if _is_compiling():
            raise NotImplementedError(
                f"{fname}: this case runs item by item on the host and is not traceable; call it outside "
                f"torch.compile or use the packed layout (.values/.offsets)"
            )
        items = [fn(t) for t in self._items()]
        if not items:
            return self._empty()
        return type(self)(items, **self._state())

    def chunk(self, chunks: int, dim: int = -1) -> tuple[NestedTensor, ...]:
        """Splits a static dim (a view), or the batch into groups of items."""
        item = self._item_dim(dim, "chunk")
        if item is None:
            b = len(self)
            size = -(-b // chunks) if b else 0
            return tuple(self[i : i + size] for i in range(0, b, size)) if size else ()
        if item in self._ragged:
            raise NotImplementedError(f"chunk: dim {dim} is ragged; chunk a static dim or the batch dim")
        return tuple(self._derive(v) for v in self.values.chunk(chunks, dim=self._value_dim(item)))

    def split(self, split_size: Any, dim: int = -1) -> tuple[NestedTensor, ...]:
        """Splits a static dim (views), or the batch into groups of items."""
        item = self._item_dim(dim, "split")
        if item is None:
            b = len(self)
            if isinstance(split_size, int):
                sizes = [min(split_size, b - i) for i in range(0, b, split_size)]
            else:
                sizes = list(split_size)
            out, start = [], 0
            for s in sizes:
                out.append(self[start : start + s])
                start += s
            return tuple(out)
        if item in self._ragged:
            raise NotImplementedError(f"split: dim {dim} is ragged; split a static dim or the batch dim")
        return tuple(self._derive(v) for v in self.values.split(split_size, dim=self._value_dim(item)))

    def narrow(self, dim: int, start: int, length: int) -> NestedTensor:
        item = self._item_dim(dim, "narrow")
        if item is None or item in self._ragged:
            idx = [slice(None)] * self.dim()
            idx[dim] = slice(start, start + length)
            return self[tuple(idx)]
        return self._derive(self.values.narrow(self._value_dim(item), start, length))

    def select(self, dim: int, index: int) -> Any:
        n = self.dim()
        d = _norm_dim(dim, n, "select")
        idx: list[Any] = [slice(None)] * n
        idx[d] = index
        if d == self._batch_axis():
            return self[index]
        if not self._batch_first:
            # indexing is batch-major: put the batch entry first
            idx[0], idx[1] = idx[1], idx[0]
        return self[tuple(idx)]

    def expand_as(self, other: NestedTensor) -> NestedTensor:
        if not isinstance(other, NestedTensor):
            raise TypeError(f"expand_as: expected a NestedTensor, got {type(other).__name__}")
        self._check_same_structure(other, "expand_as")
        return self._derive(self.values.expand(other.values.shape), shapes=other._shapes)

    def expand(self, *sizes: Any) -> NestedTensor:
        """Broadcasts static dims of size 1 (``-1`` keeps a dim; the batch
        and ragged dims must be kept)."""
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list, torch.Size)):
            sizes = tuple(sizes[0])
        n = self.dim()
        if len(sizes) != n:
            raise ValueError(
                f"expand: expected {n} sizes (one per dim of the NestedTensor), got {tuple(sizes)}"
            )
        target = list(self.values.shape)
        for d, size in enumerate(sizes):
            item = self._item_dim(d, "expand")
            if item is None or item in self._ragged:
                keep = len(self) if item is None else None
                if (
                    size != -1
                    and (keep is None or size != keep)
                    and not (item is not None and not _is_compiling() and size == self.size(d))
                ):
                    kind = "batch" if item is None else "ragged"
                    raise ValueError(
                        f"expand: dim {d} is the {kind} dim; it cannot change (pass -1), got size {size}"
                    )
                continue
            if size != -1:
                target[self._value_dim(item)] = size
        return self._derive(self.values.expand(target))

    def repeat_batch(self, repeats: int) -> NestedTensor:
        """Every item repeated ``repeats`` times in place (items ``0, 0, 1, 1, ...``)."""
        if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 0:
            raise ValueError(f"repeat_batch: repeats must be a non-negative int, got {repeats!r}")
        idx = torch.arange(len(self), device=self.offsets.device).repeat_interleave(repeats)
        return self._take_items(idx)

    # -- indexing -------------------------------------------------------------------------
    def __getitem__(self, index: Any) -> Any:
        """``nt[i]``: item ``i`` (a view of the values); ``nt[a:b]``, lists,
        int/bool tensors: a NestedTensor of the selected items; a bool
        NestedTensor (or padded bool tensor): the selected elements of every
        item; tuples index the batch first, then inside the items (``...``
        and ``None`` supported; ``nt[:, 1:]`` slices a ragged dim; an int on a
        ragged dim selects a position of every item and returns a dense
        tensor when no ragged dim is left)."""
        return _indexing.getitem(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        """Assigns in place. Whole items may change shape (the batch is
        repacked); assignments inside items keep the layout and write into
        :attr:`values` (so views of it see them)."""
        _indexing.setitem(self, index, value)

    def _take_items(self, idx: torch.Tensor) -> NestedTensor:
        """The items ``idx`` (int64 tensor of item indices) as a new NestedTensor (gather, traceable)."""
        lengths = self.lengths[idx]
        offsets = torch.cat([lengths.new_zeros(1), lengths.cumsum(0)])
        # Output row r of item k reads row offsets[idx[k]] + (r - new offsets[k]).
        # The row count is the device's (row_range): nothing is read on the host.
        rows = _ops.row_range(offsets)
        src = _ops.segment_broadcast(self.offsets[idx] - offsets[:-1], rows, offsets) + rows
        values = self.values.index_select(0, src)
        if len(self._ragged) == 1:
            parts = [offsets]
        else:
            parts = []
            for j in range(len(self._ragged)):
                e = self._extents(j)[idx]
                parts.append(torch.cat([e.new_zeros(1), e.cumsum(0)]))
        shapes = None
        if self._shapes is not None and not _is_compiling():
            shapes = [self._shapes[int(i)] for i in idx.tolist()]
        return self._derive(values, offsets=offsets, partitions=parts, shapes=shapes)

    # -- dense operands -----------------------------------------------------------------------
    def _dense_operand(self, x: torch.Tensor, fname: str, larger_ok: bool = False) -> torch.Tensor:
        """A dense tensor broadcastable to the logical shape, as an operand of
        :attr:`values`: sized 1 or B in the batch dim and 1 or the maximum (a
        padded tensor) in the ragged dims, it is gathered at the real
        positions; the static dims broadcast as usual."""
        n = self.dim()
        k = x.dim()
        if k > n:
            raise NestedBroadcastError(
                f"{fname}: cannot broadcast a dense tensor of shape {tuple(x.shape)} against a NestedTensor of "
                f"rank {n} {self._describe()}: the sizes must match (it has more dims)"
            )
        xs = x.reshape((1,) * (n - k) + tuple(x.shape))
        axis = self._batch_axis()
        nr = len(self._ragged)
        sdims = self._static_dims()
        perm = [axis] + [self._logical_axis(r) for r in self._ragged] + [self._logical_axis(s) for s in sdims]
        xp = xs.permute(perm)
        bsz = xp.shape[0]
        rsz = list(xp.shape[1 : 1 + nr])
        ssz = tuple(xp.shape[1 + nr :])
        b = len(self)
        if not _is_compiling():
            if bsz not in (1, b):
                raise NestedBroadcastError(
                    f"{fname}: cannot broadcast a dense tensor of shape {tuple(x.shape)} against a NestedTensor "
                    f"of shape {tuple(self.shape)}: the size of its batch dim ({bsz}) must match {b} or be 1"
                )
            maxes = self._max_extents()
            for j, (sz, mx) in enumerate(zip(rsz, maxes, strict=True)):
                ok = sz == 1 or sz == mx or (larger_ok and sz >= mx)
                if not ok:
                    raise NestedBroadcastError(
                        f"{fname}: cannot broadcast a dense tensor of shape {tuple(x.shape)} against a "
                        f"NestedTensor of shape {tuple(self.shape)}: the size of its ragged dim "
                        f"{self._logical_axis(self._ragged[j])} ({sz}) must match the maximum extent {mx} or be 1"
                    )
            vs = tuple(self.values.shape[1:])
            for k2, (a, c) in enumerate(zip(ssz, vs, strict=True)):
                if a != 1 and c != 1 and a != c and not (larger_ok and a >= c):
                    raise NestedBroadcastError(
                        f"{fname}: cannot broadcast a dense tensor of shape {tuple(x.shape)} against a "
                        f"NestedTensor of shape {tuple(self.shape)}: the size of dim "
                        f"{self._logical_axis(sdims[k2])} ({a}) must match {c}"
                    )
            if larger_ok:
                idx = (slice(None),) * (1 + nr) + tuple(
                    slice(0, c) if a != 1 else slice(None) for a, c in zip(ssz, vs, strict=True)
                )
                xp = xp[idx]
                ssz = tuple(xp.shape[1 + nr :])
        if bsz == 1 and all(s == 1 for s in rsz):
            return xp.reshape(ssz)
        # One gather of rows over the batch and ragged dims flattened (a
        # single index, which torch-mlir lowers; several index tensors it
        # does not), a broadcast dim contributing 0.
        ids, coords = self._row_coords()
        flat = ids if bsz != 1 else torch.zeros_like(ids)
        for j in range(nr):
            if rsz[j] != 1:
                flat = flat * rsz[j] + coords[j]
        return xp.to(self.device).reshape((-1, *ssz)).index_select(0, flat)

    # -- torch function dispatch ---------------------------------------------------------------
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        entry = _functions.lookup(func)
        if entry is None:
            raise TypeError(
                f"ragged_mlir NestedTensor does not support {_callable_name(func)}; see "
                f"ragged_mlir.torch.nested.supported_functions() for what it supports. Use .tensor/.mask "
                f"(padded) or .values/.offsets (packed) for anything else."
            )
        return entry.handler(func, args, kwargs)


def _callable_name(func: Callable) -> str:
    """``module.qualname`` of a callable, without ``torch.overrides`` (which Dynamo cannot trace)."""
    mod = str(getattr(func, "__module__", None) or "")
    qual = str(getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func))
    qual = qual.replace("_VariableFunctionsClass.", "").replace("TensorBase.", "Tensor.")
    if mod == "torch._C._nn":
        mod = "torch.nn.functional"
    elif mod.startswith("torch._C") or mod == "torch.functional" or not mod:
        mod = "torch"
    return f"{mod}.{qual}"


def _binary_dunder(name: str, reflected: bool = False) -> Callable:
    def method(self, other):
        if not isinstance(other, (NestedTensor, torch.Tensor, numbers.Number)):
            return NotImplemented
        fn = getattr(torch, name)
        args = (other, self) if reflected else (self, other)
        return _functions.FUNCTIONS[fn].handler(fn, args, {})

    method.__name__ = name
    return method


def _inplace_dunder(name: str) -> Callable:
    def method(self, other):
        if not isinstance(other, (NestedTensor, torch.Tensor, numbers.Number)):
            return NotImplemented
        fn = getattr(torch.Tensor, name)
        return _functions.FUNCTIONS[fn].handler(fn, (self, other), {})

    return method


def _unary_dunder(name: str) -> Callable:
    def method(self):
        fn = getattr(torch, name)
        return _functions.FUNCTIONS[fn].handler(fn, (self,), {})

    return method


for _dunder, _fn in (
    ("add", "add"),
    ("sub", "sub"),
    ("mul", "mul"),
    ("truediv", "true_divide"),
    ("floordiv", "floor_divide"),
    ("mod", "remainder"),
    ("pow", "pow"),
    ("and", "bitwise_and"),
    ("or", "bitwise_or"),
    ("xor", "bitwise_xor"),
    ("lshift", "bitwise_left_shift"),
    ("rshift", "bitwise_right_shift"),
    ("matmul", "matmul"),
):
    setattr(NestedTensor, f"__{_dunder}__", _binary_dunder(_fn))
    setattr(NestedTensor, f"__r{_dunder}__", _binary_dunder(_fn, reflected=True))
for _dunder, _fn in (
    ("add", "add_"),
    ("sub", "sub_"),
    ("mul", "mul_"),
    ("truediv", "div_"),
    ("floordiv", "floor_divide_"),
    ("mod", "remainder_"),
    ("pow", "pow_"),
    ("and", "bitwise_and_"),
    ("or", "bitwise_or_"),
    ("xor", "bitwise_xor_"),
    ("lshift", "bitwise_left_shift_"),
    ("rshift", "bitwise_right_shift_"),
):
    setattr(NestedTensor, f"__i{_dunder}__", _inplace_dunder(_fn))
for _dunder, _fn in (("eq", "eq"), ("ne", "ne"), ("lt", "lt"), ("le", "le"), ("gt", "gt"), ("ge", "ge")):
    setattr(NestedTensor, f"__{_dunder}__", _binary_dunder(_fn))
for _dunder, _fn in (("neg", "neg"), ("pos", "positive"), ("abs", "abs"), ("invert", "bitwise_not")):
    setattr(NestedTensor, f"__{_dunder}__", _unary_dunder(_fn))
del _dunder, _fn


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


def _items_from_args(tensors: tuple, dtype: Any, device: Any) -> list[torch.Tensor]:
    if len(tensors) == 1 and not isinstance(tensors[0], torch.Tensor):
        arg = tensors[0]
        if isinstance(arg, NestedTensor):
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
        if isinstance(x, NestedTensor):
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
torch.serialization.add_safe_globals([NestedTensor])

# The function table and the indexing rules need the class: imported last.
from . import functions as _functions  # noqa: E402
from . import indexing as _indexing  # noqa: E402
