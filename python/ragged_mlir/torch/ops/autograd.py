"""The backward formulas of the ``ragged`` ops, registered with
``register_autograd``: eager training through the ops, and what AOTAutograd
traces into a compiled backward. They are written with the same segment
primitives (and, for the window ops, a gather of each window's input rows),
so they never pad either.
"""

from __future__ import annotations

import torch

from ...windows import keeps_extents
from .library import (
    attention,
    attention_backward,
    attention_lse,
    conv2d,
    from_padded,
    pool2d,
    segment_broadcast,
    segment_reduce,
    segment_softmax,
    to_padded,
)
from .rules import window_offsets


def _expand(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return t.view((-1,) + (1,) * (like.dim() - 1))


def _segment_reduce_setup(ctx, inputs, output):
    values, offsets, kind, _ = inputs
    ctx.kind = kind
    ctx.save_for_backward(values, offsets, output)


def _segment_reduce_backward(ctx, grad):
    values, offsets, output = ctx.saved_tensors
    if ctx.kind in ("sum", "mean"):
        if ctx.kind == "mean":
            lengths = (offsets[1:] - offsets[:-1]).to(values.dtype).clamp_min(1)
            grad = grad / _expand(lengths, grad)
        return segment_broadcast(grad, values, offsets), None, None, None
    # max / min: the gradient goes to the elements equal to the extremum,
    # shared equally between ties.
    hit = (values == segment_broadcast(output, values, offsets)).to(values.dtype)
    count = segment_reduce(hit, offsets, "sum", 0.0)
    return hit * segment_broadcast(grad / count.clamp_min(1), values, offsets), None, None, None


segment_reduce.register_autograd(_segment_reduce_backward, setup_context=_segment_reduce_setup)


def _segment_softmax_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[1], output)


def _segment_softmax_backward(ctx, grad):
    offsets, y = ctx.saved_tensors
    dot = segment_reduce(grad * y, offsets, "sum", 0.0)
    return y * (grad - segment_broadcast(dot, y, offsets)), None


def _segment_broadcast_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[2])


def _segment_broadcast_backward(ctx, grad):
    (offsets,) = ctx.saved_tensors
    return segment_reduce(grad, offsets, "sum", 0.0), None, None


segment_softmax.register_autograd(_segment_softmax_backward, setup_context=_segment_softmax_setup)
segment_broadcast.register_autograd(_segment_broadcast_backward, setup_context=_segment_broadcast_setup)


def _attention_setup(ctx, inputs, output):
    query, key, value, offsets, scale, causal, dropout_p, seed = inputs
    ctx.scale, ctx.causal, ctx.dropout_p = scale, causal, dropout_p
    ctx.save_for_backward(query, key, value, offsets, seed)


def _attention_backward(ctx, grad):
    # One op, so that a traced backward graph holds ragged.attention_grad.
    query, key, value, offsets, seed = ctx.saved_tensors
    dq, dk, dv = attention_backward(
        grad.contiguous(),
        query,
        key,
        value,
        offsets,
        ctx.scale,
        ctx.causal,
        dropout_p=ctx.dropout_p,
        seed=seed,
    )
    return dq, dk, dv, None, None, None, None, None


attention.register_autograd(_attention_backward, setup_context=_attention_setup)


def _attention_lse_setup(ctx, inputs, output):
    query, key, value, offsets, scale, causal, dropout_p, seed = inputs
    out, lse = output
    ctx.scale, ctx.causal, ctx.dropout_p = scale, causal, dropout_p
    ctx.mark_non_differentiable(lse)
    ctx.save_for_backward(query, key, value, offsets, out, lse, seed)


def _attention_lse_backward(ctx, grad, _grad_lse):
    query, key, value, offsets, out, lse, seed = ctx.saved_tensors
    dq, dk, dv = attention_backward(
        grad.contiguous(), query, key, value, offsets, ctx.scale, ctx.causal, out, lse, ctx.dropout_p, seed
    )
    return dq, dk, dv, None, None, None, None, None


attention_lse.register_autograd(_attention_lse_backward, setup_context=_attention_lse_setup)


def _to_padded_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])
    ctx.rows = inputs[0].shape[0]


def _to_padded_backward(ctx, grad):
    (offsets,) = ctx.saved_tensors
    return from_padded(grad, offsets, ctx.rows), None, None, None


to_padded.register_autograd(_to_padded_backward, setup_context=_to_padded_setup)


def _from_padded_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[1])
    ctx.length = inputs[0].shape[1]


def _from_padded_backward(ctx, grad):
    (offsets,) = ctx.saved_tensors
    return to_padded(grad, offsets, ctx.length, 0.0), None, None


from_padded.register_autograd(_from_padded_backward, setup_context=_from_padded_setup)


# --------------------------------------------------------------------------
# Gradients of the window ops. Every output pixel reads one input row per
# window tap (or padding); the backward gathers those rows (im2col over the
# packed pixels), so each gradient is a GEMM or a scatter-add over real
# pixels only, with no image padded to another's size. Traced by
# AOTAutograd, these formulas are what a compiled backward runs.
# --------------------------------------------------------------------------


def _taps(
    rows: int,
    heights: torch.Tensor,
    widths: torch.Tensor,
    kernel: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    ceil_mode: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each of the ``rows`` output pixels and each of the ``KH * KW``
    window taps: the input row it reads (0 where it reads padding), whether
    it reads the image, and per output pixel its window's area clipped to the
    padded image (PyTorch's average divisor with ``count_include_pad``)."""
    h, w = heights[1:] - heights[:-1], widths[1:] - widths[:-1]
    outs = [
        window_offsets(p, kernel[i], stride[i], padding[i], dilation[i], ceil_mode)
        for i, p in enumerate((heights, widths))
    ]
    ho, wo = (o[1:] - o[:-1] for o in outs)
    zero = heights.new_zeros(1)
    out_rows = torch.cat([zero, torch.cumsum(ho * wo, 0)])
    in_rows = torch.cat([zero, torch.cumsum(h * w, 0)])
    r = torch.arange(rows, device=heights.device)
    image = segment_broadcast(torch.arange(h.shape[0], device=heights.device), r, out_rows)
    local = r - out_rows[image]
    wo_r, h_r, w_r = wo[image], h[image], w[image]
    # Row and column of each output pixel. In floating point: IREE's CPU code
    # divides integers in vector lanes past the last row too, where a zero
    # divisor traps; (local + 0.5) / Wo is exact in f64 for any image size.
    oh = torch.floor((local.to(torch.float64) + 0.5) / wo_r.to(torch.float64)).to(torch.int64)
    ow = local - oh * wo_r
    top, left = oh * stride[0] - padding[0], ow * stride[1] - padding[1]
    kh = torch.arange(kernel[0], device=heights.device) * dilation[0]
    kw = torch.arange(kernel[1], device=heights.device) * dilation[1]
    ih = top[:, None, None] + kh[None, :, None]
    iw = left[:, None, None] + kw[None, None, :]
    inside = (ih >= 0) & (ih < h_r[:, None, None]) & (iw >= 0) & (iw < w_r[:, None, None])
    src = torch.where(inside, in_rows[:-1][image][:, None, None] + ih * w_r[:, None, None] + iw, 0)
    span_h = torch.minimum(top + kernel[0], h_r + padding[0]) - top
    span_w = torch.minimum(left + kernel[1], w_r + padding[1]) - left
    return src.reshape(rows, -1), inside.reshape(rows, -1), span_h * span_w


def _conv2d_setup(ctx, inputs, output):
    values, heights, widths, weight, bias, stride, padding, dilation, groups = inputs
    ctx.save_for_backward(values, heights, widths, weight)
    ctx.args = (stride, padding, dilation, groups, bias is not None)


def _conv2d_backward(ctx, grad):
    values, heights, widths, weight = ctx.saved_tensors
    stride, padding, dilation, groups, has_bias = ctx.args
    kh, kw, ci, cout = weight.shape
    rows = grad.shape[0]
    if groups == 1 and keeps_extents([kh, kw], stride, padding, dilation):
        # The input gradient is the convolution of the output gradient with
        # the weight flipped and its channels swapped, at the same padding:
        # the forward's op again (on CPU, the kernel library's), no scatter.
        flipped = weight.flip(0, 1).transpose(2, 3).contiguous()
        dvalues = conv2d(grad, heights, widths, flipped, None, [1, 1], padding, dilation, 1)
        src, inside, _ = _taps(rows, heights, widths, [kh, kw], stride, padding, dilation, False)
        cols = (values[src] * inside[..., None].to(values.dtype)).reshape(rows, kh * kw * ci)
        dweight = (cols.t() @ grad).reshape(kh, kw, ci, cout)
        return dvalues, None, None, dweight, grad.sum(0) if has_bias else None, None, None, None, None
    src, inside, _ = _taps(rows, heights, widths, [kh, kw], stride, padding, dilation, False)
    taps = kh * kw
    co = cout // groups
    # cols [rows, taps, channels]: the input rows each output pixel reads.
    cols = values[src] * inside[..., None].to(values.dtype)
    flat = cols.reshape(rows, taps * ci * groups)
    if groups == 1:
        dweight = (flat.t() @ grad).reshape(kh, kw, ci, cout)
        dcols = grad @ weight.reshape(taps * ci, cout).t()
    else:
        # One dense GEMM over all channel pairs, then the groups' diagonal
        # blocks: plain 2-D GEMMs compile where grouped batch ones do not.
        eye = torch.eye(groups, dtype=grad.dtype, device=grad.device)
        full = (flat.t() @ grad).reshape(taps, groups, ci, groups, co)
        dweight = (full * eye[None, :, None, :, None]).sum(3).permute(0, 2, 1, 3).reshape(kh, kw, ci, cout)
        w = weight.reshape(taps, ci, groups, co).permute(0, 2, 1, 3)[:, :, :, None, :]
        dense = (w * eye[None, :, None, :, None]).reshape(taps * groups * ci, cout)
        dcols = grad @ dense.t()
    dcols = dcols.reshape(rows * taps, groups * ci)
    dcols = dcols * inside.reshape(-1, 1).to(values.dtype)
    dvalues = values.new_zeros(values.shape).index_add(0, src.reshape(-1), dcols)
    dbias = grad.sum(0) if has_bias else None
    return dvalues, None, None, dweight, dbias, None, None, None, None


conv2d.register_autograd(_conv2d_backward, setup_context=_conv2d_setup)


def _pool2d_setup(ctx, inputs, output):
    values, heights, widths, kind, kernel, stride, padding, dilation, ceil_mode, count_include_pad = inputs
    ctx.save_for_backward(values, heights, widths)
    ctx.args = (kind, kernel, stride, padding, dilation, ceil_mode, count_include_pad)


def _pool2d_backward(ctx, grad):
    values, heights, widths = ctx.saved_tensors
    kind, kernel, stride, padding, dilation, ceil_mode, count_include_pad = ctx.args
    rows, channels = grad.shape
    src, inside, area = _taps(rows, heights, widths, kernel, stride, padding, dilation, ceil_mode)
    if kind == "max":
        # The gradient goes to the first maximum of each window (PyTorch's choice).
        cols = values[src].masked_fill(~inside[..., None], float("-inf"))
        at = src.gather(1, cols.argmax(1))
        dvalues = values.new_zeros(values.shape).scatter_add(0, at, grad)
    else:
        taps = src.shape[1]
        count = area if count_include_pad else inside.sum(1)
        share = grad / count.clamp(min=1)[:, None].to(grad.dtype)
        dcols = share[:, None, :] * inside[..., None].to(grad.dtype)
        dvalues = values.new_zeros(values.shape).index_add(
            0, src.reshape(-1), dcols.reshape(rows * taps, channels)
        )
    return dvalues, None, None, None, None, None, None, None, None, None


pool2d.register_autograd(_pool2d_backward, setup_context=_pool2d_setup)
