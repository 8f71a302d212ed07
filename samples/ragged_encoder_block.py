"""Builds a ragged encoder block with the Python builders, compiles it for
IREE (CPU), runs it on a batch of sequences of very different lengths and
compares it with the same computation done on the padded batch in numpy.

    python samples/ragged_encoder_block.py [--batch 32] [--dim 64] [--heads 4]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import ragged_mlir
from ragged_mlir.builders import Program, attention, ragged, tensor


def build(dim: int, heads: int, ff: int) -> Program:
    head_dim = dim // heads
    prog = Program()

    @prog.func(
        x=ragged(None, "L", heads, head_dim),
        wq=tensor(head_dim, head_dim),
        w1=tensor(head_dim, ff),
        w2=tensor(ff, head_dim),
        gamma=tensor(head_dim),
        beta=tensor(head_dim),
    )
    def block(x, wq, w1, w2, gamma, beta):
        q = x @ wq
        a = attention(q, x, x, scale=head_dim**-0.5) + x
        h = a.layer_norm(gamma, beta)
        y = ((h @ w1).gelu() @ w2) + h
        return y, y.reduce("mean")

    return prog


def _erf(z: np.ndarray) -> np.ndarray:
    """erf to ~1.5e-7 (Abramowitz & Stegun 7.1.26), vectorised."""
    t = 1.0 / (1.0 + 0.3275911 * np.abs(z))
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.sign(z) * (1.0 - poly * np.exp(-z * z))


def padded_reference(items, wq, w1, w2, gamma, beta):
    """The same block on the zero-padded batch with an attention mask: what
    one writes without ragged support (numpy, fp32)."""
    lengths = np.array([len(x) for x in items])
    b, lmax = len(items), max(lengths.max(initial=0), 1)
    heads, hd = items[0].shape[1:]
    x = np.zeros((b, lmax, heads, hd), np.float32)
    for i, it in enumerate(items):
        x[i, : len(it)] = it
    valid = np.arange(lmax)[None, :] < lengths[:, None]
    q = x @ wq
    s = np.einsum("bihd,bjhd->bhij", q, x) * hd**-0.5
    s = np.where(valid[:, None, None, :], s, -np.inf)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p = p / p.sum(-1, keepdims=True)
    a = np.einsum("bhij,bjhd->bihd", np.nan_to_num(p), x) + x
    mu = a.mean(-1, keepdims=True)
    h = (a - mu) / np.sqrt(a.var(-1, keepdims=True) + 1e-5) * gamma + beta
    u = h @ w1
    y = (0.5 * u * (1 + _erf(u / np.sqrt(2)))) @ w2 + h
    pooled = (y * valid[:, :, None, None]).sum(1) / np.maximum(lengths, 1)[:, None, None]
    return [y[i, : lengths[i]] for i in range(b)], pooled


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    rng = np.random.default_rng(args.seed)
    heads, hd, ff = args.heads, args.dim // args.heads, 4 * (args.dim // args.heads)
    # Lengths like a real corpus: mostly short, a few long.
    lengths = np.minimum(rng.zipf(1.4, args.batch) * 8, 256)
    items = [rng.standard_normal((n, heads, hd)).astype(np.float32) for n in lengths]
    weights = [
        (rng.standard_normal(s) / np.sqrt(s[0])).astype(np.float32) for s in [(hd, hd), (hd, ff), (ff, hd)]
    ]
    gamma, beta = np.ones(hd, np.float32), np.zeros(hd, np.float32)

    t0 = time.perf_counter()
    module = ragged_mlir.compile(build(args.dim, heads, ff))
    compile_s = time.perf_counter() - t0
    x = ragged_mlir.RaggedArray.from_list(items)
    call = lambda: module.block(x, *weights, gamma, beta)  # noqa: E731
    pad = lambda: padded_reference(items, *weights, gamma, beta)  # noqa: E731

    y, pooled = call()
    y_ref, pooled_ref = pad()
    err = max(float(np.abs(a - b).max(initial=0)) for a, b in zip(y.to_list(), y_ref, strict=False))
    err_pool = float(np.abs(pooled - pooled_ref).max())

    t_ragged, t_padded = [], []
    for _ in range(5):  # interleaved
        for fn, times in ((call, t_ragged), (pad, t_padded)):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
    util = lengths.sum() / (len(lengths) * lengths.max())
    print(
        f"batch {args.batch}, lengths min/median/max {lengths.min()}/{int(np.median(lengths))}/{lengths.max()}, "
        f"padded slots holding real tokens: {util:.0%}"
    )
    print(f"compile: {compile_s:.2f} s")
    print(f"pooled[0, 0, :4]  ragged-mlir: {np.round(pooled[0, 0, :4], 4)}")
    print(f"pooled[0, 0, :4]  padded ref : {np.round(pooled_ref[0, 0, :4], 4)}")
    print(f"max |ragged - padded|: tokens {err:.2e}, pooled {err_pool:.2e}")
    print(
        f"median time: ragged-mlir {np.median(t_ragged) * 1e3:.1f} ms, "
        f"padded numpy {np.median(t_padded) * 1e3:.1f} ms "
        f"(ratio {np.median(t_padded) / np.median(t_ragged):.2f}x)"
    )
    if err > 1e-3 or err_pool > 1e-3:
        raise SystemExit("ragged-mlir and the padded reference disagree")


if __name__ == "__main__":
    main()
