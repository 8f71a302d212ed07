"""The analysis of unpadding: which input is the key-padding mask, what the
attention masks are (evaluated on probe masks), and whether every other op
keeps tokens apart or has a known rewrite."""

from __future__ import annotations

import operator
from typing import Any

import sympy
import torch
import torch.fx as fx

from ... import ops  # noqa: F401  (registers torch.ops.ragged.*)
from ..masked_rows import attn_mask
from ..reshapes import _expr, _groups
from .patterns import (
    _ATTENTION,
    _INT64_MAX,
    _LAYOUT,
    _MAX_PROBE,
    _POINTWISE,
    _REDUCTIONS,
    _VIEWS,
    _Dims,
    _Eager,
    _int_constants,
    _reduced,
    _Refuse,
    _statically_empty,
    _val,
    aten,
    ragged,
)
from .rewrite import _Rewrites
from .wrapper import Unpadded


class _Rewriter(_Rewrites):
    def __init__(self, gm: fx.GraphModule):
        self.gm = gm
        self.graph = gm.graph
        self.placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        self.rewrites: list[str] = []
        self.hoisted: list[tuple[fx.GraphModule, list[int]]] = []
        self.hoisted_nodes: list[fx.Node] = []
        # Attention -> whether its mask is causal as well as key-padding.
        self.causal: dict[fx.Node, bool] = {}

    # -- analysis -----------------------------------------------------------
    def run(self) -> Unpadded:
        attentions = [n for n in self.graph.nodes if n.op == "call_function" and n.target in _ATTENTION]
        self.eager: dict[fx.Node, _Eager] = {}
        for n in self.graph.nodes:
            if n.op == "call_function" and n.target in (aten._softmax.default, aten.softmax.int):
                e = _Eager.match(n)
                if e is not None:
                    self.eager[e.add] = e
        attentions += list(self.eager)
        if not attentions:
            raise _Refuse("no attention in the graph")
        candidates = [
            p
            for p in self.placeholders
            if isinstance(_val(p), torch.Tensor)
            and _val(p).dim() == 2
            and not _val(p).is_floating_point()
            and all(isinstance(s, torch.SymInt) for s in _val(p).shape)
        ]
        if not candidates:
            raise _Refuse("no [B, L] integer or boolean input with dynamic sizes to use as a key mask")
        reasons = []
        for mask in candidates:
            try:
                return self._run_with(mask, attentions)
            except _Refuse as e:
                reasons.append(f"{mask.name}: {e}")
        raise _Refuse("; ".join(reasons))

    def _run_with(self, mask: fx.Node, attentions: list[fx.Node]) -> Unpadded:
        mv = _val(mask)
        dims = _Dims(_expr(mv.shape[0]), _expr(mv.shape[1]))
        self.dims = dims
        if (
            not (isinstance(dims.batch, sympy.Symbol) and isinstance(dims.length, sympy.Symbol))
            or dims.batch == dims.length
        ):
            raise _Refuse("the mask's batch and length must be distinct dynamic sizes")
        token_inputs, batch_symints, length_symints = [], [], []
        for i, p in enumerate(self.placeholders):
            v = _val(p)
            if p is mask:
                continue
            if isinstance(v, torch.SymInt):
                e = _expr(v)
                if e == dims.batch:
                    batch_symints.append(i)
                elif e == dims.length:
                    length_symints.append(i)
                elif e.free_symbols & {dims.batch, dims.length}:
                    raise _Refuse(f"input {p.name} is the size {e}")
            elif isinstance(v, torch.Tensor):
                k = dims.kinds(v)
                if k[:2] == ["b", "l"] and not ({"b", "l", "bl"} & set(k[2:])):
                    token_inputs.append(i)
                elif any(k):
                    raise _Refuse(f"input {p.name} of shape {tuple(v.shape)} is not [B, L, ...]")
        if not token_inputs:
            raise _Refuse("no [B, L, ...] input besides the mask")
        tokens = {self.placeholders[i] for i in token_inputs}
        self._host_inputs = tokens | {self.placeholders[i] for i in batch_symints + length_symints}

        # Which nodes depend on token data, on the mask.
        tok_dep, mask_dep = set(tokens), {mask}
        for n in self.graph.nodes:
            ins = n.all_input_nodes
            if any(i in tok_dep for i in ins):
                tok_dep.add(n)
            if any(i in mask_dep for i in ins) and n.target not in _ATTENTION and n not in self.eager:
                mask_dep.add(n)
        # The mask subgraph: what computes each attention's attn_mask.
        mask_args = {}
        for a in attentions:
            am = self.eager[a].mask if a in self.eager else self._attn_mask(a)
            if am is None:
                raise _Refuse(f"{a.name}: attention without a mask reads padded keys")
            if am not in mask_dep:
                raise _Refuse(f"{a.name}: its attn_mask does not come from {mask.name}")
            mask_args[a] = am
        sub = self._ancestors(list(mask_args.values()))
        self._mask_sub = sub
        if sub & tok_dep:
            raise _Refuse("the attention mask depends on token data")
        for n in (sub & mask_dep) - {mask}:
            for u in n.users:
                if u not in sub and not (u in mask_args and mask_args[u] is n):
                    raise _Refuse(f"{mask.name} reaches {u.name} ({u.target}), which is not a key mask")
        self._probe(mask, sub, mask_args, dims)
        if any(u not in sub for u in mask.users):
            # The mask is also data (pooling weights): packed, it is a token
            # input whose every value is 1; what reads it is checked below
            # like any token value.
            token_inputs.append(self.placeholders.index(mask))
            tok_dep.add(mask)
            for n in self.graph.nodes:
                if n not in sub and any(i in tok_dep for i in n.all_input_nodes):
                    tok_dep.add(n)
        self._mask = mask

        # Every other node: per-token, or a known rewrite.
        positions = self._placeholder("unpad_positions")
        offsets = self._placeholder("unpad_offsets")
        self._offsets = offsets
        firsts = self._placeholder("unpad_firsts")
        batch_nodes: set[fx.Node] = set()
        pos_nodes: set[fx.Node] = set()
        inner = set().union(*(e.inner | {e.result} for e in self.eager.values()))
        for n in list(self.graph.nodes):
            if n.op != "call_function" or n in sub or n in inner:
                continue
            self._check(n, dims, tok_dep, pos_nodes, batch_nodes, positions, firsts)

        out_node = next(n for n in self.graph.nodes if n.op == "output")
        outs = list(out_node.args[0]) if isinstance(out_node.args[0], (list, tuple)) else [out_node.args[0]]
        token_outputs, item_outputs, length_dims = [], [], {}
        for i, o in enumerate(outs):
            v = _val(o)
            if not isinstance(o, fx.Node) or not isinstance(v, torch.Tensor):
                if isinstance(v, torch.SymInt) and _expr(v).free_symbols & {dims.batch, dims.length}:
                    raise _Refuse(f"output {i} is the size {_expr(v)}")
                continue
            if o in sub and o not in tok_dep:
                raise _Refuse(f"output {i} is part of the attention mask")
            k = dims.kinds(v)
            if o in batch_nodes:
                if k[0] != "b" or any(k[1:]):
                    raise _Refuse(f"output {i} is per item with shape {tuple(v.shape)}")
                item_outputs.append(i)
            elif o in tok_dep and any(k):
                if k[0] != "b" or k.count("l") != 1 or {"b", "bl"} & set(k[1:]):
                    raise _Refuse(f"output {i} of shape {tuple(v.shape)} is not [B, ..., L, ...]")
                token_outputs.append(i)
                if k.index("l") != 1:
                    length_dims[i] = k.index("l")
            elif o in pos_nodes or any(k):
                raise _Refuse(f"output {i} of shape {tuple(v.shape)} depends on the length only")
        for a in attentions:
            if a in self.eager:
                self._rewrite_eager(self.eager[a], offsets)
            else:
                self._rewrite_attention(a, offsets)
        self.graph.eliminate_dead_code()
        self._propagate(mask, token_inputs, batch_symints, length_symints, positions, offsets, firsts)
        self.gm.recompile()
        return Unpadded(
            mask_index=self.placeholders.index(mask),
            token_inputs=token_inputs,
            batch_symints=batch_symints,
            length_symints=length_symints,
            token_outputs=token_outputs,
            length_dims=length_dims,
            item_outputs=item_outputs,
            first_token=any("first token" in r for r in self.rewrites),
            rewrites=self.rewrites,
            hoisted=self.hoisted,
        )

    def _attn_mask(self, a: fx.Node) -> fx.Node | None:
        args = list(a.args) + [None] * 8
        if a.target is aten.scaled_dot_product_attention.default:
            dropout = a.kwargs.get("dropout_p", args[4] if args[4] is not None else 0.0)
            causal = a.kwargs.get("is_causal", args[5] if args[5] is not None else False)
        else:
            dropout = a.kwargs.get("dropout_p", args[3] if args[3] is not None else 0.0)
            causal = a.kwargs.get("is_causal", args[4] if args[4] is not None else False)
        if dropout or causal:
            raise _Refuse(f"{a.name}: causal attention or dropout")
        if a.kwargs.get("enable_gqa"):
            raise _Refuse(f"{a.name}: grouped-query attention")
        return attn_mask(a)

    def _ancestors(self, roots: list[fx.Node]) -> set[fx.Node]:
        seen: set[fx.Node] = set()
        stack = list(roots)
        while stack:
            n = stack.pop()
            if n in seen:
                continue
            seen.add(n)
            stack.extend(n.all_input_nodes)
        return seen

    def _probe(self, mask: fx.Node, sub: set[fx.Node], mask_args: dict, dims: _Dims) -> None:
        """Evaluates the mask subgraph on probe masks: each attn_mask must
        let every valid query see exactly the valid keys of its item."""
        g = torch.Generator().manual_seed(0)
        probes = []
        # A window (a sliding-window mask, `|i - j| <= w`) shows only on a
        # probe longer than it, and its size is a constant of the subgraph
        # (an input is refused below): one probe outgrows every such constant.
        reach = max([abs(c) for c in _int_constants(sub) if abs(c) < 2**31], default=0)
        if reach > _MAX_PROBE:
            raise _Refuse(f"the attention mask uses the constant {reach}, longer than a probe can check")
        for b, length in ((3, 6), (2, 9), (4, 5), (2, 2 * reach + 3)):
            m = torch.rand(b, length, generator=g) < 0.6
            m[:, 0] = True
            m[0] = True
            probes.append(m)
        probes.append(torch.arange(7)[None, :] < torch.tensor([7, 3, 1, 5])[:, None])
        for m in probes:
            b, length = m.shape
            env: dict[fx.Node, Any] = {}
            for n in self.graph.nodes:
                if n not in sub:
                    continue
                if n.op == "placeholder":
                    v = _val(n)
                    if n is mask:
                        env[n] = m.to(v.dtype)
                    elif isinstance(v, torch.SymInt) and _expr(v) in (dims.batch, dims.length):
                        env[n] = b if _expr(v) == dims.batch else length
                    else:
                        raise _Refuse(f"the attention mask reads input {n.name}")
                    continue
                if n.op != "call_function":
                    raise _Refuse(f"the attention mask uses {n.op} {n.name}")
                args, kwargs = fx.node.map_arg((n.args, n.kwargs), lambda x, env=env: env[x])
                try:
                    env[n] = n.target(*args, **kwargs)
                except Exception as e:  # any failure on a probe: refused, with the reason
                    raise _Refuse(f"evaluating the attention mask at {n.name} failed: {e}") from e
            for a, am in mask_args.items():
                causal = self._check_key_mask(a, env[am], m)
                if self.causal.setdefault(a, causal) != causal:
                    raise _Refuse(f"{a.name}: attn_mask is causal for some masks only")

    @staticmethod
    def _check_key_mask(a: fx.Node, am: Any, m: torch.Tensor) -> bool:
        """Whether ``am`` lets every valid query see the valid keys of its
        item (False) or those at or before it (True, a causal mask combined
        with the padding mask: varlen causal attention once packed, as
        packing keeps each item's order); otherwise refuses."""
        b, length = m.shape
        if not isinstance(am, torch.Tensor) or am.dim() > 4:
            raise _Refuse(f"{a.name}: attn_mask is not a tensor of rank <= 4")
        try:
            full = am.reshape((1,) * (4 - am.dim()) + tuple(am.shape)).expand(b, -1, length, length)
        except RuntimeError as e:
            raise _Refuse(f"{a.name}: attn_mask of shape {tuple(am.shape)} is not [B, H, L, L]") from e
        if full.dtype == torch.bool:
            allowed = full
        else:
            allowed = full == 0
            if not bool((allowed | (full <= -1e4)).all()):
                raise _Refuse(f"{a.name}: attn_mask adds values other than 0 and large negatives")
        want = m[:, None, None, :].expand_as(allowed)
        valid_q = m[:, None, :, None].expand_as(allowed)
        if bool(((allowed == want) | ~valid_q).all()):
            return False
        before = torch.ones(length, length, dtype=torch.bool).tril()
        if bool(((allowed == (want & before)) | ~valid_q).all()):
            return True
        raise _Refuse(
            f"{a.name}: attn_mask is neither a key-padding mask of the input mask nor one combined "
            "with a causal mask (a sliding window, a mask of its own)"
        )

    def _placeholder(self, name: str) -> fx.Node:
        last = [n for n in self.graph.nodes if n.op == "placeholder"][-1]
        with self.graph.inserting_after(last):
            return self.graph.placeholder(name)

    def _check(self, n, dims, tok_dep, pos_nodes, batch_nodes, positions, firsts) -> None:
        v = _val(n)
        if not isinstance(v, torch.Tensor):  # sizes, and tuples of results
            if n.target is operator.getitem and n.args[0] in batch_nodes:
                batch_nodes.add(n)
            return
        k = dims.kinds(v)
        from_pos = any(i in pos_nodes for i in n.all_input_nodes)
        from_batch = any(i in batch_nodes for i in n.all_input_nodes)
        if n not in tok_dep and not from_pos:
            if not any(k):
                return  # constants and weights
            if k.count("l") == 1 and not ({"b", "bl"} & set(k)):
                pos_nodes.add(self._position(n, k.index("l"), positions))
                return
            if n.target is aten.expand.default and k.count("b") == 1 and not ({"l", "bl"} & set(k)):
                src = dims.kinds(_val(n.args[0]))
                if not any(src) and _expr(_val(n.args[0]).shape[k.index("b") - len(k)]) == 1:
                    return  # the same constant for every item: one copy when packed
            raise _Refuse(f"{n.name} ({n.target}) of shape {tuple(v.shape)} is built from the batch size")
        if from_pos and n not in tok_dep:
            pos_nodes.add(n)
        if from_batch:
            self._check_batch(n, k)
            batch_nodes.add(n)
            return
        t = n.target
        if t in _ATTENTION or t is operator.getitem:
            return
        if t in _POINTWISE or t in _LAYOUT:
            if t in _POINTWISE:
                self._check_broadcast(n, dims, pos_nodes)
            return
        if t is aten.slice.Tensor:
            self._check_slice(n, dims)
            return
        if t is aten.select.int:
            src = _val(n.args[0])
            d = n.args[1] % src.dim()
            kd = dims.kinds(src)[d]
            if kd is None:
                return
            if kd == "l" and n.args[2] == 0 and dims.kinds(src)[:2] == ["b", "l"] and d == 1:
                batch_nodes.add(self._first_token(n, firsts))
                return
            raise _Refuse(f"{n.name}: select along the {kd} dim")
        if t in _VIEWS:
            self._check_view(n, dims)
            return
        if t is aten.cat.default:
            dim = (n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0)) % len(k)
            pieces = [x for x in n.args[0] if not _statically_empty(_val(x))]
            if k[dim] is None and all(dims.kinds(_val(x)) == k for x in pieces):
                return  # pieces of each token's features side by side (rotate_half)
            if len(pieces) == 1 and dims.kinds(_val(pieces[0])) == k:
                return  # one piece and empty ones: a new key-value cache
            raise _Refuse(f"{n.name}: cat along the {k[dim]} dim")
        if t in (aten.mm.default, aten.addmm.default):
            a, w = (n.args[0], n.args[1]) if t is aten.mm.default else (n.args[1], n.args[2])
            if w in tok_dep or any(dims.kinds(_val(w))) or dims.kinds(_val(a))[1] is not None:
                raise _Refuse(f"{n.name}: a matmul that contracts over tokens")
            return
        if t is aten.native_layer_norm.default:
            if any(dims.kinds(_val(n.args[0]))[-len(n.args[1]) :]):
                raise _Refuse(f"{n.name}: layer norm over the batch or length")
            return
        if t in _REDUCTIONS:
            red = _reduced(n)
            src_k = dims.kinds(_val(n.args[0]))
            if any(src_k[d] for d in red):
                if t is aten.sum.dim_IntList and [src_k[d] for d in red] == ["l"] and src_k[0] == "b":
                    batch_nodes.add(self._masked_sum(n))
                    return
                raise _Refuse(f"{n.name}: {t} over the batch or length")
            return
        if t in (aten.embedding.default, aten.index_select.default, aten.gather.default):
            table = n.args[0]
            tk = dims.kinds(_val(table))
            if table in tok_dep or (t is aten.embedding.default and any(tk)):
                raise _Refuse(f"{n.name}: {t} from token data")
            if t is not aten.embedding.default and tk[n.args[1] % len(tk)]:
                raise _Refuse(f"{n.name}: {t} along the {tk[n.args[1] % len(tk)]} dim")
            return
        if not self._hoist(n, k):
            raise _Refuse(f"{n.name}: {t} on token values is not known to be per token")

    def _hoist(self, n: fx.Node, k: list) -> bool:
        """An integer ``[B, L, ...]`` value computed from the token inputs
        alone (index arithmetic on ``input_ids``): the wrapper evaluates it on
        the padded inputs, exactly as the original graph does, and the packed
        graph reads it as an input."""
        if k[:2] != ["b", "l"] or any(k[2:]) or _val(n).is_floating_point():
            return False
        sub = self._ancestors([n])
        for a in sub:
            v = _val(a)
            if a.op == "placeholder":
                if a not in self._host_inputs:
                    return False
            elif a.op != "call_function" or (isinstance(v, torch.Tensor) and v.is_floating_point()):
                return False
        g = fx.Graph()
        env: dict[fx.Node, fx.Node] = {}
        for a in self.graph.nodes:
            if a in sub:
                env[a] = g.node_copy(a, lambda x: env[x])
        g.output(env[n])
        inputs = [i for i, p in enumerate(self.placeholders) if p in sub]
        self.hoisted.append((fx.GraphModule(self.gm, g), inputs))
        ph = self._placeholder(f"unpad_hoisted{len(self.hoisted)}")
        ph.meta["val"] = _val(n)
        n.replace_all_uses_with(ph)
        self.hoisted_nodes.append(ph)
        self.rewrites.append(f"{n.name}: {n.target} on integer inputs -> computed on the padded inputs")
        return True

    def _check_batch(self, n: fx.Node, k: list) -> None:
        """Per-item values (the first token, a masked sum): only ops that
        keep items apart and need no size of the batch (the packed graph
        knows the batch size as 1)."""
        t = n.target
        per_row = (aten.mm.default, aten.addmm.default, aten.t.default, aten.native_layer_norm.default)
        if "l" in k or "bl" in k or k[:1] != ["b"]:
            raise _Refuse(f"{n.name}: {t} on per-item values")
        if t in _POINTWISE or t in per_row or t is operator.getitem or t is aten.unsqueeze.default:
            return
        if t in _REDUCTIONS or t is aten.linalg_vector_norm.default:
            if 0 not in _reduced(n):
                return
        if t is aten.cat.default:
            tensors = n.args[0]
            dim = (n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0)) % _val(n).dim()
            if dim != 0 and all(self.dims.kinds(_val(x))[:1] == ["b"] for x in tensors):
                return  # per-item features side by side (pooling modes)
        if t is aten.expand.default and self.dims.kinds(_val(n.args[0]))[:1] == ["b"]:
            # expand(x, [B, ...]) of per-item x: -1 keeps x's own item count.
            n.args = (n.args[0], [-1, *n.args[1][1:]], *n.args[2:])
            return
        raise _Refuse(f"{n.name}: {t} on per-item values")

    def _zero_at_pads(self, n: Any) -> bool:
        """Whether eager's ``n`` is 0 at every padded position: the mask
        itself, its views and casts, and products with them."""
        if n is self._mask:
            return True
        if not isinstance(n, fx.Node) or n.op != "call_function":
            return False
        t = n.target
        if (
            t in _LAYOUT
            or t in _VIEWS
            or t in (aten._to_copy.default, aten.clone.default, aten.alias.default)
        ):
            return self._zero_at_pads(n.args[0])
        if t is aten.mul.Tensor:
            return any(self._zero_at_pads(a) for a in n.args)
        if t is aten.div.Tensor:
            d = n.args[1]
            return self._zero_at_pads(n.args[0]) and (
                not isinstance(d, fx.Node) or "l" not in self.dims.kinds(_val(d))
            )
        return False

    def _masked_sum(self, n: fx.Node) -> fx.Node:
        """``x.sum(1)`` of ``[B, L, ...]`` values that are 0 at padded
        positions (``(hidden * mask[..., None]).sum(1)``, ``mask.sum(1)``):
        the packed graph sums each item's tokens."""
        src = n.args[0]
        if not _val(src).is_floating_point() or not self._zero_at_pads(src):
            raise _Refuse(f"{n.name}: a sum over the length of values not masked to 0 at padding")
        keep = (list(n.args) + [False] * 3)[2] or n.kwargs.get("keepdim", False)
        dtype = n.kwargs.get("dtype")
        if dtype is not None and not dtype.is_floating_point:
            raise _Refuse(f"{n.name}: a sum into {dtype}")
        with self.graph.inserting_before(n.next):
            if dtype is not None:
                # sum(x, dtype=t) sums x converted to t (sentence-transformers'
                # mean pooling accumulates so).
                src = self.graph.call_function(aten._to_copy.default, (src,), {"dtype": dtype})
            rows = self.graph.call_function(aten.squeeze.dim, (src, 0))
            new = self.graph.call_function(ragged.segment_reduce.default, (rows, self._offsets, "sum", 0.0))
            if keep:
                new = self.graph.call_function(aten.unsqueeze.default, (new, 1))
        new.meta["val"] = _val(n)
        n.replace_all_uses_with(new)
        self.rewrites.append(f"{n.name}: sum over the length of masked values -> sum of each item's tokens")
        return new

    def _check_broadcast(self, n: fx.Node, dims: _Dims, pos_nodes: set) -> None:
        """Operands line up with the result token dim for token dim; an
        operand may broadcast along a token dim only if it has no per-item
        data there (a constant, or a position-dependent value across items)."""
        out = dims.kinds(_val(n))
        for a in n.all_input_nodes:
            v = _val(a)
            if not isinstance(v, torch.Tensor):
                continue
            k = dims.kinds(v)
            pad = len(out) - len(k)
            for j, od in enumerate(out):
                kd = k[j - pad] if j >= pad else None
                size = _expr(v.shape[j - pad]) if j >= pad else sympy.Integer(1)
                if kd == od or od is None:
                    continue
                if kd is not None or size != 1:
                    raise _Refuse(f"{n.name}: operands of shapes {tuple(v.shape)} and {tuple(_val(n).shape)}")
                if od == "b" and any(k) and a not in pos_nodes:
                    raise _Refuse(f"{n.name}: a token value broadcast over items")
                if od in ("l", "bl") and "b" in k:
                    raise _Refuse(f"{n.name}: a per-item value broadcast over tokens")

    def _check_slice(self, n: fx.Node, dims: _Dims) -> None:
        src = _val(n.args[0])
        args = list(n.args) + [None] * 4
        d = (args[1] or 0) % src.dim()
        kd = dims.kinds(src)[d]
        if kd is None:
            return
        start, end, step = args[2] or 0, args[3], args[4] or 1
        full_end = end is None or (isinstance(end, int) and end >= _INT64_MAX // 2)
        if isinstance(end, fx.Node) and isinstance(_val(end), torch.SymInt):
            full_end = _expr(_val(end)) == _expr(src.shape[d])
        if start != 0 or step != 1 or not full_end:
            raise _Refuse(f"{n.name}: a slice of part of the {kd} dim")

    def _check_view(self, n: fx.Node, dims: _Dims) -> None:
        """A view may regroup other dims freely, and merge or split the
        batch and length dims only with each other (and unit dims)."""
        src, dst = _val(n.args[0]), _val(n)
        groups = _groups(tuple(_expr(s) for s in src.shape), tuple(_expr(s) for s in dst.shape))
        if groups is None:
            raise _Refuse(f"{n.name}: a view whose dims cannot be grouped")
        allowed = (
            (["b"], ["b"]),
            (["l"], ["l"]),
            (["bl"], ["bl"]),
            (["b", "l"], ["bl"]),
            (["bl"], ["b", "l"]),
        )
        for gin, gout in groups:
            kin = [dims.kind(src.shape[i]) for i in gin]
            kout = [dims.kind(dst.shape[i]) for i in gout]
            if not (any(kin) or any(kout)):
                continue
            units = all(_expr(src.shape[i]) == 1 for i, k in zip(gin, kin, strict=True) if k is None) and all(
                _expr(dst.shape[i]) == 1 for i, k in zip(gout, kout, strict=True) if k is None
            )
            if not units or ([k for k in kin if k], [k for k in kout if k]) not in allowed:
                raise _Refuse(f"{n.name}: a view mixing the batch or length with other dims")
