"""Attention rows whose keys are all masked, as PyTorch defines them.

``F.scaled_dot_product_attention`` with an ``attn_mask`` that masks every key
of a query row returns 0 for that row (PyTorch's "safe softmax"). The fused
attention that torch-mlir and IREE compile a dense attention into computes
``exp(-inf - -inf)`` there, a NaN, which a padded model then carries into
its padded positions and, through masked pooling (``NaN * 0``), into items
with no valid token. :func:`guard_masked_rows` selects 0 for such rows after
each masked attention, so compiled graphs keep eager's values.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
from torch._guards import detect_fake_mode

from ..graphs import call_with_val

__all__ = ["attn_mask", "guard_masked_rows"]

aten = torch.ops.aten


def attn_mask(node: fx.Node) -> fx.Node | None:
    """The ``attn_mask`` argument of an SDPA or CPU flash attention node,
    or None (no mask, or another op)."""
    if node.target is aten.scaled_dot_product_attention.default:
        mask = node.kwargs.get("attn_mask", node.args[3] if len(node.args) > 3 else None)
    elif node.target is aten._scaled_dot_product_flash_attention_for_cpu.default:
        mask = node.kwargs.get("attn_mask", node.args[6] if len(node.args) > 6 else None)
    else:
        return None
    return mask if isinstance(mask, fx.Node) else None


def guard_masked_rows(gm: fx.GraphModule) -> int:
    """Rewrites ``gm`` in place: ``out`` of each masked attention becomes
    ``where(any(allowed keys of the row), out, 0)``. Attentions whose
    log-sum-exp is read (a training forward saves it for the backward,
    which has its own rule for such rows) are left alone. Returns how many
    attentions were guarded."""
    graph = gm.graph
    count = 0
    mode = detect_fake_mode([n.meta.get("val") for n in graph.nodes if n.op == "placeholder"])
    if mode is None:  # no fake values to give the new nodes
        return 0
    for node in list(graph.nodes):
        mask = attn_mask(node) if node.op == "call_function" else None
        if mask is None:
            continue
        if node.target is aten.scaled_dot_product_attention.default:
            outs = [node]
        else:
            if any(u.target is not operator.getitem or (u.args[1] != 0 and u.users) for u in node.users):
                continue
            outs = [u for u in node.users if u.args[1] == 0]
        for out in outs:
            users = list(out.users)
            with graph.inserting_before(out.next):
                if mask.meta["val"].dtype == torch.bool:
                    allowed = mask
                else:
                    allowed = call_with_val(graph, mode, aten.gt.Scalar, mask, float("-inf"))
                row = call_with_val(graph, mode, aten.any.dim, allowed, -1, True)
                zero = call_with_val(
                    graph, mode, aten.scalar_tensor.default, 0.0, dtype=out.meta["val"].dtype
                )
                safe = call_with_val(graph, mode, aten.where.self, row, out, zero)
            for u in users:
                u.replace_input_with(out, safe)
            count += 1
    if count:
        graph.lint()
        gm.recompile()
    return count
