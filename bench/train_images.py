"""W8: one training step (forward, backward, AdamW) of a small CNN on a batch
of images of their own sizes, fp32, against PyTorch peers in one process.

The CNN, as users write it: conv 3x3 3->32 + ReLU, 2x2 max pool, conv 3x3/2
32->64 + ReLU, conv 3x3 64->64 + ReLU, global average pool, linear 64->10,
cross entropy. Images have sides drawn uniformly from ``[--min-side,
--max-side]`` (seeded). Every variant holds its own copy of the same weights
and its own AdamW; the variants run interleaved (A B C ... A B C ...) and the
median step time of each is printed with the best peer's time over ours
(> 1: ours faster) and roofline attainment: useful FLOPs (3x the forward's
convolution and linear MACs x 2, each image at its own size) per second over
the fp32 GEMM peak ``torch.mm`` reaches in this process. Variants:

* ``padded``: eager, the batch zero-padded to its largest height and width,
  the global pool averaging each image's own output extent (a mask);
* ``per_image``: eager, one image at a time, one loss over the batch;
* ``ragged_mlir``: ``torch.compile(backend="ragged", dynamic=True,
  fullgraph=True)`` on a NestedTensor of ``[3, H, W]`` images (forward and
  backward compiled; a fallback fails the run).

The first step's loss of every variant is printed against ``per_image``
(same weights, same batch). Benchmarks are not tests: nothing asserts a time.

    python bench/train_images.py --batch 16 --min-side 32 --max-side 128
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("RAGGED_FALLBACK", "0")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import gemm_peak_gflops, setup  # noqa: E402

from ragged_mlir.torch import NestedTensor  # noqa: E402
from ragged_mlir.torch import backend as ragged_backend  # noqa: E402

CLASSES = 10


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, padding=1)
        self.c2 = nn.Conv2d(32, 64, 3, stride=2, padding=1)
        self.c3 = nn.Conv2d(64, 64, 3, padding=1)
        self.fc = nn.Linear(64, CLASSES)

    def features(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        return F.relu(self.c3(F.relu(self.c2(x))))

    def forward(self, x):
        return self.fc(self.features(x).mean(dim=(2, 3)))


def out_side(n: int) -> int:
    """The side after the pool (2x2) and the stride-2 conv."""
    return (n // 2 - 1) // 2 + 1


def useful_flops(sizes) -> float:
    """3x (forward, backward) the forward's MACs x 2, each image at its own size."""
    total = 0
    for h, w in sizes:
        o, r = out_side(h), out_side(w)
        total += h * w * 9 * 3 * 32 + o * r * 9 * (32 * 64 + 64 * 64) + 64 * CLASSES
    return 3 * 2 * total


def padded_step(model, imgs, labels):
    hmax = max(i.shape[1] for i in imgs)
    wmax = max(i.shape[2] for i in imgs)
    x = imgs[0].new_zeros(len(imgs), 3, hmax, wmax)
    for k, i in enumerate(imgs):
        x[k, :, : i.shape[1], : i.shape[2]] = i
    y = model.features(x)
    mask = torch.zeros(len(imgs), 1, y.shape[2], y.shape[3])
    for k, i in enumerate(imgs):
        mask[k, :, : out_side(i.shape[1]), : out_side(i.shape[2])] = 1
    pooled = (y * mask).sum(dim=(2, 3)) / mask.sum(dim=(2, 3))
    return F.cross_entropy(model.fc(pooled), labels)


def per_image_step(model, imgs, labels):
    return F.cross_entropy(torch.cat([model(i[None]) for i in imgs]), labels)


def main(argv=None) -> int:
    setup()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--min-side", type=int, default=32)
    ap.add_argument("--max-side", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    g = torch.Generator().manual_seed(args.seed)
    sides = torch.randint(args.min_side, args.max_side + 1, (args.batch, 2), generator=g).tolist()
    imgs = [torch.randn(3, h, w, generator=g) for h, w in sides]
    labels = torch.randint(0, CLASSES, (args.batch,), generator=g)
    torch.manual_seed(args.seed)
    base = CNN()
    models = {k: copy.deepcopy(base) for k in ("padded", "per_image", "ragged_mlir")}
    compiled = torch.compile(models["ragged_mlir"], backend="ragged", dynamic=True, fullgraph=True)
    steps = {
        "padded": lambda: padded_step(models["padded"], imgs, labels),
        "per_image": lambda: per_image_step(models["per_image"], imgs, labels),
        "ragged_mlir": lambda: F.cross_entropy(compiled(NestedTensor(imgs)), labels),
    }
    opts = {k: torch.optim.AdamW(m.parameters(), lr=1e-3) for k, m in models.items()}

    def step(k):
        opts[k].zero_grad()
        loss = steps[k]()
        loss.backward()
        opts[k].step()
        return loss.item()

    t0 = time.perf_counter()
    first = {k: step(k) for k in steps}
    compile_s = time.perf_counter() - t0
    times = {k: [] for k in steps}
    order = list(steps)
    for r in range(args.rounds):
        for k in order[r % len(order) :] + order[: r % len(order)]:
            t = time.perf_counter()
            step(k)
            times[k].append(time.perf_counter() - t)
    peak = gemm_peak_gflops()
    flops = useful_flops(sides)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    best_peer = min(v for k, v in med.items() if k != "ragged_mlir")
    out = {
        "batch": args.batch,
        "sides": [args.min_side, args.max_side],
        "pixel_util": sum(h * w for h, w in sides)
        / (args.batch * max(h for h, _ in sides) * max(w for _, w in sides)),
        "ms": {k: round(v, 2) for k, v in med.items()},
        "ratio_to_best_peer": round(best_peer / med["ragged_mlir"], 3),
        "attainment": {k: round(flops / (v / 1e3) / 1e9 / peak, 3) for k, v in med.items()},
        "gemm_peak_gflops": round(peak, 1),
        "first_loss": {k: round(v, 6) for k, v in first.items()},
        "first_step_s_all_variants": round(compile_s, 1),
        "fallbacks": ragged_backend.stats["fallbacks"],
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
