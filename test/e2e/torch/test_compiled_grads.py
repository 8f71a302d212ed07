"""Gradients of ragged ops as users write them, forward and backward compiled
by the ragged backend (``fullgraph=True``, fallback off), against fp64
autograd on each item alone: layer norm on the tokens, ``x @ w`` with the
NestedTensor on the left, a split of the features, softmax over the ragged
dim, max and mean pooling (empty items included), and ``torch.cat`` of two
batches. One compiled graph pair serves every length set."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import torch.nn.functional as F  # noqa: E402
from torch_helpers import ragged_compile  # noqa: E402

from ragged_mlir.torch import NestedTensor  # noqa: E402
from ragged_mlir.torch import backend as rb  # noqa: E402

D = 6
#: (lengths of x, lengths of y): random, empty items, a single item, one long
#: item among short ones, all equal.
LENGTHS = {
    "random": ([3, 2, 5, 1], [2, 4]),
    "empty": ([0, 3, 0], [0, 2]),
    "single": ([4], [1]),
    "one_long": ([1, 57, 2], [3, 1]),
    "equal": ([3, 3, 3], [3, 3]),
}
#: amax of an empty item is -inf; clamping keeps the loss finite.
FLOOR = -10.0


def model(x, y, w, b, g, beta):
    h = F.layer_norm(x, (D,), g, beta) @ w + b
    a, c = h.split(D // 2, dim=-1)
    s = a.softmax(dim=1)
    peak = c.amax(dim=1).clamp(min=FLOOR)
    pooled = torch.cat([s * c, y], dim=0).mean(dim=1)
    return pooled.square().sum() + peak.sum()


def reference(xs, ys, w, b, g, beta):
    """The same loss item by item in fp64 (mean of an empty item: 0)."""
    total = 0
    for x in xs:
        h = F.layer_norm(x, (D,), g, beta) @ w + b
        a, c = h.split(D // 2, dim=-1)
        z = a.softmax(dim=0) * c
        if len(x):
            total = total + c.amax(0).clamp(min=FLOOR).sum() + z.mean(0).square().sum()
        else:
            total = total + FLOOR * (D // 2)
    for y in ys:
        if len(y):
            total = total + y.mean(0).square().sum()
    return total


@pytest.fixture(scope="module")
def compiled():
    return ragged_compile(model)


@pytest.mark.parametrize("case", list(LENGTHS))
def test_compiled_gradients_match_per_item_fp64(compiled, case):
    lens_x, lens_y = LENGTHS[case]
    gen = torch.Generator().manual_seed(len(case))
    xs = [torch.randn(n, D, generator=gen) for n in lens_x]
    ys = [torch.randn(n, D // 2, generator=gen) for n in lens_y]
    params = [torch.randn(D, D, generator=gen), *(torch.randn(D, generator=gen) for _ in range(3))]
    xv = torch.cat(xs).requires_grad_()
    yv = torch.cat(ys).requires_grad_()
    ps = [p.clone().requires_grad_() for p in params]
    x = NestedTensor.from_packed(xv, torch.tensor([0, *torch.tensor(lens_x).cumsum(0).tolist()]))
    y = NestedTensor.from_packed(yv, torch.tensor([0, *torch.tensor(lens_y).cumsum(0).tolist()]))
    fallbacks = rb.stats["fallbacks"]
    loss = compiled(x, y, *ps)
    got = torch.autograd.grad(loss, [xv, yv, *ps])
    assert rb.stats["fallbacks"] == fallbacks

    rx = [t.double().requires_grad_() for t in xs]
    ry = [t.double().requires_grad_() for t in ys]
    rp = [p.double().requires_grad_() for p in params]
    want_loss = reference(rx, ry, *rp)
    want = torch.autograd.grad(want_loss, rx + ry + rp, allow_unused=True, materialize_grads=True)
    want_x = torch.cat(want[: len(rx)]) if rx else torch.zeros(0, D)
    want_y = torch.cat(want[len(rx) : len(rx) + len(ry)])
    assert loss.item() == pytest.approx(want_loss.item(), rel=1e-5)
    for name, a, e in zip(("x", "y", "w", "b", "g", "beta"), got, [want_x, want_y, *want[-4:]], strict=True):
        torch.testing.assert_close(a.double(), e, rtol=1e-4, atol=1e-5, msg=lambda m, n=name: f"d{n}: {m}")


def pooled(x, w):
    """Sum and min pooling over the ragged dim of a projection."""
    h = x @ w
    return h.sum(dim=1).square().sum() + h.amin(dim=1).clamp(max=-FLOOR).sum()


@pytest.fixture(scope="module")
def compiled_pooled():
    return ragged_compile(pooled)


@pytest.mark.parametrize("case", list(LENGTHS))
def test_sum_and_min_pooling_gradients_match_per_item_fp64(compiled_pooled, case):
    """Segment sum and min in a compiled backward: the sum's gradient
    broadcasts to every row, the min's goes to the first row holding it;
    an empty item sums to 0 and its min (+inf) clamps to a constant."""
    lengths = LENGTHS[case][0]
    gen = torch.Generator().manual_seed(7 + len(case))
    xs = [torch.randn(n, D, generator=gen) for n in lengths]
    w = torch.randn(D, D, generator=gen)
    xv = torch.cat(xs).requires_grad_()
    wc = w.clone().requires_grad_()
    x = NestedTensor.from_packed(xv, torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()]))
    fallbacks = rb.stats["fallbacks"]
    got = torch.autograd.grad(compiled_pooled(x, wc), [xv, wc])
    assert rb.stats["fallbacks"] == fallbacks

    rx = [t.double().requires_grad_() for t in xs]
    rw = w.double().requires_grad_()
    want_loss = 0
    for t in rx:
        h = t @ rw
        low = h.amin(0) if len(t) else torch.full((D,), torch.inf, dtype=torch.float64)
        want_loss = want_loss + h.sum(0).square().sum() + low.clamp(max=-FLOOR).sum()
    want = torch.autograd.grad(want_loss, rx + [rw], allow_unused=True, materialize_grads=True)
    torch.testing.assert_close(got[0].double(), torch.cat(want[:-1]), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got[1].double(), want[-1], rtol=1e-4, atol=1e-4)


def test_matmul_with_the_nested_tensor_on_the_left_compiles():
    """Dynamo traces ``nt @ w`` as ``Tensor.matmul(w, nt)``; the NestedTensor
    reads it back as ``nt @ w``, and refuses when both orders fit."""
    x = NestedTensor([torch.randn(n, 4) for n in (3, 1, 2)])
    w = torch.randn(4, 5)
    out = torch.compile(lambda x, w: (x @ w).values, backend="eager", dynamic=True, fullgraph=True)(x, w)
    torch.testing.assert_close(out, x.values @ w)
    square = NestedTensor([torch.randn(n, 4, 4) for n in (3, 1, 2)])
    with pytest.raises(Exception, match="torch.matmul"):
        torch.compile(lambda x, w: (x @ w).values, backend="eager", dynamic=True, fullgraph=True)(
            square, torch.randn(4, 4)
        )
