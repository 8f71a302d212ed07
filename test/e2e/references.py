"""Independent float64 references of the ragged ops, one item at a time.

Each function takes one item (a dense array or tensor, the ragged dim
first) and never calls the code under test nor the packed layout the
lowering uses; the tests loop over the items and compare the compiled
results with these.

* numpy references (``ref_*``): arrays in, float64 arrays out. The
  attention gradient and the forward's log-sum-exp run torch's autograd
  and softmax on the item (torch is imported when they are called, so the
  numpy-only tests do not need it).
* torch references (``ref_*_torch``): float64 tensors in and out, for the
  ``NestedTensor`` tests; they keep autograd (a weight that requires grad
  gives a result that does).

Under pytest ``test/e2e`` is on ``sys.path`` (the folder of its
``conftest.py``), for the tests in ``test/e2e/torch`` as well:
``from references import ref_softmax``.
"""

from __future__ import annotations

import math

import numpy as np

F64 = np.float64

# --------------------------------------------------------------------------
# numpy
# --------------------------------------------------------------------------


def ref_softmax(x, axis):
    x = np.asarray(x, F64)
    if x.shape[axis] == 0:
        return x.copy()
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


_erf = np.vectorize(math.erf, otypes=[F64])


def ref_gelu(x):
    """Exact GELU, as torch.nn.GELU(): 0.5 x (1 + erf(x / sqrt 2))."""
    x = np.asarray(x, F64)
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))) if x.size else x.copy()


def ref_reduce(kind, seg, empty):
    """Reduce one segment [n, ...] over axis 0; ``empty`` if n == 0."""
    if seg.shape[0] == 0:
        return np.full(seg.shape[1:], empty, F64)
    return {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min}[kind](seg, axis=0)


def ref_layer_norm(x, g, b, eps):
    x = np.asarray(x, F64)
    out = np.empty_like(x)
    for idx in np.ndindex(x.shape[:-1]):
        row = x[idx]
        mu = row.mean()
        var = ((row - mu) ** 2).mean()
        out[idx] = (row - mu) / np.sqrt(var + eps) * g + b
    return out


def ref_scores(q, k, scale, causal):
    """q, k: [L, H, d] -> [L(query), L(key), H]."""
    n, heads, _ = q.shape
    s = np.zeros((n, n, heads))
    for i in range(n):
        for j in range(n):
            for h in range(heads):
                s[i, j, h] = -np.inf if (causal and j > i) else scale * np.dot(q[i, h], k[j, h])
    return s


def ref_apply(p, v):
    """p: [L, L, H], v: [L, H, d] -> [L, H, d]."""
    n, heads, d = v.shape
    o = np.zeros((n, heads, d))
    for i in range(n):
        for h in range(heads):
            o[i, h] = sum((p[i, j, h] * v[j, h] for j in range(n)), np.zeros(d))
    return o


def ref_attention(q, k, v, scale, causal):
    """Scores, softmax over the keys, apply: [L, H, d] -> [L, H, d], by loops."""
    return ref_apply(ref_softmax(ref_scores(q, k, scale, causal), 1), v)


def ref_attention_dense(q, k, v, scale, causal=False):
    """Vectorised fp64 attention of one item: [L, H, d] -> [L, H, d]."""
    s = np.einsum("ihe,jhe->hij", q, k) * scale
    if causal:
        s = np.where(np.tril(np.ones(s.shape[1:], bool)), s, -np.inf)
    s = s - s.max(-1, keepdims=True) if s.size else s
    p = np.exp(s)
    p = p / p.sum(-1, keepdims=True)
    return np.einsum("hij,jhe->ihe", p, v)


def ref_attention_grads(q, k, v, g, scale, causal, keep=None):
    """fp64 (dq, dk, dv) of one item [L, H, d] by torch's autograd; with
    ``keep`` ([H, L, L]: 0 where dropout drops a weight, 1 / (1 - p) where
    it keeps it), of the attention that drops those weights."""
    import torch

    if len(q) == 0:
        return [np.zeros_like(q, np.float64)] * 3
    ts = [torch.tensor(np.asarray(x, np.float64)).transpose(0, 1).requires_grad_() for x in (q, k, v)]
    if keep is None:
        out = torch.nn.functional.scaled_dot_product_attention(*ts, is_causal=causal, scale=scale)
    else:
        n = len(q)
        s = scale * ts[0] @ ts[1].transpose(1, 2)
        if causal:
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        out = (torch.softmax(s, -1) * torch.as_tensor(np.asarray(keep, np.float64))) @ ts[2]
    grads = torch.autograd.grad(out, ts, torch.tensor(np.asarray(g, np.float64)).transpose(0, 1))
    return [x.transpose(0, 1).numpy() for x in grads]


def _mix(x: np.ndarray) -> np.ndarray:
    """MurmurHash3's 32-bit finaliser on uint32 arrays."""
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x85EBCA6B)
    x = x ^ (x >> np.uint32(13))
    x = x * np.uint32(0xC2B2AE35)
    return x ^ (x >> np.uint32(16))


def ref_dropout_kept(seed: int, item: int, heads: int, n: int, p: float) -> np.ndarray:
    """[heads, n, n] bools: the weights of item ``item`` that attention
    dropout keeps, by the rule in ``ragged.attention``'s documentation."""
    with np.errstate(over="ignore"):
        h, i, j = np.ix_(
            np.arange(heads, dtype=np.uint32), np.arange(n, dtype=np.uint32), np.arange(n, dtype=np.uint32)
        )
        c = (
            np.uint32(item) * np.uint32(0x9E3779B1)
            + h * np.uint32(0x85EBCA77)
            + i * np.uint32(0xC2B2AE3D)
            + j * np.uint32(0x27D4EB2F)
        )
        u = _mix(_mix(c ^ np.uint32(seed & 0xFFFFFFFF)) ^ np.uint32((seed >> 32) & 0xFFFFFFFF))
    return u >= np.uint64(min(round(p * 2.0**32), 2**32 - 1))


def ref_attention_forward(q, k, v, scale, causal):
    """fp64 (output, lse [L, H, 1]) of one item [L, H, d]."""
    import torch

    if len(q) == 0:
        return np.zeros_like(q, np.float64), np.zeros((0, q.shape[1], 1))
    qt, kt, vt = (torch.tensor(np.asarray(x, np.float64)).transpose(0, 1) for x in (q, k, v))
    s = scale * qt @ kt.transpose(1, 2)
    if causal:
        s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
    out = torch.softmax(s, -1) @ vt
    return out.transpose(0, 1).numpy(), torch.logsumexp(s, -1).transpose(0, 1).unsqueeze(-1).numpy()


# --------------------------------------------------------------------------
# torch (float64 tensors; hand-written formulas, no torch.nn.functional)
# --------------------------------------------------------------------------


def ref_gelu_torch(x):
    import torch

    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def ref_gelu_tanh_torch(x):
    import torch

    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def ref_layer_norm_torch(x, w, b, eps):
    import torch

    mu = x.mean(dim=-1, keepdim=True)
    var = ((x - mu) ** 2).mean(dim=-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + eps) * w + b


def ref_softmax_torch(x, dim):
    import torch

    if x.shape[dim] == 0:
        return x.clone()
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)


def ref_attention_torch(q, k, v, scale, causal):
    """One item: q, k, v ``[L, H, d]`` float64 -> ``[L, H, d]``."""
    import torch

    n = q.shape[0]
    if n == 0:
        return q.clone()
    s = torch.einsum("lhd,mhd->hlm", q, k) * scale
    if causal:
        keep = torch.ones(n, n, dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    p = ref_softmax_torch(s, -1)
    return torch.einsum("hlm,mhd->lhd", p, v)
