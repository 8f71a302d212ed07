"""Ragged semantics as PyTorch custom ops (namespace ``ragged``).

Each op takes packed values and int64 offsets, so a traced graph keeps its
ragged meaning after Dynamo and AOTAutograd: the ``ragged`` backend turns
these nodes into ragged-dialect ops, and eager mode runs the reference
implementations below (vectorised torch, no padding).
"""

from __future__ import annotations

import torch

__all__ = ["segment_reduce", "segment_softmax", "attention", "segment_ids"]


def segment_ids(offsets: torch.Tensor, rows: int) -> torch.Tensor:
    """The segment of every row: ``[rows]`` int64."""
    lengths = offsets[1:] - offsets[:-1]
    return torch.repeat_interleave(torch.arange(lengths.numel(), device=offsets.device), lengths, output_size=rows)


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


@torch.library.custom_op("ragged::attention", mutates_args=())
def attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, offsets: torch.Tensor, scale: float, causal: bool
) -> torch.Tensor:
    """softmax(scale q kᵀ [+ causal]) v per item and head on ``[rows, heads, d]``."""
    out = torch.empty_like(query)
    bounds = offsets.tolist()
    for a, b in zip(bounds[:-1], bounds[1:]):
        if a == b:
            continue
        q, k, v = (t[a:b].transpose(0, 1) for t in (query, key, value))
        out[a:b] = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=causal, scale=scale
        ).transpose(0, 1)
    return out


@attention.register_fake
def _(query, key, value, offsets, scale, causal):
    return torch.empty_like(query)
