"""First measurement of the ragged ops against the alternatives a user would
pick: a numpy per-item loop, padded torch (masking where needed) and PyTorch
nested tensors (NJT), all in one process, interleaved, on real lengths.

    python bench/bench_ops.py [--datasets mnli squadv2] [--repeats 10] [--quick]

W1: segmented sum / max / softmax over the ragged dim (B=64, D=384).
W2: packed Linear, tokens x 384 @ 384 x 1536 (B=32).
W3: ragged attention softmax(QKᵀ/√d)V, 12 heads x 32 (B=32).

Prints one JSON line per case and a table of median times and ratios
(time of the alternative / time of ragged-mlir: > 1 means ragged-mlir is
faster). Benchmarks are not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lengths import sample_lengths  # noqa: E402

import ragged_mlir  # noqa: E402
from ragged_mlir.builders import Program, attention, ragged, tensor  # noqa: E402

try:
    import torch

    torch.set_num_threads(2)
except ImportError:  # pragma: no cover
    torch = None


def programs(d: int, heads: int, hd: int, ff: int) -> Program:
    prog = Program()

    @prog.func(x=ragged(None, "L", d))
    def w1_sum(x):
        return x.reduce("sum")

    @prog.func(x=ragged(None, "L", d))
    def w1_max(x):
        return x.reduce("max", empty=float("-inf"))

    @prog.func(x=ragged(None, "L", d))
    def w1_softmax(x):
        return x.softmax()

    @prog.func(x=ragged(None, "L", d), w=tensor(d, ff))
    def w2_linear(x, w):
        return x @ w

    @prog.func(q=ragged(None, "L", heads, hd), k=ragged(None, "L", heads, hd), v=ragged(None, "L", heads, hd))
    def w3_attention(q, k, v):
        return attention(q, k, v, scale=hd**-0.5)

    return prog


def timeit(fns: dict, repeats: int) -> dict:
    """Median and p90 seconds of each fn, run interleaved (A B C A B C ...)."""
    for f in fns.values():  # warm up
        f()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t)
    return {k: (float(np.median(v)), float(np.percentile(v, 90))) for k, v in times.items()}


def padded(items, lmax):
    out = np.zeros((len(items), lmax) + items[0].shape[1:], np.float32)
    for i, x in enumerate(items):
        out[i, : len(x)] = x
    return out


def cases(module, dataset: str, seed: int, d: int, heads: int, hd: int, ff: int):
    rng = np.random.default_rng(seed)
    # W1 and W2/W3 use the batch sizes of bench/README.md.
    for wid, batch in (("W1", 64), ("W2", 32), ("W3", 32)):
        lengths = sample_lengths(dataset, batch, seed)
        lmax = int(lengths.max())
        util = float(lengths.sum() / (batch * lmax))
        if wid == "W3":
            items = [rng.standard_normal((n, heads, hd)).astype(np.float32) for n in lengths]
        else:
            items = [rng.standard_normal((n, d)).astype(np.float32) for n in lengths]
        x = ragged_mlir.RaggedArray.from_list(items)
        pad = padded(items, lmax)
        mask = np.arange(lmax)[None, :] < lengths[:, None]
        fns: dict[str, dict] = {}
        if wid == "W1":
            fns["sum"] = {
                "ragged-mlir": lambda: module.w1_sum(x),
                "numpy loop": lambda: np.stack([it.sum(0) for it in items]),
            }
            fns["max"] = {
                "ragged-mlir": lambda: module.w1_max(x),
                "numpy loop": lambda: np.stack(
                    [it.max(0) if len(it) else np.full(d, -np.inf, np.float32) for it in items]
                ),
            }
            fns["softmax"] = {
                "ragged-mlir": lambda: module.w1_softmax(x),
                "numpy loop": lambda: [
                    np.exp(it - it.max(0)) / np.exp(it - it.max(0)).sum(0) for it in items if len(it)
                ],
            }
            if torch is not None:
                tp, tm = torch.from_numpy(pad), torch.from_numpy(mask)[:, :, None]
                nt = torch.nested.nested_tensor([torch.from_numpy(i) for i in items], layout=torch.jagged)
                fns["sum"]["torch padded"] = lambda: (tp * tm).sum(1)
                fns["sum"]["torch NJT"] = lambda: nt.sum(1)
                fns["max"]["torch padded"] = lambda: tp.masked_fill(~tm, float("-inf")).amax(1)
                fns["max"]["torch NJT"] = lambda: nt.amax(1)
                fns["softmax"]["torch padded"] = lambda: tp.masked_fill(~tm, float("-inf")).softmax(1)
                fns["softmax"]["torch NJT"] = lambda: nt.softmax(1)
        elif wid == "W2":
            w = (rng.standard_normal((d, ff)) / np.sqrt(d)).astype(np.float32)
            fns["linear"] = {
                "ragged-mlir": lambda: module.w2_linear(x, w),
                "numpy loop": lambda: [it @ w for it in items],
            }
            if torch is not None:
                tp, tw = torch.from_numpy(pad), torch.from_numpy(w)
                nt = torch.nested.nested_tensor([torch.from_numpy(i) for i in items], layout=torch.jagged)
                fns["linear"]["torch padded"] = lambda: tp @ tw
                fns["linear"]["torch NJT"] = lambda: torch.matmul(nt, tw)
        else:
            q = k = v = x
            scale = hd**-0.5

            def numpy_loop():
                out = []
                for it in items:
                    s = np.einsum("ihd,jhd->hij", it, it) * scale
                    p = np.exp(s - s.max(-1, keepdims=True))
                    out.append(np.einsum("hij,jhd->ihd", p / p.sum(-1, keepdims=True), it))
                return out

            fns["attention"] = {
                "ragged-mlir": lambda: module.w3_attention(q, k, v),
                "numpy loop": numpy_loop,
            }
            if torch is not None:
                tp = torch.from_numpy(pad).transpose(1, 2)  # [B, H, L, d]
                tm = torch.from_numpy(mask)[:, None, None, :]
                nt = torch.nested.nested_tensor(
                    [torch.from_numpy(i).transpose(0, 1) for i in items], layout=torch.jagged
                )  # [B, H(dense), L(ragged), d] is what NJT SDPA wants: [B, j, H, d] transposed
                njt = torch.nested.nested_tensor(
                    [torch.from_numpy(i) for i in items], layout=torch.jagged
                ).transpose(1, 2)
                fns["attention"]["torch padded SDPA"] = lambda: (
                    torch.nn.functional.scaled_dot_product_attention(tp, tp, tp, attn_mask=tm)
                )
                fns["attention"]["torch NJT SDPA"] = lambda: torch.nn.functional.scaled_dot_product_attention(
                    njt, njt, njt
                )
                del nt
        for op, variants in fns.items():
            yield wid, op, batch, lengths, util, variants


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["mnli", "squadv2"])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--quick", action="store_true", help="small sizes, 3 repeats: checks that everything runs"
    )
    args = ap.parse_args()
    d, heads, hd, ff = (384, 12, 32, 1536) if not args.quick else (32, 2, 8, 64)
    repeats = 3 if args.quick else args.repeats

    t0 = time.perf_counter()
    module = ragged_mlir.compile(programs(d, heads, hd, ff))
    print(
        f"# compile: {time.perf_counter() - t0:.2f} s; {platform.processor() or platform.machine()}, "
        f"torch threads {torch.get_num_threads() if torch else '-'}",
        flush=True,
    )
    rows = []
    for dataset in args.datasets:
        for wid, op, batch, lengths, util, variants in cases(module, dataset, args.seed, d, heads, hd, ff):
            t = timeit(variants, repeats)
            ours = t["ragged-mlir"][0]
            ratios = {k: v[0] / ours for k, v in t.items() if k != "ragged-mlir"}
            rec = {
                "workload": wid,
                "op": op,
                "dataset": dataset,
                "batch": batch,
                "util": round(util, 3),
                "max_len": int(lengths.max()),
                "tokens": int(lengths.sum()),
                "median_ms": {k: round(v[0] * 1e3, 3) for k, v in t.items()},
                "p90_ms": {k: round(v[1] * 1e3, 3) for k, v in t.items()},
                "ratio_vs_ragged_mlir": {k: round(r, 2) for k, r in ratios.items()},
            }
            rows.append(rec)
            print(json.dumps(rec), flush=True)
    print()
    print(
        "| workload | op | dataset | util | ragged-mlir ms | "
        + " | ".join(["vs numpy loop", "vs torch padded", "vs torch NJT"])
        + " |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        rat = r["ratio_vs_ragged_mlir"]
        pick = lambda prefix: next((f"{v:.2f}x" for k, v in rat.items() if k.startswith(prefix)), "-")  # noqa: E731
        print(
            f"| {r['workload']} | {r['op']} | {r['dataset']} | {r['util']:.2f} | "
            f"{r['median_ms']['ragged-mlir']:.2f} | {pick('numpy')} | {pick('torch padded')} | {pick('torch NJT')} |"
        )


if __name__ == "__main__":
    main()
