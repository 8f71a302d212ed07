"""How each op of :data:`.registry.LOWERINGS` becomes MLIR: segment
reductions, scans, attention, padding, images, and the ATen calls torch-mlir
gets wrong (``index_put`` of whole rows, ``index_add``, ``logcumsumexp``,
``cummax``/``cummin``, ``signbit``). Importing this module fills the table."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from ... import ir
from ...builders import window_dims, windows
from ...dialects import arith, tensor
from ...dialects import math as mmath
from ...dialects import ragged as rd
from ..graphs import Unsupported, value_of
from .emit import (
    Emitter,
    _broadcast_to,
    _check_rows,
    _fail_unless,
    _float,
    _generic,
    _index,
    _loop_index,
    _map_elements,
    _product,
    _reassociation,
    _rows_type,
    _sizes,
    element_type,
    tensor_type,
    value_type,
)
from .registry import lowering


def _has_empty_index(node: fx.Node) -> bool:
    return any(
        isinstance(i, fx.Node) and 0 in [d for d in value_of(i).shape if isinstance(d, int)]
        for i in node.args[1]
    )


def _unchanged_input(em: Emitter, node: fx.Node) -> ir.Value:
    """An update through an index without elements: nothing is written."""
    return em.cast(em[node.args[0]], value_type(node))


def _puts_rows(node: fx.Node) -> bool:
    """``x.index_put_([idx], values, accumulate)`` with one int64 index on
    dim 0 and ``values`` broadcastable to ``idx.shape + x.shape[1:]``
    (``x[idx] = values``; with accumulate, an embedding's gradient over a
    batch of sequences). torch-mlir's lowering scatters only the first
    ``idx.shape[0]`` of its entries and writes out of bounds at a negative
    index."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    x, indices, values = node.args[:3]
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    if len(indices) != 1 or not isinstance(indices[0], fx.Node):
        return False
    xv, iv, vv = value_of(x), value_of(indices[0]), value_of(values)
    want = (*iv.shape, *xv.shape[1:])
    # A size Dynamo left symbolic is never 1, so a values dim that is not
    # a static 1 either equals its indexed dim or the call is an error.
    return (
        iv.dtype == torch.int64
        and iv.dim() >= 1
        and xv.dim() >= 1
        and (xv.dtype != torch.bool or not accumulate)
        and vv.dim() <= len(want)
        and all(
            (isinstance(a, int) and a == 1) or not statically_known_true(a != b)
            for a, b in zip(vv.shape, want[len(want) - vv.dim() :], strict=True)
        )
    )


def _index_put(em: Emitter, node: fx.Node) -> ir.Value:
    if _has_empty_index(node):
        return _unchanged_input(em, node)
    # Rows put or added: the index and the values flattened to [N] and
    # [N, rest...] (the values broadcast first), indices checked against
    # x's rows and negative ones wrapped, then a scatter.
    x, (index,), values = node.args[:3]
    accumulate = node.args[3] if len(node.args) > 3 else node.kwargs.get("accumulate", False)
    it = ir.RankedTensorType(em[index].type)
    dyn = ir.ShapedType.get_dynamic_size()
    want = [*_sizes(em[index]), *_sizes(em[x])[1:]]
    vals = _broadcast_to(
        _updates(em, values),
        want,
        value_type(x).element_type,
        "index_put: the values do not match the indexed shape",
    )
    vt = ir.RankedTensorType(vals.type)

    def flat(value: ir.Value, t: ir.RankedTensorType, lead: int) -> ir.Value:
        n = dyn if any(t.is_dynamic_dim(k) for k in range(lead)) else _product(t.shape[:lead])
        out = ir.RankedTensorType.get([n, *t.shape[lead:]], t.element_type)
        groups = [list(range(lead)), *[[k] for k in range(lead, t.rank)]]
        return tensor.CollapseShapeOp(out, value, _reassociation(groups)).result

    idx = flat(em[index], it, it.rank)
    rows = _check_rows(idx, em[x], negative=True, op="index_put")
    zero = arith.constant(rows.type, 0)
    idx = _map_elements(
        idx,
        rows.type,
        lambda v: arith.select(arith.cmpi(arith.CmpIPredicate.slt, v, zero), arith.addi(v, rows), v),
    )
    return _scatter_rows(em, node, em[x], flat(vals, vt, it.rank), idx, accumulate)


_FILLS = {
    torch.ops.aten.zeros.default: lambda n: 0,
    torch.ops.aten.ones.default: lambda n: 1,
    torch.ops.aten.full.default: lambda n: n.args[1],
    torch.ops.aten.zeros_like.default: lambda n: 0,
    torch.ops.aten.ones_like.default: lambda n: 1,
    torch.ops.aten.full_like.default: lambda n: n.args[1],
    torch.ops.aten.new_zeros.default: lambda n: 0,
    torch.ops.aten.new_ones.default: lambda n: 1,
    torch.ops.aten.new_full.default: lambda n: n.args[2],
}


def _updates(em: Emitter, node: fx.Node) -> ir.Value:
    """The values a scatter writes: ``node``'s tensor, or where ``node``
    fills a tensor with a constant (``torch.ones(n, d)``) that constant as
    a rank-0 tensor, for the caller to broadcast. IREE's CPU backend
    clones a fill into the scatter's dispatch and cannot allocate it there
    (an unbounded stack allocation)."""
    fill = _FILLS.get(node.target)
    value = fill(node) if fill is not None else None
    if not isinstance(value, (bool, int, float)):
        return em[node]
    element = element_type(value_of(node).dtype)
    if isinstance(element, ir.IntegerType):
        scalar = arith.constant(element, int(value))
    else:
        scalar = arith.constant(element, float(value))
    return tensor.from_elements(ir.RankedTensorType.get([], element), [scalar])


for _op in (torch.ops.aten.index_put.default, torch.ops.aten._unsafe_index_put.default):
    lowering(
        _op,
        "with a statically empty index: its input, unchanged (torch-mlir divides by the empty size); "
        "whole rows put or accumulated through one index: a scatter of the flattened rows, indices checked "
        "and negative ones wrapped (torch-mlir's lowering scatters only the index's first dim and writes "
        "out of bounds at a negative index)",
        claims=lambda node: _has_empty_index(node) or _puts_rows(node),
    )(_index_put)


@lowering(torch.ops.ragged.segment_reduce.default, "sum / mean / max / min over each item's rows")
def _segment_reduce(em: Emitter, node: fx.Node) -> ir.Value:
    values, offsets, kind, empty = node.args
    packed = em.pack(values, offsets)
    rt = rd.RaggedTensorType(packed.type)
    kind_attr = ir.Attribute.parse(f"#ragged.reduce_kind<{kind}>")
    out = rd.reduce(kind_attr, packed, empty=_float(empty, rt.element_type))
    return em.cast(out, value_type(node))


@lowering(
    torch.ops.ragged.segment_broadcast.default, "each item's row repeated over its rows (a sum's adjoint)"
)
def _segment_broadcast(em: Emitter, node: fx.Node) -> ir.Value:
    source, like, offsets = node.args
    packed = em.pack(like, offsets)
    want = _rows_type(rd.RaggedTensorType(packed.type))
    return em.unpack(rd.broadcast(em.cast(em[source], want), packed), node)


@lowering(torch.ops.ragged.row_range.default, "0 .. offsets[-1] - 1, sized on the device (a linalg.index)")
def _row_range(em: Emitter, node: fx.Node) -> ir.Value:
    (offsets,) = node.args
    off = em[offsets]
    index = ir.IndexType.get()
    i64 = ir.IntegerType.get_signless(64)
    last = arith.subi(tensor.dim(off, arith.constant(index, 0)), arith.constant(index, 1))
    rows = _index(tensor.extract(off, [last]))

    def at(_):
        return arith.index_cast(i64, _loop_index(0))

    iota = _generic([], tensor.empty([rows], i64), ["(d0)"], ["parallel"], at)
    return em.cast(iota, value_type(node))


@lowering(
    torch.ops.aten._assert_async.msg, "a check on device values: the call fails with its message (cf.assert)"
)
def _assert_async(em: Emitter, node: fx.Node) -> None:
    # torch-mlir drops this op; a failed check (an index out of range, an
    # empty item where a row is read) must fail the call, not read elsewhere.
    cond, msg = node.args
    value = em[cond]
    i1 = ir.IntegerType.get_signless(1)
    vt = ir.RankedTensorType(value.type)
    if vt.rank != 0:
        raise Unsupported(f"a check on a tensor of shape {list(vt.shape)}", node)
    flag = tensor.extract(value, [])
    if flag.type != i1:
        flag = arith.cmpi(arith.CmpIPredicate.ne, flag, arith.constant(flag.type, 0))
    _fail_unless(flag, str(msg))


def _index_add_claims(node: fx.Node) -> bool:
    x, dim, index = node.args[:3]
    alpha = node.args[4] if len(node.args) > 4 else node.kwargs.get("alpha", 1)
    val = value_of(x)
    rank = val.dim()
    # A bool sum is an or, which addi on i1 is not.
    return (
        rank > 0 and dim % rank == 0 and alpha == 1 and value_of(index).dim() == 1 and val.dtype != torch.bool
    )


@lowering(
    torch.ops.aten.index_add.default,
    "rows of a source added at row indices (tm_tensor.scatter), the indices checked; torch-mlir's own "
    "lowering reads past an empty index and writes out of bounds at a negative one",
    claims=_index_add_claims,
)
def _index_add(em: Emitter, node: fx.Node) -> ir.Value:
    # The rows of an index_select's gradient, among others. torch-mlir
    # broadcasts the index and the source to at least one row, so an empty
    # index scatters a row read from past the end of both. Unlike
    # index_put, index_add takes no negative index.
    x, _, index, source = node.args[:4]
    _check_rows(em[index], em[x], negative=False, op="index_add")
    src = _updates(em, source)
    if src is not em[source]:
        src = _broadcast_to(src, _sizes(em[source]), value_type(source).element_type, "index_add: the source")
    return _scatter_rows(em, node, em[x], src, em[index], accumulate=True)


def _with_rows(value: ir.Value, rows: int) -> ir.Value:
    """``value`` typed with ``rows`` as its first dim (a ``tensor.cast``)."""
    vt = ir.RankedTensorType(value.type)
    if not vt.is_dynamic_dim(0):
        return value
    return tensor.CastOp(ir.RankedTensorType.get([rows, *vt.shape[1:]], vt.element_type), value).result


def _scatter_rows(
    em: Emitter, node: fx.Node, base: ir.Value, src: ir.Value, idx: ir.Value, accumulate: bool
) -> ir.Value:
    """``base`` with the rows of ``src`` [n, rest...] added (or written) at
    the rows ``idx`` [n] (a tm_tensor.scatter), as ``node``'s type."""
    st = ir.RankedTensorType(src.type)
    it = ir.RankedTensorType(idx.type)
    c = ir.IndexType.get()

    def with_unit_dim(value: ir.Value, vt: ir.RankedTensorType) -> ir.Value:
        """``value`` [n, rest...] as [n, 1, rest...] (the scatter's one index coordinate)."""
        shape = [vt.shape[0], 1, *vt.shape[1:]]
        sizes = [tensor.dim(value, arith.constant(c, k)) for k in range(vt.rank) if vt.is_dynamic_dim(k)]
        groups = [[0, 1], *[[k + 1] for k in range(1, vt.rank)]]
        out = ir.RankedTensorType.get(shape, vt.element_type)
        return tensor.ExpandShapeOp(out, value, _reassociation(groups), sizes, shape).result

    if st.shape[0] == 0:
        return _unchanged_input(em, node)  # IREE cannot compile a scatter of no rows
    if st.is_dynamic_dim(0) != it.is_dynamic_dim(0):
        # The scatter's verifiers take a static row count against a dynamic
        # one for a mismatch (`x[i] = v[:2]`), and IREE folds a cast to
        # dynamic away: the dynamic one takes the static count, checked.
        rows = st.shape[0] if it.is_dynamic_dim(0) else it.shape[0]
        c0 = arith.constant(c, 0)
        _fail_unless(
            arith.cmpi(arith.CmpIPredicate.eq, tensor.dim(src, c0), tensor.dim(idx, c0)),
            f"{node.target._opname}: the values and the indices have different row counts",
        )
        src, idx = (_with_rows(v, rows) for v in (src, idx))
        st, it = ir.RankedTensorType(src.type), ir.RankedTensorType(idx.type)
    element = ir.RankedTensorType(base.type).element_type
    scatter = ir.Operation.create(
        "tm_tensor.scatter",
        results=[base.type],
        operands=[with_unit_dim(src, st), with_unit_dim(idx, it), base],
        attributes={
            "dimension_map": ir.DenseI64ArrayAttr.get([0]),
            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([2, 1]),
            "unique_indices": ir.BoolAttr.get(False),
        },
        regions=1,
    )
    block = scatter.regions[0].blocks.append(element, element)
    with ir.InsertionPoint(block):
        update, current = block.arguments
        add = arith.addf if value_of(node).dtype.is_floating_point else arith.addi
        ir.Operation.create("tm_tensor.yield", operands=[add(current, update) if accumulate else update])
    return em.cast(scatter.result, value_type(node))


def _scan(
    value: ir.Value, dim: int, identity: float | int, step: Callable[[ir.Value, ir.Value], ir.Value]
) -> ir.Value:
    """The inclusive scan of ``value`` along ``dim`` (a tm_tensor.scan):
    ``step(accumulated, element)`` combines, ``identity`` starts each row."""
    vt = ir.RankedTensorType(value.type)
    element = vt.element_type
    sizes = _sizes(value)
    loops = [f"d{k}" for k in range(vt.rank)]

    def filled(shape: list) -> ir.Value:
        dims = "(" + ", ".join(loops[: len(shape)]) + ")"
        constant = lambda _: arith.constant(element, identity)  # noqa: E731
        return _generic([], tensor.empty(shape, element), [dims], ["parallel"] * len(shape), constant)

    rest = [d for k, d in enumerate(sizes) if k != dim]
    scan = ir.Operation.create(
        "tm_tensor.scan",
        results=[
            value.type,
            ir.RankedTensorType.get([d for k, d in enumerate(vt.shape) if k != dim], element),
        ],
        operands=[value, filled(sizes), filled(rest)],
        attributes={
            "dimension": ir.IntegerAttr.get(ir.IntegerType.get_signless(64), dim),
            "inclusive": ir.BoolAttr.get(True),
            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([1, 2]),
        },
        regions=1,
    )
    block = scan.regions[0].blocks.append(element, element)
    with ir.InsertionPoint(block):
        ir.Operation.create("tm_tensor.yield", operands=[step(*block.arguments)])
    return scan.results[0]


def _logcumsumexp_claims(node: fx.Node) -> bool:
    return value_of(node.args[0]).dtype in (torch.float32, torch.float64)


@lowering(
    torch.ops.aten.logcumsumexp.default,
    "a scan whose step is logaddexp (tm_tensor.scan); torch-mlir's own lowering exponentiates first and "
    "overflowed to inf above 88 in f32",
    claims=_logcumsumexp_claims,
)
def _logcumsumexp(em: Emitter, node: fx.Node) -> ir.Value:
    x, dim = node.args
    value = em[x]
    vt = ir.RankedTensorType(value.type)
    if vt.rank == 0 or 0 in vt.shape:
        # A scalar is its own scan; and IREE cannot compile a scan of no elements.
        return em.cast(value, value_type(node))
    element = vt.element_type

    def logaddexp(a: ir.Value, b: ir.Value) -> ir.Value:
        high, low = arith.maximumf(a, b), arith.minimumf(a, b)
        step = arith.addf(high, mmath.log1p(mmath.exp(arith.subf(low, high))))
        # Both -inf (an empty prefix): -inf, not the NaN of -inf - -inf.
        empty = arith.cmpf(arith.CmpFPredicate.OEQ, high, arith.constant(element, float("-inf")))
        return arith.select(empty, high, step)

    return em.cast(_scan(value, dim % vt.rank, float("-inf"), logaddexp), value_type(node))


@lowering(
    torch.ops.aten.signbit.default,
    "the sign bit of a float's bits (-0.0 and a negative NaN included); torch-mlir has no lowering",
)
def _signbit(em: Emitter, node: fx.Node) -> ir.Value:
    (x,) = node.args
    dtype = value_of(x).dtype
    value = em[x]
    i1 = ir.IntegerType.get_signless(1)
    if dtype.is_floating_point:
        bits = ir.IntegerType.get_signless(torch.finfo(dtype).bits)
        zero = arith.constant(bits, 0)
        sign = _map_elements(
            value, i1, lambda v: arith.cmpi(arith.CmpIPredicate.slt, arith.bitcast(bits, v), zero)
        )
    elif dtype.is_signed:
        element = ir.RankedTensorType(value.type).element_type
        sign = _map_elements(
            value, i1, lambda v: arith.cmpi(arith.CmpIPredicate.slt, v, arith.constant(element, 0))
        )
    else:
        sign = _map_elements(value, i1, lambda v: arith.constant(i1, 0))
    return em.cast(sign, value_type(node))


_EXTREME_DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64)


def _cumulative_extreme_claims(node: fx.Node) -> bool:
    return value_of(node.args[0]).dtype in _EXTREME_DTYPES


def _cumulative_extreme(em: Emitter, node: fx.Node, largest: bool) -> tuple[ir.Value, ir.Value]:
    """cummax / cummin as two scans: the running extreme, then the running
    largest index at which an element equals it. As in ATen, a tie moves
    the index to the later element, and a NaN, once seen, is the value from
    there on, at the index of the latest NaN."""
    x, dim = node.args
    value = em[x]
    vt = ir.RankedTensorType(value.type)
    floating = value_of(x).dtype.is_floating_point
    i64 = ir.IntegerType.get_signless(64)
    values_val, indices_val = value_of(node)
    if vt.rank == 0 or 0 in vt.shape:
        # A scalar is its own extreme, at index 0; and IREE cannot compile
        # a scan of no elements.
        zeros = _map_elements(value, i64, lambda _: arith.constant(i64, 0))
        return em.cast(value, tensor_type(values_val)), em.cast(zeros, tensor_type(indices_val))
    dim %= vt.rank
    if floating:
        identity = float("-inf") if largest else float("inf")
        combine = arith.maximumf if largest else arith.minimumf  # NaN propagates
    else:
        width = torch.iinfo(value_of(x).dtype).bits
        identity = -(1 << (width - 1)) if largest else (1 << (width - 1)) - 1
        combine = arith.maxsi if largest else arith.minsi
    extremes = _scan(value, dim, identity, combine)
    # Where an element is the running extreme (or a NaN): its index along
    # dim, else -1; the running max of that is the extreme's latest index.
    dims = "(" + ", ".join(f"d{k}" for k in range(vt.rank)) + ")"

    def index_if_extreme(a: ir.Value, running: ir.Value, _out: ir.Value) -> ir.Value:
        if floating:
            hit = arith.ori(
                arith.cmpf(arith.CmpFPredicate.OEQ, a, running), arith.cmpf(arith.CmpFPredicate.UNO, a, a)
            )
        else:
            hit = arith.cmpi(arith.CmpIPredicate.eq, a, running)
        position = arith.index_cast(i64, _loop_index(dim))
        return arith.select(hit, position, arith.constant(i64, -1))

    candidates = _generic(
        [value, extremes],
        tensor.empty(_sizes(value), i64),
        [dims] * 3,
        ["parallel"] * vt.rank,
        index_if_extreme,
    )
    indices = _scan(candidates, dim, -1, arith.maxsi)
    return em.cast(extremes, tensor_type(values_val)), em.cast(indices, tensor_type(indices_val))


@lowering(
    torch.ops.aten.cummax.default,
    "two scans (tm_tensor.scan): the running maximum, then its latest index; torch-mlir has no lowering",
    claims=_cumulative_extreme_claims,
)
def _cummax(em: Emitter, node: fx.Node) -> tuple[ir.Value, ir.Value]:
    return _cumulative_extreme(em, node, largest=True)


@lowering(
    torch.ops.aten.cummin.default,
    "two scans (tm_tensor.scan): the running minimum, then its latest index; torch-mlir has no lowering",
    claims=_cumulative_extreme_claims,
)
def _cummin(em: Emitter, node: fx.Node) -> tuple[ir.Value, ir.Value]:
    return _cumulative_extreme(em, node, largest=False)


@lowering(torch.ops.ragged.segment_softmax.default, "softmax over each item's rows, per column")
def _segment_softmax(em: Emitter, node: fx.Node) -> ir.Value:
    values, offsets = node.args
    return em.unpack(rd.softmax(em.pack(values, offsets)), node)


@lowering(torch.ops.ragged.attention.default, "softmax(scale q kᵀ [+ causal]) v per item and head")
def _attention(em: Emitter, node: fx.Node) -> ir.Value:
    q, k, v, offsets, scale, causal = node.args[:6]
    packed = [em.pack(x, offsets) for x in (q, k, v)]
    out = rd.attention(packed[0].type, None, *packed, **_attention_attrs(em, node, scale, causal, 6))
    return em.unpack(out, node)


@lowering(torch.ops.ragged.attention_lse.default, "attention and its log-sum-exp per query row and head")
def _attention_lse(em: Emitter, node: fx.Node) -> tuple[ir.Value, ...]:
    q, k, v, offsets, scale, causal = node.args[:6]
    packed = [em.pack(x, offsets) for x in (q, k, v)]
    rt = rd.RaggedTensorType(packed[0].type)
    heads = rt.dense_dims[0]
    lse_type = rd.RaggedTensorType.get(None, [rd.Ragged(em.symbol(offsets)), heads, 1], rt.element_type)
    out, lse = rd.attention(packed[0].type, lse_type, *packed, **_attention_attrs(em, node, scale, causal, 6))
    return tuple(em.unpack_as(r, val) for r, val in zip((out, lse), value_of(node), strict=True))


@lowering(
    torch.ops.ragged.attention_backward.default,
    "the gradients (q, k, v) of attention given its output's (ragged.attention_grad)",
)
def _attention_backward(em: Emitter, node: fx.Node) -> tuple[ir.Value, ...]:
    grad, q, k, v, offsets, scale, causal = node.args[:7]
    output, lse = (_argument(node, name, 7 + i) for i, name in enumerate(("output", "lse")))
    packed = [em.pack(x, offsets) for x in (q, k, v, grad)]
    grads = rd.attention_grad(
        *packed,
        output=None if output is None else em.pack(output, offsets),
        lse=None if lse is None else em.pack(lse, offsets),
        **_attention_attrs(em, node, scale, causal, 9),
    )
    return tuple(em.unpack_as(g, val) for g, val in zip(grads, value_of(node), strict=True))


def _argument(node: fx.Node, name: str, position: int, default: Any = None) -> Any:
    """A call's argument ``name``, passed at ``position`` or by keyword."""
    if len(node.args) > position:
        return node.args[position]
    return node.kwargs.get(name, default)


def _attention_attrs(em: Emitter, node: fx.Node, scale, causal, dropout_at: int) -> dict:
    """The attributes of ragged.attention(_grad), and its seed where it drops
    (``dropout_p`` and ``seed`` are arguments ``dropout_at`` and the next)."""
    attrs = {"scale": _float(scale, ir.F64Type.get()), "causal": ir.UnitAttr.get() if causal else None}
    p = float(_argument(node, "dropout_p", dropout_at, 0.0))
    seed = _argument(node, "seed", dropout_at + 1)
    if p > 0.0:
        if seed is None:
            raise Unsupported(f"{node.name}: dropout_p {p} without a seed")
        attrs["dropout"] = _float(p, ir.F64Type.get())
        attrs["seed"] = em.cast(em[seed], ir.RankedTensorType.get([], ir.IntegerType.get_signless(64)))
    return attrs


@lowering(torch.ops.ragged.to_padded.default, "packed rows as [B, length, ...], padding after each item")
def _to_padded(em: Emitter, node: fx.Node) -> ir.Value:
    values, offsets, length, padding = node.args
    packed = em.pack(values, offsets)
    elem = rd.RaggedTensorType(packed.type).element_type
    padded = rd.to_padded(packed, _float(padding, elem))
    # to_padded pads to the longest item; the graph asks for `length` (>= it).
    index = ir.IndexType.get()
    c1 = arith.constant(index, 1)
    want = _index(em[length]) if isinstance(length, fx.Node) else arith.constant(index, int(length))
    extra = arith.subi(want, tensor.dim(padded, c1))
    rank = padded.type.rank
    pad = tensor.PadOp(
        padded.type,
        padded,
        [],
        [extra],
        ir.DenseI64ArrayAttr.get([0] * rank),
        ir.DenseI64ArrayAttr.get([0, ir.ShapedType.get_dynamic_size()] + [0] * (rank - 2)),
    )
    block = pad.region.blocks.append(*([index] * rank))
    with ir.InsertionPoint(block):
        tensor.YieldOp(arith.constant(elem, _float(padding, elem)))
    return em.cast(pad.result, value_type(node))


@lowering(torch.ops.ragged.from_padded.default, "the first lengths[b] slots of each padded item, packed")
def _from_padded(em: Emitter, node: fx.Node) -> ir.Value:
    padded, offsets, _ = node.args
    pt = ir.RankedTensorType(em[padded].type)
    off = em[offsets]
    i64 = ir.IntegerType.get_signless(64)
    dyn = ir.ShapedType.get_dynamic_size()
    index = ir.IndexType.get()
    count = arith.subi(tensor.dim(off, arith.constant(index, 0)), arith.constant(index, 1))
    sliced = ir.RankedTensorType.get([dyn], i64)

    def part(start: int) -> ir.Value:
        return tensor.ExtractSliceOp(sliced, off, [], [count], [], [start], [dyn], [1]).result

    lengths = arith.subi(part(1), part(0))
    dense = [None if pt.is_dynamic_dim(i) else pt.shape[i] for i in range(2, pt.rank)]
    batch = None if pt.is_dynamic_dim(0) else pt.shape[0]
    rt = rd.RaggedTensorType.get(batch, [rd.Ragged(f"P{len(em.env)}"), *dense], pt.element_type)
    return em.unpack(rd.from_padded(rt, em[padded], [lengths]), node)


def _pack_image(
    em: Emitter, values: fx.Node, heights: fx.Node, widths: fx.Node, channels: int | None = None
) -> ir.Value:
    """``ragged.pack`` of channels-last images ``[sum H W, C]`` over the
    offsets of their heights and widths. ``channels``: C where the op knows
    it (a convolution's weight) and the traced shape carries it as an
    expression (images of one size, repacked)."""
    vt = value_type(values)
    if vt.is_dynamic_dim(1) and channels is not None:
        vt = ir.RankedTensorType.get([ir.ShapedType.get_dynamic_size(), channels], vt.element_type)
    if vt.is_dynamic_dim(1):
        raise Unsupported(
            "images need a static channel count; weights passed as graph inputs under dynamic=True "
            "make it symbolic (use module parameters, or torch._dynamo.mark_static)"
        )
    dims = [rd.Ragged(em.symbol(heights)), rd.Ragged(em.symbol(widths)), vt.shape[1]]
    rt = rd.RaggedTensorType.get(None, dims, vt.element_type)
    return rd.pack(rt, em.cast(em[values], vt), [em[heights], em[widths]])


def _window_type(packed: ir.Value, channels: int, kernel, stride, padding, dilation, ceil: bool) -> ir.Type:
    """The image type after a window per spatial dim (the builders' rule: a
    kept extent keeps its symbol, another is named after its rule)."""
    rt = rd.RaggedTensorType(packed.type)
    dims = window_dims(*rt.dims[:2], windows(kernel, stride, padding, dilation, ceil))
    return rd.RaggedTensorType.get(None, [*dims, channels], rt.element_type)


def _i64_array(values) -> ir.Attribute:
    return ir.DenseI64ArrayAttr.get([int(v) for v in values])


@lowering(torch.ops.ragged.conv2d.default, "2-D convolution of each image at its own size (ragged.conv2d)")
def _conv2d(em: Emitter, node: fx.Node) -> ir.Value:
    values, heights, widths, weight, bias, stride, padding, dilation, groups = node.args
    wt = ir.RankedTensorType(em[weight].type)
    if any(wt.is_dynamic_dim(i) for i in range(4)):
        raise Unsupported(f"conv2d: the weight's shape must be static, got {wt}")
    packed = _pack_image(em, values, heights, widths, wt.shape[2] * int(groups))
    out = rd.conv2d(
        _window_type(packed, wt.shape[3], list(wt.shape[:2]), stride, padding, dilation, False),
        packed,
        em[weight],
        bias=None if bias is None else em[bias],
        strides=_i64_array(stride),
        padding=_i64_array(padding),
        dilation=_i64_array(dilation),
        groups=ir.IntegerAttr.get(ir.IntegerType.get_signless(64), int(groups)),
    )
    return em.unpack(out, node)


@lowering(
    torch.ops.ragged.pool2d.default, "max or average pooling of each image at its own size (ragged.pool2d)"
)
def _pool2d(em: Emitter, node: fx.Node) -> ir.Value:
    values, heights, widths, kind, kernel, stride, padding, dilation, ceil_mode, count_include_pad = node.args
    packed = _pack_image(em, values, heights, widths)
    channels = rd.RaggedTensorType(packed.type).dense_dims[-1]
    out = rd.pool2d(
        _window_type(packed, channels, kernel, stride, padding, dilation, ceil_mode),
        ir.Attribute.parse(f"#ragged.reduce_kind<{kind}>"),
        packed,
        _i64_array(kernel),
        strides=_i64_array(stride),
        padding=_i64_array(padding),
        dilation=_i64_array(dilation),
        ceil_mode=ir.UnitAttr.get() if ceil_mode else None,
        count_include_pad=ir.UnitAttr.get() if count_include_pad else None,
    )
    return em.unpack(out, node)
