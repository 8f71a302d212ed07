"""uint8 computed in int64, as eager computes it.

MLIR's integers are signless, and torch-mlir's lowerings of many ops treat
an 8-bit integer as signed: a uint8 ``sum`` came out negative, ``sort``
put 200 before 1, and ``max`` and ``//`` ended the process. Conversions
from uint8 are right; those from floats to uint8 go through int64 (a float
to i8 conversion fused into its consumer saturated at 127).
:func:`widen_uint8` rewrites every other op that reads a uint8 tensor to
read it converted to int64, and converts each result whose type that
changed back to eager's type. uint8 arithmetic wraps
modulo 256, and every value of an op on int64 operands in ``[0, 256)``
agrees with it modulo 256, so the results are eager's.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx

from .graph import call_with_val

__all__ = ["widen_uint8"]

aten = torch.ops.aten

# Ops right on uint8 as they are: conversions (their operands are widened
# to the type they name), and reinterpretations of the bits.
_AS_THEY_ARE = {
    aten._to_copy.default,
    aten.view.dtype,
    torch.ops.prims.convert_element_type.default,
}


def _is_uint8(value) -> bool:
    return isinstance(value, torch.Tensor) and value.dtype == torch.uint8


def _convert(graph: fx.Graph, node: fx.Node, dtype: torch.dtype, mode) -> fx.Node:
    return call_with_val(graph, mode, aten._to_copy.default, node, dtype=dtype)


def _through_int64(graph: fx.Graph, node: fx.Node) -> int:
    """A conversion of floats to uint8 as one to int64, then to uint8: a
    float to i8 conversion, fused into a consumer, saturated at 127."""
    source = node.args[0]
    val = source.meta.get("val") if isinstance(source, fx.Node) else None
    if node.target is aten.view.dtype or not _is_uint8(node.meta.get("val")):
        return 0
    if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point:
        return 0
    with graph.inserting_before(node):
        node.replace_input_with(source, _convert(graph, source, torch.int64, val.fake_mode))
    return 1


def widen_uint8(gm: fx.GraphModule) -> int:
    """Rewrites ``gm`` in place so that no op but a conversion computes on
    uint8 (see the module's doc). Returns how many ops were rewritten."""
    graph = gm.graph
    wide: dict[fx.Node, fx.Node] = {}
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target in _AS_THEY_ARE:
            count += _through_int64(graph, node)
            continue
        old = node.meta.get("val")
        many = isinstance(old, (tuple, list))
        if not (isinstance(old, torch.Tensor) or many and all(isinstance(v, torch.Tensor) for v in old)):
            continue  # a size, or a check
        reads = [a for a in node.all_input_nodes if _is_uint8(a.meta.get("val"))]
        if not reads:
            continue
        mode = reads[0].meta["val"].fake_mode
        for a in reads:
            if a not in wide:
                with graph.inserting_before(node):
                    wide[a] = _convert(graph, a, torch.int64, mode)
        node.args, node.kwargs = fx.node.map_arg((node.args, node.kwargs), lambda a: wide.get(a, a))
        args, kwargs = fx.node.map_arg((node.args, node.kwargs), lambda a: a.meta["val"])
        with mode:
            node.meta["val"] = node.target(*args, **kwargs)
        node.meta.pop("tensor_meta", None)  # the importer reads types from it before "val"
        # Each result whose type changed converted back, where its users read it.
        results = [(node, old, node.meta["val"])]
        if many:
            results = [
                (u, old[u.args[1]], node.meta["val"][u.args[1]])
                for u in node.users
                if u.target is operator.getitem
            ]
        for result, was, now in results:
            result.meta["val"] = now
            result.meta.pop("tensor_meta", None)
            if now.dtype == was.dtype:
                continue
            with graph.inserting_after(result):
                back = _convert(graph, result, was.dtype, mode)
            result.replace_all_uses_with(back, delete_user_cb=lambda user, back=back: user is not back)
        count += 1
    if count:
        graph.lint()
        gm.recompile()
    return count
