"""Attention dropout (``torch.ops.ragged.attention``'s ``dropout_p`` and
``seed``; ``ragged.attention``'s ``dropout``), eager and compiled, forward
and gradients, against an fp64 reference that runs each item alone with the
weights kept by an independent NumPy implementation of the dropout rule in
``ragged.attention``'s documentation.

Then models as users write them: ``nn.TransformerEncoderLayer`` with its
default ``dropout=0.1`` and a block calling ``F.scaled_dot_product_attention``
with ``dropout_p`` train compiled in one graph each, with fallback off.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import torch.nn.functional as F  # noqa: E402
from references import ref_dropout_kept as kept  # noqa: E402
from torch import nn  # noqa: E402
from torch_helpers import randn_items  # noqa: E402

from ragged_mlir.torch import NestedTensor  # noqa: E402
from ragged_mlir.torch import backend as rb  # noqa: E402
from ragged_mlir.torch.ops import dropout_factors  # noqa: E402

torch.set_num_threads(2)

HEADS, D, P, SCALE = 3, 8, 0.3, 0.4
LENGTHS = {
    "random": [5, 0, 17, 1, 9],
    "single": [7],
    "one-long": [3, 150, 2],
    "all-equal": [8, 8, 8, 8],
}


def reference(q, k, v, g, lengths, seed, p, causal):
    """fp64 output and (dq, dk, dv) per item, by torch's autograd on each
    item alone, the dropped weights zeroed and the kept ones scaled."""
    outs, grads = [], []
    start = 0
    for b, n in enumerate(lengths):
        rows = slice(start, start + n)
        start += n
        ts = [t[rows].double().transpose(0, 1).detach().requires_grad_() for t in (q, k, v)]
        s = SCALE * ts[0] @ ts[1].transpose(1, 2)
        if causal:
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
        keep = torch.from_numpy(kept(seed, b, HEADS, n, p)).double() / (1 - p)
        o = (torch.softmax(s, -1) * keep) @ ts[2]
        grads.append(
            torch.autograd.grad(o, ts, g[rows].double().transpose(0, 1)) if n else [t.detach() for t in ts]
        )
        outs.append(o.transpose(0, 1).detach())
    cat = [torch.cat([x[i].transpose(0, 1) for x in grads]) for i in range(3)]
    return torch.cat(outs), cat


def _inputs(lengths, seed=0):
    gen = torch.Generator().manual_seed(seed)
    n = sum(lengths)
    return [torch.randn(n, HEADS, D, generator=gen) for _ in range(4)]


def _offsets(lengths):
    return torch.tensor(np.concatenate([[0], np.cumsum(lengths)]), dtype=torch.int64)


def _tol(lengths):
    return dict(rtol=1e-4, atol=2e-5 * math.sqrt(max([*lengths, 1])) / (1 - P))


def test_dropout_rule_keeps_one_minus_p():
    seed = torch.tensor(0x1234_5678_9ABC_DEF0)
    f = dropout_factors(seed, 3, 4, 200, P)
    np.testing.assert_array_equal((f > 0).numpy(), kept(int(seed), 3, 4, 200, P))
    frac = (f > 0).double().mean().item()
    assert abs(frac - (1 - P)) < 0.005, frac
    assert set(np.unique(f.numpy())) == {0.0, np.float32(1 / (1 - P))}
    # Neighbouring keys, queries, heads and items, and other seeds, decide
    # independently: agreement is that of independent coins.
    both = (1 - P) ** 2 + P**2
    for other in (
        f[:, :, 1:] == f[:, :, :-1],
        f[:, 1:] == f[:, :-1],
        f[1:] == f[:-1],
        dropout_factors(seed, 4, 4, 200, P) == f,
        dropout_factors(seed + 1, 3, 4, 200, P) == f,
    ):
        assert abs(other.double().mean().item() - both) < 0.01


@pytest.mark.parametrize("case", list(LENGTHS))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_eager_attention_dropout(case, causal):
    lengths = LENGTHS[case]
    q, k, v, g = _inputs(lengths)
    seed = torch.tensor(987654321987)
    qkv = [t.clone().requires_grad_() for t in (q, k, v)]
    out = torch.ops.ragged.attention(*qkv, _offsets(lengths), SCALE, causal, P, seed)
    out.backward(g)
    want, want_grads = reference(q, k, v, g, lengths, int(seed), P, causal)
    tol = _tol(lengths)
    np.testing.assert_allclose(out.detach().numpy(), want.numpy(), **tol)
    for name, t, w in zip("qkv", qkv, want_grads, strict=True):
        np.testing.assert_allclose(t.grad.numpy(), w.numpy(), err_msg=f"d{name}", **tol)


@pytest.fixture(scope="module")
def compiled_steps(tmp_path_factory):
    """One compiled function per (op, causal), dynamic shapes: every length set runs on it."""
    torch._dynamo.reset()
    steps = {}
    for op in ("attention", "attention_lse"):
        for causal in (False, True):
            target = getattr(torch.ops.ragged, op)

            def step(q, k, v, offsets, seed, target=target, causal=causal, op=op):
                out = target(q, k, v, offsets, SCALE, causal, P, seed)
                return out[0] if op == "attention_lse" else out

            debug = tmp_path_factory.mktemp(f"{op}-{causal}")
            steps[op, causal] = (
                torch.compile(
                    step, backend="ragged", dynamic=True, fullgraph=True, options={"debug_dir": str(debug)}
                ),
                debug,
            )
    return steps


@pytest.mark.parametrize("case", list(LENGTHS))
@pytest.mark.parametrize(
    "op,causal", [("attention", False), ("attention_lse", False), ("attention_lse", True)]
)
def test_compiled_attention_dropout(compiled_steps, op, causal, case):
    run, debug = compiled_steps[op, causal]
    lengths = LENGTHS[case]
    q, k, v, g = _inputs(lengths, seed=len(lengths))
    tol = _tol(lengths)
    for seed in (torch.tensor(5), torch.tensor(-(2**40) - 17)):
        fallbacks = rb.stats["fallbacks"]
        qkv = [t.clone().requires_grad_() for t in (q, k, v)]
        out = run(*qkv, _offsets(lengths), seed)
        out.backward(g)
        assert rb.stats["fallbacks"] == fallbacks
        want, want_grads = reference(q, k, v, g, lengths, int(seed), P, causal)
        np.testing.assert_allclose(out.detach().numpy(), want.numpy(), **tol)
        for name, t, w in zip("qkv", qkv, want_grads, strict=True):
            np.testing.assert_allclose(t.grad.numpy(), w.numpy(), err_msg=f"d{name}", **tol)
    graphs = {d: (d / "ragged.mlir").read_text() for d in debug.glob("*/")}
    assert any("ragged.attention_grad" in text and "dropout(" in text for text in graphs.values())
    assert any("ragged.attention %" in text and "dropout(" in text for text in graphs.values())


def test_transformer_encoder_layer_trains_with_default_dropout(tmp_path):
    """nn.TransformerEncoderLayer as constructed by default (dropout=0.1, in
    attention too) trains compiled: one forward and one backward graph,
    attention dropout in the kernel and its gradient, each step drawing new
    weights to drop, as torch.manual_seed decides; eval mode drops nothing."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
    assert layer.self_attn.dropout == 0.1
    run = torch.compile(
        layer, backend="ragged", dynamic=True, fullgraph=True, options={"debug_dir": str(tmp_path)}
    )
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    fallbacks = rb.stats["fallbacks"]
    outs = []
    for step, lengths in enumerate(([5, 17, 3, 9], [5, 17, 3, 9], [4, 0, 30, 1, 8])):
        x = NestedTensor(randn_items(lengths, 16, seed=step % 2), requires_grad=True)
        out = run(x)
        loss = (out.values**2).mean()
        opt.zero_grad()
        loss.backward()
        assert torch.isfinite(loss)
        for name, p in layer.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert torch.isfinite(x.grad.values).all()
        outs.append(out.values.detach())
    assert not torch.equal(outs[0], outs[1])  # the same batch twice: other weights dropped
    # The compiled draws follow torch's generator.
    x = NestedTensor(randn_items([6, 2, 11], 16, seed=5), requires_grad=True)
    seeded = []
    for seed in (7, 7, 8):
        torch.manual_seed(seed)
        seeded.append(run(x).values.detach())
    assert torch.equal(seeded[0], seeded[1]) and not torch.equal(seeded[0], seeded[2])
    assert rb.stats["fallbacks"] == fallbacks
    texts = [(d / "ragged.mlir").read_text() for d in tmp_path.glob("*/")]
    assert any(re.search(r"ragged\.attention %.* dropout\(", t) for t in texts)
    assert any(re.search(r"ragged\.attention_grad .* dropout\(", t) for t in texts)
    layer.eval()
    xs = randn_items([5, 17, 3], 16, seed=3)
    with torch.no_grad():
        got = layer(NestedTensor(xs)).values
        want = torch.cat([layer(x[None])[0] for x in xs])
    np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-5, rtol=1e-5)


def test_sdpa_dropout_in_a_hand_written_block(tmp_path):
    """F.scaled_dot_product_attention(dropout_p=...) with heads by
    unflatten/transpose compiles in training with fallback off; with
    dropout_p=0 in eval it matches each item alone."""
    torch._dynamo.reset()

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(16, 48)
            self.out = nn.Linear(16, 16)

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            q, k, v = (t.unflatten(-1, (4, -1)).transpose(1, 2) for t in (q, k, v))
            o = F.scaled_dot_product_attention(q, k, v, dropout_p=0.25 if self.training else 0.0)
            return self.out(o.transpose(1, 2).flatten(-2))

    torch.manual_seed(1)
    block = Block()
    run = torch.compile(
        block, backend="ragged", dynamic=True, fullgraph=True, options={"debug_dir": str(tmp_path)}
    )
    fallbacks = rb.stats["fallbacks"]
    x = NestedTensor(randn_items([6, 0, 11, 2], 16, seed=4), requires_grad=True)
    run(x).values.sum().backward()
    assert rb.stats["fallbacks"] == fallbacks
    assert all(torch.isfinite(p.grad).all() for p in block.parameters())
    texts = [(d / "ragged.mlir").read_text() for d in tmp_path.glob("*/")]
    assert any("dropout = 2.500000e-01" in t for t in texts)


def test_dropout_rate_out_of_range():
    q = torch.randn(4, 2, 8)
    off = torch.tensor([0, 4])
    with pytest.raises(ValueError, match=r"dropout_p must be in \[0, 1\), got 1.0"):
        torch.ops.ragged.attention(q, q, q, off, 0.5, False, 1.0, torch.tensor(1))
    with pytest.raises(ValueError, match="needs a seed"):
        torch.ops.ragged.attention(q, q, q, off, 0.5, False, 0.5, None)
    # Under compile the check runs when the graph is traced: no graph drops without a seed.
    torch._dynamo.reset()
    traced = torch.compile(
        lambda q, off: torch.ops.ragged.attention(q, q, q, off, 0.5, False, 0.5, None), backend="ragged"
    )
    with pytest.raises(Exception, match="needs a seed"):
        traced(q, off)
