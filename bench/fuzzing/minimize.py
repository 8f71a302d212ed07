"""Shrinks a failing program while it keeps failing the same way.

Three moves, repeated until none helps: drop an output (and whatever only
it used), return an operand of an output's op instead of the output, and
cut an op out of the program by turning its result into an argument of the
same type (and dropping what only fed it). The predicate
decides whether a smaller program still fails; for compile failures it
compiles, so each step costs one compile.
"""

from __future__ import annotations

from collections.abc import Callable

from .program import Function, Node, RType

__all__ = ["cut", "drop_output", "minimize", "prune", "retarget"]


def prune(fn: Function) -> Function:
    """``fn`` without the nodes no output depends on (arguments included)."""
    live: set[int] = set()
    stack = [k for k, _ in fn.outputs]
    while stack:
        k = stack.pop()
        if k in live:
            continue
        live.add(k)
        stack.extend(r[0] for r in fn.nodes[k].operands)
        # An argument drawn from another value's structure needs that value.
        for key in ("of",):
            of = fn.nodes[k].attrs.get(key)
            if of and of[0] == "dim":
                stack.append(of[1][0])
    order = sorted(live)
    new_index = {k: i for i, k in enumerate(order)}
    frozen_nodes = {fn.arg_nodes[p] for p in fn.frozen}
    out = Function(fn.name)
    for k in order:
        node = fn.nodes[k]
        attrs = dict(node.attrs)
        of = attrs.get("of")
        if of and of[0] == "dim":
            attrs["of"] = ("dim", (new_index[of[1][0]], of[1][1]), of[2])
        out.nodes.append(Node(node.op, tuple((new_index[a], b) for a, b in node.operands), attrs, node.types))
    out.outputs = [(new_index[k], j) for k, j in fn.outputs]
    out.frozen = tuple(p for p, k in enumerate(out.arg_nodes) if order[k] in frozen_nodes)
    return out


def drop_output(fn: Function, i: int) -> Function:
    out = Function(fn.name, list(fn.nodes), [r for j, r in enumerate(fn.outputs) if j != i], fn.frozen)
    return prune(out)


def retarget(fn: Function, i: int, j: int) -> Function | None:
    """Output ``i`` replaced by operand ``j`` of the op that made it."""
    k, _ = fn.outputs[i]
    node = fn.nodes[k]
    if node.op == "arg" or j >= len(node.operands) or fn.nodes[node.operands[j][0]].op == "arg":
        return None
    outputs = list(fn.outputs)
    outputs[i] = node.operands[j]
    return prune(Function(fn.name, list(fn.nodes), list(dict.fromkeys(outputs)), fn.frozen))


def cut(fn: Function, k: int) -> Function | None:
    """Node ``k`` replaced by an argument of its type (single-result ops)."""
    node = fn.nodes[k]
    if node.op == "arg" or len(node.types) != 1:
        return None
    t = node.types[0]
    role = (
        {"role": "ragged", "lo": -2.0, "hi": 2.0, "away": False}
        if isinstance(t, RType)
        else {"role": "dense"}
    )
    if isinstance(t, RType) and t.dtype == "i64":
        role["vocab"] = 4
    nodes = list(fn.nodes)
    nodes[k] = Node("arg", (), role, node.types)
    frozen_nodes = {fn.arg_nodes[p] for p in fn.frozen}
    out = Function(fn.name, nodes, list(fn.outputs))
    out.frozen = tuple(p for p, a in enumerate(out.arg_nodes) if a in frozen_nodes)
    return prune(out)


def minimize(fn: Function, fails: Callable[[Function], bool], budget: int = 40) -> Function:
    """The smallest program found (within ``budget`` predicate calls) for
    which ``fails`` still holds; ``fn`` itself is assumed to fail."""
    best = prune(fn)
    calls = 0
    changed = True
    while changed and calls < budget:
        changed = False
        for i in range(len(best.outputs)):
            if len(best.outputs) <= 1 or calls >= budget:
                break
            candidate = drop_output(best, i)
            calls += 1
            if fails(candidate):
                best, changed = candidate, True
                break
        if changed:
            continue
        for i in range(len(best.outputs)):
            for j in range(3):
                candidate = retarget(best, i, j)
                if candidate is None or calls >= budget:
                    continue
                calls += 1
                if fails(candidate):
                    best, changed = candidate, True
                    break
            if changed:
                break
        if changed:
            continue
        for k in range(len(best.nodes) - 1, -1, -1):
            if calls >= budget:
                break
            candidate = cut(best, k)
            if candidate is None or sum(n.op != "arg" for n in candidate.nodes) == 0:
                continue
            calls += 1
            if fails(candidate):
                best, changed = candidate, True
                break
    return best
