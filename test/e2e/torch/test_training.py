"""Training through the compiler: forward and backward graphs of ragged
models compile with fallback off (conftest) and in one graph each
(``fullgraph=True``), the backward graph holds ``ragged.attention_grad``,
and parameter and input gradients equal an fp64 reference that runs each
item alone through the same module in eager mode.

Models as users write them: torch's ``nn.TransformerEncoderLayer``, and a
hand-written block (fused qkv, ``chunk``, heads by
``unflatten``/``transpose``, ``F.scaled_dot_product_attention``, causal)
with mean pooling and a classification head, trained for a few AdamW
steps.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch_helpers import ragged_compile  # noqa: E402
from torch_helpers import randn_items_fp64 as items  # noqa: E402

from ragged_mlir.torch import NestedTensor  # noqa: E402
from ragged_mlir.torch import backend as rb  # noqa: E402

torch.set_num_threads(2)

LENGTHS = {
    "random": [5, 17, 3, 9, 12],
    "empty-items": [3, 0, 5, 0],
    "single": [7],
    "one-long": [1, 2, 60, 1],
    "all-equal": [6] * 4,
}
TOL = dict(atol=1e-4, rtol=1e-4)


def compiled(model, debug_dir: Path):
    return ragged_compile(model, fresh=False, debug_dir=str(debug_dir))


def backward_dirs(debug_dir: Path) -> list[Path]:
    """The dump folders of the backward graphs."""
    return [
        d for d in debug_dir.glob("*/") if (d / "fx_graph.txt").read_text().startswith("# backward graph")
    ]


def backward_graphs(debug_dir: Path) -> list[str]:
    return [(d / "fx_graph.txt").read_text() for d in backward_dirs(debug_dir)]


def reference_grads(model: nn.Module, xs, weights):
    """fp64 gradients of sum_b <model(x_b), w_b> w.r.t. the parameters and
    each item, every item run alone."""
    ref = copy.deepcopy(model).double()
    inputs = [x.double().requires_grad_() for x in xs]
    loss = sum((ref(x[None])[0] * w.double()).sum() for x, w in zip(inputs, weights, strict=True) if len(x))
    params = list(ref.parameters())
    grads = torch.autograd.grad(loss, params + inputs, allow_unused=True, materialize_grads=True)
    return grads[: len(params)], grads[len(params) :]


@pytest.fixture(scope="module")
def encoder_layer():
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)


@pytest.fixture(scope="module")
def encoder_run(encoder_layer, tmp_path_factory):
    """One compiled layer for every length set (dynamic shapes: no recompile)."""
    torch._dynamo.reset()
    debug = tmp_path_factory.mktemp("encoder")
    return compiled(encoder_layer, debug), debug


@pytest.mark.parametrize("case", list(LENGTHS))
def test_transformer_encoder_layer_gradients(encoder_layer, encoder_run, case):
    run, debug = encoder_run
    xs = items(LENGTHS[case], 16, seed=1)
    weights = items(LENGTHS[case], 16, seed=2)
    fallbacks = rb.stats["fallbacks"]
    x = NestedTensor(xs, requires_grad=True)
    encoder_layer.zero_grad()
    out = run(x)
    (out.values * torch.cat(weights)).sum().backward()
    assert rb.stats["fallbacks"] == fallbacks
    want_params, want_inputs = reference_grads(encoder_layer, xs, weights)
    for (name, p), want in zip(encoder_layer.named_parameters(), want_params, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), want.numpy(), err_msg=name, **TOL)
    for b, (got, want) in enumerate(zip(x.grad.unbind(), want_inputs, strict=True)):
        np.testing.assert_allclose(got.numpy(), want.numpy(), err_msg=f"input item {b}", **TOL)
    graphs = backward_graphs(debug)
    assert graphs and all("ragged.attention_backward" in g for g in graphs)
    # The gradient reads the forward's output and lse: no reductions over key pairs.
    for d in backward_dirs(debug):
        ragged_ir = (d / "ragged.mlir").read_text()
        assert re.search(r"ragged\.attention_grad .* output\(.* lse\(", ragged_ir), d


def test_all_empty_batch_trains(tmp_path):
    """A batch whose items are all empty: Dynamo specialises its row count
    to 0, and the compiler must not divide by it (torch-mlir's view shape
    inference and IREE's dispatch formation did, killing the process or
    the compile). The step compiles with no work, its gradients are zero,
    and the next batch still matches the reference."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    torch._dynamo.reset()
    run = compiled(layer, tmp_path)
    fallbacks = rb.stats["fallbacks"]
    for lengths in ([0, 0, 0], [0], [4, 0, 2]):
        xs = items(lengths, 16, seed=1)
        weights = items(lengths, 16, seed=2)
        x = NestedTensor(xs, requires_grad=True)
        layer.zero_grad()
        out = run(x)
        assert [len(t) for t in out.unbind()] == lengths
        (out.values * torch.cat(weights)).sum().backward()
        if not any(lengths):
            for name, p in layer.named_parameters():
                assert p.grad is None or not p.grad.any(), name
            continue
        want_params, _ = reference_grads(layer, xs, weights)
        for (name, p), want in zip(layer.named_parameters(), want_params, strict=True):
            np.testing.assert_allclose(p.grad.numpy(), want.numpy(), err_msg=name, **TOL)
    assert rb.stats["fallbacks"] == fallbacks


def host_function(flow: str) -> str:
    """The host function ``@main`` of a module compiled to IREE's flow level:
    what runs between dispatches (the dispatched executables left out)."""
    lines = flow.splitlines()
    start = next(i for i, line in enumerate(lines) if re.search(r"util\.func public @main\(", line))
    depth, body = 0, []
    for line in lines[start:]:
        depth += line.count("{") - line.count("}")
        body.append(line)
        if depth == 0:
            break
    return "\n".join(body)


def test_training_graphs_have_a_fixed_dispatch_count(encoder_run):
    """The forward and backward modules run a fixed sequence of dispatches
    whatever the batch: their host code (at IREE's flow level) holds no loop
    and no branch, only dispatches, so B never changes how many run."""
    iree_compiler = pytest.importorskip("iree.compiler")
    run, debug = encoder_run
    x = NestedTensor(items([3, 1, 4], 16), requires_grad=True)
    run(x).values.sum().backward()
    kinds = []
    for graph in sorted(debug.glob("*/")):
        flags = (graph / "iree_flags.txt").read_text().split()
        flow = iree_compiler.compile_file(
            str(graph / "lowered.mlir"),
            target_backends=["llvm-cpu"],
            extra_args=["--compile-to=flow", "--iree-llvmcpu-target-cpu=host"]
            + [f for f in flags if f.startswith("--iree-opt")],
        )
        host = host_function(flow.decode() if isinstance(flow, bytes) else flow)
        kinds.append((graph / "fx_graph.txt").read_text().split("\n", 1)[0])
        assert re.search(r"flow\.dispatch @", host), kinds[-1]
        for construct in ("scf.for", "scf.while", "scf.if", "cf.br", "cf.cond_br"):
            assert construct not in host, f"{kinds[-1]}: host code holds {construct}"
    assert "# forward graph" in kinds and "# backward graph" in kinds, kinds


class Classifier(nn.Module):
    """A causal attention block written by hand, mean pooling, a head."""

    def __init__(self, d=16, heads=2, classes=3):
        super().__init__()
        self.heads = heads
        # No qkv bias: the key bias's true gradient is 0 (softmax ignores a
        # per-query constant), and AdamW would turn its fp32 rounding noise
        # into full-size steps.
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.proj = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.head = nn.Linear(d, classes)

    def encode(self, x):
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).flatten(-2))
        return x + self.mlp(x)

    def forward(self, x):
        return self.head(self.encode(x).mean(dim=1))


def test_hand_written_block_trains_like_the_reference(tmp_path):
    """Five AdamW steps on fresh batches (the lengths change, the graphs do
    not): losses, gradients and parameters follow an fp64 reference that
    runs each item alone."""
    torch._dynamo.reset()
    torch.manual_seed(3)
    model = Classifier()
    reference = copy.deepcopy(model).double()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)

    run = compiled(model, tmp_path)
    fallbacks = rb.stats["fallbacks"]
    g = torch.Generator().manual_seed(4)
    for i, lengths in enumerate([[5, 1, 9], [3, 0, 7, 2], [12], [4, 4, 4, 4], [1, 2, 30]]):
        xs = items(lengths, 16, seed=10 + i)
        labels = torch.randint(0, 3, (len(lengths),), generator=g)
        opt.zero_grad()
        ref_opt.zero_grad()
        loss = F.cross_entropy(run(NestedTensor(xs)), labels)
        loss.backward()
        logits = torch.stack(
            [
                reference.head(reference.encode(x.double()[None])[0].mean(0))
                if len(x)
                else reference.head(torch.zeros(16, dtype=torch.float64))
                for x in xs
            ]
        )
        ref_loss = F.cross_entropy(logits, labels)
        ref_loss.backward()
        np.testing.assert_allclose(loss.item(), ref_loss.item(), **TOL)
        for (name, p), r in zip(model.named_parameters(), reference.parameters(), strict=True):
            np.testing.assert_allclose(p.grad.numpy(), r.grad.numpy(), err_msg=f"step {i}: {name}", **TOL)
        opt.step()
        ref_opt.step()
    for (name, p), r in zip(model.named_parameters(), reference.parameters(), strict=True):
        np.testing.assert_allclose(p.detach().numpy(), r.detach().numpy(), err_msg=name, **TOL)
    assert rb.stats["fallbacks"] == fallbacks
    graphs = backward_graphs(tmp_path)
    # The mean pooling's gradient is a segment broadcast, the attention's
    # ragged.attention_grad: no per-row indexing or scatter in the graph.
    for op in ("ragged.attention_backward", "ragged.segment_broadcast"):
        assert graphs and all(op in g for g in graphs), op
    assert not any("aten.index" in g or "scatter" in g for g in graphs)


@pytest.mark.parametrize("width,hidden", [(128, 1024), (384, 1536)])
def test_wide_layers_train_on_packed_gemms(tmp_path, width, hidden):
    """Training graphs keep IREE's data tiling: a layer norm feeding a wide
    projection, a GELU whose input the backward keeps, and weight gradients
    summed over more tokens than one K chunk (256 rows: the chunked GEMMs of
    ragged-split-dynamic-contractions, then their sum) give the fp64
    per-item gradients."""
    torch._dynamo.reset()
    torch.manual_seed(5)
    model = nn.Sequential(
        nn.LayerNorm(width),
        nn.Linear(width, hidden),
        nn.GELU(),
        nn.Linear(hidden, width),
        nn.LayerNorm(width),
    )
    lengths = [300, 0, 1, 17]
    xs, weights = items(lengths, width, seed=6), items(lengths, width, seed=7)
    fallbacks = rb.stats["fallbacks"]
    out = compiled(model, tmp_path)(NestedTensor(xs))
    (out.values * torch.cat(weights)).sum().backward()
    assert rb.stats["fallbacks"] == fallbacks
    want, _ = reference_grads(model, xs, weights)
    for (name, p), w in zip(model.named_parameters(), want, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), w.numpy(), err_msg=name, atol=1e-3, rtol=1e-4)
    backward = backward_dirs(tmp_path)
    assert backward
    for graph in backward:
        assert "data-tiling=false" not in (graph / "iree_flags.txt").read_text()
        assert re.search(r"tensor<\?x256x\d+xf32>", (graph / "lowered.mlir").read_text())
