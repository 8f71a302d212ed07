"""Reshapes whose grouping the backend proves and emits itself.

``x.view(B * L, d)`` of a ``[B, L, d]`` tensor reaches the backend as
``aten.view(x, [s0 * s1, d])``. torch-mlir infers shapes by matching the
static dims of both sides; with several dynamic dims it cannot tell which
input dims the dynamic output dim merges, and it assumes the rest are 1 (a
``[?, 1, d] -> [?, d]`` collapse): a wrong program, which fails at run time
or computes the wrong thing.

The shapes in the graph's metadata are symbolic, so the grouping is
provable here: ``[s0, s1, d] -> [s0 * s1, d]`` merges dims 0 and 1. Such a
view becomes a step of its own (:func:`reshape_groups` says which), emitted
as ``tensor.collapse_shape`` / ``tensor.expand_shape`` with that grouping;
IREE inlines the pieces around it, so splitting costs nothing at run time.
A view whose grouping cannot be proven stays with torch-mlir.
"""

from __future__ import annotations

import functools

import sympy
import torch
import torch.fx as fx

__all__ = ["reshape_groups", "static_view_sizes"]

_VIEWS = {
    torch.ops.aten.view.default,
    torch.ops.aten._unsafe_view.default,
    torch.ops.aten.reshape.default,
}


def _expr(size):
    return size.node.expr if isinstance(size, torch.SymInt) else sympy.Integer(int(size))


def _divides(a, b) -> bool:
    """``a`` provably divides ``b`` (sizes are positive integers)."""
    q = sympy.cancel(b / a)
    return bool(q.is_integer) and q != 1


@functools.lru_cache(maxsize=4096)
def _groups(src: tuple, dst: tuple) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] | None:
    """Adjacent dims of ``src`` and ``dst`` with equal products, or None.
    Cached: every layer of a model repeats the same views, and each is
    asked about twice (when planning and when emitting); sympy's
    ``simplify`` is most of a graph's planning time without it."""
    groups, i, j = [], 0, 0
    while i < len(src) and j < len(dst):
        a, b = [i], [j]
        pa, pb = src[i], dst[j]
        i, j = i + 1, j + 1
        while sympy.simplify(pa - pb) != 0:
            if _divides(pa, pb) and i < len(src):
                pa, i = pa * src[i], i + 1
                a.append(i - 1)
            elif _divides(pb, pa) and j < len(dst):
                pb, j = pb * dst[j], j + 1
                b.append(j - 1)
            else:
                return None
        groups.append((tuple(a), tuple(b)))
    if i != len(src) or j != len(dst):
        return None
    return tuple(groups)


def _needs_rewrite(src: tuple, dst: tuple, groups) -> bool:
    """A group that merges or splits dims of which one is dynamic."""
    for a, b in groups:
        if len(a) == len(b) == 1:
            continue
        if any(not src[k].is_number for k in a) or any(not dst[k].is_number for k in b):
            return True
    return False


def reshape_groups(node: fx.Node) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] | None:
    """The dim groups of a view that merges or splits dynamic dims, or None
    for any other node (see the module docstring)."""
    if node.op != "call_function" or node.target not in _VIEWS:
        return None
    x = node.args[0]
    val = node.meta.get("val")
    xval = x.meta.get("val") if isinstance(x, fx.Node) else None
    if not isinstance(val, torch.Tensor) or not isinstance(xval, torch.Tensor):
        return None
    src = tuple(_expr(s) for s in xval.shape)
    dst = tuple(_expr(s) for s in val.shape)
    groups = _groups(src, dst) if src and dst else None
    if groups is None or not _needs_rewrite(src, dst, groups):
        return None
    return groups


def static_view_sizes(node: fx.Node) -> list[int] | None:
    """The size list of a view whose result has at most one dynamic dim, as
    constants with ``-1`` for that dim; None for other nodes or views whose
    sizes are already constants.

    ``q.view(B, L, H, d)`` in an unpadded graph is ``view(x, [1, s0, -1,
    32])``: a size that torch-mlir only knows at run time, so it imports a
    ``tensor.reshape`` through a shape tensor, which IREE reads back on the
    host (a device sync and a fresh allocation per view). With ``[1, -1,
    12, 32]`` it imports an ``expand_shape``."""
    if node.op != "call_function" or node.target not in _VIEWS:
        return None
    sizes, val = node.args[1], node.meta.get("val")
    if not isinstance(val, torch.Tensor) or not isinstance(sizes, (list, tuple)) or len(sizes) != val.dim():
        return None
    if all(isinstance(s, int) and s >= 0 for s in sizes):
        return None
    dynamic = [i for i, d in enumerate(val.shape) if not isinstance(d, int)]
    # Without elements, torch-mlir would infer the -1 by dividing by 0 and
    # kill the process (`[0, -1]` for a [0, s0] view).
    if len(dynamic) > 1 or any(isinstance(d, int) and d == 0 for d in val.shape):
        return None
    return [-1 if i in dynamic else int(d) for i, d in enumerate(val.shape)]
