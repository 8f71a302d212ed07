"""Scale: does the cost of a ragged batch stay proportional to its real work
as the batch grows, and when one item is much longer than the rest?

One encoder layer in the MiniLM shape (W4: d 384, 12 heads, FF 1536, random
weights), compiled once with ``torch.compile(backend="ragged",
dynamic=True)`` and called on NestedTensors, 2 threads:

* **Batch sweep.** MNLI lengths at B = 8 ... 4096. For each B: ms per 1000
  real tokens (flat within 1.2x is the target), roofline attainment (useful
  FLOP/s over the GEMM peak ``torch.mm`` reaches in this process), the same
  figures for torch's per-item loop (each item through the dense layer,
  flat by construction), and the Python function calls one compiled call
  makes (flat means no per-item host work).
* **One long document.** B short MNLI items plus one document of
  ``--long`` tokens. The mixed batch is compared with the two parts run
  separately: ``mix / (short + long)`` near 1 means the long item does not
  slow the short ones down (with length buckets, short items must not be
  padded towards the long one).

Every compiled call is checked against an fp64 per-item reference on a few
items, and a graph that falls back to eager fails the run. The compiled
function must not recompile across batch sizes.
Benchmarks are not tests: nothing here asserts a time.

    python bench/scale.py                   # B = 8 ... 4096, one 8192-token document among 32 short items
    python bench/scale.py --batches 8 64 512 --long 2048
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("RAGGED_FALLBACK", "0")  # a graph that falls back to eager is an error, not a number

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import gemm_peak_gflops, setup  # noqa: E402
from lengths import sample_lengths  # noqa: E402
from workloads import D, attend_item, encoder, make_encoder, useful_flops  # noqa: E402

from ragged_mlir.torch import NestedTensor  # noqa: E402


def timed(fn, reps: int) -> float:
    """Median seconds over ``reps`` calls (after the caller's warm-up)."""
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def python_calls(fn) -> int:
    """Python function calls made by one call of ``fn`` (``sys.setprofile``)."""
    count = 0

    def prof(frame, event, arg):
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count


def reps_for(tokens: int) -> int:
    """Calls to time: about 0.4 s of work at small B (a call of a few ms
    varies more), at least 3 at large B."""
    return max(3, min(40, 120_000 // max(tokens, 1)))


class Layer:
    """The compiled layer, its parameters and a counter of Dynamo graphs."""

    def __init__(self, options: dict | None = None):
        from ragged_mlir.torch import backend

        self.backend = backend
        self.enc, self.p = make_encoder(1)
        self.fn = torch.compile(lambda x: self.enc(x).values, backend="ragged", dynamic=True, options=options)

    def compiled(self) -> int:
        if self.backend.stats["fallbacks"]:
            raise SystemExit("a graph fell back to eager: its times would not be ragged-mlir's")
        return self.backend.stats["compiled"]

    def check(self, items: list[torch.Tensor], out: torch.Tensor, label: str) -> float:
        """Max error against fp64 on the first, the longest and the last items."""
        offsets = np.concatenate([[0], np.cumsum([t.shape[0] for t in items])])
        longest = int(np.argmax([t.shape[0] for t in items]))
        p64 = {k: t.double() for k, t in self.p.items()}
        err = 0.0
        for i in sorted({0, longest, len(items) - 1}):
            ref = encoder(p64, 1, items[i].double(), attend_item)
            got = out[offsets[i] : offsets[i + 1]].double()
            err = max(err, float((got - ref).abs().max() / ref.abs().max().clamp_min(1.0)))
        if err > 1e-4:
            raise SystemExit(f"{label}: compiled output differs from fp64 per item by {err:.2e}")
        return err


def per_item(layer: Layer, items: list[torch.Tensor]):
    return [encoder(layer.p, 1, t, attend_item) for t in items]


def batch_sweep(layer: Layer, batches: list[int], seed: int, peak: float) -> list[dict]:
    rows = []
    for b in batches:
        lengths = sample_lengths("mnli", b, seed=seed + b)
        items = [torch.randn(int(n), D) for n in lengths]
        x = NestedTensor(items)
        tokens = int(lengths.sum())
        before = layer.compiled()
        t0 = time.perf_counter()
        with torch.no_grad():
            out = layer.fn(x)
        first = time.perf_counter() - t0
        err = layer.check(items, out, f"B {b}")
        reps = reps_for(tokens)
        with torch.no_grad():
            # One untimed call after the fp64 check, whose torch threads
            # still hold the cores for a while after it returns.
            layer.fn(x)
            cpu0 = resource.getrusage(resource.RUSAGE_SELF)
            ours = timed(lambda: layer.fn(x), reps)
            cpu1 = resource.getrusage(resource.RUSAGE_SELF)
            loop = timed(lambda: per_item(layer, items), reps)
            calls = python_calls(lambda: layer.fn(x))
        flops = useful_flops("W4", lengths)
        rows.append(
            {
                "case": "batch",
                "B": b,
                "tokens": tokens,
                "max_len": int(lengths.max()),
                "ms": round(ours * 1e3, 2),
                "ms_per_1k_tokens": round(ours * 1e6 / tokens, 3),
                "per_item_ms_per_1k_tokens": round(loop * 1e6 / tokens, 3),
                "vs_per_item": round(loop / ours, 3),
                "attainment": round(flops / ours / 1e9 / peak, 3),
                # CPU time of all threads per call (less sensitive than wall
                # time to other load on the host), and the kernel's share of
                # it (page faults).
                "cpu_ms_per_1k_tokens": round(
                    (cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime) / reps * 1e6 / tokens, 3
                ),
                "sys_ms_per_1k_tokens": round((cpu1.ru_stime - cpu0.ru_stime) / reps * 1e6 / tokens, 3),
                "python_calls": calls,
                "first_call_s": round(first, 2),
                "compiles": layer.compiled() - before,
                "max_rel_err": float(f"{err:.2e}"),
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    return rows


def long_document(layer: Layer, short_b: int, long_len: int, seed: int, peak: float) -> dict:
    lengths = sample_lengths("mnli", short_b, seed=seed)
    shorts = [torch.randn(int(n), D) for n in lengths]
    doc = torch.randn(long_len, D)
    parts = {"short": shorts, "long": [doc], "mix": shorts[: short_b // 2] + [doc] + shorts[short_b // 2 :]}
    xs = {k: NestedTensor(v) for k, v in parts.items()}
    before = layer.compiled()
    errs = {}
    with torch.no_grad():
        for k, x in xs.items():
            errs[k] = layer.check(parts[k], layer.fn(x), f"long document, {k}")
        reps = 3
        t = {k: [] for k in xs}
        for _ in range(reps):  # interleaved
            for k, x in xs.items():
                t[k].append(timed(lambda x=x: layer.fn(x), 1))
        per_item(layer, parts["mix"])  # warm-up: the first call at a new length is slower
        loop = timed(lambda: per_item(layer, parts["mix"]), 1)
    ms = {k: statistics.median(v) * 1e3 for k, v in t.items()}
    mix_lengths = [t.shape[0] for t in parts["mix"]]
    row = {
        "case": "long document",
        "short_B": short_b,
        "long_len": long_len,
        "ms": {k: round(v, 2) for k, v in ms.items()},
        "mix_over_parts": round(ms["mix"] / (ms["short"] + ms["long"]), 3),
        "per_item_ms": round(loop * 1e3, 2),
        "vs_per_item": round(loop * 1e3 / ms["mix"], 3),
        "attainment": round(useful_flops("W4", mix_lengths) / (ms["mix"] / 1e3) / 1e9 / peak, 3),
        "compiles": layer.compiled() - before,
        "max_rel_err": float(f"{max(errs.values()):.2e}"),
    }
    print(json.dumps(row), flush=True)
    return row


def main(argv=None) -> int:
    setup()
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", nargs="+", type=int, default=[8, 32, 128, 512, 2048, 4096])
    ap.add_argument("--long", type=int, default=8192, help="tokens of the long document (0: skip)")
    ap.add_argument("--short-batch", type=int, default=32, help="short items beside the long document")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--options",
        type=json.loads,
        default=None,
        help='backend options as JSON, e.g. {"attention_buckets": 6}',
    )
    ap.add_argument("--out", type=Path, default=None, help="write the rows as JSON lines here")
    args = ap.parse_args(argv)
    peak = gemm_peak_gflops()
    print(f"GEMM peak {peak:.1f} GFLOP/s (torch.mm 2048^2 fp32, 2 threads)", flush=True)
    layer = Layer(args.options)
    rows = batch_sweep(layer, args.batches, args.seed, peak)
    if args.long:
        rows.append(long_document(layer, args.short_batch, args.long, args.seed, peak))
    batch = [r for r in rows if r["case"] == "batch"]
    print(
        "\n| B | tokens | ms | ms / 1k tokens | CPU ms / 1k (sys) | per-item loop ms / 1k | vs per item "
        "| attainment | Python calls |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in batch:
        print(
            f"| {r['B']} | {r['tokens']} | {r['ms']} | {r['ms_per_1k_tokens']} | "
            f"{r['cpu_ms_per_1k_tokens']} ({r['sys_ms_per_1k_tokens']}) | "
            f"{r['per_item_ms_per_1k_tokens']} | {r['vs_per_item']} | {r['attainment']} | {r['python_calls']} |"
        )
    if batch:
        per_tok = [r["ms_per_1k_tokens"] for r in batch]
        print(
            f"\ntime per token, largest / smallest over B = {batch[0]['B']}..{batch[-1]['B']}: "
            f"{max(per_tok) / min(per_tok):.2f} (target <= 1.2); recompiles after the first B: "
            f"{sum(r['compiles'] for r in batch[1:])}"
        )
        cpu = [r["cpu_ms_per_1k_tokens"] for r in batch]
        print(f"CPU time per token, largest / smallest: {max(cpu) / min(cpu):.2f}")
    for r in rows:
        if r["case"] == "long document":
            print(
                f"one {r['long_len']}-token document among {r['short_B']} MNLI items: mix {r['ms']['mix']} ms, "
                f"short alone {r['ms']['short']}, long alone {r['ms']['long']}, mix / (short + long) "
                f"{r['mix_over_parts']}; per-item loop {r['per_item_ms']} ms ({r['vs_per_item']}x ours)"
            )
    if args.out:
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
