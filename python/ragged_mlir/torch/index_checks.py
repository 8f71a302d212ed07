"""Token ids checked against their embedding table, as eager checks them.

Eager ``F.embedding`` raises ``IndexError`` for an id outside the table (a
tokenizer whose vocabulary does not match the model's, a position past
``max_position_embeddings``). The gather torch-mlir compiles an embedding
into reads whatever lies at that address, so a compiled model returned
garbage rows instead. :func:`check_embedding_ids` puts a check before each
embedding of a graph: the call fails with a message naming the table's
size. The check is one reduction over the ids, and its result is read on
the host before the rest of the call runs.
"""

from __future__ import annotations

import torch
import torch.fx as fx

__all__ = ["check_embedding_ids"]

aten = torch.ops.aten


def check_embedding_ids(gm: fx.GraphModule) -> int:
    """Rewrites ``gm`` in place: before each ``aten.embedding``, an
    ``_assert_async`` that every id is in ``[0, rows)``. Returns how many
    embeddings were checked."""
    graph = gm.graph
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not aten.embedding.default:
            continue
        weight, ids = node.args[:2]
        rows = weight.meta["val"].shape[0]
        # The fake values of the new nodes come from the ids' own mode (a
        # graph may hold values of more than one).
        mode = getattr(ids.meta["val"], "fake_mode", None)
        if mode is None or ids.meta["val"].numel() == 0:
            continue
        with graph.inserting_before(node):
            low = graph.call_function(aten.ge.Scalar, (ids, 0))
            high = graph.call_function(aten.lt.Scalar, (ids, rows))
            inside = graph.call_function(aten.logical_and.default, (low, high))
            every = graph.call_function(aten.all.default, (inside,))
            message = f"embedding: an id is out of range for a table of {rows} rows"
            check = graph.call_function(aten._assert_async.msg, (every, message))
        for n in (low, high, inside, every, check):
            args, kwargs = fx.node.map_arg((n.args, n.kwargs), lambda a: a.meta["val"])
            with mode:
                n.meta["val"] = n.target(*args, **kwargs)
        count += 1
    if count:
        graph.lint()
        gm.recompile()
    return count
