"""W7: batches of images of their own sizes (multi-ragged ``[B, H(b), W(b), C]``)
through a ResNet-18 and through the front end of a patch-and-pack ViT, inference,
fp32, against PyTorch peers in the same process.

Networks (random weights, seeded):

* ``resnet18``: torchvision's ResNet-18 shape: stem 7x7/2 conv 64 + BN + ReLU +
  3x3/2 max pool; four stages of two basic blocks (64/128/256/512 channels,
  stride 2 and a 1x1/2 conv + BN downsample at the first block of stages 2-4);
  global average pool; fc 1000. Convolutions have no bias; BatchNorm is in eval
  mode, folded into a per-channel scale and shift applied after the conv
  (``torch.addcmul`` in the torch variants, one pass; ``x * scale + shift`` in
  ragged-mlir, which the compiler fuses).
* ``vit``: patch embedding (16x16/16 conv to d = 384, with bias), each image's
  own patch grid flattened to its own token sequence (no position embedding),
  one pre-norm transformer encoder layer over each image's own tokens (12
  heads of 32, FF 1536, exact GELU, biases), mean pooling over the tokens.

Variants (the first five are the peers):

* ``padded``: PyTorch eager, NCHW, zero padding to the largest image of the batch
  (the global average pool / token mean is masked to each image's own extent;
  the ViT's attention masks padded keys);
* ``padded32``: the same, padded to a multiple of 32 of the largest sides;
* ``per_image``: PyTorch eager, a Python loop over the images, no padding;
* ``inductor``: ``padded`` under ``torch.compile`` (inductor, static shapes,
  compiled once per case);
* ``danling``: DanLing's ``NestedTensor`` of ``[C, H, W]`` items, eager, when
  ``import danling`` works (a failure is listed under ``failed``);
* ``ragged_mlir``: the network written with ``ragged_mlir.builders`` on
  ``!ragged.tensor<?, [H], [W], 3, f32>``, compiled once per network with the
  weights frozen as IREE parameters (``compile(frozen=...)``); one module serves
  every batch.

A padded CNN's result for an image differs from the per-image one near the
padding border (the zeros enter the windows): expected. ragged-mlir is checked
against an fp64 per-image PyTorch reference (``max_rel_err`` = max |err| / max
|reference| of the logits); the peers' errors are printed for information.

Protocol: ``torch.set_num_threads(2)`` and 2 IREE workers (``common.setup``); per case
each variant's first call (compiles for ``inductor``; the peak memory of eager
variants), a second call for compiled ones (their peak memory), then ``--rounds``
rounds in a rotating order (A B C ..., B C ... A, ...); the median and the min
are reported. Metrics: ``ms`` (median), ``min_ms``, ``ratio_to_best_peer`` (best
peer's median / ours, > 1: ours faster; ``ratio_to_best_peer_min`` on the mins),
``attainment`` (useful FLOPs / time / the fp32 ``torch.mm`` peak measured
in this process; useful FLOPs = 2 x MACs of the convolutions, linears and
attention of each image at its own size, summed), ``peak_mem_mib``
(``harness.measured_call``: VmHWM delta of one call; IREE keeps some worker memory
resident between calls, so ragged-mlir's number is a lower bound), ``compile_s``
of ours and ``load`` (the 1-min load average at the case's start and end: on a
shared machine the eager variants made of many small parallel regions,
``per_image`` and ``danling``, slow down by 10x and more). ``--profile`` also
times every conv (and the ViT's token ops) alone. Nothing asserts a time.

    python bench/images.py                                   # S=224, occ 0.2 0.4 0.8, both nets
    python bench/images.py --sizes 224 512 --nets resnet18 --rounds 3
    python bench/images.py --smoke                           # B=2, S=32, 1 round
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import gemm_peak_gflops, log, machine_info, measured_call, setup  # noqa: E402

import ragged_mlir  # noqa: E402
from ragged_mlir.builders import Program, attention, pack, ragged, tensor  # noqa: E402
from ragged_mlir.compiler import parameter_key  # noqa: E402
from ragged_mlir.windows import window_extent  # noqa: E402

try:  # DanLing is optional (pip install danling==0.4.8)
    from danling import NestedTensor as DanlingNT

    DANLING_REASON = None
except Exception as e:  # pragma: no cover - depends on the environment
    DanlingNT = None
    DANLING_REASON = f"not installed ({type(e).__name__}: {e})"

PEERS = ("padded", "padded32", "per_image", "inductor", "danling")
OURS = "ragged_mlir"
VARIANTS = PEERS + (OURS,)
NETS = ("resnet18", "vit")
#: ResNet-18 stage widths and classes; the ViT's width, heads and FF.
WIDTHS, CLASSES = (64, 128, 256, 512), 1000
D, HEADS, FF, PATCH = 384, 12, 1536, 16
#: Targets of the spec, reported against, never asserted.
TARGETS = {"ratio_occ_le_0.5": 1.25, "ratio_occ_0.8": 1.0, "mem_vs_padded_occ_0.4": 0.5}


# -- the networks, written once over an `ops` object ---------------------------------------------
#
# Each backend (torch eager on NCHW, ragged builders, shape/FLOP counting)
# supplies conv / bn / relu / add / maxpool / head (ResNet) and patchify /
# linear / ln / gelu / add / attention / pool (ViT).


def resnet18(ops, x):
    x = ops.relu(ops.bn(ops.conv(x, "stem", 2, 3), "stem"))
    x = ops.maxpool(x)
    for s in range(1, 5):
        for b in range(2):
            pre, stride = f"l{s}_{b}", 2 if s > 1 and b == 0 else 1
            y = ops.relu(ops.bn(ops.conv(x, pre + "_c1", stride, 1), pre + "_c1"))
            y = ops.bn(ops.conv(y, pre + "_c2", 1, 1), pre + "_c2")
            short = ops.bn(ops.conv(x, pre + "_down", 2, 0), pre + "_down") if stride == 2 else x
            x = ops.relu(ops.add(y, short))
    return ops.head(x)


def vit(ops, x):
    t = ops.patchify(x)
    h = ops.ln(t, "ln1")
    a = ops.attention(ops.linear(h, "q"), ops.linear(h, "k"), ops.linear(h, "v"))
    t = ops.add(t, ops.linear(a, "o"))
    h = ops.ln(t, "ln2")
    t = ops.add(t, ops.linear(ops.gelu(ops.linear(h, "fc1")), "fc2"))
    return ops.pool(t)


NETWORKS = {"resnet18": resnet18, "vit": vit}


def resnet_params(seed: int) -> dict[str, np.ndarray]:
    """HWIO conv weights (He init), BN folded to scale/shift, fc [512, 1000] + bias."""
    rng = np.random.default_rng(seed)
    p: dict[str, np.ndarray] = {}

    def conv(name, k, cin, cout):
        p[name] = (rng.standard_normal((k, k, cin, cout)) * math.sqrt(2.0 / (k * k * cin))).astype(np.float32)
        gamma = rng.uniform(0.3, 0.7, cout)
        beta = rng.normal(0.0, 0.1, cout)
        mean = rng.normal(0.0, 0.1, cout)
        var = rng.uniform(0.5, 1.5, cout)
        scale = gamma / np.sqrt(var + 1e-5)  # eval-mode BatchNorm folded
        p[name + "_scale"] = scale.astype(np.float32)
        p[name + "_shift"] = (beta - mean * scale).astype(np.float32)

    conv("stem", 7, 3, WIDTHS[0])
    cin = WIDTHS[0]
    for s, c in enumerate(WIDTHS, 1):
        for b in range(2):
            pre = f"l{s}_{b}"
            conv(pre + "_c1", 3, cin, c)
            conv(pre + "_c2", 3, c, c)
            if s > 1 and b == 0:
                conv(pre + "_down", 1, cin, c)
            cin = c
    p["fc"] = (rng.standard_normal((WIDTHS[-1], CLASSES)) / math.sqrt(WIDTHS[-1])).astype(np.float32)
    p["fc_b"] = rng.normal(0.0, 0.1, CLASSES).astype(np.float32)
    return p


def vit_params(seed: int) -> dict[str, np.ndarray]:
    """Patch conv HWIO [16, 16, 3, 384] + bias, the layer's [K, N] weights and biases."""
    rng = np.random.default_rng(seed)

    def w(*shape, fan_in):
        return (rng.standard_normal(shape) / math.sqrt(fan_in)).astype(np.float32)

    def b(n, scale=0.02):
        return rng.normal(0.0, scale, n).astype(np.float32)

    p = {"patch": w(PATCH, PATCH, 3, D, fan_in=PATCH * PATCH * 3), "patch_b": b(D)}
    for ln in ("ln1", "ln2"):
        p[ln + "_g"] = (1.0 + rng.normal(0.0, 0.1, D)).astype(np.float32)
        p[ln + "_b"] = b(D, 0.1)
    for name, k, n in (("q", D, D), ("k", D, D), ("v", D, D), ("o", D, D), ("fc1", D, FF), ("fc2", FF, D)):
        p[name], p[name + "_b"] = w(k, n, fan_in=k), b(n)
    return p


PARAMS = {"resnet18": resnet_params, "vit": vit_params}


# -- shapes and useful FLOPs ---------------------------------------------------------------------


def extent(x: int, k: int, s: int, p: int) -> int:
    """PyTorch's output size (dilation 1, floor), 0 for an empty input."""
    return window_extent(x, k, s, p)


class FlopOps:
    """Runs a network on one image's (H, W, C): counts 2 x MACs of the real
    per-image network and keeps the final spatial extent (for the masks)."""

    def __init__(self, p: dict[str, np.ndarray]):
        self.p, self.flops, self.final_hw, self.tokens = p, 0, (0, 0), 0
        #: Every convolution: (name, stride, padding, input (H, W), FLOPs).
        self.convs: list[tuple[str, int, int, tuple[int, int], int]] = []

    def conv(self, x, name, stride, pad):
        h, w, _ = x
        k, _, cin, cout = self.p[name].shape
        ho, wo = extent(h, k, stride, pad), extent(w, k, stride, pad)
        f = 2 * ho * wo * k * k * cin * cout
        self.flops += f
        self.convs.append((name, stride, pad, (h, w), f))
        return ho, wo, cout

    def bn(self, x, name):
        return x

    def relu(self, x):
        return x

    gelu = relu

    def add(self, a, b):
        return a

    def maxpool(self, x):
        h, w, c = x
        return extent(h, 3, 2, 1), extent(w, 3, 2, 1), c

    def head(self, x):
        self.final_hw = x[:2]
        self.flops += 2 * self.p["fc"].size
        return CLASSES

    def patchify(self, x):
        h, w, c = self.conv(x, "patch", PATCH, 0)
        self.final_hw = (h, w)
        self.tokens = h * w
        return self.tokens, c

    def linear(self, t, name):
        n, k = t
        self.flops += 2 * n * self.p[name].size
        return n, self.p[name].shape[1]

    def ln(self, t, name):
        return t

    def attention(self, q, k, v):
        n, d = q
        self.flops += 4 * n * n * d
        return q

    def pool(self, t):
        return t[1]


def per_image_shapes(net: str, p: dict, sizes) -> tuple[list[int], list[tuple[int, int]]]:
    flops, final = [], []
    for h, w in sizes:
        ops = FlopOps(p)
        NETWORKS[net](ops, (h, w, 3))
        flops.append(ops.flops)
        final.append(ops.final_hw)
    return flops, final


# -- torch --------------------------------------------------------------------------------------


class TorchOps:
    """The networks on NCHW tensors (a padded batch, one image, or a DanLing
    NestedTensor of [C, H, W] items). ``mask`` [B, 1, h, w] (padded batches)
    restricts the final mean to each image's own extent; ``key_mask`` [B, L]
    (True: a real token) masks the ViT's padded keys and its mean."""

    def __init__(self, p: dict[str, np.ndarray], dtype=torch.float32, inplace: bool = True):
        t = {k: torch.from_numpy(v).to(dtype) for k, v in p.items()}
        self.w = {}
        for k, v in t.items():
            if v.dim() == 4:  # HWIO -> OIHW
                self.w[k] = v.permute(3, 2, 0, 1).contiguous()
            elif k.endswith(("_scale", "_shift")):
                self.w[k] = v.view(1, -1, 1, 1)
            elif v.dim() == 2:  # [K, N] -> F.linear's [N, K]
                self.w[k] = v.t().contiguous()
            else:
                self.w[k] = v
        self.inplace = inplace
        self.mask = self.key_mask = None

    # ResNet
    def conv(self, x, name, stride, pad):
        return F.conv2d(x, self.w[name], self.w.get(name + "_b"), stride, pad)

    def bn(self, x, name):
        return torch.addcmul(self.w[name + "_shift"], x, self.w[name + "_scale"])

    def relu(self, x):
        return torch.relu_(x) if self.inplace else F.relu(x)

    def add(self, a, b):
        return a.add_(b) if self.inplace else a + b

    def maxpool(self, x):
        return F.max_pool2d(x, 3, 2, 1)

    def head(self, x):
        if self.mask is None:
            pooled = x.mean(dim=(2, 3))
        else:
            pooled = (x * self.mask).sum(dim=(2, 3)) / self.mask.sum(dim=(2, 3))
        return F.linear(pooled, self.w["fc"], self.w["fc_b"])

    # ViT
    def patchify(self, x):
        return self.conv(x, "patch", PATCH, 0).flatten(2).transpose(1, 2)

    def linear(self, t, name):
        return F.linear(t, self.w[name], self.w[name + "_b"])

    def ln(self, t, name):
        return F.layer_norm(t, (D,), self.w[name + "_g"], self.w[name + "_b"])

    def gelu(self, t):
        return F.gelu(t)

    def attention(self, q, k, v):
        b, n, _ = q.shape
        q, k, v = (z.view(b, n, HEADS, D // HEADS).transpose(1, 2) for z in (q, k, v))
        m = None if self.key_mask is None else self.key_mask[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m).transpose(1, 2).reshape(b, n, D)

    def pool(self, t):
        if self.key_mask is None:
            return t.mean(dim=1)
        keep = self.key_mask.unsqueeze(-1).to(t.dtype)
        return (t * keep).sum(1) / keep.sum(1)


def padded_batch(imgs: list[np.ndarray], multiple: int = 1) -> torch.Tensor:
    hm = -(-max(i.shape[0] for i in imgs) // multiple) * multiple
    wm = -(-max(i.shape[1] for i in imgs) // multiple) * multiple
    x = torch.zeros(len(imgs), imgs[0].shape[2], hm, wm)
    for b, img in enumerate(imgs):
        x[b, :, : img.shape[0], : img.shape[1]] = torch.from_numpy(img).permute(2, 0, 1)
    return x


def final_mask(net: str, final_hw, x_pad: torch.Tensor, p: dict) -> torch.Tensor:
    """[B, 1, h, w] (ResNet) or [B, L] (ViT) of each image's own final extent
    inside the padded batch's final map."""
    ops = FlopOps(p)
    NETWORKS[net](ops, (x_pad.shape[2], x_pad.shape[3], 3))
    hp, wp = ops.final_hw
    m = torch.zeros(len(final_hw), hp, wp, dtype=torch.bool)
    for b, (h, w) in enumerate(final_hw):
        m[b, :h, :w] = True
    return m.flatten(1) if net == "vit" else m[:, None].float()


def torch_variants(net: str, p: dict, imgs: list[np.ndarray], final_hw, chosen) -> dict[str, Callable]:
    fn = NETWORKS[net]
    out: dict[str, Callable] = {}

    def padded_variant(multiple: int):
        x = padded_batch(imgs, multiple)
        ops = TorchOps(p)
        mask = final_mask(net, final_hw, x, p)
        if net == "vit":
            ops.key_mask = mask
        else:
            ops.mask = mask
        return ops, x

    if "padded" in chosen:
        ops, x = padded_variant(1)
        out["padded"] = lambda: fn(ops, x)
    if "padded32" in chosen:
        ops32, x32 = padded_variant(32)
        out["padded32"] = lambda: fn(ops32, x32)
    if "per_image" in chosen:
        ops1 = TorchOps(p)
        singles = [torch.from_numpy(i).permute(2, 0, 1)[None].contiguous() for i in imgs]
        out["per_image"] = lambda: torch.cat([fn(ops1, s) for s in singles])
    if "inductor" in chosen:
        opsi, xi = padded_variant(1)
        compiled = torch.compile(lambda x: fn(opsi, x), dynamic=False)
        out["inductor"] = lambda: compiled(xi)
    if "danling" in chosen and DanlingNT is not None:
        opsd = TorchOps(p, inplace=False)
        nt = DanlingNT([torch.from_numpy(i).permute(2, 0, 1).contiguous() for i in imgs])
        out["danling"] = lambda: fn(opsd, nt)
    return out


def reference(net: str, p: dict, imgs: list[np.ndarray], limit: int | None) -> np.ndarray:
    """fp64 per-image PyTorch logits/features of the first ``limit`` images."""
    ops = TorchOps(p, dtype=torch.float64)
    imgs = imgs if limit is None else imgs[:limit]
    xs = [torch.from_numpy(i.astype(np.float64)).permute(2, 0, 1)[None] for i in imgs]
    return torch.cat([NETWORKS[net](ops, x) for x in xs]).numpy()


# -- ragged-mlir --------------------------------------------------------------------------------


class RaggedOps:
    """The networks in ragged builders on ``[B, H(b), W(b), C]``."""

    def __init__(self, args: dict):
        self.a = args

    def conv(self, x, name, stride, pad):
        return x.conv2d(self.a[name], self.a.get(name + "_b"), stride=stride, padding=pad)

    def bn(self, x, name):
        return x * self.a[name + "_scale"] + self.a[name + "_shift"]

    def relu(self, x):
        return x.relu()

    def add(self, a, b):
        return a + b

    def maxpool(self, x):
        return x.max_pool2d(3, stride=2, padding=1)

    def head(self, x):
        # Global average pool ([B, C]), then the fc as a ragged matmul on one
        # row per image (dense @ dense has no builder): pack the pooled rows
        # with unit offsets, matmul, bias, and take the one row back (mean).
        pooled = x.flatten().reduce("mean")
        rows = pack(pooled, [self.a["unit_offsets"]], ragged(None, "One", WIDTHS[-1]))
        return (rows @ self.a["fc"] + self.a["fc_b"]).reduce("mean")

    def patchify(self, x):
        return self.conv(x, "patch", PATCH, 0).flatten()

    def linear(self, t, name):
        return t @ self.a[name] + self.a[name + "_b"]

    def ln(self, t, name):
        return t.layer_norm(self.a[name + "_g"], self.a[name + "_b"])

    def gelu(self, t):
        return t.gelu()

    def attention(self, q, k, v):
        q, k, v = (z.reshape(HEADS, D // HEADS) for z in (q, k, v))
        return attention(q, k, v, scale=1.0 / math.sqrt(D // HEADS)).reshape(D)

    def pool(self, t):
        return t.reduce("mean")


def ragged_program(net: str, p: dict) -> tuple[Program, list[str]]:
    """The builders program ``net(x, *weights[, unit_offsets])`` and its
    argument names after ``x``."""
    names = list(p)
    specs = [("x", ragged(None, "H", "W", 3))] + [(n, tensor(*p[n].shape)) for n in names]
    if net == "resnet18":
        names.append("unit_offsets")
        specs.append(("unit_offsets", tensor(None, dtype="i64")))
    prog = Program()

    def body(x, *weights):
        return NETWORKS[net](RaggedOps(dict(zip(names, weights, strict=True))), x)

    prog.define(net, specs, body)
    return prog, names


class RaggedNet:
    """One compiled module per network (all batches), weights frozen."""

    def __init__(self, net: str, p: dict, frozen: bool = True):
        self.net = net
        prog, self.names = ragged_program(net, p)
        t = time.perf_counter()
        weights = [n for n in self.names if n in p]
        # The image lowers to 3 arguments (values, heights, widths): weights from 3.
        idx = {n: 3 + i for i, n in enumerate(self.names)}
        self.frozen = frozen
        if frozen:
            self.module = ragged_mlir.compile(prog, frozen={net: [idx[n] for n in weights]})
            self.module.bind_parameters({parameter_key(net, idx[n]): p[n] for n in weights})
            self.args: list[np.ndarray] = []
        else:
            self.module = ragged_mlir.compile(prog)
            self.args = [np.ascontiguousarray(p[n]) for n in weights]
        self.compile_s = time.perf_counter() - t
        self.fn = getattr(self.module, net)

    def call(self, x: ragged_mlir.RaggedArray, batch: int) -> Callable:
        extra = [np.arange(batch + 1, dtype=np.int64)] if self.net == "resnet18" else []
        args = [x, *self.args, *extra]
        return lambda: self.fn(*args)


# -- one case -----------------------------------------------------------------------------------


def draw(batch: int, size: int, occ: float, seed: int) -> tuple[list[tuple[int, int]], list[np.ndarray]]:
    """B images, H and W each uniform in [ceil(occ S), S], values N(0, 1)."""
    rng = np.random.default_rng([seed, size, round(occ * 1000)])
    lo = max(1, math.ceil(occ * size))
    sizes = [(int(rng.integers(lo, size + 1)), int(rng.integers(lo, size + 1))) for _ in range(batch)]
    imgs = [rng.standard_normal((h, w, 3)).astype(np.float32) for h, w in sizes]
    return sizes, imgs


def as_numpy(out) -> np.ndarray:
    if isinstance(out, torch.Tensor):
        return out.detach().double().numpy()
    if DanlingNT is not None and isinstance(out, DanlingNT):
        return torch.stack(list(out)).double().numpy()
    return np.asarray(out, dtype=np.float64)


def rel_err(got: np.ndarray, ref: np.ndarray) -> float:
    got = got[: len(ref)]
    return float(np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-30))


def short(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return f"{type(e).__name__}: {lines[-1][:240] if lines else ''}"


def run_case(net: str, size: int, occ: float, args, ours: RaggedNet | None, p: dict, peak: float) -> dict:
    t_case = time.perf_counter()
    load0 = round(os.getloadavg()[0], 2)  # the machine may be shared: recorded, start and end
    sizes, imgs = draw(args.batch, size, occ, args.seed)
    flops, final_hw = per_image_shapes(net, p, sizes)
    pixels = sum(h * w for h, w in sizes)
    hm, wm = max(h for h, _ in sizes), max(w for _, w in sizes)
    rec: dict = {
        "net": net,
        "S": size,
        "occ": occ,
        "B": args.batch,
        "pixels": pixels,
        "util": round(pixels / (args.batch * hm * wm), 3),
        "max_hw": [hm, wm],
        "useful_gflop": round(sum(flops) / 1e9, 3),
        "padded_gflop": round(args.batch * per_image_shapes(net, p, [(hm, wm)])[0][0] / 1e9, 3),
    }
    failed: dict[str, str] = {}
    calls: dict[str, Callable] = {}
    for name in PEERS:
        if name not in args.variants:
            continue
        if name == "danling" and DanlingNT is None:
            failed[name] = DANLING_REASON
            continue
        try:  # each peer's input is built here, outside the timed region
            calls.update(torch_variants(net, p, imgs, final_hw, [name]))
        except Exception as e:  # a peer that cannot even take the batch
            failed[name] = f"setup: {short(e)}"
    if OURS in args.variants and ours is not None:
        calls[OURS] = ours.call(ragged_mlir.RaggedArray.from_images(imgs), args.batch)
    order = [v for v in VARIANTS if v in calls]

    ref = reference(net, p, imgs, args.check_images)
    rec["checked_images"] = len(ref)
    rec["first_call_s"], rec["peak_mem_mib"], rec["max_rel_err"] = {}, {}, {}
    times: dict[str, list[float]] = {}
    for name in order:
        fn = calls[name]
        try:
            t = time.perf_counter()
            if name in ("inductor", OURS):
                out = fn()
                rec["first_call_s"][name] = round(time.perf_counter() - t, 3)
                out, _, mem = measured_call(fn)
            else:
                out, dt, mem = measured_call(fn)
                rec["first_call_s"][name] = round(dt, 3)
            rec["peak_mem_mib"][name] = None if mem is None else round(mem, 1)
            rec["max_rel_err"][name] = float(f"{rel_err(as_numpy(out), ref):.3g}")
        except Exception as e:
            failed[name] = short(e)
            log(f"    {name}: failed: {failed[name]}")
            if args.verbose:
                traceback.print_exc()
            continue
        times[name] = []
    timed = [v for v in order if v in times]
    for r in range(args.rounds):
        k = r % len(timed) if timed else 0
        for name in timed[k:] + timed[:k]:
            t = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - t)
    rec["runs"] = args.rounds
    rec["failed"] = failed
    rec["not_run"] = sorted(set(VARIANTS) - set(args.variants))
    med = {k: statistics.median(v) for k, v in times.items() if v}
    rec["ms"] = {k: round(v * 1e3, 2) for k, v in med.items()}
    rec["min_ms"] = {k: round(min(v) * 1e3, 2) for k, v in times.items() if v}
    rec["attainment"] = {k: round(sum(flops) / v / 1e9 / peak, 3) for k, v in med.items()}
    peers = {k: v for k, v in med.items() if k in PEERS}
    if OURS in med and peers:
        best = min(peers, key=peers.get)
        rec["best_peer"], rec["ratio_to_best_peer"] = best, round(peers[best] / med[OURS], 3)
        rec["ratio_vs_peer"] = {k: round(v / med[OURS], 3) for k, v in peers.items()}
        # The same on each variant's fastest run (robust to a shared machine's bursts of load).
        mins = {k: min(v) for k, v in times.items() if v}
        pmin = {k: v for k, v in mins.items() if k in PEERS}
        rec["ratio_to_best_peer_min"] = round(min(pmin.values()) / mins[OURS], 3)
        target = TARGETS["ratio_occ_le_0.5"] if occ <= 0.5 else TARGETS["ratio_occ_0.8"]
        rec["ratio_target"] = target
        rec["ratio_target_met"] = rec["ratio_to_best_peer"] >= target
    mem = rec["peak_mem_mib"]
    if mem.get(OURS) is not None and mem.get("padded"):
        rec["mem_vs_padded"] = round(mem[OURS] / mem["padded"], 3)
        if abs(occ - 0.4) < 1e-9:
            rec["mem_target_met"] = rec["mem_vs_padded"] <= TARGETS["mem_vs_padded_occ_0.4"]
    if ours is not None:
        rec["compile_s"] = round(ours.compile_s, 1)
    rec["case_s"] = round(time.perf_counter() - t_case, 1)
    rec["load"] = [load0, round(os.getloadavg()[0], 2)]
    return rec


# -- what dominates: layers alone -----------------------------------------------------------


def _median_ms(fns: dict[str, Callable], rounds: int) -> dict[str, float]:
    """Warm call, then ``rounds`` interleaved calls of each: median ms."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for f in fns.values():
        f()
    for r in range(rounds):
        names = list(fns)
        k = r % len(names)
        for name in names[k:] + names[:k]:
            t = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - t)
    return {k: round(statistics.median(v) * 1e3, 2) for k, v in times.items()}


def profile_layers(net: str, p: dict, sizes, rounds: int, peak: float, seed: int) -> list[dict]:
    """Every convolution of ``net`` alone (conv only: no BN, ReLU or residual)
    on random inputs of its real per-image sizes: ragged-mlir (one function
    per distinct conv, weight frozen) against torch on the padded batch and
    per image; for the ViT also the token ops (layer norms, the six linears,
    attention) of ragged-mlir alone, on the real token counts."""
    traces = []
    for h, w in sizes:
        ops = FlopOps(p)
        NETWORKS[net](ops, (h, w, 3))
        traces.append(ops)
    convs = list(zip(*(t.convs for t in traces), strict=True))
    prog, fn_of, frozen, params = Program(), {}, {}, {}
    for inst in convs:
        name, stride, pad = inst[0][:3]
        bias = name + "_b" in p
        key = (p[name].shape, stride, pad, bias)
        if key in fn_of:
            continue
        fn = fn_of[key] = f"conv{len(fn_of)}"
        k, _, cin, cout = p[name].shape
        specs = [("x", ragged(None, "H", "W", cin)), ("w", tensor(*p[name].shape))]
        specs += [("b", tensor(cout))] if bias else []
        prog.define(
            fn,
            specs,
            lambda x, w, *b, s=stride, pd=pad: x.conv2d(w, b[0] if b else None, stride=s, padding=pd),
        )
        frozen[fn] = [3, 4] if bias else [3]
        params[parameter_key(fn, 3)] = p[name]
        if bias:
            params[parameter_key(fn, 4)] = p[name + "_b"]
    tokens = [t.tokens for t in traces]
    if net == "vit":
        # Weights frozen as in the whole network (a [B, L(b), C] input lowers
        # to 2 arguments: the weight is argument 2, the bias 3).
        prog.define(
            "ln",
            [("t", ragged(None, "L", D)), ("g", tensor(D)), ("b", tensor(D))],
            lambda t, g, b: t.layer_norm(g, b),
        )
        for fn, w in (("ln", "ln1"), ("lin_d_d", "q"), ("lin_d_ff", "fc1"), ("lin_ff_d", "fc2")):
            if fn != "ln":
                k, n = p[w].shape
                prog.define(
                    fn,
                    [("t", ragged(None, "L", k)), ("w", tensor(k, n)), ("b", tensor(n))],
                    lambda t, w, b: t @ w + b,
                )
            frozen[fn] = [2, 3]
            first, second = (w + "_g", w + "_b") if fn == "ln" else (w, w + "_b")
            params[parameter_key(fn, 2)], params[parameter_key(fn, 3)] = p[first], p[second]
        prog.define("gelu", [("t", ragged(None, "L", FF))], lambda t: t.gelu())
        prog.define(
            "attn",
            [("q", ragged(None, "L", D)), ("k", ragged(None, "L", D)), ("v", ragged(None, "L", D))],
            lambda q, k, v: RaggedOps({}).attention(q, k, v),
        )
    module = ragged_mlir.compile(prog, frozen=frozen)
    module.bind_parameters(params)
    rng = np.random.default_rng(seed)
    rows = []
    for i, inst in enumerate(convs):
        name, stride, pad = inst[0][:3]
        k, _, cin, cout = p[name].shape
        imgs = [rng.standard_normal((h, w, cin)).astype(np.float32) for _, _, _, (h, w), _ in inst]
        x = ragged_mlir.RaggedArray.from_images(imgs)
        fn = getattr(module, fn_of[(p[name].shape, stride, pad, name + "_b" in p)])
        ops = TorchOps({name: p[name], **({name + "_b": p[name + "_b"]} if name + "_b" in p else {})})
        xp = padded_batch(imgs)
        singles = [torch.from_numpy(im).permute(2, 0, 1)[None].contiguous() for im in imgs]
        ms = _median_ms(
            {
                OURS: lambda fn=fn, x=x: fn(x),
                "padded": lambda ops=ops, xp=xp, n=name, s=stride, pd=pad: ops.conv(xp, n, s, pd),
                "per_image": lambda ops=ops, sg=singles, n=name, s=stride, pd=pad: [
                    ops.conv(z, n, s, pd) for z in sg
                ],
            },
            rounds,
        )
        flops = sum(f for *_, f in inst)
        # Peak memory of one call of each (the im2col tile of ours, oneDNN's workspace).
        _, _, mem_ours = measured_call(lambda fn=fn, x=x: fn(x))
        _, _, mem_pad = measured_call(lambda ops=ops, xp=xp, n=name, s=stride, pd=pad: ops.conv(xp, n, s, pd))
        rows.append(
            {
                "layer": f"{i:02d} {name}",
                "kernel": f"{k}x{k}/{stride} {cin}->{cout}",
                "in_pixels": sum(h * w for _, _, _, (h, w), _ in inst),
                "gflop": round(flops / 1e9, 3),
                "ms": ms,
                "attainment_ours": round(flops / (ms[OURS] / 1e3) / 1e9 / peak, 3),
                "peak_mem_mib": {
                    OURS: None if mem_ours is None else round(mem_ours, 1),
                    "padded": None if mem_pad is None else round(mem_pad, 1),
                },
            }
        )
    if net == "vit":
        n = sum(tokens)

        def toks(width):
            return ragged_mlir.RaggedArray.from_list(
                [rng.standard_normal((t, width)).astype(np.float32) for t in tokens]
            )

        x, xf = toks(D), toks(FF)
        dense = {k: torch.from_numpy(v) for k, v in p.items() if v.ndim == 2}
        dense1 = {k: torch.from_numpy(v) for k, v in p.items() if v.ndim == 1}
        xt, xft = torch.from_numpy(x.values), torch.from_numpy(xf.values)
        attn_f = 4 * sum(t * t for t in tokens) * D
        # (label, times in the layer, FLOPs, ours, torch on the same packed tokens)
        pieces = [
            (
                "layer norm",
                2,
                0,
                lambda: module.ln(x),
                lambda: F.layer_norm(xt, (D,), dense1["ln1_g"], dense1["ln1_b"]),
            ),
            (
                "linear d->d (q k v o)",
                4,
                2 * n * D * D,
                lambda: module.lin_d_d(x),
                lambda: torch.addmm(torch.from_numpy(p["q_b"]), xt, dense["q"]),
            ),
            (
                "linear d->ff",
                1,
                2 * n * D * FF,
                lambda: module.lin_d_ff(x),
                lambda: torch.addmm(torch.from_numpy(p["fc1_b"]), xt, dense["fc1"]),
            ),
            ("gelu", 1, 0, lambda: module.gelu(xf), lambda: F.gelu(xft)),
            (
                "linear ff->d",
                1,
                2 * n * FF * D,
                lambda: module.lin_ff_d(xf),
                lambda: torch.addmm(torch.from_numpy(p["fc2_b"]), xft, dense["fc2"]),
            ),
            ("attention", 1, attn_f, lambda: module.attn(x, x, x), None),
        ]
        for label, count, flops, ours_fn, torch_fn in pieces:
            fns = {OURS: ours_fn}
            if torch_fn is not None:
                fns["torch_packed"] = torch_fn
            else:
                qs = [
                    torch.from_numpy(x.values[a:b]).view(1, b - a, HEADS, D // HEADS).transpose(1, 2)
                    for a, b in zip(x.offsets[:-1], x.offsets[1:], strict=True)
                ]
                fns["torch_per_image"] = lambda qs=qs: [F.scaled_dot_product_attention(q, q, q) for q in qs]
            ms = _median_ms(fns, rounds)
            row = {"layer": label, "count": count, "tokens": n, "gflop": round(flops / 1e9, 3), "ms": ms}
            if flops:
                row["attainment_ours"] = round(flops / (ms[OURS] / 1e3) / 1e9 / peak, 3)
            rows.append(row)
    return rows


# -- report -------------------------------------------------------------------------------------


def table(rows: list[dict], variants) -> str:
    cols = [v for v in VARIANTS if v in variants]
    head = ["net", "S", "occ", "util"] + [f"{v} ms" for v in cols]
    head += ["best peer", "speedup (best peer / ours)", "speedup on min", "attain. ours", "attain. best peer"]
    head += ["mem MiB ours/padded"]
    head += ["rel err ours", "compile s", "load"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['net']} | {r['S']} | {r['occ']} | error: {r['error']} |")
            continue
        ms, att, mem = r.get("ms", {}), r.get("attainment", {}), r.get("peak_mem_mib", {})
        cells = [r["net"], str(r["S"]), str(r["occ"]), str(r["util"])]
        for v in cols:
            if v in ms:
                cells.append(f"{ms[v]:.1f} ({r['min_ms'][v]:.0f})")
            else:
                cells.append("failed" if v in r.get("failed", {}) else "-")
        best = r.get("best_peer")
        cells += [
            best or "-",
            str(r.get("ratio_to_best_peer", "-")),
            str(r.get("ratio_to_best_peer_min", "-")),
        ]
        cells += [str(att.get(OURS, "-")), str(att.get(best, "-")) if best else "-"]
        cells.append(f"{mem.get(OURS, '-')}/{mem.get('padded', '-')}")
        cells += [str(r.get("max_rel_err", {}).get(OURS, "-")), str(r.get("compile_s", "-"))]
        cells.append("/".join(str(x) for x in r.get("load", [])))
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    lines.append(
        "ms: median (min) of the rounds; speedup > 1: ragged-mlir faster; attain.: useful FLOPs / time / "
        "GEMM peak; mem: VmHWM delta of one warm call; load: 1-min load average at the start/end of the case."
    )
    failed = {(r["net"], r["S"], r["occ"], k): v for r in rows for k, v in r.get("failed", {}).items()}
    if failed:
        lines.append("")
        lines.append(
            "Failed: " + "; ".join(f"{k[0]} S={k[1]} occ={k[2]} {k[3]}: {v}" for k, v in failed.items())
        )
    return "\n".join(lines)


def profile_table(net: str, size: int, occ: float, layers: list[dict]) -> str:
    cols = sorted({k for r in layers for k in r["ms"]}, key=lambda k: (k != OURS, k))
    head = ["layer", "shape", "GFLOP"] + [f"{c} ms" for c in cols] + ["attain. ours", "mem MiB ours/padded"]
    lines = [f"{net}, S={size}, occ={occ}: layers alone", "", "| " + " | ".join(head) + " |"]
    lines.append("|" + "---|" * len(head))
    for r in layers:
        label = r["layer"] + (f" (x{r['count']})" if r.get("count", 1) > 1 else "")
        cells = [label, r.get("kernel", f"{r.get('tokens')} tokens"), str(r["gflop"])]
        cells += [str(r["ms"].get(c, "-")) for c in cols]
        cells.append(str(r.get("attainment_ours", "-")))
        mem = r.get("peak_mem_mib")
        cells.append(f"{mem[OURS]}/{mem['padded']}" if mem else "-")
        lines.append("| " + " | ".join(cells) + " |")
    # Totals weigh each row by its count; a column missing for a row adds nothing.
    total = {c: round(sum(r.get("count", 1) * r["ms"].get(c, 0) for r in layers), 1) for c in cols}
    gflop = round(sum(r.get("count", 1) * r["gflop"] for r in layers), 2)
    lines.append(
        f"| total (rows x count) | | {gflop} | " + " | ".join(str(total[c]) for c in cols) + " | | |"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--occupancies", nargs="+", type=float, default=[0.2, 0.4, 0.8])
    ap.add_argument("--sizes", nargs="+", type=int, default=[224])
    ap.add_argument("--nets", nargs="+", default=list(NETS), choices=NETS)
    ap.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--check-images", type=int, default=None, help="images checked against fp64 (default: all)"
    )
    ap.add_argument("--no-freeze", action="store_true", help="pass the weights as arguments")
    ap.add_argument("--json", type=Path, default=None, help="also append the JSON lines to this file")
    ap.add_argument("--smoke", action="store_true", help="B=2, S=32, occ 0.6, 1 round, no inductor")
    ap.add_argument(
        "--profile",
        action="store_true",
        help="also time every conv (and the ViT's token ops) alone, at the first occupancy and size",
    )
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args(argv)
    if args.smoke:
        args.batch, args.sizes, args.occupancies, args.rounds = 2, [32], [0.6], 1
        if "--variants" not in (argv if argv is not None else sys.argv[1:]):
            args.variants = [v for v in args.variants if v != "inductor"]
    threads = torch.get_num_threads()
    setup(args.threads)
    try:
        with torch.no_grad():
            return _run(args)
    finally:
        torch.set_num_threads(threads)


def _run(args) -> int:
    sink = args.json.open("a") if args.json else None

    def emit(rec: dict) -> None:
        line = json.dumps(rec)
        print(line, flush=True)
        if sink:
            sink.write(line + "\n")

    peak = gemm_peak_gflops()
    emit(
        {
            "machine": machine_info(),
            "gemm_peak_gflops": round(peak, 1),
            "danling": DANLING_REASON or "installed",
        }
    )
    rows = []
    for net in args.nets:
        p = PARAMS[net](args.seed)
        ours, compile_error = None, None
        if OURS in args.variants:
            log(f"{net}: compiling ragged-mlir ...")
            try:
                ours = RaggedNet(net, p, frozen=not args.no_freeze)
                log(f"{net}: compiled in {ours.compile_s:.1f} s")
            except Exception as e:
                compile_error = short(e)
                log(f"{net}: ragged-mlir failed to compile: {compile_error}")
        for size in args.sizes:
            for occ in args.occupancies:
                log(f"{net} S={size} occ={occ} ...")
                try:
                    rec = run_case(net, size, occ, args, ours, p, peak)
                    if compile_error:
                        rec["failed"][OURS] = f"compile: {compile_error}"
                except Exception as e:
                    rec = {"net": net, "S": size, "occ": occ, "error": short(e)}
                    if args.verbose:
                        traceback.print_exc()
                rows.append(rec)
                emit(rec)
                log(f"    {rec.get('case_s')} s: ms={rec.get('ms')} ratio={rec.get('ratio_to_best_peer')}")
    if args.profile:
        for net in args.nets:
            size, occ = args.sizes[0], args.occupancies[0]
            log(f"{net}: layers alone at S={size} occ={occ} ...")
            sizes, _ = draw(args.batch, size, occ, args.seed)
            layers = profile_layers(net, PARAMS[net](args.seed), sizes, max(3, args.rounds), peak, args.seed)
            for row in layers:
                emit({"profile": net, "S": size, "occ": occ, **row})
            print("\n" + profile_table(net, size, occ, layers), flush=True)
    print("\n" + table(rows, args.variants), flush=True)
    if sink:
        sink.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
