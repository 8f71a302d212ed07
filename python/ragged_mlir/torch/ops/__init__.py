"""Ragged semantics as PyTorch custom ops (namespace ``ragged``).

Each op takes packed values and int64 offsets, so a traced graph keeps its
ragged meaning after Dynamo and AOTAutograd: the ``ragged`` backend turns
these nodes into ragged-dialect ops, and eager mode runs the reference
implementations (vectorised torch, no padding).

The modules, each importing only those above it here:

- :mod:`.rules`: the index rules the ops share (segment ids, window extents,
  attention dropout);
- :mod:`.reference`: the eager implementations, whose signatures are the
  ops' schemas;
- :mod:`.fake`: the fake (meta) kernels;
- :mod:`.library`: the ``ragged::*`` ops, defined from the two above;
- :mod:`.autograd`: their backward formulas, registered on import.

Importing this package registers every op with its fake kernel and its
backward formula.
"""

from __future__ import annotations

from . import autograd  # noqa: F401  (registers the backward formulas)
from .library import (
    attention,
    attention_backward,
    attention_lse,
    conv2d,
    from_padded,
    pool2d,
    row_range,
    segment_broadcast,
    segment_reduce,
    segment_softmax,
    to_padded,
)
from .rules import dropout_factors, segment_ids, window_offsets

__all__ = [
    "attention",
    "attention_backward",
    "attention_lse",
    "conv2d",
    "dropout_factors",
    "pool2d",
    "row_range",
    "window_offsets",
    "from_padded",
    "segment_broadcast",
    "segment_ids",
    "segment_reduce",
    "segment_softmax",
    "to_padded",
]
