"""The torch peers of the GPU check (bench/gpu/peers.py) on the CPU: every
peer this torch can run gives the float64 reference's result on small ragged
batches (empty items, one item, all lengths equal, all items empty), causal
attention included; a peer it cannot run is skipped with a reason rather than
raising; and the caller's arrays are left as they were.

FlexAttention runs eagerly here except in one test of the compiled path: a
CPU compile takes seconds, the GPU machine's runner compiles every peer (once
per configuration, which that test checks: batches of other shapes reuse it).
"""

from __future__ import annotations

import copy
import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench" / "gpu"))

import peers as gp  # noqa: E402

torch.set_num_threads(2)

H, HEAD_DIM, SCALE = 2, 8, 0.3
D, FF, HEADS, LAYERS = 16, 32, 2, 2
LENGTHS = {
    "mixed-empty": [3, 0, 5, 1],
    "all-equal": [4, 4, 4],
    "single": [7],
    "all-empty": [0, 0],
}
ATTENTION_NAMES = {
    "padded SDPA",
    "padded flash SDPA (no mask)",
    "NJT SDPA",
    "FlexAttention packed",
    "varlen_attn",
}
ENCODER_NAMES = {"padded eager", "NJT eager", "FlexAttention packed", "varlen_attn packed", "inductor padded"}
#: Wrong for ragged batches by design: checked only where no mask is needed.
NO_MASK = "padded flash SDPA (no mask)"


def offsets_of(lens):
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)


def attention_inputs(lens, seed=0):
    rng = np.random.default_rng(seed)
    n = sum(lens)
    return [rng.standard_normal((n, H, HEAD_DIM)).astype(np.float32) for _ in range(3)]


def encoder_inputs(lens, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((sum(lens), D)).astype(np.float32)
    shapes = [(D, D)] * 4 + [(D,)] * 2 + [(D, FF), (FF, D)] + [(D,)] * 2
    layers = []
    for _ in range(LAYERS):
        layer = [rng.standard_normal(s).astype(np.float32) / math.sqrt(s[0]) for s in shapes]
        for i in (4, 8):  # layer-norm gains near 1
            layer[i] += 1
        layers.append(layer)
    return x, layers


def assert_close(got, ref, what):
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    assert got.dtype == np.float64, what
    atol = 1e-4 * max(1.0, float(np.abs(ref).max(initial=0.0)))
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=atol, err_msg=what)


def check_skipped(skipped, names):
    assert set(skipped) <= names
    for name, why in skipped.items():
        assert isinstance(why, str) and why.strip() and "\n" not in why, (name, why)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("lens", list(LENGTHS.values()), ids=list(LENGTHS))
def test_attention_peers(lens, causal):
    q, k, v = attention_inputs(lens)
    offsets = offsets_of(lens)
    before = copy.deepcopy((q, k, v, offsets))
    peers, skipped = gp.attention_peers(
        q, k, v, offsets, scale=SCALE, causal=causal, dtype="f32", device="cpu", compile=False
    )
    names = [p.name for p in peers]
    assert set(names) | set(skipped) == ATTENTION_NAMES and not set(names) & set(skipped)
    check_skipped(skipped, ATTENTION_NAMES)
    # The plain padded SDPA runs on every torch and every batch.
    assert "padded SDPA" in names
    ref = gp.ref_attention_f64(q, k, v, offsets, SCALE, causal)
    equal = len(set(lens)) == 1
    for peer in peers:
        got = peer.packed(peer.run())
        if peer.name == NO_MASK:
            assert peer.flops_note
            if not equal:
                assert got.shape == ref.shape
                continue
        assert_close(got, ref, f"{peer.name}, lengths {lens}, causal {causal}")
    if equal and sum(lens):
        assert NO_MASK in names, skipped.get(NO_MASK)
    for a, b in zip((q, k, v, offsets), before, strict=True):
        np.testing.assert_array_equal(a, b)


def test_attention_f16_runs():
    """Half precision: the peers that run agree with the reference at f16's
    precision (scores and sums round to 11 bits)."""
    lens = [3, 0, 5, 1]
    q, k, v = (a.astype(np.float16) for a in attention_inputs(lens))
    offsets = offsets_of(lens)
    peers, skipped = gp.attention_peers(
        q, k, v, offsets, scale=SCALE, dtype="f16", device="cpu", compile=False
    )
    check_skipped(skipped, ATTENTION_NAMES)
    ref = gp.ref_attention_f64(q, k, v, offsets, SCALE)
    for peer in peers:
        if peer.name != NO_MASK:
            np.testing.assert_allclose(peer.packed(peer.run()), ref, atol=5e-3, err_msg=peer.name)


@pytest.mark.parametrize("lens", list(LENGTHS.values()), ids=list(LENGTHS))
def test_encoder_peers(lens):
    x, layers = encoder_inputs(lens)
    offsets = offsets_of(lens)
    before = copy.deepcopy((x, offsets, layers))
    peers, skipped = gp.encoder_peers(
        x, offsets, layers, heads=HEADS, dtype="f32", device="cpu", compile=False
    )
    names = [p.name for p in peers]
    assert set(names) | set(skipped) == ENCODER_NAMES and not set(names) & set(skipped)
    check_skipped(skipped, ENCODER_NAMES)
    assert "padded eager" in names
    assert "inductor padded" in skipped  # compile=False
    y_ref, pooled_ref = gp.ref_encoder_f64(x, offsets, layers, HEADS)
    for peer in peers:
        out = peer.run()
        what = f"{peer.name}, lengths {lens}"
        assert_close(peer.packed(out), y_ref, what)
        # run() returns (y in the peer's layout, pooled [B, D] dense).
        assert_close(out[1].double().numpy(), pooled_ref, f"{what}: pooled")
    np.testing.assert_array_equal(x, before[0])
    np.testing.assert_array_equal(offsets, before[1])
    for layer, saved in zip(layers, before[2], strict=True):
        for p, s in zip(layer, saved, strict=True):
            np.testing.assert_array_equal(p, s)


def test_flex_attention_compiled():
    """The compiled FlexAttention peer (the one the GPU runner times): built,
    compiled and warmed before it is returned, and right; and compiled once
    per configuration, not per batch: batches of other lengths, B and packed
    sizes (BlockMask blocks) reuse the code compiled for the first one."""
    from torch._dynamo.utils import counters

    graphs = []
    for seed, lens in enumerate([[3, 0, 5, 1], [100, 50, 120, 40, 70, 20], [200, 30, 100]]):
        q, k, v = attention_inputs(lens, seed=2 + seed)
        offsets = offsets_of(lens)
        peers, skipped = gp.attention_peers(
            q, k, v, offsets, scale=SCALE, causal=True, dtype="f32", device="cpu", compile=True
        )
        graphs.append(counters["stats"]["unique_graphs"])
        flex = {p.name: p for p in peers}.get("FlexAttention packed")
        assert flex is not None, skipped.get("FlexAttention packed")
        ref = gp.ref_attention_f64(q, k, v, offsets, SCALE, True)
        assert_close(flex.packed(flex.run()), ref, f"compiled FlexAttention, lengths {lens}")
    assert graphs[1:] == graphs[:1] * 2, f"recompiled for a new batch: graphs after each batch {graphs}"


def test_references_per_item():
    """The references treat each item alone: a batch's result is its items'
    results one after another."""
    lens = [3, 0, 5]
    q, k, v = attention_inputs(lens, seed=3)
    offsets = offsets_of(lens)
    whole = gp.ref_attention_f64(q, k, v, offsets, SCALE, True)
    tail = gp.ref_attention_f64(q[3:], k[3:], v[3:], [0, 0, 5], SCALE, True)
    np.testing.assert_array_equal(whole[3:], tail)
    x, layers = encoder_inputs(lens)
    y, pooled = gp.ref_encoder_f64(x, offsets, layers, HEADS)
    y1, pooled1 = gp.ref_encoder_f64(x[:3], [0, 3], layers, HEADS)
    np.testing.assert_allclose(y[:3], y1, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(pooled[0], pooled1[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(pooled[1], 0)


def test_gemm_peak_flops_and_devices():
    tf32 = torch.backends.cuda.matmul.allow_tf32
    flops = gp.gemm_peak_flops("cpu", "f32", n=256)
    assert math.isfinite(flops) and flops > 0
    assert torch.backends.cuda.matmul.allow_tf32 == tf32
    assert gp.torch_device("local-task") == "cpu"
    assert gp.torch_device("cuda") == ("cuda" if torch.cuda.is_available() else "cpu")
    gp.sync("cpu")


def test_bad_inputs_raise():
    q, k, v = attention_inputs([2, 3])
    with pytest.raises(ValueError, match="offsets"):
        gp.attention_peers(q, k, v, [0, 2, 4], scale=SCALE, dtype="f32", device="cpu", compile=False)
    with pytest.raises(ValueError, match="dtype"):
        gp.attention_peers(q, k, v, [0, 2, 5], scale=SCALE, dtype="f8", device="cpu", compile=False)


TRAIN = dict(d_model=16, heads=2, ff=32, layers=2, classes=3)
TRAINING_NAMES = {"padded eager", "NJT eager", "inductor padded", "FlexAttention packed"}


@pytest.mark.parametrize("lens", [[3, 5, 1, 4], [3, 0, 5, 1]], ids=["mixed", "empty-item"])
def test_training_peers(lens):
    """One training step without the optimizer: every peer that runs here
    gives the float64 loss of the same model on the same batch, and leaves a
    finite gradient in every parameter of its own copy of the model.
    (Compiled peers are not built here: inductor compiles the padded step's
    forward and backward in 12 to 19 s on two cold cores.)"""
    peers, skipped = gp.training_peers(lens, **TRAIN, dtype="f32", device="cpu", compile=False)
    names = [p.name for p in peers]
    assert set(names) | set(skipped) == TRAINING_NAMES and not set(names) & set(skipped)
    check_skipped(skipped, TRAINING_NAMES)
    assert "padded eager" in names
    assert skipped["inductor padded"] == "compile=False"
    model = gp.training_model(**TRAIN)
    x, offsets, labels = gp.training_inputs(lens, d_model=TRAIN["d_model"], classes=TRAIN["classes"])
    np.testing.assert_array_equal(offsets, offsets_of(lens))
    np.testing.assert_array_equal(labels.numpy(), np.arange(len(lens)) % TRAIN["classes"])
    ref = gp.ref_training_loss_f64(model, x, offsets, labels)
    assert math.isfinite(ref)
    weights = model.state_dict()
    for peer in peers:
        # The same weights, and a step leaves them as they were (no optimizer).
        for key, w in peer.model.state_dict().items():
            torch.testing.assert_close(w, weights[key], rtol=0, atol=0, msg=f"{peer.name}: {key}")
        for p in peer.model.parameters():
            p.grad = torch.full_like(p, math.nan)  # run() must set the grads afresh
        out = peer.run()
        assert isinstance(out, torch.Tensor) and out.dim() == 0 and not out.requires_grad, peer.name
        got = peer.packed(out)
        assert got.shape == (1,) and got.dtype == np.float64, peer.name
        assert abs(got[0] - ref) <= 1e-4 * abs(ref), (peer.name, got[0], ref)
        for pname, p in peer.model.named_parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all(), f"{peer.name}: {pname}"


def test_training_forwards_agree():
    """The written-out forwards of the NJT and FlexAttention training peers
    (whose backward fails on this torch's CPU) give the padded model's
    logits: the GPU runner's losses then differ only where the kernels do."""
    lens = [3, 5, 1, 4]
    model = gp.training_model(**TRAIN)
    x, offsets, _ = gp.training_inputs(lens, d_model=TRAIN["d_model"], classes=TRAIN["classes"])
    rows = gp._Rows(offsets, x.shape[0], "cpu")
    # Eager flex_attention warns that it is meant to be compiled.
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = model(rows.pad(x), ~rows.key_valid())
        njt = gp._njt_classifier(model, rows.nested(x))
        block_mask = gp._document_block_mask(rows, causal=False)
        flex = gp._flex_classifier(
            model,
            rows.flex_pad(x).unsqueeze(0),
            block_mask,
            rows.flex_docs(),
            rows.inv_lengths(torch.float32),
        )
    torch.testing.assert_close(njt, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(flex, want, rtol=1e-5, atol=1e-5)
