"""Classify a batch of images of different sizes, each at its own size.

The images show horizontal stripes, vertical stripes or a flat colour (with
noise), at sizes drawn between ``--min-side`` and ``--max-side``. The network
is an ordinary PyTorch CNN whose weights are set by hand so that it really
classifies: a 3x3 convolution computes the horizontal and vertical
gradients of the grey image (Sobel), ReLU keeps both signs apart, a max pool
and a depthwise 3x3 stride-2 blur follow, ``nn.AdaptiveAvgPool2d(1)`` gives
each image's mean gradient energy per direction, and a linear head compares
them (stripes along x have their gradient along y).

Three ways to run it on the same batch:

* ``ragged-mlir``: the model on a ``NestedTensor`` of ``[3, H(b), W(b)]``
  images under ``torch.compile(backend="ragged")`` (``fullgraph=True``,
  fallback off): no padding anywhere;
* ``per image``: the model on every image alone (the reference);
* ``padded``: the batch padded with zeros to its largest image, as a
  detection or classification pipeline pads. The zero border adds edges
  that are not in the images, so padding costs time and can change answers.

It prints every image's size, label and predictions, the accuracy of each
way, how many padded predictions differ from the reference, and the time of
each way. It exits non-zero if the compiled logits leave the reference.

    python samples/classify_images.py [--batch 16] [--min-side 24] [--max-side 160]

Needs the ``torch`` extra.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

os.environ.setdefault("RAGGED_FALLBACK", "0")  # a graph that falls back to eager is an error

from ragged_mlir.torch import NestedTensor  # noqa: E402

CLASSES = ("horizontal stripes", "vertical stripes", "flat")


def make_images(batch: int, min_side: int, max_side: int, seed: int) -> tuple[list[torch.Tensor], list[int]]:
    """``batch`` images [3, H, W] of random sizes and classes, with noise."""
    g = torch.Generator().manual_seed(seed)
    images, labels = [], []
    for _ in range(batch):
        h, w = (int(torch.randint(min_side, max_side + 1, (1,), generator=g)) for _ in range(2))
        label = int(torch.randint(0, len(CLASSES), (1,), generator=g))
        period = int(torch.randint(4, 12, (1,), generator=g))
        colour = torch.rand(3, 1, 1, generator=g)
        if label == 0:  # stripes along x: the value changes with y
            pattern = ((torch.arange(h) // (period // 2)) % 2).float()[:, None].expand(h, w)
        elif label == 1:
            pattern = ((torch.arange(w) // (period // 2)) % 2).float()[None, :].expand(h, w)
        else:
            pattern = torch.zeros(h, w)
        img = colour * (0.4 + 0.6 * pattern) + 0.05 * torch.randn(3, h, w, generator=g)
        images.append(img)
        labels.append(label)
    return images, labels


class OrientationNet(nn.Module):
    """Sobel gradients -> ReLU -> max pool -> depthwise blur (stride 2) ->
    global average pool -> linear comparison of the two directions."""

    def __init__(self):
        super().__init__()
        self.edges = nn.Conv2d(3, 4, 3, padding=1, bias=False)
        self.pool = nn.MaxPool2d(2, 2, ceil_mode=True)
        self.blur = nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=4, bias=False)
        self.avg = nn.AdaptiveAvgPool2d(1)
        self.head = nn.Linear(4, len(CLASSES))
        sobel = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]) / 8
        grey = torch.full((3,), 1 / 3)
        with torch.no_grad():
            gx = grey[:, None, None] * sobel  # gradient along x: vertical stripes
            gy = grey[:, None, None] * sobel.T  # gradient along y: horizontal stripes
            self.edges.weight.copy_(torch.stack([gy, -gy, gx, -gx]))
            self.blur.weight.fill_(1 / 9)
            # energy_y = c0 + c1, energy_x = c2 + c3.
            # Stripes: one direction's energy exceeds the other's by far;
            # flat: both are the noise's, equal within a margin.
            self.head.weight.copy_(
                torch.tensor([[1.0, 1.0, -1.0, -1.0], [-1.0, -1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
            )
            self.head.bias.copy_(torch.tensor([0.0, 0.0, 0.012]))

    def forward(self, x):
        x = self.pool(F.relu(self.edges(x)))
        x = F.relu(self.blur(x))
        return self.head(torch.flatten(self.avg(x), 1))


def timed(fn, repeats: int) -> tuple[torch.Tensor, float]:
    out, times = None, []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return out, statistics.median(times) * 1e3


def padded_batch(images: list[torch.Tensor]) -> torch.Tensor:
    h = max(i.shape[1] for i in images)
    w = max(i.shape[2] for i in images)
    return torch.stack([F.pad(i, (0, w - i.shape[2], 0, h - i.shape[1])) for i in images])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--min-side", type=int, default=24)
    p.add_argument("--max-side", type=int, default=160)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    images, labels = make_images(args.batch, args.min_side, args.max_side, args.seed)
    model = OrientationNet().eval()
    compiled = torch.compile(model, backend="ragged", dynamic=True, fullgraph=True)

    with torch.no_grad():
        start = time.perf_counter()
        compiled(NestedTensor(*images))
        compile_s = time.perf_counter() - start
        ours, t_ours = timed(lambda: compiled(NestedTensor(*images)), args.repeats)
        ref, t_ref = timed(lambda: torch.cat([model(i[None]) for i in images]), args.repeats)
        padded, t_pad = timed(lambda: model(padded_batch(images)), args.repeats)

    pred = {name: out.argmax(1).tolist() for name, out in (("ours", ours), ("ref", ref), ("pad", padded))}
    print(f"{'image':>5} {'H x W':>9}  {'label':<19} {'ragged-mlir':<19} {'per image':<19} padded")
    for b, img in enumerate(images):
        row = [CLASSES[labels[b]]] + [CLASSES[pred[k][b]] for k in ("ours", "ref", "pad")]
        size = f"{img.shape[1]} x {img.shape[2]}"
        print(f"{b:>5} {size:>9}  " + " ".join(f"{r:<19}" for r in row).rstrip())

    def accuracy(k: str) -> float:
        return sum(int(a == b) for a, b in zip(pred[k], labels, strict=True)) / len(labels)

    pixels = sum(i.shape[1] * i.shape[2] for i in images)
    pad_pixels = padded_batch(images)[:, 0].numel()
    flips = sum(int(a != b) for a, b in zip(pred["pad"], pred["ref"], strict=True))
    err = (ours - ref).abs().max().item()
    print(
        f"\naccuracy: ragged-mlir {accuracy('ours'):.0%}, per image {accuracy('ref'):.0%}, padded {accuracy('pad'):.0%}"
    )
    print(f"padded predictions that differ from each image alone: {flips} of {len(images)}")
    print(f"max |ragged-mlir - per image| logit: {err:.2e}")
    print(f"real pixels: {pixels} of {pad_pixels} padded ({pixels / pad_pixels:.0%})")
    print(
        f"time (median of {args.repeats}, 2 threads): ragged-mlir {t_ours:.1f} ms, per image {t_ref:.1f} ms "
        f"({t_ref / t_ours:.2f}x), padded {t_pad:.1f} ms ({t_pad / t_ours:.2f}x); first call {compile_s:.1f} s"
    )
    if err > 1e-4:
        print("FAIL: the compiled logits leave the per-image reference", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
