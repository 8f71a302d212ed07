"""RaggedArray: a batch of numpy arrays stored packed, with int64 offsets.

The physical form matches ``!ragged.tensor``: ``values`` holds every item's
elements one after another (``[rows, trailing dense dims...]``) and
``partitions`` holds one offsets array per distinct symbol, outermost first.
"""

from __future__ import annotations

from typing import Iterable, Optional, Sequence

import numpy as np

__all__ = ["RaggedArray", "check_offsets"]


def check_offsets(name: str, offsets, rows: Optional[int] = None) -> np.ndarray:
    """Validates one offsets array; returns it as a read-only int64 view or copy.

    Raises TypeError for a wrong dtype or rank and ValueError for offsets that
    do not start at 0, decrease, or do not end at ``rows``.
    """
    arr = np.asarray(offsets)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected an integer (int64) offsets array, got dtype {arr.dtype}")
    if arr.ndim != 1:
        raise TypeError(f"{name}: expected a 1-D offsets array, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name}: offsets need at least one entry (n + 1 for n items), got none")
    if arr.dtype != np.int64:
        arr = arr.astype(np.int64)
    if arr[0] != 0:
        raise ValueError(f"{name}: offsets must start at 0, got {int(arr[0])}")
    steps = np.diff(arr)
    if steps.size and steps.min() < 0:
        at = int(np.argmax(steps < 0))
        raise ValueError(
            f"{name}: offsets must be non-decreasing, but offsets[{at + 1}] = {int(arr[at + 1])} "
            f"< offsets[{at}] = {int(arr[at])}"
        )
    if rows is not None and arr[-1] != rows:
        raise ValueError(f"{name}: the last offset must equal the number of rows ({rows}), got {int(arr[-1])}")
    return arr


class RaggedArray:
    """A ragged batch in packed form.

    ``RaggedArray(values, offsets)`` builds a batch with one ragged level;
    ``RaggedArray(values, [outer, inner])`` a nested one (e.g. documents ->
    sentences -> tokens); :meth:`from_list` and :meth:`from_nested` build one
    from Python lists of arrays, and :meth:`from_images` one whose items are
    ragged in two dims. Inputs are never modified.
    """

    def __init__(self, values, partitions, *, ragged_dims: int = 1, _checked: bool = False):
        values = np.asarray(values)
        if values.ndim < 1:
            raise TypeError(f"values: expected an array of rank >= 1 ([rows, ...]), got shape {values.shape}")
        if isinstance(partitions, np.ndarray) or (
            isinstance(partitions, Sequence) and partitions and np.isscalar(partitions[0])
        ):
            partitions = [partitions]
        partitions = list(partitions)
        if not partitions:
            raise ValueError("partitions: expected at least one offsets array")
        if not _checked:
            checked = []
            for i, p in enumerate(partitions):
                name = "offsets" if len(partitions) == 1 else f"partitions[{i}]"
                checked.append(check_offsets(name, p))
            partitions = checked
            if ragged_dims == 1:
                # Nested levels chain: each level's last offset counts the
                # items of the next one; the innermost counts rows.
                for i in range(len(partitions) - 1):
                    outer, inner = partitions[i], partitions[i + 1]
                    if inner.size - 1 != outer[-1]:
                        raise ValueError(
                            f"partitions[{i + 1}]: expected {int(outer[-1]) + 1} offsets "
                            f"(the last offset of partitions[{i}] plus one), got {inner.size}"
                        )
                if partitions[-1][-1] != values.shape[0]:
                    name = "offsets" if len(partitions) == 1 else f"partitions[{len(partitions) - 1}]"
                    raise ValueError(
                        f"{name}: the last offset must equal the number of rows of values "
                        f"({values.shape[0]}), got {int(partitions[-1][-1])}"
                    )
        self.values = values
        self.partitions = partitions
        self.ragged_dims = ragged_dims

    # -- construction ------------------------------------------------------
    @classmethod
    def from_list(cls, items: Iterable, dtype=None) -> "RaggedArray":
        """Items of shape ``[L_i, d...]`` (same ``d...``) -> a batch ragged in dim 1."""
        items = [np.asarray(x, dtype=dtype) for x in items]
        return cls._pack(items, "items")

    @classmethod
    def from_nested(cls, docs: Iterable[Iterable], dtype=None) -> "RaggedArray":
        """Lists of items ``[T_ij, d...]`` -> a batch ragged in two nested dims."""
        docs = [[np.asarray(x, dtype=dtype) for x in doc] for doc in docs]
        outer = np.zeros(len(docs) + 1, np.int64)
        np.cumsum([len(d) for d in docs], out=outer[1:])
        flat = [x for d in docs for x in d]
        inner = cls._pack(flat, "docs", template=docs)
        return cls(inner.values, [outer, inner.partitions[0]])

    @classmethod
    def from_images(cls, items: Iterable, dtype=None) -> "RaggedArray":
        """Items of shape ``[H_i, W_i, c...]`` -> a batch ragged in dims 1 and 2
        (partitions: offsets of the heights, then of the widths)."""
        items = [np.asarray(x, dtype=dtype) for x in items]
        for i, x in enumerate(items):
            if x.ndim < 2:
                raise ValueError(f"items[{i}]: expected rank >= 2 ([H, W, ...]), got shape {x.shape}")
            if x.shape[2:] != items[0].shape[2:] or x.dtype != items[0].dtype:
                raise ValueError(
                    f"items[{i}]: trailing dims and dtype must match items[0] "
                    f"({items[0].shape[2:]}, {items[0].dtype}), got {x.shape[2:]}, {x.dtype}"
                )
        heights = np.zeros(len(items) + 1, np.int64)
        widths = np.zeros(len(items) + 1, np.int64)
        np.cumsum([x.shape[0] for x in items], out=heights[1:])
        np.cumsum([x.shape[1] for x in items], out=widths[1:])
        trailing = items[0].shape[2:] if items else ()
        values = (
            np.concatenate([x.reshape((-1,) + trailing) for x in items])
            if items
            else np.zeros((0,) + trailing, dtype or np.float32)
        )
        return cls(values, [heights, widths], ragged_dims=2, _checked=True)

    @classmethod
    def _pack(cls, items, name, template=None) -> "RaggedArray":
        for i, x in enumerate(items):
            if x.ndim < 1:
                raise ValueError(f"{name}[{i}]: expected rank >= 1 ([length, ...]), got a scalar")
            if x.shape[1:] != items[0].shape[1:] or x.dtype != items[0].dtype:
                raise ValueError(
                    f"{name}[{i}]: trailing dims and dtype must match the first item "
                    f"({items[0].shape[1:]}, {items[0].dtype}), got {x.shape[1:]}, {x.dtype}"
                )
        offsets = np.zeros(len(items) + 1, np.int64)
        np.cumsum([x.shape[0] for x in items], out=offsets[1:])
        if items:
            values = np.concatenate(items)
        else:
            values = np.zeros((0,), np.float32)
        return cls(values, [offsets], _checked=True)

    # -- views -------------------------------------------------------------
    @property
    def offsets(self) -> np.ndarray:
        """Offsets of the innermost level (rows of ``values``)."""
        return self.partitions[-1]

    @property
    def batch_size(self) -> int:
        return int(self.partitions[0].size - 1)

    def lengths(self, level: int = 0) -> np.ndarray:
        return np.diff(self.partitions[level])

    def to_list(self) -> list:
        """Items as a list of arrays (nested lists for nested batches)."""
        if self.ragged_dims == 2:
            h, w = self.partitions
            starts = np.concatenate([[0], np.cumsum(np.diff(h) * np.diff(w))])
            tail = self.values.shape[1:]
            return [
                self.values[starts[b] : starts[b + 1]].reshape((h[b + 1] - h[b], w[b + 1] - w[b]) + tail)
                for b in range(self.batch_size)
            ]
        inner = self.partitions[-1]
        rows = [self.values[inner[i] : inner[i + 1]] for i in range(inner.size - 1)]
        for outer in reversed(self.partitions[:-1]):
            rows = [rows[outer[i] : outer[i + 1]] for i in range(outer.size - 1)]
        return rows

    def __len__(self) -> int:
        return self.batch_size

    def __repr__(self) -> str:
        return (
            f"RaggedArray(batch={self.batch_size}, values={self.values.shape} {self.values.dtype}, "
            f"levels={len(self.partitions)})"
        )
