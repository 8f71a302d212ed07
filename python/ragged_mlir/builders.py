"""Builders: write ragged programs in Python with typed inputs.

>>> from ragged_mlir.builders import Program, ragged, tensor
>>> prog = Program()
>>> @prog.func(x=ragged(None, "L", 384), w=tensor(384, 128))
... def encode(x, w):
...     return (x @ w).gelu().reduce("mean")
>>> "ragged.matmul" in prog.module_text()
True

Inputs are described with :func:`ragged` (``None`` for a dynamic batch or
dense dim, a string for a ragged dim, ``"T(S)"`` for a nested one) and
:func:`tensor`. Every method emits one ragged op and infers its result type,
so the module verifies by construction; :meth:`Program.module_text` returns
the MLIR text that :func:`ragged_mlir.compile` takes.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import ir
from .dialects import func as func_d
from .dialects import ragged as ragged_d

__all__ = [
    "Program",
    "RaggedValue",
    "TensorValue",
    "ragged",
    "tensor",
    "attention",
    "gather",
    "concat",
    "split",
]

_ELEMENT_TYPES = {
    "f16": lambda: ir.F16Type.get(),
    "f32": lambda: ir.F32Type.get(),
    "f64": lambda: ir.F64Type.get(),
    "i1": lambda: ir.IntegerType.get_signless(1),
    "i32": lambda: ir.IntegerType.get_signless(32),
    "i64": lambda: ir.IntegerType.get_signless(64),
}


@dataclass(frozen=True)
class _Spec:
    kind: str
    batch: int | None
    dims: tuple
    dtype: str

    def mlir_type(self) -> ir.Type:
        if self.dtype not in _ELEMENT_TYPES:
            raise ValueError(f"dtype: expected one of {sorted(_ELEMENT_TYPES)}, got {self.dtype!r}")
        elem = _ELEMENT_TYPES[self.dtype]()
        if self.kind == "tensor":
            shape = [ir.ShapedType.get_dynamic_size() if d is None else d for d in self.dims]
            return ir.RankedTensorType.get(shape, elem)
        dims = []
        for d in self.dims:
            if isinstance(d, str):
                sym, _, parent = d.partition("(")
                dims.append(ragged_d.Ragged(sym.strip(), parent.rstrip(")").strip() or None))
            else:
                dims.append(d)
        return ragged_d.RaggedTensorType.get(self.batch, dims, elem)


def ragged(batch: int | None, *dims: int | str | None, dtype: str = "f32") -> _Spec:
    """A ragged input: ``ragged(None, "L", 384)`` is ``!ragged.tensor<?, [L], 384, f32>``."""
    return _Spec("ragged", batch, tuple(dims), dtype)


def tensor(*dims: int | None, dtype: str = "f32") -> _Spec:
    """A dense input: ``tensor(384, None)`` is ``tensor<384x?xf32>``."""
    return _Spec("tensor", None, tuple(dims), dtype)


def _create(name: str, results: Sequence[ir.Type], operands: Sequence, attributes: dict | None = None):
    op = ir.Operation.create(
        name,
        results=list(results),
        operands=[o.value if isinstance(o, _Value) else o for o in operands],
        attributes=attributes or {},
    )
    return op


def _wrap(value: ir.Value) -> _Value:
    if isinstance(value.type, ragged_d.RaggedTensorType):
        return RaggedValue(value)
    return TensorValue(value)


class _Value:
    def __init__(self, value: ir.Value):
        self.value = value

    @property
    def type(self) -> ir.Type:
        return self.value.type


class TensorValue(_Value):
    """A dense tensor in a program being built."""


def _index_constant(value: int) -> ir.Value:
    from .dialects import arith

    return arith.constant(ir.IndexType.get(), value)


def _enum(kind: str, value: str) -> ir.Attribute:
    return ir.Attribute.parse(f"#ragged.{kind}<{value}>")


def _float_attr(ty: ir.Type, v: float) -> ir.Attribute:
    return ir.FloatAttr.get(ty, float(v))


def _ragged_type(base: ragged_d.RaggedTensorType, dims, element_type=None) -> ir.Type:
    return ragged_d.RaggedTensorType.get(
        base.batch_size, dims, element_type or base.element_type, base.encoding
    )


class RaggedValue(_Value):
    """A ragged tensor in a program being built; methods emit ragged ops."""

    @property
    def rtype(self) -> ragged_d.RaggedTensorType:
        return self.value.type

    # elementwise ---------------------------------------------------------
    def _unary(self, fn: str) -> RaggedValue:
        return _wrap(_create("ragged.unary", [self.type], [self], {"fn": _enum("unary_fn", fn)}).result)

    def neg(self):
        return self._unary("neg")

    def exp(self):
        return self._unary("exp")

    def log(self):
        return self._unary("log")

    def tanh(self):
        return self._unary("tanh")

    def relu(self):
        return self._unary("relu")

    def gelu(self):
        return self._unary("gelu")

    def sqrt(self):
        return self._unary("sqrt")

    def rsqrt(self):
        return self._unary("rsqrt")

    def abs(self):
        return self._unary("abs")

    def sigmoid(self):
        return self._unary("sigmoid")

    def _binary(self, fn: str, other: _Value) -> RaggedValue:
        if not isinstance(other, _Value):
            raise TypeError(f"other: expected a RaggedValue or TensorValue, got {type(other).__name__}")
        return _wrap(
            _create("ragged.binary", [self.type], [self, other], {"fn": _enum("binary_fn", fn)}).result
        )

    def __add__(self, o):
        return self._binary("add", o)

    def __sub__(self, o):
        return self._binary("sub", o)

    def __mul__(self, o):
        return self._binary("mul", o)

    def __truediv__(self, o):
        return self._binary("div", o)

    def maximum(self, o):
        return self._binary("max", o)

    def minimum(self, o):
        return self._binary("min", o)

    # per token -----------------------------------------------------------
    def matmul(self, weight: TensorValue) -> RaggedValue:
        wt = weight.type
        dims = list(self.rtype.dims)
        dims[-1] = None if wt.is_dynamic_dim(1) else wt.shape[1]
        return _wrap(_create("ragged.matmul", [_ragged_type(self.rtype, dims)], [self, weight]).result)

    __matmul__ = matmul

    def layer_norm(self, gamma: TensorValue, beta: TensorValue, epsilon: float = 1e-5) -> RaggedValue:
        attrs = {"epsilon": _float_attr(ir.F64Type.get(), epsilon)}
        return _wrap(_create("ragged.layer_norm", [self.type], [self, gamma, beta], attrs).result)

    # per segment ---------------------------------------------------------
    def reduce(self, kind: str, empty: float | None = None) -> _Value:
        """sum | mean | max | min over the innermost ragged dim."""
        t = self.rtype
        dims = list(t.dims)
        last = max(i for i, d in enumerate(dims) if isinstance(d, ragged_d.Ragged))
        del dims[last]
        if any(isinstance(d, ragged_d.Ragged) for d in dims):
            result = _ragged_type(t, dims)
        else:
            dyn = ir.ShapedType.get_dynamic_size()
            shape = [dyn if t.batch_size is None else t.batch_size] + [dyn if d is None else d for d in dims]
            result = ir.RankedTensorType.get(shape, t.element_type)
        attrs = {"kind": _enum("reduce_kind", kind)}
        if empty is not None:
            attrs["empty"] = _float_attr(t.element_type, empty)
        return _wrap(_create("ragged.reduce", [result], [self], attrs).result)

    def softmax(self) -> RaggedValue:
        return _wrap(_create("ragged.softmax", [self.type], [self]).result)

    # structure -----------------------------------------------------------
    def reshape(self, *dims: int) -> RaggedValue:
        """New trailing dims for every row, e.g. ``[B, L(b), 384]`` ->
        ``reshape(12, 32)`` -> ``[B, L(b), 12, 32]`` (multi-head split) and
        back: ``ragged.values``, a collapse and/or expand of the packed
        values, and ``ragged.pack`` with the same offsets (no data moves)."""
        from .dialects import ragged as rd
        from .dialects import tensor as td

        t = self.rtype
        item = t.dims
        if not (isinstance(item[0], ragged_d.Ragged) and all(isinstance(d, int) for d in item[1:])):
            raise ValueError(f"reshape: needs [B, L(b), static dims...], got {self.type}")
        trailing = list(item[1:])
        if not dims or any(not isinstance(d, int) or d <= 0 for d in dims):
            raise ValueError(f"dims: expected positive ints, got {dims}")
        if math.prod(dims) != math.prod(trailing):
            raise ValueError(f"dims: {dims} do not hold the {math.prod(trailing)} elements of {trailing}")
        dyn = ir.ShapedType.get_dynamic_size()
        elem = t.element_type
        i64 = ir.IntegerType.get_signless(64)
        values = rd.values(ir.RankedTensorType.get([dyn, *trailing], elem), self.value)
        offsets = rd.offsets(ir.RankedTensorType.get([dyn], i64), self.value, item[0].symbol)

        def groups(n: int) -> ir.ArrayAttr:  # [[0], [1, ..., n]]
            return ir.ArrayAttr.get(
                [
                    ir.ArrayAttr.get([ir.IntegerAttr.get(i64, i) for i in g])
                    for g in ([0], list(range(1, n + 1)))
                ]
            )

        flat = math.prod(trailing)
        if len(trailing) > 1:
            values = td.CollapseShapeOp(
                ir.RankedTensorType.get([dyn, flat], elem), values, groups(len(trailing))
            ).result
        if len(dims) > 1:
            rows = td.dim(values, _index_constant(0))
            out = ir.RankedTensorType.get([dyn, *dims], elem)
            values = td.ExpandShapeOp(out, values, groups(len(dims)), [rows], [dyn, *dims]).result
        result = ragged_d.RaggedTensorType.get(t.batch_size, [item[0], *dims], elem, t.encoding)
        return _wrap(rd.pack(result, values, [offsets]))

    def to_padded(self, padding: float = 0.0) -> TensorValue:
        t = self.rtype
        dyn = ir.ShapedType.get_dynamic_size()
        shape = [dyn if t.batch_size is None else t.batch_size]
        shape += [dyn if d is None or isinstance(d, ragged_d.Ragged) else d for d in t.dims]
        result = ir.RankedTensorType.get(shape, t.element_type)
        attrs = {"padding": _float_attr(t.element_type, padding)}
        return _wrap(_create("ragged.to_padded", [result], [self], attrs).result)

    def mask(self) -> TensorValue:
        t = self.rtype
        dyn = ir.ShapedType.get_dynamic_size()
        shape = [dyn if t.batch_size is None else t.batch_size] + [dyn] * len(t.symbols)
        result = ir.RankedTensorType.get(shape, ir.IntegerType.get_signless(1))
        return _wrap(_create("ragged.mask", [result], [self]).result)


def attention(
    q: RaggedValue, k: RaggedValue, v: RaggedValue, scale: float = 1.0, causal: bool = False
) -> RaggedValue:
    """softmax(scale * q kᵀ [+ causal mask]) v on [B, L(b), heads, head_dim]."""
    attrs = {"scale": _float_attr(ir.F64Type.get(), scale)}
    if causal:
        attrs["causal"] = ir.UnitAttr.get()
    return _wrap(_create("ragged.attention", [q.type], [q, k, v], attrs).result)


def gather(table: TensorValue, ids: RaggedValue) -> RaggedValue:
    """Embedding lookup of ragged int64 ids."""
    t = ids.rtype
    width = table.type.shape[1] if not table.type.is_dynamic_dim(1) else None
    result = _ragged_type(t, list(t.dims) + [width], table.type.element_type)
    return _wrap(_create("ragged.gather", [result], [table, ids]).result)


def concat(a: RaggedValue, b: RaggedValue, symbol: str) -> RaggedValue:
    """Per-item concatenation; the result's ragged dim gets the fresh ``symbol``."""
    dims = [ragged_d.Ragged(symbol)] + list(a.rtype.dims[1:])
    return _wrap(_create("ragged.concat", [_ragged_type(a.rtype, dims)], [a, b]).result)


def split(x: RaggedValue, lengths: TensorValue, symbols: tuple[str, str]) -> tuple[RaggedValue, RaggedValue]:
    """Per-item split at ``lengths``; the two parts get the fresh ``symbols``."""
    types = [_ragged_type(x.rtype, [ragged_d.Ragged(s)] + list(x.rtype.dims[1:])) for s in symbols]
    op = _create("ragged.split", types, [x, lengths])
    return _wrap(op.results[0]), _wrap(op.results[1])


class Program:
    """A module being built: add functions with :meth:`func`."""

    def __init__(self):
        self.context = ir.Context()
        with self.context, ir.Location.unknown():
            self.module = ir.Module.create()

    def func(self, **inputs: _Spec) -> Callable:
        """Decorator: the function's parameters are typed by ``inputs``; it
        returns one value or a tuple of values."""

        def decorate(fn: Callable) -> Callable:
            names = list(inspect.signature(fn).parameters)
            if sorted(names) != sorted(inputs):
                raise ValueError(
                    f"inputs: {fn.__name__}'s parameters {names} must each have a spec, got {sorted(inputs)}"
                )
            with self.context, ir.Location.unknown():
                arg_types = [inputs[n].mlir_type() for n in names]
                with ir.InsertionPoint(self.module.body):
                    f = func_d.FuncOp(fn.__name__, (arg_types, []))
                    block = f.add_entry_block()
                with ir.InsertionPoint(block):
                    out = fn(*[_wrap(a) for a in block.arguments])
                    outs = list(out) if isinstance(out, (tuple, list)) else [out]
                    func_d.ReturnOp([o.value for o in outs])
                f.attributes["function_type"] = ir.TypeAttr.get(
                    ir.FunctionType.get(arg_types, [o.type for o in outs])
                )
            return fn

        return decorate

    def module_text(self) -> str:
        with self.context:
            self.module.operation.verify()
            return str(self.module)
