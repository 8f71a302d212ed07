"""What a graph from AOTAutograd holds, and how it splits for the compiler.

A forward (or backward, or inference) graph mixes three kinds of nodes:

* **device nodes**: ATen ops on tensors. Runs of them between emitted nodes
  become *dense pieces*, each imported by torch-mlir as one function.
* **emitted nodes**: ``torch.ops.ragged.*`` calls, emitted as ragged-dialect
  ops, and reshapes whose grouping of dynamic dims torch-mlir cannot see,
  emitted as tensor ops (see :mod:`ragged_mlir.torch.backend.emit`).
* **host nodes**: integer, float and bool arithmetic on sizes (``sym_size``,
  ``s0 + 1``, ``sym_max``...) and assertions on them. Their values are
  symbolic expressions over the graph's input sizes and SymInt inputs, so the
  host evaluates them from the actual arguments at every call; the device
  never computes a shape.

:func:`plan_graph` classifies every node, checks that the graph holds only
what the compiler handles (and raises :class:`Unsupported`, naming the node
and the reason, otherwise), and returns a :class:`Plan`: the steps in order,
what ``main`` takes and returns, and how each graph output is rebuilt.
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx as fx

from ..graphs import Unsupported, value_of
from ..rewrites.reshapes import static_view_sizes

__all__ = [
    "DTYPES",
    "DensePiece",
    "Output",
    "Plan",
    "OpStep",
    "SymbolTable",
    "Unsupported",
    "plan_graph",
]

#: Element types the compiled path takes and returns, as MLIR spells them.
DTYPES = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "i8",
    torch.bool: "i1",
}

_SCALARS = (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)

#: Host-only ops whose value is None: checks on sizes (evaluated on the host
#: when their symbols are bound) and range hints (nothing to do at run time).
_HOST_EFFECTS = {
    torch.ops.aten._assert_scalar.default,
    torch.ops.aten.sym_constrain_range.default,
    torch.ops.aten.sym_constrain_range_for_size.default,
}


def is_scalar(val: Any) -> bool:
    return isinstance(val, _SCALARS)


def _is_nested_int(val: Any) -> bool:
    return isinstance(val, torch.SymInt) and val.node.is_nested_int()


# --------------------------------------------------------------------------
# Host evaluation of sizes
# --------------------------------------------------------------------------


class SymbolTable:
    """Binds the graph's size symbols to the actual arguments.

    Every symbol that appears on its own as an input's dim size, or as a
    SymInt / SymFloat / SymBool input, is read from the arguments of a call;
    a host value is then its symbolic expression evaluated at those symbols.
    Evaluations are cached per distinct binding (a model sees few)."""

    def __init__(self, placeholders: Sequence[fx.Node]):
        self._where: dict[Any, tuple[int, int | None]] = {}
        for i, ph in enumerate(placeholders):
            val = value_of(ph)
            if isinstance(val, torch.Tensor):
                for d, size in enumerate(val.shape):
                    if isinstance(size, torch.SymInt) and not _is_nested_int(size):
                        expr = size.node.expr
                        if expr.is_Symbol:
                            self._where.setdefault(expr, (i, d))
            elif is_scalar(val) and not isinstance(val, (int, float, bool)) and not _is_nested_int(val):
                expr = val.node.expr
                if expr.is_Symbol:
                    self._where.setdefault(expr, (i, None))

    def evaluator(self, val: Any, node: fx.Node) -> Callable[[Sequence[Any]], Any]:
        """A function of the call's arguments giving ``val`` (a scalar)."""
        if isinstance(val, (bool, int, float)):
            return lambda args: val
        if _is_nested_int(val):
            raise Unsupported(
                "a nested-int size (the ragged dim of a PyTorch NJT) is needed at run time", node
            )
        expr = val.node.expr
        missing = [s for s in expr.free_symbols if s not in self._where]
        if missing:
            raise Unsupported(
                f"its value {expr} depends on {', '.join(map(str, missing))}, which no input size determines "
                f"(a data-dependent size)",
                node,
            )
        symbols = sorted(expr.free_symbols, key=str)
        where = [self._where[s] for s in symbols]
        at = _substitution(val, symbols)
        return lambda args: at(tuple(int(args[i]) if d is None else args[i].shape[d] for i, d in where))

    def result_evaluator(
        self, val: Any, node: fx.Node, sized: Sequence[tuple[fx.Node, Any]], claim: Callable[[fx.Node], int]
    ) -> Callable[[Sequence[Any], Sequence[Any]], Any]:
        """A function of the call's arguments and device results giving
        ``val``, for a size that no input determines but a device result's
        shape holds (the row count of items picked by an index): ``sized``
        lists the device-computed tensors with their fake values, and
        ``claim(node)`` makes one a result of ``main`` and returns its
        position there."""
        if not is_scalar(val) or isinstance(val, (bool, int, float)) or _is_nested_int(val):
            plain = self.evaluator(val, node)
            return lambda args, results: plain(args)
        expr = val.node.expr
        bound: dict[Any, tuple[fx.Node, int]] = {}
        for s in expr.free_symbols:
            if s in self._where:
                continue
            for src, t in sized:
                d = next(
                    (d for d, n in enumerate(t.shape) if isinstance(n, torch.SymInt) and n.node.expr == s),
                    None,
                )
                if d is not None:
                    bound[s] = (src, d)
                    break
            else:
                self.evaluator(val, node)  # raises, naming the symbol no input or result holds
        symbols = sorted(expr.free_symbols, key=str)
        # ("result", k, d): dim d of main's result k; ("arg", i, d): as evaluator.
        where = [
            ("result", claim(bound[s][0]), bound[s][1]) if s in bound else ("arg", *self._where[s])
            for s in symbols
        ]
        at = _substitution(val, symbols)

        def value(src: str, i: int, d: int | None, args: Sequence[Any], results: Sequence[Any]) -> int:
            if src == "result":
                return results[i].shape[d]
            return int(args[i]) if d is None else args[i].shape[d]

        def evaluate(args: Sequence[Any], results: Sequence[Any]) -> Any:
            return at(tuple(value(*w, args, results) for w in where))

        return evaluate


def _substitution(val: Any, symbols: Sequence[Any]) -> Callable[[tuple], Any]:
    """``val``'s expression at given values of ``symbols``, cached per binding."""
    expr = val.node.expr
    cast = bool if isinstance(val, torch.SymBool) else float if isinstance(val, torch.SymFloat) else int
    cache: dict[tuple, Any] = {}

    def at(key: tuple) -> Any:
        out = cache.get(key)
        if out is None:
            out = cache[key] = cast(expr.xreplace(dict(zip(symbols, key, strict=True))))
        return out

    return at


# --------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------


@dataclasses.dataclass
class DensePiece:
    """A run of device nodes imported as one function. ``inputs`` are nodes
    of the graph (tensors, and scalars the host supplies); ``outputs`` are
    its tensor nodes used after it."""

    name: str
    nodes: list[fx.Node]
    inputs: list[fx.Node] = dataclasses.field(default_factory=list)
    outputs: list[fx.Node] = dataclasses.field(default_factory=list)

    def graph_module(self, owner: fx.GraphModule) -> fx.GraphModule:
        """The piece as a GraphModule of its own (constants copied from ``owner``)."""
        g = fx.Graph()
        env: dict[fx.Node, fx.Node] = {}
        for node in self.inputs:
            ph = g.placeholder(node.name)
            ph.meta = dict(node.meta)
            env[node] = ph
        for node in self.nodes:
            sizes = static_view_sizes(node)
            if sizes is not None:
                # The size arguments are not inputs of the piece (plan_graph).
                copy = g.create_node(node.op, node.target, (env[node.args[0]], sizes), name=node.name)
                copy.meta = dict(node.meta)
                env[node] = copy
                continue
            env[node] = g.node_copy(node, lambda a: env[a])
        g.output(tuple(env[n] for n in self.outputs))
        return fx.GraphModule(owner, g)


@dataclasses.dataclass
class OpStep:
    """One node the backend emits itself (a ragged op, a reshape)."""

    node: fx.Node


@dataclasses.dataclass
class Output:
    """How one graph output is rebuilt: ``kind`` is ``device`` (result
    ``index`` of ``main``), ``input`` (argument ``index`` itself), ``host``
    (``evaluate(args)``), ``view`` (``evaluate(args, results)``: views of an
    input or of a device result replayed on the host), ``late``
    (``evaluate(args, results)``: a size read off a device result's shape)
    or ``constant`` (``value``)."""

    kind: str
    index: int = -1
    evaluate: Callable[..., Any] | None = None
    value: Any = None


def _is_view(node: fx.Node) -> bool:
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        src = node.args[0]
        return isinstance(src, fx.Node) and _is_view(src)
    return isinstance(node.target, torch._ops.OpOverload) and node.target.is_view


def _viewable(t: torch.Tensor, shape: Sequence[int]) -> bool:
    try:
        t.view(shape)
    except RuntimeError:
        return False
    return True


def _view_replay(
    node: fx.Node,
    base: Callable[[Sequence[Any], Sequence[Any]], torch.Tensor],
    chain: list[fx.Node],
    host_value: Callable[[fx.Node], Callable],
    own_base: bool = False,
) -> Callable[[Sequence[Any], Sequence[Any]], Any]:
    """Replays the view ops ``chain`` (ending at ``node``) on ``base``'s
    tensor. AOTAutograd rebuilds an output that aliases an input or another
    output from its size, strides and storage offset, so such outputs must
    be real views of the real base, as eager would return them. A base
    computed by the device (``own_base``) is contiguous where eager's may
    not be (attention returns a transposed layout), so a ``view`` that its
    strides do not allow becomes a ``reshape``."""
    root = chain[0].args[0]
    # A view whose sizes are constants but for one dim (-1) reads no size
    # from the host: its rows may be a count only the device knows (after a
    # strided convolution or pool).
    constant_sizes = {n: static_view_sizes(n) for n in chain}
    scalars = {
        a: host_value(a)
        for n in chain
        if constant_sizes[n] is None
        for a in n.all_input_nodes
        if a is not root and a not in chain
    }

    def replay(args: Sequence[Any], results: Sequence[Any]) -> Any:
        env: dict[fx.Node, Any] = {root: base(args, results)}
        for a, evaluate in scalars.items():
            env[a] = evaluate(args)
        for n in chain:
            if constant_sizes[n] is not None:
                fargs, fkwargs = (env[n.args[0]], constant_sizes[n]), {}
            else:
                fargs, fkwargs = fx.map_arg((n.args, n.kwargs), lambda a: env[a])
            if own_base and n.target is torch.ops.aten.view.default and not _viewable(fargs[0], fargs[1]):
                env[n] = torch.ops.aten.reshape.default(*fargs, **fkwargs)
            else:
                env[n] = n.target(*fargs, **fkwargs)
        return env[node]

    return replay


@dataclasses.dataclass
class Plan:
    placeholders: list[fx.Node]
    steps: list[DensePiece | OpStep]
    #: ``main``'s arguments: tensor placeholders, then host scalars.
    device_inputs: list[fx.Node]
    device_outputs: list[fx.Node]
    outputs: list[Output]
    #: For each host scalar among ``device_inputs``: its evaluator.
    host_values: dict[fx.Node, Callable[[Sequence[Any]], Any]]
    #: Size checks evaluated on the host before each call.
    host_checks: list[tuple[Callable[[Sequence[Any]], Any], str]]
    symbols: SymbolTable
    #: ``main`` takes one more argument after ``device_inputs``: the seed of
    #: its random ops, drawn from torch's generator for every call.
    seeded: bool = False

    @property
    def needs_device(self) -> bool:
        return bool(self.device_outputs) or any(
            isinstance(s, DensePiece) and not s.outputs for s in self.steps
        )


def _check_dtypes(node: fx.Node, val: Any) -> None:
    vals = val if isinstance(val, (tuple, list)) else (val,)
    for v in vals:
        if isinstance(v, torch.Tensor):
            if v.dtype not in DTYPES:
                raise Unsupported(f"dtype {v.dtype} (supported: {', '.join(map(str, DTYPES))})", node)
            if v.layout != torch.strided or v.is_nested:
                raise Unsupported(f"a tensor of layout {v.layout}", node)
            if v.is_quantized:
                raise Unsupported("a quantized tensor", node)


def _kind(node: fx.Node, is_emitted: Callable[[fx.Node], bool]) -> str:
    """``placeholder``, ``constant``, ``emitted``, ``host`` or ``device``."""
    if node.op == "placeholder":
        return "placeholder"
    if node.op == "get_attr":
        return "constant"
    if node.op != "call_function":
        raise Unsupported(f"unexpected node kind {node.op}", node)
    if is_emitted(node):
        return "emitted"
    val = value_of(node)
    if node.target in _HOST_EFFECTS or is_scalar(val):
        return "host"
    if node.target is operator.getitem:
        src = node.args[0]
        if isinstance(src, fx.Node) and isinstance(value_of(src), (tuple, list)):
            return "device"
    if val is None and "val" not in node.meta:
        schema = getattr(node.target, "_schema", None)
        if schema is None or schema.returns:
            raise Unsupported("no shape information (meta['val']) on this node", node)
        # An op with no results (a runtime check on tensors): it runs on the device.
    return "device"


def plan_graph(gm: fx.GraphModule, is_emitted: Callable[[fx.Node], bool]) -> Plan:
    """Classifies and splits ``gm`` (see the module docstring)."""
    nodes = list(gm.graph.nodes)
    placeholders = [n for n in nodes if n.op == "placeholder"]
    output_node = next(n for n in nodes if n.op == "output")
    symbols = SymbolTable(placeholders)
    kinds: dict[fx.Node, str] = {}
    for node in nodes:
        if node.op == "output":
            continue
        kinds[node] = _kind(node, is_emitted)
        _check_dtypes(node, value_of(node))

    # Dense pieces: device nodes between emitted nodes; a getitem stays with its source.
    steps: list[DensePiece | OpStep] = []
    piece_of: dict[fx.Node, DensePiece] = {}
    current: DensePiece | None = None
    for node in nodes:
        kind = kinds.get(node)
        if kind == "emitted":
            steps.append(OpStep(node))
            current = None
        elif kind == "device":
            src = node.args[0] if node.target is operator.getitem else None
            if isinstance(src, fx.Node) and src in piece_of:
                piece = piece_of[src]
            else:
                if current is None:
                    current = DensePiece(f"dense_{len(steps)}", [])
                    steps.append(current)
                piece = current
            piece.nodes.append(node)
            piece_of[node] = piece

    host_values: dict[fx.Node, Callable] = {}

    def host_value(node: fx.Node) -> Callable:
        if node not in host_values:
            host_values[node] = symbols.evaluator(value_of(node), node)
        return host_values[node]

    # Inputs and outputs of pieces; what main takes.
    tensor_inputs: list[fx.Node] = []
    scalar_inputs: list[fx.Node] = []

    def needs(node: fx.Node) -> None:
        kind = kinds[node]
        if kind == "placeholder":
            val = value_of(node)
            if isinstance(val, torch.Tensor):
                if node not in tensor_inputs:
                    tensor_inputs.append(node)
                return
            if _is_nested_int(val):
                raise Unsupported(
                    "a nested-int size (the ragged dim of a PyTorch NJT) is used on the device", node
                )
        if kind in ("placeholder", "host"):
            host_value(node)
            if node not in scalar_inputs:
                scalar_inputs.append(node)

    for step in steps:
        if isinstance(step, OpStep):
            for a in step.node.all_input_nodes:
                needs(a)
            continue
        inside = set(step.nodes)
        constants: list[fx.Node] = []
        for node in step.nodes:
            # A view whose sizes become constants (with -1) reads no size from
            # the host: it may follow an op whose row count only the device
            # knows (a strided convolution).
            reads = [node.args[0]] if static_view_sizes(node) is not None else node.all_input_nodes
            for a in reads:
                if a in inside:
                    continue
                if kinds[a] == "constant":  # copied into every piece that reads it
                    if a not in constants:
                        constants.append(a)
                    continue
                needs(a)
                if a not in step.inputs:
                    step.inputs.append(a)
        step.nodes[:0] = constants

    # Graph outputs.
    device_outputs: list[fx.Node] = []
    outputs: list[Output] = []
    flat = output_node.args[0]
    flat = flat if isinstance(flat, (tuple, list)) else (flat,)

    def claim(node: fx.Node) -> int:
        if node not in device_outputs:
            device_outputs.append(node)
        return device_outputs.index(node)

    for item in flat:
        if not isinstance(item, fx.Node):
            outputs.append(Output("constant", value=item))
            continue
        kind = kinds[item]
        if kind in ("device", "emitted") and _is_view(item):
            chain = [item]
            while _is_view(chain[0].args[0]):
                chain.insert(0, chain[0].args[0])
            root = chain[0].args[0]
            if kinds[root] == "placeholder":
                i = placeholders.index(root)
                base = lambda args, results, i=i: args[i]  # noqa: E731
            elif kinds[root] == "constant":
                constant = getattr(gm, root.target)
                base = lambda args, results, c=constant: c  # noqa: E731
            else:
                if root not in device_outputs:
                    device_outputs.append(root)
                k = device_outputs.index(root)
                base = lambda args, results, k=k: results[k]  # noqa: E731
            own = kinds[root] not in ("placeholder", "constant")
            outputs.append(Output("view", evaluate=_view_replay(item, base, chain, host_value, own)))
            continue
        if kind == "placeholder":
            outputs.append(Output("input", index=placeholders.index(item)))
        elif kind == "host":
            try:
                outputs.append(Output("host", evaluate=host_value(item)))
            except Unsupported:
                # A size only the device knows (a forward returning the row
                # count of picked items for its backward): read off a result.
                sized = [
                    (n, value_of(n))
                    for n in nodes
                    if kinds.get(n) in ("device", "emitted") and isinstance(value_of(n), torch.Tensor)
                ]
                outputs.append(
                    Output("late", evaluate=symbols.result_evaluator(value_of(item), item, sized, claim))
                )
        elif kind == "constant":
            outputs.append(Output("constant", value=getattr(gm, item.target)))
        else:
            if not isinstance(value_of(item), torch.Tensor):
                raise Unsupported(f"a graph output of type {type(value_of(item)).__name__}", item)
            if item not in device_outputs:
                device_outputs.append(item)
            outputs.append(Output("device", index=device_outputs.index(item)))

    # What each piece returns: tensors later steps read, and graph outputs.
    returned = set(device_outputs)
    for step in steps:
        if isinstance(step, DensePiece):
            inside = set(step.nodes)
            for node in step.nodes:
                used_later = node in returned or any(
                    kinds.get(u) in ("emitted", "device") and u not in inside for u in node.users
                )
                if used_later and isinstance(value_of(node), torch.Tensor):
                    step.outputs.append(node)

    host_checks = []
    for node in nodes:
        if kinds.get(node) == "host" and node.target is torch.ops.aten._assert_scalar.default:
            cond = node.args[0]
            msg = node.args[1] if len(node.args) > 1 else "a size check failed"
            try:
                check = host_value(cond) if isinstance(cond, fx.Node) else (lambda args, c=cond: c)
            except Unsupported:
                continue  # Dynamo guarded it already; nothing the host can evaluate
            host_checks.append((check, str(msg)))

    return Plan(
        placeholders=placeholders,
        steps=[s for s in steps if not isinstance(s, DensePiece) or s.nodes],
        device_inputs=tensor_inputs + scalar_inputs,
        device_outputs=device_outputs,
        outputs=outputs,
        host_values=host_values,
        host_checks=host_checks,
        symbols=symbols,
    )
