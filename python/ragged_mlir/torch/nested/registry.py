"""The torch function table of :class:`~ragged_mlir.torch.nested.NestedTensor`.

:data:`FUNCTIONS` maps every torch callable the class supports (``torch.*``,
``torch.Tensor.*`` methods and operators, ``torch.nn.functional.*``,
``torch.special.*``) to a :class:`NestedFunction`: its handler and a short
category. ``NestedTensor.__torch_function__`` looks the callable up here, and
:func:`supported_functions` enumerates the table (the documentation is
generated from it).

Categories (:data:`CATEGORIES`):

* ``per-token``: elementwise functions (built from aten's ``pointwise`` tag,
  not listed by hand) and functions over static item dims: they run on the
  packed values and keep the offsets;
* ``reduction``: over any dims: static dims on the values, ragged dims through
  ``torch.ops.ragged.segment_reduce`` (and vectorized torch over the
  offsets), the batch dim eagerly on the padded view;
* ``ragged-dim``: shape-preserving functions along a ragged dim (softmax,
  cumulative sums, flips);
* ``view``: dims re-labelled or selected without compute;
* ``batch``: items concatenated, stacked or selected;
* ``attention``: scaled dot-product attention over the ragged dim;
* ``predicate``: returns a Python bool;
* ``factory``: a new NestedTensor of the same structure;
* ``per-item``: eager only; loops over the items on the host and raises under
  ``torch.compile``.

A dense tensor operand broadcasts against the logical shape: in the batch dim
it is 1 or B, in a ragged dim 1 or the maximum extent (a padded tensor, read at
the real positions), in the static dims as usual.

This module imports no class: the op families (:mod:`.pointwise`,
:mod:`.reductions`, :mod:`.dims`, :mod:`.per_item`, :mod:`.images`,
:mod:`.weights`, :mod:`.batch`, :mod:`.predicates`, :mod:`.sdpa`) register
their handlers here when :mod:`ragged_mlir.torch.nested` imports them, in
that order (the first registration of a callable wins), then
:func:`finalize` indexes the table and gives the class its methods.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = [
    "CATEGORIES",
    "FUNCTIONS",
    "NestedFunction",
    "finalize",
    "function_name",
    "lookup",
    "register",
    "supported_functions",
]

CATEGORIES: dict[str, str] = {
    "per-token": "elementwise, or over static item dims: runs on the packed values, keeps the offsets",
    "reduction": "over any dims: static dims on the values, ragged dims through torch.ops.ragged.segment_reduce, "
    "the batch dim eagerly on the padded view",
    "ragged-dim": "shape-preserving along a ragged dim (softmax through torch.ops.ragged.segment_softmax, scans, "
    "flips)",
    "view": "re-labels or selects dims without compute",
    "batch": "concatenates, stacks or selects whole items",
    "attention": "scaled dot-product attention over the ragged dim (torch.ops.ragged.attention)",
    "predicate": "returns a Python bool",
    "factory": "a new NestedTensor with the same structure",
    "image": "convolution and pooling of [C, H(b), W(b)] images at their own sizes, packed "
    "(torch.ops.ragged.conv2d / pool2d); other layouts run per item, eagerly",
    "per-item": "eager only: loops over the items on the host (raises under torch.compile)",
}


@dataclass(frozen=True)
class NestedFunction:
    """One entry of the function table."""

    func: Callable
    name: str
    category: str
    handler: Callable[[Callable, tuple, dict], Any]
    note: str = ""
    inplace: bool = False
    short: str = ""


FUNCTIONS: dict[Callable, NestedFunction] = {}


def function_name(func: Callable) -> str:
    """A readable name of a torch callable (``torch.add``, ``torch.Tensor.add_``, ...)."""
    try:
        name = torch.overrides.resolve_name(func)
    except (AttributeError, KeyError, TypeError):  # a callable torch's table does not know
        name = None
    if name:
        return name
    qual = getattr(func, "__qualname__", None) or getattr(func, "__name__", None)
    mod = getattr(func, "__module__", None)
    if qual and mod:
        return f"{mod}.{qual}"
    return qual or repr(func)


def supported_functions(category: str | None = None) -> list[NestedFunction]:
    """The table's entries (one per callable), sorted by name; optionally of one category."""
    if category is not None and category not in CATEGORIES:
        raise ValueError(f"category: expected one of {sorted(CATEGORIES)}, got {category!r}")
    out = [e for e in FUNCTIONS.values() if category is None or e.category == category]
    return sorted(out, key=lambda e: e.name)


def register(funcs: Iterable[Callable | None], category: str, handler: Callable, note: str = "") -> None:
    for f in funcs:
        if f is None or f in FUNCTIONS:
            continue
        name = function_name(f)
        short = name.removeprefix("torch.nn.functional.").removeprefix("torch.")
        FUNCTIONS[f] = NestedFunction(f, name, category, handler, note, _inplace_name(f), short)


def _fname(func: Callable) -> str:
    """The short name of a registered callable (traceable)."""
    entry = lookup(func)
    return entry.short if entry is not None else "function"


def _inplace_name(func: Callable) -> bool:
    name = getattr(func, "__name__", "") or ""
    if name.startswith("__i") and name.endswith("__"):
        return True
    return name.endswith("_") and not name.endswith("__")


# Tensor's Python-level operators (``Tensor.__rsub__``, ``__rpow__``, ...): under
# Dynamo a dict lookup keyed by them misses (torch 2.13) and leaves a guard
# that fails at once; an identity test works. They are grouped by name (a
# name can hold a wrapper and the function it wraps): Dynamo traces
# ``lookup`` on every op, and a scan of all of them was a quarter of the
# bytecode it ran for a six-layer encoder. Filled by :func:`finalize`.
_TENSOR_PY_FUNCTIONS: dict[str, list[tuple[Callable, NestedFunction]]] = {}


def lookup(func: Callable) -> NestedFunction | None:
    """The table entry of ``func`` (None when unsupported)."""
    for f, e in _TENSOR_PY_FUNCTIONS.get(getattr(func, "__name__", None), ()):
        if func is f:
            return e
    return FUNCTIONS.get(func)


def _make_method(func: Callable) -> Callable:
    entry = FUNCTIONS[func]
    handler = entry.handler

    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return handler(func, (self,) + args, kwargs)

    method.__name__ = getattr(func, "__name__", "method")
    method.__doc__ = f"``{entry.name}`` on a NestedTensor ({entry.category})."
    return method


def finalize(cls: type) -> None:
    """Once every family has registered: indexes Tensor's Python-level
    operators for :func:`lookup`, and gives ``cls`` a method for each
    ``torch.Tensor`` method of the table it does not define itself."""
    _TENSOR_PY_FUNCTIONS.clear()
    for f, e in FUNCTIONS.items():
        if getattr(f, "__module__", None) == "torch._tensor":
            _TENSOR_PY_FUNCTIONS.setdefault(f.__name__, []).append((f, e))
    own = set().union(*(vars(k) for k in cls.__mro__ if k is not object))
    for f in list(FUNCTIONS):
        name = getattr(f, "__name__", None)
        if name and getattr(torch.Tensor, name, None) is f and name not in own:
            if name.startswith("__") or name in ("t",):
                continue
            setattr(cls, name, _make_method(f))
