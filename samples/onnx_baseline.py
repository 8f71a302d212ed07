"""ONNX Runtime as a CPU user serving BERT sentence embeddings runs it: the
Hugging Face model exported with ``torch.onnx``'s TorchScript exporter (the
graph that ``onnxruntime.transformers``' BERT fusions match), fused by
``onnxruntime.transformers.optimizer`` (Attention, SkipLayerNormalization,
BiasGelu, EmbedLayerNormalization), run with a fixed number of intra-op
threads, on the padded batch or on length-sorted buckets each padded to its
own longest item (what sentence-transformers' ``encode()`` does).

``samples/minilm_embeddings.py`` compares ragged-mlir with it, and
``bench/unpad.py`` and the harness's W4 run it as a peer. Needs ``onnx`` and
``onnxruntime`` (the ``torch`` extra installs both).
"""

from __future__ import annotations

import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch

#: Buckets of the length-sorted form (bench/workloads.py's bucketed peer uses as many).
BUCKETS = 4


def unavailable() -> str | None:
    """Why ONNX Runtime cannot run here, or None."""
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except Exception as e:  # pragma: no cover - depends on the environment
        return f"onnxruntime not installed ({type(e).__name__}: {e})"
    return None


class _Hidden(torch.nn.Module):
    """What is exported: the last hidden state from token ids and the 0/1
    mask (the whole model), or from hidden states and the mask (the encoder
    alone, for a model of random weights fed hidden states)."""

    def __init__(self, model, encoder_only: bool):
        super().__init__()
        self.model, self.encoder_only = model, encoder_only

    def forward(self, first, mask):
        if not self.encoder_only:
            return self.model(input_ids=first, attention_mask=mask).last_hidden_state
        # The mask the whole model builds, so that the Attention fusion matches.
        full = self.model._create_attention_masks(
            attention_mask=mask,
            encoder_attention_mask=None,
            embedding_output=first,
            encoder_hidden_states=None,
            past_key_values=None,
        )[0]
        return self.model.encoder(first, attention_mask=full).last_hidden_state


class OrtBert:
    """An ONNX Runtime session over a Hugging Face ``BertModel`` (eager
    attention, so that the exported graph holds the pattern the fusions
    match). ``fused=False`` keeps ORT's own graph optimisations only.
    ``encoder_only`` exports the encoder fed hidden states ``[B, L, d]``."""

    def __init__(self, model, *, encoder_only: bool = False, fused: bool = True, threads: int = 2):
        import onnxruntime as ort

        cfg = model.config
        self.hidden_size = cfg.hidden_size
        if encoder_only:
            first = torch.randn(2, 16, cfg.hidden_size)
        else:
            first = torch.randint(1000, 2000, (2, 16))
        mask = torch.ones(2, 16, dtype=torch.int64)
        axes = {0: "batch", 1: "length"}
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "model.onnx"
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the tracer's notes on Python control flow
                torch.onnx.export(
                    _Hidden(model.eval(), encoder_only),
                    (first, mask),
                    str(path),
                    input_names=["first", "mask"],
                    output_names=["hidden"],
                    dynamic_axes={"first": axes, "mask": axes, "hidden": axes},
                    opset_version=17,
                    dynamo=False,
                )
            if fused:
                from onnxruntime.transformers.optimizer import optimize_model

                opt = optimize_model(
                    str(path),
                    model_type="bert",
                    num_heads=cfg.num_attention_heads,
                    hidden_size=cfg.hidden_size,
                    opt_level=0,
                )
                self.fusions = {k: n for k, n in opt.get_fused_operator_statistics().items() if n}
                opt.save_model_to_file(str(path))
            else:
                self.fusions = {}
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])

    def __call__(self, first: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The last hidden state ``[B, L, d]`` of one padded batch."""
        return self.session.run(None, {"first": first, "mask": mask})[0]


def length_sorted_buckets(first: np.ndarray, mask: np.ndarray, n: int = BUCKETS):
    """The padded batch ``first`` ``[B, L, ...]`` with its 0/1 ``mask`` ``[B, L]``
    as up to ``n`` length-sorted buckets of ceil(B / n) items (as
    bench/workloads.py's bucketed peer splits), each padded to its own
    longest item: ``[(item indices, first, mask)]``."""
    lengths = mask.sum(1)
    order = np.argsort(lengths, kind="stable")
    size = max(-(-len(order) // n), 1)
    out = []
    for start in range(0, len(order), size):
        idx = order[start : start + size]
        longest = max(int(lengths[idx].max()), 1)
        out.append(
            (idx, np.ascontiguousarray(first[idx, :longest]), np.ascontiguousarray(mask[idx, :longest]))
        )
    return out


def unbucket(buckets, outs) -> list[np.ndarray]:
    """The items' outputs in batch order from the buckets' (rows ``[L(b), ...]``
    where ``outs`` are per token, else one row per item)."""
    items: dict = {}
    for (idx, _, mask), out in zip(buckets, outs, strict=True):
        for j, b in enumerate(idx):
            items[int(b)] = out[j, : int(mask[j].sum())] if out.ndim == 3 else out[j]
    return [items[b] for b in range(len(items))]


def sentence_embeddings(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Masked mean pooling of ``hidden`` ``[B, L, d]``, L2 normalised ``[B, d]``
    (sentence-transformers' pooling for all-MiniLM-L6-v2)."""
    pooled = (hidden * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    return pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
