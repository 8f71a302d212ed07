"""The eager implementations of the ``ragged`` ops: vectorised torch where
the op allows it, a loop over items where each has its own shape (attention,
images), and no padding. Each function's signature is its op's schema and
its docstring the op's meaning; :mod:`.library` makes them ops.
"""

from __future__ import annotations

import torch

from .rules import check_dropout, dropout_factors, segment_ids, window_offsets

_KINDS = ("sum", "mean", "max", "min")


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


def segment_broadcast(source: torch.Tensor, like: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Row b of ``source`` ``[B, ...]`` for every row of segment b:
    ``[rows, ...]`` with ``rows = like.shape[0]`` (``like``'s values are not
    read). The adjoint of a segment sum."""
    return source[segment_ids(offsets, like.shape[0])]


def row_range(offsets: torch.Tensor) -> torch.Tensor:
    """``0, 1, ..., offsets[-1] - 1``: the index of every row of a batch
    packed over ``offsets``, int64. Its length is known only from the
    offsets' values: items picked by an index, say, whose row count the
    device computes and the host never reads."""
    return torch.arange(int(offsets[-1]), device=offsets.device)


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


def from_padded(padded: torch.Tensor, offsets: torch.Tensor, rows: int) -> torch.Tensor:
    """The first ``offsets[b+1] - offsets[b]`` slots of each item of
    ``[B, L, ...]``, packed: ``[rows, ...]``."""
    ids = segment_ids(offsets, rows)
    return padded[ids, torch.arange(rows, device=padded.device) - offsets[ids]].clone()


# --------------------------------------------------------------------------
# Attention, per item on its own [H, L, d] heads.
# --------------------------------------------------------------------------


def _item_heads(offsets: torch.Tensor, *tensors: torch.Tensor, items: bool = False):
    """``(a, b, views)`` for each non-empty item, rows ``[a, b)``: the
    item's rows of each packed ``[rows, H, d]`` tensor as ``[H, L, d]``
    (``(item, a, b, views)`` with ``items``)."""
    bounds = offsets.tolist()
    for item, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=False)):
        if a < b:
            views = [t[a:b].transpose(0, 1) for t in tensors]
            yield (item, a, b, views) if items else (a, b, views)


def _item_logits(q: torch.Tensor, k: torch.Tensor, scale: float, causal: bool) -> torch.Tensor:
    """One item's scaled logits ``[H, L, L]`` from ``[H, L, d]`` heads, the
    future at -inf when causal."""
    s = scale * (q @ k.transpose(1, 2))
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    return s


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
    if check_dropout(dropout_p, seed):
        return attention_lse(query, key, value, offsets, scale, causal, dropout_p, seed)[0]
    out = torch.empty_like(query)
    for a, b, (q, k, v) in _item_heads(offsets, query, key, value):
        out[a:b] = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=scale
        ).transpose(0, 1)
    return out


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
    drop = check_dropout(dropout_p, seed)
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
    drop = check_dropout(dropout_p, seed)
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


# --------------------------------------------------------------------------
# Images ([sum H W, C] channels-last, offsets of the heights and the widths;
# see :mod:`.rules`), per image with torch's own window ops.
# --------------------------------------------------------------------------


def _images(values: torch.Tensor, heights: torch.Tensor, widths: torch.Tensor) -> list[torch.Tensor]:
    """The [1, C, H, W] images of packed channels-last values (eager)."""
    hs = (heights[1:] - heights[:-1]).tolist()
    ws = (widths[1:] - widths[:-1]).tolist()
    out, start = [], 0
    for h, w in zip(hs, ws, strict=True):
        out.append(values[start : start + h * w].reshape(h, w, values.shape[1]).permute(2, 0, 1)[None])
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
