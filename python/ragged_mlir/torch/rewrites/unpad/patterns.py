"""What unpadding recognises: the ATen ops that keep tokens apart, attention
written out (``softmax(q k^T * scale + mask) v``), and how a size relates to
the batch and length of the mask."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx as fx

from ... import ops  # noqa: F401  (registers torch.ops.ragged.*)
from ..reshapes import _expr

log = logging.getLogger("ragged_mlir.torch.unpad")
aten = torch.ops.aten
ragged = torch.ops.ragged

_INT64_MAX = 2**63 - 1


class _Refuse(Exception):
    pass


# ATen ops that work on each element (or each token's own row) alone.
_POINTWISE = {
    aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar, aten.mul.Tensor,
    aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar, aten.neg.default, aten.pow.Tensor_Scalar,
    aten.rsqrt.default, aten.sqrt.default, aten.exp.default, aten.log.default, aten.tanh.default,
    aten.sigmoid.default, aten.relu.default, aten.gelu.default, aten.silu.default, aten.erf.default,
    aten.where.self, aten.clone.default, aten._to_copy.default, aten.alias.default,
    aten.detach.default, aten.abs.default, aten.maximum.default, aten.minimum.default,
    aten.clamp.default, aten.clamp_min.default, aten.clamp_max.default, aten.reciprocal.default, aten.lift_fresh_copy.default,
    aten.native_dropout.default, aten.rsub.Scalar, aten.ge.Scalar, aten.gt.Scalar,
    aten.le.Scalar, aten.lt.Scalar, aten.eq.Scalar, aten.ne.Scalar, aten.bitwise_and.Tensor,
    aten.bitwise_or.Tensor, aten.logical_not.default, aten.masked_fill.Scalar,
    aten.cos.default, aten.sin.default, aten.pow.Tensor_Tensor, aten.pow.Scalar, aten.square.default,
    aten.log1p.default, aten.expm1.default, aten.floor.default, aten.ceil.default, aten.round.default,
    aten.sign.default, aten.softplus.default, aten.hardtanh.default, aten.leaky_relu.default,
    aten.elu.default, aten.mish.default, aten.where.ScalarOther, aten.where.ScalarSelf,
    aten.eq.Tensor, aten.ne.Tensor, aten.lt.Tensor, aten.le.Tensor, aten.gt.Tensor, aten.ge.Tensor,
    aten.logical_and.default, aten.logical_or.default, torch.ops.prims.convert_element_type.default,
}  # fmt: skip
_LAYOUT = {
    aten.transpose.int, aten.permute.default, aten.t.default, aten.unsqueeze.default,
    aten.squeeze.dim, aten.expand.default, aten.contiguous.default,
}  # fmt: skip
_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)
# Ops whose second argument names the dims they reduce or normalise over.
_REDUCTIONS = {
    aten._softmax.default, aten._log_softmax.default, aten.softmax.int, aten.sum.dim_IntList,
    aten.mean.dim, aten.amax.default, aten.amin.default, aten.var.correction,
}  # fmt: skip
_ATTENTION = {
    aten.scaled_dot_product_attention.default,
    aten._scaled_dot_product_flash_attention_for_cpu.default,
}


def _val(n: Any) -> Any:
    return n.meta.get("val") if isinstance(n, fx.Node) else n


#: The largest integer constant the mask probes outgrow: a probe of
#: 2 * 2048 + 3 positions holds about 17 M mask entries per item. A mask
#: computed with a larger one (a window of 4096 positions) is refused.
_MAX_PROBE = 2048


def _int_constants(nodes: set[fx.Node]) -> list[int]:
    """The integer literals among the arguments of ``nodes``."""
    found: list[int] = []

    def visit(a: Any) -> None:
        if isinstance(a, bool):
            return
        if isinstance(a, int):
            found.append(a)
        elif isinstance(a, (list, tuple)):
            for x in a:
                visit(x)
        elif isinstance(a, dict):
            for x in a.values():
                visit(x)

    for n in nodes:
        if n.op == "call_function":
            visit(n.args)
            visit(n.kwargs)
    return found


def _statically_empty(t: Any) -> bool:
    """Whether ``t`` is a tensor with a static size of 0."""
    return isinstance(t, torch.Tensor) and any(isinstance(d, int) and d == 0 for d in t.shape)


def _swaps(n: Any, dims: list[int]) -> bool:
    """Whether ``n`` is ``transpose`` of these two dims of a 4-D tensor."""
    return (
        isinstance(n, fx.Node)
        and n.target is aten.transpose.int
        and sorted(d % 4 for d in n.args[1:]) == dims
    )


def _heads_last(x: fx.Node, graph: fx.Graph) -> fx.Node:
    """``[1, N, H, d]`` of a ``[1, H, N, d]`` attention operand: the input of
    its transpose when it is one (as heads split by ``view`` then
    ``transpose(1, 2)`` are), else a transpose."""
    if _swaps(x, [1, 2]):
        return x.args[0]
    return graph.call_function(aten.transpose.int, (x, 1, 2))


def _reduced(n: fx.Node) -> list[int]:
    """The dims a reduction (dims in its second argument) reduces over."""
    rank = _val(n.args[0]).dim()
    at = 2 if n.target is aten.linalg_vector_norm.default else 1  # after the norm's order
    red = n.args[at] if len(n.args) > at else n.kwargs.get("dim")
    red = [red] if isinstance(red, int) else list(red or range(rank))
    return sorted({d % rank for d in red})


@dataclass
class _Dims:
    batch: Any
    length: Any

    def kind(self, size: Any) -> str | None:
        """'b', 'l', 'bl' for the batch, length and merged dims, None for a
        dim free of both; raises for any other use of the two symbols."""
        e = _expr(size)
        if e == self.batch:
            return "b"
        if e == self.length:
            return "l"
        if not e.free_symbols & {self.batch, self.length}:
            return None
        if sympy.expand(e - self.batch * self.length) == 0:
            return "bl"
        raise _Refuse(f"a dim of size {e} mixes the batch or length with other sizes")

    def kinds(self, t: torch.Tensor) -> list[str | None]:
        return [self.kind(s) for s in t.shape]


@dataclass
class _Eager:
    """Attention written out, as Hugging Face's "eager" implementation and
    hand-written blocks do: ``softmax(q @ k^T * scale + mask) @ v``, with the
    batched matmuls AOTAutograd makes of ``@`` on 4-D tensors."""

    add: fx.Node  # scores + mask: what the mask feeds
    q: fx.Node  # [B, H, L, d]
    k: fx.Node
    v: fx.Node
    mask: fx.Node
    scale: Any  # a float, or a node of a scalar tensor
    result: fx.Node  # the [B, H, L, d] output
    inner: set = field(default_factory=set)
    divide: bool = False  # the scores are divided by ``scale``, a node (GPT-2)

    @staticmethod
    def _unbatch(n: Any, inner: set) -> fx.Node | None:
        """``view(clone(expand(x)), [B*H, ...])`` back to its 4-D ``x``."""
        if not isinstance(n, fx.Node) or n.target not in _VIEWS:
            return None
        inner.add(n)
        n = n.args[0]
        if n.target is aten.clone.default:
            inner.add(n)
            n = n.args[0]
        if n.target is aten.expand.default:
            if tuple(_val(n).shape) != tuple(_val(n.args[0]).shape):
                return None
            inner.add(n)
            n = n.args[0]
        return n if isinstance(_val(n), torch.Tensor) and _val(n).dim() == 4 else None

    @classmethod
    def match(cls, softmax: fx.Node) -> _Eager | None:
        inner = {softmax}
        if softmax.args[1] not in (-1, 3):
            return None
        add = softmax.args[0]
        if not isinstance(add, fx.Node) or add.target is not aten.add.Tensor:
            return None
        inner.add(add)
        for scores, mask in ((add.args[0], add.args[1]), (add.args[1], add.args[0])):
            scale: Any = 1.0
            divide = False
            s = scores
            if isinstance(s, fx.Node) and s.target in (aten.mul.Tensor, aten.div.Tensor):
                c = s.args[1]
                if isinstance(c, fx.Node) and _val(c).dim() != 0:
                    continue
                if s.target is aten.div.Tensor:
                    if isinstance(c, fx.Node):
                        divide = True
                    else:
                        c = 1.0 / c
                scale, s = c, s.args[0]
            if (
                not isinstance(s, fx.Node)
                or s.target not in _VIEWS
                or s.args[0].target is not aten.bmm.default
            ):
                continue
            bmm = s.args[0]
            got = set()
            q = cls._unbatch(bmm.args[0], got)
            kt = cls._unbatch(bmm.args[1], got)
            if q is None or kt is None:
                continue
            if _swaps(kt, [2, 3]):
                k = kt.args[0]
            elif kt.target is aten.permute.default and list(kt.args[1]) == [0, 1, 3, 2]:
                k = kt.args[0]
            else:
                continue
            got |= {s, bmm, kt}
            if scores is not s:
                got.add(scores)
            # softmax -> [clone] -> expand -> view -> bmm(p, v) -> view: the result.
            p = softmax
            while len(p.users) == 1 and next(iter(p.users)).target in (
                aten.clone.default,
                aten.expand.default,
                *_VIEWS,
            ):
                p = next(iter(p.users))
                got.add(p)
            if len(p.users) != 1:
                continue
            pv = next(iter(p.users))
            if pv.target is not aten.bmm.default or pv.args[0] is not p:
                continue
            v = cls._unbatch(pv.args[1], got)
            if v is None or len(pv.users) != 1:
                continue
            result = next(iter(pv.users))
            if result.target not in _VIEWS or _val(result).dim() != 4:
                continue
            got |= {pv}
            e = cls(add, q, k, v, mask, scale, result, inner | got, divide)
            # Nothing else may read the scores or the weights.
            if any(u not in e.inner and u is not result for n in e.inner for u in n.users):
                continue
            return e
        return None
