"""Builds the ragged MLIR module of a planned graph, with the bindings.

Each dense piece goes through torch-mlir's FX importer to linalg-on-tensors
(LLVM 24) and crosses into our context (LLVM 22) as text; ops of dialects
that only IREE knows (torch-mlir's ``tm_tensor.*``, e.g. attention) cross in
generic form and stay opaque until IREE lowers them. Everything else,
``main`` calling the pieces and the ragged ops between them, is built with
the ``ragged_mlir`` bindings: a malformed op is a Python error at the line
that made it.

:data:`LOWERINGS` maps each ``torch.ops.ragged.*`` overload to the function
that emits it; it is also what ``docs/torch.md`` lists.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import operator
import os
import re
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

from .. import ir
from ..builders import window_dims, windows
from ..dialects import arith, func, tensor
from ..dialects import math as mmath
from ..dialects import ragged as rd
from . import ops  # noqa: F401  (registers torch.ops.ragged.*)
from .graph import DTYPES, DensePiece, OpStep, Plan, Unsupported, bound_args, describe, value_of
from .reshapes import reshape_groups

__all__ = [
    "LOWERINGS",
    "emits",
    "empty_result",
    "ImportFailed",
    "Lowering",
    "PASSTHROUGH_DIALECTS",
    "build_module",
    "decompose",
    "import_dense",
]

#: Dialects torch-mlir may leave in linalg-on-tensors that IREE lowers itself.
PASSTHROUGH_DIALECTS = ("tm_tensor",)


@dataclasses.dataclass(frozen=True)
class Lowering:
    """How an op the backend emits itself (the ragged custom ops, and ATen
    calls torch-mlir gets wrong) becomes MLIR; ``claims`` picks the calls it
    handles (the others stay in dense pieces)."""

    emit: Callable[[Emitter, fx.Node], ir.Value]
    summary: str
    claims: Callable[[fx.Node], bool] | None = None


LOWERINGS: dict[torch._ops.OpOverload, Lowering] = {}


def lowering(op: torch._ops.OpOverload, summary: str, claims: Callable[[fx.Node], bool] | None = None):
    def register(fn):
        LOWERINGS[op] = Lowering(fn, summary, claims)
        return fn

    return register


def emits(node: fx.Node) -> bool:
    """Whether a :data:`LOWERINGS` entry handles the call ``node``."""
    lower = LOWERINGS.get(node.target)
    return lower is not None and (lower.claims is None or lower.claims(node))


def empty_result(node: fx.Node) -> bool:
    """A call of a functional ATen op whose result is statically shaped and
    has no elements (an all-empty batch, or an empty index, whose sizes
    Dynamo specialises to 0). torch-mlir divides by such sizes when it
    infers a view's shape, its own views included, which kills the
    process; the backend emits the result as a ``tensor.empty``."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    if target.namespace != "aten" or target._schema.is_mutable:
        return False
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and all(isinstance(d, int) for d in val.shape) and val.numel() == 0


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


def _broadcast_to(value: ir.Value, sizes: list, element: ir.Type, message: str) -> ir.Value:
    """``value`` broadcast to ``sizes`` (ints, or index values for dynamic
    sizes) as torch broadcasts: aligned on the right, static 1 dims
    repeated. A dim that is neither 1 nor provably equal is checked at run
    time (``cf.assert`` with ``message``). ``value`` itself when nothing
    is broadcast."""
    t = ir.RankedTensorType(value.type)
    c = ir.IndexType.get()
    lead = len(sizes) - t.rank
    repeated = []
    for k in range(t.rank):
        want = sizes[lead + k]
        if t.shape[k] == 1 and not (isinstance(want, int) and want == 1):
            repeated.append(k)
        elif not (isinstance(want, int) and want == t.shape[k]):
            have = (
                tensor.dim(value, arith.constant(c, k))
                if t.is_dynamic_dim(k)
                else arith.constant(c, t.shape[k])
            )
            size = want if not isinstance(want, int) else arith.constant(c, want)
            same = arith.cmpi(arith.CmpIPredicate.eq, have, size)
            _fail_unless(same, message)
    if lead == 0 and not repeated:
        return value
    dims = [f"d{i}" for i in range(len(sizes))]
    source = ["0" if k in repeated else dims[lead + k] for k in range(t.rank)]
    return _generic(
        [value],
        tensor.empty(sizes, element),
        [f"({', '.join(source)})", f"({', '.join(dims)})"],
        ["parallel"] * len(sizes),
        lambda v, _: v,
    )


def _check_rows(index: ir.Value, x: ir.Value, negative: bool, op: str) -> ir.Value:
    """Fail the call unless every element of the 1-D ``index`` is a row of
    ``x`` (from ``-rows``, counted from the end, where ``negative``).
    Returns the row count, typed as the index's elements."""
    element = ir.RankedTensorType(index.type).element_type
    rows = arith.index_cast(element, tensor.dim(x, arith.constant(ir.IndexType.get(), 0)))
    zero = arith.constant(element, 0)
    lowest = arith.subi(zero, rows) if negative else zero
    _check_all(
        index,
        lambda v: arith.andi(
            arith.cmpi(arith.CmpIPredicate.sge, v, lowest), arith.cmpi(arith.CmpIPredicate.slt, v, rows)
        ),
        f"{op}: an index is out of range for the rows of the input",
    )
    return rows


def _check_all(value: ir.Value, predicate: Callable[[ir.Value], ir.Value], message: str) -> None:
    """Fail the call with ``message`` (``cf.assert``) unless ``predicate``
    holds for every element of the 1-D tensor ``value``."""
    i1 = ir.IntegerType.get_signless(1)
    init = tensor.from_elements(ir.RankedTensorType.get([], i1), [arith.constant(i1, 1)])
    all_ok = _generic(
        [value], init, ["(d0)", "()"], ["reduction"], lambda v, ok: arith.andi(ok, predicate(v))
    )
    ok = tensor.extract(all_ok, [])
    _fail_unless(ok, message)


def _fail_unless(flag: ir.Value, message: str) -> None:
    """A ``cf.assert``: the call fails with ``message`` unless the i1 ``flag`` holds."""
    ir.Operation.create("cf.assert", operands=[flag], attributes={"msg": ir.StringAttr.get(message)})


def _map_elements(value: ir.Value, element: ir.Type, fn: Callable[[ir.Value], ir.Value]) -> ir.Value:
    """``fn`` applied to every element of the ranked tensor ``value``, giving
    ``element``s (a linalg.generic with identity maps)."""
    rank = ir.RankedTensorType(value.type).rank
    dims = "(" + ", ".join(f"d{i}" for i in range(rank)) + ")"
    return _generic(
        [value], tensor.empty(_sizes(value), element), [dims, dims], ["parallel"] * rank, lambda v, _: fn(v)
    )


def _loop_index(dim: int) -> ir.Value:
    """In a linalg.generic's body: the index of its loop ``dim``."""
    i64 = ir.IntegerType.get_signless(64)
    return ir.Operation.create(
        "linalg.index", results=[ir.IndexType.get()], attributes={"dim": ir.IntegerAttr.get(i64, dim)}
    ).result


def _sizes(value: ir.Value) -> list:
    """The sizes of the ranked tensor ``value``: ints, and index values
    (``tensor.dim``) for its dynamic dims."""
    t = ir.RankedTensorType(value.type)
    index = ir.IndexType.get()
    return [
        tensor.dim(value, arith.constant(index, k)) if t.is_dynamic_dim(k) else d
        for k, d in enumerate(t.shape)
    ]


def _generic(
    inputs: list[ir.Value],
    init: ir.Value,
    maps: list[str],
    iterators: list[str],
    body: Callable[..., ir.Value],
) -> ir.Value:
    """A ``linalg.generic`` over ``inputs`` into ``init`` (the bindings
    carry no linalg builders). ``maps`` are the results of each operand's
    affine map over ``d0, d1, ...`` (``"(d0, 0)"``), ``iterators`` the kinds
    of its loops; ``body`` gets the block's arguments (one element per
    operand, ``init``'s last) and returns the yielded value."""
    loops = "(" + ", ".join(f"d{i}" for i in range(len(iterators))) + ")"
    generic = ir.Operation.create(
        "linalg.generic",
        results=[init.type],
        operands=[*inputs, init],
        attributes={
            "indexing_maps": ir.ArrayAttr.get(
                [ir.Attribute.parse(f"affine_map<{loops} -> {m}>") for m in maps]
            ),
            "iterator_types": ir.Attribute.parse(
                "[" + ", ".join(f"#linalg.iterator_type<{k}>" for k in iterators) + "]"
            ),
            "operandSegmentSizes": ir.DenseI32ArrayAttr.get([len(inputs), 1]),
        },
        regions=1,
    )
    types = [ir.RankedTensorType(v.type).element_type for v in (*inputs, init)]
    block = generic.regions[0].blocks.append(*types)
    with ir.InsertionPoint(block):
        ir.Operation.create("linalg.yield", operands=[body(*block.arguments)])
    return generic.result


def _product(dims) -> int:
    out = 1
    for d in dims:
        out *= d
    return out


for _op in (torch.ops.aten.index_put.default, torch.ops.aten._unsafe_index_put.default):
    lowering(
        _op,
        "with a statically empty index: its input, unchanged (torch-mlir divides by the empty size); "
        "whole rows put or accumulated through one index: a scatter of the flattened rows, indices checked "
        "and negative ones wrapped (torch-mlir's lowering scatters only the index's first dim and writes "
        "out of bounds at a negative index)",
        claims=lambda node: _has_empty_index(node) or _puts_rows(node),
    )(_index_put)


def element_type(dtype: torch.dtype) -> ir.Type:
    name = DTYPES[dtype]
    if name.startswith("f") or name == "bf16":
        return {
            "f16": ir.F16Type.get,
            "bf16": ir.BF16Type.get,
            "f32": ir.F32Type.get,
            "f64": ir.F64Type.get,
        }[name]()
    return ir.IntegerType.get_signless(int(name[1:]))


def tensor_type(val: torch.Tensor) -> ir.RankedTensorType:
    dyn = ir.ShapedType.get_dynamic_size()
    shape = [d if isinstance(d, int) else dyn for d in val.shape]
    return ir.RankedTensorType.get(shape, element_type(val.dtype))


def scalar_type(val) -> ir.Type:
    if isinstance(val, (bool, torch.SymBool)):
        return ir.IntegerType.get_signless(1)
    if isinstance(val, (float, torch.SymFloat)):
        return ir.F64Type.get()
    return ir.IntegerType.get_signless(64)


def value_type(node: fx.Node) -> ir.Type:
    val = value_of(node)
    return tensor_type(val) if isinstance(val, torch.Tensor) else scalar_type(val)


class Emitter:
    """State while ``main``'s body is built: values of graph nodes and one
    ragged symbol per offsets node (same offsets node, provably the same
    partition)."""

    def __init__(self):
        self.env: dict[fx.Node, ir.Value] = {}
        self._symbols: dict[fx.Node, str] = {}

    def __getitem__(self, node: fx.Node) -> ir.Value:
        return self.env[node]

    def cast(self, value: ir.Value, want: ir.Type) -> ir.Value:
        if value.type == want:
            return value
        if isinstance(value.type, ir.RankedTensorType) and isinstance(want, ir.RankedTensorType):
            return tensor.cast(want, value)
        raise Unsupported(f"cannot pass a {value.type} where {want} is expected")

    def symbol(self, offsets: fx.Node) -> str:
        return self._symbols.setdefault(offsets, f"L{len(self._symbols)}")

    def pack(self, values: fx.Node, offsets: fx.Node) -> ir.Value:
        """``ragged.pack`` of packed values ``[rows, d...]`` over ``offsets``."""
        vt = ir.RankedTensorType(self.env[values].type)
        dense = [None if vt.is_dynamic_dim(i) else vt.shape[i] for i in range(1, vt.rank)]
        rt = rd.RaggedTensorType.get(None, [rd.Ragged(self.symbol(offsets)), *dense], vt.element_type)
        return rd.pack(rt, self.env[values], [self.env[offsets]])

    def unpack(self, packed: ir.Value, node: fx.Node) -> ir.Value:
        """The packed values of ``packed`` as ``node``'s type."""
        return self.unpack_as(packed, value_of(node))

    def unpack_as(self, packed: ir.Value, val: torch.Tensor) -> ir.Value:
        """The packed values of ``packed`` as the type of the tensor ``val``."""
        values = rd.values(_rows_type(rd.RaggedTensorType(packed.type)), packed)
        return self.cast(values, tensor_type(val))


def _dense_shape(rt) -> list[int]:
    """A ragged type's dense dims as a tensor shape (dynamic ones as such)."""
    dyn = ir.ShapedType.get_dynamic_size()
    return [dyn if d is None else d for d in rt.dense_dims]


def _rows_type(rt) -> ir.RankedTensorType:
    """``[?, dense dims...]`` of a ragged type's element type: its packed
    values, or one row per item."""
    return ir.RankedTensorType.get([ir.ShapedType.get_dynamic_size(), *_dense_shape(rt)], rt.element_type)


def _float(value: float, ty: ir.Type) -> ir.FloatAttr:
    return ir.FloatAttr.get(ty, float(value))


@lowering(torch.ops.ragged.segment_reduce.default, "sum / mean / max / min over each item's rows")
def _segment_reduce(em: Emitter, node: fx.Node) -> ir.Value:
    values, offsets, kind, empty = node.args
    packed = em.pack(values, offsets)
    rt = rd.RaggedTensorType(packed.type)
    kind_attr = ir.Attribute.parse(f"#ragged.reduce_kind<{kind}>")
    out = rd.reduce(_rows_type(rt), kind_attr, packed, empty=_float(empty, rt.element_type))
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
    rt = rd.RaggedTensorType(packed.type)
    dyn = ir.ShapedType.get_dynamic_size()
    dense = _dense_shape(rt)
    elem = rt.element_type
    padded = rd.to_padded(ir.RankedTensorType.get([dyn, dyn, *dense], elem), packed, _float(padding, elem))
    # to_padded pads to the longest item; the graph asks for `length` (>= it).
    index = ir.IndexType.get()
    c1 = arith.constant(index, 1)
    want = _index(em[length]) if isinstance(length, fx.Node) else arith.constant(index, int(length))
    extra = arith.subi(want, tensor.dim(padded, c1))
    rank = 2 + len(dense)
    out_type = ir.RankedTensorType.get([dyn, dyn, *dense], elem)
    pad = tensor.PadOp(
        out_type,
        padded,
        [],
        [extra],
        ir.DenseI64ArrayAttr.get([0] * rank),
        ir.DenseI64ArrayAttr.get([0, dyn] + [0] * len(dense)),
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


def _reassociation(groups: list[list[int]]) -> ir.ArrayAttr:
    """The reassociation attribute of a collapse or expand_shape."""
    i64 = ir.IntegerType.get_signless(64)
    return ir.ArrayAttr.get([ir.ArrayAttr.get([ir.IntegerAttr.get(i64, k) for k in g]) for g in groups])


def _index(value: ir.Value) -> ir.Value:
    return arith.index_cast(ir.IndexType.get(), value)


def _reshape(em: Emitter, node: fx.Node) -> ir.Value:
    """A view of :func:`~.reshapes.reshape_groups`: the merged groups
    collapsed, then the split groups expanded (sizes from the view's size
    arguments, supplied by the host when dynamic)."""
    groups = reshape_groups(node)
    if groups is None:
        raise Unsupported("not a reshape the backend emits", node)
    source = em[node.args[0]]
    st = ir.RankedTensorType(source.type)
    dyn = ir.ShapedType.get_dynamic_size()

    def product(dims: list[int]) -> int:
        out = 1
        for d in dims:
            out = dyn if d == dyn or out == dyn else out * d
        return out

    value = source
    if any(len(a) > 1 for a, _ in groups):
        collapsed = [product([st.shape[k] for k in a]) for a, _ in groups]
        value = tensor.CollapseShapeOp(
            ir.RankedTensorType.get(collapsed, st.element_type), value, _reassociation([a for a, _ in groups])
        ).result
    result = value_type(node)
    if any(len(b) > 1 for _, b in groups):
        sizes = node.args[1]
        static, dynamic = [], []
        index = ir.IndexType.get()
        for g, (_, b) in enumerate(groups):
            dims = [result.shape[k] for k in b]
            for k in b:
                size = result.shape[k]
                static.append(size)
                if size != dyn:
                    continue
                if dims.count(dyn) == 1:
                    # The one dynamic dim of a group is the group's size in
                    # the source over the others': derived from the source,
                    # it is visibly the same size as the source's, which a
                    # size from the host is not to IREE (and each check
                    # that the two are equal would split its schedule).
                    whole = tensor.dim(value, arith.constant(index, g))
                    rest = product([d for d in dims if d != dyn])
                    dynamic.append(whole if rest == 1 else arith.divui(whole, arith.constant(index, rest)))
                    continue
                arg = sizes[k]
                if not isinstance(arg, fx.Node):
                    raise Unsupported(f"a dynamic split of size {arg!r}", node)
                dynamic.append(_index(em[arg]))
        reassociation, at = [], 0
        for _, b in groups:
            reassociation.append(list(range(at, at + len(b))))
            at += len(b)
        value = tensor.ExpandShapeOp(
            ir.RankedTensorType.get(static, st.element_type),
            value,
            _reassociation(reassociation),
            dynamic,
            static,
        ).result
    return em.cast(value, result)


# --------------------------------------------------------------------------
# Dense pieces
# --------------------------------------------------------------------------

_OP_NAMES = (
    re.compile(r'name = "(torch\.[A-Za-z0-9_.]+)"'),  # an op torch-mlir has no definition for
    re.compile(r"operation '(torch\.[A-Za-z0-9_.]+)'"),
)


def _split_with_sizes(x: torch.Tensor, split_sizes, dim: int = 0) -> list[torch.Tensor]:
    # torch-mlir cannot lower splits of dynamic sizes; slices it can.
    dim = dim % x.dim()
    parts, start = [], 0
    for size in split_sizes:
        parts.append(torch.ops.aten.slice.Tensor(x, dim, start, start + size))
        start = start + size
    return parts


def _repeat_interleave(repeats: torch.Tensor, *, output_size=None) -> torch.Tensor:
    # Item ids of packed rows (``repeat_interleave(lengths)``), which
    # torch-mlir cannot lower: a 1 at every item's end, then a running sum.
    if output_size is None:
        raise NotImplementedError("repeat_interleave without output_size")
    ends = repeats.cumsum(0)
    marks = torch.ops.aten.scatter_add.default(
        repeats.new_zeros(output_size + 1), 0, ends, torch.ones_like(ends)
    )
    return marks.cumsum(0)[:output_size]


def _flash_layout(t: torch.Tensor, like: torch.Tensor | None = None) -> torch.Tensor:
    # ATen's CPU flash kernel lays its output out as the query, and its
    # log-sum-exp and gradients ([N, H, L, ...]) as [N, L, H, ...]; the
    # traced graph's views after it rely on that.
    from torch._prims_common import compute_elementwise_output_logical_to_physical_perm

    if like is None:
        order = [0, 2, 1, *range(3, t.dim())]
    else:
        order, _ = compute_elementwise_output_logical_to_physical_perm(like)
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return t.permute(order).contiguous().permute(inverse)


def _flash_scores(query, key, attn_mask, is_causal, scale):
    """Scaled scores ``[N, H, L, S]`` of ATen's CPU flash attention (f32
    at least), with its causal and additive masks; key heads repeated for
    grouped queries."""
    acc = torch.promote_types(query.dtype, torch.float32)
    if key.size(-3) != query.size(-3):
        key = key.repeat_interleave(query.size(-3) // key.size(-3), dim=-3)
    if scale is None:
        scale = query.size(-1) ** -0.5
    s = torch.matmul(query.to(acc), key.to(acc).transpose(-2, -1)) * scale
    if is_causal:
        keep = torch.ones(s.size(-2), s.size(-1), dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        s = s + attn_mask.to(acc)
    return s


def _flash_attention(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    # ATen's CPU flash attention (what SDPA traces to without dropout),
    # which torch-mlir cannot lower: softmax from the log-sum-exp the
    # kernel also returns (0 for a row with every key masked, whose output
    # is 0, as the kernel's).
    if dropout_p != 0.0:
        return NotImplemented
    s = _flash_scores(query, key, attn_mask, is_causal, scale)
    lse = torch.logsumexp(s, -1)
    lse = torch.where(lse == float("-inf"), torch.zeros_like(lse), lse)
    if value.size(-3) != query.size(-3):
        value = value.repeat_interleave(query.size(-3) // value.size(-3), dim=-3)
    out = torch.matmul(torch.exp(s - lse.unsqueeze(-1)), value.to(s.dtype))
    return _flash_layout(out.to(query.dtype), like=query), _flash_layout(lse)


def _flash_attention_backward(
    grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None
):
    # Its gradient from the forward's log-sum-exp: P = exp(S - lse),
    # dV = P^T dO, dS = P (dO V^T - rowsum(P dO V^T)), dQ = dS K, dK = dS^T Q
    # (both scaled); grouped key and value heads add up their queries'.
    if dropout_p != 0.0:
        return NotImplemented
    if scale is None:
        scale = query.size(-1) ** -0.5
    heads, kv_heads = query.size(-3), key.size(-3)
    group = heads // kv_heads
    s = _flash_scores(query, key, attn_mask, is_causal, scale)
    acc = s.dtype
    k, v = key.to(acc), value.to(acc)
    if group != 1:
        k, v = (t.repeat_interleave(group, dim=-3) for t in (k, v))
    p = torch.exp(s - logsumexp.to(acc).unsqueeze(-1))
    d_out = grad_out.to(acc)
    dv = torch.matmul(p.transpose(-2, -1), d_out)
    dp = torch.matmul(d_out, v.transpose(-2, -1))
    ds = p * (dp - (p * dp).sum(-1, keepdim=True))
    dq = torch.matmul(ds, k) * scale
    dk = torch.matmul(ds.transpose(-2, -1), query.to(acc)) * scale
    if group != 1:
        dk, dv = (t.unflatten(-3, (kv_heads, group)).sum(-3) for t in (dk, dv))
    return tuple(_flash_layout(g.to(t.dtype)) for g, t in ((dq, query), (dk, key), (dv, value)))


def _roll(a, shifts, dims=()):
    # Without dims, torch.roll shifts the flattened tensor.
    if len(dims) != 0 or len(shifts) != 1:
        return NotImplemented
    return torch.roll(a.flatten(), shifts, 0).view(a.shape)


def _masked_scatter(a, mask, source):
    # The k-th True of the mask (in row-major order) takes source's k-th element.
    mask = mask.expand_as(a)
    flat = mask.flatten()
    picked = (flat.cumsum(0) - 1).clamp(min=0)
    values = source.flatten()[picked].view(a.shape)
    return torch.where(mask, values, a)


def _diagonal_scatter(a, src, offset=0, dim1=0, dim2=1):
    # src's k-th element onto the k-th element of the diagonal: (i, j) on
    # it reads src[min(i, j)].
    moved = a.movedim((dim1, dim2), (-2, -1))
    rows = torch.arange(moved.size(-2), device=a.device)[:, None]
    cols = torch.arange(moved.size(-1), device=a.device)[None, :]
    on = cols - rows == offset
    picked = torch.minimum(rows, cols).clamp(max=max(src.size(-1) - 1, 0))
    out = torch.where(on, src[..., picked], moved)
    return out.movedim((-2, -1), (dim1, dim2))


def _sort_stable(a, *, stable=None, dim=-1, descending=False):
    # IREE's sort keeps equal keys in their order (its comparisons are
    # strict), so the stable sort is the plain one.
    return torch.ops.aten.sort.default(a, dim, descending)


_SCATTER_IDENTITY = {"sum": 0, "mean": 0, "prod": 1, "amax": float("-inf"), "amin": float("inf")}


def _scatter_reduce(a, dim, index, src, reduce, *, include_self=True):
    # Without self, the scattered positions start from the reduction's
    # identity (which IREE cannot compile as torch-mlir lowers it); a mean
    # divides by the count of its own values, and positions no value
    # reaches keep self.
    if include_self:
        return NotImplemented
    identity = _SCATTER_IDENTITY[reduce]
    if not a.dtype.is_floating_point and reduce in ("amax", "amin"):
        info = torch.iinfo(a.dtype)
        identity = info.min if reduce == "amax" else info.max
    base = a.scatter(dim, index, identity)
    if reduce != "mean":
        return base.scatter_reduce(dim, index, src, reduce, include_self=True)
    total = base.scatter_reduce(dim, index, src, "sum", include_self=True)
    count = torch.zeros_like(a).scatter_add(dim, index, torch.ones_like(src))
    mean = (
        total / count.clamp(min=1)
        if a.dtype.is_floating_point
        else total.div(count.clamp(min=1), rounding_mode="floor")
    )
    return torch.where(count > 0, mean, a)


def _constant_pad_nd(a, pad, value=0):
    # A negative pad slices instead (IREE cannot compile a negative
    # tensor.pad).
    if all(p >= 0 for p in pad):
        return NotImplemented
    for i in range(len(pad) // 2):
        dim = a.dim() - 1 - i
        low, high = pad[2 * i], pad[2 * i + 1]
        a = a.narrow(dim, max(-low, 0), a.size(dim) - max(-low, 0) - max(-high, 0))
    return torch.constant_pad_nd(a, [max(p, 0) for p in pad], value)


def _embedding_bag(
    weight,
    indices,
    offsets,
    scale_grad_by_freq=False,
    mode=0,
    sparse=False,
    per_sample_weights=None,
    include_last_offset=False,
    padding_idx=-1,
):
    # The bags' sums, means or maxima of the weight rows their indices pick
    # (an empty bag gives 0, padding_idx's rows count for nothing). Only the
    # output is computed: imports_wrong refuses a graph that reads the
    # other three results.
    if padding_idx is None:
        padding_idx = -1
    if indices.dim() != 1 or (mode == 2 and padding_idx >= 0):
        return NotImplemented
    n = indices.size(0)
    bags = offsets.size(0) - (1 if include_last_offset else 0)
    starts = offsets[:bags]
    marks = torch.zeros(n + 1, dtype=torch.int64, device=indices.device)
    marks = marks.scatter_add(0, starts, torch.ones_like(starts))
    bag = marks.cumsum(0)[:n] - 1
    rows = weight[indices]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1)
    keep = None
    if padding_idx >= 0:
        keep = indices != padding_idx
        rows = torch.where(keep.unsqueeze(1), rows, torch.zeros_like(rows))
    out = weight.new_zeros(bags, weight.size(1))
    if mode == 2:
        out = out.scatter_reduce(0, bag.unsqueeze(1).expand_as(rows), rows, "amax", include_self=False)
    else:
        out = out.index_add(0, bag, rows)
    if mode == 1:
        counted = torch.ones_like(bag) if keep is None else keep.to(torch.int64)
        count = torch.zeros(bags, dtype=torch.int64, device=indices.device).index_add(0, bag, counted)
        out = out / count.clamp(min=1).unsqueeze(1).to(out.dtype)
    empty = indices.new_zeros(0)
    return out, empty, empty.new_zeros(bags), empty.new_zeros(bags)


def _vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    # The 0-"norm" counts the nonzero elements; torch-mlir computes it as
    # sum(|x|^0)^(1/0), inf.
    if isinstance(ord, (int, float)) and ord != 0:
        return NotImplemented
    out_dtype = dtype or (x.dtype if x.dtype.is_floating_point else torch.float32)
    dims = dim if dim else None
    count = (x != 0).sum(dim=dims, keepdim=keepdim).to(out_dtype)
    if isinstance(ord, (int, float)):
        return count
    # An order known only at run time (a symbolic scalar): every case,
    # chosen on the device; torch-mlir's formula holds for finite nonzero
    # orders only.
    a = x.abs().to(out_dtype)
    p = torch.scalar_tensor(ord, dtype=out_dtype, device=x.device)
    reduce_all = dims if dims is not None else list(range(x.dim()))
    general = a.pow(p).sum(dim=dims, keepdim=keepdim).pow(1 / p)
    largest = a.amax(dim=reduce_all, keepdim=keepdim)
    smallest = a.amin(dim=reduce_all, keepdim=keepdim)
    infinite = torch.where(p > 0, largest, smallest)
    return torch.where(p == 0, count, torch.where(p.isinf(), infinite, general))


def _when_scalar(reduced, otherwise=None):
    """A decomposition of a reduction over dims: for a 0-d input, which has
    one implicit dim, ``reduced(x)`` (torch-mlir cannot lower amax, amin,
    logsumexp, max, min, argmax or argmin of one); for any other input,
    ``otherwise`` (torch-mlir's own decomposition), or none."""

    def decompose(x, *args, **kwargs):
        out = reduced(x) if x.dim() == 0 else NotImplemented
        if out is NotImplemented and otherwise is not None:
            return otherwise(x, *args, **kwargs)
        return out

    return decompose


def _zero_index(x):
    return torch.zeros((), dtype=torch.int64, device=x.device)


def _permute_copy(x, dims):
    return x.permute(dims).clone()


def _scatter_reduce_op(x, dim, index, src, *, reduce):
    # scatter(..., reduce="add" | "multiply"), which torch-mlir cannot lower.
    how = {"add": "sum", "multiply": "prod"}[reduce]
    if not isinstance(src, torch.Tensor):
        src = torch.full(index.shape, src, dtype=x.dtype, device=x.device)
    return x.scatter_reduce(dim, index, src.to(x.dtype), how, include_self=True)


def _fmax_fmin(largest):
    # A NaN gives way to the other operand. torch-mlir failed to broadcast
    # its own lowering's masks.
    def decomposition(a, b):
        both = torch.maximum(a, b) if largest else torch.minimum(a, b)
        return torch.where(a.isnan(), b, torch.where(b.isnan(), a, both))

    return decomposition


def _copysign(a, b):
    # |a| with the sign bit of b: signbit has a lowering of its own
    # (torch-mlir has none for either).
    dtype = torch.result_type(a, b)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    magnitude = a.to(dtype).abs()
    negative = torch.signbit(b) if isinstance(b, torch.Tensor) else math.copysign(1.0, b) < 0
    if isinstance(negative, bool):
        return -magnitude if negative else magnitude
    return torch.where(negative, -magnitude, magnitude)


def _rad2deg(x):
    # torch-mlir multiplies by 57.295827908797776 (180 / pi is 57.29577951308232).
    return (x if x.dtype.is_floating_point else x.to(torch.get_default_dtype())) * (180 / math.pi)


def _decompositions() -> dict:
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    table = dict(get_decomposition_table())
    # torch-mlir lowers layer norm whole, in the input's precision; its
    # decomposition ends in a variance that torch-mlir computes in f64.
    del table[torch.ops.aten.native_layer_norm.default]
    table[torch.ops.aten.split_with_sizes.default] = _split_with_sizes
    table[torch.ops.aten.repeat_interleave.Tensor] = _repeat_interleave
    table[torch.ops.aten._embedding_bag_forward_only.default] = _embedding_bag
    table[torch.ops.aten._embedding_bag.default] = _embedding_bag
    table[torch.ops.aten.linalg_vector_norm.default] = _vector_norm
    table[torch.ops.aten.rad2deg.default] = _rad2deg
    table[torch.ops.aten.copysign.Tensor] = _copysign
    table[torch.ops.aten.copysign.Scalar] = _copysign
    table[torch.ops.aten.permute_copy.default] = _permute_copy
    table[torch.ops.aten.scatter.reduce] = _scatter_reduce_op
    table[torch.ops.aten.scatter.value_reduce] = _scatter_reduce_op
    table[torch.ops.aten.fmax.default] = _fmax_fmin(True)
    table[torch.ops.aten.fmin.default] = _fmax_fmin(False)
    table[torch.ops.aten.amax.default] = _when_scalar(torch.clone)
    table[torch.ops.aten.amin.default] = _when_scalar(torch.clone)
    # An integer's logsumexp is a float: torch-mlir's decomposition.
    table[torch.ops.aten.logsumexp.default] = _when_scalar(
        lambda x: x.clone() if x.dtype.is_floating_point else NotImplemented,
        table[torch.ops.aten.logsumexp.default],
    )
    for extreme in (torch.ops.aten.max.dim, torch.ops.aten.min.dim):
        table[extreme] = _when_scalar(lambda x: (x.clone(), _zero_index(x)))
    table[torch.ops.aten.argmax.default] = _when_scalar(_zero_index)
    table[torch.ops.aten.argmin.default] = _when_scalar(_zero_index)
    table[torch.ops.aten.roll.default] = _roll
    table[torch.ops.aten.masked_scatter.default] = _masked_scatter
    table[torch.ops.aten.diagonal_scatter.default] = _diagonal_scatter
    table[torch.ops.aten.sort.stable] = _sort_stable
    table[torch.ops.aten.scatter_reduce.two] = _scatter_reduce
    table[torch.ops.aten.constant_pad_nd.default] = _constant_pad_nd
    table[torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default] = _flash_attention
    table[torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default] = (
        _flash_attention_backward
    )
    return table


# Ops whose int ``dim`` (their second argument) indexes their first
# argument's dims, and that torch-mlir lowers wrong with a negative one:
# ``scatter_add(x, -1, ...)`` died of SIGSEGV, ``renorm(x, 2, -1, m)``
# normalised the wrong slices.
_DIM_FROM_THE_FRONT = {
    torch.ops.aten.gather.default,
    torch.ops.aten.scatter.src,
    torch.ops.aten.scatter.value,
    torch.ops.aten.scatter.reduce,
    torch.ops.aten.scatter.value_reduce,
    torch.ops.aten.scatter_add.default,
    torch.ops.aten.scatter_reduce.two,
    torch.ops.aten.index_select.default,
}


def count_dims_from_the_front(gm: fx.GraphModule) -> int:
    """Rewrites a negative ``dim`` of the ops above (and ``renorm``'s, its
    third argument) as its index from the front. Returns how many."""
    count = 0
    for node in gm.graph.nodes:
        at = (
            1
            if node.target in _DIM_FROM_THE_FRONT
            else 2
            if node.target is torch.ops.aten.renorm.default
            else None
        )
        if at is None or len(node.args) <= at:
            continue
        dim, val = node.args[at], value_of(node.args[0])
        if isinstance(dim, int) and dim < 0 and isinstance(val, torch.Tensor):
            node.args = (*node.args[:at], dim % max(val.dim(), 1), *node.args[at + 1 :])
            count += 1
    if count:
        gm.recompile()
    return count


_EMBEDDING_BAGS = (torch.ops.aten._embedding_bag_forward_only.default, torch.ops.aten._embedding_bag.default)
_IMPORTS_WRONG = {
    *_EMBEDDING_BAGS,
    torch.ops.aten.scatter_reduce.two,
    torch.ops.aten.linalg_vector_norm.default,
    torch.ops.aten.constant_pad_nd.default,
    torch.ops.aten.rad2deg.default,
}


def imports_wrong(gm: fx.GraphModule) -> bool:
    """Whether ``gm`` holds an op that torch-mlir imports into IR IREE
    cannot compile, or into a wrong result, but that the decompositions
    rewrite: a scatter_reduce without self, a negative pad, an
    embedding_bag with per-sample weights or a padding index (torch-mlir
    ignores both), a 0-norm (torch-mlir's is inf) or one of an order known
    only at run time, rad2deg (torch-mlir's constant is off in the sixth
    digit).
    Raises :class:`Unsupported` for such an embedding_bag whose other
    results are read (a training graph's, for its backward)."""
    aten = torch.ops.aten
    for node in gm.graph.nodes:
        if node.target not in _IMPORTS_WRONG:
            continue
        args = bound_args(node)
        if node.target in _EMBEDDING_BAGS:
            if args["per_sample_weights"] is None and args["padding_idx"] in (None, -1):
                continue
            if any(u.target is not operator.getitem or u.args[1] != 0 for u in node.users):
                raise Unsupported(
                    "embedding_bag with per_sample_weights or padding_idx whose extra results are read", node
                )
            return True
        if node.target is aten.scatter_reduce.two and args["include_self"] is False:
            return True
        if node.target is aten.linalg_vector_norm.default and not (
            isinstance(args["ord"], (int, float)) and args["ord"] != 0
        ):
            return True  # a 0-norm, or an order known only at run time
        if node.target is aten.rad2deg.default:
            return True
        if node.target is aten.constant_pad_nd.default and any(
            isinstance(p, int) and p < 0 for p in args["pad"]
        ):
            return True
    return False


class ImportFailed(Unsupported):
    """torch-mlir could not lower a dense piece."""


def decompose(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` retraced through torch-mlir's decomposition table (what its
    own export path applies), under the graph's fake mode and shape
    environment; ragged custom ops stay as they are."""
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import make_fx

    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    # The graph's own mode first: a rewritten graph may carry a mode of its
    # own, other than the tracer's.
    own = [v.fake_mode for v in vals if isinstance(v, torch._subclasses.fake_tensor.FakeTensor)]
    mode = own[0] if own else detect_fake_mode(vals)
    if mode is None:
        raise Unsupported("no fake values to retrace the graph with")
    with mode:
        out = make_fx(gm, decomposition_table=_decompositions(), tracing_mode="real")(*vals)
    out.graph.eliminate_dead_code()
    out.recompile()
    return out


@contextlib.contextmanager
def _stderr_to(buffer: list[str]):
    """Collects what native code writes to stderr (torch-mlir prints its
    diagnostics there, not into its exception) into ``buffer``."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            buffer.append(sink.read().decode(errors="replace"))


def _torch_mlir_error(e: Exception, diagnostics: str = "") -> str:
    text = f"{e}\n{diagnostics}"
    op = next((m for m in (p.search(text) for p in _OP_NAMES) if m), None)
    error = next((ln.strip() for ln in text.splitlines() if ln.strip().startswith(("error:", "loc("))), "")
    error = error.split("error:", 1)[-1].strip()
    if op:
        return f"{op.group(1).removeprefix('torch.')}: {error[:240]}"
    return (error or (text.splitlines()[0] if text else type(e).__name__))[:300]


def import_dense(piece: DensePiece, owner: fx.GraphModule) -> str:
    """torch-mlir's import of ``piece`` to linalg-on-tensors, as text (generic
    form when it holds ops of :data:`PASSTHROUGH_DIALECTS`)."""
    try:
        import torch_mlir.fx as tfx
    except ImportError as e:
        raise Unsupported("torch-mlir is not installed (pip install torch-mlir==20261001)") from e
    sub = piece.graph_module(owner)
    diagnostics: list[str] = []
    try:
        with _stderr_to(diagnostics):
            module = tfx.stateless_fx_import(sub, output_type="linalg-on-tensors", model_name=piece.name)
    except Exception as e:  # torch-mlir raises many kinds
        raise ImportFailed(f"torch-mlir cannot lower {_torch_mlir_error(e, ''.join(diagnostics))}") from e
    text = str(module)
    if any(f"{d}." in text for d in PASSTHROUGH_DIALECTS):
        text = module.operation.get_asm(print_generic_op_form=True)
    return text


def build_module(plan: Plan, owner: fx.GraphModule) -> tuple[ir.Module, dict[str, str]]:
    """``main`` (arguments ``plan.device_inputs``, results
    ``plan.device_outputs``) plus one private function per dense piece, in
    the current context (which must allow unregistered dialects); also
    returns torch-mlir's text of each piece, by name."""
    texts = {step.name: import_dense(step, owner) for step in plan.steps if isinstance(step, DensePiece)}
    module = ir.Module.create()
    callees: dict[str, func.FuncOp] = {}
    # Module-level symbols the pieces share: torch-mlir gives every piece
    # with random ops the same `ml_program.global @global_seed`, which the
    # pieces then draw from in turn, as one stream (seeded per call below).
    shared: dict[str, str] = {}
    for name, text in texts.items():
        piece_module = ir.Module.parse(text)
        for op in list(piece_module.body.operations):
            if isinstance(op, func.FuncOp) or op.operation.name == "func.func":
                op.operation.attributes["sym_visibility"] = ir.StringAttr.get("private")
                callees[name] = op
            elif "sym_name" in op.operation.attributes:
                symbol = ir.StringAttr(op.operation.attributes["sym_name"]).value
                if symbol in shared:
                    if shared[symbol] != str(op):
                        raise Unsupported(f"dense pieces define the symbol @{symbol} differently")
                    continue
                shared[symbol] = str(op)
            module.body.append(op.detach_from_parent())

    arg_types = [boundary_type(value_type(n)) for n in plan.device_inputs]
    result_types = [boundary_type(value_type(n)) for n in plan.device_outputs]
    # The random stream starts from a seed the caller draws from torch's
    # generator, so that compiled random ops follow torch.manual_seed and
    # no two calls (or processes) repeat a draw.
    plan.seeded = _SEED_GLOBAL in shared
    seed_type = ir.RankedTensorType.get([], ir.IntegerType.get_signless(64))
    with ir.InsertionPoint(module.body):
        main = func.FuncOp("main", (arg_types + [seed_type] * plan.seeded, result_types))
    block = main.add_entry_block()
    em = Emitter()
    with ir.InsertionPoint(block):
        if plan.seeded:
            ir.Operation.create(
                "ml_program.global_store",
                operands=[block.arguments[-1]],
                attributes={"global": ir.FlatSymbolRefAttr.get(_SEED_GLOBAL)},
            )
        for node, arg in zip(plan.device_inputs, block.arguments, strict=False):
            em.env[node] = _convert_elements(arg, value_type(node))
        for step in plan.steps:
            if isinstance(step, OpStep):
                if step.node.target is operator.getitem:  # one result of a multi-result op
                    source, index = step.node.args
                    em.env[step.node] = em[source][index]
                    continue
                if empty_result(step.node):
                    result = value_type(step.node)
                    em.env[step.node] = tensor.empty(list(result.shape), result.element_type)
                    continue
                lower = LOWERINGS.get(step.node.target)
                emit = lower.emit if lower is not None else _reshape
                em.env[step.node] = emit(em, step.node)
                continue
            callee = callees[step.name]
            ftype = ir.FunctionType(ir.TypeAttr(callee.attributes["function_type"]).value)
            if len(ftype.inputs) != len(step.inputs) or len(ftype.results) != len(step.outputs):
                raise Unsupported(
                    f"torch-mlir imported {step.name} with {len(ftype.inputs)} arguments and "
                    f"{len(ftype.results)} results, expected {len(step.inputs)} and {len(step.outputs)}"
                )
            args = [em.cast(em[n], t) for n, t in zip(step.inputs, ftype.inputs, strict=True)]
            call = func.CallOp(list(ftype.results), ir.FlatSymbolRefAttr.get(step.name), args)
            for node, result in zip(step.outputs, call.results, strict=True):
                em.env[node] = result
        results = [em.cast(em[n], value_type(n)) for n in plan.device_outputs]
        func.ReturnOp([_convert_elements(r, t) for r, t in zip(results, result_types, strict=True)])
    return module, texts


#: torch-mlir's state of the random ops of a dense piece.
_SEED_GLOBAL = "global_seed"


def boundary_type(t: ir.Type) -> ir.Type:
    """How a value of type ``t`` crosses into and out of ``main``: bool
    tensors as i8 (the same bytes), so that no i1 tensor is an argument or
    a result. IREE 3.13's data tiling fails on an i1 argument that reaches
    a packed GEMM through elementwise ops ("'linalg.pack' op expected
    padding_value has 'i8' but got: 'i1'"), as a saved dropout mask does in
    a training step's backward."""
    if isinstance(t, ir.RankedTensorType) and t.element_type == ir.IntegerType.get_signless(1):
        return ir.RankedTensorType.get(t.shape, ir.IntegerType.get_signless(8))
    return t


def _convert_elements(value: ir.Value, want: ir.Type) -> ir.Value:
    """``value`` as ``want``: the same tensor with i8 elements for i1 ones or
    back (``arith.extui`` / ``arith.trunci`` per element); other values
    unchanged."""
    have = value.type
    if have == want or not isinstance(have, ir.RankedTensorType):
        return value
    have_elem = ir.RankedTensorType(have).element_type
    want_elem = ir.RankedTensorType(want).element_type
    widen = ir.IntegerType(want_elem).width > ir.IntegerType(have_elem).width
    return _map_elements(
        value, want_elem, lambda x: arith.extui(want_elem, x) if widen else arith.trunci(want_elem, x)
    )


def describe_steps(plan: Plan) -> list[str]:
    """One line per step, for debug dumps."""
    out = []
    for step in plan.steps:
        if isinstance(step, OpStep):
            out.append(f"ragged: {describe(step.node)}")
        else:
            out.append(
                f"{step.name}: {len(step.nodes)} nodes, {len(step.inputs)} in, {len(step.outputs)} out"
            )
    return out
