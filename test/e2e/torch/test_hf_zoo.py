"""A model zoo: twelve Hugging Face architectures as they ship (tiny configs,
random weights, nothing downloaded), called as users call them,
``model(input_ids=ids, attention_mask=mask)``, under
``torch.compile(model, backend="ragged")``.

For each architecture and attention implementation (``sdpa`` and the
written-out ``eager`` where it has both):

* default options, ``dynamic=True``: zero fallbacks (conftest turns fallback
  off), equal to eager at the valid positions (the pooler and a decoder's
  key-value cache included), and no recompile on a second batch of another
  batch size and length; decoders also on left padding;
* default options without ``dynamic=True``: the first graph compiles;
* ``unpad=True``: unpadding applies to the architectures the docs say it
  does (the others keep their documented reason), and the unpadded model
  equals eager at the valid positions.

The architectures are in ``bench/hf_models.py``, shared with the
benchmark (``bench/hf_zoo.py``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "bench"))
from hf_models import ARCHITECTURES, TINY, build, padded_batch  # noqa: E402

from ragged_mlir.torch import backend as rb  # noqa: E402

torch.set_num_threads(2)

#: (lengths, padded length): the second batch has another batch size and
#: length, an item with one token, and padding beyond its longest item.
BATCHES = [([5, 2, 9, 1], 9), ([3, 7, 4], 11)]

CASES = [(a.name, attn) for a in ARCHITECTURES.values() for attn in a.attention]

pytestmark = pytest.mark.usefixtures("fresh_dynamo_no_grad")


def _compare(out, ref, mask, arch, exact_pads: bool) -> None:
    """``out`` equals ``ref`` at the valid positions (everywhere with
    ``exact_pads``): hidden states, the pooler, a decoder's cache."""
    valid = mask.bool()
    tol = {"rtol": 1e-4, "atol": 1e-5}
    if exact_pads:
        torch.testing.assert_close(out.last_hidden_state, ref.last_hidden_state, **tol)
    else:
        torch.testing.assert_close(out.last_hidden_state[valid], ref.last_hidden_state[valid], **tol)
    if arch.pooler:
        torch.testing.assert_close(out.pooler_output, ref.pooler_output, **tol)
    cache = getattr(ref, "past_key_values", None)
    if arch.decoder and cache is not None:
        for got, want in zip(out.past_key_values.layers, cache.layers, strict=True):
            for g, w in ((got.keys, want.keys), (got.values, want.values)):
                # [B, heads, L, d]: compare the valid positions.
                pick = valid[:, None, :, None].expand_as(w)
                torch.testing.assert_close(g[pick], w[pick], **tol)


def _layouts(arch) -> list[bool]:
    return [False, True] if arch.decoder else [False]


@pytest.mark.parametrize(("name", "attention"), CASES)
def test_zoo_default_options(name, attention):
    arch = ARCHITECTURES[name]
    model = build(arch, TINY, attention)
    run = torch.compile(model, backend="ragged", dynamic=True)
    before = dict(rb.stats)
    frames = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for left in _layouts(arch):
        for seed, (lengths, length) in enumerate(BATCHES):
            ids, mask = padded_batch(lengths, length, vocab=TINY.vocab, pad=arch.pad, left=left, seed=seed)
            out = run(input_ids=ids, attention_mask=mask)
            _compare(out, model(input_ids=ids, attention_mask=mask), mask, arch, exact_pads=True)
    assert rb.stats["fallbacks"] == before["fallbacks"]
    assert rb.stats["fallback_calls"] == before["fallback_calls"]
    # One graph for every batch (a graph identical to an earlier test's is a cache hit).
    assert rb.stats["compiled"] + rb.stats["cache_hits"] - before["compiled"] - before["cache_hits"] == 1
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - frames == 1


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_zoo_static_shapes(name):
    """Without ``dynamic=True`` the first graph is static (Dynamo
    specialises every size); it compiles too."""
    arch = ARCHITECTURES[name]
    model = build(arch, TINY, arch.attention[0])
    run = torch.compile(model, backend="ragged")
    ids, mask = padded_batch(*BATCHES[0], vocab=TINY.vocab, pad=arch.pad)
    before = rb.stats["fallbacks"]
    _compare(
        run(input_ids=ids, attention_mask=mask), model(input_ids=ids, attention_mask=mask), mask, arch, True
    )
    assert rb.stats["fallbacks"] == before


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_zoo_unpadded(name):
    """``unpad=True``: the model runs on its valid tokens where the analysis
    proves it safe, and says why not elsewhere."""
    arch = ARCHITECTURES[name]
    model = build(arch, TINY, arch.attention[0])
    run = torch.compile(model, backend="ragged", dynamic=True, options={"unpad": True})
    before, refusals = dict(rb.stats), len(rb.unpad_refusals)
    for left in _layouts(arch):
        for seed, (lengths, length) in enumerate(BATCHES):
            ids, mask = padded_batch(lengths, length, vocab=TINY.vocab, pad=arch.pad, left=left, seed=seed)
            out = run(input_ids=ids, attention_mask=mask)
            _compare(out, model(input_ids=ids, attention_mask=mask), mask, arch, exact_pads=False)
    unpadded = rb.stats["unpadded"] - before["unpadded"]
    reasons = rb.unpad_refusals[refusals:]
    if arch.unpad_refusal is None:
        assert unpadded == 1, reasons
    else:
        assert unpadded == 0 and any(arch.refused_by in r for r in reasons), reasons
    assert rb.stats["fallbacks"] == before["fallbacks"]
