"""NestedTensor construction and conversion: from packed values, from
PyTorch's nested tensors, DanLing's, padded tensors and masks, and to other
dtypes and devices (a mixin of the class)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from .layout import _check_offsets, _is_compiling, _mark_batch_dims, _pin, _resolve_ragged

if TYPE_CHECKING:
    from .tensor import NestedTensor


class _Constructors:
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
        if isinstance(tensor, type(self)):
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

    # -- conversions --------------------------------------------------------------------
    def to(self, *args: Any, **kwargs: Any) -> NestedTensor:
        """Like ``Tensor.to``: dtype conversions apply to the values, device
        moves to values and offsets (offsets stay int64). A NestedTensor (or
        tensor) argument gives its dtype and device."""
        if args and isinstance(args[0], type(self)):
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
