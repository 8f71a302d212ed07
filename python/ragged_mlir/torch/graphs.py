"""FX graph helpers the backend and the rewrites share: reading a node's
fake value and arguments, adding a node with its fake value, and the error
a graph the compiled path cannot run raises."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx

__all__ = ["Unsupported", "bound_args", "call_with_val", "describe", "value_of"]


class Unsupported(Exception):
    """The graph holds something the compiled path cannot run; the message
    names the node and the reason."""

    def __init__(self, reason: str, node: fx.Node | None = None):
        self.reason = reason
        self.node = node
        super().__init__(f"{describe(node)}: {reason}" if node is not None else reason)


def describe(node: fx.Node) -> str:
    """``aten.foo.default`` (at model.py:12) for messages."""
    target = node.target if node.op == "call_function" else node.op
    name = getattr(target, "__name__", None) if not isinstance(target, torch._ops.OpOverload) else None
    text = str(target) if name is None or name == "<lambda>" else name
    where = ""
    trace = node.meta.get("stack_trace")
    if trace:
        lines = [ln.strip() for ln in trace.strip().splitlines() if ln.strip().startswith("File ")]
        if lines:
            where = f" ({lines[-1]})"
    return f"{text}{where}"


def value_of(node: Any) -> Any:
    """The fake value a node carries (``meta['val']``), or the constant itself."""
    if isinstance(node, fx.Node):
        return node.meta.get("val", node.meta.get("example_value"))
    return node


def call_with_val(graph: fx.Graph, mode: Any, target: Callable, *args: Any, **kwargs: Any) -> fx.Node:
    """A node calling ``target`` at ``graph``'s insertion point, its fake
    value computed from its arguments' in the fake mode ``mode``."""
    node = graph.call_function(target, args, kwargs)
    vals, kwvals = fx.node.map_arg((args, kwargs), value_of)
    with mode:
        node.meta["val"] = target(*vals, **kwvals)
    return node


def bound_args(node: fx.Node) -> dict:
    """The arguments of the ATen call ``node`` by schema name, defaults
    filled in. Raises TypeError for a required argument it lacks."""
    schema = node.target._schema
    out, pos = {}, list(node.args)
    for i, arg in enumerate(schema.arguments):
        if arg.kwarg_only:
            if arg.name in node.kwargs:
                out[arg.name] = node.kwargs[arg.name]
            elif arg.has_default_value():
                out[arg.name] = arg.default_value
        elif i < len(pos):
            out[arg.name] = pos[i]
        elif arg.name in node.kwargs:
            out[arg.name] = node.kwargs[arg.name]
        elif arg.has_default_value():
            out[arg.name] = arg.default_value
        else:
            raise TypeError(f"{node.name}: missing argument {arg.name}")
    return out
