"""The rewrites of unpadding, once the analysis has proved the graph safe:
positions, first tokens and attention on the packed tokens, and the fake
values of the packed graph (a mixin of the rewriter)."""

from __future__ import annotations

import math
import operator

import torch
import torch.fx as fx
from torch.fx.passes.fake_tensor_prop import FakeTensorProp

from ... import ops  # noqa: F401  (registers torch.ops.ragged.*)
from .patterns import _Eager, _heads_last, _Refuse, _swaps, _val, aten, ragged


class _Rewrites:
    # -- rewrites -------------------------------------------------------------
    def _position(self, n: fx.Node, dim: int, positions: fx.Node) -> fx.Node:
        """``arange(L)`` or ``const[..., :L, ...]``: the same values at each
        token's position."""
        t = n.target
        args = list(n.args) + [None] * 4
        with self.graph.inserting_before(n.next):
            pos = self.graph.call_function(aten.select.int, (positions, 0, 0))
            if t is aten.arange.default and len(n.args) == 1:
                new = self.graph.call_function(aten._to_copy.default, (pos,), {"dtype": _val(n).dtype})
            elif t is aten.arange.start and n.args[0] == 0 and len(n.args) == 2:
                new = self.graph.call_function(aten._to_copy.default, (pos,), {"dtype": _val(n).dtype})
            elif (
                t is aten.slice.Tensor
                and (args[2] or 0) == 0
                and (args[4] or 1) == 1
                and args[1] % _val(n).dim() == dim
            ):
                new = self.graph.call_function(aten.index_select.default, (n.args[0], dim, pos))
            else:
                raise _Refuse(f"{n.name}: {t} of length L is not a known position-dependent value")
        new.meta["val"] = _val(n)  # the same shape, with N for L
        for u in list(n.users):
            if u is not pos and u is not new and u not in self._mask_sub:
                u.replace_input_with(n, new)
        self.rewrites.append(f"{n.name}: {t} -> indexed by position")
        return new

    def _first_token(self, n: fx.Node, firsts: fx.Node) -> fx.Node:
        with self.graph.inserting_before(n.next):
            rows = self.graph.call_function(aten.index_select.default, (n.args[0], 1, firsts))
            new = self.graph.call_function(aten.select.int, (rows, 0, 0))
        new.meta["val"] = _val(n)
        n.replace_all_uses_with(new)
        self.rewrites.append(f"{n.name}: first token of each item -> rows at the items' offsets")
        return new

    def _packed_attention(
        self, anchor: fx.Node, q, k, v, offsets: fx.Node, scale: float, causal: bool
    ) -> fx.Node:
        """``ragged.attention`` of ``[1, H, N, d]`` operands, as ``[1, H, N, d]``."""
        with self.graph.inserting_before(anchor):
            # squeeze, not select: torch-mlir imports select as a full
            # extract_slice, which keeps IREE from fusing the projection's
            # bias add into its matmul.
            packed = [
                self.graph.call_function(aten.squeeze.dim, (_heads_last(x, self.graph), 0)) for x in (q, k, v)
            ]
            out = self.graph.call_function(ragged.attention.default, (*packed, offsets, float(scale), causal))
            tokens = self.graph.call_function(aten.unsqueeze.default, (out, 0))  # [1, N, H, d]
            return self.graph.call_function(aten.transpose.int, (tokens, 1, 2))

    @staticmethod
    def _untranspose(back: fx.Node) -> None:
        """Users that transpose the ``[1, H, N, d]`` result back to
        ``[1, N, H, d]`` (to merge the heads) read the tokens directly."""
        for u in list(back.users):
            if _swaps(u, [1, 2]):
                u.replace_all_uses_with(back.args[0])

    def _rewrite_eager(self, e: _Eager, offsets: fx.Node) -> None:
        q, scale = e.q, e.scale
        if isinstance(scale, fx.Node):  # a scalar tensor: scale the queries instead
            with self.graph.inserting_before(e.result):
                q = self.graph.call_function(aten.div.Tensor if e.divide else aten.mul.Tensor, (q, scale))
            scale = 1.0
        back = self._packed_attention(e.result, q, e.k, e.v, offsets, scale, self.causal[e.add])
        e.result.replace_all_uses_with(back)
        self._untranspose(back)
        kind = "causal ragged.attention" if self.causal[e.add] else "ragged.attention"
        self.rewrites.append(f"{e.add.name}: softmax(q k^T + mask) v -> {kind}")

    def _rewrite_attention(self, a: fx.Node, offsets: fx.Node) -> None:
        q, k, v = a.args[:3]
        d = _val(q).shape[-1]
        scale = a.kwargs.get("scale")
        if scale is None:
            scale = 1.0 / math.sqrt(int(d))
        back = self._packed_attention(a, q, k, v, offsets, scale, self.causal[a])
        if a.target is aten.scaled_dot_product_attention.default:
            a.replace_all_uses_with(back)
        else:
            for u in list(a.users):
                if u.target is operator.getitem and u.args[1] == 0:
                    u.replace_all_uses_with(back)
                elif u.users:
                    raise _Refuse(f"{a.name}: its log-sum-exp is used")
        self._untranspose(back)
        kind = "causal ragged.attention" if self.causal[a] else "ragged.attention"
        self.rewrites.append(f"{a.name}: {a.target} -> {kind}")

    def _propagate(
        self, mask, token_inputs, batch_symints, length_symints, positions, offsets, firsts
    ) -> None:
        """Fake values for the packed graph: N tokens, B items."""
        from torch._dynamo.source import ConstantSource
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

        env = ShapeEnv()
        mode = FakeTensorMode(shape_env=env)

        def fresh(name: str, hint: int) -> torch.SymInt:
            sym = env.create_symbol(hint, ConstantSource(name), dynamic_dim=DimDynamic.DYNAMIC)
            return env.create_symintnode(sym, hint=hint)

        n_tok, n_off, n_items = fresh("unpad_rows", 97), fresh("unpad_offsets", 14), fresh("unpad_items", 13)
        placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        index = {p: i for i, p in enumerate(self.placeholders)}
        args = []
        with mode:
            for p in placeholders:
                i = index.get(p)
                v = _val(p)
                if p is positions:
                    args.append(torch.empty(1, n_tok, dtype=torch.int64))
                elif p in self.hoisted_nodes or i in token_inputs:
                    args.append(torch.empty((1, n_tok) + tuple(v.shape[2:]), dtype=v.dtype))
                elif p is offsets:
                    args.append(torch.empty(n_off, dtype=torch.int64))
                elif p is firsts:
                    args.append(torch.empty(n_items, dtype=torch.int64))
                elif i in batch_symints:
                    args.append(1)
                elif i in length_symints:
                    args.append(n_tok)
                elif p is mask:
                    args.append(torch.empty(2, 2, dtype=v.dtype))
                elif isinstance(v, torch.Tensor):
                    if any(isinstance(d, torch.SymInt) for d in v.shape):
                        raise _Refuse(f"input {p.name} has dynamic sizes of its own")
                    args.append(torch.empty_strided(tuple(v.shape), tuple(v.stride()), dtype=v.dtype))
                elif isinstance(v, torch.SymInt):
                    raise _Refuse(f"input {p.name} is a size of its own")
                else:
                    args.append(v)
        FakeTensorProp(self.gm, mode).propagate_dont_convert_inputs(*args)
        for p, a in zip(placeholders, args, strict=True):
            p.meta["val"] = a
