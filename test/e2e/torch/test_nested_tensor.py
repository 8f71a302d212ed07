"""ragged_mlir.torch.nested.NestedTensor: construction, views, conversions,
eager ops through ``__torch_function__`` and Dynamo traceability.

Every numeric test compares against an independent float64 reference that
loops over the items one by one with plain torch on dense per-item tensors
(hand-written formulas for GELU, LayerNorm, softmax and attention, in
``test/e2e/references.py``; it never touches the packed layout nor the
``torch.ops.ragged`` ops), on random batches and on every length set of ``conftest.LENGTH_SETS`` (empty items
mixed in, B = 1, one 300-long item among short ones, all-equal lengths, all
items empty) plus a random set.

Tolerances (fp32 results against fp64, ``torch.testing.assert_close``):
moves (padding, indexing, unbind, NJT) are exact; elementwise ops
``rtol=atol=1e-5``; linear / sums / means ``rtol=1e-5, atol=1e-4``;
layer norm, softmax and attention ``rtol=1e-4, atol=1e-4``.

There is deliberately no ``__init__.py`` here: with one, pytest would import
this directory as the package ``torch``.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from references import ref_attention_torch as ref_attention  # noqa: E402
from references import ref_gelu_tanh_torch as ref_gelu_tanh  # noqa: E402
from references import ref_gelu_torch as ref_gelu  # noqa: E402
from references import ref_layer_norm_torch as ref_layer_norm  # noqa: E402
from references import ref_softmax_torch as ref_softmax  # noqa: E402

from ragged_mlir.torch.nested import NestedTensor  # noqa: E402
from ragged_mlir.torch.nested import sdpa as nested_sdpa  # noqa: E402

D = 8
ELEM = dict(rtol=1e-5, atol=1e-5)
SUM = dict(rtol=1e-5, atol=1e-4)
EXP = dict(rtol=1e-4, atol=1e-4)


# -- helpers ---------------------------------------------------------------------


def gen(rng) -> torch.Generator:
    return torch.Generator().manual_seed(int(rng.integers(2**31)))


def make_items(rng, lengths, trailing=(D,), dtype=torch.float32, low=-1.0, high=1.0):
    g = gen(rng)
    return [
        (torch.rand((n, *trailing), generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)
        for n in lengths
    ]


def close(actual, expected, **tol):
    torch.testing.assert_close(actual.to(torch.float64), expected.to(torch.float64), **(tol or ELEM))


def check_items(nt: NestedTensor, expected, **tol):
    """``nt`` against a list of per-item reference tensors."""
    assert isinstance(nt, NestedTensor)
    got = nt.unbind()
    assert len(got) == len(expected)
    for i, (a, e) in enumerate(zip(got, expected, strict=False)):
        assert tuple(a.shape) == tuple(e.shape), f"item {i}: {tuple(a.shape)} vs {tuple(e.shape)}"
        close(a, e, **tol)


def padded_ref(items, padding_value, trailing):
    b = len(items)
    m = max((x.shape[0] for x in items), default=0)
    out = torch.full((b, m, *trailing), padding_value, dtype=items[0].dtype)
    for i, x in enumerate(items):
        out[i, : x.shape[0]] = x
    return out


# -- construction and views ------------------------------------------------------


def test_views_one_ragged_dim(rng, lengths):
    items = make_items(rng, lengths)
    before = [x.clone() for x in items]
    nt = NestedTensor(*items, padding_value=-7.5)
    b, m = len(lengths), max(lengths)

    assert len(nt) == b
    assert nt.shape == torch.Size([b, m, D])
    assert nt.dim() == 3 and nt.dtype == torch.float32 and nt.device == items[0].device
    assert nt.ragged_dims == (0,)
    assert nt.offsets.dtype == torch.int64
    assert nt.offsets.tolist() == [0] + list(torch.tensor(lengths).cumsum(0).tolist())
    assert torch.equal(nt.lengths, torch.tensor(lengths))
    assert nt.values is nt.concat
    assert torch.equal(nt.concat, torch.cat(items))
    assert torch.equal(nt.tensor, padded_ref(items, -7.5, (D,)))
    expected_mask = torch.zeros(b, m, dtype=torch.bool)
    for i, n in enumerate(lengths):
        expected_mask[i, :n] = True
    assert torch.equal(nt.mask, expected_mask)
    assert [tuple(s) for s in nt.item_shapes] == [(n, D) for n in lengths]
    for i, x in enumerate(items):
        assert torch.equal(nt[i], x)
        assert torch.equal(nt[i - b], x)
    for a, x in zip(nt.unbind(), items, strict=False):
        assert torch.equal(a, x)
    assert "NestedTensor" in repr(nt)
    # the inputs were copied, never changed
    nt.values.add_(1.0)
    for x, y in zip(items, before, strict=False):
        assert torch.equal(x, y)


def test_mask_value_and_batch_first(rng, lengths):
    items = make_items(rng, lengths)
    nt = NestedTensor(items, batch_first=False, mask_value=True)
    ref = NestedTensor(items)
    # DanLing: mask_value is the value at padding positions
    assert torch.equal(nt.mask, (~ref.mask).transpose(0, 1))
    assert torch.equal(nt.tensor, ref.tensor.transpose(0, 1))
    assert nt.shape == torch.Size([max(lengths), len(lengths), D])
    # transposing the batch and ragged dims only flips the flag
    t = nt.transpose(0, 1)
    assert t.batch_first and torch.equal(t.tensor, ref.tensor) and t.values is nt.values
    # two item dims: a permuted view of the same values
    tt = ref.transpose(1, 2)
    assert (
        tt.values is ref.values
        and tt.ragged_dims == (1,)
        and tt.shape == torch.Size([len(lengths), D, max(lengths)])
    )
    assert torch.equal(tt.tensor, ref.tensor.transpose(1, 2))
    with pytest.raises(ValueError, match="batch dim"):
        nt.transpose(1, 2)  # dim 1 is the batch dim when batch_first=False


def test_constructor_forms():
    a, b = torch.arange(3), torch.arange(5) + 3
    for nt in (
        NestedTensor(a, b),
        NestedTensor([a, b]),
        NestedTensor((a, b)),
        NestedTensor([0, 1, 2], [3, 4, 5, 6, 7]),
    ):
        assert nt.tensor.tolist() == [[0, 1, 2, 0, 0], [3, 4, 5, 6, 7]]
        assert nt.mask.tolist() == [[True, True, True, False, False], [True] * 5]
        assert nt.concat.tolist() == list(range(8))
        assert nt.shape == torch.Size([2, 5]) and nt.dtype == torch.int64
    # DanLing: one iterable is a sequence of items (here two scalar items)
    scalars = NestedTensor([1.0, 2.0])
    assert len(scalars) == 2 and scalars.shape == torch.Size([2]) and scalars.dim() == 1
    assert torch.equal(scalars.tensor, torch.tensor([1.0, 2.0]))
    one = NestedTensor(torch.tensor([[1, 2], [3, 4]]))  # one tensor is one item
    assert len(one) == 1 and one.shape == torch.Size([1, 2, 2])
    assert NestedTensor(a, b).tolist() == [[0, 1, 2], [3, 4, 5, 6, 7]]
    assert NestedTensor(x for x in (a, b)).tolist() == [[0, 1, 2], [3, 4, 5, 6, 7]]
    promoted = NestedTensor(torch.tensor([1]), torch.tensor([1.5]))
    assert promoted.dtype == torch.float32 and promoted.tolist() == [[1.0], [1.5]]
    typed = NestedTensor([[1, 2], [3]], dtype=torch.float64, requires_grad=True)
    assert typed.dtype == torch.float64 and typed.requires_grad and typed.values.is_leaf
    empty = NestedTensor([], dtype=torch.float64)
    assert len(empty) == 0 and empty.shape == torch.Size([0]) and empty.dtype == torch.float64
    assert (
        empty.tensor.shape == torch.Size([0])
        and empty.mask.shape == torch.Size([0])
        and empty.occupancy == 0.0
    )


def test_indexing_and_slicing(rng):
    lengths = [2, 0, 5, 1, 3]
    items = make_items(rng, lengths)
    nt = NestedTensor(items)
    for sl in (slice(1, 4), slice(None, None, 2), slice(None, None, -1), slice(3, 1), slice(0, 5)):
        sub = nt[sl]
        assert isinstance(sub, NestedTensor)
        expected = items[sl]
        assert len(sub) == len(expected)
        for x, y in zip(sub.unbind(), expected, strict=False):
            assert torch.equal(x, y)
        if expected:
            assert torch.equal(sub.tensor, padded_ref(expected, 0.0, (D,)))
        assert sub.offsets[0].item() == 0 and sub.offsets[-1].item() == sub.values.shape[0]
    picked = nt[[4, 0]]
    assert torch.equal(picked[0], items[4]) and torch.equal(picked[1], items[0])
    inner = nt[:, 1:]  # DanLing: index inside every item
    for x, y in zip(inner.unbind(), items, strict=False):
        assert torch.equal(x, y[1:])
    assert torch.equal(nt[2, 1:3], items[2][1:3])
    with pytest.raises(IndexError):
        nt[5]
    with pytest.raises(IndexError):
        nt[-6]


def test_to_and_dtype_conversions(rng):
    items = make_items(rng, [3, 0, 2])
    nt = NestedTensor(items)
    d = nt.to(torch.float64)
    assert d.dtype == torch.float64 and d.offsets is nt.offsets
    assert torch.equal(d.tensor, nt.tensor.double())
    assert nt.double().dtype == torch.float64 and nt.half().dtype == torch.float16
    c = nt.to("cpu")
    assert c.device.type == "cpu" and torch.equal(c.values, nt.values)
    assert nt.to(device="cpu", dtype=torch.float64).dtype == torch.float64
    assert nt.cpu().device.type == "cpu"
    cl = nt.clone()
    assert cl.values is not nt.values and torch.equal(cl.values, nt.values)


# -- several ragged dims ---------------------------------------------------------


def test_multi_ragged_images(rng):
    g = gen(rng)
    items = [
        torch.randn(3, 5, 7, generator=g),
        torch.randn(3, 4, 6, generator=g),
        torch.randn(3, 0, 2, generator=g),
    ]
    before = [x.clone() for x in items]
    nt = NestedTensor(items, padding_value=-1.0)
    assert nt.ragged_dims == (1, 2)
    assert nt.shape == torch.Size([3, 3, 5, 7]) and nt.dim() == 4
    assert [tuple(s) for s in nt.item_shapes] == [(3, 5, 7), (3, 4, 6), (3, 0, 2)]
    # ragged dims first (rows = pixels), the channels a static dim: values [sum H W, C]
    assert nt.packed_dim_order == (1, 2, 0)
    assert torch.equal(nt.values, torch.cat([x.permute(1, 2, 0).reshape(-1, 3) for x in items]))
    assert nt.offsets.tolist() == [0, 35, 59, 59]
    assert [p.tolist() for p in nt.partitions] == [[0, 5, 9, 9], [0, 7, 13, 15]]
    padded = torch.full((3, 3, 5, 7), -1.0)
    mask = torch.zeros(3, 3, 5, 7, dtype=torch.bool)
    for i, x in enumerate(items):
        padded[i, :, : x.shape[1], : x.shape[2]] = x
        mask[i, :, : x.shape[1], : x.shape[2]] = True
    assert torch.equal(nt.tensor, padded)
    assert torch.equal(nt.mask, mask)
    assert torch.equal(NestedTensor(items, mask_value=True).mask, ~mask)
    for a, x in zip(nt.unbind(), items, strict=False):
        assert torch.equal(a, x)
    assert torch.equal(nt[1], items[1])
    sub = nt[1:]
    assert [tuple(s) for s in sub.item_shapes] == [(3, 4, 6), (3, 0, 2)]
    assert [p.tolist() for p in sub.partitions] == [[0, 4, 4], [0, 6, 8]]
    assert torch.equal(sub[0], items[1])
    rev = nt[::-1]
    for a, x in zip(rev.unbind(), items[::-1], strict=False):
        assert torch.equal(a, x)
    # elementwise ops keep the structure
    out = F.gelu(nt * 2.0 + 1.0)
    check_items(out, [ref_gelu(x.double() * 2 + 1) for x in items])
    check_items(nt + nt, [2 * x for x in items])
    # per pixel over the channels, and pooling over both ragged dims
    check_items(nt.mean(dim=1), [x.double().mean(0) for x in items], **SUM)
    close(
        nt.mean(dim=(2, 3)),
        torch.stack(
            [x.double().mean((1, 2)) if x.numel() else torch.zeros(3, dtype=torch.float64) for x in items]
        ),
        **SUM,
    )
    close(nt.amax(dim=(2, 3))[:2], torch.stack([x.double().amax((1, 2)) for x in items[:2]]), rtol=0, atol=0)
    # over one of the two ragged dims: per item (eager)
    check_items(nt.sum(dim=2), [x.double().sum(1) for x in items], **SUM)
    with pytest.raises(ValueError, match="ragged"):
        F.linear(nt, torch.randn(7, 7))  # the last dim (W) is ragged
    for x, y in zip(items, before, strict=False):
        assert torch.equal(x, y)


def test_multi_ragged_trailing_dense_and_round_trips(rng):
    g = gen(rng)
    shapes = [(4, 6, 2), (1, 3, 2), (5, 5, 2), (2, 1, 2)]
    items = [torch.randn(s, generator=g) for s in shapes]
    nt = NestedTensor(*items)
    assert nt.ragged_dims == (0, 1)
    assert tuple(nt.values.shape) == (sum(h * w for h, w, _ in shapes), 2)
    assert nt.shape == torch.Size([4, 5, 6, 2])
    assert tuple(nt.mask.shape) == (4, 5, 6)
    for i, x in enumerate(items):
        h, w, _ = x.shape
        assert torch.equal(nt.tensor[i, :h, :w], x)
        assert nt.mask[i].sum().item() == h * w and bool(nt.mask[i, :h, :w].all())
        assert torch.equal(nt[i], x)
    back = NestedTensor(list(nt.unbind()))
    assert torch.equal(back.values, nt.values) and back.item_shapes == nt.item_shapes
    assert NestedTensor.from_danling(_FakeDanlingPadded(nt.tensor, nt.mask)).item_shapes == nt.item_shapes
    d = nt.to(torch.float64)
    assert d.item_shapes == nt.item_shapes and torch.equal(d.tensor, nt.tensor.double())


def test_equal_shapes_default_to_first_dim_ragged(rng):
    items = [torch.ones(3, 5, 7), torch.zeros(3, 5, 7)]
    nt = NestedTensor(items)
    assert nt.ragged_dims == (0,) and tuple(nt.values.shape) == (6, 5, 7)
    assert torch.equal(nt.tensor, torch.stack(items)) and tuple(nt.mask.shape) == (2, 3, 5)


# -- bad input -------------------------------------------------------------------


def test_bad_input():
    with pytest.raises(ValueError, match=r"tensors\[2\].*rank"):
        NestedTensor(torch.ones(2, 3), torch.ones(1, 3), torch.ones(3))
    with pytest.raises(ValueError, match=r"tensors\[2\].*dim 1 is not ragged"):
        NestedTensor(torch.ones(2, 3), torch.ones(1, 3), torch.ones(4, 5), ragged_dims=(0,))
    with pytest.raises(ValueError, match="ragged_dims"):
        NestedTensor(torch.ones(2, 3), ragged_dims=(2,))
    with pytest.raises(ValueError, match="tensors"):
        NestedTensor(False)
    with pytest.raises(ValueError, match=r"tensors\[1\].*convert"):
        NestedTensor([[1, 2], "ab"])
    with pytest.raises(TypeError, match="nesting"):
        NestedTensor(NestedTensor(torch.ones(2)))
    with pytest.raises(TypeError, match="batch_first must be a bool"):
        NestedTensor(torch.ones(2), batch_first=1)
    nt = NestedTensor(torch.ones(2), torch.ones(3))
    with pytest.raises(TypeError, match="padding_value must be float-convertible"):
        nt.padding_value = object()
    with pytest.raises(AttributeError, match="read-only"):
        nt.dtype = torch.float64
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(nt)
    with pytest.raises(IndexError, match="out of range"):
        nt.sum(dim=5)


def test_from_packed_no_copy_and_checks():
    values = torch.randn(6, 4)
    offsets = torch.tensor([0, 2, 2, 6])
    nt = NestedTensor.from_packed(values, offsets)
    assert nt.values is values and nt.offsets is offsets
    assert [tuple(s) for s in nt.item_shapes] == [(2, 4), (0, 4), (4, 4)]
    assert torch.equal(nt[2], values[2:])
    nt32 = NestedTensor.from_packed(values, offsets.to(torch.int32))
    assert nt32.offsets.dtype == torch.int64
    with pytest.raises(ValueError, match="start at 0"):
        NestedTensor.from_packed(values, torch.tensor([1, 2, 6]))
    with pytest.raises(ValueError, match="non-decreasing"):
        NestedTensor.from_packed(values, torch.tensor([0, 3, 2, 6]))
    with pytest.raises(ValueError, match="last offset"):
        NestedTensor.from_packed(values, torch.tensor([0, 2, 5]))
    with pytest.raises(TypeError, match="int64"):
        NestedTensor.from_packed(values, torch.tensor([0.0, 6.0]))
    with pytest.raises(ValueError, match="1-D"):
        NestedTensor.from_packed(values, torch.tensor([[0, 6]]))
    empty = NestedTensor.from_packed(torch.zeros(0, 4), torch.zeros(1, dtype=torch.int64))
    assert len(empty) == 0 and empty.shape == torch.Size([0, 0, 4]) and tuple(empty.tensor.shape) == (0, 0, 4)
    assert torch.equal(values, nt.values) and offsets.tolist() == [0, 2, 2, 6]


# -- conversions -----------------------------------------------------------------


def test_njt_round_trip(rng, lengths):
    items = make_items(rng, lengths, trailing=(3, 2))
    nt = NestedTensor(items)
    njt = nt.to_njt()
    assert njt.is_nested and njt.layout == torch.jagged
    assert njt.values().data_ptr() == nt.values.data_ptr()
    for a, x in zip(njt.unbind(), items, strict=False):
        assert torch.equal(a, x)
    back = NestedTensor.from_njt(njt)
    assert back.values.data_ptr() == nt.values.data_ptr()
    assert torch.equal(back.offsets, nt.offsets)
    for a, x in zip(back.unbind(), items, strict=False):
        assert torch.equal(a, x)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors")
def test_from_njt_other_layouts():
    items = [torch.randn(2, 3), torch.randn(4, 3)]
    strided = torch.nested.nested_tensor(items)
    nt = NestedTensor.from_njt(strided)
    for a, x in zip(nt.unbind(), items, strict=False):
        assert torch.equal(a, x)
    with pytest.raises(TypeError, match="nested"):
        NestedTensor.from_njt(torch.randn(2, 3))


class _FakeDanlingStorage:
    """An old-style DanLing NestedTensor: a list of items."""

    def __init__(self, storage, **state):
        self.storage = storage
        self.__dict__.update(state)


class _FakeDanlingPadded:
    """A DanLing-like object exposing only ``.tensor`` and ``.mask``."""

    def __init__(self, tensor, mask, **state):
        self.tensor = tensor
        self.mask = mask
        self.__dict__.update(state)


def test_from_danling_duck_typed(rng, lengths):
    items = make_items(rng, lengths)
    nt = NestedTensor.from_danling(_FakeDanlingStorage(items, padding_value=-1.0, mask_value=False))
    assert nt.padding_value == -1.0
    for a, x in zip(nt.unbind(), items, strict=False):
        assert torch.equal(a, x)
    ref = NestedTensor(items)
    for state in ({}, {"mask_value": True}, {"batch_first": False}):
        mask = ~ref.mask if state.get("mask_value") else ref.mask
        tensor = ref.tensor
        if state.get("batch_first") is False:
            mask, tensor = mask.transpose(0, 1), tensor.transpose(0, 1)
        got = NestedTensor.from_danling(_FakeDanlingPadded(tensor, mask, **state))
        assert [tuple(s) for s in got.item_shapes] == [(n, D) for n in lengths]
        for a, x in zip(got.unbind(), items, strict=False):
            assert torch.equal(a, x)
    with pytest.raises(TypeError, match="from_danling"):
        NestedTensor.from_danling(object())


def test_from_real_danling():
    danling = pytest.importorskip("danling")
    items = [torch.randn(3, 4), torch.randn(5, 4)]
    dl = danling.NestedTensor(items)
    nt = NestedTensor.from_danling(dl)
    for a, x in zip(nt.unbind(), items, strict=False):
        assert torch.equal(a, x)


# -- per-token ops ---------------------------------------------------------------


def test_linear_and_activations(rng, lengths):
    items = make_items(rng, lengths)
    before = [x.clone() for x in items]
    nt = NestedTensor(items)
    g = gen(rng)
    lin = nn.Linear(D, 5)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(5, D, generator=g))
        lin.bias.copy_(torch.randn(5, generator=g))
    w, b = lin.weight.detach().double(), lin.bias.detach().double()
    ref = [x.double() @ w.T + b for x in items]
    check_items(lin(nt), ref, **SUM)
    check_items(F.linear(nt, lin.weight, lin.bias), ref, **SUM)
    check_items(F.linear(nt, lin.weight), [x.double() @ w.T for x in items], **SUM)
    check_items(nt @ lin.weight.T, [x.double() @ w.T for x in items], **SUM)
    x64 = [x.double() for x in items]
    check_items(F.gelu(nt), [ref_gelu(x) for x in x64])
    check_items(nn.GELU()(nt), [ref_gelu(x) for x in x64])
    check_items(F.gelu(nt, approximate="tanh"), [ref_gelu_tanh(x) for x in x64])
    check_items(F.relu(nt), [x.clamp_min(0) for x in x64])
    work = nt.clone()
    assert nn.ReLU(inplace=True)(work) is work  # in place, like DanLing: the same object, its values updated
    check_items(work, [x.clamp_min(0) for x in x64])
    check_items(torch.relu(nt), [x.clamp_min(0) for x in x64])
    check_items(F.silu(nt), [x / (1 + torch.exp(-x)) for x in x64])
    check_items(nn.SiLU()(nt), [x / (1 + torch.exp(-x)) for x in x64])
    check_items(torch.tanh(nt), [torch.tanh(x) for x in x64])
    check_items(-nt, [-x for x in x64])
    out = lin(nt)
    assert out.offsets is nt.offsets  # same structure object, cheap identity checks downstream
    for x, y in zip(items, before, strict=False):
        assert torch.equal(x, y)


def test_layer_norm(rng, lengths):
    items = make_items(rng, lengths, low=-2.0, high=2.0)
    nt = NestedTensor(items)
    g = gen(rng)
    ln = nn.LayerNorm(D, eps=1e-5)
    with torch.no_grad():
        ln.weight.copy_(torch.randn(D, generator=g))
        ln.bias.copy_(torch.randn(D, generator=g))
    w, b = ln.weight.detach().double(), ln.bias.detach().double()
    ref = [ref_layer_norm(x.double(), w, b, 1e-5) for x in items]
    check_items(ln(nt), ref, **EXP)
    check_items(F.layer_norm(nt, (D,), ln.weight, ln.bias, 1e-5), ref, **EXP)
    check_items(F.layer_norm(nt, (D,)), [ref_layer_norm(x.double(), 1.0, 0.0, 1e-5) for x in items], **EXP)
    if set(lengths) == {4}:  # over the ragged dim: per item (eager), where every length fits
        check_items(F.layer_norm(nt, (4, D)), [F.layer_norm(x.double(), (4, D)) for x in items], **EXP)
    else:
        with pytest.raises(RuntimeError, match="normalized_shape"):
            F.layer_norm(nt, (4, D))


def test_dropout(rng):
    items = make_items(rng, [5, 0, 40, 7], low=0.5, high=1.0)
    nt = NestedTensor(items)
    drop = nn.Dropout(0.5)
    assert drop.eval()(nt).values is nt.values  # identity in eval
    assert F.dropout(nt, 0.5, training=False).values is nt.values
    torch.manual_seed(0)
    out = drop.train()(nt)
    assert out.offsets is nt.offsets
    kept = out.values != 0
    assert 0 < int(kept.sum()) < nt.values.numel()
    close(out.values[kept], nt.values[kept] * 2.0)
    torch.testing.assert_close(nt.values, torch.cat(items))  # inputs untouched


def test_embedding(rng, lengths):
    g = gen(rng)
    ids = [torch.randint(0, 11, (n,), generator=g) for n in lengths]
    weight = torch.randn(11, D, generator=g)
    nt = NestedTensor(ids)
    ref = [weight.double()[i] for i in ids]
    check_items(F.embedding(nt, weight), ref)
    emb = nn.Embedding(11, D, padding_idx=0)
    with torch.no_grad():
        emb.weight.copy_(weight)
        emb.weight[0].zero_()
    out = emb(nt)
    check_items(out, [emb.weight.detach().double()[i] for i in ids])
    assert out.shape == torch.Size([len(lengths), max(lengths), D])


def test_trailing_dim_views(rng, lengths):
    items = make_items(rng, lengths, trailing=(12,))
    nt = NestedTensor(items)
    parts = nt.chunk(3, dim=-1)
    assert len(parts) == 3
    for j, part in enumerate(parts):
        check_items(part, [x[:, 4 * j : 4 * (j + 1)] for x in items], rtol=0, atol=0)
        assert part.offsets is nt.offsets
    a, b = nt.split([5, 7], dim=2)
    check_items(b, [x[:, 5:] for x in items], rtol=0, atol=0)
    heads = nt.unflatten(-1, (3, 4))
    assert heads.shape == torch.Size([len(lengths), max(lengths), 3, 4]) and heads.dim() == 4
    check_items(heads, [x.reshape(-1, 3, 4) for x in items], rtol=0, atol=0)
    check_items(heads.flatten(2), items, rtol=0, atol=0)
    assert nt.size(-1) == 12 and nt.ndim == 3
    with pytest.raises(NotImplementedError, match="ragged"):
        nt.chunk(2, dim=1)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_round_trip_and_ops(rng):
    items = make_items(rng, [3, 0, 5], trailing=(2, 4))
    nt = NestedTensor(items).to("cuda")
    assert nt.device.type == "cuda" and nt.offsets.device.type == "cuda" and nt.offsets.dtype == torch.int64
    on_gpu = NestedTensor([x.cuda() for x in items])
    assert torch.equal(on_gpu.offsets, nt.offsets) and torch.equal(on_gpu.tensor, nt.tensor)
    out = F.scaled_dot_product_attention(nt, nt, nt)
    ref = [ref_attention(x.double(), x.double(), x.double(), 0.5, False) for x in items]
    check_items(out.cpu(), ref, **EXP)
    close(
        nt.mean(dim=1).cpu(),
        torch.stack(
            [x.double().mean(0) if len(x) else torch.zeros(2, 4, dtype=torch.float64) for x in items]
        ),
        **SUM,
    )
    assert torch.equal(nt.cpu().tensor, NestedTensor(items).tensor)


# -- arithmetic --------------------------------------------------------------------


def test_binary_ops(rng, lengths):
    a_items = make_items(rng, lengths)
    b_items = make_items(rng, lengths, low=0.5, high=1.5)  # away from 0 for division
    a, b = NestedTensor(a_items), NestedTensor(b_items)
    A = [x.double() for x in a_items]
    B = [x.double() for x in b_items]
    g = gen(rng)
    row = torch.randn(D, generator=g)
    r = row.double()
    check_items(a + b, [x + y for x, y in zip(A, B, strict=False)])
    check_items(a - b, [x - y for x, y in zip(A, B, strict=False)])
    check_items(a * b, [x * y for x, y in zip(A, B, strict=False)])
    check_items(a / b, [x / y for x, y in zip(A, B, strict=False)])
    check_items(torch.add(a, b, alpha=2.0), [x + 2 * y for x, y in zip(A, B, strict=False)])
    check_items(torch.sub(a, b), [x - y for x, y in zip(A, B, strict=False)])
    check_items(torch.mul(a, b), [x * y for x, y in zip(A, B, strict=False)])
    check_items(torch.div(a, b), [x / y for x, y in zip(A, B, strict=False)])
    check_items(a + row, [x + r for x in A])
    check_items(row + a, [r + x for x in A])
    check_items(row - a, [r - x for x in A])
    check_items(a * row, [x * r for x in A])
    check_items(row / b, [r / y for y in B])
    check_items(a + row[None], [x + r for x in A])  # [1, D] broadcasts over the ragged dim
    check_items(a * 3.0, [x * 3 for x in A])
    check_items(2.0 - a, [2 - x for x in A])
    check_items(1.0 / b, [1 / y for y in B])
    check_items(a**2, [x**2 for x in A])
    per_item = torch.randn(len(lengths), 1, D, generator=g)
    check_items(a + per_item, [x + per_item[i].double() for i, x in enumerate(A)])
    check_items(per_item * a, [per_item[i].double() * x for i, x in enumerate(A)])
    for x, y in zip(a.unbind(), a_items, strict=False):
        assert torch.equal(x, y)


def test_binary_structure_errors(rng):
    a = NestedTensor(make_items(rng, [3, 1]))
    b = NestedTensor(make_items(rng, [2, 2]))
    with pytest.raises(
        ValueError, match=r"add: NestedTensors of different structure.*L=\(3, 1\).*L=\(2, 2\)"
    ):
        a + b
    with pytest.raises(ValueError, match="different structure"):
        torch.mul(a, NestedTensor(make_items(rng, [3, 1, 1])))
    with pytest.raises(ValueError, match="cannot broadcast"):
        a + torch.randn(2, D)  # [L, D] with L neither 1 nor the maximum length (3)
    with pytest.raises(ValueError, match="cannot broadcast"):
        a + torch.randn(5, 1, D)  # wrong batch size
    same = NestedTensor(make_items(rng, [3, 1]))
    check_items(a + same, [x + y for x, y in zip(a.unbind(), same.unbind(), strict=False)])


# -- ragged-dim ops ------------------------------------------------------------------


def test_pooling(rng, lengths):
    items = make_items(rng, lengths)
    nt = NestedTensor(items)
    x64 = [x.double() for x in items]

    def ref(fn, empty):
        return torch.stack(
            [fn(x) if x.shape[0] else torch.full((D,), empty, dtype=torch.float64) for x in x64]
        )

    close(nt.sum(dim=1), ref(lambda x: x.sum(0), 0.0), **SUM)
    close(nt.mean(dim=1), ref(lambda x: x.mean(0), 0.0), **SUM)
    close(nt.max(dim=1).values, ref(lambda x: x.amax(0), float("-inf")), rtol=0, atol=0)
    close(nt.min(dim=1).values, ref(lambda x: x.amin(0), float("inf")), rtol=0, atol=0)
    close(nt.amax(dim=1), ref(lambda x: x.amax(0), float("-inf")), rtol=0, atol=0)
    idx = nt.max(dim=1).indices
    for i, x in enumerate(x64):
        if len(x):
            assert torch.equal(idx[i], x.argmax(0))
    close(torch.mean(nt, dim=1), ref(lambda x: x.mean(0), 0.0), **SUM)
    close(torch.sum(nt, dim=-2), ref(lambda x: x.sum(0), 0.0), **SUM)
    close(nt.mean(dim=1, keepdim=True), ref(lambda x: x.mean(0), 0.0)[:, None], **SUM)
    assert tuple(nt.mean(dim=1).shape) == (len(lengths), D)
    assert not torch.isnan(nt.mean(dim=1)).any()
    # over a trailing dim: per token, still ragged
    check_items(nt.mean(dim=-1), [x.mean(-1) for x in x64], **SUM)
    check_items(nt.sum(dim=2, keepdim=True), [x.sum(-1, keepdim=True) for x in x64], **SUM)
    total = sum(x.sum() for x in x64)
    close(nt.sum(), torch.as_tensor(total, dtype=torch.float64), **SUM)
    # over the batch dim: items aligned at the start, padding excluded
    padded = padded_ref(x64, 0.0, (D,))
    count = torch.tensor([[1.0 if j < n else 0.0 for j in range(max(lengths))] for n in lengths]).sum(0)
    close(nt.sum(dim=0), padded.sum(0), **SUM)
    close(nt.mean(dim=0), padded.sum(0) / count[:, None], **SUM)
    close(nt.sum(dim=(0, 1)), sum((x.sum(0) for x in x64), torch.zeros(D, dtype=torch.float64)), **SUM)
    seq_first = NestedTensor(items, batch_first=False)
    close(seq_first.mean(dim=0), ref(lambda x: x.mean(0), 0.0), **SUM)


def test_softmax(rng, lengths):
    items = make_items(rng, lengths, low=-3.0, high=3.0)
    nt = NestedTensor(items)
    x64 = [x.double() for x in items]
    check_items(nt.softmax(dim=1), [ref_softmax(x, 0) for x in x64], **EXP)
    check_items(F.softmax(nt, dim=1), [ref_softmax(x, 0) for x in x64], **EXP)
    check_items(torch.softmax(nt, dim=-1), [ref_softmax(x, -1) for x in x64], **EXP)
    check_items(F.softmax(nt, dim=2), [ref_softmax(x, -1) for x in x64], **EXP)
    with pytest.raises(ValueError, match="dim"):
        F.softmax(nt)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_scaled_dot_product_attention(rng, lengths, causal):
    heads, d = 2, 4
    q_items = make_items(rng, lengths, trailing=(heads, d), low=-2, high=2)
    k_items = make_items(rng, lengths, trailing=(heads, d), low=-2, high=2)
    v_items = make_items(rng, lengths, trailing=(heads, d))
    # torch's layout: [B, heads, L(b), d]; the packed values stay [N, heads, d]
    q, k, v = (NestedTensor(t).transpose(1, 2) for t in (q_items, k_items, v_items))
    assert q.ragged_dims == (1,) and tuple(q.values.shape[1:]) == (heads, d)
    scale = 1.0 / math.sqrt(d)
    ref = [
        ref_attention(a.double(), b.double(), c.double(), scale, causal)
        for a, b, c in zip(q_items, k_items, v_items, strict=False)
    ]
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    assert out.offsets is q.offsets and out.ragged_dims == (1,)
    check_items(out.transpose(1, 2), ref, **EXP)
    ref_s = [
        ref_attention(a.double(), b.double(), c.double(), 0.3, causal)
        for a, b, c in zip(q_items, k_items, v_items, strict=False)
    ]
    check_items(
        F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=0.3).transpose(1, 2), ref_s, **EXP
    )


def test_attention_one_head_gqa_and_errors(rng):
    lengths = [4, 0, 6]
    q1 = NestedTensor(make_items(rng, lengths, trailing=(D,)))
    out = F.scaled_dot_product_attention(q1, q1, q1)
    ref = [
        ref_attention(x.double()[:, None], x.double()[:, None], x.double()[:, None], D**-0.5, False)[:, 0]
        for x in q1.unbind()
    ]
    check_items(out, ref, **EXP)
    q_items = make_items(rng, lengths, trailing=(4, 2))
    kv_items = make_items(rng, lengths, trailing=(2, 2))
    q = NestedTensor(q_items).transpose(1, 2)
    kv = NestedTensor(kv_items).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, kv, kv, enable_gqa=True)
    ref = [
        ref_attention(
            a.double(), b.double().repeat_interleave(2, 1), b.double().repeat_interleave(2, 1), 2**-0.5, False
        )
        for a, b in zip(q_items, kv_items, strict=False)
    ]
    check_items(out.transpose(1, 2), ref, **EXP)
    with pytest.raises(ValueError, match="heads"):
        F.scaled_dot_product_attention(q, kv, kv)
    # a mask, dropout, or keys of other lengths: item by item (eager)
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    ref_m = [
        F.scaled_dot_product_attention(
            *(t.double().transpose(0, 1) for t in (a, a, a)), attn_mask=mask[: len(a), : len(a)]
        )
        for a in q_items
    ]
    check_items(F.scaled_dot_product_attention(q, q, q, attn_mask=mask), ref_m, **EXP)
    other_items = make_items(rng, [5, 2, 5], trailing=(4, 2))
    other = NestedTensor(other_items).transpose(1, 2)
    cross = F.scaled_dot_product_attention(q, other, other)
    ref_c = [
        F.scaled_dot_product_attention(*(t.double().transpose(0, 1) for t in (a, b, b)))
        for a, b in zip(q_items, other_items, strict=True)
    ]
    check_items(cross, ref_c, **EXP)
    with pytest.raises(TypeError, match="NestedTensor"):
        F.scaled_dot_product_attention(q, torch.randn(3, 4, 2), torch.randn(3, 4, 2))
    # [B, L(b), H, d]: torch attends over the H entries of every token
    per_token = NestedTensor(q_items)
    check_items(
        F.scaled_dot_product_attention(per_token, per_token, per_token),
        [F.scaled_dot_product_attention(*(a.double(),) * 3) for a in q_items],
        **EXP,
    )


def _mha_reference(mha: nn.MultiheadAttention, items, causal=False):
    """Each item through a float64 copy of the module as a dense [1, L, E] batch."""
    ref_mha = nn.MultiheadAttention(
        mha.embed_dim, mha.num_heads, batch_first=True, dtype=torch.float64
    ).eval()
    ref_mha.load_state_dict({k: v.double() for k, v in mha.state_dict().items()})
    out = []
    for x in items:
        n = x.shape[0]
        if n == 0:
            out.append(torch.zeros(0, mha.embed_dim, dtype=torch.float64))
            continue
        mask = torch.ones(n, n, dtype=torch.bool).triu(1) if causal else None
        with torch.no_grad():
            y = ref_mha(
                x.double()[None], x.double()[None], x.double()[None], attn_mask=mask, need_weights=False
            )[0]
        out.append(y[0])
    return out


def test_multihead_attention(rng, lengths):
    torch.manual_seed(int(rng.integers(2**31)))
    e, h = 16, 4
    mha = nn.MultiheadAttention(e, h, batch_first=True).eval()
    items = make_items(rng, lengths, trailing=(e,))
    x = NestedTensor(items)
    out, weights = mha(x, x, x, need_weights=False)
    assert weights is None and isinstance(out, NestedTensor) and out.batch_first
    check_items(out, _mha_reference(mha, items), **EXP)
    out_c, _ = mha(x, x, x, need_weights=False, is_causal=True)
    check_items(out_c, _mha_reference(mha, items, causal=True), **EXP)
    # distinct (but equally structured) key and value NestedTensors
    y = x * 1.0
    out2, _ = mha(x, y, y, need_weights=False)
    check_items(out2, _mha_reference(mha, items), **EXP)


def test_multihead_attention_errors(rng):
    x = NestedTensor(make_items(rng, [3, 2], trailing=(16,)))
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    with pytest.raises(NotImplementedError, match="need_weights=False"):
        mha(x, x, x)
    with pytest.raises(NotImplementedError, match="key_padding_mask"):
        mha(x, x, x, need_weights=False, key_padding_mask=torch.zeros(2, 3, dtype=torch.bool))
    # the NestedTensor knows its batch dim: batch_first=False modules give the same result
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()
    seq_first = nn.MultiheadAttention(16, 4).eval()
    seq_first.load_state_dict(mha.state_dict())
    torch.testing.assert_close(
        seq_first(x, x, x, need_weights=False)[0].values, mha(x, x, x, need_weights=False)[0].values
    )
    # Attention dropout in training drops weights (compiled: test_attention_dropout.py); eval drops none.
    drop = nn.MultiheadAttention(16, 4, dropout=0.5, batch_first=True)
    drop.load_state_dict(mha.state_dict())
    trained = drop.train()(x, x, x, need_weights=False)[0].values
    torch.testing.assert_close(
        drop.eval()(x, x, x, need_weights=False)[0].values, mha(x, x, x, need_weights=False)[0].values
    )
    assert not torch.allclose(trained, mha(x, x, x, need_weights=False)[0].values)
    # A batch of no items: NestedTensor([]) has no item shape; from_packed gives it one.
    with pytest.raises(ValueError, match=r"query is a NestedTensor of no items.*from_packed"):
        mha(NestedTensor([]), NestedTensor([]), NestedTensor([]), need_weights=False)
    empty = NestedTensor.from_packed(torch.empty(0, 16), torch.zeros(1, dtype=torch.int64))
    assert mha(empty, empty, empty, need_weights=False)[0].values.shape == (0, 16)
    drop.dropout = 1.0
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1.0"):
        drop.train()(x, x, x, need_weights=False)


def test_transformer_encoder_layer(rng):
    """torch's own nn.TransformerEncoderLayer (eval) runs on NestedTensors."""
    torch.manual_seed(int(rng.integers(2**31)))
    e = 16
    layer = nn.TransformerEncoderLayer(e, 4, 32, batch_first=True).eval()
    ref_layer = nn.TransformerEncoderLayer(e, 4, 32, batch_first=True, dtype=torch.float64).eval()
    ref_layer.load_state_dict({k: v.double() for k, v in layer.state_dict().items()})
    items = make_items(rng, [5, 0, 9, 1], trailing=(e,))
    out = layer(NestedTensor(items))
    with torch.no_grad():
        ref = [
            ref_layer(x.double()[None])[0] if x.shape[0] else torch.zeros(0, e, dtype=torch.float64)
            for x in items
        ]
    check_items(out, ref, **EXP)


def test_unsupported_function_is_named(rng):
    nt = NestedTensor(make_items(rng, [2, 3]))
    with pytest.raises(TypeError, match="fft"):
        torch.fft.fft(nt)
    with pytest.raises(ValueError, match="cumsum.*batch"):
        torch.cumsum(nt, 0)
    with pytest.raises(TypeError, match="histc"):
        torch.histc(nt)


def test_ops_never_mutate_inputs(rng):
    items = make_items(rng, [3, 0, 4], trailing=(16,))
    before = [x.clone() for x in items]
    nt = NestedTensor(items)
    packed = nt.values.clone()
    layer = nn.TransformerEncoderLayer(16, 4, 32, batch_first=True).eval()
    ops = [
        lambda t: F.relu(t),
        lambda t: F.silu(t),
        lambda t: F.dropout(t, 0.5, True),
        lambda t: t + t,
        lambda t: t * 2,
        lambda t: t.mean(dim=1),
        lambda t: t.softmax(dim=1),
        lambda t: F.layer_norm(t, (16,)),
        lambda t: layer(t),
        lambda t: F.scaled_dot_product_attention(*[t.unflatten(-1, (4, 4)).transpose(1, 2)] * 3),
        lambda t: t.transpose(1, 2).contiguous(),
        lambda t: t[:, 1:],
        lambda t: t.sum(0),
        lambda t: t.view(len(t), -1, 4),
        lambda t: torch.cat([t, t], dim=1),
        lambda t: t.clone().add_(1),
        lambda t: t.tensor.add_(1),
        lambda t: t.mask,
        lambda t: t[1:].tensor,
    ]
    for op in ops:
        op(nt)
        assert torch.equal(nt.values, packed)
    for x, y in zip(items, before, strict=False):
        assert torch.equal(x, y)


# -- torch.compile -----------------------------------------------------------------


class EncoderBlock(nn.Module):
    """Pre-norm encoder block on [B, L(b), E] with ragged SDPA and mean pooling."""

    def __init__(self, e=16, heads=2):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(e)
        self.qkv = nn.Linear(e, 3 * e)
        self.proj = nn.Linear(e, e)
        self.ln2 = nn.LayerNorm(e)
        self.fc1 = nn.Linear(e, 4 * e)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * e, e)

    def forward(self, x):
        qkv = self.qkv(self.ln1(x)).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in qkv)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(2))
        x = x + self.fc2(self.act(self.fc1(self.ln2(x))))
        return x.mean(dim=1)


def test_dynamo_one_graph_no_breaks(rng, monkeypatch):
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = EncoderBlock().eval()
    x = NestedTensor(make_items(rng, [3, 0, 7, 1], trailing=(16,)))
    explain = torch._dynamo.explain(model)(x)
    assert explain.graph_count == 1, explain.break_reasons
    assert explain.graph_break_count == 0, explain.break_reasons
    graph_ops = {str(n.target) for g in explain.graphs for n in g.graph.nodes if n.op == "call_function"}
    graph_ops = {t.removesuffix(".default") for t in graph_ops}
    # Grad is on: the traced forward keeps attention's lse for a backward.
    assert {"ragged.attention_lse", "ragged.segment_reduce"} <= graph_ops
    with torch.no_grad():
        explain = torch._dynamo.explain(model)(x)
    assert "ragged.attention" in {
        str(n.target).removesuffix(".default") for g in explain.graphs for n in g.graph.nodes
    }
    # RAGGED_ATTENTION_LSE=0 (read at import into KEEP_LSE): recomputed.
    monkeypatch.setattr(nested_sdpa, "KEEP_LSE", False)
    torch._dynamo.reset()
    explain = torch._dynamo.explain(model)(x)
    ops = {str(n.target).removesuffix(".default") for g in explain.graphs for n in g.graph.nodes}
    assert "ragged.attention" in ops and "ragged.attention_lse" not in ops
    compiled = torch.compile(model, backend="eager", fullgraph=True)
    for lengths in ([3, 0, 7, 1], [5, 2], [9]):
        x = NestedTensor(make_items(rng, lengths, trailing=(16,)))
        torch.testing.assert_close(compiled(x), model(x))


def test_dynamo_returns_nested_tensor_and_mha(rng):
    torch._dynamo.reset()
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()

    def f(x):
        y = mha(x, x, x, need_weights=False)[0]
        return F.gelu(y) * 2.0 + x

    x = NestedTensor(make_items(rng, [4, 0, 2], trailing=(16,)))
    explain = torch._dynamo.explain(f)(x)
    assert explain.graph_count == 1 and explain.graph_break_count == 0, explain.break_reasons
    out = torch.compile(f, backend="eager", fullgraph=True)(x)
    assert isinstance(out, NestedTensor)
    torch.testing.assert_close(out.values, f(x).values)
    assert torch.equal(out.offsets, x.offsets)
    torch.testing.assert_close(out.tensor, f(x).tensor)


# -- DanLing's API: views, indexing, assignment, in-place, reductions, serialization ----------


def test_views_keep_the_packed_values(rng, lengths):
    """unflatten / transpose / flatten relabel dims: the values are not copied."""
    items = make_items(rng, lengths, trailing=(12,))
    nt = NestedTensor(items)
    heads = nt.unflatten(-1, (3, -1)).transpose(1, 2)  # [B, 3, L(b), 4]
    assert heads.values.data_ptr() == nt.values.data_ptr() and tuple(heads.values.shape[1:]) == (3, 4)
    assert heads.ragged_dims == (1,) and heads.shape == torch.Size([len(lengths), 3, max(lengths), 4])
    check_items(heads, [x.reshape(-1, 3, 4).transpose(0, 1) for x in items], rtol=0, atol=0)
    back = heads.transpose(1, 2).flatten(-2)
    assert back.values.data_ptr() == nt.values.data_ptr() and back.ragged_dims == (0,)
    check_items(back, items, rtol=0, atol=0)
    check_items(nt.permute(0, 2, 1), [x.T for x in items], rtol=0, atol=0)
    check_items(nt.T, [x.T for x in items], rtol=0, atol=0)
    check_items(nt.unsqueeze(1), [x[None] for x in items], rtol=0, atol=0)
    check_items(nt.unsqueeze(-1).squeeze(-1), items, rtol=0, atol=0)
    check_items(nt.view(len(nt), -1, 4), [x.reshape(-1, 4) for x in items], rtol=0, atol=0)
    check_items(nt.reshape(-1), [x.reshape(-1) for x in items], rtol=0, atol=0)
    check_items(nt.flatten(1), [x.reshape(-1) for x in items], rtol=0, atol=0)
    merged = nt.view(len(nt), -1, 24) if all(n % 2 == 0 for n in lengths) else None
    if merged is not None:
        check_items(merged, [x.reshape(-1, 24) for x in items], rtol=0, atol=0)
    assert nt.unsqueeze(0).batch_first is False and nt.unsqueeze(0).shape[0] == 1
    assert torch.equal(nt.flatten(), nt.tensor.flatten())  # with the batch dim: the padded view (DanLing)


def test_indexing_inside_items(rng):
    lengths = [3, 1, 4]
    items = make_items(rng, lengths)
    nt = NestedTensor(items)
    check_items(nt[:, 1:], [x[1:] for x in items], rtol=0, atol=0)
    check_items(nt[:, :2], [x[:2] for x in items], rtol=0, atol=0)
    check_items(nt[:, ::2], [x[::2] for x in items], rtol=0, atol=0)
    check_items(nt[..., 1:], [x[..., 1:] for x in items], rtol=0, atol=0)
    check_items(nt[..., 0], [x[..., 0] for x in items], rtol=0, atol=0)
    check_items(nt[:, None], [x[None] for x in items], rtol=0, atol=0)
    check_items(nt[..., None], [x[..., None] for x in items], rtol=0, atol=0)
    assert torch.equal(nt[:, 0], torch.stack([x[0] for x in items]))  # first token: dense [B, d]
    assert torch.equal(nt[:, -1], torch.stack([x[-1] for x in items]))
    check_items(nt[nt > 0], [x[x > 0] for x in items], rtol=0, atol=0)
    check_items(nt[nt.tensor > 0], [x[x > 0] for x in items], rtol=0, atol=0)
    check_items(nt[torch.tensor([True, False, True])], [items[0], items[2]], rtol=0, atol=0)
    check_items(nt[torch.tensor([2, 0, 2])], [items[2], items[0], items[2]], rtol=0, atol=0)
    assert torch.equal(nt[1, 0], items[1][0])
    with pytest.raises(IndexError, match="out of range for item 1"):
        nt[:, 2]
    with pytest.raises(IndexError, match="Boolean index has length 2"):
        nt[[True, False]]
    with pytest.raises(IndexError, match="ellipsis"):
        nt[..., ..., 0]
    with pytest.raises(ValueError, match="indices"):
        nt[1.5]


def test_assignment(rng):
    items = make_items(rng, [3, 1, 4])
    nt = NestedTensor(items)
    alias = nt.values
    nt[0] = torch.full((3, D), 7.0)  # same shape: written into the packed values
    assert nt.values is alias and torch.equal(nt[0], torch.full((3, D), 7.0))
    nt[:, 0] = -1.0
    assert nt.values is alias and all(bool((t[0] == -1).all()) for t in nt.unbind())
    nt[..., 1] = 5.0
    assert all(bool((t[:, 1] == 5).all()) for t in nt.unbind())
    nt[nt > 6] = 0.0
    assert not bool((nt.values > 6).any())
    nt[1] = torch.ones(6, D)  # new shape: the batch is repacked
    assert [tuple(s) for s in nt.item_shapes] == [(3, D), (6, D), (4, D)]
    assert torch.equal(nt[1], torch.ones(6, D)) and torch.equal(nt[2][1:, 2:], items[2][1:, 2:])
    nt[[True, False, True], 0] = 9.0
    assert float(nt[0][0, 0]) == 9.0 and float(nt[2][0, 0]) == 9.0 and float(nt[1][0, 0]) == 1.0
    with pytest.raises(IndexError, match="out of range"):
        nt[5] = torch.ones(1, D)
    with pytest.raises(ValueError, match="ndim"):
        nt[0] = torch.ones(D)


def test_inplace_updates_the_values(rng):
    items = make_items(rng, [3, 0, 2], low=-1.0, high=1.0)
    nt = NestedTensor(items)
    alias = nt.values
    x64 = [x.double() for x in items]
    nt += 1.0
    nt *= NestedTensor([x + 1 for x in items])
    nt.sub_(0.5)
    assert F.relu(nt, inplace=True) is nt
    nt.clamp_(max=2.0)
    assert nt.values is alias  # one buffer throughout
    check_items(nt, [((x + 1) * (x + 1) - 0.5).clamp_min(0).clamp_max(2.0) for x in x64], **ELEM)
    frozen = NestedTensor(items, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        frozen.add_(1)
    with pytest.raises(TypeError, match="in-place"):
        torch.ones(3, D).add_(nt)


@pytest.mark.parametrize("batch_first", [True, False])
def test_reductions_over_any_dims(rng, lengths, batch_first):
    items = make_items(rng, lengths, trailing=(3, 4))
    nt = NestedTensor(items, batch_first=batch_first)
    x64 = [x.double() for x in items]
    ragged = 1 if batch_first else 0
    last = 3

    def per_item(fn, empty_shape):
        return torch.stack(
            [fn(x) if x.shape[0] else torch.zeros(empty_shape, dtype=torch.float64) for x in x64]
        )

    close(nt.sum(dim=(ragged, last)), per_item(lambda x: x.sum((0, 2)), (3,)), **SUM)
    close(nt.mean(dim=(ragged, 2, last)), per_item(lambda x: x.mean(), ()), **SUM)
    close(
        nt.sum(dim=ragged, keepdim=True).movedim(ragged, 0)[0] if False else nt.sum(dim=ragged),
        per_item(lambda x: x.sum(0), (3, 4)),
        **SUM,
    )
    check_items(nt.sum(dim=last), [x.sum(-1) for x in x64], **SUM)
    check_items(
        nt.amax(dim=(2, last), keepdim=True), [x.amax((1, 2), keepdim=True) for x in x64], rtol=0, atol=0
    )
    close(nt.sum(), torch.stack([x.sum() for x in x64]).sum() if x64 else torch.tensor(0.0), **SUM)
    nonempty = [i for i, x in enumerate(x64) if len(x)]
    if nonempty:
        v = nt.var(dim=ragged)
        for i in nonempty:
            if len(x64[i]) > 1:
                close(v[i], x64[i].var(0), **SUM)
        lse = torch.logsumexp(nt, dim=ragged)
        for i in nonempty:
            close(lse[i], torch.logsumexp(x64[i], 0), **SUM)
        am = nt.argmax(dim=ragged)
        for i in nonempty:
            assert torch.equal(am[i], x64[i].argmax(0))
    assert torch.equal(nt.any(dim=ragged), torch.stack([(x != 0).any(0) for x in x64]))
    assert torch.equal((nt > 0).all(dim=ragged), torch.stack([(x > 0).all(0) for x in x64]))


def test_scans_flips_and_concatenation(rng, lengths):
    items = make_items(rng, lengths)
    nt = NestedTensor(items)
    x64 = [x.double() for x in items]
    check_items(torch.cumsum(nt, 1), [x.cumsum(0) for x in x64], **SUM)
    check_items(torch.flip(nt, [1]), [x.flip(0) for x in x64], rtol=0, atol=0)
    check_items(F.log_softmax(nt, dim=1), [torch.log_softmax(x, 0) for x in x64], **EXP)
    check_items(torch.cat([nt, nt * 2], dim=1), [torch.cat([x, 2 * x]) for x in x64], rtol=0, atol=0)
    check_items(torch.cat([nt, nt], dim=-1), [torch.cat([x, x], -1) for x in x64], rtol=0, atol=0)
    check_items(torch.stack([nt, nt + 1], dim=1), [torch.stack([x, x + 1]) for x in x64], **ELEM)
    both = torch.cat([nt, nt[:1], torch.zeros(2, D)])
    check_items(both, items + items[:1] + [torch.zeros(2, D)], rtol=0, atol=0)
    check_items(
        torch.where(nt > 0, nt, nt.tensor * 0 - 1), [torch.where(x > 0, x, -1.0) for x in x64], rtol=0, atol=0
    )


def test_serialization_round_trips(rng):
    import copy
    import io
    import pickle

    items = [torch.randn(3, 5, 7), torch.randn(3, 4, 6)]
    nt = NestedTensor(items, batch_first=False, padding_value=-2.0, mask_value=True)
    buf = io.BytesIO()
    torch.save(nt, buf)
    buf.seek(0)
    for copied in (pickle.loads(pickle.dumps(nt)), copy.deepcopy(nt), copy.copy(nt), torch.load(buf)):
        check_items(copied, items, rtol=0, atol=0)
        assert (copied.batch_first, copied.padding_value, copied.mask_value) == (False, -2.0, True)
        assert copied.ragged_dims == (1, 2) and torch.equal(copied.tensor, nt.tensor)
    assert copy.copy(nt).values is nt.values and copy.deepcopy(nt).values is not nt.values


def test_factories(rng):
    padded = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]])
    mask = padded != 0
    nt = NestedTensor.from_tensor_mask(padded, mask)
    assert nt.tolist() == [[1.0, 2.0], [3.0]]
    assert NestedTensor.from_tensor_mask(padded, ~mask, mask_value=True).tolist() == [[1.0, 2.0], [3.0]]
    with pytest.raises(ValueError, match="prefix"):
        NestedTensor.from_tensor_mask(padded, torch.tensor([[True, False, True], [True, False, False]]))
    with pytest.raises(ValueError, match="batch dimension mismatch"):
        NestedTensor.from_tensor_mask(padded, mask[:1])
    like = nt.nested_like(nt.tensor * 3)
    assert like.tolist() == [[3.0, 6.0], [9.0]]
    assert nt.nested_like(padded * 3, strict=False).tolist() == [[3.0, 6.0], [9.0]]  # larger: cropped
    with pytest.raises(ValueError, match="does not match"):
        nt.nested_like(torch.zeros(2, 5))
    concat, shapes = nt.concatenate()
    assert NestedTensor.from_concatenated(concat, shapes).tolist() == nt.tolist()
    assert nt.element_sizes().tolist() == [[2], [1]] and nt.packed_offsets().tolist() == [0, 2, 3]
    assert nt.to_torch_nested().layout == torch.jagged
    assert torch.zeros_like(nt).tolist() == [[0.0, 0.0], [0.0]]


def test_function_table_is_enumerable():
    from ragged_mlir.torch.nested import CATEGORIES, FUNCTIONS, supported_functions

    entries = supported_functions()
    assert len(entries) == len(FUNCTIONS) and {e.category for e in entries} <= set(CATEGORIES)
    by_func = {e.func: e for e in entries}
    assert by_func[torch.exp].category == "per-token"  # from aten's pointwise tag, not a hand list
    assert by_func[torch.special.erfcx].category == "per-token"
    assert by_func[torch.sum].category == "reduction"
    assert by_func[F.scaled_dot_product_attention].category == "attention"
    assert by_func[torch.softmax].category == "ragged-dim"
    assert len(supported_functions("per-token")) > 200
    with pytest.raises(ValueError, match="category"):
        supported_functions("nope")
    nt = NestedTensor(torch.ones(2, 3), torch.ones(1, 3))
    assert torch.equal(nt.erfinv().values, torch.erfinv(nt.values))  # Tensor methods come from the table


# -- torch.compile -------------------------------------------------------------------------


TRACEABLE = {
    "pointwise": lambda x: (x.exp() + torch.sin(x) * 2 - x.abs().sqrt() / (1 + x**2)).values,
    "dense_operands": lambda x: ((x - torch.arange(16.0)) / (torch.arange(16.0) + 1)).values,
    "where_masked_fill": lambda x: torch.where(x > 0, x, x * 0.1).masked_fill(x < -1, 0.0).values,
    "linear_norm": lambda x: F.layer_norm(F.gelu(F.linear(x, torch.ones(4, 16))), (4,)).values,
    "reduce_ragged": lambda x: (
        x.sum(1) + x.mean(dim=1) + x.amax(1) + x.max(dim=1).values + x.var(1).nan_to_num()
    ),
    "reduce_static_and_both": lambda x: x.sum(-1).values.sum() + x.mean((1, 2)).sum(),
    "softmaxes": lambda x: (x.softmax(1) + F.log_softmax(x, dim=1) + F.softmax(x, dim=-1)).values,
    "indexing": lambda x: x[..., 2:].values.sum() + x[..., 0].values.sum() + x[..., None].values.sum(),
    "views": lambda x: (
        x.unflatten(-1, (2, -1)).transpose(1, 2).transpose(1, 2).flatten(-2).view(len(x), -1, 4).values
    ),
    "cat_stack": lambda x: torch.cat([x, x], dim=-1).values.sum() + torch.stack([x, x], -1).values.sum(),
    "cat_ragged": lambda x: torch.cat([x, x * 2], dim=1).values,
    "inplace": lambda x: x.clone().add_(1).mul_(2).values,
    "flip": lambda x: torch.flip(x, [1]).values,
    "sizes": lambda x: x.values * (x.size(0) + x.size(-1) + len(x) + x.dim() + x.shape[-1]),
    # The ragged size (the longest item): a symbol of the input sizes, no device read.
    "ragged_size": lambda x: (x * x.size(1)).values + torch.arange(x.shape[1]).sum(),
    "padded_views": lambda x: x.tensor.sum(1) + x.mask.sum() + x.tensor.shape[1],
}


@pytest.mark.parametrize("name", list(TRACEABLE))
def test_traceable_in_one_graph_without_recompiles(rng, name):
    fn = TRACEABLE[name]
    torch._dynamo.reset()
    x = NestedTensor(make_items(rng, [3, 0, 5, 1], trailing=(16,)))
    explain = torch._dynamo.explain(fn)(x)
    assert explain.graph_count == 1 and explain.graph_break_count == 0, explain.break_reasons
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="eager", fullgraph=True, dynamic=True)
    frames = None
    for lengths in ([3, 0, 5, 1], [2, 6, 4, 7], [1, 1, 9, 2, 3], [4, 2, 5, 2, 6]):
        x = NestedTensor(make_items(rng, lengths, trailing=(16,)))
        torch.testing.assert_close(compiled(x), fn(x), equal_nan=True)
        if len(lengths) == 5 and frames is None:
            frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == frames, "recompiled for new lengths"


class AttentionIdiom(nn.Module):
    """The standard multi-head idiom on [B, L(b), E]."""

    def __init__(self, e=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(e, 3 * e)
        self.out = nn.Linear(e, e)

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(a.transpose(1, 2).flatten(-2)) + x


def _idiom_reference(m: AttentionIdiom, x: torch.Tensor) -> torch.Tensor:
    p = {k: v.double() for k, v in m.state_dict().items()}
    x = x.double()
    q, k, v = F.linear(x, p["qkv.weight"], p["qkv.bias"]).chunk(3, dim=-1)
    q, k, v = (t.unflatten(-1, (m.heads, -1)).transpose(0, 1) for t in (q, k, v))
    a = ref_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), q.shape[-1] ** -0.5, True)
    return F.linear(a.flatten(-2), p["out.weight"], p["out.bias"]) + x


def test_compile_attention_idiom_ragged_backend(rng):
    pytest.importorskip("torch_mlir")
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = AttentionIdiom().eval()
    compiled = torch.compile(model, backend="ragged", dynamic=True, options={"fallback": False})
    for lengths in ([3, 0, 5, 1], [7], [4, 4, 4]):
        items = make_items(rng, lengths, trailing=(16,))
        with torch.no_grad():
            out = compiled(NestedTensor(items))
        check_items(out, [_idiom_reference(model, x) for x in items], **EXP)


class ReadsShapes(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        b, d, n, r = x.size(0), x.shape[-1], len(x), x.dim()
        pooled = self.lin(x).mean(dim=1)
        return pooled.reshape(b, d) * (n + r), torch.full((n,), float(d))


def test_compile_shape_queries_ragged_backend(rng):
    pytest.importorskip("torch_mlir")
    torch._dynamo.reset()
    torch.manual_seed(1)
    model = ReadsShapes().eval()
    compiled = torch.compile(model, backend="ragged", dynamic=True, options={"fallback": False})
    w, bias = model.lin.weight.detach().double(), model.lin.bias.detach().double()
    for lengths in ([3, 0, 5], [2, 6, 1, 4]):
        items = make_items(rng, lengths, trailing=(16,))
        with torch.no_grad():
            pooled, full = compiled(NestedTensor(items))
        want = torch.stack(
            [
                (x.double() @ w.T + bias).mean(0) if len(x) else torch.zeros(16, dtype=torch.float64)
                for x in items
            ]
        )
        close(pooled, want * (len(items) + 3), **SUM)
        assert full.tolist() == [16.0] * len(items)


def test_first_token_compiled_checks_the_lengths(rng):
    """``x[:, 0]`` (CLS pooling) traces to one gather; an empty item fails loudly, not silently."""
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: x[:, 0] * 2, backend="eager", fullgraph=True, dynamic=True)
    for lengths in ([3, 2, 5], [1, 4, 2, 2]):
        items = make_items(rng, lengths)
        torch.testing.assert_close(compiled(NestedTensor(items)), torch.stack([x[0] * 2 for x in items]))
    with pytest.raises(RuntimeError, match="out of range"):
        compiled(NestedTensor(make_items(rng, [3, 0, 2])))


def test_per_item_functions_eager(rng):
    """Linear algebra, order statistics and search run item by item (eager), like DanLing."""
    g = gen(rng)
    sq = [
        torch.randn(n, n, generator=g, dtype=torch.float64) + 3 * torch.eye(n, dtype=torch.float64)
        for n in (3, 1, 4)
    ]
    mats = NestedTensor(sq)
    for fn in (torch.det, torch.inverse, torch.trace, torch.triu, torch.diag, torch.linalg.inv):
        got = fn(mats)
        assert isinstance(got, NestedTensor)
        for a, x in zip(got.unbind(), sq, strict=True):
            torch.testing.assert_close(a, fn(x))
    check_items(torch.matrix_power(mats, 2), [x @ x for x in sq], **ELEM)
    seq_items = make_items(rng, [3, 5, 2], trailing=(4,))
    seq = NestedTensor(seq_items)
    vals, idx = torch.kthvalue(seq, 1, dim=1)  # over the ragged dim: dense [B, 4]
    assert torch.equal(vals, torch.stack([x.kthvalue(1, dim=0).values for x in seq_items]))
    assert torch.equal(idx, torch.stack([x.kthvalue(1, dim=0).indices for x in seq_items]))
    check_items(
        torch.kthvalue(seq, 2, dim=2).values, [x.kthvalue(2, dim=1).values for x in seq_items], rtol=0, atol=0
    )
    assert torch.equal(torch.median(seq), seq.values.median())
    check_items(
        torch.searchsorted(torch.tensor([-0.5, 0.0, 0.5]), seq),
        [torch.searchsorted(torch.tensor([-0.5, 0.0, 0.5]), x) for x in seq_items],
        rtol=0,
        atol=0,
    )
    check_items(
        torch.index_select(seq, 2, torch.tensor([3, 0])), [x[:, [3, 0]] for x in seq_items], rtol=0, atol=0
    )
    check_items(
        torch.index_select(seq, 0, torch.tensor([2, 0])), [seq_items[2], seq_items[0]], rtol=0, atol=0
    )
    check_items(torch.logcumsumexp(seq, 1), [torch.logcumsumexp(x.double(), 0) for x in seq_items], **EXP)
    close(torch.dist(seq, seq * 2), torch.cat(seq_items).double().norm(), **SUM)
    wide = NestedTensor([x[:, :1] for x in seq_items]).expand(-1, -1, 3)
    check_items(wide, [x[:, :1].expand(-1, 3) for x in seq_items], rtol=0, atol=0)
    with pytest.raises(ValueError, match="ragged dim"):
        seq.expand(-1, 9, 4)
    check_items(
        torch.cat([seq, seq.tensor * 2], dim=-1), [torch.cat([x, 2 * x], -1) for x in seq_items], **ELEM
    )
    torch._dynamo.reset()
    with pytest.raises(Exception, match="item by item"):
        torch.compile(lambda t: torch.det(t).values, backend="eager", fullgraph=True)(mats)


def test_images_per_item_and_batch_norm(rng):
    """Convolutions and pooling run per image (eager); batch norm over the real pixels."""
    g = gen(rng)
    items = [torch.randn(3, h, w, generator=g) for h, w in ((5, 7), (4, 6), (2, 3))]
    nt = NestedTensor(items)
    conv = nn.Conv2d(3, 4, 3, padding=1).eval()
    with torch.no_grad():
        check_items(conv(nt), [conv(x) for x in items], **ELEM)
        check_items(
            F.max_pool2d(nt, 2, ceil_mode=True), [F.max_pool2d(x, 2, ceil_mode=True) for x in items], **ELEM
        )
        check_items(
            F.interpolate(nt, scale_factor=2),
            [F.interpolate(x[None], scale_factor=2)[0] for x in items],
            **ELEM,
        )
        bn = nn.BatchNorm2d(3).train()
        out = bn(nt)
    pixels = torch.cat([x.reshape(3, -1) for x in items], dim=1).double()
    mu, var = pixels.mean(1), pixels.var(1, unbiased=False)
    check_items(
        out, [(x.double() - mu[:, None, None]) / torch.sqrt(var[:, None, None] + 1e-5) for x in items], **EXP
    )
    with pytest.raises(ValueError, match="channel"):
        F.batch_norm(
            NestedTensor(make_items(rng, [3, 2])).transpose(1, 2).transpose(1, 2), None, None, training=True
        )
