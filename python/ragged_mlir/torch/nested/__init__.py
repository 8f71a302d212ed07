"""NestedTensor: a batch of torch tensors of different shapes, stored packed.

The public API follows DanLing's ``NestedTensor`` so that DanLing users can
switch by changing the import::

    from ragged_mlir.torch.nested import NestedTensor

    nt = NestedTensor(torch.randn(3, 8), torch.randn(5, 8))   # [B=2, L(b), 8]
    nt.tensor        # padded [2, 5, 8] (padding_value)
    nt.mask          # bool [2, 5]: True on real elements (mask_value=False)
    nt.concat        # packed values [8, 8] (alias: nt.values)
    nt.offsets       # int64 [B + 1] row offsets into the packed values

Unlike DanLing's class it is a plain Python object (not a ``torch.Tensor``
subclass) holding plain tensors (``values``, ``offsets``, ``partitions``), and
its functions never pad to compute: under ``torch.compile`` Dynamo traces
through it, and the functions over a ragged dim become ``torch.ops.ragged.*``
nodes that the ``ragged`` backend lowers to the ragged dialect.

The pieces: :mod:`.tensor` (the class and its layout), :mod:`.registry`
(the torch function table, :data:`FUNCTIONS`, which imports no class), the
op families that fill it (:mod:`.pointwise`, :mod:`.reductions`,
:mod:`.dims`, :mod:`.per_item`, :mod:`.images`, :mod:`.weights`,
:mod:`.batch`, :mod:`.predicates`, :mod:`.sdpa`; shared helpers in
:mod:`.common`) and :mod:`.indexing` (indexing and assignment). See
``docs/nested_tensor.md``.
"""

from __future__ import annotations

from .layout import NestedBroadcastError
from .tensor import NestedTensor

# The op families register their handlers in this order (the first
# registration of a callable wins), then the table gives the class its
# Tensor methods.
# isort: off
from . import pointwise, reductions, dims, per_item, images, weights, batch, predicates, sdpa  # noqa: E402, F401

# isort: on
from .registry import CATEGORIES, FUNCTIONS, NestedFunction, finalize, supported_functions  # noqa: E402

finalize(NestedTensor)

__all__ = [
    "CATEGORIES",
    "FUNCTIONS",
    "NestedBroadcastError",
    "NestedFunction",
    "NestedTensor",
    "supported_functions",
]
