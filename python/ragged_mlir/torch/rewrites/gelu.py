"""GELU's tanh form with its exact constant.

torch-mlir lowers ``gelu(x, approximate="tanh")`` and its backward with
sqrt(2 / pi) written as 0.797724 (it is 0.7978846): f32 results were off by
up to 5e-5, far above f32 rounding. :func:`exact_gelu` rewrites both into
elementwise ATen ops with the right constant, computed as torch's kernels
compute them (f16 and bf16 in f32).
"""

from __future__ import annotations

import math

import torch
import torch.fx as fx

from ..graphs import call_with_val

__all__ = ["exact_gelu"]

aten = torch.ops.aten

_BETA = math.sqrt(2.0 / math.pi)
_KAPPA = 0.044715


class _Ops:
    """Builds elementwise nodes before one node, in its fake mode."""

    def __init__(self, graph: fx.Graph, mode) -> None:
        self.graph, self.mode = graph, mode

    def __call__(self, target, *args) -> fx.Node:
        return call_with_val(self.graph, self.mode, target, *args)

    def mul(self, a, b) -> fx.Node:
        return self(aten.mul.Tensor if isinstance(b, fx.Node) else aten.mul.Scalar, a, b)

    def add(self, a, b) -> fx.Node:
        return self(aten.add.Tensor if isinstance(b, fx.Node) else aten.add.Scalar, a, b)

    def cast(self, a: fx.Node, dtype: torch.dtype) -> fx.Node:
        if a.meta["val"].dtype == dtype:
            return a
        return call_with_val(self.graph, self.mode, aten._to_copy.default, a, dtype=dtype)


def _forward(ops: _Ops, x: fx.Node) -> fx.Node:
    # 0.5 x (1 + tanh(beta (x + kappa x^3)))
    cube = ops.mul(ops.mul(x, x), x)
    inner = ops.mul(ops.add(x, ops.mul(cube, _KAPPA)), _BETA)
    return ops.mul(ops.mul(x, 0.5), ops.add(ops(aten.tanh.default, inner), 1.0))


def _backward(ops: _Ops, grad: fx.Node, x: fx.Node) -> fx.Node:
    # d/dx = 0.5 (1 + t) + 0.5 x (1 - t^2) beta (1 + 3 kappa x^2), t = tanh(inner)
    square = ops.mul(x, x)
    inner = ops.mul(ops.add(x, ops.mul(ops.mul(square, x), _KAPPA)), _BETA)
    t = ops(aten.tanh.default, inner)
    left = ops.mul(ops.add(t, 1.0), 0.5)
    slope = ops.mul(ops.add(ops.mul(square, 3 * _KAPPA), 1.0), _BETA)
    one_minus = ops.add(ops.mul(ops.mul(t, t), -1.0), 1.0)
    right = ops.mul(ops.mul(ops.mul(x, 0.5), one_minus), slope)
    return ops.mul(grad, ops.add(left, right))


def exact_gelu(gm: fx.GraphModule) -> int:
    """Rewrites every tanh-form ``gelu`` and ``gelu_backward`` of ``gm`` in
    place (see the module's doc). Returns how many were rewritten."""
    graph = gm.graph
    count = 0
    for node in list(graph.nodes):
        if node.target not in (aten.gelu.default, aten.gelu_backward.default):
            continue
        if node.kwargs.get("approximate", "none") != "tanh":
            continue
        val = node.meta.get("val")
        if not isinstance(val, torch.Tensor) or not val.dtype.is_floating_point:
            continue
        compute = torch.promote_types(val.dtype, torch.float32)
        with graph.inserting_before(node):
            ops = _Ops(graph, val.fake_mode)
            args = [ops.cast(a, compute) for a in node.args]
            out = _forward(ops, *args) if node.target is aten.gelu.default else _backward(ops, *args)
            out = ops.cast(out, val.dtype)
        node.replace_all_uses_with(out)
        graph.erase_node(node)
        count += 1
    if count:
        gm.recompile()
    return count
