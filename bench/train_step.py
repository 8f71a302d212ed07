"""W6, first form: one training step (forward, backward, AdamW) of
torch's ``nn.TransformerEncoderLayer`` in the MiniLM shape (d 384, 12
heads, FF 1536, GELU), mean pooling and a 3-way classification head, on
batches drawn from the vendored length histograms.

Every variant holds its own copy of the same weights and its own AdamW;
they run in one process, interleaved (A B C ... A B C ...), and the median
step time of each is printed with its ratio to ragged-mlir and its
roofline attainment: useful training FLOPs (3x the forward's on the real
tokens) per second over the fp32 GEMM peak ``torch.mm`` reaches in the same
process. Variants:

* ``padded``: eager on the batch padded to its longest item, with
  ``src_key_padding_mask`` and masked mean pooling;
* ``buckets``: the same on 4 length-sorted buckets;
* ``per_item``: eager, one item at a time, one loss over the batch;
* ``inductor``: ``padded`` under ``torch.compile`` (inductor, forward and
  backward);
* ``nested_eager``: the same model on a ragged-mlir NestedTensor, eager;
* ``danling``: the same layers written out on DanLing's NestedTensor,
  eager (when ``danling`` is installed);
* ``njt``: the same on PyTorch's nested tensors (jagged layout), eager.
  In torch 2.13 on CPU the backward of its mean pooling fails ("SymIntArrayRef
  expected to contain only concrete integers"); a peer whose first step
  fails is reported under ``failed`` and left out;
* ``ragged_mlir``: ``torch.compile(backend="ragged", dynamic=True,
  fullgraph=True)`` on the NestedTensor (forward and backward compiled;
  a fallback fails the run).

``--dropout p`` sets every dropout of the layers (``nn.TransformerEncoderLayer``'s
default is 0.1, attention included; the written-out layers drop at the same
places). The first step's loss of every variant is printed against ``padded``
(same weights, same batch; with dropout they differ by the draws). After timing, ragged-mlir trains one step on each of
20 fresh length draws and the graphs traced again are counted (0 expected).
``page_faults_per_step`` gives each variant's median minor page faults in a
timed step: memory mapped afresh, which costs about 2.4 us a page on a
virtual machine. Benchmarks are not tests: nothing asserts a time.

    python bench/train_step.py --datasets mnli squadv2 race --layers 1 6
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("RAGGED_FALLBACK", "0")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import gemm_peak_gflops, measured_call, setup  # noqa: E402
from lengths import sample_lengths  # noqa: E402
from workloads import BUCKETS, FF, D, layer_flops  # noqa: E402

from ragged_mlir.torch import NestedTensor  # noqa: E402
from ragged_mlir.torch import backend as ragged_backend  # noqa: E402

try:  # DanLing is optional (pip install danling==0.4.8)
    from danling import NestedTensor as DanlingNT
except ImportError:  # pragma: no cover
    DanlingNT = None

HEADS, CLASSES = 12, 3
VARIANTS = ("padded", "inductor", "buckets", "per_item", "nested_eager", "danling", "njt", "ragged_mlir")
#: Fresh length draws after timing, each one step: compiles counted.
DRAWS = 20
#: Batch size per dataset (as W4).
BATCH = {"mnli": 32, "squadv2": 8, "race": 8}


class Classifier(nn.Module):
    def __init__(self, layers: int, dropout: float = 0.0):
        super().__init__()
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(D, HEADS, FF, dropout=dropout, activation="gelu", batch_first=True)
            for _ in range(layers)
        )
        self.head = nn.Linear(D, CLASSES)

    def forward(self, x, padding=None):
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=padding)
        if padding is None:
            return self.head(x.mean(dim=1))
        keep = (~padding).unsqueeze(-1).to(x.dtype)
        return self.head((x * keep).sum(1) / keep.sum(1).clamp_min(1))


def nested_forward(m: Classifier, x):
    """``m``'s layers written out for a nested tensor type (DanLing's
    NestedTensor or NJT) with its own parameters: post-norm, GELU, as
    ``nn.TransformerEncoderLayer``, its dropouts included."""
    hd = D // HEADS
    for layer in m.layers:
        attn = layer.self_attn
        p = attn.dropout if m.training else 0.0
        q, k, v = (
            F.linear(x, w, b).unflatten(-1, (HEADS, hd)).transpose(1, 2)
            for w, b in zip(attn.in_proj_weight.chunk(3), attn.in_proj_bias.chunk(3), strict=True)
        )
        a = F.scaled_dot_product_attention(q, k, v, dropout_p=p).transpose(1, 2).flatten(-2)
        x = layer.norm1(x + layer.dropout1(attn.out_proj(a)))
        x = layer.norm2(x + layer.dropout2(layer.linear2(layer.dropout(F.gelu(layer.linear1(x))))))
    return m.head(x.mean(dim=1))


def padded(items):
    n = max(len(x) for x in items)
    x = torch.zeros(len(items), n, D)
    mask = torch.ones(len(items), n, dtype=torch.bool)
    for b, t in enumerate(items):
        x[b, : len(t)] = t
        mask[b, : len(t)] = False
    return x, mask


def variants(items, labels, model: Classifier, chosen=VARIANTS):
    """name -> (model copy, optimizer, forward returning the batch's logits)."""
    xp, mask = padded(items)
    order = sorted(range(len(items)), key=lambda b: len(items[b]))
    groups = [order[i::BUCKETS] for i in range(BUCKETS)]
    groups = [sorted(g, key=lambda b: len(items[b])) for g in groups if g]
    bucketed = [(g, *padded([items[b] for b in g])) for g in groups]
    inverse = torch.argsort(torch.tensor([b for g, _, _ in bucketed for b in g]))
    nt = NestedTensor(items)

    dl = DanlingNT(items) if DanlingNT is not None else None
    njt = torch.nested.nested_tensor(items, layout=torch.jagged)

    def forwards(m):
        compiled = torch.compile(m, backend="ragged", dynamic=True, fullgraph=True)
        inductor = torch.compile(m)
        return {
            "padded": lambda: m(xp, mask),
            "inductor": lambda: inductor(xp, mask),
            "buckets": lambda: torch.cat([m(x, k) for _, x, k in bucketed])[inverse],
            "per_item": lambda: torch.cat([m(t[None]) for t in items]),
            "nested_eager": lambda: m(nt),
            "danling": lambda: nested_forward(m, dl),
            "njt": lambda: nested_forward(m, njt),
            "ragged_mlir": lambda: compiled(nt),
        }

    out = {}
    for name in forwards(model):
        if name not in chosen or (name == "danling" and dl is None):
            continue
        m = copy.deepcopy(model)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
        out[name] = (m, opt, forwards(m)[name])
    return out


def step(opt, forward, labels):
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(forward(), labels)
    loss.backward()
    opt.step()
    return loss.detach()


def batch(dataset: str, seed: int):
    lengths = [max(1, int(n)) for n in sample_lengths(dataset, BATCH.get(dataset, 8), seed=seed, max_len=512)]
    g = torch.Generator().manual_seed(seed)
    items = [torch.randn(n, D, generator=g) for n in lengths]
    return lengths, items, torch.randint(0, CLASSES, (len(items),), generator=g)


def run_case(
    dataset: str,
    layers: int,
    rounds: int,
    peak: float,
    seed: int = 0,
    chosen=VARIANTS,
    draws: int = DRAWS,
    dropout: float = 0.0,
) -> dict:
    lengths, items, labels = batch(dataset, seed)
    torch.manual_seed(seed)
    model = Classifier(layers, dropout)
    cases = variants(items, labels, model, chosen)
    rec = {
        "dataset": dataset,
        "layers": layers,
        "B": len(items),
        "tokens": sum(lengths),
        "max_len": max(lengths),
        "dropout": dropout,
    }
    rec["first_loss"], rec["first_call_s"], rec["peak_mem_mib"], times = {}, {}, {}, {}
    fallbacks = ragged_backend.stats["fallbacks"]
    rec["failed"] = {}
    for name, (_, opt, forward) in list(cases.items()):
        t = time.perf_counter()
        try:
            rec["first_loss"][name] = float(step(opt, forward, labels))
        except Exception as e:  # a peer that does not train here (NJT's backward on CPU)
            if name == "ragged_mlir":
                raise
            rec["failed"][name] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}"
            del cases[name]
            continue
        rec["first_call_s"][name] = round(time.perf_counter() - t, 2)
        _, _, mem = measured_call(lambda opt=opt, forward=forward: step(opt, forward, labels))
        rec["peak_mem_mib"][name] = None if mem is None else round(mem, 1)
        times[name] = []
    faults = {name: [] for name in times}
    for _ in range(rounds):
        for name, (_, opt, forward) in cases.items():
            # One untimed step first: it absorbs the switch from the previous
            # variant's runtime (common.settled_call).
            step(opt, forward, labels)
            f = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t = time.perf_counter()
            step(opt, forward, labels)
            times[name].append(time.perf_counter() - t)
            faults[name].append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f)
    if "ragged_mlir" in cases:
        # Fresh lengths at the same batch size: the compiled step must not compile again.
        m, opt, _ = cases["ragged_mlir"]
        compiled = torch.compile(m, backend="ragged", dynamic=True, fullgraph=True)
        stats = ragged_backend.stats
        before = stats["compiled"], stats["cache_hits"]
        for draw in range(1, draws + 1):
            _, fresh, fresh_labels = batch(dataset, seed + draw)
            step(opt, lambda fresh=fresh: compiled(NestedTensor(fresh)), fresh_labels)
        # A graph traced again counts, whether or not its IREE module was cached.
        rec["recompiles_over_draws"] = {
            "draws": draws,
            "graphs_traced": stats["compiled"] + stats["cache_hits"] - sum(before),
            "iree_compiles": stats["compiled"] - before[0],
        }
    assert ragged_backend.stats["fallbacks"] == fallbacks, "a graph fell back to eager"
    flops = 3 * layers * layer_flops(lengths)
    med = {name: statistics.median(ts) for name, ts in times.items()}
    rec["ms"] = {name: round(1e3 * t, 2) for name, t in med.items()}
    rec["speedup_of_ragged_mlir"] = {name: round(t / med["ragged_mlir"], 3) for name, t in med.items()}
    rec["attainment"] = {name: round(flops / t / 1e9 / peak, 3) for name, t in med.items()}
    # Pages the kernel mapped afresh during a timed step (minor faults): memory
    # that an allocator handed back and took again.
    rec["page_faults_per_step"] = {name: int(statistics.median(f)) for name, f in faults.items()}
    best = min((t, n) for n, t in med.items() if n != "ragged_mlir")
    rec["best_peer"], rec["ratio_to_best_peer"] = best[1], round(best[0] / med["ragged_mlir"], 3)
    rec["loss_diff_vs_padded"] = {
        name: abs(v - rec["first_loss"]["padded"]) for name, v in rec["first_loss"].items()
    }
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=["mnli", "squadv2", "race"])
    ap.add_argument("--layers", nargs="+", type=int, default=[1])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--draws", type=int, default=DRAWS, help="fresh length draws checked for recompiles")
    ap.add_argument(
        "--dropout",
        type=float,
        default=0.0,
        help="every dropout of the layers (attention included), as nn.TransformerEncoderLayer's default 0.1; "
        "the first losses then differ by the draws",
    )
    args = ap.parse_args(argv)
    if not {"padded", "ragged_mlir"} <= set(args.variants):
        ap.error("--variants must include padded and ragged_mlir (the reference and the subject)")
    setup(args.threads)
    peak = gemm_peak_gflops()
    print(json.dumps({"gemm_peak_gflops": round(peak, 1), "threads": args.threads}), flush=True)
    for layers in args.layers:
        for ds in args.datasets:
            rec = run_case(
                ds, layers, args.rounds, peak, chosen=args.variants, draws=args.draws, dropout=args.dropout
            )
            print(json.dumps(rec), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
