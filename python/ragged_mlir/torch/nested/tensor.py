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
from collections.abc import Sequence
from typing import Any

import torch

from .. import ops as _ops  # registers torch.ops.ragged.*
from . import registry as _registry
from .attributes import _Attributes
from .construct import _Constructors
from .layout import (
    _KEEP,
    _LAYOUTS,
    NestedBroadcastError,
    _check_bool,
    _check_float,
    _is_compiling,
    _items_from_args,
    _layout_key,
    _mark_batch_dims,
    _norm_dim,
    _pack,
    _pin,
    _TracedShape,
)
from .operators import _callable_name, attach_operators
from .views import _Views

__all__ = ["NestedTensor", "NestedBroadcastError"]


class NestedTensor(_Attributes, _Constructors, _Views):
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
        items = _items_from_args(tensors, dtype, device, NestedTensor)
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

    # -- indexing -------------------------------------------------------------------------
    def __getitem__(self, index: Any) -> Any:
        """``nt[i]``: item ``i`` (a view of the values); ``nt[a:b]``, lists,
        int/bool tensors: a NestedTensor of the selected items; a bool
        NestedTensor (or padded bool tensor): the selected elements of every
        item; tuples index the batch first, then inside the items (``...``
        and ``None`` supported; ``nt[:, 1:]`` slices a ragged dim; an int on a
        ragged dim selects a position of every item and returns a dense
        tensor when no ragged dim is left)."""
        from .indexing import getitem  # it needs the class

        return getitem(self, index)

    def __setitem__(self, index: Any, value: Any) -> None:
        """Assigns in place. Whole items may change shape (the batch is
        repacked); assignments inside items keep the layout and write into
        :attr:`values` (so views of it see them)."""
        from .indexing import setitem  # it needs the class

        setitem(self, index, value)

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
        entry = _registry.lookup(func)
        if entry is None:
            raise TypeError(
                f"ragged_mlir NestedTensor does not support {_callable_name(func)}; see "
                f"ragged_mlir.torch.nested.supported_functions() for what it supports. Use .tensor/.mask "
                f"(padded) or .values/.offsets (packed) for anything else."
            )
        return entry.handler(func, args, kwargs)


attach_operators(NestedTensor)
torch.serialization.add_safe_globals([NestedTensor])
