"""Python bindings of the ``ragged`` dialect: op builders and a typed API for
``!ragged.tensor``.

>>> from ragged_mlir import ir
>>> from ragged_mlir.dialects import ragged
>>> with ir.Context():
...     t = ragged.RaggedTensorType.get(None, [ragged.Ragged("L"), 384], ir.F32Type.get())
...     str(t), t.symbols, t.dense_dims
('!ragged.tensor<?, [L], 384, f32>', ['L'], [384])
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._mlir_libs._raggedDialects.ragged import RaggedTensorType, register_dialect
from ..ir import FloatType, IndexType, IntegerType, Type
from ._ragged_ops_gen import *  # noqa: F401,F403
from ._ragged_ops_gen import _Dialect  # noqa: F401

__all__ = [
    "Ragged",
    "RaggedTensorType",
    "register_dialect",
    "ENCODINGS",
]

#: Marker of a ragged dim in the raw shape, and of a dynamic dense dim.
_RAGGED = -1
_DYNAMIC = -(2**63)
ENCODINGS = ("offsets", "lengths")


@dataclass(frozen=True)
class Ragged:
    """A ragged dim: its extent is ``symbol(b)``, or ``symbol(b, i)`` where
    ``i`` indexes the ragged dim ``parent`` (nesting)."""

    symbol: str
    parent: str | None = None

    def __str__(self) -> str:
        return f"[{self.symbol}({self.parent})]" if self.parent else f"[{self.symbol}]"


Dim = int | None | Ragged


def _get(
    cls,
    batch: int | None,
    dims: Sequence[Dim],
    element_type: Type,
    encoding: str = "offsets",
    context=None,
) -> RaggedTensorType:
    """Builds ``!ragged.tensor<batch, dims..., element_type>``.

    ``batch`` and dense dims are ints, or None for dynamic; ragged dims are
    :class:`Ragged`. Raises ValueError naming the argument at fault.
    """
    if batch is not None and (not isinstance(batch, int) or batch < 0):
        raise ValueError(f"batch: expected a non-negative int or None, got {batch!r}")
    if isinstance(dims, (str, bytes)) or not isinstance(dims, Sequence):
        raise ValueError(f"dims: expected a sequence of int, None or Ragged, got {dims!r}")
    shape, symbols, parents = [], [], []
    seen: dict[str, str] = {}
    for i, d in enumerate(dims):
        if isinstance(d, Ragged):
            if not d.symbol.isidentifier():
                raise ValueError(f"dims[{i}]: symbol must be an identifier, got {d.symbol!r}")
            parent = d.parent or ""
            if parent and parent not in seen:
                raise ValueError(
                    f"dims[{i}]: ragged dim {d.symbol!r} is nested in {parent!r}, "
                    "which must be a ragged dim before it"
                )
            if seen.get(d.symbol, parent) != parent:
                raise ValueError(
                    f"dims[{i}]: symbol {d.symbol!r} already used with parent "
                    f"{seen[d.symbol]!r}, got {parent!r}"
                )
            if d.symbol == parent:
                raise ValueError(f"dims[{i}]: ragged dim {d.symbol!r} cannot be nested in itself")
            seen[d.symbol] = parent
            shape.append(_RAGGED)
            symbols.append(d.symbol)
            parents.append(parent)
        elif d is None:
            shape.append(_DYNAMIC)
        elif isinstance(d, int) and not isinstance(d, bool) and d >= 0:
            shape.append(d)
        else:
            raise ValueError(f"dims[{i}]: expected a non-negative int, None or Ragged, got {d!r}")
    if not symbols:
        raise ValueError("dims: a ragged tensor needs at least one Ragged dim")
    if not isinstance(element_type, (IntegerType, FloatType, IndexType)):
        raise ValueError(f"element_type: expected an integer or float type, got {element_type!r}")
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding: expected one of {ENCODINGS}, got {encoding!r}")
    return cls._get_checked(
        _DYNAMIC if batch is None else batch,
        shape,
        symbols,
        parents,
        element_type,
        ENCODINGS.index(encoding),
        context,
    )


def _dims(self) -> list[Dim]:
    """Item dims: ints (None when dynamic) and :class:`Ragged` markers."""
    out: list[Dim] = []
    r = 0
    for size in self.raw_shape:
        if size == _RAGGED:
            out.append(Ragged(self.symbols[r], self.parents[r] or None))
            r += 1
        else:
            out.append(None if size == _DYNAMIC else size)
    return out


def _distinct_symbols(self) -> list[str]:
    """Symbols in order of first appearance: one partition each."""
    return list(dict.fromkeys(self.symbols))


RaggedTensorType.get = classmethod(_get)
RaggedTensorType.dims = property(_dims)
RaggedTensorType.ragged_dims = property(lambda self: [d for d in _dims(self) if isinstance(d, Ragged)])
RaggedTensorType.dense_dims = property(lambda self: [d for d in _dims(self) if not isinstance(d, Ragged)])
RaggedTensorType.distinct_symbols = property(_distinct_symbols)
RaggedTensorType.encoding = property(lambda self: ENCODINGS[self.encoding_id])
RaggedTensorType.batch_size = property(lambda self: None if self.batch == _DYNAMIC else self.batch)
