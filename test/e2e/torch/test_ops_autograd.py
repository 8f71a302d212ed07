"""Gradients of the ragged custom ops against per-item torch autograd in
float64 (eager training path)."""

import pytest

torch = pytest.importorskip("torch")

from ragged_mlir.torch import ops  # noqa: E402,F401

LENGTHS = [[3, 0, 5], [1], [4, 4, 4], [2, 9, 1, 0]]
#: gradcheck is numerical: a few small batches (empty item, one item).
SMALL = [[3, 0, 2], [1]]


def packed(lengths, trailing, seed=0):
    g = torch.Generator().manual_seed(seed)
    items = [torch.randn(n, *trailing, generator=g, dtype=torch.float64) for n in lengths]
    offsets = torch.tensor([0] + torch.tensor(lengths).cumsum(0).tolist(), dtype=torch.int64)
    return items, offsets


@pytest.mark.parametrize("lens", LENGTHS)
@pytest.mark.parametrize("kind", ["sum", "mean", "max", "min"])
def test_segment_reduce_grad(lens, kind):
    items, offsets = packed(lens, (3,))
    values = torch.cat(items).requires_grad_()
    out = torch.ops.ragged.segment_reduce(values, offsets, kind, 0.0)
    weights = torch.randn_like(out)
    (got,) = torch.autograd.grad((out * weights).sum(), values)
    refs = [x.clone().requires_grad_() for x in items]
    total = 0
    for x, w in zip(refs, weights, strict=False):
        if len(x):
            r = {"sum": x.sum(0), "mean": x.mean(0), "max": x.amax(0), "min": x.amin(0)}[kind]
            total = total + (r * w).sum()
    want = (
        torch.cat(torch.autograd.grad(total, refs, allow_unused=True, materialize_grads=True))
        if any(len(x) for x in refs)
        else torch.zeros(0, 3, dtype=torch.float64)
    )
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("lens", SMALL)
def test_segment_softmax_grad(lens):
    items, offsets = packed(lens, (3,))
    values = torch.cat(items).requires_grad_()
    torch.autograd.gradcheck(lambda v: torch.ops.ragged.segment_softmax(v, offsets), (values,))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lens", SMALL)
def test_attention_grad(lens, causal):
    items, offsets = packed(lens, (2, 3))
    q, k, v = (torch.cat(items).clone().requires_grad_() for _ in range(3))
    k.data.mul_(0.5)
    torch.autograd.gradcheck(
        lambda a, b, c: torch.ops.ragged.attention(a, b, c, offsets, 0.5, causal), (q, k, v)
    )


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("lens", SMALL)
def test_attention_lse(lens, causal):
    """attention_lse: attention's output, each query row's log-sum-exp, and
    the output's gradient through the backward that takes both."""
    items, offsets = packed(lens, (2, 3))
    q, k, v = (torch.cat(items).clone().requires_grad_() for _ in range(3))
    k.data.mul_(0.5)
    out, lse = torch.ops.ragged.attention_lse(q, k, v, offsets, 0.5, causal)
    torch.testing.assert_close(out, torch.ops.ragged.attention(q, k, v, offsets, 0.5, causal))
    bounds = offsets.tolist()
    for a, b in zip(bounds[:-1], bounds[1:], strict=False):
        s = 0.5 * q[a:b].transpose(0, 1) @ k[a:b].transpose(0, 1).transpose(1, 2)
        if causal:
            s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
        torch.testing.assert_close(lse[a:b], torch.logsumexp(s, -1).transpose(0, 1).unsqueeze(-1))
    assert not lse.requires_grad
    torch.autograd.gradcheck(
        lambda a, b, c: torch.ops.ragged.attention_lse(a, b, c, offsets, 0.5, causal)[0], (q, k, v)
    )
