"""Picking items of a NestedTensor inside a compiled graph: ``nt[idx]`` with
an int tensor (from the host or computed on the device), a list, a slice;
the row count of the result is known only from the offsets' values, so the
device computes it (``ragged.row_range``) and the host never reads it. Forward
and backward run compiled (``fullgraph=True``, fallback off) and equal fp64
per item; an index out of range, or a row read from an empty item, fails the
call with the check's message instead of reading another item's rows."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

from torch import nn  # noqa: E402
from torch_helpers import ragged_compile, randn_items  # noqa: E402

from ragged_mlir.torch import NestedTensor  # noqa: E402
from ragged_mlir.torch import backend as rb  # noqa: E402

D = 8
#: (lengths, picked items): random, empty items picked and skipped, a
#: single item, one long item among short ones, all equal, repeats and
#: negative indices, an empty pick.
CASES = {
    "random": ([3, 5, 2, 4], [2, 0, 3]),
    "empty": ([0, 4, 0, 7], [0, 3, 2, -1]),
    "single": ([6], [0]),
    "one_long": ([1, 61, 2], [1, 1, 0]),
    "equal": ([4, 4, 4], [1, 2, 0]),
    "none": ([2, 3], []),
}


def make_items(lengths, seed=0, dtype=torch.float64, grad=False):
    return [x.requires_grad_(grad) for x in randn_items(lengths, D, seed, dtype)]


class Head(nn.Module):
    """A model as users write one: a projection, then the items a caller picks."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(D, 5)

    def forward(self, x, idx):
        return torch.tanh(self.proj(x))[idx]


def test_picked_items_match_each_item():
    torch.manual_seed(0)
    head = Head().double()
    compiled = ragged_compile(lambda x, idx: head(x, idx))
    before = dict(rb.stats)
    with torch.no_grad():
        for lengths, picks in CASES.values():
            items = make_items(lengths)
            x = NestedTensor(items)
            offsets = x.offsets.clone()
            out = compiled(x, torch.tensor(picks, dtype=torch.int64))
            assert torch.equal(x.offsets, offsets), "the input was changed"
            assert [len(t) for t in out.unbind()] == [lengths[i] for i in picks]
            for got, i in zip(out.unbind(), picks, strict=True):
                torch.testing.assert_close(got, torch.tanh(head.proj(items[i])), rtol=1e-12, atol=1e-12)
    assert rb.stats["fallbacks"] == before["fallbacks"]
    assert rb.stats["compiled"] > before["compiled"]


@pytest.mark.parametrize(
    "select",
    [
        pytest.param(lambda x: x[[2, 0]], id="list"),
        pytest.param(lambda x: x[1:3], id="slice"),
        pytest.param(lambda x: x[torch.arange(len(x)).flip(0)], id="device_index"),
    ],
)
def test_selectors_compile(select):
    compiled = ragged_compile(lambda x: (select(x) * 2).values)
    for lengths in ([3, 0, 5, 2], [1, 9, 4]):
        x = NestedTensor(make_items(lengths))
        torch.testing.assert_close(compiled(x), (select(x) * 2).values, rtol=0, atol=0)


def test_picked_images_keep_their_sizes():
    """Items with two ragged dims (images of their own height and width)."""
    compiled = ragged_compile(lambda x: x[[1, 0, 1]] + 1)
    g = torch.Generator().manual_seed(1)
    images = [torch.randn(3, 4, 5, generator=g), torch.randn(3, 2, 7, generator=g)]
    out = compiled(NestedTensor(images))
    want = [images[1] + 1, images[0] + 1, images[1] + 1]
    for got, ref in zip(out.unbind(), want, strict=True):
        torch.testing.assert_close(got, ref, rtol=0, atol=0)


@pytest.mark.parametrize("case", sorted(CASES))
def test_gradients_of_picked_items(case):
    """Repeated picks add their gradients; unpicked items get zero."""
    lengths, picks = CASES[case]
    torch.manual_seed(0)
    head = Head().double()
    compiled = ragged_compile(lambda x, idx: head(x, idx).square().sum())
    items = make_items(lengths, seed=2, grad=True)
    loss = compiled(NestedTensor(items), torch.tensor(picks, dtype=torch.int64))
    params = list(head.parameters())
    grads = torch.autograd.grad(loss, params + items, allow_unused=True)

    ref_items = [t.detach().clone().requires_grad_(True) for t in items]
    # The same loss item by item; a zero-weighted term keeps an empty pick differentiable.
    ref = sum(
        (torch.tanh(head.proj(ref_items[i])).square().sum() for i in picks),
        0 * head.proj.weight.sum(),
    )
    ref_grads = torch.autograd.grad(ref, params + ref_items, allow_unused=True)
    torch.testing.assert_close(loss, ref, rtol=1e-12, atol=1e-12)
    for got, want in zip(grads, ref_grads, strict=True):
        if want is None:
            assert got is None or not got.any()
            continue
        if got is None:
            got = torch.zeros_like(want)
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_index_out_of_range_fails_the_call():
    compiled = ragged_compile(lambda x, idx: (x[idx] + 1).values)
    x = NestedTensor(make_items([2, 3]))
    compiled(x, torch.tensor([1, 0]))
    with pytest.raises(RuntimeError, match="out of range for the batch size"):
        compiled(x, torch.tensor([0, 2]))
    with pytest.raises(RuntimeError, match="out of range for the batch size"):
        compiled(x, torch.tensor([-3]))


def test_first_token_of_an_empty_item_fails_the_call():
    """``x[:, 0]`` reads row 0 of every item; with an empty item it used to
    read the next item's first row."""
    compiled = ragged_compile(lambda x: x[:, 0] * 2)
    items = make_items([2, 3, 1])
    torch.testing.assert_close(compiled(NestedTensor(items)), torch.stack([t[0] * 2 for t in items]))
    with pytest.raises(RuntimeError, match="out of range for an item"):
        compiled(NestedTensor(make_items([2, 0, 1])))


@pytest.mark.parametrize(
    "dense",
    [
        pytest.param(lambda v: torch.cat([v, v * 2]), id="cat"),
        pytest.param(lambda v: v.t() @ v, id="gram"),
    ],
)
def test_dense_work_on_picked_rows(dense):
    """Dense work on the picked rows, none picked included (a size of 0 that
    Dynamo makes static: IREE could not export an empty concatenation, and
    divided by the zero extent of the gram matrix's contraction)."""
    compiled = ragged_compile(lambda x, idx: dense(x[idx].values))
    x = NestedTensor(make_items([2, 3, 0, 4], seed=5))
    fallbacks = rb.stats["fallbacks"]
    for picks in ([1, 0, 3], [], [2], [3, 3]):
        idx = torch.tensor(picks, dtype=torch.int64)
        want = dense(x[idx].values)
        torch.testing.assert_close(compiled(x, idx), want, rtol=1e-12, atol=1e-12)
    assert rb.stats["fallbacks"] == fallbacks
