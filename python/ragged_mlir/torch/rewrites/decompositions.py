"""torch-mlir decompositions and workarounds: FX rewrites applied before a
graph is planned (``count_dims_from_the_front``), and the retrace through
torch-mlir's decomposition table, with ours, for graphs it imports wrongly
or not at all (``imports_wrong``, ``decompose``)."""

from __future__ import annotations

import math
import operator

import torch
import torch.fx as fx

from ..graphs import Unsupported, bound_args, value_of

# --------------------------------------------------------------------------
# Dense pieces
# --------------------------------------------------------------------------


def _split_with_sizes(x: torch.Tensor, split_sizes, dim: int = 0) -> list[torch.Tensor]:
    # torch-mlir cannot lower splits of dynamic sizes; slices it can.
    dim = dim % x.dim()
    parts, start = [], 0
    for size in split_sizes:
        parts.append(torch.ops.aten.slice.Tensor(x, dim, start, start + size))
        start = start + size
    return parts


def _repeat_interleave(repeats: torch.Tensor, *, output_size=None) -> torch.Tensor:
    # Item ids of packed rows (``repeat_interleave(lengths)``), which
    # torch-mlir cannot lower: a 1 at every item's end, then a running sum.
    if output_size is None:
        raise NotImplementedError("repeat_interleave without output_size")
    ends = repeats.cumsum(0)
    marks = torch.ops.aten.scatter_add.default(
        repeats.new_zeros(output_size + 1), 0, ends, torch.ones_like(ends)
    )
    return marks.cumsum(0)[:output_size]


def _flash_layout(t: torch.Tensor, like: torch.Tensor | None = None) -> torch.Tensor:
    # ATen's CPU flash kernel lays its output out as the query, and its
    # log-sum-exp and gradients ([N, H, L, ...]) as [N, L, H, ...]; the
    # traced graph's views after it rely on that.
    from torch._prims_common import compute_elementwise_output_logical_to_physical_perm

    if like is None:
        order = [0, 2, 1, *range(3, t.dim())]
    else:
        order, _ = compute_elementwise_output_logical_to_physical_perm(like)
    inverse = sorted(range(len(order)), key=order.__getitem__)
    return t.permute(order).contiguous().permute(inverse)


def _flash_scores(query, key, attn_mask, is_causal, scale):
    """Scaled scores ``[N, H, L, S]`` of ATen's CPU flash attention (f32
    at least), with its causal and additive masks; key heads repeated for
    grouped queries."""
    acc = torch.promote_types(query.dtype, torch.float32)
    if key.size(-3) != query.size(-3):
        key = key.repeat_interleave(query.size(-3) // key.size(-3), dim=-3)
    if scale is None:
        scale = query.size(-1) ** -0.5
    s = torch.matmul(query.to(acc), key.to(acc).transpose(-2, -1)) * scale
    if is_causal:
        keep = torch.ones(s.size(-2), s.size(-1), dtype=torch.bool, device=s.device).tril()
        s = s.masked_fill(~keep, float("-inf"))
    if attn_mask is not None:
        s = s + attn_mask.to(acc)
    return s


def _flash_attention(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None, scale=None):
    # ATen's CPU flash attention (what SDPA traces to without dropout),
    # which torch-mlir cannot lower: softmax from the log-sum-exp the
    # kernel also returns (0 for a row with every key masked, whose output
    # is 0, as the kernel's).
    if dropout_p != 0.0:
        return NotImplemented
    s = _flash_scores(query, key, attn_mask, is_causal, scale)
    lse = torch.logsumexp(s, -1)
    lse = torch.where(lse == float("-inf"), torch.zeros_like(lse), lse)
    if value.size(-3) != query.size(-3):
        value = value.repeat_interleave(query.size(-3) // value.size(-3), dim=-3)
    out = torch.matmul(torch.exp(s - lse.unsqueeze(-1)), value.to(s.dtype))
    return _flash_layout(out.to(query.dtype), like=query), _flash_layout(lse)


def _flash_attention_backward(
    grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *, attn_mask=None, scale=None
):
    # Its gradient from the forward's log-sum-exp: P = exp(S - lse),
    # dV = P^T dO, dS = P (dO V^T - rowsum(P dO V^T)), dQ = dS K, dK = dS^T Q
    # (both scaled); grouped key and value heads add up their queries'.
    if dropout_p != 0.0:
        return NotImplemented
    if scale is None:
        scale = query.size(-1) ** -0.5
    heads, kv_heads = query.size(-3), key.size(-3)
    group = heads // kv_heads
    s = _flash_scores(query, key, attn_mask, is_causal, scale)
    acc = s.dtype
    k, v = key.to(acc), value.to(acc)
    if group != 1:
        k, v = (t.repeat_interleave(group, dim=-3) for t in (k, v))
    p = torch.exp(s - logsumexp.to(acc).unsqueeze(-1))
    d_out = grad_out.to(acc)
    dv = torch.matmul(p.transpose(-2, -1), d_out)
    dp = torch.matmul(d_out, v.transpose(-2, -1))
    ds = p * (dp - (p * dp).sum(-1, keepdim=True))
    dq = torch.matmul(ds, k) * scale
    dk = torch.matmul(ds.transpose(-2, -1), query.to(acc)) * scale
    if group != 1:
        dk, dv = (t.unflatten(-3, (kv_heads, group)).sum(-3) for t in (dk, dv))
    return tuple(_flash_layout(g.to(t.dtype)) for g, t in ((dq, query), (dk, key), (dv, value)))


def _roll(a, shifts, dims=()):
    # Without dims, torch.roll shifts the flattened tensor.
    if len(dims) != 0 or len(shifts) != 1:
        return NotImplemented
    return torch.roll(a.flatten(), shifts, 0).view(a.shape)


def _masked_scatter(a, mask, source):
    # The k-th True of the mask (in row-major order) takes source's k-th element.
    mask = mask.expand_as(a)
    flat = mask.flatten()
    picked = (flat.cumsum(0) - 1).clamp(min=0)
    values = source.flatten()[picked].view(a.shape)
    return torch.where(mask, values, a)


def _diagonal_scatter(a, src, offset=0, dim1=0, dim2=1):
    # src's k-th element onto the k-th element of the diagonal: (i, j) on
    # it reads src[min(i, j)].
    moved = a.movedim((dim1, dim2), (-2, -1))
    rows = torch.arange(moved.size(-2), device=a.device)[:, None]
    cols = torch.arange(moved.size(-1), device=a.device)[None, :]
    on = cols - rows == offset
    picked = torch.minimum(rows, cols).clamp(max=max(src.size(-1) - 1, 0))
    out = torch.where(on, src[..., picked], moved)
    return out.movedim((-2, -1), (dim1, dim2))


def _sort_stable(a, *, stable=None, dim=-1, descending=False):
    # IREE's sort keeps equal keys in their order (its comparisons are
    # strict), so the stable sort is the plain one.
    return torch.ops.aten.sort.default(a, dim, descending)


_SCATTER_IDENTITY = {"sum": 0, "mean": 0, "prod": 1, "amax": float("-inf"), "amin": float("inf")}


def _scatter_reduce(a, dim, index, src, reduce, *, include_self=True):
    # Without self, the scattered positions start from the reduction's
    # identity (which IREE cannot compile as torch-mlir lowers it); a mean
    # divides by the count of its own values, and positions no value
    # reaches keep self.
    if include_self:
        return NotImplemented
    identity = _SCATTER_IDENTITY[reduce]
    if not a.dtype.is_floating_point and reduce in ("amax", "amin"):
        info = torch.iinfo(a.dtype)
        identity = info.min if reduce == "amax" else info.max
    base = a.scatter(dim, index, identity)
    if reduce != "mean":
        return base.scatter_reduce(dim, index, src, reduce, include_self=True)
    total = base.scatter_reduce(dim, index, src, "sum", include_self=True)
    count = torch.zeros_like(a).scatter_add(dim, index, torch.ones_like(src))
    mean = (
        total / count.clamp(min=1)
        if a.dtype.is_floating_point
        else total.div(count.clamp(min=1), rounding_mode="floor")
    )
    return torch.where(count > 0, mean, a)


def _constant_pad_nd(a, pad, value=0):
    # A negative pad slices instead (IREE cannot compile a negative
    # tensor.pad).
    if all(p >= 0 for p in pad):
        return NotImplemented
    for i in range(len(pad) // 2):
        dim = a.dim() - 1 - i
        low, high = pad[2 * i], pad[2 * i + 1]
        a = a.narrow(dim, max(-low, 0), a.size(dim) - max(-low, 0) - max(-high, 0))
    return torch.constant_pad_nd(a, [max(p, 0) for p in pad], value)


def _embedding_bag(
    weight,
    indices,
    offsets,
    scale_grad_by_freq=False,
    mode=0,
    sparse=False,
    per_sample_weights=None,
    include_last_offset=False,
    padding_idx=-1,
):
    # The bags' sums, means or maxima of the weight rows their indices pick
    # (an empty bag gives 0, padding_idx's rows count for nothing). Only the
    # output is computed: imports_wrong refuses a graph that reads the
    # other three results.
    if padding_idx is None:
        padding_idx = -1
    if indices.dim() != 1 or (mode == 2 and padding_idx >= 0):
        return NotImplemented
    n = indices.size(0)
    bags = offsets.size(0) - (1 if include_last_offset else 0)
    starts = offsets[:bags]
    marks = torch.zeros(n + 1, dtype=torch.int64, device=indices.device)
    marks = marks.scatter_add(0, starts, torch.ones_like(starts))
    bag = marks.cumsum(0)[:n] - 1
    rows = weight[indices]
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.unsqueeze(1)
    keep = None
    if padding_idx >= 0:
        keep = indices != padding_idx
        rows = torch.where(keep.unsqueeze(1), rows, torch.zeros_like(rows))
    out = weight.new_zeros(bags, weight.size(1))
    if mode == 2:
        out = out.scatter_reduce(0, bag.unsqueeze(1).expand_as(rows), rows, "amax", include_self=False)
    else:
        out = out.index_add(0, bag, rows)
    if mode == 1:
        counted = torch.ones_like(bag) if keep is None else keep.to(torch.int64)
        count = torch.zeros(bags, dtype=torch.int64, device=indices.device).index_add(0, bag, counted)
        out = out / count.clamp(min=1).unsqueeze(1).to(out.dtype)
    empty = indices.new_zeros(0)
    return out, empty, empty.new_zeros(bags), empty.new_zeros(bags)


def _vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None):
    # The 0-"norm" counts the nonzero elements; torch-mlir computes it as
    # sum(|x|^0)^(1/0), inf.
    if isinstance(ord, (int, float)) and ord != 0:
        return NotImplemented
    out_dtype = dtype or (x.dtype if x.dtype.is_floating_point else torch.float32)
    dims = dim if dim else None
    count = (x != 0).sum(dim=dims, keepdim=keepdim).to(out_dtype)
    if isinstance(ord, (int, float)):
        return count
    # An order known only at run time (a symbolic scalar): every case,
    # chosen on the device; torch-mlir's formula holds for finite nonzero
    # orders only.
    a = x.abs().to(out_dtype)
    p = torch.scalar_tensor(ord, dtype=out_dtype, device=x.device)
    reduce_all = dims if dims is not None else list(range(x.dim()))
    general = a.pow(p).sum(dim=dims, keepdim=keepdim).pow(1 / p)
    largest = a.amax(dim=reduce_all, keepdim=keepdim)
    smallest = a.amin(dim=reduce_all, keepdim=keepdim)
    infinite = torch.where(p > 0, largest, smallest)
    return torch.where(p == 0, count, torch.where(p.isinf(), infinite, general))


def _when_scalar(reduced, otherwise=None):
    """A decomposition of a reduction over dims: for a 0-d input, which has
    one implicit dim, ``reduced(x)`` (torch-mlir cannot lower amax, amin,
    logsumexp, max, min, argmax or argmin of one); for any other input,
    ``otherwise`` (torch-mlir's own decomposition), or none."""

    def decompose(x, *args, **kwargs):
        out = reduced(x) if x.dim() == 0 else NotImplemented
        if out is NotImplemented and otherwise is not None:
            return otherwise(x, *args, **kwargs)
        return out

    return decompose


def _zero_index(x):
    return torch.zeros((), dtype=torch.int64, device=x.device)


def _permute_copy(x, dims):
    return x.permute(dims).clone()


def _scatter_reduce_op(x, dim, index, src, *, reduce):
    # scatter(..., reduce="add" | "multiply"), which torch-mlir cannot lower.
    how = {"add": "sum", "multiply": "prod"}[reduce]
    if not isinstance(src, torch.Tensor):
        src = torch.full(index.shape, src, dtype=x.dtype, device=x.device)
    return x.scatter_reduce(dim, index, src.to(x.dtype), how, include_self=True)


def _fmax_fmin(largest):
    # A NaN gives way to the other operand. torch-mlir failed to broadcast
    # its own lowering's masks.
    def decomposition(a, b):
        both = torch.maximum(a, b) if largest else torch.minimum(a, b)
        return torch.where(a.isnan(), b, torch.where(b.isnan(), a, both))

    return decomposition


def _copysign(a, b):
    # |a| with the sign bit of b: signbit has a lowering of its own
    # (torch-mlir has none for either).
    dtype = torch.result_type(a, b)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    magnitude = a.to(dtype).abs()
    negative = torch.signbit(b) if isinstance(b, torch.Tensor) else math.copysign(1.0, b) < 0
    if isinstance(negative, bool):
        return -magnitude if negative else magnitude
    return torch.where(negative, -magnitude, magnitude)


def _rad2deg(x):
    # torch-mlir multiplies by 57.295827908797776 (180 / pi is 57.29577951308232).
    return (x if x.dtype.is_floating_point else x.to(torch.get_default_dtype())) * (180 / math.pi)


def _decompositions() -> dict:
    from torch_mlir.extras.fx_decomp_util import get_decomposition_table

    table = dict(get_decomposition_table())
    # torch-mlir lowers layer norm whole, in the input's precision; its
    # decomposition ends in a variance that torch-mlir computes in f64.
    del table[torch.ops.aten.native_layer_norm.default]
    table[torch.ops.aten.split_with_sizes.default] = _split_with_sizes
    table[torch.ops.aten.repeat_interleave.Tensor] = _repeat_interleave
    table[torch.ops.aten._embedding_bag_forward_only.default] = _embedding_bag
    table[torch.ops.aten._embedding_bag.default] = _embedding_bag
    table[torch.ops.aten.linalg_vector_norm.default] = _vector_norm
    table[torch.ops.aten.rad2deg.default] = _rad2deg
    table[torch.ops.aten.copysign.Tensor] = _copysign
    table[torch.ops.aten.copysign.Scalar] = _copysign
    table[torch.ops.aten.permute_copy.default] = _permute_copy
    table[torch.ops.aten.scatter.reduce] = _scatter_reduce_op
    table[torch.ops.aten.scatter.value_reduce] = _scatter_reduce_op
    table[torch.ops.aten.fmax.default] = _fmax_fmin(True)
    table[torch.ops.aten.fmin.default] = _fmax_fmin(False)
    table[torch.ops.aten.amax.default] = _when_scalar(torch.clone)
    table[torch.ops.aten.amin.default] = _when_scalar(torch.clone)
    # An integer's logsumexp is a float: torch-mlir's decomposition.
    table[torch.ops.aten.logsumexp.default] = _when_scalar(
        lambda x: x.clone() if x.dtype.is_floating_point else NotImplemented,
        table[torch.ops.aten.logsumexp.default],
    )
    for extreme in (torch.ops.aten.max.dim, torch.ops.aten.min.dim):
        table[extreme] = _when_scalar(lambda x: (x.clone(), _zero_index(x)))
    table[torch.ops.aten.argmax.default] = _when_scalar(_zero_index)
    table[torch.ops.aten.argmin.default] = _when_scalar(_zero_index)
    table[torch.ops.aten.roll.default] = _roll
    table[torch.ops.aten.masked_scatter.default] = _masked_scatter
    table[torch.ops.aten.diagonal_scatter.default] = _diagonal_scatter
    table[torch.ops.aten.sort.stable] = _sort_stable
    table[torch.ops.aten.scatter_reduce.two] = _scatter_reduce
    table[torch.ops.aten.constant_pad_nd.default] = _constant_pad_nd
    table[torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default] = _flash_attention
    table[torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default] = (
        _flash_attention_backward
    )
    return table


# Ops whose int ``dim`` (their second argument) indexes their first
# argument's dims, and that torch-mlir lowers wrong with a negative one:
# ``scatter_add(x, -1, ...)`` died of SIGSEGV, ``renorm(x, 2, -1, m)``
# normalised the wrong slices.
_DIM_FROM_THE_FRONT = {
    torch.ops.aten.gather.default,
    torch.ops.aten.scatter.src,
    torch.ops.aten.scatter.value,
    torch.ops.aten.scatter.reduce,
    torch.ops.aten.scatter.value_reduce,
    torch.ops.aten.scatter_add.default,
    torch.ops.aten.scatter_reduce.two,
    torch.ops.aten.index_select.default,
}


def count_dims_from_the_front(gm: fx.GraphModule) -> int:
    """Rewrites a negative ``dim`` of the ops above (and ``renorm``'s, its
    third argument) as its index from the front. Returns how many."""
    count = 0
    for node in gm.graph.nodes:
        at = (
            1
            if node.target in _DIM_FROM_THE_FRONT
            else 2
            if node.target is torch.ops.aten.renorm.default
            else None
        )
        if at is None or len(node.args) <= at:
            continue
        dim, val = node.args[at], value_of(node.args[0])
        if isinstance(dim, int) and dim < 0 and isinstance(val, torch.Tensor):
            node.args = (*node.args[:at], dim % max(val.dim(), 1), *node.args[at + 1 :])
            count += 1
    if count:
        gm.recompile()
    return count


_EMBEDDING_BAGS = (torch.ops.aten._embedding_bag_forward_only.default, torch.ops.aten._embedding_bag.default)
_IMPORTS_WRONG = {
    *_EMBEDDING_BAGS,
    torch.ops.aten.scatter_reduce.two,
    torch.ops.aten.linalg_vector_norm.default,
    torch.ops.aten.constant_pad_nd.default,
    torch.ops.aten.rad2deg.default,
}


def imports_wrong(gm: fx.GraphModule) -> bool:
    """Whether ``gm`` holds an op that torch-mlir imports into IR IREE
    cannot compile, or into a wrong result, but that the decompositions
    rewrite: a scatter_reduce without self, a negative pad, an
    embedding_bag with per-sample weights or a padding index (torch-mlir
    ignores both), a 0-norm (torch-mlir's is inf) or one of an order known
    only at run time, rad2deg (torch-mlir's constant is off in the sixth
    digit).
    Raises :class:`Unsupported` for such an embedding_bag whose other
    results are read (a training graph's, for its backward)."""
    aten = torch.ops.aten
    for node in gm.graph.nodes:
        if node.target not in _IMPORTS_WRONG:
            continue
        args = bound_args(node)
        if node.target in _EMBEDDING_BAGS:
            if args["per_sample_weights"] is None and args["padding_idx"] in (None, -1):
                continue
            if any(u.target is not operator.getitem or u.args[1] != 0 for u in node.users):
                raise Unsupported(
                    "embedding_bag with per_sample_weights or padding_idx whose extra results are read", node
                )
            return True
        if node.target is aten.scatter_reduce.two and args["include_self"] is False:
            return True
        if node.target is aten.linalg_vector_norm.default and not (
            isinstance(args["ord"], (int, float)) and args["ord"] != 0
        ):
            return True  # a 0-norm, or an order known only at run time
        if node.target is aten.rad2deg.default:
            return True
        if node.target is aten.constant_pad_nd.default and any(
            isinstance(p, int) and p < 0 for p in args["pad"]
        ):
            return True
    return False


def decompose(gm: fx.GraphModule) -> fx.GraphModule:
    """``gm`` retraced through torch-mlir's decomposition table (what its
    own export path applies), under the graph's fake mode and shape
    environment; ragged custom ops stay as they are."""
    from torch._guards import detect_fake_mode
    from torch.fx.experimental.proxy_tensor import make_fx

    vals = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    # The graph's own mode first: a rewritten graph may carry a mode of its
    # own, other than the tracer's.
    own = [v.fake_mode for v in vals if isinstance(v, torch._subclasses.fake_tensor.FakeTensor)]
    mode = own[0] if own else detect_fake_mode(vals)
    if mode is None:
        raise Unsupported("no fake values to retrace the graph with")
    with mode:
        out = make_fx(gm, decomposition_table=_decompositions(), tracing_mode="real")(*vals)
    out.graph.eliminate_dead_code()
    out.recompile()
    return out
