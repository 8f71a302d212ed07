"""Recovers ragged ops from the ATen graphs of PyTorch jagged NestedTensors.

Under ``torch.compile`` an NJT input (``torch.nested.nested_tensor(...,
layout=torch.jagged)``) reaches the backend's forward graph split into its
packed values, its int64 offsets, SymInts and two dummy tensors whose sizes
carry min/max seqlen. What is per-token (Linear, GELU, LayerNorm over the
features, residual adds) runs on the packed values and needs nothing here.
What crosses items appears only as op patterns, which
:func:`rewrite_njt_patterns` turns into ``torch.ops.ragged.*`` calls on the
packed values and offsets:

==========================================================  ==============================
NJT source -> ATen pattern                                   rewritten to
==========================================================  ==============================
``x.sum(dim=1)``: ``P = _jagged_to_padded_dense_forward(V,   ``segment_reduce(V, off,
[off], [L])`` (padding 0) ``-> [view] -> sum.dim_IntList(P,   "sum", 0.0)``
[1], keepdim)``
``x.mean(dim=1)``: the sum above with ``keepdim=True``,      the sum as above (the
``div.Tensor`` by ``unsqueeze*(off[1:] - off[:-1])``          division stays dense), or
                                                             with ``fuse_mean=True``
                                                             ``segment_reduce(V, off,
                                                             "mean", nan)``
``x.amax(dim=1)`` / ``x.max(dim=1).values``: padding         ``segment_reduce(V, off,
``finfo.min`` ``-> amax(P, [1])`` / ``max.dim(P, 1)[0]``      "max", pad)`` (see below)
``x.amin`` / ``x.min(dim=1).values`` (padding ``finfo.max``)  ``... "min" ...``
``x.softmax(dim=1)``: ``_padded_dense_to_jagged_forward(      ``segment_softmax(V, off)``
_softmax(P_-inf, 1), [off], rows)``
``F.scaled_dot_product_attention`` on NJT q/k/v ``[B, H,     ``attention(q, k, v, off,
j, d]`` sharing offsets: ``_flash_attention_forward`` /       scale, causal)`` on ``[rows,
``_efficient_attention_forward`` with ``cu_seqlens =           H, d]``
off.to(int32)`` (CUDA backends; see :func:`capture_njt_sdpa`
for CPU)
==========================================================  ==============================

Each rewrite is exact, not approximate; the checks that make it so:

* padding values: sum/mean need 0, softmax needs -inf; max/min take any
  finite padding (NJT uses ``finfo.min`` / ``finfo.max``), and since the
  padded reduction also sees the padding value whenever an item is shorter
  than the padded length ``L``, the rewrite keeps that:
  ``where(len < L, clamp(seg, pad), seg)`` (with NJT's padding this only
  differs from the bare segment reduction for an item of all -inf / +inf
  values; NaN propagates the same way in both);
* dims: the reduction is over dim 1 of the padded ``[B, L, X]`` tensor, or of
  a view of it that only splits the last dim ``X`` (``[B, j, H, d]`` inputs);
  ``keepdim`` and ``sum``'s ``dtype`` are honoured or the match is refused;
* empty items (NJT allows them): sum gives 0 and mean gives 0/0 = NaN, max/min
  give the padding value, which the ``empty`` argument reproduces; softmax
  and attention have no rows for them;
* offsets: the padding and unpadding ops, the mean's lengths and both
  ``cu_seqlens`` of the attention must come from the same offsets node;
* attention: no mask / bias, dropout 0, no sliding window, identical
  ``[H, d]`` for q, k and v, and only the output (not the logsumexp that a
  training graph saves) used; the scale is the explicit one, or
  ``1/sqrt(d)``; a causal mask is top-left, which per item (q and k share
  lengths) is the usual one. Zero padding of the head dim (flash, d % 8 != 0)
  is harmless: ragged.attention on the padded tensors gives the same padded
  output, which NJT then slices (that flash variant cannot be traced on a
  CPU-only build, so it is untested here).

One assumption is NJT's own invariant: the padded length ``L`` (the NJT's
max seqlen, or its number of rows) is at least every item's length, so the
padding never truncates an item.

Everything else is left alone: a matcher that cannot prove a check refuses
(``explain=`` lists why) rather than guessing, and a refused match leaves no
node behind.
"""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Callable
from typing import Any

import torch
import torch.fx as fx
from torch.utils._pytree import tree_map

from .. import ops  # noqa: F401  (registers torch.ops.ragged.*)
from ..graphs import bound_args

__all__ = ["rewrite_njt_patterns", "capture_njt_sdpa"]

aten = torch.ops.aten
ragged = torch.ops.ragged

_PAD = aten._jagged_to_padded_dense_forward.default
_UNPAD = aten._padded_dense_to_jagged_forward.default
_VIEWS = {aten.view.default, aten._unsafe_view.default, aten.reshape.default}
_INT64_MAX = 2**63 - 1


class _NoMatch(Exception):
    pass


# -- small helpers ---------------------------------------------------------------


def _is_call(node: Any, *targets) -> bool:
    return isinstance(node, fx.Node) and node.op == "call_function" and node.target in targets


def _bind(node: fx.Node) -> dict:
    """The node's arguments by schema name, defaults filled in."""
    try:
        return bound_args(node)
    except TypeError as e:
        raise _NoMatch(str(e)) from e


def _val(node: Any):
    if isinstance(node, fx.Node):
        return node.meta.get("val")
    return node


def _same_size(a, b) -> bool:
    """``a == b`` provably (ints or SymInts), without adding guards."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if a is None or b is None:
        return False
    if a is b:
        return True
    try:
        from torch.fx.experimental.symbolic_shapes import statically_known_true

        return bool(statically_known_true(a == b))
    # Comparing symbolic sizes raises many kinds (data-dependent sizes,
    # unsupported expressions): equality is then unknown, so no match.
    except Exception:  # noqa: BLE001
        return False


def _tensor_val(node: Any) -> torch.Tensor:
    v = _val(node)
    if not isinstance(v, torch.Tensor):
        raise _NoMatch(f"{getattr(node, 'name', node)}: no tensor metadata")
    return v


def _static_ints(shape) -> list[int] | None:
    out = []
    for d in shape:
        if not isinstance(d, int):
            return None
        out.append(d)
    return out


def _float_values(node: fx.Node) -> torch.Tensor:
    v = _tensor_val(node)
    if not v.dtype.is_floating_point:
        raise _NoMatch(f"{node.name}: dtype {v.dtype} (only floating values are rewritten)")
    return v


def _dim_is(dim, ndim: int, want: int) -> bool:
    return isinstance(dim, int) and (dim == want or dim == want - ndim)


class _Builder:
    """Inserts nodes before ``anchor``, each with a fake-tensor ``val``."""

    def __init__(self, gm: fx.GraphModule, anchor: fx.Node):
        self.graph = gm.graph
        self.anchor = anchor
        self.mode = _fake_mode(gm)

    def __call__(self, target: Callable, *args, **kwargs) -> fx.Node:
        val = None
        if self.mode is not None:
            fargs, fkwargs = tree_map(
                lambda a: a.meta.get("val") if isinstance(a, fx.Node) else a, (args, kwargs)
            )
            try:
                with self.mode:
                    val = target(*fargs, **fkwargs)
            except Exception as e:  # any failure of the fake op: the pattern does not hold
                raise _NoMatch(f"shape propagation of {target} failed: {e}") from e
        with self.graph.inserting_before(self.anchor):
            node = self.graph.call_function(target, args, kwargs)
        node.meta.update(
            {k: v for k, v in self.anchor.meta.items() if k in ("stack_trace", "nn_module_stack")}
        )
        if val is not None:
            node.meta["val"] = val
        return node


def _fake_mode(gm: fx.GraphModule):
    try:
        from torch._guards import detect_fake_mode

        vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
        return detect_fake_mode([v for v in vals if isinstance(v, torch.Tensor)])
    except (ImportError, AssertionError):  # no such torch API, or several fake modes
        return None


# -- padded inputs -----------------------------------------------------------------


class _Padded:
    """``P' = [view](_jagged_to_padded_dense_forward(V, [off], [L], pad))``:
    ``V`` 2-D ``[rows, X]``, ``P`` ``[B, L, X]``, ``P'`` ``[B, L, *tail]``
    with ``prod(tail) == X``."""

    def __init__(self, node: fx.Node):
        view = None
        if _is_call(node, *_VIEWS):
            view, node = node, node.args[0]
        if not _is_call(node, _PAD):
            raise _NoMatch("not a padded NJT")
        a = _bind(node)
        if len(a["offsets"]) != 1 or len(a["max_lengths"]) != 1:
            raise _NoMatch(f"{node.name}: more than one ragged dim")
        self.pad_node = node
        self.values = a["values"]
        self.offsets = a["offsets"][0]
        self.length = a["max_lengths"][0]  # int or SymInt node
        self.padding = float(a["padding_value"])
        v = _float_values(self.values)
        if v.dim() != 2:
            raise _NoMatch(f"{node.name}: values of rank {v.dim()}")
        off = _tensor_val(self.offsets)
        if off.dtype != torch.int64 or off.dim() != 1:
            raise _NoMatch(f"{node.name}: offsets {off.dtype} rank {off.dim()}")
        p = _tensor_val(node)
        self.tail: list[int] | None = None  # None: P' is P itself
        if view is not None:
            pv = _tensor_val(view)
            tail = _static_ints(pv.shape[2:]) if pv.dim() >= 2 else None
            x = p.shape[2]
            if (
                tail is None
                or not isinstance(x, int)
                or math.prod(tail) != x
                or not _same_size(pv.shape[0], p.shape[0])
                or not _same_size(pv.shape[1], p.shape[1])
            ):
                raise _NoMatch(f"{view.name}: a view that does not only split the last dim")
            self.tail = tail
        self.ndim = 3 if self.tail is None else 2 + len(self.tail)

    def reshape_result(self, b: _Builder, seg: fx.Node, keepdim: bool) -> fx.Node:
        """``[B, X]`` segment result to the shape of ``reduce(P', 1, keepdim)``."""
        out = seg
        if self.tail is not None and len(self.tail) != 1:
            out = b(aten.view.default, out, [-1, *self.tail])
        if keepdim:
            out = b(aten.unsqueeze.default, out, 1)
        return out

    def lengths(self, b: _Builder) -> fx.Node:
        hi = b(aten.slice.Tensor, self.offsets, 0, 1, _INT64_MAX)
        lo = b(aten.slice.Tensor, self.offsets, 0, 0, -1)
        return b(aten.sub.Tensor, hi, lo)


# -- reductions ----------------------------------------------------------------------

_REDUCTIONS = {
    aten.sum.dim_IntList: "sum",
    aten.amax.default: "max",
    aten.amin.default: "min",
    aten.max.dim: "max",
    aten.min.dim: "min",
}


def _reduction_args(node: fx.Node) -> tuple[_Padded, str, bool]:
    kind = _REDUCTIONS[node.target]
    a = _bind(node)
    p = _Padded(a["self"])
    dim = a["dim"]
    if isinstance(dim, (list, tuple)):
        if len(dim) != 1:
            raise _NoMatch(f"{node.name}: dims {dim}")
        dim = dim[0]
    if not _dim_is(dim, p.ndim, 1):
        raise _NoMatch(f"{node.name}: dim {dim} is not the ragged dim")
    if a.get("dtype") is not None:
        raise _NoMatch(f"{node.name}: dtype conversion")
    return p, kind, bool(a["keepdim"])


def _segment_reduce(b: _Builder, p: _Padded, kind: str) -> fx.Node:
    """The segment reduction equal to ``reduce(P, dim=1)``, ``[B, X]``."""
    pad = p.padding
    if kind == "sum":
        if pad != 0.0:
            raise _NoMatch(f"sum over padding {pad}")
        return b(ragged.segment_reduce.default, p.values, p.offsets, "sum", 0.0)
    if kind == "mean":
        if pad != 0.0:
            raise _NoMatch(f"mean over padding {pad}")
        return b(ragged.segment_reduce.default, p.values, p.offsets, "mean", math.nan)
    if math.isnan(pad) or (kind == "max" and pad == math.inf) or (kind == "min" and pad == -math.inf):
        raise _NoMatch(f"{kind} over padding {pad}")
    seg = b(ragged.segment_reduce.default, p.values, p.offsets, kind, pad)
    if (kind == "max" and pad == -math.inf) or (kind == "min" and pad == math.inf):
        return seg  # the padding never wins
    # Items shorter than L also see the padding value in the padded reduction.
    short = b(aten.lt.Scalar, p.lengths(b), p.length)
    short = b(aten.unsqueeze.default, short, 1)
    bound = b(aten.clamp_min.default if kind == "max" else aten.clamp_max.default, seg, pad)
    return b(aten.where.self, short, bound, seg)


def _rewrite_reduction(gm: fx.GraphModule, node: fx.Node) -> str | None:
    p, kind, keepdim = _reduction_args(node)
    if node.target in (aten.max.dim, aten.min.dim):
        # Only the values; indices users keep the original node alive.
        uses = [u for u in node.users if _is_call(u, operator.getitem) and u.args[1] == 0]
        if not uses:
            raise _NoMatch(f"{node.name}: only the indices are used")
    else:
        uses = [node]
    b = _Builder(gm, node)
    out = p.reshape_result(b, _segment_reduce(b, p, kind), keepdim)
    for u in uses:
        u.replace_all_uses_with(out)
    return f"{node.name}: {node.target} over {p.pad_node.name} -> ragged.segment_reduce({kind})"


def _is_lengths_of(node: Any, offsets: fx.Node) -> bool:
    """``node`` is ``offsets[1:] - offsets[:-1]`` (as ATen slices)."""
    if not _is_call(node, aten.sub.Tensor) or len(node.args) != 2 or node.kwargs.get("alpha", 1) != 1:
        return False
    hi, lo = node.args
    n = _tensor_val(offsets).shape[0]

    def slice_of(s, start, end_ok):
        if not _is_call(s, aten.slice.Tensor):
            return False
        a = _bind(s)
        return (
            a["self"] is offsets
            and a["dim"] in (0, -1)
            and a["start"] == start
            and a["step"] == 1
            and end_ok(a["end"])
        )

    def hi_end(e):
        return e is None or (isinstance(e, int) and (e >= n if isinstance(n, int) else e == _INT64_MAX))

    def lo_end(e):
        return e == -1 or (isinstance(n, int) and e == n - 1)

    return slice_of(hi, 1, hi_end) and slice_of(lo, 0, lo_end)


def _rewrite_mean(gm: fx.GraphModule, node: fx.Node) -> str | None:
    """``div(sum(P', [1], keepdim=True), unsqueeze*(diff(off)))``."""
    if len(node.args) != 2:
        raise _NoMatch("div arity")
    num, den = node.args
    if not _is_call(num, aten.sum.dim_IntList):
        raise _NoMatch("numerator is not a sum")
    p, kind, keepdim = _reduction_args(num)
    if not keepdim:
        raise _NoMatch("mean's sum without keepdim")
    d, unsq = den, 0
    while _is_call(d, aten.unsqueeze.default) and d.args[1] == -1:
        d, unsq = d.args[0], unsq + 1
    if unsq != p.ndim - 1 or not _is_lengths_of(d, p.offsets):
        raise _NoMatch("denominator is not the item lengths")
    b = _Builder(gm, node)
    out = p.reshape_result(b, _segment_reduce(b, p, "mean"), True)
    node.replace_all_uses_with(out)
    return f"{node.name}: sum({p.pad_node.name})/lengths -> ragged.segment_reduce(mean)"


# -- softmax ---------------------------------------------------------------------------


def _rewrite_softmax(gm: fx.GraphModule, node: fx.Node) -> str | None:
    """``_padded_dense_to_jagged_forward(_softmax(P_-inf, 1), [off], rows)``."""
    a = _bind(node)
    sm = a["dense"]
    if not _is_call(sm, aten._softmax.default):
        raise _NoMatch("not a softmax")
    s = _bind(sm)
    if s["half_to_float"]:
        raise _NoMatch("half_to_float softmax")
    p = _Padded(s["self"])
    if p.tail is not None:
        raise _NoMatch("softmax over a reshaped padded tensor")
    if not _dim_is(s["dim"], 3, 1):
        raise _NoMatch(f"softmax dim {s['dim']}")
    if p.padding != -math.inf:
        raise _NoMatch(f"softmax over padding {p.padding}")
    if len(a["offsets"]) != 1 or a["offsets"][0] is not p.offsets:
        raise _NoMatch("unpadding with other offsets")
    rows_in, rows_out = _tensor_val(p.values).shape[0], _tensor_val(node).shape[0]
    if not _same_size(rows_in, rows_out):
        raise _NoMatch("unpadding to another number of rows")
    b = _Builder(gm, node)
    out = b(ragged.segment_softmax.default, p.values, p.offsets)
    node.replace_all_uses_with(out)
    return f"{node.name}: unpad(softmax({p.pad_node.name}, 1)) -> ragged.segment_softmax"


# -- attention -------------------------------------------------------------------------


def _int64_offsets(b: _Builder, cu_q: Any, cu_k: Any) -> tuple[fx.Node, Callable[[], fx.Node]]:
    """The int64 offsets both ``cu_seqlens`` come from."""

    def source(cu):
        if _is_call(cu, aten._to_copy.default) and set(cu.kwargs) <= {"dtype", "device", "layout"}:
            return cu.args[0]
        return cu

    src_q, src_k = source(cu_q), source(cu_k)
    if not isinstance(src_q, fx.Node) or src_q is not src_k:
        raise _NoMatch("q and k have different offsets")
    v = _tensor_val(src_q)
    if v.dim() != 1 or v.dtype not in (torch.int64, torch.int32):
        raise _NoMatch(f"cu_seqlens {v.dtype} rank {v.dim()}")
    if v.dtype == torch.int64:
        return src_q, lambda: src_q
    return src_q, lambda: b(aten._to_copy.default, src_q, dtype=torch.int64)


def _only_output_used(node: fx.Node) -> list[fx.Node]:
    uses = []
    for u in node.users:
        if not (_is_call(u, operator.getitem) and isinstance(u.args[1], int)):
            raise _NoMatch(f"{node.name}: used as a whole")
        if u.args[1] != 0:
            if u.users:
                raise _NoMatch(f"{node.name}: output {u.args[1]} (logsumexp, rng state...) is used")
            continue
        uses.append(u)
    if not uses:
        raise _NoMatch(f"{node.name}: output unused")
    return uses


def _attention_args(q, k, v, scale):
    tq, tk, tv = (_float_values(x) for x in (q, k, v))
    if tq.dim() != 3 or tk.dim() != 3 or tv.dim() != 3:
        raise _NoMatch("attention operands are not [rows, heads, d]")
    if not (tq.dtype == tk.dtype == tv.dtype):
        raise _NoMatch("mixed dtypes")
    if not all(_same_size(x, y) for x, y in zip(tq.shape[1:], tk.shape[1:], strict=False)) or not all(
        _same_size(x, y) for x, y in zip(tq.shape[1:], tv.shape[1:], strict=False)
    ):
        raise _NoMatch("q, k, v differ in heads or head dim")
    if scale is None:
        d = tq.shape[-1]
        if not isinstance(d, int):
            raise _NoMatch("symbolic head dim")
        scale = 1.0 / math.sqrt(d)
    return float(scale)


def _rewrite_flash(gm: fx.GraphModule, node: fx.Node) -> str | None:
    a = _bind(node)
    if a["dropout_p"] != 0.0 or a["return_debug_mask"]:
        raise _NoMatch("dropout or debug mask")
    for key in ("window_size_left", "window_size_right", "seqused_k", "alibi_slopes", "block_table"):
        if a.get(key) is not None:
            raise _NoMatch(f"flash attention with {key}")
    if a["cum_seq_q"] is None or a["cum_seq_k"] is None:
        raise _NoMatch("dense (non-varlen) flash attention")
    uses = _only_output_used(node)
    q, k, v = a["query"], a["key"], a["value"]
    scale = _attention_args(q, k, v, a["scale"])
    b = _Builder(gm, node)
    _, off = _int64_offsets(b, a["cum_seq_q"], a["cum_seq_k"])
    out = b(ragged.attention.default, q, k, v, off(), scale, bool(a["is_causal"]))
    for u in uses:
        u.replace_all_uses_with(out)
    return f"{node.name}: _flash_attention_forward(varlen) -> ragged.attention(scale={scale:g}, causal={bool(a['is_causal'])})"


def _rewrite_efficient(gm: fx.GraphModule, node: fx.Node) -> str | None:
    a = _bind(node)
    if a["bias"] is not None or a["dropout_p"] != 0.0:
        raise _NoMatch("attention bias or dropout")
    if a.get("seqlen_k") is not None or a.get("window_size") is not None:
        raise _NoMatch("seqlen_k / window_size")
    if a["cu_seqlens_q"] is None or a["cu_seqlens_k"] is None:
        raise _NoMatch("dense (non-varlen) efficient attention")
    mask = a["custom_mask_type"]
    if mask not in (0, 1, 2):  # none, causal top-left, bottom-right (same per item: equal lengths)
        raise _NoMatch(f"custom_mask_type {mask}")
    uses = _only_output_used(node)
    b = _Builder(gm, node)
    qkv = []
    for x in (a["query"], a["key"], a["value"]):
        tx = _tensor_val(x)
        if tx.dim() != 4 or not _same_size(tx.shape[0], 1):
            raise _NoMatch("efficient attention operand is not [1, rows, heads, d]")
        if _is_call(x, aten.unsqueeze.default) and x.args[1] == 0:
            qkv.append(x.args[0])
        else:
            qkv.append(b(aten.squeeze.dim, x, 0))
    scale = _attention_args(*qkv, a["scale"])
    _, off = _int64_offsets(b, a["cu_seqlens_q"], a["cu_seqlens_k"])
    att = b(ragged.attention.default, *qkv, off(), scale, mask != 0)
    out = b(aten.unsqueeze.default, att, 0)
    for u in uses:
        u.replace_all_uses_with(out)
    return f"{node.name}: _efficient_attention_forward(varlen) -> ragged.attention(scale={scale:g}, causal={mask != 0})"


# -- padding and unpadding in general ---------------------------------------------------


def _single_offsets(node: fx.Node, offsets: Any) -> fx.Node:
    if not isinstance(offsets, (list, tuple)) or len(offsets) != 1 or not isinstance(offsets[0], fx.Node):
        raise _NoMatch(f"{node.name}: {len(offsets) if isinstance(offsets, (list, tuple)) else '?'} offsets")
    if _tensor_val(offsets[0]).dtype != torch.int64:
        raise _NoMatch(f"{node.name}: offsets of dtype {_tensor_val(offsets[0]).dtype}")
    return offsets[0]


def _size_node(gm: fx.GraphModule, anchor: fx.Node, size: Any) -> Any:
    """``size`` as a graph value usable at ``anchor``: the int itself, a node
    that already computes it, or ``sym_size`` of a tensor that has it as a dim."""
    if isinstance(size, int):
        return size
    expr = str(size.node.expr)
    for n in gm.graph.nodes:
        if n is anchor:
            break
        val = n.meta.get("val")
        if isinstance(val, torch.SymInt) and str(val.node.expr) == expr:
            return n
        if isinstance(val, torch.Tensor):
            for d, s in enumerate(val.shape):
                if isinstance(s, torch.SymInt) and str(s.node.expr) == expr:
                    return _Builder(gm, anchor)(aten.sym_size.int, n, d)
    raise _NoMatch(f"{anchor.name}: no value in the graph computes the size {size}")


def _rewrite_pad(gm: fx.GraphModule, node: fx.Node) -> str | None:
    """Any other NJT padding: ``ragged.to_padded`` to the graph's length."""
    a = _bind(node)
    offsets = _single_offsets(node, a["offsets"])
    lengths = a["max_lengths"]
    if not isinstance(lengths, (list, tuple)) or len(lengths) != 1:
        raise _NoMatch(f"{node.name}: max_lengths {lengths}")
    out = _Builder(gm, node)(
        ragged.to_padded.default, a["values"], offsets, lengths[0], float(a["padding_value"])
    )
    node.replace_all_uses_with(out)
    return f"{node.name}: _jagged_to_padded_dense_forward -> ragged.to_padded"


def _rewrite_unpad(gm: fx.GraphModule, node: fx.Node) -> str | None:
    """Any other NJT unpadding: ``ragged.from_padded`` with the offsets' lengths."""
    a = _bind(node)
    offsets = _single_offsets(node, a["offsets"])
    rows = a.get("total_L")
    if rows is None:
        rows = _size_node(gm, node, _tensor_val(node).shape[0])
    out = _Builder(gm, node)(ragged.from_padded.default, a["dense"], offsets, rows)
    node.replace_all_uses_with(out)
    return f"{node.name}: _padded_dense_to_jagged_forward -> ragged.from_padded"


# -- driver ----------------------------------------------------------------------------


def _passes(fuse_mean: bool) -> list[tuple[tuple, Callable[[fx.GraphModule, fx.Node], str | None]]]:
    # Order matters: a mean consumes its sum before the sum is seen on its own.
    return [
        ((aten._flash_attention_forward.default,), _rewrite_flash),
        ((aten._efficient_attention_forward.default,), _rewrite_efficient),
        ((_UNPAD,), _rewrite_softmax),
        *([((aten.div.Tensor,), _rewrite_mean)] if fuse_mean else []),
        (tuple(_REDUCTIONS), _rewrite_reduction),
        # Last: whatever padding the patterns above did not consume.
        ((_PAD,), _rewrite_pad),
        ((_UNPAD,), _rewrite_unpad),
    ]


def rewrite_njt_patterns(
    gm: fx.GraphModule, *, fuse_mean: bool = False, explain: list | None = None
) -> list[str]:
    """Rewrites, in place, the NJT patterns of an AOTAutograd forward (or
    backward) graph into ``torch.ops.ragged.*`` calls (see the module
    docstring), then removes dead code and recompiles. Returns one line per
    rewrite, for logging.

    ``fuse_mean``: turn NJT's ``x.mean(dim=1)`` (a padded sum divided by the
    item lengths) into one ``segment_reduce(..., "mean", nan)``. Off by
    default because an empty item's mean is 0/0 = NaN, an ``empty`` value the
    ragged backend does not emit yet (``_float``: "NaN literal"); without it
    the sum is rewritten and NJT's division by the lengths stays a dense op,
    which is just as exact.

    ``explain``: if a list, gets ``(node name, reason)`` for each candidate
    node that was left alone.

    Needs the ``val`` metadata (fake tensors, SymInts) that AOTAutograd puts
    on every node; new nodes get theirs by fake propagation, so the graph
    stays importable by torch-mlir. Rewrites are exact for backward graphs
    too (they also reach a backend's ``fw_compiler`` when no
    ``bw_compiler`` is given).
    """
    done: list[str] = []
    for targets, rewrite in _passes(fuse_mean):
        for node in list(gm.graph.nodes):
            if getattr(node, "_erased", False) or node.op != "call_function" or node.target not in targets:
                continue
            if not node.users:
                continue
            before = set(gm.graph.nodes)
            try:
                line = rewrite(gm, node)
            except _NoMatch as e:
                for n in reversed(list(gm.graph.nodes)):  # undo a partial rewrite
                    if n not in before and not n.users:
                        gm.graph.erase_node(n)
                if explain is not None:
                    explain.append((node.name, str(e)))
                continue
            if line:
                done.append(line)
                # Drop what the rewrite made dead (a mean's sum, say) before
                # later passes see it.
                gm.graph.eliminate_dead_code()
    if done:
        gm.graph.lint()
        gm.recompile()
    return done


# -- CPU capture of NJT SDPA -----------------------------------------------------------


@contextlib.contextmanager
def capture_njt_sdpa():
    """Makes ``F.scaled_dot_product_attention`` on CPU NJTs traceable.

    On CPU, NJT SDPA takes PyTorch's MATH path, which converts to a strided
    NestedTensor with a ``.item()``: Dynamo breaks the graph there and the
    attention runs eagerly. Inside this context, *while Dynamo traces* (only
    then: eager calls are untouched) and only for inference-style calls that
    :func:`rewrite_njt_patterns` turns into ``ragged.attention`` (CPU, no
    mask, dropout 0, no GQA, no grad, q/k/v sharing one offsets tensor), NJT
    SDPA takes the memory-efficient varlen path instead. That path has no
    CPU kernel, so use it only with a backend that applies
    :func:`rewrite_njt_patterns` (``backend="ragged"``); the graphs compiled
    inside the context keep this choice after it exits.
    """
    import torch.nested._internal.sdpa as nsdpa
    from torch.nn.attention import SDPBackend

    original = nsdpa._select_sdp_backend

    def select(query, key, value, attn_mask, dropout, is_causal, enable_gqa):
        if (
            torch.compiler.is_compiling()
            and query.device.type == "cpu"
            and attn_mask is None
            and dropout == 0.0
            and not enable_gqa
            and not (query.requires_grad or key.requires_grad or value.requires_grad)
            and query.dim() == 4
            and query._ragged_idx == 2
            and key._ragged_idx == 2
            and value._ragged_idx == 2
            and query._lengths is None
            and query._offsets is key._offsets
            and query._offsets is value._offsets
            and query.size(1) == key.size(1) == value.size(1)
            and query.size(-1) == key.size(-1) == value.size(-1)
        ):
            return SDPBackend.EFFICIENT_ATTENTION
        return original(query, key, value, attn_mask, dropout, is_causal, enable_gqa)

    nsdpa._select_sdp_backend = select
    try:
        yield
    finally:
        nsdpa._select_sdp_backend = original
