"""Per-token functions with weights: linear, matmul, normalisation layers, embeddings, losses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .common import _as_nested, _bind, _first_nt, _operand
from .layout import _is_compiling
from .registry import _fname, register
from .tensor import NestedTensor

# -- per-token functions with weights --------------------------------------------------------------


def _last_static(nt: NestedTensor, k: int, fname: str) -> bool:
    rank = nt._item_rank()
    return rank >= k and all((rank - 1 - i) not in nt._ragged for i in range(k))


def _linear(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind("linear", args, kwargs, ("input", "weight", "bias"), {"bias": None})
    nt = _as_nested(p["input"])
    if not isinstance(nt, NestedTensor):
        raise TypeError(f"linear: expected input to be a NestedTensor, got {type(nt).__name__}")
    if isinstance(p["weight"], NestedTensor) or isinstance(p["bias"], NestedTensor):
        raise TypeError("linear: the weight and bias must be dense tensors")
    if not _last_static(nt, 1, "linear"):
        raise ValueError(
            f"linear: the last dim of the input is ragged (ragged dims {nt.ragged_dims} of items of rank "
            f"{nt._item_rank()}); linear needs a static last dim (transpose the ragged dim away first)"
        )
    return nt._derive(F.linear(nt.values, p["weight"], p["bias"]))


register([F.linear], "per-token", _linear)


def _rmatmul(func: Callable, args: tuple, kwargs: dict) -> Any:
    return _matmul(func, (args[1], args[0]), kwargs)


def _traced_operands(func: Callable, a: Any, b: Any) -> tuple[Any, Any]:
    """Dynamo (torch 2.13) traces ``nt @ dense`` as ``Tensor.matmul(dense,
    nt)``: it swaps a binary operator's operands when the left one is not a
    tensor, then calls the reflected method, and ``@`` has none. Under
    compile, ``Tensor.matmul(dense, nt)`` is therefore read as ``nt @ dense``
    when only that order fits the shapes; where both orders fit, it is
    refused rather than guessed."""
    if not (
        func is torch.Tensor.matmul
        and _is_compiling()
        and isinstance(b, NestedTensor)
        and isinstance(a, torch.Tensor)
        and not isinstance(a, NestedTensor)
        and a.dim() in (1, 2)
    ):
        return a, b
    rank, static = b._item_rank(), b._static_dims()

    def size(d: int) -> Any:
        return b.values.shape[1 + static.index(d)] if d in static else None

    nt_left = size(rank - 1) is not None and size(rank - 1) == a.shape[0]
    dense_left = rank >= 2 and size(rank - 2) is not None and size(rank - 2) == a.shape[-1]
    if nt_left and dense_left:
        raise ValueError(
            "matmul: under torch.compile, `nested @ dense` and `dense.matmul(nested)` reach the "
            "NestedTensor alike and both fit these shapes; write torch.matmul(a, b)"
        )
    return (b, a) if nt_left else (a, b)


def _matmul(func: Callable, args: tuple, kwargs: dict) -> Any:
    a, b = _traced_operands(func, _as_nested(args[0]), _as_nested(args[1]))
    fname = "matmul"
    if isinstance(a, NestedTensor) and isinstance(b, torch.Tensor) and b.dim() in (1, 2):
        if _last_static(a, 1, fname):
            out = torch.matmul(a.values, b)
            ragged = a._ragged
            return a._derive(out, ragged=ragged)
    if isinstance(a, NestedTensor) and isinstance(b, NestedTensor):
        if _is_compiling():
            raise NotImplementedError(
                "matmul: NestedTensor @ NestedTensor runs item by item on the host; under torch.compile use "
                "F.scaled_dot_product_attention for attention"
            )
        if len(a) != len(b):
            raise ValueError(f"matmul: NestedTensors of different batch sizes ({len(a)} and {len(b)})")
        items = [torch.matmul(x, y) for x, y in zip(a._items(), b._items(), strict=True)]
        if not items:
            return a._empty()
        # The rows keep a's ragged dims, the columns b's: [L, d] @ [d, S] is ragged in both.
        rank = items[0].dim()
        ragged = sorted(
            {r for r in a.ragged_dims if r < a._item_rank() - 1}
            | {rank - 1 for r in b.ragged_dims if r == b._item_rank() - 1}
        )
        try:
            return type(a)(items, ragged_dims=tuple(ragged) or None, **a._state())
        except ValueError:
            return type(a)(items, **a._state())
    nt = a if isinstance(a, NestedTensor) else b
    if isinstance(a, NestedTensor):
        return nt._per_item(lambda t: torch.matmul(t, b), fname)
    return nt._per_item(lambda t: torch.matmul(a, t), fname)


register(
    [
        torch.matmul,
        torch.Tensor.matmul,
        torch.Tensor.__matmul__,
        torch.mm,
        torch.bmm,
        torch.Tensor.mm,
        torch.Tensor.bmm,
    ],
    "per-token",
    _matmul,
    "NestedTensor @ dense matrix on the packed values; NestedTensor @ NestedTensor per item (eager)",
)
register(
    [torch.Tensor.__rmatmul__, getattr(torch.Tensor.__rmatmul__, "__wrapped__", None)],
    "per-token",
    _rmatmul,
    "dense @ NestedTensor: per item (eager)",
)


def _norm_layer(kind: str) -> Callable:
    def handler(func: Callable, args: tuple, kwargs: dict) -> Any:
        if kind == "layer_norm":
            p = _bind(
                kind,
                args,
                kwargs,
                ("input", "normalized_shape", "weight", "bias", "eps"),
                {"weight": None, "bias": None, "eps": 1e-5},
            )
        else:
            p = _bind(
                kind,
                args,
                kwargs,
                ("input", "normalized_shape", "weight", "eps"),
                {"weight": None, "eps": None},
            )
        nt = _as_nested(p["input"])
        shape = p["normalized_shape"]
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        fn = getattr(F, kind)
        rest = {k: v for k, v in p.items() if k not in ("input", "normalized_shape")}
        if not _last_static(nt, len(shape), kind):
            return nt._per_item(lambda t: fn(t, shape, **rest), kind)
        return nt._derive(fn(nt.values, shape, **rest))

    return handler


register([F.layer_norm], "per-token", _norm_layer("layer_norm"))
if hasattr(F, "rms_norm"):
    register([F.rms_norm], "per-token", _norm_layer("rms_norm"))


def _embedding(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind(
        "embedding",
        args,
        kwargs,
        ("input", "weight", "padding_idx", "max_norm", "norm_type", "scale_grad_by_freq", "sparse"),
        {
            "padding_idx": None,
            "max_norm": None,
            "norm_type": 2.0,
            "scale_grad_by_freq": False,
            "sparse": False,
        },
    )
    nt = _as_nested(p["input"])
    if not isinstance(nt, NestedTensor):
        raise TypeError(f"embedding: expected the ids (input) to be a NestedTensor, got {type(nt).__name__}")
    if isinstance(p["weight"], NestedTensor):
        raise TypeError("embedding: the weight must be a dense tensor, got a NestedTensor")
    if p["max_norm"] is not None:
        raise NotImplementedError(
            "embedding: max_norm renormalises the weight in place; not supported for NestedTensor"
        )
    out = F.embedding(
        nt.values, p["weight"], p["padding_idx"], None, p["norm_type"], p["scale_grad_by_freq"], p["sparse"]
    )
    return nt._derive(out)


register([F.embedding], "per-token", _embedding, "appends the embedding dim as a static dim")


def _one_hot(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind("one_hot", args, kwargs, ("tensor", "num_classes"), {"num_classes": -1})
    nt = _as_nested(p["tensor"])
    return nt._derive(F.one_hot(nt.values, p["num_classes"]))


register([F.one_hot], "per-token", _one_hot, "appends the class dim as a static dim")


def _loss(func: Callable, args: tuple, kwargs: dict) -> Any:
    fname = _fname(func)
    ref = _first_nt(args, kwargs)
    a2 = [_operand(ref, a, fname) for a in args]
    k2 = {k: _operand(ref, v, fname) for k, v in kwargs.items()}
    out = func(*a2, **k2)
    if isinstance(out, torch.Tensor) and out.dim() >= 1 and out.shape[0] == ref.values.shape[0]:
        return ref._derive(out)
    return out


register(
    [
        F.mse_loss,
        F.l1_loss,
        F.smooth_l1_loss,
        F.huber_loss,
        F.binary_cross_entropy,
        F.binary_cross_entropy_with_logits,
        F.soft_margin_loss,
        F.kl_div,
        F.poisson_nll_loss,
    ],
    "per-token",
    _loss,
    "elementwise losses over the real elements (reduction='mean' averages them)",
)


def _class_loss(func: Callable, args: tuple, kwargs: dict) -> Any:
    fname = _fname(func)
    nt = _as_nested(args[0])
    target = _as_nested(args[1] if len(args) > 1 else kwargs.get("target"))
    if (
        not isinstance(nt, NestedTensor)
        or nt._item_dim(1, fname) is None
        or nt._item_dim(1, fname) in nt._ragged
    ):
        raise ValueError(
            f"{fname}: needs a NestedTensor input with a static class dim at dim 1 ([B, C, L(b), ...]), got "
            f"{nt!r}"
        )
    if isinstance(target, NestedTensor):
        if target._ragged != tuple(r - 1 for r in nt._ragged) or len(target) != len(nt):
            raise ValueError(f"{fname}: the target's ragged dims must be the input's minus the class dim")
        nt._check_same_structure(nt._derive(nt.values, ragged=nt._ragged), fname)
        tv = target.values
    else:
        raise TypeError(f"{fname}: the target must be a NestedTensor like the input without its class dim")
    logits = nt.values.movedim(nt._value_dim(0), 1)
    rest = dict(kwargs)
    rest.pop("target", None)
    out = func(logits, tv, *args[2:], **rest)
    if isinstance(out, torch.Tensor) and out.dim() >= 1:
        return target._derive(out)
    return out


register(
    [F.cross_entropy, F.nll_loss],
    "per-token",
    _class_loss,
    "class dim at dim 1 must be static ([B, C, L(b)]), like torch",
)
