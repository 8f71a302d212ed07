"""Device values checked as eager checks them, before the op that needs them.

Eager raises for an index outside the dim it reads or writes: an embedding
id past the table (a tokenizer whose vocabulary does not match the model's),
an ``index_select``, ``gather`` or ``x[i]`` index past the rows, a
``scatter`` index past the output. The gathers and scatters torch-mlir
compiles these into read or write whatever lies at that address: a compiled
model returned garbage rows, or the process died. :func:`check_indices`
puts a check before each such op of a graph, and the call fails with a
message naming the op, the dim and its size. ``index_put`` and
``index_add`` are emitted with their checks built in
(:mod:`ragged_mlir.torch.backend.emit`).

Eager raises for an integer division by zero too; IREE divides by
``select(d == 0, 1, d)`` instead (``ragged-guard-integer-division``), so
:func:`check_divisors` fails the call where a divisor is 0.

A check is one reduction, and its result is read on the host before the
rest of the call runs.
"""

from __future__ import annotations

import torch
import torch.fx as fx
from torch.fx.experimental.symbolic_shapes import statically_known_true

from ..graphs import call_with_val as _add

__all__ = ["check_divisors", "check_indices"]

aten = torch.ops.aten

# op: (name in the message, whether a negative index counts from the end).
# Each indexes the dim ``dim`` of its first argument with its index argument.
_CHECKED = {
    aten.embedding.default: ("embedding", False),
    aten.index_select.default: ("index_select", False),
    aten.gather.default: ("gather", False),
    aten.scatter.src: ("scatter", False),
    aten.scatter.value: ("scatter", False),
    aten.scatter.reduce: ("scatter", False),
    aten.scatter.value_reduce: ("scatter", False),
    aten.scatter_add.default: ("scatter_add", False),
    aten.scatter_reduce.two: ("scatter_reduce", False),
    aten.index.Tensor: ("index", True),
}


def _indexed(node: fx.Node) -> list[tuple[fx.Node, fx.Node, int]]:
    """``(tensor, index, dim)`` for each index ``node`` takes."""
    if node.target is aten.embedding.default:
        weight, ids = node.args[:2]
        return [(weight, ids, 0)]
    if node.target is aten.index.Tensor:
        x, indices = node.args[:2]
        return [
            (x, index, dim)
            for dim, index in enumerate(indices)
            if isinstance(index, fx.Node)
            and index.meta["val"].dtype is not torch.bool  # a mask reads no index
        ]
    x, dim, index = node.args[:3]
    return [(x, index, dim % max(x.meta["val"].dim(), 1))]


# Ops whose result holds the values of their first argument and no others.
_SAME_VALUES = {
    aten.expand.default,
    aten.unsqueeze.default,
    aten.squeeze.dim,
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.permute.default,
    aten.t.default,
    aten.transpose.int,
    aten.clone.default,
}


def _values_of(index: fx.Node) -> fx.Node:
    """The node whose values ``index`` holds, past the views that only
    rearrange them (``gather`` and ``scatter`` take ``i.unsqueeze(1).expand(...)``):
    the check reads fewer elements, and IREE's CPU backend cannot compile a
    reduction over some broadcasts."""
    while index.op == "call_function" and index.target in _SAME_VALUES:
        index = index.args[0]
    return index


def _message(name: str, size, dim: int) -> str:
    if name == "embedding":
        return f"embedding: an id is out of range for a table of {size} rows"
    of = f"size {size}" if isinstance(size, int) else "the input"
    return f"{name}: an index is out of range for dim {dim} of {of}"


def _assert_all(graph: fx.Graph, mode, holds: fx.Node, message: str) -> None:
    """An ``_assert_async`` that every element of the bool tensor ``holds`` is true."""
    _add(graph, mode, aten._assert_async.msg, _add(graph, mode, aten.all.default, holds), message)


def _early(graph: fx.Graph, nodes: list[fx.Node]):
    """An insertion point as early as ``nodes`` allow: a check splits the
    graph's dense piece in two, and IREE reads a view made in one piece and
    read in the other wrongly (see ragged-fold-view-reads)."""
    order = {n: k for k, n in enumerate(graph.nodes)}
    inputs = [n for n in graph.nodes if n.op == "placeholder"]
    return graph.inserting_before(max(nodes + inputs[-1:], key=order.__getitem__).next)


_DIVISIONS = {
    aten.div.Tensor_mode: "div",
    aten.floor_divide.default: "floor_divide",
    aten.remainder.Tensor: "remainder",
    aten.fmod.Tensor: "fmod",
}


def check_divisors(gm: fx.GraphModule) -> int:
    """Rewrites ``gm`` in place: before each integer division or remainder
    by a tensor, an ``_assert_async`` that no divisor is 0. Returns how many
    divisors were checked."""
    graph = gm.graph
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _DIVISIONS:
            continue
        divisor = node.args[1]
        val = divisor.meta.get("val") if isinstance(divisor, fx.Node) else None
        if not isinstance(val, torch.Tensor) or val.dtype.is_floating_point or val.dtype is torch.bool:
            continue
        if val.fake_mode is None or statically_known_true(val.numel() == 0):
            continue
        divisor = _values_of(divisor)
        with _early(graph, [divisor]):
            nonzero = _add(graph, val.fake_mode, aten.ne.Scalar, divisor, 0)
            _assert_all(graph, val.fake_mode, nonzero, f"{_DIVISIONS[node.target]}: integer division by zero")
        count += 1
    if count:
        graph.lint()
        gm.recompile()
    return count


def check_indices(gm: fx.GraphModule) -> int:
    """Rewrites ``gm`` in place: before each gather or scatter of
    ``_CHECKED``, an ``_assert_async`` that every index lies in the dim it
    indexes (``[0, n)``, or ``[-n, n)`` where a negative index counts from
    the end). Returns how many indices were checked."""
    graph = gm.graph
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in _CHECKED:
            continue
        name, negative = _CHECKED[node.target]
        for x, index, dim in _indexed(node):
            index = _values_of(index)
            # The fake values of the new nodes come from the index's own
            # mode (a graph may hold values of more than one).
            mode = getattr(index.meta["val"], "fake_mode", None)
            if mode is None or statically_known_true(index.meta["val"].numel() == 0):
                continue
            shape = x.meta["val"].shape
            size = shape[dim] if len(shape) else 1  # a scalar indexes as one element
            with _early(graph, [index] + ([] if isinstance(size, int) else [x])):
                n = size if isinstance(size, int) else _add(graph, mode, aten.sym_size.int, x, dim)
                if negative:
                    above = _add(graph, mode, aten.le.Scalar, _add(graph, mode, aten.neg.default, index), n)
                else:
                    above = _add(graph, mode, aten.ge.Scalar, index, 0)
                below = _add(graph, mode, aten.lt.Scalar, index, n)
                inside = _add(graph, mode, aten.logical_and.default, below, above)
                _assert_all(graph, mode, inside, _message(name, size, dim))
            count += 1
    if count:
        graph.lint()
        gm.recompile()
    return count
