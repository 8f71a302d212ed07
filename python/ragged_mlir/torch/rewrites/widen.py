"""Narrow types computed in a wider one, as eager computes them.

**uint8 in int64.** MLIR's integers are signless, and torch-mlir's
lowerings of many ops treat an 8-bit integer as signed: a uint8 ``sum``
came out negative, ``sort`` put 200 before 1, and ``max`` and ``//`` ended
the process. Conversions from uint8 are right; those from floats to uint8
go through int64 (a float to i8 conversion fused into its consumer
saturated at 127). :func:`widen_uint8` rewrites every other op that reads a
uint8 tensor to read it converted to int64, and converts each result whose
type that changed back to eager's type. uint8 arithmetic wraps modulo 256,
and every value of an op on int64 operands in ``[0, 256)`` agrees with it
modulo 256, so the results are eager's.

**bfloat16 and float16 in float32.** Eager computes an op on these in f32
(its "opmath" type) and rounds the result once; torch-mlir's lowerings
compute in the narrow type itself, rounding every step: a bf16 ``sum`` of
4096 numbers was 13x further from the exact sum than eager's, and layer
and batch norms, softmax, cumulative sums and the ops torch-mlir writes as
several (``logit``, ``lerp``) drifted the same way, as did ragged segment
sums. :func:`widen_low_precision` has each such op, ragged ones included,
read f32 and round its results back, which is eager's arithmetic. Matrix
products and convolutions are left as they are: they already accumulate in
f32, and their narrow operands are what the packed kernels read.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import torch
import torch.fx as fx

from ..graphs import call_with_val

__all__ = ["widen_low_precision", "widen_uint8"]

aten = torch.ops.aten

# Conversions (their operands are widened to the type they name) and
# reinterpretations of the bits: right on narrow types as they are.
_CONVERSIONS = {
    aten._to_copy.default,
    aten.view.dtype,
    torch.ops.prims.convert_element_type.default,
}

# Products that accumulate in f32 already, on narrow operands.
_PRODUCTS = {
    aten.mm.default,
    aten.bmm.default,
    aten.addmm.default,
    aten.baddbmm.default,
    aten.convolution.default,
}


def _is_view(node: fx.Node) -> bool:
    """Whether ``node`` is an ATen view (a result aliases an operand): no
    arithmetic, right in any type. Views stay views: AOTAutograd rebuilds
    an output that aliases an input from that input and the output's
    offset, so a converted copy of a piece (``chunk``'s second) came back
    as the first piece."""
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(r.alias_info is not None for r in schema.returns)


def _convert(graph: fx.Graph, node: fx.Node, dtype: torch.dtype, mode) -> fx.Node:
    return call_with_val(graph, mode, aten._to_copy.default, node, dtype=dtype)


def _widen(
    gm: fx.GraphModule, wider: Callable[[object], torch.dtype | None], skip: Callable[[fx.Node], bool]
) -> int:
    """Rewrites ``gm`` in place: each op (but those ``skip`` names) that
    reads a tensor for which ``wider`` gives a type reads it converted to
    that type, and each of its results whose type changed is converted back
    where its users read it. Returns how many ops were rewritten."""
    graph = gm.graph
    wide: dict[fx.Node, fx.Node] = {}
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or skip(node):
            continue
        old = node.meta.get("val")
        many = isinstance(old, (tuple, list))
        if not (isinstance(old, torch.Tensor) or many and all(isinstance(v, torch.Tensor) for v in old)):
            continue  # a size, or a check
        reads = [a for a in node.all_input_nodes if wider(a.meta.get("val")) is not None]
        if not reads:
            continue
        mode = reads[0].meta["val"].fake_mode
        for a in reads:
            if a not in wide:
                with graph.inserting_before(node):
                    wide[a] = _convert(graph, a, wider(a.meta["val"]), mode)
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


def _through_int64(graph: fx.Graph, node: fx.Node) -> int:
    """A conversion of floats to uint8 as one to int64, then to uint8: a
    float to i8 conversion, fused into a consumer, saturated at 127."""
    source = node.args[0]
    val = source.meta.get("val") if isinstance(source, fx.Node) else None
    if node.target is aten.view.dtype or not _uint8(node.meta.get("val")):
        return 0
    if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point:
        return 0
    with graph.inserting_before(node):
        node.replace_input_with(source, _convert(graph, source, torch.int64, val.fake_mode))
    return 1


def _uint8(value) -> torch.dtype | None:
    return torch.int64 if isinstance(value, torch.Tensor) and value.dtype == torch.uint8 else None


def widen_uint8(gm: fx.GraphModule) -> int:
    """Rewrites ``gm`` in place so that no op but a conversion computes on
    uint8 (see the module's doc). Returns how many ops were rewritten."""
    converted = sum(_through_int64(gm.graph, n) for n in list(gm.graph.nodes) if n.target in _CONVERSIONS)
    if converted:
        gm.recompile()
    return converted + _widen(gm, _uint8, lambda node: node.target in _CONVERSIONS or _is_view(node))


def _narrow_float(value) -> torch.dtype | None:
    narrow = isinstance(value, torch.Tensor) and value.dtype in (torch.bfloat16, torch.float16)
    return torch.float32 if narrow else None


def _computes_as_it_is(node: fx.Node) -> bool:
    target = node.target
    if target in _CONVERSIONS or target in _PRODUCTS or _is_view(node):
        return True
    return not isinstance(target, torch._ops.OpOverload) or target.namespace not in (
        "aten",
        "prims",
        "ragged",
    )


def widen_low_precision(gm: fx.GraphModule) -> int:
    """Rewrites ``gm`` in place so that ops on bfloat16 and float16 compute
    in float32 and round their results (see the module's doc). Returns how
    many ops were rewritten."""
    return _widen(gm, _narrow_float, _computes_as_it_is)
