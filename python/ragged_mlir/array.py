"""RaggedArray: a batch of numpy arrays stored packed, with int64 offsets.

The physical form matches ``!ragged.tensor``: ``values`` holds every item's
elements one after another (``[rows, trailing dense dims...]``) and
``partitions`` holds one offsets array per distinct symbol, outermost first.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["DTYPES", "RaggedArray", "check_offsets"]

#: The dtypes of values a compiled function exchanges: those of the
#: element types f16, bf16 (ml_dtypes' bfloat16), f32, f64, i1, i8, i16, i32
#: and i64.
DTYPES = ("float16", "bfloat16", "float32", "float64", "bool", "int8", "int16", "int32", "int64")


def check_values_dtype(name: str, values: np.ndarray) -> None:
    """Raises TypeError unless ``values`` has one of :data:`DTYPES`."""
    if values.dtype.name not in DTYPES:
        raise TypeError(f"{name}: expected values of dtype {', '.join(DTYPES)}, got {values.dtype}")


def check_offsets(name: str, offsets, rows: int | None = None) -> np.ndarray:
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
        raise ValueError(
            f"{name}: the last offset must equal the number of rows ({rows}), got {int(arr[-1])}"
        )
    return arr


def _concatenate(items: list, trailing: tuple, dtype) -> np.ndarray:
    """Concatenates rows into a 64-byte-aligned array, which a CPU device can
    then use in place (see compiler.runtime.HostImporter)."""
    rows = sum(x.shape[0] for x in items)
    dtype = np.dtype(dtype)
    raw = np.empty(rows * int(np.prod(trailing, dtype=np.int64)) * dtype.itemsize + 64, np.uint8)
    start = (-raw.ctypes.data) % 64
    out = raw[start : start + rows * int(np.prod(trailing, dtype=np.int64)) * dtype.itemsize].view(dtype)
    out = out.reshape((rows, *trailing))
    np.concatenate(items, out=out) if items else None
    return out


def _check_layout(layout: tuple, num_partitions: int) -> None:
    if not any(isinstance(d, tuple) for d in layout):
        raise ValueError(f"layout: expected at least one ragged dim (p,), got {layout!r}")
    for i, d in enumerate(layout):
        if isinstance(d, tuple):
            if len(d) != 1 or not isinstance(d[0], int) or not 0 <= d[0] < num_partitions:
                raise ValueError(f"layout[{i}]: expected (p,) with 0 <= p < {num_partitions}, got {d!r}")
        elif not isinstance(d, (int, np.integer)) or d < 0:
            raise ValueError(f"layout[{i}]: expected a dense size >= 0 or (p,), got {d!r}")


def _extents(partitions, layout) -> list:
    """Per-item extent of each item dim of a single-level layout."""
    n = partitions[0].size - 1
    return [np.diff(partitions[d[0]]) if isinstance(d, tuple) else np.full(n, d, np.int64) for d in layout]


def _rows(partitions, layout) -> int:
    if layout is None:
        return int(partitions[-1][-1])
    return int(np.prod(_extents(partitions, layout), axis=0, dtype=np.int64).sum())


class RaggedArray:
    """A ragged batch in packed form.

    ``RaggedArray(values, offsets)`` builds a batch with one ragged level;
    ``RaggedArray(values, [outer, inner])`` a nested one (e.g. documents ->
    sentences -> tokens); :meth:`from_list` and :meth:`from_nested` build one
    from Python lists of arrays, and :meth:`from_images` one whose items are
    ragged in two dims. Inputs are never modified.
    """

    def __init__(self, values, partitions, *, layout: Sequence | None = None, _checked: bool = False):
        """``values``: ``[rows, trailing dense dims...]``; ``partitions``: one
        int64 offsets array per ragged level or symbol.

        ``layout`` says how the partitions shape each item, dim by dim up to
        the last ragged dim: ``None`` (the default) means nested levels, one
        ragged dim each (``[B, L(b)]``, ``[B, S(b), T(b, s)]``); a tuple
        describes a single-level item whose entries are ``(p,)`` for a ragged
        dim whose extents are partition ``p`` and ints for dense dims:
        ``((0,), (1,))`` for images ``H(b) x W(b)``, ``((0,), (0,))`` for
        attention scores ``L(b) x L(b)``, ``(12, (0,))`` for ``12 x L(b)``.
        """
        values = np.asarray(values)
        if values.ndim < 1:
            raise TypeError(f"values: expected an array of rank >= 1 ([rows, ...]), got shape {values.shape}")
        check_values_dtype("values", values)
        if isinstance(partitions, np.ndarray) or (
            isinstance(partitions, Sequence) and partitions and np.isscalar(partitions[0])
        ):
            partitions = [partitions]
        partitions = list(partitions)
        if not partitions:
            raise ValueError("partitions: expected at least one offsets array")
        if layout is not None:
            layout = tuple(tuple(d) if isinstance(d, (tuple, list)) else d for d in layout)
            _check_layout(layout, len(partitions))
        if not _checked:
            checked = []
            for i, p in enumerate(partitions):
                name = "offsets" if len(partitions) == 1 else f"partitions[{i}]"
                checked.append(check_offsets(name, p))
            partitions = checked
            if layout is None:
                # Nested levels chain: each level's last offset counts the
                # items of the next one; the innermost counts rows.
                for i in range(len(partitions) - 1):
                    outer, inner = partitions[i], partitions[i + 1]
                    if inner.size - 1 != outer[-1]:
                        raise ValueError(
                            f"partitions[{i + 1}]: expected {int(outer[-1]) + 1} offsets "
                            f"(the last offset of partitions[{i}] plus one), got {inner.size}"
                        )
            else:
                for i, p in enumerate(partitions[1:], 1):
                    if p.size != partitions[0].size:
                        raise ValueError(
                            f"partitions[{i}]: a single-level layout needs one offsets array per symbol "
                            f"with {partitions[0].size} entries (batch + 1), got {p.size}"
                        )
            rows = _rows(partitions, layout)
            if layout is None and rows != values.shape[0]:
                name = "offsets" if len(partitions) == 1 else f"partitions[{len(partitions) - 1}]"
                raise ValueError(
                    f"{name}: the last offset must equal the number of rows of values "
                    f"({values.shape[0]}), got {rows}"
                )
            if rows != values.shape[0]:
                raise ValueError(
                    f"values: the partitions describe {rows} rows, got {values.shape[0]} "
                    f"(values shape {values.shape})"
                )
        self.values = values
        self.partitions = partitions
        self.layout = layout

    # -- construction ------------------------------------------------------
    @classmethod
    def from_list(cls, items: Iterable, dtype=None, trailing_shape: Sequence[int] = ()) -> RaggedArray:
        """Items of shape ``[L_i, d...]`` (same ``d...``) -> a batch ragged in
        dim 1. ``trailing_shape`` and ``dtype`` shape an empty list."""
        items = [np.asarray(x, dtype=dtype) for x in items]
        return cls._pack(items, [f"items[{i}]" for i in range(len(items))], dtype, trailing_shape)

    @classmethod
    def from_nested(
        cls, docs: Iterable[Iterable], dtype=None, trailing_shape: Sequence[int] = ()
    ) -> RaggedArray:
        """Lists of items ``[T_ij, d...]`` -> a batch ragged in two nested
        dims. ``trailing_shape`` and ``dtype`` shape a batch without items."""
        docs = [[np.asarray(x, dtype=dtype) for x in doc] for doc in docs]
        outer = np.zeros(len(docs) + 1, np.int64)
        np.cumsum([len(d) for d in docs], out=outer[1:])
        flat = [x for d in docs for x in d]
        names = [f"docs[{i}][{j}]" for i, d in enumerate(docs) for j in range(len(d))]
        inner = cls._pack(flat, names, dtype, trailing_shape)
        return cls(inner.values, [outer, inner.partitions[0]])

    @classmethod
    def from_images(cls, items: Iterable, dtype=None) -> RaggedArray:
        """Items of shape ``[H_i, W_i, c...]`` -> a batch ragged in dims 1 and 2
        (partitions: offsets of the heights, then of the widths)."""
        items = [np.asarray(x, dtype=dtype) for x in items]
        for i, x in enumerate(items):
            check_values_dtype(f"items[{i}]", x)
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
            _concatenate([x.reshape((-1,) + trailing) for x in items], trailing, items[0].dtype)
            if items
            else np.zeros((0,) + trailing, dtype or np.float32)
        )
        return cls(values, [heights, widths], layout=((0,), (1,)), _checked=True)

    @classmethod
    def _pack(cls, items, names, dtype, trailing_shape) -> RaggedArray:
        for name, x in zip(names, items, strict=False):
            if x.ndim < 1:
                raise ValueError(f"{name}: expected rank >= 1 ([length, ...]), got a scalar")
            check_values_dtype(name, x)
            if x.shape[1:] != items[0].shape[1:] or x.dtype != items[0].dtype:
                raise ValueError(
                    f"{name}: trailing dims and dtype must match the first item "
                    f"({items[0].shape[1:]}, {items[0].dtype}), got {x.shape[1:]}, {x.dtype}"
                )
        offsets = np.zeros(len(items) + 1, np.int64)
        np.cumsum([x.shape[0] for x in items], out=offsets[1:])
        if items:
            values = _concatenate(items, items[0].shape[1:], items[0].dtype)
        else:
            values = np.zeros((0, *trailing_shape), dtype or np.float32)
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
        if self.layout is not None:
            extents = _extents(self.partitions, self.layout)
            starts = np.concatenate([[0], np.cumsum(np.prod(extents, axis=0, dtype=np.int64))])
            tail = self.values.shape[1:]
            return [
                self.values[starts[b] : starts[b + 1]].reshape(tuple(int(e[b]) for e in extents) + tail)
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
