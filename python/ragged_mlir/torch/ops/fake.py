"""The fake (meta) kernels of the ``ragged`` ops: each output's shape, dtype
and device from the inputs' metadata alone, what Dynamo and AOTAutograd
trace with. A size that only the offsets' values decide (a row count of the
device's) is a fresh symbol. Same names and arguments as :mod:`.reference`.
"""

from __future__ import annotations

import torch

from .rules import check_dropout


def _dynamic_size() -> torch.SymInt:
    return torch.library.get_ctx().new_dynamic_size()


def segment_reduce(values, offsets, kind, empty):
    return values.new_empty((offsets.shape[0] - 1,) + values.shape[1:])


def segment_broadcast(source, like, offsets):
    return source.new_empty(like.shape[:1] + source.shape[1:])


def row_range(offsets):
    return offsets.new_empty((_dynamic_size(),))


def segment_softmax(values, offsets):
    return torch.empty_like(values)


def to_padded(values, offsets, length, padding):
    return values.new_empty((offsets.shape[0] - 1, length) + values.shape[1:])


def from_padded(padded, offsets, rows):
    return padded.new_empty((rows,) + padded.shape[2:])


def attention(query, key, value, offsets, scale, causal, dropout_p=0.0, seed=None):
    check_dropout(dropout_p, seed)
    return torch.empty_like(query)


def attention_lse(query, key, value, offsets, scale, causal, dropout_p=0.0, seed=None):
    check_dropout(dropout_p, seed)
    return torch.empty_like(query), query.new_empty(query.shape[0], query.shape[1], 1)


def attention_backward(
    grad, query, key, value, offsets, scale, causal, output=None, lse=None, dropout_p=0.0, seed=None
):
    check_dropout(dropout_p, seed)
    return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)


# The rows of a window op's output: the sum over the images of Ho(b) Wo(b),
# known only from the offsets' values.


def conv2d(values, heights, widths, weight, bias, stride, padding, dilation, groups):
    return values.new_empty((_dynamic_size(), weight.shape[3]))


def pool2d(values, heights, widths, kind, kernel, stride, padding, dilation, ceil_mode, count_include_pad):
    return values.new_empty((_dynamic_size(), values.shape[1]))
