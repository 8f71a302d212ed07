"""Per-token elementwise functions (aten's ``pointwise`` tag): on the packed values."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from .common import _as_nested, _bind, _first_nt, _is_inplace, _operand, _wrap
from .registry import _fname, register
from .tensor import NestedTensor

# -- per-token: elementwise ---------------------------------------------------------------------


def _pointwise(func: Callable, args: tuple, kwargs: dict) -> Any:
    fname = _fname(func)
    ref = _first_nt(args, kwargs)
    if _is_inplace(func, kwargs):
        target = args[0] if args else None
        if not isinstance(target, NestedTensor):
            raise TypeError(
                f"{fname}: an in-place op on a dense tensor cannot take a NestedTensor operand (the result "
                f"would be ragged); use the out-of-place form"
            )
        ref = target
    conv = tuple(_operand(ref, a, fname) for a in args)
    kconv = {k: _operand(ref, v, fname) for k, v in kwargs.items()}
    out = func(*conv, **kconv)
    if _is_inplace(func, kwargs):
        if isinstance(out, torch.Tensor) and out is not ref.values:
            ref.values = out
        return ref
    return _wrap(ref, out)


def _pointwise_callables() -> list[Callable]:
    names = set()
    # Every aten op the registry holds: ``dir(torch.ops.aten)`` lists only
    # the packets loaded so far, which depends on what was imported before.
    all_ops = {
        s.name.split("::", 1)[1] for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::")
    }
    for name in sorted(all_ops):
        if name.startswith("_"):
            continue
        try:
            packet = getattr(torch.ops.aten, name)
        except (AttributeError, RuntimeError):  # a schema without a Python binding
            continue
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        try:
            tags = {t for ov in packet.overloads() for t in getattr(packet, ov).tags}
        except (AttributeError, RuntimeError):  # an overload torch lists but cannot load
            continue
        if torch.Tag.pointwise in tags:
            names.add(name)
    # Reductions and selection share names with pointwise overloads; they have handlers of their own.
    # ``equal`` is tagged pointwise but returns a Python bool (a predicate).
    names -= {"max", "min", "clone", "equal"}
    names = {n for n in names if not n.endswith("_backward")}
    names |= {
        "zeros_like",
        "ones_like",
        "full_like",
        "empty_like",
        "rand_like",
        "randn_like",
        "randint_like",
        "isclose",
        "float_power",
        "dropout",
        "alpha_dropout",
        "feature_alpha_dropout",
        "dropout1d",
        "logsigmoid",
        "softsign",
        "tanhshrink",
        "hardswish",
        "rrelu",
        "fill_",
        "zero_",
        "copy_",
        "normal_",
        "uniform_",
        "bernoulli_",
        "exponential_",
        "cauchy_",
        "log_normal_",
        "geometric_",
        "random_",
        "type_as",
        "masked_fill",
        "sub",
        "subtract",
        "multiply",
        "divide",
        "true_divide",
        "floor_divide",
        "absolute",
        "negative",
        "arccos",
        "arcsin",
        "arctan",
        "arctan2",
        "arccosh",
        "arcsinh",
        "arctanh",
        "greater",
        "greater_equal",
        "less",
        "less_equal",
        "not_equal",
        "fix",
        "logical_not",
        "conj",
        "real",
        "imag",
        "sigmoid",
        "tanh",
        "relu",
        "square",
    }
    out: list[Callable] = []
    for name in sorted(names):
        cands = []
        for base in (name, name.removeprefix("special_")):
            cands += [getattr(torch, base, None), getattr(torch.special, base, None), getattr(F, base, None)]
            cands += [getattr(torch.Tensor, base, None)]
            if not base.endswith("_"):
                cands += [getattr(torch.Tensor, base + "_", None), getattr(torch, base + "_", None)]
        for c in cands:
            if c is not None and callable(c) and c not in out:
                out.append(c)
    dunders = [
        "add",
        "sub",
        "mul",
        "truediv",
        "div",
        "floordiv",
        "mod",
        "pow",
        "and",
        "or",
        "xor",
        "lshift",
        "rshift",
    ]
    for d in dunders:
        for form in (f"__{d}__", f"__r{d}__", f"__i{d}__"):
            c = getattr(torch.Tensor, form, None)
            if c is not None and c not in out:
                out.append(c)
    for form in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__neg__", "__pos__", "__abs__"):
        c = getattr(torch.Tensor, form, None)
        if c is not None and c not in out:
            out.append(c)
    c = getattr(torch.Tensor, "__invert__", None)
    if c is not None:
        out.append(c)
    # torch's Python-level operators (``Tensor.__rsub__``, ``__rpow__``, ...)
    # dispatch ``__torch_function__`` with their undecorated function; under
    # Dynamo ``nt - dense`` arrives as ``dense.__rsub__(nt)`` that way.
    for c in list(out):
        inner = getattr(c, "__wrapped__", None)
        if inner is not None and inner not in out:
            out.append(inner)
    return out


def _rtruediv(func: Callable, args: tuple, kwargs: dict) -> Any:
    # torch's ``__rdiv__`` multiplies by the reciprocal; divide, as ``a / b`` does eagerly.
    return _pointwise(torch.true_divide, (args[1], args[0]), kwargs)


register(
    [torch.Tensor.__rtruediv__, getattr(torch.Tensor.__rtruediv__, "__wrapped__", None)],
    "per-token",
    _rtruediv,
)
register(_pointwise_callables(), "per-token", _pointwise)


def _isin(func: Callable, args: tuple, kwargs: dict) -> Any:
    names = ("elements", "test_elements", "assume_unique", "invert")
    p = _bind("isin", args, kwargs, names, {"assume_unique": False, "invert": False})
    elements, test = _as_nested(p["elements"]), _as_nested(p["test_elements"])
    if isinstance(test, NestedTensor):
        raise NotImplementedError(
            "isin: test_elements must be a dense tensor or a scalar, got a NestedTensor"
        )
    if not isinstance(elements, NestedTensor):
        raise TypeError(f"isin: expected elements to be a NestedTensor, got {type(elements).__name__}")
    out = torch.isin(elements.values, test, assume_unique=p["assume_unique"], invert=p["invert"])
    return elements._derive(out)


register([torch.isin], "per-token", _isin)
