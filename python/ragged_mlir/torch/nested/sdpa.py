"""Attention on :class:`~ragged_mlir.torch.nested.NestedTensor`: ``F.scaled_dot_product_attention``
and ``nn.MultiheadAttention``.

``F.scaled_dot_product_attention(q, k, v)`` follows torch: the sequence dim
is ``-2`` and the features ``-1``; the dims before are batch-like. The usual
multi-head idiom keeps the packed values ``[N, H, d]`` throughout::

    q, k, v = qkv(x).chunk(3, dim=-1)                  # [B, L(b), E], values [N, E]
    q = q.unflatten(-1, (H, -1)).transpose(1, 2)       # [B, H, L(b), d], values [N, H, d]
    o = F.scaled_dot_product_attention(q, k, v)        # torch.ops.ragged.attention on [N, H, d]
    o = o.transpose(1, 2).flatten(-2)                  # [B, L(b), E], values [N, E]

When the ragged dim is the sequence dim (``-2``) and query, key and value
share their offsets, the call is one ``torch.ops.ragged.attention`` on the
packed rows (no copy; extra leading static dims are folded into the heads).
When the last two dims are static (``[B, L(b), H, d]``: each token attends
over its ``H`` entries, as torch would compute it on the padded tensor), it is
a dense SDPA with the rows as batch. Dropout (``dropout_p``, and
``nn.MultiheadAttention``'s ``dropout`` in training) drops weights inside the
attention kernel, by a seed drawn per call. Attention masks, cross attention
between items of different lengths, a value head size different from the
query's and several ragged dims run item by item (eager only).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .layout import _is_compiling
from .registry import register
from .tensor import NestedTensor

__all__ = ["mha_handler", "sdpa_handler"]

_FNAME = "scaled_dot_product_attention"

#: A compiled training forward keeps attention's log-sum-exp for the
#: gradient (docs/torch.md); ``RAGGED_ATTENTION_LSE=0`` recomputes it there.
KEEP_LSE = os.environ.get("RAGGED_ATTENTION_LSE", "1") != "0"


def _ragged_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    offsets,
    scale,
    causal,
    gqa,
    fname: str,
    dropout_p: float = 0.0,
):
    """Attention on packed ``[N, heads, d]`` rows; returns ``[N, heads, d]``.
    With ``dropout_p``, weights are dropped by a fresh seed drawn from
    torch's generator (eagerly) or the compiled module's (compiled)."""
    hq, hk, hv = q.shape[1], k.shape[1], v.shape[1]
    if hk != hq or hv != hq:
        if not gqa or hk != hv or hq % hk != 0:
            raise ValueError(
                f"{fname}: query has {hq} heads, key {hk} and value {hv}; they must match "
                f"(or divide them with enable_gqa=True)"
            )
        k = k.repeat_interleave(hq // hk, dim=1)
        v = v.repeat_interleave(hq // hk, dim=1)
    if k.shape[-1] != q.shape[-1]:
        raise ValueError(f"{fname}: query and key head sizes differ ({q.shape[-1]} vs {k.shape[-1]})")
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    dropout_p = float(dropout_p)
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"{fname}: dropout must be in [0, 1), got {dropout_p}")
    drop = ()
    if dropout_p > 0.0:
        drop = (dropout_p, torch.randint(0, 2**62, (), dtype=torch.int64, device=q.device))
    if (
        KEEP_LSE
        and _is_compiling()
        and torch.is_grad_enabled()
        and (q.requires_grad or k.requires_grad or v.requires_grad)
    ):
        # A compiled training forward keeps its log-sum-exp for the gradient
        # (eagerly, the gradient recomputes everything anyway).
        return torch.ops.ragged.attention_lse(q, k, v, offsets, float(scale), bool(causal), *drop)[0]
    return torch.ops.ragged.attention(q, k, v, offsets, float(scale), bool(causal), *drop)


def _bind(args: tuple, kwargs: dict) -> dict:
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")
    defaults = {"attn_mask": None, "dropout_p": 0.0, "is_causal": False, "scale": None, "enable_gqa": False}
    p = dict(zip(names, args, strict=False))
    for key, val in kwargs.items():
        if key not in names:
            raise TypeError(f"{_FNAME}: got an unexpected keyword argument {key!r}")
        p[key] = val
    for n in names:
        if n not in p:
            if n not in defaults:
                raise TypeError(f"{_FNAME}: missing required argument {n!r}")
            p[n] = defaults[n]
    return p


def sdpa_handler(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind(args, kwargs)
    qkv = []
    for name in ("query", "key", "value"):
        x = p[name]
        if isinstance(x, torch.Tensor) and x.is_nested:
            x = NestedTensor.from_njt(x)
        if not isinstance(x, NestedTensor):
            raise TypeError(
                f"{_FNAME}: expected {name} to be a NestedTensor like the other operands, got {type(x).__name__}"
            )
        qkv.append(x)
    q, k, v = qkv
    rank = q._item_rank()
    if rank < 2 or k._item_rank() != rank or v._item_rank() != rank:
        raise ValueError(
            f"{_FNAME}: query, key and value must be NestedTensors of the same rank >= 3 ([B, ..., L, d]); got "
            f"ranks {q.dim()}, {k.dim()} and {v.dim()}"
        )
    if q.batch_first != k.batch_first or q.batch_first != v.batch_first:
        raise ValueError(f"{_FNAME}: query, key and value must agree on batch_first")
    seq, feat = rank - 2, rank - 1
    mask, dropout_p = p["attn_mask"], float(p["dropout_p"])
    causal, scale, gqa = bool(p["is_causal"]), p["scale"], bool(p["enable_gqa"])
    layouts = {q.ragged_dims, k.ragged_dims, v.ragged_dims}
    if layouts == {(seq,)}:
        same = _same_offsets(q, k) and _same_offsets(q, v)
        if same and mask is None and v.values.shape[-1] == q.values.shape[-1]:
            q._check_same_structure(k, f"{_FNAME} (query vs key)")
            q._check_same_structure(v, f"{_FNAME} (query vs value)")
            n = q.values.shape[0]
            heads = tuple(q.values.shape[1:-1])
            flat = []
            for t in (q, k, v):
                h = 1
                for s in t.values.shape[1:-1]:
                    h = h * s
                flat.append(t.values.reshape(t.values.shape[0], h, t.values.shape[-1]))
            out = _ragged_attention(*flat, q.offsets, scale, causal, gqa, _FNAME, dropout_p)
            return q._derive(out.reshape((n, *heads, out.shape[-1])))
        return _per_item(q, k, v, p, "cross attention, a mask or a value head size unlike the query's")
    if all(seq not in t.ragged_dims and feat not in t.ragged_dims for t in qkv):
        # The ragged dims are batch-like: a dense attention with the rows as batch.
        q._check_same_structure(k, f"{_FNAME} (query vs key)")
        q._check_same_structure(v, f"{_FNAME} (query vs value)")
        dense_mask = None if mask is None else _dense_mask(q, mask)
        out = F.scaled_dot_product_attention(
            q.values, k.values, v.values, dense_mask, dropout_p, causal, scale=scale, enable_gqa=gqa
        )
        return q._derive(out)
    return _per_item(q, k, v, p, "this ragged layout (the ragged dim is not the sequence dim -2)")


def _dense_mask(q: NestedTensor, mask: Any) -> torch.Tensor:
    if isinstance(mask, NestedTensor):
        q._check_same_structure(mask, f"{_FNAME} (attn_mask)")
        return mask.values
    return q._dense_operand(mask, f"{_FNAME} (attn_mask)")


def _same_offsets(a: NestedTensor, b: NestedTensor) -> bool:
    if a.offsets is b.offsets:
        return True
    if a.offsets.shape != b.offsets.shape:
        return False
    if _is_compiling():
        return True  # checked in the graph by _check_same_structure
    return bool(torch.equal(a.offsets, b.offsets))


def _per_item(q: NestedTensor, k: NestedTensor, v: NestedTensor, p: dict, why: str) -> NestedTensor:
    if _is_compiling():
        raise NotImplementedError(
            f"{_FNAME}: {why} runs item by item on the host and is not traceable; under torch.compile, "
            f"query, key and value must share their offsets with the ragged dim at -2, without attn_mask "
            f"(use is_causal for causal attention)"
        )
    if not len(q) == len(k) == len(v):
        raise ValueError(
            f"{_FNAME}: query, key and value have different batch sizes ({len(q)}, {len(k)}, {len(v)})"
        )
    mask = p["attn_mask"]
    masks: list[Any] = [None] * len(q)
    if isinstance(mask, NestedTensor):
        masks = list(mask._items())
    elif isinstance(mask, torch.Tensor):
        qi = q._items()
        ki = k._items()
        for i in range(len(q)):
            lq, lk = qi[i].shape[-2], ki[i].shape[-2]
            m = mask[i] if mask.dim() == q.dim() else mask
            masks[i] = m[..., :lq, :lk]
    outs = [
        F.scaled_dot_product_attention(
            a,
            b,
            c,
            m,
            float(p["dropout_p"]),
            bool(p["is_causal"]),
            scale=p["scale"],
            enable_gqa=bool(p["enable_gqa"]),
        )
        for a, b, c, m in zip(q._items(), k._items(), v._items(), masks, strict=True)
    ]
    if not outs:
        return q._empty()
    try:
        return type(q)(outs, ragged_dims=q.ragged_dims, **q._state())
    except ValueError:
        return type(q)(outs, **q._state())


def mha_handler(func: Callable, args: tuple, kwargs: dict) -> Any:
    names = (
        "query",
        "key",
        "value",
        "embed_dim_to_check",
        "num_heads",
        "in_proj_weight",
        "in_proj_bias",
        "bias_k",
        "bias_v",
        "add_zero_attn",
        "dropout_p",
        "out_proj_weight",
        "out_proj_bias",
        "training",
        "key_padding_mask",
        "need_weights",
        "attn_mask",
        "use_separate_proj_weight",
        "q_proj_weight",
        "k_proj_weight",
        "v_proj_weight",
        "static_k",
        "static_v",
        "average_attn_weights",
        "is_causal",
    )
    defaults: dict[str, Any] = {
        "training": True,
        "key_padding_mask": None,
        "need_weights": True,
        "attn_mask": None,
        "use_separate_proj_weight": False,
        "q_proj_weight": None,
        "k_proj_weight": None,
        "v_proj_weight": None,
        "static_k": None,
        "static_v": None,
        "average_attn_weights": True,
        "is_causal": False,
    }
    p = dict(zip(names, args, strict=False))
    p.update(kwargs)
    for n, d in defaults.items():
        p.setdefault(n, d)
    fname = "multi_head_attention_forward (nn.MultiheadAttention)"
    qkv = []
    for name in ("query", "key", "value"):
        x = p[name]
        if not isinstance(x, NestedTensor):
            raise TypeError(f"{fname}: expected {name} to be a NestedTensor, got {type(x).__name__}")
        if len(x) == 0 and x._item_rank() == 0:
            raise ValueError(
                f"{fname}: {name} is a NestedTensor of no items, which has no item shape; give an empty batch "
                f"its shape: NestedTensor.from_packed(torch.empty(0, embed_dim), torch.zeros(1, dtype=torch.int64))"
            )
        if x.ragged_dims != (0,) or x._item_rank() != 2:
            raise NotImplementedError(
                f"{fname}: {name} must be a NestedTensor of [B, L(b), E] sequences, got ragged dims "
                f"{x.ragged_dims} on items of rank {x._item_rank()}"
            )
        # A NestedTensor knows its batch dim: nn.MultiheadAttention's batch_first
        # (which only transposes the inputs and the output) does not matter.
        qkv.append(x)
    q, k, v = qkv
    if p["need_weights"]:
        raise NotImplementedError(
            f"{fname}: pass need_weights=False for NestedTensor inputs (no weights are formed)"
        )
    if p["key_padding_mask"] is not None or p["attn_mask"] is not None:
        raise NotImplementedError(
            f"{fname}: key_padding_mask / attn_mask are not supported for NestedTensor inputs (the ragged structure "
            f"is the padding mask; is_causal=True without attn_mask gives causal attention)"
        )
    if (
        p["bias_k"] is not None
        or p["bias_v"] is not None
        or p["add_zero_attn"]
        or p["static_k"] is not None
        or p["static_v"] is not None
    ):
        raise NotImplementedError(f"{fname}: add_bias_kv, add_zero_attn and static_k/v are not supported")
    dropout_p = float(p["dropout_p"]) if p["training"] else 0.0
    e = q.values.shape[-1]
    if e != p["embed_dim_to_check"]:
        raise ValueError(f"{fname}: expected embed dim {p['embed_dim_to_check']}, got query of embed dim {e}")
    q._check_same_structure(k, f"{fname} (query vs key)")
    q._check_same_structure(v, f"{fname} (query vs value)")
    num_heads = p["num_heads"]
    head_dim = e // num_heads
    if head_dim * num_heads != e:
        raise ValueError(f"{fname}: embed dim {e} is not divisible by num_heads {num_heads}")
    w, bias = p["in_proj_weight"], p["in_proj_bias"]
    if p["use_separate_proj_weight"]:
        bq = bk = bv = None
        if bias is not None:
            bq, bk, bv = bias.chunk(3)
        xq = F.linear(q.values, p["q_proj_weight"], bq)
        xk = F.linear(k.values, p["k_proj_weight"], bk)
        xv = F.linear(v.values, p["v_proj_weight"], bv)
    elif q is k and k is v:
        xq, xk, xv = F.linear(q.values, w, bias).chunk(3, dim=-1)
    else:
        wq, wk, wv = w.chunk(3)
        bq = bk = bv = None
        if bias is not None:
            bq, bk, bv = bias.chunk(3)
        xq, xk, xv = F.linear(q.values, wq, bq), F.linear(k.values, wk, bk), F.linear(v.values, wv, bv)
    n = q.values.shape[0]
    heads = [t.reshape(n, num_heads, head_dim) for t in (xq, xk, xv)]
    out = _ragged_attention(*heads, q.offsets, None, p["is_causal"], False, fname, dropout_p)
    out = F.linear(out.reshape(n, e), p["out_proj_weight"], p["out_proj_bias"])
    return q._derive(out), None


register(
    [F.scaled_dot_product_attention],
    "attention",
    sdpa_handler,
    "[B, ..., L(b), d] with the ragged dim at -2 maps onto torch.ops.ragged.attention without copies",
)
register([F.multi_head_attention_forward], "attention", mha_handler)
