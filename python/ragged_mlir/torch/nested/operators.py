"""NestedTensor's Python operators (``+``, ``-``, ``@``, comparisons, ``-x``,
``x += y``...), each the table's handler of the torch function it means."""

from __future__ import annotations

import numbers
from collections.abc import Callable

import torch

from .registry import FUNCTIONS


def _callable_name(func: Callable) -> str:
    """``module.qualname`` of a callable, without ``torch.overrides`` (which Dynamo cannot trace)."""
    mod = str(getattr(func, "__module__", None) or "")
    qual = str(getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func))
    qual = qual.replace("_VariableFunctionsClass.", "").replace("TensorBase.", "Tensor.")
    if mod == "torch._C._nn":
        mod = "torch.nn.functional"
    elif mod.startswith("torch._C") or mod == "torch.functional" or not mod:
        mod = "torch"
    return f"{mod}.{qual}"


def _binary_dunder(cls: type, name: str, reflected: bool = False) -> Callable:
    def method(self, other):
        if not isinstance(other, (cls, torch.Tensor, numbers.Number)):
            return NotImplemented
        fn = getattr(torch, name)
        args = (other, self) if reflected else (self, other)
        return FUNCTIONS[fn].handler(fn, args, {})

    method.__name__ = name
    return method


def _inplace_dunder(cls: type, name: str) -> Callable:
    def method(self, other):
        if not isinstance(other, (cls, torch.Tensor, numbers.Number)):
            return NotImplemented
        fn = getattr(torch.Tensor, name)
        return FUNCTIONS[fn].handler(fn, (self, other), {})

    return method


def _unary_dunder(name: str) -> Callable:
    def method(self):
        fn = getattr(torch, name)
        return FUNCTIONS[fn].handler(fn, (self,), {})

    return method


_BINARY = (
    ("add", "add"),
    ("sub", "sub"),
    ("mul", "mul"),
    ("truediv", "true_divide"),
    ("floordiv", "floor_divide"),
    ("mod", "remainder"),
    ("pow", "pow"),
    ("and", "bitwise_and"),
    ("or", "bitwise_or"),
    ("xor", "bitwise_xor"),
    ("lshift", "bitwise_left_shift"),
    ("rshift", "bitwise_right_shift"),
    ("matmul", "matmul"),
)
_INPLACE = (
    ("add", "add_"),
    ("sub", "sub_"),
    ("mul", "mul_"),
    ("truediv", "div_"),
    ("floordiv", "floor_divide_"),
    ("mod", "remainder_"),
    ("pow", "pow_"),
    ("and", "bitwise_and_"),
    ("or", "bitwise_or_"),
    ("xor", "bitwise_xor_"),
    ("lshift", "bitwise_left_shift_"),
    ("rshift", "bitwise_right_shift_"),
)
_COMPARISONS = (("eq", "eq"), ("ne", "ne"), ("lt", "lt"), ("le", "le"), ("gt", "gt"), ("ge", "ge"))
_UNARY = (("neg", "neg"), ("pos", "positive"), ("abs", "abs"), ("invert", "bitwise_not"))


def attach_operators(cls: type) -> None:
    """Gives ``cls`` the dunder methods of :data:`_BINARY` (and reflected),
    :data:`_INPLACE`, :data:`_COMPARISONS` and :data:`_UNARY`."""
    for dunder, fn in _BINARY:
        setattr(cls, f"__{dunder}__", _binary_dunder(cls, fn))
        setattr(cls, f"__r{dunder}__", _binary_dunder(cls, fn, reflected=True))
    for dunder, fn in _INPLACE:
        setattr(cls, f"__i{dunder}__", _inplace_dunder(cls, fn))
    for dunder, fn in _COMPARISONS:
        setattr(cls, f"__{dunder}__", _binary_dunder(cls, fn))
    for dunder, fn in _UNARY:
        setattr(cls, f"__{dunder}__", _unary_dunder(fn))
