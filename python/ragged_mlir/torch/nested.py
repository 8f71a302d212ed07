"""NestedTensor: a batch of torch tensors of different shapes, stored packed.

The constructor and views follow DanLing's ``NestedTensor`` so that DanLing
users can switch by changing the import::

    from ragged_mlir.torch.nested import NestedTensor

    nt = NestedTensor(torch.randn(3, 8), torch.randn(5, 8))   # [B=2, L(b), 8]
    nt.tensor        # padded [2, 5, 8] (padding_value)
    nt.mask          # bool [2, 5]: True on real elements (mask_value=False)
    nt.concat        # packed values [8, 8] (alias: nt.values)
    nt.offsets       # int64 [B + 1] row offsets into the packed values
    nt[1], nt[0:1], nt.unbind(), len(nt), nt.shape, nt.to("cuda")

Unlike DanLing's class this one never pads to compute: it is a plain Python
object (not a ``torch.Tensor`` subclass) holding two plain tensor attributes,
``values`` and ``offsets``, and the torch functions a transformer encoder
needs dispatch to it through ``__torch_function__``. Per-token functions
(``F.linear``, ``F.layer_norm``, ``F.gelu``, ``F.relu``, ``F.silu``,
``F.dropout``, ``F.embedding``, elementwise arithmetic) run on the packed
values and keep the offsets; functions over the ragged dim (pooling with
``.sum/.mean/.max/.min(dim=1)``, ``.softmax(dim=1)``, attention) call the
``torch.ops.ragged.*`` custom ops of :mod:`ragged_mlir.torch.ops`, which the
``ragged`` ``torch.compile`` backend turns into ragged-dialect ops. No method
on those paths loops over items in Python or reads tensor data on the host,
so Dynamo traces a model that takes NestedTensors into a single graph.

Layout
------
One ragged dim (the main case; items ``[L_i, d...]`` with equal ``d...``):
``values`` is ``[sum L_i, d...]`` and ``offsets`` is ``[0, L_0, L_0 + L_1, ...]``.
The logical shape is ``[B, L(b), d...]`` (``[L(b), B, d...]`` when
``batch_first=False``).

Several ragged dims (e.g. images ``(3, 5, 7)`` and ``(3, 4, 6)``): an item dim
is ragged when its extent differs between items (when no dim differs, the
first one is). Each item is stored flattened row-major up to its last ragged
dim, so ``values`` is ``[sum_i prod(shape_i[:k]), shape[k:]...]`` with ``k``
the last ragged item dim + 1 (the layout of :class:`ragged_mlir.RaggedArray`
with a tuple ``layout``), ``offsets`` are the row offsets of the items in
``values``, ``partitions`` holds one offsets tensor per ragged dim (the
cumulative sum of that dim's extents) and ``item_shapes`` the per-item shapes.
Views (``tensor``, ``mask``, indexing, ``unbind``, ``to``) and elementwise
ops work on these; the other ops need the one-ragged-dim layout and say so.

Attention layout
----------------
``F.scaled_dot_product_attention(q, k, v)`` on NestedTensors takes them as
``[B, L(b), heads, d]`` (packed ``[N, heads, d]``; ``[B, L(b), d]`` means one
head): heads come *after* the ragged dim, unlike torch's ``[B, heads, L, d]``,
so that the projections stay per-token ops on packed rows
(``q = linear(x).unflatten(-1, (heads, d))``). Query, key and value must share
their offsets (self-attention over each item); ``attn_mask`` and
``dropout_p > 0`` are not supported (the ragged structure is the mask; use
``is_causal``). ``nn.MultiheadAttention(batch_first=True)`` called with
NestedTensors and ``need_weights=False`` runs its in-projection, the ragged
attention and its out-projection and returns ``(NestedTensor, None)``.

Under ``torch.compile`` the structure check of a binary op between two
NestedTensors is an identity check of the offsets (as for PyTorch NJT) plus a
runtime assert of their equality when they are different tensors; eagerly it
is a full comparison that raises ``ValueError``.

In-place flags (``F.relu(x, inplace=True)``, ``nn.Dropout(inplace=True)``) are
ignored: results are always new NestedTensors and inputs are never mutated.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from . import ops as _ops  # registers torch.ops.ragged.*

__all__ = ["NestedTensor"]


def _is_compiling() -> bool:
    try:
        return torch.compiler.is_compiling()
    except AttributeError:  # pragma: no cover - older torch
        return False


def _fname(func) -> str:
    """A readable name of a torch function for error messages."""
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


class NestedTensor:
    r"""A batch of tensors of different shapes, stored packed.

    ``NestedTensor(*tensors, batch_first=True, padding_value=0.0, mask_value=False)``
    builds a batch from tensors (or nested lists of numbers) of the same rank,
    dtype and device; a single list or tuple of tensors works too. The inputs
    are copied once into the packed ``values`` and never modified.

    ``ragged_dims`` (keyword, item dims counted from 0 = each item's first
    dim) fixes which dims may differ: items that disagree in any other dim
    raise ``ValueError`` naming the item. By default a dim is ragged when the
    items disagree in it, and the first dim when they agree everywhere.

    ``padding_value`` fills the padding of :attr:`tensor`; ``mask_value`` is
    the value :attr:`mask` holds at padding positions (DanLing's convention:
    with the default ``False`` the mask is ``True`` on real elements).
    """

    # Plain attributes (Dynamo sees through them): ``values`` [rows, ...],
    # ``offsets`` int64 [B + 1] row offsets, ``partitions`` one offsets
    # tensor per ragged dim, ``batch_first``, ``padding_value``,
    # ``mask_value``; private: ``_ragged_dims`` (tuple of item dims),
    # ``_lead`` (item dims merged into rows), ``_shapes`` (per-item shapes,
    # or None when only known from the offsets).

    def __init__(
        self,
        *tensors,
        batch_first: bool = True,
        padding_value: float = 0.0,
        mask_value: bool = False,
        ragged_dims: Sequence[int] | None = None,
    ) -> None:
        items = self._items_from_args(tensors)
        if not items:
            raise ValueError(
                "NestedTensor: expected at least one tensor (use NestedTensor.from_packed for an empty batch)"
            )
        first = items[0]
        rank = first.dim()
        for i, x in enumerate(items):
            if x.dim() == 0:
                raise ValueError(f"tensors[{i}]: expected rank >= 1, got a scalar (shape ())")
            if x.dim() != rank:
                raise ValueError(
                    f"tensors[{i}]: expected rank {rank} like tensors[0] (shape {tuple(first.shape)}), "
                    f"got shape {tuple(x.shape)}"
                )
            if x.dtype != first.dtype:
                raise ValueError(f"tensors[{i}]: expected dtype {first.dtype} like tensors[0], got {x.dtype}")
            if x.device != first.device:
                raise ValueError(
                    f"tensors[{i}]: expected device {first.device} like tensors[0], got {x.device}"
                )
        shapes = [tuple(int(s) for s in x.shape) for x in items]
        if ragged_dims is None:
            rdims = tuple(d for d in range(rank) if len({s[d] for s in shapes}) > 1) or (0,)
        else:
            rdims = tuple(sorted({int(d) + rank if int(d) < 0 else int(d) for d in ragged_dims}))
            if not rdims or rdims[0] < 0 or rdims[-1] >= rank:
                raise ValueError(
                    f"ragged_dims: expected item dims in [0, {rank}) (items have rank {rank}), "
                    f"got {tuple(ragged_dims)}"
                )
            for i, s in enumerate(shapes):
                for d in range(rank):
                    if d not in rdims and s[d] != shapes[0][d]:
                        raise ValueError(
                            f"tensors[{i}]: dim {d} is not ragged (ragged_dims={rdims}) and must match "
                            f"tensors[0] (shape {shapes[0]}), got shape {s}"
                        )
        lead = rdims[-1] + 1
        trailing = shapes[0][lead:]
        values = torch.cat([x.reshape((-1,) + trailing) for x in items])
        device = first.device
        rows = [math.prod(s[:lead]) for s in shapes]
        offsets = torch.tensor([0] + rows, dtype=torch.int64, device=device).cumsum(0)
        if rdims == (0,):
            partitions = [offsets]
        else:
            partitions = [
                torch.tensor([0] + [s[d] for s in shapes], dtype=torch.int64, device=device).cumsum(0)
                for d in rdims
            ]
        self._set(values, offsets, partitions, rdims, shapes, batch_first, padding_value, mask_value)

    @staticmethod
    def _items_from_args(tensors: tuple) -> list[torch.Tensor]:
        if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
            inner = tensors[0]
            # A single list of items (tensors or nested sequences), not one
            # item given as a list of numbers.
            if inner and all(isinstance(x, (torch.Tensor, list, tuple)) for x in inner):
                tensors = tuple(inner)
        items = []
        for x in tensors:
            if isinstance(x, NestedTensor):
                raise TypeError(
                    "NestedTensor: items must be tensors, got a NestedTensor (nesting is not supported)"
                )
            items.append(x if isinstance(x, torch.Tensor) else torch.as_tensor(x))
        return items

    def _set(
        self, values, offsets, partitions, rdims, shapes, batch_first, padding_value, mask_value
    ) -> None:
        self.values = values
        self.offsets = offsets
        self.partitions = partitions
        self.batch_first = batch_first
        self.padding_value = padding_value
        self.mask_value = mask_value
        self._ragged_dims = rdims
        self._lead = rdims[-1] + 1
        self._shapes = shapes

    @classmethod
    def _new(
        cls, values, offsets, partitions, rdims, shapes, batch_first, padding_value, mask_value
    ) -> NestedTensor:
        obj = cls.__new__(cls)
        obj._set(values, offsets, partitions, rdims, shapes, batch_first, padding_value, mask_value)
        return obj

    def _like(self, values: torch.Tensor, keep_shapes: bool = False) -> NestedTensor:
        """A NestedTensor with the structure of ``self`` and new packed values.

        ``keep_shapes``: the op kept every item's shape (elementwise ops);
        needed for several ragged dims. Otherwise the result has one ragged
        dim and its item shapes are recomputed from the offsets on demand."""
        if keep_shapes and self._ragged_dims != (0,):
            return self._new(
                values,
                self.offsets,
                self.partitions,
                self._ragged_dims,
                self._shapes,
                self.batch_first,
                self.padding_value,
                self.mask_value,
            )
        return self._new(
            values,
            self.offsets,
            [self.offsets],
            (0,),
            None,
            self.batch_first,
            self.padding_value,
            self.mask_value,
        )

    # -- construction ------------------------------------------------------
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
            bounds = offsets.tolist()
            if bounds[0] != 0:
                raise ValueError(f"offsets: must start at 0, got {bounds[0]}")
            for i in range(1, len(bounds)):
                if bounds[i] < bounds[i - 1]:
                    raise ValueError(
                        f"offsets: must be non-decreasing, but offsets[{i}] = {bounds[i]} < "
                        f"offsets[{i - 1}] = {bounds[i - 1]}"
                    )
            if bounds[-1] != values.shape[0]:
                raise ValueError(
                    f"offsets: the last offset must equal the number of rows of values "
                    f"({values.shape[0]}), got {bounds[-1]}"
                )
        return cls._new(values, offsets, [offsets], (0,), None, batch_first, padding_value, mask_value)

    @classmethod
    def from_njt(cls, njt: torch.Tensor, **kwargs) -> NestedTensor:
        """From a PyTorch nested tensor. A contiguous jagged-layout NJT with
        its ragged dim at 1 is wrapped without a copy; any other (strided
        layout, holes) is unbound into items. ``kwargs``: ``batch_first``,
        ``padding_value``, ``mask_value``."""
        if not isinstance(njt, torch.Tensor) or not njt.is_nested:
            raise TypeError(f"from_njt: expected a torch.nested tensor, got {type(njt).__name__}")
        if njt.layout == torch.jagged and getattr(njt, "_ragged_idx", 1) == 1 and njt.lengths() is None:
            return cls.from_packed(njt.values(), njt.offsets(), **kwargs)
        return cls(list(njt.unbind()), **kwargs)

    def to_njt(self) -> torch.Tensor:
        """A ``torch.jagged`` nested tensor ``[B, j, d...]`` sharing ``values``
        (NJTs are always batch-first)."""
        self._require_sequence("to_njt")
        return torch.nested.nested_tensor_from_jagged(self.values, self.offsets)

    @classmethod
    def from_danling(cls, nt: Any) -> NestedTensor:
        """From a DanLing ``NestedTensor`` (duck-typed; DanLing is not needed).

        Uses its list of items (``storage`` / ``_storage``) when it has one,
        else its ``.tensor`` and ``.mask`` (padding at the end of each dim,
        ``mask_value`` and ``batch_first`` honoured). Keeps its
        ``batch_first``, ``padding_value`` and ``mask_value``."""
        state = {
            "batch_first": bool(getattr(nt, "batch_first", True)),
            "padding_value": getattr(nt, "padding_value", 0.0),
            "mask_value": bool(getattr(nt, "mask_value", False)),
        }
        for name in ("storage", "_storage"):
            items = getattr(nt, name, None)
            if isinstance(items, (list, tuple)) and items and all(isinstance(x, torch.Tensor) for x in items):
                return cls(list(items), **state)
        tensor = getattr(nt, "tensor", None)
        mask = getattr(nt, "mask", None)
        if callable(tensor):
            tensor = tensor()
        if callable(mask):
            mask = mask()
        if not isinstance(tensor, torch.Tensor) or not isinstance(mask, torch.Tensor):
            raise TypeError(
                f"from_danling: expected an object with a list of tensors (storage) or .tensor and .mask, "
                f"got {type(nt).__name__}"
            )
        mask = mask.to(torch.bool)
        if state["mask_value"]:
            mask = ~mask
        if not state["batch_first"]:
            tensor = tensor.transpose(0, 1)
            mask = mask.transpose(0, 1)
        if mask.dim() > tensor.dim() or tuple(mask.shape) != tuple(tensor.shape[: mask.dim()]):
            raise ValueError(
                f"from_danling: mask shape {tuple(mask.shape)} does not prefix "
                f"tensor shape {tuple(tensor.shape)}"
            )
        items = []
        for b in range(tensor.shape[0]):
            m = mask[b]
            extents = []
            for d in range(m.dim()):
                other = tuple(e for e in range(m.dim()) if e != d)
                along = m.any(dim=other) if other else m
                extents.append(int(along.sum()))
            items.append(tensor[b][tuple(slice(0, e) for e in extents)])
        return cls(items, **state)

    # -- structure ---------------------------------------------------------
    def _require_sequence(self, fname: str) -> None:
        if self._ragged_dims != (0,):
            raise NotImplementedError(
                f"{fname}: needs a NestedTensor with one ragged dim ([B, L(b), ...]); this one is ragged in "
                f"item dims {self._ragged_dims} (item shapes {self._describe_shapes()})"
            )

    def _item_shapes(self) -> list[tuple[int, ...]]:
        if self._shapes is None:
            tail = tuple(int(s) for s in self.values.shape[1:])
            lengths = (self.offsets[1:] - self.offsets[:-1]).tolist()
            self._shapes = [(int(n),) + tail for n in lengths]
        return self._shapes

    def _row_bounds(self) -> list[int]:
        return [int(x) for x in self.offsets.tolist()]

    def _describe_shapes(self, limit: int = 8) -> str:
        try:
            shapes = self._item_shapes()
        except Exception:  # e.g. under tracing: data unavailable
            return f"values {tuple(self.values.shape)}, offsets {tuple(self.offsets.shape)}"
        if self._ragged_dims == (0,):
            lens = [s[0] for s in shapes]
            shown = ", ".join(map(str, lens[:limit])) + (", ..." if len(lens) > limit else "")
            return f"[{len(shapes)}, L=({shown}){''.join(', ' + str(t) for t in self.values.shape[1:])}]"
        shown = ", ".join(str(s) for s in shapes[:limit]) + (", ..." if len(shapes) > limit else "")
        return f"[{len(shapes)}, items=({shown})]"

    def _check_same_structure(self, other: NestedTensor, fname: str) -> None:
        if other is self or other.offsets is self.offsets:
            if self._ragged_dims == other._ragged_dims:
                return
        if self._ragged_dims != other._ragged_dims or self.offsets.shape != other.offsets.shape:
            raise ValueError(
                f"{fname}: NestedTensors of different structure: {self._describe_shapes()} and "
                f"{other._describe_shapes()}"
            )
        if _is_compiling():
            torch._assert_async(
                torch.eq(self.offsets, other.offsets).all(),
                f"{fname}: NestedTensors of different structure (offsets differ)",
            )
            return
        same = torch.equal(self.offsets, other.offsets.to(self.offsets.device))
        if same and self._ragged_dims != (0,):
            same = self._item_shapes() == other._item_shapes()
        if not same:
            raise ValueError(
                f"{fname}: NestedTensors of different structure: {self._describe_shapes()} and "
                f"{other._describe_shapes()}"
            )

    # -- views -------------------------------------------------------------
    @property
    def concat(self) -> torch.Tensor:
        """The packed values (every item's elements one after another)."""
        return self.values

    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @property
    def device(self) -> torch.device:
        return self.values.device

    @property
    def requires_grad(self) -> bool:
        return self.values.requires_grad

    @property
    def is_nested(self) -> bool:
        # False on purpose: torch modules (nn.MultiheadAttention) take other
        # code paths for torch's own nested tensors.
        return False

    @property
    def ragged_dims(self) -> tuple[int, ...]:
        """The ragged dims, as item dims (0 = each item's first dim)."""
        return self._ragged_dims

    @property
    def lengths(self) -> torch.Tensor:
        """Rows of ``values`` per item, int64 ``[B]`` (the extents of the
        ragged dim in the one-ragged-dim case)."""
        return self.offsets[1:] - self.offsets[:-1]

    @property
    def item_shapes(self) -> tuple[torch.Size, ...]:
        """The shape of every item."""
        return tuple(torch.Size(s) for s in self._item_shapes())

    ragged_shape = item_shapes

    def dim(self) -> int:
        """Logical rank: batch dim + item rank."""
        return self._lead + self.values.dim()

    @property
    def ndim(self) -> int:
        return self.dim()

    def __len__(self) -> int:
        return self.offsets.shape[0] - 1

    def _max_item_shape(self) -> tuple[int, ...]:
        shapes = self._item_shapes()
        rank = self.dim() - 1
        if not shapes:
            return (0,) * self._lead + tuple(int(s) for s in self.values.shape[1:])
        return tuple(max(s[d] for s in shapes) for d in range(rank))

    @property
    def shape(self) -> torch.Size:
        """Logical shape with each ragged dim shown as its maximum:
        ``[B, max L, d...]`` (``[max L, B, d...]`` when not batch_first)."""
        full = (len(self),) + self._max_item_shape()
        if not self.batch_first:
            full = (full[1], full[0]) + full[2:]
        return torch.Size(full)

    def size(self, dim: int | None = None):
        shape = self.shape
        return shape if dim is None else shape[dim]

    @property
    def tensor(self) -> torch.Tensor:
        """Padded tensor ``[B, max dims...]`` filled with ``padding_value``
        (``[max L, B, ...]`` when not batch_first)."""
        b = len(self)
        maxes = self._max_item_shape()
        padded = self.values.new_full((b,) + maxes, self.padding_value)
        if self._ragged_dims == (0,):
            rows = self.values.shape[0]
            if rows:
                ids = _ops.segment_ids(self.offsets, rows)
                pos = torch.arange(rows, device=self.values.device) - self.offsets[ids]
                padded[ids, pos] = self.values
        else:
            for i, item in enumerate(self.unbind()):
                padded[i][tuple(slice(0, s) for s in item.shape)] = item
        return padded if self.batch_first else padded.transpose(0, 1).contiguous()

    @property
    def mask(self) -> torch.Tensor:
        """Bool mask ``[B, max dims up to the last ragged dim...]`` (``[B, max L]``
        for sequences): real elements hold ``not mask_value``, padding holds
        ``mask_value`` (so ``True`` on real elements by default)."""
        b = len(self)
        device = self.values.device
        maxes = self._max_item_shape()[: self._lead]
        if self._ragged_dims == (0,):
            extents = [self.lengths]
        else:
            ext = torch.tensor(
                [list(s[: self._lead]) for s in self._item_shapes()], dtype=torch.int64, device=device
            )
            extents = [ext[:, d] if b else ext.new_zeros(0) for d in range(self._lead)]
        real = torch.ones((b,) + maxes, dtype=torch.bool, device=device)
        for d, (m, e) in enumerate(zip(maxes, extents, strict=False)):
            view = [1] * (len(maxes) + 1)
            view[d + 1] = m
            inside = torch.arange(m, device=device).view(view) < e.view((b,) + (1,) * len(maxes))
            real = real & inside
        mask = ~real if self.mask_value else real
        return mask if self.batch_first else mask.transpose(0, 1).contiguous()

    def unbind(self, dim: int | None = None) -> tuple[torch.Tensor, ...]:
        """The items (views of the packed values); ``dim``, if given, must be
        the batch dim (0, or 1 when not batch_first)."""
        batch_dim = 0 if self.batch_first else 1
        if dim is not None and dim not in (batch_dim, batch_dim - self.dim()):
            raise NotImplementedError(f"unbind: only the batch dim ({batch_dim}) is supported, got dim={dim}")
        shapes = self._item_shapes()
        bounds = self._row_bounds()
        tail = tuple(self.values.shape[1:])
        return tuple(
            self.values[bounds[i] : bounds[i + 1]].reshape(shapes[i][: self._lead] + tail)
            for i in range(len(shapes))
        )

    def tolist(self) -> list:
        return [x.tolist() for x in self.unbind()]

    def __iter__(self):
        return iter(self.unbind())

    def __getitem__(self, index):
        """``nt[i]`` -> item tensor; ``nt[a:b]``, ``nt[[i, j]]`` -> NestedTensor;
        ``nt[i, ...]`` / ``nt[a:b, ...]`` index inside the items."""
        if isinstance(index, tuple):
            if not index:
                return self
            head, rest = index[0], index[1:]
            picked = self[head]
            if not rest:
                return picked
            if isinstance(picked, torch.Tensor):
                return picked[rest]
            return NestedTensor([x[rest] for x in picked.unbind()], **self._state())
        if (
            isinstance(index, (int, numbers.Integral))
            and not isinstance(index, bool)
            or (isinstance(index, torch.Tensor) and index.dim() == 0 and not index.dtype.is_floating_point)
        ):
            i = int(index)
            b = len(self)
            if not -b <= i < b:
                raise IndexError(f"index {i} is out of range for a NestedTensor of {b} items")
            i %= b
            bounds = self._row_bounds()
            shape = self._item_shapes()[i]
            return self.values[bounds[i] : bounds[i + 1]].reshape(
                shape[: self._lead] + tuple(self.values.shape[1:])
            )
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            picks = list(range(start, stop, step))
            if step == 1:
                bounds = self._row_bounds()
                a, z = (bounds[start], bounds[stop]) if picks else (0, 0)
                values = self.values[a:z]
                offsets = (
                    self.offsets[start : max(stop, start) + 1] - self.offsets[start]
                    if picks
                    else self.offsets[:1] * 0
                )
                if self._ragged_dims == (0,):
                    return self._new(values, offsets, [offsets], (0,), None, **self._state())
                shapes = self._item_shapes()[start:stop]
                parts = [
                    p[start : max(stop, start) + 1] - p[start] if picks else p[:1] * 0
                    for p in self.partitions
                ]
                return self._new(values, offsets, parts, self._ragged_dims, shapes, **self._state())
            return self._select(picks)
        if isinstance(index, (list, torch.Tensor)):
            idx = torch.as_tensor(index)
            if idx.dtype == torch.bool:
                idx = idx.nonzero().flatten()
            return self._select([int(i) for i in idx.tolist()])
        raise TypeError(
            f"NestedTensor indices must be ints, slices, lists or tuples, got {type(index).__name__}"
        )

    def _select(self, picks: list[int]) -> NestedTensor:
        b = len(self)
        for i in picks:
            if not -b <= i < b:
                raise IndexError(f"index {i} is out of range for a NestedTensor of {b} items")
        if not picks:
            empty = self.values[:0]
            offsets = self.offsets[:1] * 0
            return self._new(
                empty, offsets, [offsets] * len(self._ragged_dims), self._ragged_dims, [], **self._state()
            )
        items = [self[i] for i in picks]
        return NestedTensor(items, ragged_dims=self._ragged_dims, **self._state())

    def _state(self) -> dict[str, Any]:
        return {
            "batch_first": self.batch_first,
            "padding_value": self.padding_value,
            "mask_value": self.mask_value,
        }

    # -- conversions -------------------------------------------------------
    def to(self, *args, **kwargs) -> NestedTensor:
        """Like ``Tensor.to``: dtype conversions apply to the values, device
        moves apply to values and offsets (offsets stay int64)."""
        values = self.values.to(*args, **kwargs)
        if values.device == self.offsets.device:
            return self._with_values(values)
        offsets = self.offsets.to(device=values.device)
        parts = None if self._ragged_dims == (0,) else [p.to(device=values.device) for p in self.partitions]
        return self._with_values(values, offsets, parts)

    def cpu(self) -> NestedTensor:
        return self.to("cpu")

    def cuda(self, device=None) -> NestedTensor:
        return self.to("cuda" if device is None else device)

    def float(self) -> NestedTensor:
        return self.to(torch.float32)

    def double(self) -> NestedTensor:
        return self.to(torch.float64)

    def half(self) -> NestedTensor:
        return self.to(torch.float16)

    def bfloat16(self) -> NestedTensor:
        return self.to(torch.bfloat16)

    def _with_values(self, values: torch.Tensor, offsets=None, partitions=None) -> NestedTensor:
        """Same structure and item shapes, other values (and offsets)."""
        offsets = self.offsets if offsets is None else offsets
        single = self._ragged_dims == (0,)
        if partitions is None:
            partitions = [offsets] if single else self.partitions
        # Under tracing, one-ragged-dim results do not carry the Python list
        # of shapes (Dynamo would guard on every length); it is recomputed
        # from the offsets when a view needs it.
        shapes = None if single and _is_compiling() else self._shapes
        return self._new(values, offsets, partitions, self._ragged_dims, shapes, **self._state())

    def detach(self) -> NestedTensor:
        return self._with_values(self.values.detach())

    def clone(self) -> NestedTensor:
        offsets = self.offsets.clone()
        parts = None if self._ragged_dims == (0,) else [p.clone() for p in self.partitions]
        return self._with_values(self.values.clone(), offsets, parts)

    def contiguous(self) -> NestedTensor:
        return self._with_values(self.values.contiguous())

    def transpose(self, dim0: int, dim1: int) -> NestedTensor:
        """Only swaps the batch and ragged dims (0 and 1): the packed data
        stay; ``batch_first`` flips (this is how ``nn.MultiheadAttention``
        hands inputs to ``F.multi_head_attention_forward``)."""
        n = self.dim()
        if {dim0 % n, dim1 % n} != {0, 1}:
            raise NotImplementedError(
                f"NestedTensor.transpose: only dims 0 and 1 can be swapped, got ({dim0}, {dim1})"
            )
        return self._new(
            self.values,
            self.offsets,
            self.partitions,
            self._ragged_dims,
            self._shapes,
            not self.batch_first,
            self.padding_value,
            self.mask_value,
        )

    def __repr__(self) -> str:
        extra = "" if self._ragged_dims == (0,) else f", ragged_dims={self._ragged_dims}"
        extra += "" if self.batch_first else ", batch_first=False"
        extra += ", requires_grad=True" if self.values.requires_grad else ""
        return f"NestedTensor({self._describe_shapes()}, dtype={self.dtype}, device={self.device}{extra})"

    # -- per-token methods ---------------------------------------------------
    def _token_dim(self, dim: int, fname: str) -> int:
        """Logical dim -> dim of ``values`` for a trailing (per-token) dim."""
        n = self.dim()
        if not -n <= dim < n:
            raise IndexError(f"{fname}: dim {dim} is out of range for a NestedTensor of rank {n}")
        dim %= n
        if dim < self._lead + 1:
            raise NotImplementedError(
                f"{fname}: only the dense trailing dims (>= {self._lead + 1}) are supported here, "
                f"got dim {dim}"
            )
        return dim - self._lead

    def chunk(self, chunks: int, dim: int = -1) -> tuple[NestedTensor, ...]:
        """Splits a trailing dense dim (e.g. a fused qkv projection)."""
        self._require_sequence("chunk")
        d = self._token_dim(dim, "chunk")
        return tuple(self._like(v) for v in self.values.chunk(chunks, dim=d))

    def split(self, split_size, dim: int = -1) -> tuple[NestedTensor, ...]:
        """Splits a trailing dense dim."""
        self._require_sequence("split")
        d = self._token_dim(dim, "split")
        return tuple(self._like(v) for v in self.values.split(split_size, dim=d))

    def unflatten(self, dim: int, sizes: Sequence[int]) -> NestedTensor:
        self._require_sequence("unflatten")
        return self._like(self.values.unflatten(self._token_dim(dim, "unflatten"), sizes))

    def flatten(self, start_dim: int = 2, end_dim: int = -1) -> NestedTensor:
        self._require_sequence("flatten")
        a = self._token_dim(start_dim, "flatten")
        z = self._token_dim(end_dim, "flatten")
        return self._like(self.values.flatten(a, z))

    # -- reductions --------------------------------------------------------
    def _reduce(self, kind: str, dim, keepdim: bool, dtype) -> Any:
        values = self.values if dtype is None else self.values.to(dtype)
        fname = f"NestedTensor.{kind}"
        if dim is None:
            if kind == "mean":
                return values.mean()
            if kind == "sum":
                return values.sum()
            return values.amax() if kind == "max" else values.amin()
        if isinstance(dim, (tuple, list)):
            if len(dim) != 1:
                raise NotImplementedError(f"{fname}: reduce over one dim at a time, got dim={tuple(dim)}")
            dim = dim[0]
        self._require_sequence(fname)
        n = self.dim()
        if not -n <= dim < n:
            raise IndexError(f"{fname}: dim {dim} is out of range for a NestedTensor of rank {n}")
        dim %= n
        ragged = 1 if self.batch_first else 0
        if dim == ragged:
            empty = float("-inf") if kind == "max" else float("inf") if kind == "min" else 0.0
            out = torch.ops.ragged.segment_reduce(values, self.offsets, kind, empty)
            return out.unsqueeze(ragged) if keepdim else out
        if dim == 1 - ragged:
            raise NotImplementedError(f"{fname}: reducing over the batch dim ({dim}) is not supported")
        d = dim - 1
        if kind == "mean":
            out = values.mean(dim=d, keepdim=keepdim)
        elif kind == "sum":
            out = values.sum(dim=d, keepdim=keepdim)
        else:
            out = (
                values.amax(dim=d, keepdim=keepdim) if kind == "max" else values.amin(dim=d, keepdim=keepdim)
            )
        return self._like(out)

    def sum(self, dim=None, keepdim: bool = False, *, dtype=None):
        """Over the ragged dim (1): dense ``[B, ...]`` (0 for empty items);
        over a trailing dim: a NestedTensor; ``dim=None``: every element."""
        return self._reduce("sum", dim, keepdim, dtype)

    def mean(self, dim=None, keepdim: bool = False, *, dtype=None):
        """Over the ragged dim (1): dense ``[B, ...]`` (0 for empty items)."""
        return self._reduce("mean", dim, keepdim, dtype)

    def max(self, dim=None, keepdim: bool = False):
        """Over the ragged dim (1): dense ``[B, ...]`` of maxima (-inf for
        empty items); returns the values only (no indices, unlike torch)."""
        return self._reduce("max", dim, keepdim, None)

    def min(self, dim=None, keepdim: bool = False):
        """Over the ragged dim (1): dense ``[B, ...]`` of minima (+inf for
        empty items); returns the values only."""
        return self._reduce("min", dim, keepdim, None)

    amax = max
    amin = min

    def softmax(self, dim: int, dtype=None) -> NestedTensor:
        """Over the ragged dim (1): per item and column; over a trailing dim:
        per token."""
        self._require_sequence("softmax")
        values = self.values if dtype is None else self.values.to(dtype)
        n = self.dim()
        if not -n <= dim < n:
            raise IndexError(f"softmax: dim {dim} is out of range for a NestedTensor of rank {n}")
        dim %= n
        ragged = 1 if self.batch_first else 0
        if dim == ragged:
            return self._like(torch.ops.ragged.segment_softmax(values, self.offsets))
        if dim == 1 - ragged:
            raise NotImplementedError(f"softmax: over the batch dim ({dim}) is not supported")
        return self._like(torch.softmax(values, dim=dim - 1))

    # -- operators -----------------------------------------------------------
    def __add__(self, other):
        return _binary(torch.add, "add", self, other)

    def __radd__(self, other):
        return _binary(torch.add, "add", other, self)

    def __sub__(self, other):
        return _binary(torch.sub, "sub", self, other)

    def __rsub__(self, other):
        return _binary(torch.sub, "sub", other, self)

    def __mul__(self, other):
        return _binary(torch.mul, "mul", self, other)

    def __rmul__(self, other):
        return _binary(torch.mul, "mul", other, self)

    def __truediv__(self, other):
        return _binary(torch.div, "div", self, other)

    def __rtruediv__(self, other):
        return _binary(torch.div, "div", other, self)

    def __pow__(self, other):
        return _binary(torch.pow, "pow", self, other)

    def __neg__(self):
        return self._like(-self.values, keep_shapes=True)

    def __matmul__(self, other):
        return _matmul(self, other)

    # -- torch function dispatch --------------------------------------------
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        handler = _HANDLERS.get(func)
        if handler is None:
            raise TypeError(
                f"ragged_mlir NestedTensor does not support {_fname(func)}; supported: per-token F.linear, "
                f"F.layer_norm, F.gelu/relu/silu, F.dropout, F.embedding, +-*/, and over the ragged dim "
                f"sum/mean/max/min/softmax, F.scaled_dot_product_attention, nn.MultiheadAttention. "
                f"Use .tensor/.mask or .values/.offsets for anything else."
            )
        return handler(*args, **kwargs)


# -- handlers ------------------------------------------------------------------


def _dense_operand(nt: NestedTensor, other, fname: str):
    """``other`` (a dense tensor or scalar) as an operand of ``nt.values``."""
    if not isinstance(other, torch.Tensor):
        return other
    k = other.dim()
    trail = nt.values.dim() - 1  # dense trailing dims after the rows
    if nt._ragged_dims != (0,):
        if k <= trail:
            return other
        raise ValueError(
            f"{fname}: a dense operand of shape {tuple(other.shape)} can only broadcast on the "
            f"{trail} trailing "
            f"dense dims of a NestedTensor ragged in several dims"
        )
    rank = trail + 2
    if k <= trail:
        return other
    l_dim = 1 if nt.batch_first else 0
    if k == rank - 1:  # aligned with [L, d...] (or [B, d...] when seq-first)
        if other.shape[0] == 1:
            return other
    elif k == rank:
        if other.shape[l_dim] == 1:
            per_item = other.select(l_dim, 0)  # [B or 1, d...]
            if per_item.shape[0] == 1:
                return per_item
            if per_item.shape[0] == len(nt):
                ids = _ops.segment_ids(nt.offsets, nt.values.shape[0])
                return per_item.index_select(0, ids)
    raise ValueError(
        f"{fname}: cannot broadcast a dense tensor of shape {tuple(other.shape)} against a NestedTensor "
        f"{nt._describe_shapes()} (logical rank {rank}, {'batch_first' if nt.batch_first else 'seq-first'}): "
        f"it may span the trailing dense dims, be 1 along the ragged dim and 1 or B along the batch dim"
    )


def _binary(fn: Callable, fname: str, a, b, **kwargs):
    if isinstance(a, NestedTensor) and isinstance(b, NestedTensor):
        a._check_same_structure(b, fname)
        return a._like(fn(a.values, b.values, **kwargs), keep_shapes=True)
    if isinstance(a, NestedTensor):
        return a._like(fn(a.values, _dense_operand(a, b, fname), **kwargs), keep_shapes=True)
    if isinstance(b, NestedTensor):
        return b._like(fn(_dense_operand(b, a, fname), b.values, **kwargs), keep_shapes=True)
    return fn(a, b, **kwargs)  # pragma: no cover - not reached through dispatch


def _binary_handler(fn: Callable, fname: str):
    def handler(input, other, *args, **kwargs):
        if args:
            kwargs = dict(kwargs, alpha=args[0])
        if kwargs.pop("out", None) is not None:
            raise NotImplementedError(f"{fname}: out= is not supported for NestedTensor")
        return _binary(fn, fname, input, other, **kwargs)

    return handler


def _matmul(a, b):
    if isinstance(a, NestedTensor) and not isinstance(b, NestedTensor) and isinstance(b, torch.Tensor):
        if b.dim() in (1, 2):
            a._require_sequence("matmul")
            return a._like(torch.matmul(a.values, b))
    raise NotImplementedError(
        "matmul: only NestedTensor @ dense matrix (or vector) is supported for NestedTensors; "
        "use F.scaled_dot_product_attention for ragged x ragged products"
    )


def _as_nt(x, fname: str, what: str = "input") -> NestedTensor:
    if not isinstance(x, NestedTensor):
        raise TypeError(f"{fname}: expected {what} to be a NestedTensor, got {type(x).__name__}")
    return x


def _unary(fn: Callable, fname: str):
    """Elementwise functions of the input only (extra args passed through)."""

    def handler(input, *args, **kwargs):
        nt = _as_nt(input, fname)
        kwargs.pop("inplace", None)
        return nt._like(fn(nt.values, *args, **kwargs), keep_shapes=True)

    return handler


def _relu(input, inplace: bool = False):
    nt = _as_nt(input, "relu")
    return nt._like(torch.relu(nt.values), keep_shapes=True)


def _silu(input, inplace: bool = False):
    nt = _as_nt(input, "silu")
    return nt._like(F.silu(nt.values), keep_shapes=True)


def _dropout(input, p: float = 0.5, training: bool = True, inplace: bool = False):
    nt = _as_nt(input, "dropout")
    if not training or p == 0.0:
        return nt
    return nt._like(F.dropout(nt.values, p, True, False), keep_shapes=True)


def _linear(input, weight, bias=None):
    nt = _as_nt(input, "linear")
    nt._require_sequence("linear")
    return nt._like(F.linear(nt.values, weight, bias))


def _layer_norm(input, normalized_shape, weight=None, bias=None, eps: float = 1e-5):
    nt = _as_nt(input, "layer_norm")
    nt._require_sequence("layer_norm")
    normalized_shape = (
        tuple(normalized_shape) if not isinstance(normalized_shape, int) else (normalized_shape,)
    )
    if len(normalized_shape) > nt.values.dim() - 1:
        raise NotImplementedError(
            f"layer_norm: normalized_shape {normalized_shape} must only cover the dense trailing dims "
            f"{tuple(nt.values.shape[1:])} of the NestedTensor (not the ragged dim)"
        )
    return nt._like(F.layer_norm(nt.values, normalized_shape, weight, bias, eps))


def _embedding(
    input, weight, padding_idx=None, max_norm=None, norm_type=2.0, scale_grad_by_freq=False, sparse=False
):
    nt = _as_nt(input, "embedding", "the ids (input)")
    if isinstance(weight, NestedTensor):
        raise TypeError("embedding: the weight must be a dense tensor, got a NestedTensor")
    nt._require_sequence("embedding")
    if max_norm is not None:
        raise NotImplementedError(
            "embedding: max_norm renormalises the weight in place; not supported for NestedTensor"
        )
    return nt._like(F.embedding(nt.values, weight, padding_idx, None, norm_type, scale_grad_by_freq, sparse))


def _softmax(input, dim=None, _stacklevel: int = 3, dtype=None):
    nt = _as_nt(input, "softmax")
    if dim is None:
        raise ValueError("softmax: give dim explicitly for a NestedTensor (1 = over the ragged dim)")
    return nt.softmax(dim, dtype=dtype)


def _reduction(kind: str):
    def handler(input, dim=None, keepdim: bool = False, *, dtype=None, out=None):
        nt = _as_nt(input, kind)
        if out is not None:
            raise NotImplementedError(f"{kind}: out= is not supported for NestedTensor")
        if isinstance(dim, bool):  # guard against torch.max(a, b) style misuse
            raise TypeError(f"{kind}: dim must be an int")
        if isinstance(dim, (NestedTensor, torch.Tensor)):
            raise NotImplementedError(
                f"{kind}: the elementwise two-tensor form is not supported for NestedTensor"
            )
        if kind in ("max", "min"):
            if dtype is not None:
                raise TypeError(f"{kind}: got an unexpected argument dtype")
            return nt._reduce(kind, dim, keepdim, None)
        return nt._reduce(kind, dim, keepdim, dtype)

    return handler


def _heads(values: torch.Tensor, fname: str, what: str) -> torch.Tensor:
    if values.dim() == 2:
        return values.unsqueeze(1)
    if values.dim() == 3:
        return values
    raise ValueError(
        f"{fname}: {what} must be a NestedTensor [B, L(b), heads, d] or [B, L(b), d] (packed [N, heads, d]); "
        f"got packed values of shape {tuple(values.shape)}"
    )


def _ragged_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, offsets, scale, causal, gqa, fname):
    """Attention on packed ``[N, heads, d]`` rows; returns ``[N, heads, d]``."""
    hq, hk, hv = q.shape[1], k.shape[1], v.shape[1]
    if hk != hq or hv != hq:
        if not gqa or hk != hv or hq % hk != 0:
            raise ValueError(
                f"{fname}: query has {hq} heads, key {hk} and value {hv}; they must match "
                f"(or divide them with enable_gqa=True)"
            )
        k = k.repeat_interleave(hq // hk, dim=1)
        v = v.repeat_interleave(hq // hk, dim=1)
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"{fname}: query and key head sizes differ ({q.shape[-1]} vs {k.shape[-1]})")
    if v.shape[-1] != q.shape[-1]:
        raise NotImplementedError(
            f"{fname}: the value head size ({v.shape[-1]}) must equal the query's ({q.shape[-1]}) "
            f"for ragged attention"
        )
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    return torch.ops.ragged.attention(q, k, v, offsets, float(scale), bool(causal))


def _sdpa(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale=None,
    enable_gqa: bool = False,
):
    fname = "scaled_dot_product_attention"
    q = _as_nt(query, fname, "query")
    k = _as_nt(key, fname, "key")
    v = _as_nt(value, fname, "value")
    for name, x in (("query", q), ("key", k), ("value", v)):
        x._require_sequence(f"{fname} ({name})")
    if attn_mask is not None:
        raise NotImplementedError(
            f"{fname}: attn_mask is not supported for NestedTensor inputs (the ragged structure is the mask; "
            f"use is_causal=True for causal attention)"
        )
    if dropout_p:
        raise NotImplementedError(f"{fname}: dropout_p={dropout_p} is not supported for NestedTensor inputs")
    if q.batch_first != k.batch_first or q.batch_first != v.batch_first:
        raise ValueError(f"{fname}: query, key and value must agree on batch_first")
    q._check_same_structure(k, f"{fname} (query vs key)")
    q._check_same_structure(v, f"{fname} (query vs value)")
    one_head = q.values.dim() == 2
    out = _ragged_attention(
        _heads(q.values, fname, "query"),
        _heads(k.values, fname, "key"),
        _heads(v.values, fname, "value"),
        q.offsets,
        scale,
        is_causal,
        enable_gqa,
        fname,
    )
    return q._like(out.squeeze(1) if one_head else out)


def _mha(
    query,
    key,
    value,
    embed_dim_to_check,
    num_heads,
    in_proj_weight,
    in_proj_bias,
    bias_k,
    bias_v,
    add_zero_attn,
    dropout_p,
    out_proj_weight,
    out_proj_bias,
    training=True,
    key_padding_mask=None,
    need_weights=True,
    attn_mask=None,
    use_separate_proj_weight=False,
    q_proj_weight=None,
    k_proj_weight=None,
    v_proj_weight=None,
    static_k=None,
    static_v=None,
    average_attn_weights=True,
    is_causal=False,
):
    fname = "multi_head_attention_forward (nn.MultiheadAttention)"
    q = _as_nt(query, fname, "query")
    k = _as_nt(key, fname, "key")
    v = _as_nt(value, fname, "value")
    for name, x in (("query", q), ("key", k), ("value", v)):
        x._require_sequence(f"{fname} ({name})")
        if x.batch_first:
            raise ValueError(
                f"{fname}: NestedTensor inputs need nn.MultiheadAttention(batch_first=True) "
                f"(F.multi_head_attention_forward takes [L, B, E]: pass nt.transpose(0, 1))"
            )
    if need_weights:
        raise NotImplementedError(
            f"{fname}: pass need_weights=False for NestedTensor inputs (no weights are formed)"
        )
    if key_padding_mask is not None or attn_mask is not None:
        raise NotImplementedError(
            f"{fname}: key_padding_mask / attn_mask are not supported for NestedTensor inputs "
            f"(the ragged structure is the padding mask; is_causal=True without attn_mask gives "
            f"causal attention)"
        )
    if (
        bias_k is not None
        or bias_v is not None
        or add_zero_attn
        or static_k is not None
        or static_v is not None
    ):
        raise NotImplementedError(f"{fname}: add_bias_kv, add_zero_attn and static_k/v are not supported")
    if training and dropout_p > 0.0:
        raise NotImplementedError(
            f"{fname}: attention dropout (dropout={dropout_p}) in training is not supported for NestedTensor "
            f"inputs; use dropout=0.0 or eval mode"
        )
    e = q.values.shape[-1]
    if e != embed_dim_to_check:
        raise ValueError(f"{fname}: expected embed dim {embed_dim_to_check}, got query of embed dim {e}")
    q._check_same_structure(k, f"{fname} (query vs key)")
    q._check_same_structure(v, f"{fname} (query vs value)")
    head_dim = e // num_heads
    if head_dim * num_heads != e:
        raise ValueError(f"{fname}: embed dim {e} is not divisible by num_heads {num_heads}")
    if use_separate_proj_weight:
        bq = bk = bv = None
        if in_proj_bias is not None:
            bq, bk, bv = in_proj_bias.chunk(3)
        xq = F.linear(q.values, q_proj_weight, bq)
        xk = F.linear(k.values, k_proj_weight, bk)
        xv = F.linear(v.values, v_proj_weight, bv)
    elif q is k and k is v:
        xq, xk, xv = F.linear(q.values, in_proj_weight, in_proj_bias).chunk(3, dim=-1)
    else:
        wq, wk, wv = in_proj_weight.chunk(3)
        bq = bk = bv = None
        if in_proj_bias is not None:
            bq, bk, bv = in_proj_bias.chunk(3)
        xq, xk, xv = F.linear(q.values, wq, bq), F.linear(k.values, wk, bk), F.linear(v.values, wv, bv)
    n = q.values.shape[0]
    heads = [t.reshape(n, num_heads, head_dim) for t in (xq, xk, xv)]
    out = _ragged_attention(*heads, q.offsets, None, is_causal, False, fname)
    out = F.linear(out.reshape(n, e), out_proj_weight, out_proj_bias)
    return q._like(out), None


_T = torch.Tensor
_HANDLERS: dict[Callable, Callable] = {
    F.linear: _linear,
    F.layer_norm: _layer_norm,
    F.gelu: _unary(F.gelu, "gelu"),
    F.relu: _relu,
    torch.relu: _relu,
    F.silu: _silu,
    F.dropout: _dropout,
    F.embedding: _embedding,
    torch.tanh: _unary(torch.tanh, "tanh"),
    torch.sigmoid: _unary(torch.sigmoid, "sigmoid"),
    torch.exp: _unary(torch.exp, "exp"),
    torch.abs: _unary(torch.abs, "abs"),
    torch.neg: _unary(torch.neg, "neg"),
    F.softmax: _softmax,
    torch.softmax: _softmax,
    torch.sum: _reduction("sum"),
    torch.mean: _reduction("mean"),
    torch.max: _reduction("max"),
    torch.min: _reduction("min"),
    torch.amax: _reduction("max"),
    torch.amin: _reduction("min"),
    F.scaled_dot_product_attention: _sdpa,
    F.multi_head_attention_forward: _mha,
    torch.matmul: _matmul,
    _T.matmul: _matmul,
}
for _fn, _name, _torch_fn in (
    ("add", "add", torch.add),
    ("sub", "sub", torch.sub),
    ("mul", "mul", torch.mul),
    ("div", "div", torch.div),
    ("true_divide", "div", torch.div),
    ("pow", "pow", torch.pow),
):
    if hasattr(torch, _fn):
        _HANDLERS[getattr(torch, _fn)] = _binary_handler(_torch_fn, _name)
    if hasattr(_T, _fn):
        _HANDLERS[getattr(_T, _fn)] = _binary_handler(_torch_fn, _name)
del _fn, _name, _torch_fn
