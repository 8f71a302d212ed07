"""Ragged semantics as PyTorch custom ops (namespace ``ragged``).

Each op takes packed values and int64 offsets, so a traced graph keeps its
ragged meaning after Dynamo and AOTAutograd: the ``ragged`` backend turns
these nodes into ragged-dialect ops, and eager mode runs the reference
implementations below (vectorised torch, no padding).
"""

from __future__ import annotations

import torch

__all__ = [
    "attention",
    "attention_backward",
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


def segment_ids(offsets: torch.Tensor, rows: int) -> torch.Tensor:
    """The segment of every row: ``[rows]`` int64."""
    lengths = offsets[1:] - offsets[:-1]
    return torch.repeat_interleave(
        torch.arange(lengths.numel(), device=offsets.device), lengths, output_size=rows
    )


_KINDS = ("sum", "mean", "max", "min")


@torch.library.custom_op("ragged::segment_reduce", mutates_args=())
def segment_reduce(values: torch.Tensor, offsets: torch.Tensor, kind: str, empty: float) -> torch.Tensor:
    """Reduces each segment of rows: ``[B, ...]``; empty segments give ``empty``."""
    if kind not in _KINDS:
        raise ValueError(f"kind: expected one of {_KINDS}, got {kind!r}")
    b = offsets.numel() - 1
    ids = segment_ids(offsets, values.shape[0])
    index = ids.view((-1,) + (1,) * (values.dim() - 1)).expand_as(values)
    out = values.new_zeros((b,) + values.shape[1:])
    if kind in ("sum", "mean"):
        out.index_add_(0, ids, values)
        if kind == "mean":
            lengths = (offsets[1:] - offsets[:-1]).to(values.dtype).clamp_min(1)
            out = out / lengths.view((-1,) + (1,) * (values.dim() - 1))
    else:
        out.fill_(float("-inf") if kind == "max" else float("inf"))
        out.scatter_reduce_(0, index, values, reduce="amax" if kind == "max" else "amin", include_self=True)
    empties = (offsets[1:] == offsets[:-1]).view((-1,) + (1,) * (values.dim() - 1))
    return torch.where(empties, torch.full_like(out, empty), out)


@segment_reduce.register_fake
def _(values, offsets, kind, empty):
    return values.new_empty((offsets.shape[0] - 1,) + values.shape[1:])


@torch.library.custom_op("ragged::segment_broadcast", mutates_args=())
def segment_broadcast(source: torch.Tensor, like: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Row b of ``source`` ``[B, ...]`` for every row of segment b:
    ``[rows, ...]`` with ``rows = like.shape[0]`` (``like``'s values are not
    read). The adjoint of a segment sum."""
    return source[segment_ids(offsets, like.shape[0])]


@segment_broadcast.register_fake
def _(source, like, offsets):
    return source.new_empty(like.shape[:1] + source.shape[1:])


@torch.library.custom_op("ragged::row_range", mutates_args=())
def row_range(offsets: torch.Tensor) -> torch.Tensor:
    """``0, 1, ..., offsets[-1] - 1``: the index of every row of a batch
    packed over ``offsets``, int64. Its length is known only from the
    offsets' values: items picked by an index, say, whose row count the
    device computes and the host never reads."""
    return torch.arange(int(offsets[-1]), device=offsets.device)


@row_range.register_fake
def _(offsets):
    return offsets.new_empty((torch.library.get_ctx().new_dynamic_size(),))


@torch.library.custom_op("ragged::segment_softmax", mutates_args=())
def segment_softmax(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Softmax over the rows of each segment (per column)."""
    if values.shape[0] == 0:
        return values.clone()
    ids = segment_ids(offsets, values.shape[0])
    index = ids.view((-1,) + (1,) * (values.dim() - 1)).expand_as(values)
    b = offsets.numel() - 1
    maxima = values.new_full((b,) + values.shape[1:], float("-inf"))
    maxima.scatter_reduce_(0, index, values, reduce="amax", include_self=True)
    e = torch.exp(values - maxima[ids])
    sums = values.new_zeros((b,) + values.shape[1:]).index_add_(0, ids, e)
    return e / sums[ids]


@segment_softmax.register_fake
def _(values, offsets):
    return torch.empty_like(values)


def _item_heads(offsets: torch.Tensor, *tensors: torch.Tensor, items: bool = False):
    """``(a, b, views)`` for each non-empty item, rows ``[a, b)``: the
    item's rows of each packed ``[rows, H, d]`` tensor as ``[H, L, d]``
    (``(item, a, b, views)`` with ``items``)."""
    bounds = offsets.tolist()
    for item, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=False)):
        if a < b:
            views = [t[a:b].transpose(0, 1) for t in tensors]
            yield (item, a, b, views) if items else (a, b, views)


_U32 = 0xFFFFFFFF


def _mul32(x: torch.Tensor, k: int) -> torch.Tensor:
    """``x * k`` mod 2^32 for ``x`` in [0, 2^32) (int64, without overflow)."""
    lo, hi = k & 0xFFFF, k >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _U32


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finaliser on int64 tensors holding uint32 values."""
    x = _mul32(x ^ (x >> 16), 0x85EBCA6B)
    x = _mul32(x ^ (x >> 13), 0xC2B2AE35)
    return x ^ (x >> 16)


def dropout_factors(
    seed: torch.Tensor, item: int, heads: int, length: int, p: float, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The attention-dropout factors ``[heads, length, length]`` of item
    ``item``: ``1 / (1 - p)`` for the weights (query ``i``, key ``j``) that
    :func:`attention` with ``dropout_p=p`` and ``seed`` keeps, 0 for those it
    drops (the rule of ``ragged.attention``'s ``dropout``)."""
    s = int(seed)
    dev = seed.device
    h = torch.arange(heads, device=dev).view(-1, 1, 1)
    i = torch.arange(length, device=dev).view(1, -1, 1)
    j = torch.arange(length, device=dev).view(1, 1, -1)
    c = (_mul32(torch.tensor(item, device=dev), 0x9E3779B1) + _mul32(h, 0x85EBCA77)) & _U32
    c = (c + _mul32(i, 0xC2B2AE3D) + _mul32(j, 0x27D4EB2F)) & _U32
    u = _mix32(_mix32(c ^ (s & _U32)) ^ ((s >> 32) & _U32))
    threshold = min(round(p * 2.0**32), _U32)
    return (u >= threshold).to(dtype) / (1.0 - p)


def _check_dropout(dropout_p: float, seed: torch.Tensor | None) -> bool:
    """Whether the attention drops; raises on a rate outside [0, 1) or a
    rate without a seed."""
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"attention: dropout_p must be in [0, 1), got {dropout_p}")
    if dropout_p > 0.0 and (seed is None or seed.dtype != torch.int64 or seed.dim() != 0):
        raise ValueError("attention: dropout_p > 0 needs a seed, a 0-dim int64 tensor")
    return dropout_p > 0.0


@torch.library.custom_op("ragged::attention", mutates_args=())
def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    offsets: torch.Tensor,
    scale: float,
    causal: bool,
    dropout_p: float = 0.0,
    seed: torch.Tensor | None = None,
) -> torch.Tensor:
    """softmax(scale q kᵀ [+ causal]) v per item and head on ``[rows, heads, d]``.
    With ``dropout_p > 0``, weights are dropped after the softmax as
    :func:`dropout_factors` says for ``seed``."""
    if _check_dropout(dropout_p, seed):
        return attention_lse(query, key, value, offsets, scale, causal, dropout_p, seed)[0]
    out = torch.empty_like(query)
    for a, b, (q, k, v) in _item_heads(offsets, query, key, value):
        out[a:b] = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=scale
        ).transpose(0, 1)
    return out


@attention.register_fake
def _(query, key, value, offsets, scale, causal, dropout_p=0.0, seed=None):
    _check_dropout(dropout_p, seed)
    return torch.empty_like(query)


def _item_logits(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool) -> torch.Tensor:
    """One item's scaled logits ``[H, L, L]`` from ``[H, L, d]`` heads, the
    future at -inf when causal."""
    s = scale * (q @ k.transpose(1, 2))
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    return s


@torch.library.custom_op("ragged::attention_lse", mutates_args=())
def attention_lse(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    offsets: torch.Tensor,
    scale: float,
    causal: bool,
    dropout_p: float = 0.0,
    seed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`attention` and the log-sum-exp of each query row's scaled
    logits, ``[rows, heads, 1]``: what a training forward keeps for
    :func:`attention_backward`, which then reduces over no key pairs."""
    drop = _check_dropout(dropout_p, seed)
    out = torch.empty_like(query)
    lse = query.new_empty(query.shape[0], query.shape[1], 1)
    for item, a, b, (q, k, v) in _item_heads(offsets, query, key, value, items=True):
        s = _item_logits(q, k, scale, causal)
        p = torch.softmax(s, dim=-1)
        if drop:
            p = p * dropout_factors(seed, item, q.shape[0], b - a, dropout_p, p.dtype)
        out[a:b] = (p @ v).transpose(0, 1)
        lse[a:b] = torch.logsumexp(s, dim=-1).transpose(0, 1).unsqueeze(-1)
    return out, lse


@attention_lse.register_fake
def _(query, key, value, offsets, scale, causal, dropout_p=0.0, seed=None):
    _check_dropout(dropout_p, seed)
    return torch.empty_like(query), query.new_empty(query.shape[0], query.shape[1], 1)


@torch.library.custom_op("ragged::to_padded", mutates_args=())
def to_padded(values: torch.Tensor, offsets: torch.Tensor, length: int, padding: float) -> torch.Tensor:
    """Packed rows ``[rows, ...]`` as ``[B, length, ...]``; slots past an
    item's own rows hold ``padding`` (``length`` is at least every item's)."""
    b = offsets.numel() - 1
    out = values.new_full((b, length) + values.shape[1:], padding)
    rows = values.shape[0]
    if rows:
        ids = segment_ids(offsets, rows)
        out[ids, torch.arange(rows, device=values.device) - offsets[ids]] = values
    return out


@to_padded.register_fake
def _(values, offsets, length, padding):
    return values.new_empty((offsets.shape[0] - 1, length) + values.shape[1:])


@torch.library.custom_op("ragged::from_padded", mutates_args=())
def from_padded(padded: torch.Tensor, offsets: torch.Tensor, rows: int) -> torch.Tensor:
    """The first ``offsets[b+1] - offsets[b]`` slots of each item of
    ``[B, L, ...]``, packed: ``[rows, ...]``."""
    ids = segment_ids(offsets, rows)
    return padded[ids, torch.arange(rows, device=padded.device) - offsets[ids]].clone()


@from_padded.register_fake
def _(padded, offsets, rows):
    return padded.new_empty((rows,) + padded.shape[2:])


# --------------------------------------------------------------------------
# Autograd: eager training through the ragged ops. The backward formulas are
# written with the same segment primitives, so they never pad either.
# --------------------------------------------------------------------------


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


@torch.library.custom_op("ragged::attention_backward", mutates_args=())
def attention_backward(
    grad: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    offsets: torch.Tensor,
    scale: float,
    causal: bool,
    output: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    seed: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The gradients (query, key, value) of :func:`attention` given the
    gradient ``grad`` of its output (``ragged.attention_grad``). The
    forward's ``output`` and ``lse`` (:func:`attention_lse`), where given,
    spare the compiled gradient its reductions over key pairs; eagerly,
    everything is recomputed. ``dropout_p`` and ``seed`` are the forward's."""
    drop = _check_dropout(dropout_p, seed)
    grads = [torch.zeros_like(t) for t in (query, key, value)]
    for item, a, b, (q, k, v, do) in _item_heads(offsets, query, key, value, grad, items=True):
        # Per item and head [H, L, d]: P recomputed and PD = P D (D the
        # dropout factors, or 1), then dV = PDᵀ dO, dS = PD dO Vᵀ - P
        # rowsum(PD dO Vᵀ), dQ = scale dS K, dK = scale dSᵀ Q.
        p = torch.softmax(_item_logits(q, k, scale, causal), dim=-1)
        pd = p * dropout_factors(seed, item, q.shape[0], b - a, dropout_p, p.dtype) if drop else p
        dp = do @ v.transpose(1, 2)
        ds = pd * dp - p * (pd * dp).sum(-1, keepdim=True)
        for g, d in zip(
            grads, (scale * ds @ k, scale * ds.transpose(1, 2) @ q, pd.transpose(1, 2) @ do), strict=True
        ):
            g[a:b] = d.transpose(0, 1)
    return grads[0], grads[1], grads[2]


@attention_backward.register_fake
def _(grad, query, key, value, offsets, scale, causal, output=None, lse=None, dropout_p=0.0, seed=None):
    _check_dropout(dropout_p, seed)
    return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)


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
# Images: [C, H(b), W(b)] items packed channels-last, values [sum H W, C],
# with the offsets of the heights and of the widths. The output extents of a
# window follow PyTorch's rule per image (0 for an empty image), computed on
# the device from the input's offsets (ragged.conv2d and ragged.pool2d
# define them the same way).
# --------------------------------------------------------------------------


def window_offsets(
    offsets: torch.Tensor, kernel: int, stride: int, padding: int, dilation: int = 1, ceil_mode: bool = False
) -> torch.Tensor:
    """The offsets of the output extents of a window along one spatial dim:
    :func:`ragged_mlir.windows.window_extent` per image, vectorised (a test
    holds the two together)."""
    x = offsets[1:] - offsets[:-1]
    span = x + (2 * padding - dilation * (kernel - 1) - 1)
    q = (
        -torch.div(-span, stride, rounding_mode="floor")
        if ceil_mode
        else torch.div(span, stride, rounding_mode="floor")
    )
    out = q + 1
    if ceil_mode:  # the last window starts inside the image or its leading padding
        out = torch.where(q * stride >= x + padding, q, out)
    out = torch.where(x == 0, torch.zeros_like(out), out.clamp(min=0))
    return torch.cat([offsets.new_zeros(1), torch.cumsum(out, 0)])


def _images(values: torch.Tensor, heights: torch.Tensor, widths: torch.Tensor) -> list[torch.Tensor]:
    """The [1, C, H, W] images of packed channels-last values (eager)."""
    hs = (heights[1:] - heights[:-1]).tolist()
    ws = (widths[1:] - widths[:-1]).tolist()
    out, start = [], 0
    for h, w in zip(hs, ws, strict=True):
        out.append(values[start : start + h * w].reshape(h, w, -1).permute(2, 0, 1)[None])
        start += h * w
    return out


def _per_image(values, heights, widths, channels: int, extents, fn) -> torch.Tensor:
    """``fn`` on every image whose output is non-empty, repacked channels-last."""
    hos, wos = (extents(i) for i in range(2))
    pieces = []
    for img, ho, wo in zip(_images(values, heights, widths), hos, wos, strict=True):
        if ho and wo:
            pieces.append(fn(img)[0].permute(1, 2, 0).reshape(ho * wo, channels))
    return torch.cat(pieces) if pieces else values.new_zeros((0, channels))


def _fake_rows() -> torch.SymInt:
    # Sum over the images of Ho(b) Wo(b): known only from the offsets' values.
    return torch.library.get_ctx().new_dynamic_size()


@torch.library.custom_op("ragged::conv2d", mutates_args=())
def conv2d(
    values: torch.Tensor,
    heights: torch.Tensor,
    widths: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    groups: int,
) -> torch.Tensor:
    """``F.conv2d`` of every image of ``values [sum H W, Cin]`` (channels-last)
    with the HWIO ``weight [KH, KW, Cin / groups, Cout]``: ``[sum Ho Wo, Cout]``."""
    oihw = weight.permute(3, 2, 0, 1)

    def extents(i: int) -> list[int]:
        offsets = window_offsets((heights, widths)[i], weight.shape[i], stride[i], padding[i], dilation[i])
        return (offsets[1:] - offsets[:-1]).tolist()

    return _per_image(
        values,
        heights,
        widths,
        weight.shape[3],
        extents,
        lambda img: torch.nn.functional.conv2d(img, oihw, bias, stride, padding, dilation, groups),
    )


@conv2d.register_fake
def _(values, heights, widths, weight, bias, stride, padding, dilation, groups):
    return values.new_empty((_fake_rows(), weight.shape[3]))


@torch.library.custom_op("ragged::pool2d", mutates_args=())
def pool2d(
    values: torch.Tensor,
    heights: torch.Tensor,
    widths: torch.Tensor,
    kind: str,
    kernel: list[int],
    stride: list[int],
    padding: list[int],
    dilation: list[int],
    ceil_mode: bool,
    count_include_pad: bool,
) -> torch.Tensor:
    """``F.max_pool2d`` (``kind`` "max") or ``F.avg_pool2d`` ("mean") of every
    image of ``values [sum H W, C]`` (channels-last): ``[sum Ho Wo, C]``."""
    F = torch.nn.functional

    def extents(i: int) -> list[int]:
        offsets = window_offsets(
            (heights, widths)[i], kernel[i], stride[i], padding[i], dilation[i], ceil_mode
        )
        return (offsets[1:] - offsets[:-1]).tolist()

    def fn(img):
        if kind == "max":
            return F.max_pool2d(img, kernel, stride, padding, dilation, ceil_mode=ceil_mode)
        return F.avg_pool2d(
            img, kernel, stride, padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad
        )

    return _per_image(values, heights, widths, values.shape[1], extents, fn)


@pool2d.register_fake
def _(values, heights, widths, kind, kernel, stride, padding, dilation, ceil_mode, count_include_pad):
    return values.new_empty((_fake_rows(), values.shape[1]))


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
