"""Functions returning a Python bool: equal, allclose."""

from __future__ import annotations

from collections.abc import Callable

import torch

from .common import _as_nested, _bind
from .registry import register
from .tensor import NestedTensor

# -- predicates ---------------------------------------------------------------------------------------------


def _equal(func: Callable, args: tuple, kwargs: dict) -> bool:
    a, b = _as_nested(args[0]), _as_nested(args[1])
    if isinstance(a, NestedTensor) and isinstance(b, NestedTensor):
        if len(a) != len(b) or a._ragged != b._ragged or a._item_rank() != b._item_rank():
            return False
        if a.values.shape != b.values.shape or a.dtype != b.dtype:
            return False
        for x, y in [(a.offsets, b.offsets)] + list(zip(a.partitions, b.partitions, strict=True)):
            if not torch.equal(x, y.to(x.device)):
                return False
        return torch.equal(a.values, b.values.to(a.device))
    nt, dense = (a, b) if isinstance(a, NestedTensor) else (b, a)
    if (
        not isinstance(dense, torch.Tensor)
        or tuple(dense.shape) != tuple(nt.shape)
        or dense.dtype != nt.dtype
    ):
        return False
    return torch.equal(nt.values, nt._dense_operand(dense, "equal").expand(nt.values.shape))


def _allclose(func: Callable, args: tuple, kwargs: dict) -> bool:
    p = _bind(
        "allclose",
        args,
        kwargs,
        ("input", "other", "rtol", "atol", "equal_nan"),
        {"rtol": 1e-5, "atol": 1e-8, "equal_nan": False},
    )
    a, b = _as_nested(p["input"]), _as_nested(p["other"])
    opts = {"rtol": p["rtol"], "atol": p["atol"], "equal_nan": p["equal_nan"]}
    if isinstance(a, NestedTensor) and isinstance(b, NestedTensor):
        try:
            a._check_same_structure(b, "allclose")
        except ValueError:
            return False
        return torch.allclose(a.values, b.values, **opts)
    nt, dense = (a, b) if isinstance(a, NestedTensor) else (b, a)
    other = nt._dense_operand(dense, "allclose").expand(nt.values.shape)
    x, y = (nt.values, other) if nt is a else (other, nt.values)
    return torch.allclose(x, y, **opts)


register([torch.equal, torch.Tensor.equal], "predicate", _equal)
register([torch.allclose, torch.Tensor.allclose], "predicate", _allclose)
