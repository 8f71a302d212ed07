"""Differential tests: the same call on ``ragged_mlir.torch.nested.NestedTensor``
and on DanLing's ``NestedTensor`` (0.4.8), on the same inputs, results compared.

Inputs (every case runs on each batch it applies to): sequences ``[B, L(b), d]``
with empty items, a single item, one long item among short ones and all-equal
lengths; integer sequences; multi-ragged images ``[C, H(b), W(b)]``.

Results are compared item by item: NestedTensors by their items, padded
views and state (``batch_first``, ``padding_value``, ``mask_value``), dense
tensors exactly or to fp tolerance, Python values exactly.

Where DanLing's behaviour differs on purpose (``DIFFERENCES``; each row is
in the table of ``docs/nested_tensor.md``), the test checks that the
difference is still there and that ours matches an independent per-item
torch reference instead, so the documentation stays true.
"""

from __future__ import annotations

import copy
import io
import pickle
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
danling = pytest.importorskip("danling")
import torch.nn.functional as F  # noqa: E402
from danling.tensors import NestedTensor as DL  # noqa: E402

from ragged_mlir.torch.nested import NestedTensor as NT  # noqa: E402

TOL = dict(rtol=1e-5, atol=1e-5)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def seq_items(lengths, d=4, seed=0, dtype=torch.float32):
    g = _gen(seed)
    return [torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype) for n in lengths]


BATCHES: dict[str, Callable[[], list[torch.Tensor]]] = {
    "random": lambda: seq_items([3, 5, 2, 4], seed=1),
    "empty_item": lambda: seq_items([3, 0, 5], seed=2),
    "single": lambda: seq_items([6], seed=3),
    "one_long": lambda: seq_items([1, 2, 40, 1], seed=4),
    "all_equal": lambda: seq_items([4, 4, 4], seed=5),
}
INT_BATCHES: dict[str, Callable[[], list[torch.Tensor]]] = {
    "ints": lambda: [torch.randint(1, 9, (n,), generator=_gen(6)) for n in (3, 1, 4)],
    "ints_single": lambda: [torch.randint(1, 9, (5,), generator=_gen(7))],
}
IMAGE_BATCHES: dict[str, Callable[[], list[torch.Tensor]]] = {
    "images": lambda: [torch.randn(3, h, w, generator=_gen(8)) for h, w in ((5, 7), (4, 6), (2, 3))],
    "images_single": lambda: [torch.randn(2, 4, 5, generator=_gen(9))],
}


def pair(items, **kw):
    return NT([x.clone() for x in items], **kw), DL([x.clone() for x in items], **kw)


def _items_of(x: Any) -> list[torch.Tensor]:
    return [t.as_subclass(torch.Tensor) if type(t) is not torch.Tensor else t for t in x]


def assert_same(ours: Any, theirs: Any, exact: bool = False, where: str = "result") -> None:
    """``ours`` (ragged_mlir) equals ``theirs`` (DanLing)."""
    tol = dict(rtol=0, atol=0) if exact else TOL
    if isinstance(theirs, DL):
        assert isinstance(ours, NT), f"{where}: DanLing returns a NestedTensor, ours {type(ours).__name__}"
        assert len(ours) == len(theirs), f"{where}: batch sizes {len(ours)} vs {len(theirs)}"
        assert ours.batch_first == theirs.batch_first, f"{where}: batch_first"
        assert ours.padding_value == theirs.padding_value and ours.mask_value == theirs.mask_value
        assert ours.dtype == theirs.dtype, f"{where}: dtype {ours.dtype} vs {theirs.dtype}"
        a, b = list(ours), _items_of(theirs)
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert tuple(x.shape) == tuple(y.shape), (
                f"{where}: item {i} shape {tuple(x.shape)} vs {tuple(y.shape)}"
            )
            torch.testing.assert_close(x, y, equal_nan=True, **tol)
        if len(ours):
            assert tuple(ours.shape) == tuple(theirs.shape), f"{where}: shape {ours.shape} vs {theirs.shape}"
            torch.testing.assert_close(
                ours.tensor, theirs.tensor.as_subclass(torch.Tensor), equal_nan=True, **tol
            )
            assert torch.equal(ours.mask, theirs.mask.as_subclass(torch.Tensor)), f"{where}: mask"
        return
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, torch.Tensor) and not isinstance(ours, NT), (
            f"{where}: DanLing returns a tensor, ours {type(ours).__name__}"
        )
        assert ours.dtype == theirs.dtype, f"{where}: dtype {ours.dtype} vs {theirs.dtype}"
        torch.testing.assert_close(ours, theirs.as_subclass(torch.Tensor), equal_nan=True, **tol)
        return
    if isinstance(theirs, (tuple, list)):
        assert isinstance(ours, (tuple, list)) and len(ours) == len(theirs), (
            f"{where}: {ours!r} vs {theirs!r}"
        )
        for i, (x, y) in enumerate(zip(ours, theirs, strict=True)):
            assert_same(x, y, exact, f"{where}[{i}]")
        return
    assert ours == theirs, f"{where}: {ours!r} vs {theirs!r}"


# -- the cases -------------------------------------------------------------------------------------
# name -> (function of one batch, batches it runs on, exact)

SEQ = tuple(BATCHES)
NONEMPTY = ("random", "single", "one_long", "all_equal")
INTS = tuple(INT_BATCHES)
IMAGES = tuple(IMAGE_BATCHES)


def _w(shape, seed=11):
    return torch.randn(*shape, generator=_gen(seed))


CASES: dict[str, tuple[Callable[[Any], Any], tuple[str, ...], bool]] = {
    # properties and views
    "shape": (lambda x: tuple(x.shape), SEQ + IMAGES + INTS, True),
    "size": (lambda x: [x.size(d) for d in range(-x.dim(), x.dim())], SEQ + IMAGES, True),
    "dim_numel_len": (lambda x: (x.dim(), x.numel(), len(x), x.ndim), SEQ + IMAGES + INTS, True),
    "tensor": (lambda x: x.tensor, SEQ + IMAGES + INTS, True),
    "mask": (lambda x: x.mask, SEQ + IMAGES + INTS, True),
    "tensor_mask": (lambda x: x.tensor_mask, SEQ + IMAGES, True),
    "concat": (lambda x: x.concat, SEQ + IMAGES + INTS, True),
    "tolist": (lambda x: x.tolist(), INTS, True),
    "occupancy": (lambda x: round(x.occupancy, 6), SEQ + IMAGES, True),
    "ragged_dims": (lambda x: tuple(x.ragged_dims), SEQ + IMAGES + INTS, True),
    "packed_dim_order": (lambda x: tuple(x.packed_dim_order), SEQ + IMAGES, True),
    "items": (lambda x: [t for t in x], SEQ + IMAGES, True),
    "getitem_int": (lambda x: (x[0], x[-1]), SEQ + IMAGES, True),
    "getitem_slice": (lambda x: x[1:], SEQ + IMAGES, True),
    "getitem_step": (lambda x: x[::-1], SEQ + IMAGES, True),
    "getitem_list": (lambda x: x[[len(x) - 1, 0]], SEQ + IMAGES, True),
    "getitem_bool_list": (lambda x: x[[i % 2 == 0 for i in range(len(x))]], SEQ, True),
    "getitem_ragged_slice": (lambda x: x[:, 1:], SEQ, True),
    "getitem_ragged_stop": (lambda x: x[:, :2], SEQ, True),
    "getitem_static": (lambda x: x[..., 1:], SEQ + IMAGES, True),
    "getitem_static_int": (lambda x: x[..., 0], SEQ, True),
    "getitem_item_tuple": (lambda x: x[0, 0], NONEMPTY, True),
    "getitem_newaxis": (lambda x: x[:, None], SEQ, True),
    "getitem_newaxis_last": (lambda x: x[..., None], SEQ, True),
    "getitem_mask": (lambda x: x[x > 0], SEQ, True),
    "getitem_dense_mask": (lambda x: x[x.tensor > 0], SEQ, True),
    "getitem_first_token": (lambda x: x[:, 0], NONEMPTY, True),
    "getitem_last_token": (lambda x: x[:, -1], NONEMPTY, True),
    "getitem_channel": (lambda x: x[:, 0], IMAGES, True),
    "getitem_image_crop": (lambda x: x[:, :, 1:], IMAGES, True),
    "unsqueeze": (lambda x: (x.unsqueeze(1), x.unsqueeze(-1), x.unsqueeze(2)), SEQ + IMAGES, True),
    "unsqueeze_front": (lambda x: x.unsqueeze(0), SEQ, True),
    "squeeze": (lambda x: (x.unsqueeze(-1).squeeze(-1), x.unsqueeze(2).squeeze(2)), SEQ, True),
    "squeeze_all": (lambda x: x.unsqueeze(2).squeeze(), ("random", "empty_item", "all_equal"), True),
    "transpose_items": (lambda x: x.transpose(1, 2), SEQ + IMAGES, True),
    "transpose_batch": (lambda x: x.transpose(0, 1), SEQ, True),
    "transpose_images": (lambda x: (x.transpose(2, 3), x.transpose(-1, -2)), IMAGES, True),
    "permute": (lambda x: x.permute(0, 2, 1), SEQ, True),
    "permute_images": (lambda x: x.permute(0, 2, 3, 1), IMAGES, True),
    "T": (lambda x: x.T, SEQ + IMAGES, True),
    "unflatten": (lambda x: x.unflatten(-1, (2, -1)), SEQ, True),
    "heads_view": (lambda x: x.unflatten(-1, (2, -1)).transpose(1, 2), SEQ, True),
    "heads_back": (lambda x: x.unflatten(-1, (2, -1)).transpose(1, 2).transpose(1, 2).flatten(-2), SEQ, True),
    "flatten_items": (lambda x: x.flatten(1), SEQ + IMAGES, True),
    "flatten_hw": (lambda x: x.flatten(2), IMAGES, True),
    "flatten_all": (lambda x: x.flatten(), SEQ, True),
    "view_per_item": (lambda x: x.view(-1), SEQ, True),
    "view_batch": (lambda x: x.view(len(x), -1, 2), SEQ, True),
    "view_heads": (lambda x: x.view(len(x), -1, 2, 2), SEQ, True),
    "reshape": (lambda x: x.reshape(len(x), -1), SEQ + IMAGES, True),
    "view_max": (lambda x: x.view(*(tuple(x.size())[:-1] + (2, 2))), NONEMPTY, True),
    "chunk_static": (lambda x: x.chunk(2, dim=-1), SEQ, True),
    "chunk_batch": (lambda x: x.chunk(2, dim=0), SEQ, True),
    "split_static": (lambda x: x.split([1, 3], dim=-1), SEQ, True),
    "unbind_static": (lambda x: x.unbind(2), SEQ, True),
    "narrow": (lambda x: x.narrow(2, 1, 2), SEQ, True),
    # conversions
    "float_int": (lambda x: (x.int(), x.long(), x.double(), x.half(), x.bool()), SEQ + INTS, True),
    "to": (lambda x: (x.to(torch.float64), x.to("cpu"), x.type(torch.float64)), SEQ, True),
    "clone_detach": (lambda x: (x.clone(), x.detach(), x.contiguous()), SEQ, True),
    # arithmetic and comparisons
    "arith_scalar": (
        lambda x: (x + 1, 2 * x, x - 0.5, 1.5 - x, x / 2, 3 / (x.abs() + 1), x**2, -x, +x),
        SEQ,
        False,
    ),
    "arith_nested": (lambda x: (x + x, x * x, x - x * 2, x / (x.abs() + 1)), SEQ, False),
    "arith_dense_row": (lambda x: (x + _w((4,)), _w((4,)) * x, x - _w((1, 4))), SEQ, False),
    "arith_padded": (lambda x: (x + x.tensor, x.tensor * x, x.tensor - x), SEQ, False),
    "floordiv_mod": (lambda x: (x // 2, x % 3, 7 // x, 7 % x, x // x, x % x), INTS, True),
    "floordiv_mod_float": (lambda x: (x // 0.7, x % 0.7), SEQ, False),
    "pow": (lambda x: (x**2, 2**x, x**x), INTS, True),
    "bitwise": (lambda x: (x & 1, x | 2, x ^ 3, ~x, x << 1, x >> 1, 1 & x), INTS, True),
    "compare": (lambda x: (x > 0, x >= 0, x < 0, x <= 0, x == x, x != x, x > x.tensor, 0 < x), SEQ, True),
    "compare_ints": (lambda x: (x == 3, x != 3, x > x), INTS, True),
    "where": (
        lambda x: (torch.where(x > 0, x, 0.0), torch.where(x > 0, x, x * 2), x.where(x > 0, -1.0)),
        SEQ,
        True,
    ),
    "masked_fill": (lambda x: (x.masked_fill(x > 0, 0.0), x.masked_fill(x.tensor > 0, 1.0)), SEQ, True),
    "clamp": (lambda x: (x.clamp(min=0), torch.clamp(x, -0.5, 0.5), x.clamp_min(0.1)), SEQ, True),
    "isin": (lambda x: torch.isin(x, torch.tensor([1, 3])), INTS, True),
    "unary_math": (
        lambda x: (
            x.exp(),
            torch.sin(x),
            torch.abs(x),
            x.sqrt(),
            torch.log1p(x.abs()),
            x.sigmoid(),
            x.tanh(),
        ),
        SEQ,
        False,
    ),
    "activations": (
        lambda x: (F.relu(x), F.gelu(x), F.silu(x), F.elu(x), F.leaky_relu(x), F.softplus(x), F.hardtanh(x)),
        SEQ,
        False,
    ),
    "like": (
        lambda x: (torch.zeros_like(x), torch.ones_like(x), torch.full_like(x, 3.0)),
        SEQ + IMAGES,
        True,
    ),
    "isclose": (lambda x: torch.isclose(x, x + 1e-9), SEQ, True),
    "nan_to_num": (lambda x: torch.nan_to_num(x / x), SEQ, True),
    # predicates
    "equal": (
        lambda x: (torch.equal(x, x.clone()), torch.equal(x, x + 1), torch.equal(x, x.tensor)),
        SEQ,
        True,
    ),
    "allclose": (lambda x: (torch.allclose(x, x + 1e-9), torch.allclose(x, x + 1)), SEQ, True),
    # reductions
    "sum_all": (
        lambda x: (x.sum(), x.mean(), x.amax(), x.amin(), x.max(), x.min()),
        NONEMPTY + IMAGES,
        False,
    ),
    "sum_ragged": (lambda x: (x.sum(1), x.sum(dim=1, keepdim=True), torch.sum(x, -2)), SEQ, False),
    "mean_ragged": (lambda x: (x.mean(1), torch.mean(x, dim=1, keepdim=True)), NONEMPTY, False),
    "max_ragged": (
        lambda x: (x.amax(1), x.amin(1), x.max(1).values, x.argmax(1), x.argmin(1)),
        NONEMPTY,
        False,
    ),
    "max_indices": (lambda x: tuple(x.max(dim=1)), NONEMPTY, False),
    "reduce_static": (lambda x: (x.sum(-1), x.mean(2), x.amax(-1), x.std(-1), x.var(2)), SEQ, False),
    "max_static": (lambda x: tuple(x.max(dim=-1)), SEQ, False),
    "reduce_ragged_and_static": (lambda x: (x.sum((1, 2)), x.mean((1, 2)), x.amax((1, 2))), NONEMPTY, False),
    "reduce_more": (lambda x: (x.prod(1), x.std(1), x.var(1), torch.logsumexp(x, 1)), NONEMPTY, False),
    "count_nonzero": (lambda x: (torch.count_nonzero(x, 1), torch.count_nonzero(x, 2)), SEQ, True),
    "all_any": (lambda x: ((x > 0).all(), (x > 0).any(), (x > 0).all(1), (x > 0).any(2)), SEQ, True),
    "image_pool": (lambda x: (x.sum((2, 3)), x.mean((2, 3)), x.amax((2, 3))), IMAGES, False),
    "image_channels": (lambda x: (x.sum(1), x.mean(1)), IMAGES, False),
    "image_one_ragged": (lambda x: (x.sum(2), x.amax(3)), IMAGES, False),
    "int_sums": (lambda x: (x.sum(), x.sum(1), x.amax(1), x.prod(1)), INTS, True),
    # along a dim
    "softmax": (
        lambda x: (x.softmax(1), F.softmax(x, dim=-1), torch.log_softmax(x, 1), F.log_softmax(x, -1)),
        SEQ,
        False,
    ),
    "cumsum": (lambda x: (torch.cumsum(x, 1), x.cumsum(-1), torch.cumprod(x, 1)), SEQ, False),
    "flip": (lambda x: (torch.flip(x, [1]), torch.flip(x, [2]), x.flip(-1)), SEQ, True),
    "sort_topk": (lambda x: (torch.sort(x, -1).values, torch.topk(x, 2, dim=-1).values), SEQ, True),
    "normalize": (lambda x: (F.normalize(x, dim=-1), F.layer_norm(x, (4,))), SEQ, False),
    "image_softmax": (lambda x: x.softmax(1), IMAGES, False),
    # per token with weights
    "linear": (
        lambda x: (F.linear(x, _w((6, 4))), F.linear(x, _w((6, 4)), _w((6,), 12)), x @ _w((4, 3))),
        SEQ,
        False,
    ),
    "embedding": (lambda x: F.embedding(x, _w((10, 3))), INTS, False),
    "one_hot": (lambda x: F.one_hot(x, 10), INTS, True),
    "matmul_nested": (lambda x: x @ x.transpose(1, 2), SEQ, False),
    "mse": (lambda x: (F.mse_loss(x, x * 0.5), F.l1_loss(x, x * 2, reduction="sum")), SEQ, False),
    # batch
    "cat_batch": (lambda x: torch.cat([x, x * 2]), SEQ + IMAGES, True),
    "cat_dense_item": (lambda x: torch.cat([x, torch.ones(2, 4)]), SEQ, True),
    "cat_static": (lambda x: torch.cat([x[..., :2], x[..., 2:]], dim=-1), SEQ, True),
    "cat_ragged": (lambda x: torch.cat([x, x * 2], dim=1), SEQ, True),
    "stack": (lambda x: (torch.stack([x, x + 1], 1), torch.stack([x, x + 1], -1)), SEQ, True),
    # attention
    "sdpa_heads": (
        lambda x: F.scaled_dot_product_attention(*[x.unflatten(-1, (2, -1)).transpose(1, 2)] * 3),
        SEQ,
        False,
    ),
    "sdpa_one_head": (lambda x: F.scaled_dot_product_attention(x, x, x), SEQ, False),
    "sdpa_causal": (lambda x: F.scaled_dot_product_attention(x, x * 0.5, x, is_causal=True), NONEMPTY, False),
    "sdpa_round_trip": (
        lambda x: (
            F.scaled_dot_product_attention(*[x.unflatten(-1, (2, -1)).transpose(1, 2)] * 3)
            .transpose(1, 2)
            .flatten(-2)
        ),
        SEQ,
        False,
    ),
}

# Cases where DanLing's behaviour differs from ours on purpose: name -> (batches, reference, reason).
# ``reference(items)`` computes our expected result independently, per item, with plain torch.


def _stack_rows(items, fn, empty):
    return torch.stack(
        [fn(t) if t.shape[0] else torch.full(t.shape[1:], empty, dtype=t.dtype) for t in items]
    )


DIFFERENCES: dict[str, tuple[tuple[str, ...], Callable[[list[torch.Tensor]], Any], str]] = {
    "mean_ragged_empty_item": (
        ("empty_item",),
        lambda items: _stack_rows(items, lambda t: t.mean(0), 0.0),
        "x.mean(1) over an empty item: DanLing NaN, ours 0 (reductions of empty rows take an identity)",
    ),
    "sum_batch_dim": (
        SEQ,
        lambda items: torch.nn.utils.rnn.pad_sequence(items, batch_first=True).sum(0),
        "x.sum(0): DanLing sums every item (dim 0 acts like the item dims), ours sums over the batch (like "
        "x.tensor.sum(0) with zero padding)",
    ),
    "first_token_seq_first": (
        ("random", "all_equal"),
        lambda items: torch.stack([t[0] for t in items]),
        "x[:, 0] on batch_first=False: DanLing returns a NestedTensor, ours the dense [B, d] rows as with "
        "batch_first=True",
    ),
    "norm_ragged_dim": (
        NONEMPTY,
        lambda items: torch.stack([t.norm(dim=0) for t in items]),
        "x.norm(dim=1): DanLing returns a NestedTensor of per-item rows, ours a dense [B, d] like x.sum(1)",
    ),
    "squeeze_length_one_items": (
        ("one_long",),
        lambda items: items,
        "x.squeeze() with items of length 1: DanLing squeezes their ragged dim and fails to repack; ours only "
        "squeezes static dims of size 1",
    ),
    "setitem_batched_value": (
        ("random", "single"),
        lambda items: [torch.ones(3, 4, dtype=items[0].dtype)] + items[1:],
        "x[0:1] = dense [1, 3, d]: DanLing fails to repack; ours unbinds the value's first dim into items",
    ),
}


def _assign(x, index, value):
    x[index] = value
    return x


DIFF_CALLS: dict[str, tuple[Callable[[Any], Any], dict]] = {
    "mean_ragged_empty_item": (lambda x: x.mean(1), {}),
    "sum_batch_dim": (lambda x: x.sum(0), {}),
    "first_token_seq_first": (lambda x: x[:, 0], {"batch_first": False}),
    "norm_ragged_dim": (lambda x: x.norm(dim=1), {}),
    "squeeze_length_one_items": (lambda x: x.unsqueeze(2).squeeze(), {}),
    "setitem_batched_value": (lambda x: _assign(x, slice(0, 1), torch.ones(1, 3, 4)), {}),
}


def _all_batches() -> dict[str, Callable[[], list[torch.Tensor]]]:
    return {**BATCHES, **INT_BATCHES, **IMAGE_BATCHES}


def _params():
    for name, (_, batches, _) in CASES.items():
        for b in batches:
            yield pytest.param(name, b, id=f"{name}-{b}")


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(("case", "batch"), list(_params()))
def test_same_as_danling(case, batch):
    fn, _, exact = CASES[case]
    items = _all_batches()[batch]()
    ours_in, theirs_in = pair(items)
    theirs = fn(theirs_in)
    ours = fn(ours_in)
    assert_same(ours, theirs, exact, case)
    # nothing the caller passed was changed
    for x, y in zip(list(ours_in), items, strict=True):
        assert torch.equal(x, y)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("case", list(DIFFERENCES))
def test_documented_differences(case):
    batches, reference, _ = DIFFERENCES[case]
    call, kw = DIFF_CALLS[case]
    for batch in batches:
        items = _all_batches()[batch]()
        ours_in, theirs_in = pair(items, **kw)
        ours = call(ours_in)
        expected = reference([t.double() for t in items])
        if isinstance(ours, NT):
            got = [t.double() for t in ours]
            assert len(got) == len(expected)
            for a, b in zip(got, expected, strict=True):
                torch.testing.assert_close(a, b, **TOL)
        else:
            torch.testing.assert_close(ours.double(), expected, **TOL)
        try:
            theirs = call(theirs_in)
        except Exception:
            continue  # DanLing raises: still different
        with pytest.raises(AssertionError):
            assert_same(ours, theirs, False, case)


def test_difference_table_is_documented():
    """Every difference the tests know is a row of docs/nested_tensor.md, and back."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "nested_tensor.md").read_text()
    for case, (_, _, reason) in DIFFERENCES.items():
        assert f"`{case}`" in doc, f"docs/nested_tensor.md lacks the difference {case}: {reason}"


# -- in place, assignment and serialization ------------------------------------------------------------


def _inplace_cases():
    return {
        "iadd": lambda x: x.__iadd__(1.5),
        "isub_nested": lambda x: x.__isub__(x * 0.5),
        "imul_padded": lambda x: x.__imul__(x.tensor),
        "itruediv": lambda x: x.__itruediv__(2.0),
        "relu_": lambda x: x.relu_(),
        "add_": lambda x: x.add_(x, alpha=2),
        "clamp_": lambda x: x.clamp_(min=0.0),
        "F.relu_inplace": lambda x: F.relu(x, inplace=True),
        "masked_fill_": lambda x: x.masked_fill_(x > 0, 0.0),
        "fill_": lambda x: x.fill_(2.0),
        "zero_": lambda x: x.zero_(),
        "copy_": lambda x: x.copy_(x * 3),
    }


@pytest.mark.parametrize("name", list(_inplace_cases()))
@pytest.mark.parametrize("batch", ["random", "empty_item", "single"])
def test_inplace_same_as_danling(name, batch):
    op = _inplace_cases()[name]
    items = BATCHES[batch]()
    ours, theirs = pair(items)
    alias = ours.values
    r_ours = op(ours)
    op(theirs)
    assert r_ours is ours  # in place: the same object, its values updated
    assert ours.values is alias
    assert_same(ours, theirs, True, name)


def _setitem_cases():
    return {
        "item_same_shape": lambda x: x.__setitem__(0, torch.full(tuple(x[0].shape), 7.0)),
        "item_new_shape": lambda x: x.__setitem__(-1, torch.ones(2, 4)),
        "items_slice": lambda x: x.__setitem__(
            slice(0, 1), NT([torch.ones(3, 4)]) if isinstance(x, NT) else DL([torch.ones(3, 4)])
        ),
        "inside_scalar": lambda x: x.__setitem__((slice(None), 0), -1.0),
        "inside_static": lambda x: x.__setitem__((Ellipsis, 1), 5.0),
        "inside_bool_batch": lambda x: x.__setitem__(([i == 0 for i in range(len(x))], 0), 9.0),
        "inside_nested_value": lambda x: x.__setitem__(
            (slice(None), 0),
            NT([torch.ones(4) * i for i in range(len(x))])
            if isinstance(x, NT)
            else DL([torch.ones(4) * i for i in range(len(x))]),
        ),
    }


@pytest.mark.parametrize("name", list(_setitem_cases()))
@pytest.mark.parametrize("batch", ["random", "single", "all_equal"])
def test_setitem_same_as_danling(name, batch):
    op = _setitem_cases()[name]
    items = BATCHES[batch]()
    ours, theirs = pair(items)
    op(ours)
    op(theirs)
    assert_same(ours, theirs, True, name)
    for x, y in zip(items, BATCHES[batch](), strict=True):
        assert torch.equal(x, y)


@pytest.mark.parametrize("batch", ["random", "empty_item", "images"])
def test_serialization_same_as_danling(batch):
    items = _all_batches()[batch]()
    ours, theirs = pair(items, batch_first=False, padding_value=-1.0, mask_value=True)
    for fn in (copy.copy, copy.deepcopy, lambda t: pickle.loads(pickle.dumps(t))):
        assert_same(fn(ours), fn(theirs), True, "copy")
    buf = io.BytesIO()
    torch.save(ours, buf)
    buf.seek(0)
    loaded = torch.load(buf)  # weights_only: NestedTensor is an allowed global
    assert_same(loaded, theirs, True, "torch.load")
    deep = copy.deepcopy(ours)
    deep.values.add_(1)
    assert not torch.equal(deep.values, ours.values)
    shallow = copy.copy(ours)
    assert shallow.values is ours.values


@pytest.mark.parametrize(
    "make",
    [
        lambda cls: cls(torch.tensor([1, 2, 3]), torch.tensor([4, 5])),
        lambda cls: cls([[1, 2, 3], [4, 5]]),
        lambda cls: cls([1.0, 2.0], [3.0]),
        lambda cls: cls(torch.randn(3, 2, generator=_gen(1)) for _ in range(2)),
        lambda cls: cls([torch.tensor([1]), torch.tensor([1.5])]),
        lambda cls: cls(torch.tensor([[1, 2], [3, 4]])),
        lambda cls: cls([torch.tensor(1.0), torch.tensor(2.0)]),
        lambda cls: cls([], dtype=torch.float64),
        lambda cls: cls([torch.ones(2, 3)], dtype=torch.float16, requires_grad=False),
        lambda cls: cls([torch.zeros(0, 3), torch.ones(2, 3)]),
        lambda cls: cls([torch.ones(2, 3, 4), torch.ones(2, 5, 4)]),
        lambda cls: cls([torch.ones(2, 3), torch.ones(2, 3)], ragged_dims=(1,)),
    ],
    ids=[
        "tensors",
        "lists",
        "numbers",
        "generator",
        "promote",
        "one_tensor",
        "scalars",
        "empty",
        "dtype",
        "empty_item",
        "inner_ragged",
        "declared",
    ],
)
def test_constructors_same_as_danling(make):
    ours, theirs = make(NT), make(DL)
    assert_same(ours, theirs, True, "constructor")
    assert tuple(ours.ragged_dims) == tuple(theirs.ragged_dims)


def test_factories_same_as_danling():
    padded = torch.tensor([[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    for kw in ({}, {"mask_value": True}):
        m = ~mask if kw else mask
        assert_same(NT.from_tensor_mask(padded, m, **kw), DL.from_tensor_mask(padded, m, **kw), True)
    assert_same(NT.from_tensor_mask(padded[0], mask[0]), DL.from_tensor_mask(padded[0], mask[0]), True)
    for batch in ("random", "images"):
        ours, theirs = pair(_all_batches()[batch]())
        assert_same(ours.nested_like(ours.tensor * 2), theirs.nested_like(theirs.tensor * 2), True)
        c, shapes = ours.concatenate()
        c2, shapes2 = theirs.concatenate()
        assert torch.equal(c, c2.as_subclass(torch.Tensor)) and tuple(shapes) == tuple(shapes2)
        back = NT.from_concatenated(c, shapes, ragged_dims=ours.ragged_dims)
        assert_same(back, DL.from_concatenated(c2, shapes2), True)
        assert torch.equal(ours.element_sizes(), theirs.element_sizes())
        assert torch.equal(ours.packed_offsets(), theirs.packed_offsets())


def test_errors_like_danling():
    """DanLing raises for these; so do we (with a message naming the argument)."""
    x, y = pair(seq_items([3, 2]))
    short, _ = pair(seq_items([3]))
    for ours, theirs, exc in (
        (lambda: x + short, lambda: y + DL(seq_items([3])), ValueError),
        (lambda: x.permute(1, 0, 2), lambda: y.permute(1, 0, 2), ValueError),
        (lambda: x.softmax(0), lambda: y.softmax(0), ValueError),
        (lambda: x[""], lambda: y[""], ValueError),
        (lambda: NT(False), lambda: DL(False), ValueError),
        (
            lambda: NT(torch.ones(2), torch.ones(2, 3)),
            lambda: DL(torch.ones(2), torch.ones(2, 3)),
            ValueError,
        ),
        (lambda: bool(x), lambda: bool(y), RuntimeError),
        (lambda: x < "a", lambda: y < "a", TypeError),
    ):
        with pytest.raises(exc):
            theirs()
        with pytest.raises(exc):
            ours()
    assert (x != "a") is True
