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
from .windows import keeps_extent, window_symbol

__all__ = [
    "Program",
    "RaggedValue",
    "TensorValue",
    "ragged",
    "tensor",
    "apply",
    "attention",
    "concat",
    "from_padded",
    "gather",
    "match",
    "pack",
    "scores",
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
        return ragged_d.RaggedTensorType.get(self.batch, _ragged_dims(self.dims), elem)


def _ragged_dims(dims: Sequence[int | str | None]) -> list:
    """Item dims of :func:`ragged` (``"T(S)"`` for a nested dim) as
    :class:`ragged_mlir.dialects.ragged.Ragged` markers and sizes."""
    out = []
    for d in dims:
        if isinstance(d, str):
            sym, _, parent = d.partition("(")
            out.append(ragged_d.Ragged(sym.strip(), parent.rstrip(")").strip() or None))
        else:
            out.append(d)
    return out


def ragged(batch: int | None, *dims: int | str | None, dtype: str = "f32") -> _Spec:
    """A ragged input: ``ragged(None, "L", 384)`` is ``!ragged.tensor<?, [L], 384, f32>``."""
    return _Spec("ragged", batch, tuple(dims), dtype)


def tensor(*dims: int | None, dtype: str = "f32") -> _Spec:
    """A dense input: ``tensor(384, None)`` is ``tensor<384x?xf32>``."""
    return _Spec("tensor", None, tuple(dims), dtype)


def _diagnostics(e: ir.MLIRError) -> str:
    return "; ".join(str(d.message) for d in e.error_diagnostics) or str(e)


def _build(op_class: type, *args, **kwargs) -> ir.OpView:
    """Creates one op through its generated class (result types inferred by
    the op where it declares them so) and verifies it at once, so that a type
    error is a ValueError at the builder call that made it (not at
    module_text)."""
    args = [a.value if isinstance(a, _Value) else a for a in args]
    kwargs = {k: v.value if isinstance(v, _Value) else v for k, v in kwargs.items()}
    try:
        op = op_class(*args, **kwargs)
    except ir.MLIRError as e:
        raise ValueError(_diagnostics(e)) from None
    try:
        op.verify()
    except ir.MLIRError as e:
        op.operation.erase()
        raise ValueError(_diagnostics(e)) from None
    return op


def _require(value, cls: type, what: str) -> None:
    if not isinstance(value, cls):
        raise TypeError(f"{what}: expected a {cls.__name__}, got {type(value).__name__}")


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


def _scalar_attr(ty: ir.Type, v: float, what: str) -> ir.Attribute:
    """``v`` as an attribute of the element type ``ty`` (float or integer)."""
    if isinstance(ty, ir.IntegerType):
        if isinstance(v, float) and not v.is_integer():
            raise ValueError(f"{what}: expected an integer for element type {ty}, got {v!r}")
        return ir.IntegerAttr.get(ty, int(v))
    return _float_attr(ty, v)


def _ragged_type(base: ragged_d.RaggedTensorType, dims, element_type=None) -> ir.Type:
    return ragged_d.RaggedTensorType.get(
        base.batch_size, dims, element_type or base.element_type, base.encoding
    )


def _pair(v, what: str) -> tuple[int, int]:
    pair = (v, v) if isinstance(v, int) else tuple(v)
    if len(pair) != 2 or not all(isinstance(i, int) and not isinstance(i, bool) for i in pair):
        raise ValueError(f"{what}: expected an int or two ints (H, W), got {v!r}")
    return pair


@dataclass(frozen=True)
class _Window:
    kernel: int
    stride: int
    padding: int
    dilation: int
    ceil: bool

    def keeps(self) -> bool:
        return keeps_extent(self.kernel, self.stride, self.padding, self.dilation)


def windows(kernel, stride, padding, dilation, ceil) -> tuple[_Window, _Window]:
    """The window along H and W (each an int or two ints)."""
    k, s, p, d = (
        _pair(v, n)
        for v, n in ((kernel, "kernel"), (stride, "stride"), (padding, "padding"), (dilation, "dilation"))
    )
    return tuple(_Window(k[i], s[i], p[i], d[i], bool(ceil)) for i in range(2))


def window_dims(h: ragged_d.Ragged, w: ragged_d.Ragged, windows) -> list[ragged_d.Ragged]:
    """The output dims of an image op: a kept extent keeps its symbol, another
    is named by :func:`window_symbol`."""
    return [
        d
        if win.keeps()
        else ragged_d.Ragged(
            window_symbol(d.symbol, win.kernel, win.stride, win.padding, win.dilation, win.ceil)
        )
        for d, win in zip((h, w), windows, strict=True)
    ]


def _window_attrs(windows) -> dict:
    return {
        name: ir.DenseI64ArrayAttr.get([getattr(win, field) for win in windows])
        for name, field in (("strides", "stride"), ("padding", "padding"), ("dilation", "dilation"))
    }


class RaggedValue(_Value):
    """A ragged tensor in a program being built; methods emit ragged ops."""

    @property
    def rtype(self) -> ragged_d.RaggedTensorType:
        return self.value.type

    # elementwise ---------------------------------------------------------
    def _unary(self, fn: str) -> RaggedValue:
        return _wrap(_build(ragged_d.UnaryOp, _enum("unary_fn", fn), self).result)

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
        return _wrap(_build(ragged_d.BinaryOp, _enum("binary_fn", fn), self, other).result)

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
        _require(weight, TensorValue, "weight")
        if weight.type.rank != 2:
            raise ValueError(f"weight: expected a [K, N] tensor, got {weight.type}")
        return _wrap(_build(ragged_d.MatmulOp, self, weight).result)

    __matmul__ = matmul

    def layer_norm(self, gamma: TensorValue, beta: TensorValue, epsilon: float = 1e-5) -> RaggedValue:
        _require(gamma, TensorValue, "gamma")
        _require(beta, TensorValue, "beta")
        epsilon = _float_attr(ir.F64Type.get(), epsilon)
        return _wrap(_build(ragged_d.LayerNormOp, self, gamma, beta, epsilon=epsilon).result)

    # per segment ---------------------------------------------------------
    def reduce(self, kind: str, empty: float | None = None) -> _Value:
        """sum | mean | max | min over the innermost ragged dim; ``empty`` is
        the result of an empty segment (0 by default for sum and mean; max
        and min need it, e.g. ``-math.inf``)."""
        kinds = ("sum", "mean", "max", "min")
        if kind not in kinds:
            raise ValueError(f"kind: expected one of {kinds}, got {kind!r}")
        if empty is None and kind in ("max", "min"):
            raise ValueError(f"empty: reduce {kind!r} needs the value of an empty segment (e.g. -math.inf)")
        if empty is not None:
            empty = _float_attr(self.rtype.element_type, empty)
        return _wrap(_build(ragged_d.ReduceOp, _enum("reduce_kind", kind), self, empty=empty).result)

    def softmax(self) -> RaggedValue:
        return _wrap(_build(ragged_d.SoftmaxOp, self).result)

    # images --------------------------------------------------------------
    def _image(self, what: str) -> tuple[ragged_d.Ragged, ragged_d.Ragged, int]:
        t = self.rtype
        dims = list(t.dims)
        if not (
            len(dims) == 3
            and all(isinstance(d, ragged_d.Ragged) and d.parent is None for d in dims[:2])
            and isinstance(dims[2], int)
        ):
            raise ValueError(f"{what}: needs images [B, H(b), W(b), C], got {self.type}")
        return dims[0], dims[1], dims[2]

    def conv2d(
        self,
        weight: TensorValue,
        bias: TensorValue | None = None,
        stride: int | Sequence[int] = 1,
        padding: int | Sequence[int] = 0,
        dilation: int | Sequence[int] = 1,
        groups: int = 1,
    ) -> RaggedValue:
        """Each image of ``[B, H(b), W(b), Cin]`` convolved with the HWIO
        ``weight [KH, KW, Cin / groups, Cout]`` (+ ``bias [Cout]``), as
        ``torch.nn.functional.conv2d`` does per image. A dim the window keeps
        keeps its symbol; another gets one named after its extent rule (see
        :func:`window_symbol`), so two paths with the same rule (a 3x3
        stride-2 conv and a 1x1 stride-2 downsample) give the same type."""
        h, w, _ = self._image("conv2d")
        _require(weight, TensorValue, "weight")
        wt = weight.type
        if wt.rank != 4 or any(wt.is_dynamic_dim(i) for i in range(4)):
            raise ValueError(f"weight: expected a static [KH, KW, Cin / groups, Cout] tensor, got {wt}")
        if bias is not None:
            _require(bias, TensorValue, "bias")
        wins = windows(wt.shape[:2], stride, padding, dilation, False)
        result = _ragged_type(self.rtype, [*window_dims(h, w, wins), wt.shape[3]])
        groups = ir.IntegerAttr.get(ir.IntegerType.get_signless(64), groups)
        op = _build(ragged_d.Conv2dOp, result, self, weight, bias=bias, groups=groups, **_window_attrs(wins))
        return _wrap(op.result)

    def _pool(self, kind, kernel, stride, padding, dilation, ceil_mode, count_include_pad) -> RaggedValue:
        h, w, c = self._image(f"{kind} pooling")
        kernel = _pair(kernel, "kernel")
        wins = windows(kernel, kernel if stride is None else stride, padding, dilation, ceil_mode)
        result = _ragged_type(self.rtype, [*window_dims(h, w, wins), c])
        op = _build(
            ragged_d.Pool2dOp,
            result,
            _enum("reduce_kind", kind),
            self,
            ir.DenseI64ArrayAttr.get(list(kernel)),
            ceil_mode=ir.UnitAttr.get() if ceil_mode else None,
            count_include_pad=ir.UnitAttr.get() if count_include_pad else None,
            **_window_attrs(wins),
        )
        return _wrap(op.result)

    def max_pool2d(self, kernel, stride=None, padding=0, dilation=1, ceil_mode: bool = False) -> RaggedValue:
        """``torch.nn.functional.max_pool2d`` on each image (stride defaults
        to the kernel)."""
        return self._pool("max", kernel, stride, padding, dilation, ceil_mode, False)

    def avg_pool2d(
        self, kernel, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True
    ) -> RaggedValue:
        """``torch.nn.functional.avg_pool2d`` on each image (stride defaults
        to the kernel)."""
        return self._pool("mean", kernel, stride, padding, 1, ceil_mode, count_include_pad)

    def flatten(self, symbol: str | None = None) -> RaggedValue:
        """``[B, H(b), W(b), dense...] -> [B, P(b), dense...]``, ``P = H W``:
        each item as the sequence of its elements (no data moves). The new
        symbol defaults to the source's joined (``HW``)."""
        t = self.rtype
        dims = list(t.dims)
        lead = 0
        while lead < len(dims) and isinstance(dims[lead], ragged_d.Ragged) and dims[lead].parent is None:
            lead += 1
        if lead < 2 or any(isinstance(d, ragged_d.Ragged) for d in dims[lead:]):
            raise ValueError(
                f"flatten: needs two or more leading ragged dims, then dense dims, got {self.type}"
            )
        symbol = symbol or "".join(d.symbol for d in dims[:lead])
        result = _ragged_type(t, [ragged_d.Ragged(symbol), *dims[lead:]])
        return _wrap(_build(ragged_d.FlattenOp, result, self).result)

    # structure -----------------------------------------------------------
    def reshape(self, *dims: int) -> RaggedValue:
        """New trailing dims for every row, e.g. ``[B, L(b), 384]`` ->
        ``reshape(12, 32)`` -> ``[B, L(b), 12, 32]`` (multi-head split) and
        back; ``reshape()`` of one element per row gives ``[B, L(b)]``:
        ``ragged.values``, a collapse and/or expand of the packed values,
        and ``ragged.pack`` with the same offsets (no data moves)."""
        from .dialects import tensor as td

        t = self.rtype
        item = t.dims
        if not (isinstance(item[0], ragged_d.Ragged) and all(isinstance(d, int) for d in item[1:])):
            raise ValueError(f"reshape: needs [B, L(b), static dims...], got {self.type}")
        trailing = list(item[1:])
        if any(not isinstance(d, int) or isinstance(d, bool) or d <= 0 for d in dims):
            raise ValueError(f"dims: expected positive ints, got {dims}")
        if math.prod(dims) != math.prod(trailing):
            raise ValueError(f"dims: {dims} do not hold the {math.prod(trailing)} elements of {trailing}")
        dyn = ir.ShapedType.get_dynamic_size()
        elem = t.element_type
        i64 = ir.IntegerType.get_signless(64)
        values = ragged_d.values(self.value)
        offsets = ragged_d.offsets(self.value, item[0].symbol)

        def groups(*gs: list[int]) -> ir.ArrayAttr:
            return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, i) for i in g]) for g in gs])

        def rows() -> ir.Value:
            return td.dim(values, _index_constant(0))

        # [rows, trailing...] -> [rows, flat] -> [rows, dims...]
        flat = math.prod(trailing)
        flat_type = ir.RankedTensorType.get([dyn, flat], elem)
        if len(trailing) > 1:
            values = td.CollapseShapeOp(
                flat_type, values, groups([0], list(range(1, len(trailing) + 1)))
            ).result
        elif not trailing:
            values = td.ExpandShapeOp(flat_type, values, groups([0, 1]), [rows()], [dyn, 1]).result
        out = ir.RankedTensorType.get([dyn, *dims], elem)
        if len(dims) > 1:
            values = td.ExpandShapeOp(
                out, values, groups([0], list(range(1, len(dims) + 1))), [rows()], [dyn, *dims]
            ).result
        elif not dims:
            values = td.CollapseShapeOp(out, values, groups([0, 1])).result
        result = ragged_d.RaggedTensorType.get(t.batch_size, [item[0], *dims], elem, t.encoding)
        return _wrap(ragged_d.pack(result, values, [offsets]))

    def to_padded(self, padding: float = 0.0) -> TensorValue:
        """``[batch, item dims...]``, every ragged dim padded with ``padding``
        to its largest extent."""
        padding = _scalar_attr(self.rtype.element_type, padding, "padding")
        return _wrap(_build(ragged_d.ToPaddedOp, self, padding).result)

    def values(self) -> TensorValue:
        """The packed values buffer ``[rows, trailing dense dims...]``."""
        return _wrap(_build(ragged_d.ValuesOp, self).result)

    def offsets(self, symbol: str) -> TensorValue:
        """The int64 offsets of ``symbol`` (``n + 1`` for ``n`` outer items)."""
        t = self.rtype
        if symbol not in t.symbols:
            raise ValueError(
                f"symbol: expected one of {t.distinct_symbols} (the ragged dims of {t}), got {symbol!r}"
            )
        return _wrap(_build(ragged_d.OffsetsOp, self, ir.StringAttr.get(symbol)).result)

    def mask(self) -> TensorValue:
        """``i1 [batch, ragged dims...]``: true where the padded form holds
        a real element."""
        return _wrap(_build(ragged_d.MaskOp, self).result)


def _attention_attrs(scale: float, causal: bool) -> dict:
    return {"scale": _float_attr(ir.F64Type.get(), scale), "causal": ir.UnitAttr.get() if causal else None}


def attention(
    q: RaggedValue, k: RaggedValue, v: RaggedValue, scale: float = 1.0, causal: bool = False
) -> RaggedValue:
    """softmax(scale * q kᵀ [+ causal mask]) v on [B, L(b), heads, head_dim]."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        _require(x, RaggedValue, name)
    op = _build(ragged_d.AttentionOp, q.type, None, q, k, v, **_attention_attrs(scale, causal))
    return _wrap(op.result)


def scores(q: RaggedValue, k: RaggedValue, scale: float = 1.0, causal: bool = False) -> RaggedValue:
    """``scale * q . k`` per item and head: ``[B, L(b), H, d]`` twice ->
    ``[B, L(b), L(b), H]`` (``-inf`` above the diagonal when ``causal``)."""
    _require(q, RaggedValue, "q")
    _require(k, RaggedValue, "k")
    dims = q.rtype.dims
    if len(dims) != 3 or not isinstance(dims[0], ragged_d.Ragged):
        raise ValueError(f"q: expected [B, L(b), heads, head_dim], got {q.type}")
    return _wrap(_build(ragged_d.ScoresOp, q, k, **_attention_attrs(scale, causal)).result)


def apply(weights: RaggedValue, values: RaggedValue) -> RaggedValue:
    """Per item and head, ``weights [B, L(b), L(b), H]`` times
    ``values [B, L(b), H, d]`` -> ``[B, L(b), H, d]``."""
    _require(weights, RaggedValue, "weights")
    _require(values, RaggedValue, "values")
    return _wrap(_build(ragged_d.ApplyOp, weights, values).result)


def gather(table: TensorValue, ids: RaggedValue) -> RaggedValue:
    """Embedding lookup of ragged int64 ids."""
    _require(table, TensorValue, "table")
    _require(ids, RaggedValue, "ids")
    if table.type.rank != 2:
        raise ValueError(f"table: expected a [V, D] tensor, got {table.type}")
    return _wrap(_build(ragged_d.GatherOp, table, ids).result)


def concat(a: RaggedValue, b: RaggedValue, symbol: str) -> RaggedValue:
    """Per-item concatenation; the result's ragged dim gets the fresh ``symbol``."""
    _require(a, RaggedValue, "a")
    _require(b, RaggedValue, "b")
    dims = [ragged_d.Ragged(symbol)] + list(a.rtype.dims[1:])
    return _wrap(_build(ragged_d.ConcatOp, _ragged_type(a.rtype, dims), a, b).result)


def split(x: RaggedValue, lengths: TensorValue, symbols: tuple[str, str]) -> tuple[RaggedValue, RaggedValue]:
    """Per-item split at ``lengths``; the two parts get the fresh ``symbols``."""
    _require(x, RaggedValue, "x")
    _require(lengths, TensorValue, "lengths")
    if len(symbols) != 2:
        raise ValueError(f"symbols: expected two fresh symbols (head, tail), got {symbols!r}")
    types = [_ragged_type(x.rtype, [ragged_d.Ragged(s)] + list(x.rtype.dims[1:])) for s in symbols]
    op = _build(ragged_d.SplitOp, *types, x, lengths)
    return _wrap(op.results[0]), _wrap(op.results[1])


def pack(values: TensorValue, partitions: Sequence[TensorValue], spec: _Spec) -> RaggedValue:
    """Wraps a packed ``values`` buffer and one int64 offsets tensor per
    distinct symbol of ``spec`` (a :func:`ragged` spec; its dtype must be
    that of ``values``) into a ragged tensor. No data moves; the offsets
    must describe ``values`` (the op cannot check them)."""
    _require(values, TensorValue, "values")
    if not isinstance(spec, _Spec) or spec.kind != "ragged":
        raise TypeError(f"spec: expected a ragged(...) spec, got {spec!r}")
    for i, p in enumerate(partitions):
        _require(p, TensorValue, f"partitions[{i}]")
    result = spec.mlir_type()
    if result.element_type != values.type.element_type:
        raise ValueError(
            f"spec: dtype {spec.dtype} does not match the values' element type {values.type.element_type}"
        )
    return _wrap(_build(ragged_d.PackOp, result, values, [p.value for p in partitions]).result)


def from_padded(padded: TensorValue, lengths: Sequence[TensorValue], *dims: int | str | None) -> RaggedValue:
    """The first ``lengths[b]`` slots of each item of ``padded``
    ``[batch, dims...]``: ``dims`` are the item dims as in :func:`ragged`
    (a string for each ragged dim), one ``lengths`` tensor per distinct
    symbol, in order of first appearance."""
    _require(padded, TensorValue, "padded")
    for i, n in enumerate(lengths):
        _require(n, TensorValue, f"lengths[{i}]")
    pt = padded.type
    if pt.rank != len(dims) + 1:
        raise ValueError(f"dims: expected {pt.rank - 1} item dims for padded {pt}, got {len(dims)}")
    batch = None if pt.is_dynamic_dim(0) else pt.shape[0]
    result = ragged_d.RaggedTensorType.get(batch, _ragged_dims(dims), pt.element_type)
    return _wrap(_build(ragged_d.FromPaddedOp, result, padded, [n.value for n in lengths]).result)


def match(source: RaggedValue, reference: RaggedValue) -> RaggedValue:
    """``source`` retyped with the symbols of ``reference`` after a run-time
    check that their partitions are equal (a mismatch fails the call)."""
    _require(source, RaggedValue, "source")
    _require(reference, RaggedValue, "reference")
    return _wrap(_build(ragged_d.MatchOp, source, reference).result)


class Program:
    """A module being built: add functions with :meth:`func` (or
    :meth:`define`, which takes the name and the inputs as arguments)."""

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
            self.define(fn.__name__, [(n, inputs[n]) for n in names], fn)
            return fn

        return decorate

    def define(
        self, name: str, inputs: Sequence[tuple[str, _Spec]] | dict[str, _Spec], body: Callable
    ) -> None:
        """Adds the function ``name`` whose arguments are ``inputs`` (names
        and specs, in order); ``body`` is called with one value per input,
        positionally, and returns one value or a tuple of values."""
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"name: expected an identifier, got {name!r}")
        with self.context:
            taken = [str(op.attributes["sym_name"]).strip('"') for op in self.module.body.operations]
        if name in taken:
            raise ValueError(f"name: the module already has a function {name!r}")
        pairs = list(inputs.items()) if isinstance(inputs, dict) else list(inputs)
        for n, spec in pairs:
            if not isinstance(spec, _Spec):
                raise TypeError(f"inputs[{n!r}]: expected a ragged(...) or tensor(...) spec, got {spec!r}")
        with self.context, ir.Location.unknown():
            arg_types = [spec.mlir_type() for _, spec in pairs]
            with ir.InsertionPoint(self.module.body):
                f = func_d.FuncOp(name, (arg_types, []))
                block = f.add_entry_block()
            try:
                with ir.InsertionPoint(block):
                    out = body(*[_wrap(a) for a in block.arguments])
                    outs = list(out) if isinstance(out, (tuple, list)) else [out]
                    for i, o in enumerate(outs):
                        _require(o, _Value, f"{name}: result {i}")
                    func_d.ReturnOp([o.value for o in outs])
            except BaseException:
                f.operation.erase()
                raise
            f.attributes["function_type"] = ir.TypeAttr.get(
                ir.FunctionType.get(arg_types, [o.type for o in outs])
            )

    def module_text(self) -> str:
        with self.context:
            self.module.operation.verify()
            return str(self.module)
