"""The fake (meta) kernels of the ``ragged`` ops: each output's shape, dtype
and device from the inputs' metadata alone, what Dynamo and AOTAutograd
trace with. A size that only the offsets' values decide (a row count of the
device's) is a fresh symbol. Same names and arguments as :mod:`.reference`.
"""

from __future__ import annotations

import torch

from ...windows import keeps_extents
from .rules import check_dropout


def _dynamic_size() -> torch.SymInt:
    """A fresh non-negative size symbol, also where the tracer was not told
    to allow data-dependent output shapes.

    Dynamo allows them only under ``fullgraph=True`` or its global
    ``capture_dynamic_output_shape_ops``; otherwise ``new_dynamic_size``
    raises and Dynamo breaks the graph at every convolution, pool or row
    range. Our ops' sizes are exactly what the backend's lowering computes
    on the device, so we allocate the symbol on the trace's own shape
    environment: one graph, and the setting stays as it was for every other
    op and every other program."""
    ctx = torch.library.get_ctx()
    env = getattr(ctx, "_shape_env", None)
    if env is not None and not env.allow_dynamic_output_shape_ops:
        from torch._library.fake_impl import allocate_size

        return allocate_size(env)
    return ctx.new_dynamic_size()


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


def _window_rows(values, kernel, stride, padding, dilation) -> torch.SymInt:
    """The rows of a window op's output: the sum over the images of
    Ho(b) Wo(b), known only from the offsets' values, unless the window
    keeps every extent (stride 1, "same" padding): then they are the
    input's, and the output shares its size, so that what follows (a
    gradient's pool or convolution) needs no size of its own."""
    if keeps_extents(kernel, stride, padding, dilation):
        return values.shape[0]
    return _dynamic_size()


def conv2d(values, heights, widths, weight, bias, stride, padding, dilation, groups):
    rows = _window_rows(values, weight.shape[:2], stride, padding, dilation)
    return values.new_empty((rows, weight.shape[3]))


def pool2d(values, heights, widths, kind, kernel, stride, padding, dilation, ceil_mode, count_include_pad):
    return values.new_empty((_window_rows(values, kernel, stride, padding, dilation), values.shape[1]))
