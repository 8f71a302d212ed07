"""NestedTensor views of item dims: permute, transpose, (un)squeeze,
flatten, reshape, chunk, split, narrow, select, expand (a mixin of the
class)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from .layout import _is_compiling, _norm_dim, _prod

if TYPE_CHECKING:
    from .tensor import NestedTensor


class _Views:
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
        if not isinstance(other, type(self)):
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
