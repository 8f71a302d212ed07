"""The ops the backend emits itself, and how: the ragged custom ops and the
ATen calls torch-mlir gets wrong. :mod:`.lowerings` fills the table; the
planner asks :func:`emits`, the emitter calls each entry, and
``docs/torch.md`` lists them."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
import torch.fx as fx

if TYPE_CHECKING:
    from ... import ir
    from .emit import Emitter

__all__ = ["LOWERINGS", "Lowering", "emits", "empty_result", "lowering"]


@dataclasses.dataclass(frozen=True)
class Lowering:
    """How an op the backend emits itself (the ragged custom ops, and ATen
    calls torch-mlir gets wrong) becomes MLIR; ``claims`` picks the calls it
    handles (the others stay in dense pieces)."""

    emit: Callable[[Emitter, fx.Node], ir.Value]
    summary: str
    claims: Callable[[fx.Node], bool] | None = None


LOWERINGS: dict[torch._ops.OpOverload, Lowering] = {}


def lowering(op: torch._ops.OpOverload, summary: str, claims: Callable[[fx.Node], bool] | None = None):
    def register(fn):
        LOWERINGS[op] = Lowering(fn, summary, claims)
        return fn

    return register


def emits(node: fx.Node) -> bool:
    """Whether a :data:`LOWERINGS` entry handles the call ``node``."""
    lower = LOWERINGS.get(node.target)
    return lower is not None and (lower.claims is None or lower.claims(node))


def empty_result(node: fx.Node) -> bool:
    """A call of a functional ATen op whose result is statically shaped and
    has no elements (an all-empty batch, or an empty index, whose sizes
    Dynamo specialises to 0). torch-mlir divides by such sizes when it
    infers a view's shape, its own views included, which kills the
    process; the backend emits the result as a ``tensor.empty``."""
    target = node.target
    if node.op != "call_function" or not isinstance(target, torch._ops.OpOverload):
        return False
    if target.namespace != "aten" or target._schema.is_mutable:
        return False
    val = node.meta.get("val")
    return isinstance(val, torch.Tensor) and all(isinstance(d, int) for d in val.shape) and val.numel() == 0
