"""The benchmark harness (bench/README.md): workloads W1-W5
on real and synthetic length distributions, every baseline in the same
process, interleaved, and the metrics of the spec.

    python bench/harness.py            # everything that fits in ~15 min on 2 cores
    python bench/harness.py --quick    # representative subset, <= ~3 min
    python bench/harness.py --smoke    # tiny, seconds: checks that the harness runs

Prints one JSON line per case on stdout (progress goes to stderr), writes
them to bench/results/<mode>.jsonl, a Markdown summary
(bench/results/summary.md; summary-<mode>.md for --quick) and a plot of the
speedup against the padding utilisation (speedup_vs_util.png), and ends
with one JSON summary line (medians over the datasets that ran).

Benchmarks are not tests: nothing here asserts a time. See bench/README.md
for what every variant and metric means and how memory is measured.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "samples"))

import torch  # noqa: E402
import workloads as W  # noqa: E402
from common import (  # noqa: E402
    MEM_METHOD,
    SETTLE_S,
    _timed,
    copy_bandwidth_gbs,
    gemm_peak_gflops,
    log,
    machine_info,
    measured_call,
    settled_call,
    setup,
)
from lengths import sample_lengths  # noqa: E402

from ragged_mlir.torch import backend as ragged_backend  # noqa: E402

REAL = ("mnli", "squadv2", "race")
SYNTH = ("uniform-half", "uniform-0.6", "zipf", "equal")
ALL_DATASETS = REAL + SYNTH
TEXT = "stdlib-text"  # W5 on real sentences (samples/minilm_embeddings.stdlib_sentences)


# -- one case ----------------------------------------------------------------------------------


def _graphs() -> int:
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def _err(got: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    d = (got.detach().double() - ref).abs().max().item() if got.numel() else 0.0
    scale = ref.abs().max().item() if ref.numel() else 1.0
    return d, d / scale if scale else d


class Clock:
    """The run's deadline."""

    def __init__(self, budget_s: float):
        self.start = time.perf_counter()
        self.budget = budget_s

    def left(self) -> float:
        return self.budget - (time.perf_counter() - self.start)


def run_case(variants: list[W.Variant], reference: Callable, comp: W.Compiled, opts, clock: Clock) -> dict:
    """Warm-up (first call, peak memory, error), then rounds A B C ... A B C ..."""
    rec: dict[str, Any] = {
        "first_call_s": {},
        "graphs_in_first_call": {},
        "peak_mem_mib": {},
        "max_abs_err": {},
        "max_rel_err": {},
        "skipped": {},
    }
    active: list[W.Variant] = []
    ref = reference()
    fallbacks0 = ragged_backend.stats["fallbacks"]
    steady: dict[str, float] = {}
    for v in variants:
        if opts.only is not None and v.name not in opts.only:
            rec["skipped"][v.name] = opts.only_reason
            continue
        if v.run is None:
            rec["skipped"][v.name] = v.skip
            continue
        g0, c0 = _graphs(), ragged_backend.stats["compiled"]
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                if v.compiled:
                    out, first = _timed(v.run)
                    _, steady[v.name], mem = measured_call(v.run)
                else:
                    out, first, mem = measured_call(v.run)
                    steady[v.name] = first
            msgs = [str(w.message) for w in caught if "ragged backend" in str(w.message)]
            if msgs:
                rec.setdefault("warnings", {})[v.name] = msgs[0][:300]
        except Exception as e:  # a baseline that cannot run this case (e.g. inductor + NJT)
            reason = f"{type(e).__name__}: {str(e).splitlines()[0][:240] if str(e) else ''}"
            rec["skipped"][v.name] = f"failed: {reason}"
            if v.key:
                comp.errors[v.key] = rec["skipped"][v.name]
            log(f"    {v.name}: {rec['skipped'][v.name]}")
            continue
        rec["first_call_s"][v.name] = round(first, 4)
        if v.compiled:
            rec["graphs_in_first_call"][v.name] = _graphs() - g0
            if v.compiled == "ragged":
                rec.setdefault("ragged_compiles_in_first_call", {})[v.name] = (
                    ragged_backend.stats["compiled"] - c0
                )
        rec["peak_mem_mib"][v.name] = None if mem is None else round(mem, 1)
        if v.out is not None:
            a, r = _err(v.out(out), ref)
            rec["max_abs_err"][v.name], rec["max_rel_err"][v.name] = float(f"{a:.3g}"), float(f"{r:.3g}")
        del out
        active.append(v)
    rec["ragged_fallbacks"] = ragged_backend.stats["fallbacks"] - fallbacks0

    # Variants slower than opts.slow_s per call keep their one warm-up time
    # (runs = 1, listed in "single_run"), except ragged-mlir and the strong
    # padded baseline, which always get the rounds.
    strong = "padded_sdpa" if any(v.name == "padded_sdpa" for v in active) else "padded"
    cap = opts.slow_s * (3 if opts.layers >= 6 else 1)
    timed = [v for v in active if v.name in (W.OURS, strong) or steady[v.name] <= cap]
    times: dict[str, list[float]] = {v.name: [] for v in timed}
    single = [v.name for v in active if v not in timed]
    for v in active:
        if v not in timed:  # one warm call (an eager first call pays per-shape set-up)
            times[v.name] = [steady[v.name]] if v.compiled else [_timed(v.run)[1]]
    if single:
        rec["single_run"] = single
    # Repeats: as many rounds as the case budget allows, within [rmin, rmax],
    # and never past the run's deadline (then at least one round).
    round_s = sum(2 * steady[v.name] + SETTLE_S for v in timed) or 1e-3
    fit = int(min(opts.case_budget, clock.left() - opts.reserve) // round_s)
    reps = (
        max(opts.rmin, min(opts.rmax, fit))
        if clock.left() - opts.reserve > opts.rmin * round_s
        else max(1, fit)
    )
    for r in range(reps):
        k = r % len(timed) if timed else 0
        for v in timed[k:] + timed[:k]:  # rotate the order: no variant always runs first
            _, dt = settled_call(v.run)
            times[v.name].append(dt)
    rec["runs"] = reps
    rec["median_ms"] = {k: round(float(np.median(t)) * 1e3, 3) for k, t in times.items() if t}
    rec["p90_ms"] = {k: round(float(np.percentile(t, 90)) * 1e3, 3) for k, t in times.items() if t}
    rec["min_ms"] = {k: round(float(np.min(t)) * 1e3, 3) for k, t in times.items() if t}
    rec["times_ms"] = {k: [round(x * 1e3, 2) for x in t] for k, t in times.items()}
    return rec


def metrics(
    rec: dict, workload: str, lengths: np.ndarray, layers: int, gemm_peak: float, copy_bw: float
) -> dict:
    """S, S*, attainment, ratios, overhead, GFLOP/s, roofline and memory ratio of one case.

    Roofline attainment is useful FLOP/s over the GEMM peak measured in this
    process; W1 (segment reductions, memory-bound) is measured instead in
    useful bytes per second over this process's copy bandwidth."""
    med = rec["median_ms"]
    ours = med.get(W.OURS)
    s_star = W.flop_ceiling(workload, lengths)
    rec["flop_ceiling"] = round(s_star, 3)
    strong = "padded_sdpa" if "padded_sdpa" in med else "padded"
    rec["strong_baseline"] = strong
    useful = W.useful_flops(workload, lengths, layers)
    rec["useful_gflop"] = round(useful / 1e9, 4)
    if not ours:
        return rec
    if rec.get("ragged_fallbacks"):
        # Part of the model ran eagerly: its time is not ragged-mlir's.
        rec["note"] = f"{rec['ragged_fallbacks']} graph(s) fell back to eager: no speedup reported"
        return rec
    if strong in med:
        s = med[strong] / ours
        rec["speedup"] = round(s, 3)
        rec["ceiling_attainment"] = round(s / s_star, 3)
    rec["ratio_vs_ragged_mlir"] = {k: round(med[k] / ours, 3) for k in W.PEERS if k in med}
    peers = {k: med[k] for k in W.PEERS if k in med}
    if peers:
        best = min(peers, key=peers.get)
        rec["best_peer"] = best
        rec["ratio_to_best_peer"] = round(peers[best] / ours, 3)
    mins = rec.get("min_ms", {})
    if mins.get(W.OURS):
        if strong in mins:
            rec["speedup_min"] = round(mins[strong] / mins[W.OURS], 3)
        pm = {k: mins[k] for k in W.PEERS if k in mins}
        if pm:
            rec["ratio_to_best_peer_min"] = round(min(pm.values()) / mins[W.OURS], 3)
    if "ragged_mlir_equal" in med:
        rec["ragged_overhead"] = round(ours / med["ragged_mlir_equal"], 3)
        eq = W.equal_lengths(lengths)
        f_r, f_e = W.useful_flops(workload, lengths, layers), W.useful_flops(workload, eq, layers)
        rec["ragged_overhead_flop_normalized"] = round((ours / f_r) / (med["ragged_mlir_equal"] / f_e), 3)
    if "ragged_mlir_scores" in med:
        # > 1: the opt-in materialised attention scores are faster.
        rec["scores_speedup"] = round(ours / med["ragged_mlir_scores"], 3)
    if "ragged_mlir_padded" in med and strong in med:
        # > 1: on the same padded work, ragged-mlir's code is slower than torch's.
        rec["padded_work_ratio"] = round(med["ragged_mlir_padded"] / med[strong], 3)
    rec["useful_gflops"] = {
        k: round(useful / (t / 1e3) / 1e9, 2) for k, t in med.items() if k in W.PEERS or k == W.OURS
    }
    rec["gemm_peak_share"] = round(useful / (ours / 1e3) / 1e9 / gemm_peak, 3)
    if workload == "W1":
        moved = W.useful_bytes(workload, lengths, rec.get("op"))
        rec["useful_gb_s"] = {
            k: round(moved / (t / 1e3) / 1e9, 2) for k, t in med.items() if k in W.PEERS or k == W.OURS
        }
        rec["roofline"] = {k: round(v / copy_bw, 3) for k, v in rec["useful_gb_s"].items()}
    else:
        rec["roofline"] = {k: round(v / gemm_peak, 3) for k, v in rec["useful_gflops"].items()}
    if W.OURS in rec["roofline"]:
        best_roof = (
            max((rec["roofline"][k], k) for k in rec["roofline"] if k != W.OURS)
            if len(rec["roofline"]) > 1
            else None
        )
        rec["roofline_ours"] = rec["roofline"][W.OURS]
        if best_roof:
            rec["roofline_best_peer"], rec["roofline_best_peer_name"] = best_roof
    fresh = rec.get("peak_mem_fresh_mib") or {}
    base = fresh.get(strong) or fresh.get("padded")
    if fresh.get(W.OURS) is not None and base:
        rec["peak_mem_ratio_vs_padded"] = round(fresh[W.OURS] / base, 3)
    return rec


# -- inputs ------------------------------------------------------------------------------------


def lengths_for(dataset: str, batch: int, seed: int, max_len: int) -> np.ndarray:
    return np.maximum(np.asarray(sample_lengths(dataset, batch, seed, max_len=max_len)), 1).astype(np.int64)


def rand_items(lengths, trailing: tuple, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn((int(n),) + trailing, generator=g) for n in lengths]


class Workloads:
    """Models and compiled callables, built once per workload and reused across datasets."""

    def __init__(self, opts):
        self.opts = opts
        self.comp: dict[tuple, W.Compiled] = {}
        self.encoders: dict[int, tuple] = {}
        self._minilm = None
        self.w2_weight = torch.randn(W.FF, W.D, generator=torch.Generator().manual_seed(7)) / W.D**0.5

    def compiled(self, key: tuple) -> W.Compiled:
        return self.comp.setdefault(key, W.Compiled())

    def encoder(self, layers: int):
        if layers not in self.encoders:
            self.encoders[layers] = W.make_encoder(layers, seed=layers)
        return self.encoders[layers]

    def minilm(self):
        if self._minilm is None:
            from ragged_bert import load_minilm

            model, tokenize = load_minilm()
            p = {k: t.detach() for k, t in model.bert.state_dict().items()}
            self._minilm = (model, tokenize, p)
        return self._minilm

    def build(self, case: dict, override: np.ndarray | None = None):
        """(variants, reference, lengths) of a case; ``override``: other lengths
        (a tiny warm-up batch with the same compiled callables)."""
        wid, ds, b, seed = case["workload"], case["dataset"], case["batch"], self.opts.seed
        if override is not None:
            lengths = np.asarray(override)
            if wid == "W5":
                ds = "synthetic"
        elif wid == "W5" and ds == TEXT:
            from minilm_embeddings import stdlib_sentences

            model, tokenize, p = self.minilm()
            ids = list(tokenize(stdlib_sentences(b))[0].unbind())
            lengths = np.array([len(t) for t in ids])
        else:
            lengths = lengths_for(ds, b, seed, self.opts.max_len)
        eq = W.equal_lengths(lengths)
        comp = self.compiled((wid, case.get("op"), case.get("layers")))
        if wid == "W1":
            v, ref = W.w1_variants(
                case["op"], rand_items(lengths, (W.D,), seed), rand_items(eq, (W.D,), seed + 1), comp
            )
        elif wid == "W2":
            v, ref = W.w2_variants(
                rand_items(lengths, (W.D,), seed), rand_items(eq, (W.D,), seed + 1), comp, self.w2_weight
            )
        elif wid == "W3":
            qkv = [rand_items(lengths, (W.HEADS, W.HD), seed + i) for i in range(3)]
            eqkv = [rand_items(eq, (W.HEADS, W.HD), seed + 10 + i) for i in range(3)]
            v, ref = W.w3_variants(qkv, eqkv, comp)
        elif wid == "W4":
            enc, p = self.encoder(case["layers"])
            v, ref = W.w4_variants(
                case["layers"],
                rand_items(lengths, (W.D,), seed),
                rand_items(eq, (W.D,), seed + 1),
                comp,
                enc,
                p,
            )
        else:
            model, _, p = self.minilm()
            if ds != TEXT:
                ids = W.synthetic_ids(np.minimum(lengths, 512), seed)
                lengths = np.array([len(t) for t in ids])
                eq = W.equal_lengths(lengths)
            v, ref = W.w5_variants(ids, W.synthetic_ids(eq, seed + 1), comp, model, p)
        return v, ref, lengths


# -- peak memory in a fresh process ----------------------------------------------------------

#: Variants whose peak memory is also measured in a fresh process (the
#: headline ratio): the strong padded baseline and ragged-mlir.
FRESH_MEM = ("padded_sdpa", "padded", W.OURS)


def mem_child(spec: dict) -> dict:
    """Runs in a fresh process: every FRESH_MEM variant of the case is warmed
    up (and compiled) on a tiny batch, then its first call on the real batch
    is measured. Unlike the in-process numbers this counts memory that a
    runtime keeps after a call and reuses (IREE's worker memory), because
    nothing bigger ran before in this process."""

    class Opts:
        seed, max_len = spec.pop("seed"), spec.pop("max_len")

    work = Workloads(Opts)
    variants, _, _ = work.build(spec)
    tiny, _, _ = work.build(spec, override=np.array([2, 3]))
    tiny = {v.name: v for v in tiny}
    out: dict[str, Any] = {}
    with torch.no_grad():
        for v in variants:
            if v.name not in FRESH_MEM or v.run is None:
                continue
            tiny[v.name].run()
            _, dt, mem = measured_call(v.run)
            out[v.name] = None if mem is None else round(mem, 1)
    return out


def fresh_memory(case: dict, opts) -> dict:
    spec = json.dumps(
        {k: case[k] for k in ("workload", "dataset", "batch", "layers", "op") if k in case}
        | {"seed": opts.seed, "max_len": opts.max_len}
    )
    try:
        r = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--mem-child", spec],
            capture_output=True,
            text=True,
            timeout=240,
        )
        lines = [line for line in r.stdout.splitlines() if line.startswith("{")]
        if r.returncode or not lines:
            return {"error": (r.stderr.strip().splitlines() or ["no output"])[-1][:200]}
        return json.loads(lines[-1])
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:200]}


# -- recompiles over fresh draws ---------------------------------------------------------------


def recompiles(
    work: Workloads, layers: int, dataset: str, batch: int, draws: int, with_inductor: bool
) -> dict:
    """Fresh length draws through the already-compiled W4 model: how many new
    graphs (Dynamo) and IREE compiles (ragged backend) they cause."""
    enc, p = work.encoder(layers)
    comp = work.compiled(("W4", None, layers))
    rg = comp.fns.get("ragged")
    out: dict[str, Any] = {"layers": layers, "dataset": dataset, "batch": batch, "draws": draws}
    if rg is None:
        return out
    from ragged_mlir.torch import NestedTensor

    g0, c0, t0 = _graphs(), ragged_backend.stats["compiled"], time.perf_counter()
    firsts, seconds = [], []
    with torch.no_grad():
        for i in range(draws):
            lengths = lengths_for(dataset, batch, 1000 + i, work.opts.max_len)
            x = NestedTensor(rand_items(lengths, (W.D,), 1000 + i))
            firsts.append(_timed(lambda: rg(x))[1])  # a new shape
            seconds.append(_timed(lambda: rg(x))[1])  # the same shape again
    out["ragged_mlir"] = {
        "dynamo_graphs": _graphs() - g0,
        "iree_compiles": ragged_backend.stats["compiled"] - c0,
        "median_first_call_s": round(float(np.median(firsts)), 4),
        "median_second_call_s": round(float(np.median(seconds)), 4),
        # What a new shape costs on top of a call: guards, no recompile (the warm compile time).
        "new_shape_overhead_s": round(float(np.median(np.subtract(firsts, seconds))), 4),
        "seconds": round(time.perf_counter() - t0, 2),
    }
    ind = comp.fns.get("inductor_padded")
    if with_inductor and ind is not None and "inductor_padded" not in comp.errors:
        g0, t0 = _graphs(), time.perf_counter()
        with torch.no_grad():
            for i in range(draws):
                lengths = lengths_for(dataset, batch, 1000 + i, work.opts.max_len)
                xp, m = W.pad(rand_items(lengths, (W.D,), 1000 + i))
                x = xp
                for mod in ind:
                    x = mod(x, m[:, None, None, :])
        out["inductor_padded"] = {
            "dynamo_graphs": _graphs() - g0,
            "seconds": round(time.perf_counter() - t0, 2),
        }
    return out


# -- plans -------------------------------------------------------------------------------------


def batch_for(workload: str, dataset: str, smoke: bool) -> int:
    if smoke:
        return 4
    if workload == "W1":
        return 64
    if workload in ("W4", "W5") and dataset in ("squadv2", "race"):
        return 8
    return 32


def plan(mode: str, datasets: list[str] | None, workloads: list[str] | None = None) -> list[dict]:
    """Cases in priority order (the deadline cuts from the end)."""

    def cases(wid, dss, **kw):
        return [dict(workload=wid, dataset=d, batch=batch_for(wid, d, mode == "smoke"), **kw) for d in dss]

    if mode == "smoke":
        dss = datasets or ["uniform-half"]
        out = []
        for wid in workloads or ["W4"]:
            out += (
                cases("W4", dss, layers=1)
                if wid == "W4"
                else cases("W5", [TEXT])
                if wid == "W5"
                else [c for op in ("sum", "max", "softmax") for c in cases("W1", dss, op=op)]
                if wid == "W1"
                else cases(wid, dss)
            )
        return out
    if mode == "quick":
        dss = datasets or ["mnli", "squadv2"]
        out = cases("W4", dss, layers=1) + cases("W4", dss[:1], layers=6)
    else:
        # First every workload on the real datasets and the all-equal control,
        # then the other synthetic laws, then more six-layer and W5 cases.
        dss = datasets or list(ALL_DATASETS)
        core = [d for d in dss if d in REAL + ("equal",)]
        extra = [d for d in dss if d not in core]
        out = (
            cases("W4", core, layers=1)
            + cases("W4", [d for d in ("mnli",) if d in dss], layers=6)
            + cases("W5", [TEXT])
            + cases("W3", core)
            + cases("W2", core)
            + [c for op in ("sum", "max", "softmax") for c in cases("W1", core, op=op)]
            + cases("W4", extra, layers=1)
            + cases("W3", extra)
            + cases("W2", extra)
            + cases("W4", [d for d in ("squadv2", "race", "equal") if d in dss], layers=6)
            + cases("W5", [d for d in REAL if d in dss])
            + [c for op in ("sum", "max", "softmax") for c in cases("W1", extra, op=op)]
        )
    return [c for c in out if not workloads or c["workload"] in workloads]


#: Variants left out of --quick (slow peers and the padded-batch diagnostic);
#: the full run has them all.
QUICK_ONLY = {
    1: {
        "padded",
        "padded_sdpa",
        "bucketed",
        "danling",
        "inductor_padded",
        "ragged_mlir",
        "ragged_mlir_equal",
    },
    6: {"padded_sdpa", "bucketed", "danling", "ragged_mlir", "ragged_mlir_equal"},
}
SMOKE_ONLY = {
    "padded",
    "padded_sdpa",
    "bucketed",
    "per_item",
    "njt",
    "danling",
    "ragged_mlir",
    "ragged_mlir_padded",
    "ragged_mlir_equal",
}


# -- reports -----------------------------------------------------------------------------------


def median(xs) -> float | None:
    xs = [x for x in xs if x is not None]
    return round(float(np.median(xs)), 3) if xs else None


def geomean(xs) -> float | None:
    xs = [x for x in xs if x]
    return round(float(np.exp(np.mean(np.log(xs)))), 3) if xs else None


def summarize(rows: list[dict], extra: dict) -> dict:
    w4 = [r for r in rows if r.get("workload") == "W4" and "median_ms" in r]
    w4_6 = [r for r in w4 if r.get("layers") == 6]
    cold6 = [
        r["first_call_s"].get(W.OURS) for r in w4_6 if r.get("ragged_compiles_in_first_call", {}).get(W.OURS)
    ]
    rc = [x for x in extra.get("recompiles", []) if "ragged_mlir" in x]
    # Warm compile: what the first call on a new shape costs on top of a steady call.
    warm6 = [
        x["ragged_mlir"]["new_shape_overhead_s"]
        for x in rc
        if x["layers"] == 6 and not x["ragged_mlir"]["iree_compiles"]
    ]
    warm6 += [
        r["first_call_s"][W.OURS] - r["median_ms"][W.OURS] / 1e3
        for r in w4_6
        if r.get("ragged_compiles_in_first_call", {}).get(W.OURS) == 0 and W.OURS in r["median_ms"]
    ]
    out = {
        "summary": True,
        "datasets": sorted({r["dataset"] for r in w4}),
        "w4_cases": len(w4),
        "w4_ceiling_attainment": median(r.get("ceiling_attainment") for r in w4),
        # Useful FLOP/s over the in-process GEMM peak.
        "w4_roofline_attainment": median(r.get("roofline_ours") for r in w4),
        "w4_speedup_vs_padded_sdpa": median(r.get("speedup") for r in w4),
        "w4_ratio_to_best_peer": median(r.get("ratio_to_best_peer") for r in w4),
        # The same from the fastest run of each variant (less sensitive to other load on the machine).
        "w4_speedup_min": median(r.get("speedup_min") for r in w4),
        "w4_ratio_to_best_peer_min": median(r.get("ratio_to_best_peer_min") for r in w4),
        "ragged_overhead": median(r.get("ragged_overhead") for r in w4),
        "ragged_overhead_flop_normalized": median(r.get("ragged_overhead_flop_normalized") for r in w4),
        # Dynamo graphs built (each one means an IREE compile or a cache hit) over the fresh draws.
        "recompiles": sum(x["ragged_mlir"]["dynamo_graphs"] for x in rc) if rc else None,
        "iree_recompiles": sum(x["ragged_mlir"]["iree_compiles"] for x in rc) if rc else None,
        "recompile_draws": sum(x["draws"] for x in rc) if rc else 0,
        "cold_compile_s_6_layers": round(cold6[0], 2) if cold6 else None,
        "warm_compile_s_6_layers": round(max(warm6[0], 0.0), 3) if warm6 else None,
        "peak_mem_ratio_vs_padded": median(r.get("peak_mem_ratio_vs_padded") for r in w4),
        "max_rel_err_ragged_mlir": max(
            (r["max_rel_err"].get(W.OURS, 0) for r in rows if "max_rel_err" in r), default=None
        ),
    }
    by_w: dict[str, dict] = {}
    for r in rows:
        if "median_ms" not in r:
            continue
        key = (
            r["workload"]
            + (f"-{r['layers']}L" if r.get("layers") else "")
            + (f"-{r['op']}" if r.get("op") else "")
        )
        by_w.setdefault(key, []).append(r)
    out["geomean_over_datasets"] = {
        k: {
            "speedup": geomean(r.get("speedup") for r in rs),
            "ceiling_attainment": geomean(r.get("ceiling_attainment") for r in rs),
            "ratio_to_best_peer": geomean(r.get("ratio_to_best_peer") for r in rs),
            "roofline": geomean(r.get("roofline_ours") for r in rs),
            "cases": len(rs),
        }
        for k, rs in by_w.items()
    }
    out.update({k: v for k, v in extra.items() if k != "recompiles"})
    return out


def _case_name(r: dict) -> str:
    """'W4 6L', 'W1 softmax', 'W3': a case's workload as the tables show it."""
    return (
        r["workload"]
        + (f" {r['layers']}L" if r.get("layers") else "")
        + (f" {r['op']}" if r.get("op") else "")
    )


def _fmt(x, spec=".2f", none="–"):
    return none if x is None else format(x, spec)


def write_markdown(path: Path, rows: list[dict], summary: dict, info: dict, extra: dict) -> None:
    cases = [r for r in rows if "median_ms" in r]
    lines = [
        f"# Benchmark summary ({summary.get('mode')})",
        "",
        f"{info['cpu']} ({', '.join(info['isa'])}; torch capability {info['torch_cpu_capability']}), "
        f"{info['cores']} cores, torch threads {info['torch_threads']}, commit {info['commit']}, "
        f"torch {info['versions'].get('torch')}. Dense GEMM peak (torch.mm 2048², fp32): "
        f"{summary.get('gemm_peak_gflops')} GFLOP/s; copy bandwidth (read + write): "
        f"{summary.get('copy_bandwidth_gbs')} GB/s. Load average at start/end: "
        f"{summary.get('load_start')} / {summary.get('load_end')} (other processes share the cores: "
        f"timings are noisy). Wall time {summary.get('elapsed_s')} s.",
        "",
        "S = T(strong padded baseline: padded SDPA with a boolean key-padding mask, or the masked padded op "
        "for W1/W2) / T(ragged-mlir); S* = FLOP ceiling; vs best = T(fastest of baselines 1-8) / T(ragged-mlir) "
        "(> 1: ragged-mlir is faster); overhead = T(ragged) / T(all-equal lengths, same tokens); "
        "padded work = T(ragged-mlir fed the padded batch) / T(strong padded baseline) (> 1: its code is "
        "slower than torch's on the same work); mem = peak memory of ragged-mlir / strong padded baseline; "
        "roofline = useful FLOP/s (real tokens only) / the GEMM peak above, or for W1 useful bytes/s / the "
        "copy bandwidth above, of ragged-mlir and of the peer with the highest.",
        "",
        "| workload | dataset | B | util | S* | ragged-mlir ms | padded ms | S | S/S* | best peer | vs best | "
        "roofline ours / best peer | overhead | padded work | mem | rel err | runs |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in cases:
        name = _case_name(r)
        med = r["median_ms"]
        lines.append(
            f"| {name} | {r['dataset']} | {r['batch']} | {r['util']:.2f} | {r['flop_ceiling']:.2f} | "
            f"{_fmt(med.get(W.OURS), '.1f')} | {_fmt(med.get(r['strong_baseline']), '.1f')} | {_fmt(r.get('speedup'))} | "
            f"{_fmt(r.get('ceiling_attainment'))} | {r.get('best_peer', '–')} | {_fmt(r.get('ratio_to_best_peer'))} | "
            f"{_fmt(r.get('roofline_ours'))} / {_fmt(r.get('roofline_best_peer'))} | "
            f"{_fmt(r.get('ragged_overhead'))} | {_fmt(r.get('padded_work_ratio'))} | "
            f"{_fmt(r.get('peak_mem_ratio_vs_padded'))} | {_fmt(r['max_rel_err'].get(W.OURS), '.1e')} | {r['runs']} |"
        )
    names = [n for n in W.ORDER if any(n in r["median_ms"] for r in cases)]

    def variant_table(title: str, key: str, spec: str) -> list[str]:
        rows = [
            "",
            title,
            "",
            "| workload | dataset | " + " | ".join(names) + " |",
            "|---|---|" + "---|" * len(names),
        ]
        for r in cases:
            cells = " | ".join(_fmt(r.get(key, {}).get(n), spec) for n in names)
            rows.append(f"| {_case_name(r)} | {r['dataset']} | {cells} |")
        return rows

    lines += variant_table("## Median ms of every variant", "median_ms", ".1f")
    lines += variant_table(
        "## Roofline attainment of every variant (useful FLOP/s / GEMM peak; W1: useful bytes/s / copy bandwidth)",
        "roofline",
        ".2f",
    )
    lines += variant_table(
        "## Peak memory of one call (MiB above the resident set before it)", "peak_mem_mib", ".0f"
    )
    fresh = [r for r in cases if isinstance(r.get("peak_mem_fresh_mib"), dict)]
    if fresh:
        lines += [
            "",
            "Fresh process (first call on the real batch after a tiny warm-up; counts memory a runtime keeps "
            "between calls, which the in-process numbers above miss for ragged-mlir):",
            "",
        ]
        for r in fresh:
            name = r["workload"] + (f" {r['layers']}L" if r.get("layers") else "")
            lines.append(
                f"- {name} / {r['dataset']}: "
                + ", ".join(
                    f"{k} {v} MiB" if k != "error" else f"error: {v}"
                    for k, v in r["peak_mem_fresh_mib"].items()
                )
            )
    lines += [
        "",
        "## Geomean over datasets",
        "",
        "| workload | cases | S | S/S* | vs best peer | roofline |",
        "|---|---|---|---|---|---|",
    ]
    for k, g in summary.get("geomean_over_datasets", {}).items():
        lines.append(
            f"| {k} | {g['cases']} | {_fmt(g['speedup'])} | {_fmt(g['ceiling_attainment'])} | "
            f"{_fmt(g['ratio_to_best_peer'])} | {_fmt(g.get('roofline'))} |"
        )
    lines += ["", "## Compile time and recompiles", ""]
    lines.append(
        f"- ragged-mlir, W4 6 layers: cold (first call, compiles) {summary.get('cold_compile_s_6_layers')} s; "
        f"warm (extra time of the first call on a new shape, no recompile) "
        f"{summary.get('warm_compile_s_6_layers')} s."
    )
    for r in cases:
        firsts = {k: v for k, v in r["first_call_s"].items() if r.get("graphs_in_first_call", {}).get(k)}
        if firsts:
            name = (
                r["workload"]
                + (f" {r['layers']}L" if r.get("layers") else "")
                + (f" {r['op']}" if r.get("op") else "")
            )
            lines.append(
                f"- {name} / {r['dataset']}: first calls that compiled: "
                + ", ".join(f"{k} {v:.1f} s" for k, v in firsts.items())
            )
    for x in extra.get("recompiles", []):
        lines.append(
            f"- recompiles over {x['draws']} fresh {x['dataset']} draws (B={x['batch']}, W4 {x['layers']} "
            f"layer(s)): " + "; ".join(f"{k}: {json.dumps(v)}" for k, v in x.items() if isinstance(v, dict))
        )
    skipped = {}
    for r in rows:
        for k, why in r.get("skipped", {}).items():
            skipped.setdefault(f"{k}: {why}", []).append(
                f"{r['workload']}{r.get('layers') or ''} {r['dataset']}"
            )
        if "error" in r:
            skipped.setdefault(f"case failed: {r['error']}", []).append(f"{r['workload']} {r['dataset']}")
    for why in extra.get("not_run", []):
        skipped.setdefault(why, [])
    if skipped:
        lines += ["", "## Not run", ""]
        for why, where in skipped.items():
            lines.append(
                f"- {why}"
                + (
                    f" ({len(where)} cases: {', '.join(where[:6])}{', …' if len(where) > 6 else ''})"
                    if where
                    else ""
                )
            )
    lines += [
        "",
        f"Peak memory method: {MEM_METHOD}. Process peak RSS (ru_maxrss): {summary.get('process_peak_rss_mib')} MiB.",
        "",
    ]
    path.write_text("\n".join(lines))


def write_plot(path: Path, rows: list[dict]) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"no plot: {e} (pip install matplotlib==3.11.2)"
    cases = [r for r in rows if r.get("speedup") is not None]
    if not cases:
        return "no plot: no case with a speedup"
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.8))
    markers = {"W1": "v", "W2": "s", "W3": "^", "W4": "o", "W5": "*"}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    groups = sorted({(r["workload"], r.get("layers"), r.get("op")) for r in cases}, key=str)
    for gi, g in enumerate(groups):
        rs = [r for r in cases if (r["workload"], r.get("layers"), r.get("op")) == g]
        label = g[0] + (f" {g[1]}L" if g[1] else "") + (f" {g[2]}" if g[2] else "")
        c = colors[gi % len(colors)]
        u = [r["util"] for r in rs]
        axes[0].scatter(u, [r["speedup"] for r in rs], marker=markers.get(g[0], "o"), color=c, label=label)
        axes[0].scatter(
            u,
            [r["flop_ceiling"] for r in rs],
            marker=markers.get(g[0], "o"),
            facecolors="none",
            edgecolors=c,
            alpha=0.6,
        )
        axes[1].scatter(
            u,
            [r.get("ratio_to_best_peer") or np.nan for r in rs],
            marker=markers.get(g[0], "o"),
            color=c,
            label=label,
        )
        if g[0] in ("W4", "W5"):
            for r in rs:
                axes[0].annotate(r["dataset"], (r["util"], r["speedup"]), fontsize=7, alpha=0.7)
    axes[0].axhline(1.0, color="grey", lw=0.8)
    axes[1].axhline(1.0, color="grey", lw=0.8)
    axes[0].set_xlabel("util η = Σl / (B·max l)")
    axes[0].set_ylabel("speedup S vs padded SDPA (filled); FLOP ceiling S* (hollow)")
    axes[0].set_yscale("log")
    axes[1].set_xlabel("util η")
    axes[1].set_ylabel("T(best of baselines 1-8) / T(ragged-mlir)")
    axes[1].set_yscale("log")
    from matplotlib.ticker import FormatStrFormatter, NullFormatter

    for ax in axes:
        ax.yaxis.set_major_formatter(FormatStrFormatter("%.2g"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    axes[0].legend(fontsize=7, ncol=2)
    axes[0].set_title("ragged-mlir vs the strong padded baseline")
    axes[1].set_title("ragged-mlir vs the best peer")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


# -- main --------------------------------------------------------------------------------------


def main(argv=None) -> int:
    setup()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument(
        "--quick", action="store_true", help="W4 (1 and 6 layers) on mnli and squadv2, fast peers, ~3 min"
    )
    mode.add_argument(
        "--smoke", action="store_true", help="tiny batches, 1 repeat, no inductor: checks the harness runs"
    )
    ap.add_argument("--datasets", nargs="+", help=f"subset of {', '.join(ALL_DATASETS)}")
    ap.add_argument(
        "--workloads", nargs="+", choices=["W1", "W2", "W3", "W4", "W5"], help="subset of the workloads"
    )
    ap.add_argument(
        "--budget-s", type=float, help="stop starting cases after this many seconds (default: 840 / 170 / 25)"
    )
    ap.add_argument(
        "--case-budget-s", type=float, help="seconds of timed rounds per case (default 20 / 8 / 0)"
    )
    ap.add_argument(
        "--variants", nargs="+", choices=W.ORDER, help="subset of the variants (ragged_mlir always runs)"
    )
    ap.add_argument("--rmin", type=int, help="min timed rounds per case (default 3; smoke 1)")
    ap.add_argument("--rmax", type=int, help="max timed rounds per case (default 10 / 5 / 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--out", type=Path, default=HERE / "results", help="output directory (default bench/results)"
    )
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument(
        "--no-fresh-mem", action="store_true", help="skip the fresh-process memory check of W4 cases"
    )
    ap.add_argument("--mem-child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.mem_child:
        print(json.dumps(mem_child(json.loads(args.mem_child))), flush=True)
        return 0
    mode_name = "smoke" if args.smoke else "quick" if args.quick else "full"
    defaults = {"full": (840, 8, 3, 10), "quick": (165, 10, 3, 7), "smoke": (25, 0, 1, 1)}[mode_name]
    args.budget_s = args.budget_s if args.budget_s is not None else defaults[0]
    args.case_budget = args.case_budget_s if args.case_budget_s is not None else defaults[1]
    args.rmin = args.rmin if args.rmin is not None else defaults[2]
    args.rmax = args.rmax if args.rmax is not None else defaults[3]
    args.reserve = {"full": 45, "quick": 15, "smoke": 2}[mode_name]  # time kept for recompiles and reports
    args.slow_s = 1.0 if not args.smoke else 1e9
    args.max_len = 16 if args.smoke else 128
    clock = Clock(args.budget_s)
    args.out.mkdir(parents=True, exist_ok=True)
    suffix = "" if mode_name == "full" else f"-{mode_name}"
    jsonl = args.out / f"{mode_name}.jsonl"
    sink = jsonl.open("w")

    def emit(rec: dict) -> None:
        line = json.dumps(rec)
        print(line, flush=True)
        sink.write(line + "\n")
        sink.flush()

    info = machine_info()
    load_start = round(os.getloadavg()[0], 2)
    gemm = gemm_peak_gflops(512 if args.smoke else 2048, 1 if args.smoke else 3)
    copy_bw = copy_bandwidth_gbs(16 if args.smoke else 256, 1 if args.smoke else 5)
    log(
        f"# {mode_name}: {info['cpu']}, {info['torch_cpu_capability']}, threads {info['torch_threads']}, "
        f"GEMM peak {gemm:.1f} GFLOP/s, copy {copy_bw:.1f} GB/s, load {load_start}, budget {args.budget_s:.0f} s"
    )
    emit(
        {
            "machine": info,
            "gemm_peak_gflops": round(gemm, 2),
            "copy_bandwidth_gbs": round(copy_bw, 2),
            "mode": mode_name,
            "load_avg": load_start,
            "memory_method": MEM_METHOD,
        }
    )

    work = Workloads(args)
    rows: list[dict] = []
    extra: dict[str, Any] = {"not_run": []}
    for case in plan(mode_name, args.datasets, args.workloads):
        name = (
            f"{case['workload']}{'-' + str(case['layers']) + 'L' if case.get('layers') else ''}"
            f"{'-' + case['op'] if case.get('op') else ''} {case['dataset']} B={case['batch']}"
        )
        if clock.left() < args.reserve:
            extra["not_run"].append(f"{name}: time budget ({args.budget_s:.0f} s) spent")
            log(f"  skip {name}: time budget spent")
            continue
        args.only, args.only_reason = None, None
        if args.quick:
            args.only, args.only_reason = (
                QUICK_ONLY[case.get("layers") or 1],
                "omitted in --quick (see the full run)",
            )
        if args.smoke:
            args.only, args.only_reason = SMOKE_ONLY, "omitted in --smoke"
        if args.variants:
            keep = set(args.variants) | {W.OURS}
            args.only = keep & args.only if args.only else keep
            args.only_reason = args.only_reason or "not in --variants"
        t0 = time.perf_counter()
        args.layers = 6 if case["workload"] == "W5" else case.get("layers") or 1
        log(f"  {name} ...")
        try:
            variants, reference, lengths = work.build(case)
            with torch.no_grad():
                rec = run_case(
                    variants,
                    reference,
                    work.compiled((case["workload"], case.get("op"), case.get("layers"))),
                    args,
                    clock,
                )
            rec = {
                **case,
                "tokens": int(lengths.sum()),
                "max_len": int(lengths.max()),
                "util": round(float(lengths.sum() / (len(lengths) * lengths.max())), 3),
                **rec,
                "load_avg": round(os.getloadavg()[0], 2),
            }
            fresh_ok = case["workload"] == "W4" and not args.smoke and not args.no_fresh_mem
            if (
                fresh_ok
                and case["layers"] == 1
                and (args.quick or case["dataset"] in REAL + ("equal",))
                and clock.left() > args.reserve + 30
            ):
                rec["peak_mem_fresh_mib"] = fresh_memory(case, args)
            # W5 is the six-layer MiniLM: its FLOPs count all six layers.
            rec = metrics(rec, case["workload"], lengths, args.layers, gemm, copy_bw)
            rec["case_s"] = round(time.perf_counter() - t0, 1)
            # Key order: identification and headline metrics first.
            head = (
                "workload",
                "op",
                "layers",
                "dataset",
                "batch",
                "tokens",
                "max_len",
                "util",
                "flop_ceiling",
                "speedup",
                "ceiling_attainment",
                "best_peer",
                "ratio_to_best_peer",
                "roofline_ours",
                "roofline_best_peer",
                "ragged_overhead",
                "peak_mem_ratio_vs_padded",
            )
            rec = {**{k: rec[k] for k in head if k in rec}, **{k: v for k, v in rec.items() if k not in head}}
        except Exception as e:
            rec = {
                **case,
                "error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}",
                "case_s": round(time.perf_counter() - t0, 1),
            }
            log(f"    FAILED: {rec['error']}")
        rows.append(rec)
        emit(rec)
        log(
            f"    {rec.get('case_s')} s: S={rec.get('speedup')} S*={rec.get('flop_ceiling')} "
            f"best={rec.get('best_peer')} x{rec.get('ratio_to_best_peer')} overhead={rec.get('ragged_overhead')} "
            f"roofline={rec.get('roofline_ours')} (best peer {rec.get('roofline_best_peer')})"
        )

    # Recompiles over 20 fresh length draws through the compiled W4 model(s).
    extra["recompiles"] = []
    # 20 draws through the 1-layer model; the 6-layer one gets 20 in the full
    # run and 3 in --quick. Each draw is called twice: the first call on a new
    # shape minus the second is the warm compile time.
    ds = (args.datasets or ["uniform-half" if args.smoke else "mnli"])[0]
    for layers, draws in ((1, 3 if args.smoke else 20), (6, 20 if mode_name == "full" else 3)):
        if ("W4", None, layers) not in work.comp:
            continue
        if mode_name != "smoke" and clock.left() < (0 if layers == 1 else 10 if args.quick else 25):
            extra["not_run"].append(f"recompiles of W4 {layers} layers: time budget spent")
            continue
        log(f"  recompiles: W4 {layers} layer(s), {draws} fresh {ds} draws ...")
        try:
            r = recompiles(
                work,
                layers,
                ds,
                batch_for("W4", ds, args.smoke),
                draws,
                with_inductor=mode_name == "full" and layers == 1,
            )
        except Exception as e:
            r = {"layers": layers, "dataset": ds, "draws": draws, "error": f"{type(e).__name__}: {e}"[:300]}
        extra["recompiles"].append(r)
        emit({"recompiles": r})
    summary = summarize(
        rows,
        {
            **extra,
            "mode": mode_name,
            "gemm_peak_gflops": round(gemm, 2),
            "copy_bandwidth_gbs": round(copy_bw, 2),
            "load_start": load_start,
            "load_end": round(os.getloadavg()[0], 2),
            "elapsed_s": round(time.perf_counter() - clock.start, 1),
            "process_peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
            "ragged_backend_stats": dict(ragged_backend.stats),
            "danling": W.DANLING_REASON or "installed",
        },
    )
    write_markdown(args.out / f"summary{suffix}.md", rows, summary, info, extra)
    if not args.no_plot:
        note = write_plot(args.out / f"speedup_vs_util{suffix}.png", rows)
        if note:
            summary["plot"] = note
    summary.pop("not_run", None)
    summary["not_run"] = len(extra["not_run"])
    emit(summary)
    sink.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
