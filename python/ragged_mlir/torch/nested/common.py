"""What the op families share: finding the NestedTensor among the operands,
dense operands against the logical shape, results wrapped back, argument
binding."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .registry import lookup
from .tensor import NestedTensor

# -- operands -------------------------------------------------------------------------------


def _first_nt(args: tuple, kwargs: dict) -> NestedTensor:
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, NestedTensor):
            return a
    raise TypeError("expected a NestedTensor argument")  # pragma: no cover - dispatch guarantees one


def _as_nested(x: Any) -> Any:
    if isinstance(x, torch.Tensor) and x.is_nested:
        return NestedTensor.from_njt(x)
    return x


def _operand(ref: NestedTensor, x: Any, fname: str) -> Any:
    """``x`` as an operand of ``ref.values``."""
    x = _as_nested(x)
    if isinstance(x, NestedTensor):
        if x is not ref:
            ref._check_same_structure(x, fname)
        return x.values
    if isinstance(x, torch.Tensor):
        return ref._dense_operand(x, fname)
    return x


def _wrap(ref: NestedTensor, out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return ref._derive(out)
    if isinstance(out, tuple):
        items = [_wrap(ref, o) for o in out]
        return tuple(items) if type(out) is tuple else type(out)(items)
    if isinstance(out, list):
        return [_wrap(ref, o) for o in out]
    return out


def _is_inplace(func: Callable, kwargs: dict) -> bool:
    """In-place variants are known when registered (a dict lookup: traceable)."""
    if kwargs.get("inplace", False) is True:
        return True
    entry = lookup(func)
    return entry is not None and entry.inplace


# -- argument binding -----------------------------------------------------------------------------


_MISSING = object()


def _bind(fname: str, args: tuple, kwargs: dict, names: tuple, defaults: dict) -> dict:
    out: dict[str, Any] = {}
    if len(args) > len(names):
        raise TypeError(f"{fname}: takes at most {len(names)} positional arguments, got {len(args)}")
    for n, a in zip(names, args, strict=False):
        out[n] = a
    for k, v in kwargs.items():
        if k in out:
            raise TypeError(f"{fname}: got multiple values for argument {k!r}")
        if k not in names:
            raise TypeError(f"{fname}: got an unexpected keyword argument {k!r}")
        out[k] = v
    for n in names:
        if n not in out:
            if n not in defaults:
                raise TypeError(f"{fname}: missing required argument {n!r}")
            out[n] = defaults[n]
    return out


def _dims(dim: Any) -> list[int] | None:
    if dim is None:
        return None
    if isinstance(dim, (tuple, list, torch.Size)):
        return [int(d) for d in dim]
    return [int(dim)]
