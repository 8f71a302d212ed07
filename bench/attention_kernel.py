"""Attention alone, per FLOP: ragged-mlir's CPU kernel (``kernels/attention.c``,
the default on CPU) against torch's CPU flash SDPA on the same per-item work,
IREE's codegen (``cpu_kernels=False``: its fused attention on the static
bucket ladder with AVX-512, the linalg buckets without) and FlexAttention on
packed tokens with a document mask (``torch.compile``d; forward only on CPU).

    python bench/attention_kernel.py            # MNLI B 32, SQuAD v2 B 8, RACE B 8, equal; d 32 and 64
    python bench/attention_kernel.py --quick    # MNLI and RACE, d 32
    python bench/attention_kernel.py --smoke    # tiny, seconds
    python bench/attention_kernel.py --backward # the gradient: against torch's SDPA backward

Every variant runs in one process, interleaved (each timed call after 30 ms
of untimed ones of the same variant), on 2 threads (torch and IREE alike). Printed per case: median ms, useful GFLOP/s (4 sum_b L_b^2 H d
per non-causal forward; half of the pairs when causal), the share of the
in-process GEMM peak (roofline attainment) and each variant's time over the
kernel's. One JSON line per case on stdout; progress on stderr.
Benchmarks are not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from common import gemm_peak_gflops, log, machine_info, settled_call, setup  # noqa: E402
from lengths import sample_lengths  # noqa: E402
from workloads import flex_document_mask  # noqa: E402

import ragged_mlir  # noqa: E402
from ragged_mlir import CompileOptions, RaggedArray  # noqa: E402

HEADS = 12
CASES = {  # dataset -> (batch, max length)
    "mnli": (32, 128),
    "squadv2": (8, 512),
    "race": (8, 512),
    "equal": (8, 512),
}


def _module(d: int, causal: bool) -> str:
    t = f"!ragged.tensor<?, [L], {HEADS}, {d}, f32>"
    s = f"!ragged.tensor<?, [L], {HEADS}, 1, f32>"
    flag = ", causal" if causal else ""
    return f"""
func.func @att(%q: {t}, %k: {t}, %v: {t}) -> {t} {{
  %o = ragged.attention %q, %k, %v {{scale = {d**-0.5} : f64{flag}}} : {t}
  return %o : {t}
}}
func.func @fwd(%q: {t}, %k: {t}, %v: {t}) -> ({t}, {s}) {{
  %o, %lse = ragged.attention %q, %k, %v {{scale = {d**-0.5} : f64{flag}}} : {t} lse {s}
  return %o, %lse : {t}, {s}
}}
func.func @grad(%q: {t}, %k: {t}, %v: {t}, %g: {t}, %o: {t}, %lse: {s}) -> ({t}, {t}, {t}) {{
  %dq, %dk, %dv = ragged.attention_grad %q, %k, %v, %g output(%o : {t}) lse(%lse : {s}) {{scale = {d**-0.5} : f64{flag}}} : {t}
  return %dq, %dk, %dv : {t}, {t}, {t}
}}"""


def _flex(lengths, causal: bool):
    """FlexAttention on packed tokens [1, H, N, d] with a document mask
    built once per batch (workloads.flex_document_mask), compiled; None (and
    why) where it cannot run here."""
    try:
        block = flex_document_mask(lengths, causal)
        if isinstance(block, str):
            return None, block
        from torch.nn.attention.flex_attention import flex_attention

        fn = torch.compile(flex_attention, dynamic=False)
        return (lambda q, k, v: fn(q, k, v, block_mask=block)), None
    except Exception as e:  # noqa: BLE001 (a peer that cannot run is reported, not fatal)
        return None, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"


def _time(fn) -> float:
    return settled_call(fn, 0.03)[1]


def _row(case: str, lengths, med: dict, flops: float, peak: float, errors: dict) -> dict:
    """One case's JSON line: median ms, GFLOP/s, roofline attainment and
    each variant's time over the kernel's."""
    return {
        "case": case,
        "lengths": {"batch": len(lengths), "sum": sum(lengths), "max": max(lengths)},
        "ms": {k: round(v * 1e3, 3) for k, v in med.items()},
        "gflops": {k: round(flops / v / 1e9, 1) for k, v in med.items()},
        "roofline": {k: round(flops / v / 1e9 / peak, 3) for k, v in med.items()},
        "speedup_vs": {k: round(v / med["kernel"], 2) for k, v in med.items() if k != "kernel"},
        "max_abs_err": errors,
    }


def run_backward(lengths, items, d, causal, kernel, codegen, rounds):
    """The gradient alone (from the forward's output and lse): our kernels,
    IREE's codegen and torch's SDPA backward per item. Returns (medians,
    max abs errors against fp64)."""
    rng = np.random.default_rng(1)
    grads = [rng.standard_normal(x.shape).astype(np.float32) for x in items[0]]
    arrays = [RaggedArray.from_list(x) for x in (*items, grads)]
    saved = {name: m.fwd(*arrays[:3]) for name, m in (("kernel", kernel), ("iree_codegen", codegen))}
    leaves = [[torch.from_numpy(x).transpose(0, 1)[None].requires_grad_() for x in t] for t in items]
    outs = [
        F.scaled_dot_product_attention(q, k, v, is_causal=causal) for q, k, v in zip(*leaves, strict=True)
    ]
    gt = [torch.from_numpy(x).transpose(0, 1)[None] for x in grads]

    def sdpa_backward():
        return [
            torch.autograd.grad(o, (q, k, v), g, retain_graph=True)
            for o, q, k, v, g in zip(outs, *leaves, gt, strict=True)
        ]

    variants = {
        "kernel": lambda: kernel.grad(*arrays, *saved["kernel"]),
        "iree_codegen": lambda: codegen.grad(*arrays, *saved["iree_codegen"]),
        "torch_sdpa_per_item": sdpa_backward,
    }
    ref = [[], [], []]
    for qkv, g in zip(zip(*items, strict=True), grads, strict=True):
        ts = [torch.from_numpy(x).double().transpose(0, 1)[None].requires_grad_() for x in qkv]
        o = F.scaled_dot_product_attention(*ts, is_causal=causal)
        for i, x in enumerate(torch.autograd.grad(o, ts, torch.from_numpy(g).double().transpose(0, 1)[None])):
            ref[i].append(x[0].transpose(0, 1).numpy())
    ref = [np.concatenate(r) for r in ref]
    errors = {
        name: max(float(np.abs(got.values - want).max()) for got, want in zip(fn(), ref, strict=True))
        for name, fn in list(variants.items())[:2]
    }
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            times[name].append(_time(fn))
    return {k: float(np.median(v)) for k, v in times.items()}, errors


def run_case(
    dataset: str,
    d: int,
    causal: bool,
    rounds: int,
    peak: float,
    seed: int,
    scale_len: float = 1.0,
    backward: bool = False,
):
    batch, max_len = CASES[dataset]
    max_len = max(1, int(max_len * scale_len))
    if dataset == "equal":
        lengths = np.full(batch, max_len // 2)
    else:
        lengths = np.minimum(sample_lengths(dataset, batch, seed=seed, max_len=max_len), max_len)
    lengths = [int(x) for x in lengths]
    rng = np.random.default_rng(seed)
    items = [[rng.standard_normal((n, HEADS, d)).astype(np.float32) for n in lengths] for _ in range(3)]
    arrays = [RaggedArray.from_list(x) for x in items]
    pairs = sum(n * (n + 1) // 2 if causal else n * n for n in lengths)
    flops = 4.0 * pairs * HEADS * d

    kernel = ragged_mlir.compile(_module(d, causal), options=CompileOptions(cpu_kernels=True))
    codegen = ragged_mlir.compile(_module(d, causal), options=CompileOptions(cpu_kernels=False))
    if backward:
        # Backward FLOPs: five products of the forward's two.
        med, errors = run_backward(lengths, items, d, causal, kernel, codegen, rounds)
        return _row(
            f"{dataset}/d{d}{'/causal' if causal else ''}/backward", lengths, med, 2.5 * flops, peak, errors
        )
    per_item = [[torch.from_numpy(x).transpose(0, 1)[None] for x in t] for t in items]  # [1, H, L, d]

    def sdpa():
        return [
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            for q, k, v in zip(*per_item, strict=True)
        ]

    packed = [
        torch.from_numpy(np.concatenate(t)).transpose(0, 1)[None].contiguous() for t in items
    ]  # [1, H, N, d]
    flex, flex_why = _flex(lengths, causal)

    variants = {
        "kernel": lambda: kernel.att(*arrays),
        "iree_codegen": lambda: codegen.att(*arrays),
        "torch_sdpa_per_item": sdpa,
    }
    if flex is not None:
        variants["flex_packed"] = lambda: flex(*packed)

    # Agreement with fp64 per item (the kernel and the peers).
    ref = np.concatenate(
        [
            F.scaled_dot_product_attention(*(t.double() for t in qkv), is_causal=causal)[0]
            .transpose(0, 1)
            .numpy()
            for qkv in zip(*per_item, strict=True)
        ]
    )
    errors = {
        "kernel": float(np.abs(kernel.att(*arrays).values - ref).max()),
        "iree_codegen": float(np.abs(codegen.att(*arrays).values - ref).max()),
    }
    if flex is not None:
        errors["flex_packed"] = float(np.abs(flex(*packed)[0].transpose(0, 1).numpy() - ref).max())
    for fn in variants.values():  # warm up
        fn()
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(rounds):  # interleaved
        for name, fn in variants.items():
            times[name].append(_time(fn))
    med = {k: float(np.median(v)) for k, v in times.items()}
    row = _row(f"{dataset}/d{d}{'/causal' if causal else ''}", lengths, med, flops, peak, errors)
    if flex_why:
        row["flex_packed"] = f"skipped: {flex_why}"
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true")
    mode.add_argument("--smoke", action="store_true")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--causal", action="store_true", help="causal attention as well")
    ap.add_argument("--backward", action="store_true", help="the gradient (from the saved lse) instead")
    args = ap.parse_args()
    setup(2)
    info = machine_info()
    peak = gemm_peak_gflops()
    log(f"host: {info.get('cpu')} ({info.get('isa')}); GEMM peak {peak:.0f} GFLOP/s on 2 threads")
    if args.smoke:
        plan, dims, rounds, scale = ["mnli"], [32], args.rounds or 1, 0.25
    elif args.quick:
        plan, dims, rounds, scale = ["mnli", "race"], [32], args.rounds or 5, 1.0
    else:
        plan, dims, rounds, scale = list(CASES), [32, 64], args.rounds or 10, 1.0
    rows = []
    for dataset in plan:
        for d in dims:
            for causal in [False, True] if args.causal else [False]:
                row = run_case(dataset, d, causal, rounds, peak, args.seed, scale, args.backward)
                row["host"] = {
                    "cpu": info.get("cpu"),
                    "isa": info.get("isa"),
                    "gemm_peak_gflops": round(peak, 1),
                }
                print(json.dumps(row), flush=True)
                log(
                    f"{row['case']:>16}: "
                    + "  ".join(f"{k} {v} ms ({row['roofline'][k]:.2f})" for k, v in row["ms"].items())
                )
                rows.append(row)


if __name__ == "__main__":
    main()
