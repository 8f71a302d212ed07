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
import operator
import os
import re
import sys
import tempfile
from collections.abc import Callable

import torch
import torch.fx as fx

from ... import ir
from ...dialects import arith, func, tensor
from ...dialects import ragged as rd
from .. import ops  # noqa: F401  (registers torch.ops.ragged.*)
from ..graphs import Unsupported, describe, value_of
from ..rewrites.reshapes import reshape_groups
from .plan import DTYPES, DensePiece, OpStep, Plan
from .registry import LOWERINGS, empty_result

__all__ = [
    "ImportFailed",
    "PASSTHROUGH_DIALECTS",
    "Emitter",
    "build_module",
    "describe_steps",
    "import_dense",
]

#: Dialects torch-mlir may leave in linalg-on-tensors that IREE lowers itself.
PASSTHROUGH_DIALECTS = ("tm_tensor",)


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
        values = rd.values(packed)
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


_OP_NAMES = (
    re.compile(r'name = "(torch\.[A-Za-z0-9_.]+)"'),  # an op torch-mlir has no definition for
    re.compile(r"operation '(torch\.[A-Za-z0-9_.]+)'"),
)


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


class ImportFailed(Unsupported):
    """torch-mlir could not lower a dense piece."""


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
