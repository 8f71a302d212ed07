"""Runs a folder written by :mod:`prepare` with nothing but the IREE runtime
and numpy (and torch, if present, for the peers): the half of the GPU check
that runs on the machine with the GPU, or on the CPU for the smoke test.

    python bench/gpu/run.py FOLDER --out DIR            # every target in the folder
    python bench/gpu/run.py FOLDER --target llvm-cpu --no-peers --out DIR

1. Numerics: each case's module runs each batch; every result is compared
   with the float64 reference written on the CPU machine: offsets exactly,
   values within ``|got - ref| <= atol * max(1, max |ref|) + rtol * |ref|``
   (infinities must match, a NaN fails). PASS / FAIL / ERROR per case.
2. Timed workloads (W3 attention, W4 encoder layers) on the folder's
   length batches, inputs already on the device, against the torch peers of
   ``peers.py`` on the same device, interleaved (ragged, peer, peer, ...,
   ragged, ...), the device synchronised around every call. Roofline
   attainment is useful FLOP/s (real tokens only) over a GEMM peak measured
   in this process (torch.matmul, or numpy's on a CPU without torch).

The whole run keeps to ``--budget`` seconds: what does not fit is listed as
skipped. ``gpu_check.json`` (every record) and ``gpu_check.md`` (the
tables) are rewritten after each case, so a run stopped early leaves what
it measured. Exit status 1 if a numerics case did not pass.

Nothing here imports ragged_mlir: the GPU machine has no build of it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from inputs import Draws, draw, encoder_weights, uniform  # noqa: E402

#: The IREE runtime driver of each compiler target.
DRIVERS = {
    "llvm-cpu": "local-task",
    "cuda": "cuda",
    "vulkan-spirv": "vulkan",
    "rocm": "hip",
    "metal-spirv": "metal",
}


def log(msg: str) -> None:
    print(msg, flush=True)


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: " + (text.splitlines()[0] if text else "")


# --------------------------------------------------------------------------
# IREE
# --------------------------------------------------------------------------


class Device:
    """One IREE device and the modules loaded on it."""

    def __init__(self, driver: str):
        import iree.runtime as rt

        self.rt = rt
        self.driver = driver
        self.device = rt.get_first_device([driver])
        self.config = rt.Config(device=self.device)

    def load(self, path: Path, function: str):
        ctx = self.rt.SystemContext(config=self.config)
        ctx.add_vm_module(self.rt.VmModule.copy_buffer(self.config.vm_instance, path.read_bytes()))
        return ctx, ctx.modules.module[function]

    def upload(self, array: np.ndarray):
        return self.rt.asdevicearray(self.device, np.ascontiguousarray(array))


def to_host(results) -> list[np.ndarray]:
    if not isinstance(results, (list, tuple)):
        results = [results]
    return [np.array(r.to_host()) for r in results]


def describe_drivers() -> dict:
    import iree.runtime as rt

    out = {}
    for name in rt.query_available_drivers():
        try:
            devices = rt.get_driver(name).query_available_devices()
            out[name] = [d.get("name", str(d)) if isinstance(d, dict) else str(d) for d in devices]
        except Exception as e:  # noqa: BLE001 - a driver without a device is a fact to report
            out[name] = f"unavailable: {first_line(e)}"
    return out


# --------------------------------------------------------------------------
# Numerics
# --------------------------------------------------------------------------


def excess(got, want, rtol: float, atol: float) -> tuple[float, float, int]:
    """(max |got - want|, max of |got - want| / allowed, flat index of the
    worst); infinities must match, NaN counts as infinitely wrong."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"shape {got.shape}, expected {want.shape}")
    if got.size == 0:
        return 0.0, 0.0, -1
    g, w = got.ravel(), want.ravel()
    inf = np.isinf(w)
    bad = np.flatnonzero((np.isinf(g) != inf) | (inf & (np.sign(g) != np.sign(w))))
    nan = np.flatnonzero(np.isnan(g))
    if bad.size or nan.size:
        return math.inf, math.inf, int((nan if nan.size else bad)[0])
    finite = ~inf
    if not finite.any():
        return 0.0, 0.0, -1
    g, w = np.where(finite, g, 0.0), np.where(finite, w, 0.0)
    scale = max(1.0, float(np.abs(w).max()))
    err = np.abs(g - w)
    allowed = atol * scale + rtol * np.abs(w)
    ratio = err / np.maximum(allowed, 1e-300)
    i = int(ratio.argmax())
    return float(err.max()), float(ratio[i]), i


def where(layout: dict, flat_index: int, got: np.ndarray, outputs: list[np.ndarray]) -> str:
    """The worst element, named by its row and, for a one-level ragged
    result, its item."""
    if flat_index < 0:
        return ""
    row = flat_index // max(1, math.prod(got.shape[1:]))
    if layout.get("items") is not None:
        offsets = outputs[layout["items"]]
        item = int(np.searchsorted(offsets, row, side="right") - 1)
        return f"item {item}, row {row}"
    return f"row {row}"


def arguments(folder: Path, data, specs: list) -> list[np.ndarray]:
    """A call's flat arguments: drawn again, read from an earlier graph's
    results (``data`` and ``key``), or carried in ``data`` (None)."""
    out = []
    for j, spec in enumerate(specs):
        if spec is None:
            out.append(data[f"in_{j}"])
        elif "key" in spec:
            out.append(np.load(folder / spec["data"])[spec["key"]])
        else:
            out.append(draw(spec))
    return out


def run_numerics_case(case: dict, target: str, dev: Device, folder: Path) -> dict:
    rec = {"case": case["name"], "family": case["family"], "dtype": case["dtype"], "target": target}
    if target not in case["vmfb"]:
        rec.update(status="ERROR", stage="compile", error=case["compile_errors"].get(target, "no module"))
        return rec
    t0 = time.perf_counter()
    try:
        ctx, fn = dev.load(folder / case["vmfb"][target], case["function"])
    except Exception as e:  # noqa: BLE001
        rec.update(status="ERROR", stage="load", error=first_line(e))
        return rec
    rec["load_s"] = round(time.perf_counter() - t0, 3)
    worst = {"err": 0.0, "ratio": 0.0, "where": ""}
    per_batch = {}
    for batch in case["batches"]:
        try:
            data = np.load(folder / batch["data"])
            args = arguments(folder, data, batch["inputs"])
            refs = [data[f"ref_{j}"] for j in range(len(case["results"]))]
            out = to_host(fn(*args))
            if len(out) != len(refs):
                raise AssertionError(f"{len(out)} results, expected {len(refs)}")
            e_max, r_max, at = 0.0, 0.0, ""
            for j, (got, want, layout) in enumerate(zip(out, refs, case["results"], strict=True)):
                if layout["kind"] == "offsets":
                    if not np.array_equal(got, want):
                        raise AssertionError(
                            f"result {j} (offsets) is {got.tolist()}, expected {want.tolist()}"
                        )
                    continue
                e, r, i = excess(got, want, case["rtol"], case["atol"])
                if not (r <= r_max):
                    e_max, r_max, at = e, r, f"result {j}, {where(layout, i, got, out)}"
        except Exception as ex:  # noqa: BLE001
            rec.update(
                status="ERROR",
                stage=f"batch {batch['name']}",
                error=first_line(ex),
                detail=traceback.format_exc()[-2000:],
            )
            return rec
        per_batch[batch["name"]] = {"max_err": e_max, "err_over_tol": r_max}
        if not (r_max <= worst["ratio"]):
            worst = {"err": e_max, "ratio": r_max, "where": f"{batch['name']}: {at}"}
    del ctx
    rec.update(
        status="PASS" if worst["ratio"] <= 1.0 else "FAIL",
        max_err=worst["err"],
        err_over_tol=worst["ratio"],
        worst=worst["where"],
        rtol=case["rtol"],
        atol=case["atol"],
        batches=per_batch,
    )
    return rec


# --------------------------------------------------------------------------
# Timed workloads
# --------------------------------------------------------------------------


def timeit(fns: dict, sync, min_reps: int = 3, max_reps: int = 20, target_s: float = 1.0) -> dict:
    """Median and minimum seconds of each function, interleaved, after one
    warm-up call each; as many rounds as fit ``target_s`` (3 to 20)."""
    for f in fns.values():
        f()
    sync()
    times = {k: [] for k in fns}
    t_start = time.perf_counter()
    for rnd in range(max_reps):
        for k, f in fns.items():
            sync()
            t = time.perf_counter()
            f()
            sync()
            times[k].append(time.perf_counter() - t)
        if rnd + 1 >= min_reps and time.perf_counter() - t_start > target_s:
            break
    return {
        k: {"median_s": float(np.median(v)), "min_s": float(np.min(v)), "reps": len(v)}
        for k, v in times.items()
    }


def workload_flops(w: dict, lengths: np.ndarray) -> float:
    """Useful FLOPs: real tokens only, each item's own L^2 for attention; a
    training step counts three times its forward."""
    sq = float((lengths.astype(np.float64) ** 2).sum())
    if w["workload"] == "w3":
        return 4.0 * sq * w["heads"] * w["head_dim"]
    d, ff, n = w["d_model"], w["ff"], float(lengths.sum())
    forward = w["layers"] * (2.0 * n * (4 * d * d + 2 * d * ff) + 4.0 * sq * d)
    return 3.0 * forward if w["workload"] == "train" else forward


def workload_inputs(w: dict, lengths: np.ndarray, dtype, seed: int):
    """(flat IREE arguments, what the peers take) for one batch."""
    offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    n = int(offsets[-1])
    if w["workload"] == "w3":
        h, hd = w["heads"], w["head_dim"]
        q, k = (uniform(seed + i, (n, h, hd), -2, 2, dtype) for i in range(2))
        v = uniform(seed + 2, (n, h, hd), -1, 1, dtype)
        return [q, offsets, k, offsets, v, offsets], {"q": q, "k": k, "v": v, "offsets": offsets}
    x = uniform(seed, (n, w["d_model"]), -1, 1, dtype)
    layers = encoder_weights(Draws(seed + 1, dtype), w["layers"], w["d_model"], w["ff"])
    flat = [x, offsets] + [p for layer in layers for p in layer]
    return flat, {"x": x, "offsets": offsets, "layers": layers}


def run_workload_batch(w, batch, target, dev, fn, peers_mod, torch_device, peak, deadline) -> dict:
    lengths = np.asarray(batch["lengths"], np.int64)
    dtype = np.float16 if w["dtype"] == "f16" else np.float32
    rec = _batch_record(w, target, batch["dataset"], lengths)
    flat, peer_in = workload_inputs(w, lengths, dtype, seed=1000 * int(batch["B"]) + len(batch["dataset"]))
    dev_args = [dev.upload(a) for a in flat]

    def make_peers(compile_peers):
        if w["workload"] == "w3":
            return peers_mod.attention_peers(
                peer_in["q"],
                peer_in["k"],
                peer_in["v"],
                peer_in["offsets"],
                scale=w["head_dim"] ** -0.5,
                dtype=w["dtype"],
                device=torch_device,
                compile=compile_peers,
            )
        return peers_mod.encoder_peers(
            peer_in["x"],
            peer_in["offsets"],
            peer_in["layers"],
            heads=w["heads"],
            dtype=w["dtype"],
            device=torch_device,
            compile=compile_peers,
        )

    peers = _time_with_peers(rec, lambda: fn(*dev_args), make_peers, peers_mod, torch_device, peak, deadline)
    # Agreement with the first peer that computes the real result.
    out = to_host(fn(*dev_args))[0].astype(np.float64)
    for p in peers:
        if "no mask" in p.name:
            continue
        try:
            ref = p.packed(p.run())
            rec["max_abs_diff"] = {"peer": p.name, "value": float(np.abs(out - ref).max(initial=0.0))}
        except Exception as e:  # noqa: BLE001
            rec["max_abs_diff"] = {"peer": p.name, "error": first_line(e)}
        break
    return rec


def run_training(w, target, dev, folder, peers_mod, torch_device, peak, deadline) -> dict:
    """The training step: its forward graph, then its backward graph, on
    the arguments recorded on the CPU machine, against the peers' forward,
    loss and backward of the same model."""
    lengths = np.asarray(w["lengths"], np.int64)
    rec = _batch_record(w, target, "mnli", lengths)
    calls, contexts = [], []
    for graph, path in zip(w["graphs"], w["vmfb"][target], strict=True):
        ctx, fn = dev.load(folder / path, "main")
        data = np.load(folder / graph["data"])
        args = arguments(folder, data, graph["inputs"])
        dev_args = [dev.upload(a) for a in args]
        contexts.append(ctx)
        calls.append((fn, dev_args))

    def make_peers(compile_peers):
        return peers_mod.training_peers(
            lengths,
            d_model=w["d_model"],
            heads=w["heads"],
            ff=w["ff"],
            layers=w["layers"],
            classes=3,
            dtype=w["dtype"],
            device=torch_device,
            compile=compile_peers,
        )

    _time_with_peers(
        rec, lambda: [fn(*a) for fn, a in calls], make_peers, peers_mod, torch_device, peak, deadline
    )
    del contexts  # the modules' contexts, alive while they ran
    return rec


def _batch_record(w: dict, target: str, dataset: str, lengths: np.ndarray) -> dict:
    return {
        "workload": w["name"],
        "target": target,
        "dataset": dataset,
        "B": len(lengths),
        "tokens": int(lengths.sum()),
        "util": float(lengths.sum() / max(1, len(lengths) * lengths.max())),
        "flops": workload_flops(w, lengths),
    }


def _time_with_peers(rec, ours, make_peers, peers_mod, torch_device, peak, deadline) -> list:
    """Times ``ours`` (ragged-mlir) against the peers ``make_peers(compile)``
    builds, where there is time left for them (and for compiled ones),
    into ``rec``; returns the peers."""
    peers, skipped = [], {}
    if peers_mod is not None and time.monotonic() < deadline - 30:
        compile_peers = time.monotonic() < deadline - 90
        try:
            peers, skipped = make_peers(compile_peers)
        except Exception as e:  # noqa: BLE001
            skipped["peers"] = first_line(e)
        if not compile_peers:
            skipped["compiled peers"] = "not enough time left to compile them"
    fns = {"ragged-mlir": ours, **{p.name: p.run for p in peers}}
    sync = (lambda: peers_mod.sync(torch_device)) if peers_mod is not None else (lambda: None)
    _timed_record(rec, timeit(fns, sync), peak)
    rec["skipped"] = skipped
    return peers


def _timed_record(rec: dict, times: dict, peak: float | None) -> None:
    ours = times["ragged-mlir"]["median_s"]
    rec["ms"] = {k: v["median_s"] * 1e3 for k, v in times.items()}
    rec["reps"] = {k: v["reps"] for k, v in times.items()}
    rec["speedup"] = {k: v["median_s"] / ours for k, v in times.items() if k != "ragged-mlir"}
    rec["roofline"] = {k: rec["flops"] / v["median_s"] / peak for k, v in times.items()} if peak else None


def run_bench(manifest, devices, targets, folder, peers_mod, torch_device, deadline, report, save) -> None:
    """Every timed batch, in the order that keeps the most informative ones
    inside the budget: the first target (with the peers) before the others
    (ragged-mlir alone, B 32 only), and within a target every workload at
    B 32 before any at B 256."""
    loaded: dict = {}
    tasks = []
    for i, target in enumerate(devices):
        for k, w in enumerate(manifest["bench"]):
            if target not in w["vmfb"]:
                report["bench"].append(
                    {"workload": w["name"], "target": target, "error": w["compile_errors"].get(target)}
                )
                continue
            batches = (
                [{"dataset": "mnli", "B": len(w["lengths"])}] if w["workload"] == "train" else w["batches"]
            )
            tasks += [(i, b["B"], k, target, w, b) for b in batches]
    for i, _, _, target, w, batch in sorted(tasks, key=lambda t: t[:3]):
        label = f"{w['name']} on {target}, {batch['dataset']} B {batch['B']}"
        if i > 0 and (batch["B"] > 32 or w["workload"] == "train"):
            report["skipped"].append(f"{label}: timed on {targets[0]} only")
            continue
        if time.monotonic() > deadline - 15:
            report["skipped"].append(f"{label}: out of time")
            continue
        dev, use_peers, peak = (
            devices[target],
            peers_mod if i == 0 else None,
            report["gemm_peak"].get(w["dtype"]),
        )
        try:
            if w["workload"] == "train":
                rec = run_training(w, target, dev, folder, use_peers, torch_device, peak, deadline)
            else:
                if (target, w["name"]) not in loaded:
                    loaded[(target, w["name"])] = dev.load(folder / w["vmfb"][target], w["function"])
                fn = loaded[(target, w["name"])][1]
                rec = run_workload_batch(w, batch, target, dev, fn, use_peers, torch_device, peak, deadline)
            x = ", ".join(f"{k} {v:.2f}x" for k, v in rec["speedup"].items())
            log(f"{label}: {rec['ms']['ragged-mlir']:.3f} ms; {x}")
        except Exception as e:  # noqa: BLE001
            rec = {
                "workload": w["name"],
                "target": target,
                "dataset": batch["dataset"],
                "B": batch["B"],
                "error": first_line(e),
            }
            log(f"{label}: ERROR {first_line(e)}")
        report["bench"].append(rec)
        save()
    loaded.clear()


# --------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------


def markdown(report: dict) -> str:
    lines = [f"# GPU check: {report['device']}", ""]
    lines += [f"- {k}: {v}" for k, v in report["machine"].items()]
    lines += [f"- GEMM peak ({k}): {v / 1e12:.2f} TFLOP/s" for k, v in report["gemm_peak"].items() if v]
    lines += [
        "",
        "## Numerics against float64",
        "",
        "| case | dtype | target | status | err / tol | worst at |",
    ]
    lines.append("|---|---|---|---|---|---|")
    for r in report["numerics"]:
        if r["status"] == "ERROR":
            lines.append(
                f"| {r['case']} | {r['dtype']} | {r['target']} | ERROR | | {r['stage']}: {r['error']} |"
            )
        else:
            lines.append(
                f"| {r['case']} | {r['dtype']} | {r['target']} | {r['status']} | "
                f"{r['err_over_tol']:.3g} | {r['worst']} |"
            )
    lines += ["", "## Timed workloads", ""]
    lines.append(
        "Median ms; x = peer time / ragged-mlir time (> 1: ragged-mlir is faster); "
        "roof = useful FLOP/s over the measured GEMM peak."
    )
    lines += [
        "",
        "| workload | target | dataset | B | util | variant | ms | x | roof |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in report["bench"]:
        if "ms" not in r:
            lines.append(
                f"| {r['workload']} | {r['target']} | {r.get('dataset', '')} | {r.get('B', '')} | | {r.get('error', '')} | | | |"
            )
            continue
        for k, ms in r["ms"].items():
            x = "" if k == "ragged-mlir" else f"{r['speedup'][k]:.2f}"
            roof = f"{r['roofline'][k]:.3f}" if r["roofline"] else ""
            lines.append(
                f"| {r['workload']} | {r['target']} | {r['dataset']} | {r['B']} | {r['util']:.2f} | {k} | "
                f"{ms:.3f} | {x} | {roof} |"
            )
    if report["skipped"]:
        lines += ["", "## Skipped", ""] + [f"- {s}" for s in report["skipped"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="the folder prepare.py wrote")
    ap.add_argument("--target", action="append", help="targets to run (default: every target in the folder)")
    ap.add_argument(
        "--out", type=Path, default=Path(os.environ.get("OUT", ".")), help="where the JSON and Markdown go"
    )
    ap.add_argument("--budget", type=float, default=450.0, help="seconds for the whole run")
    ap.add_argument("--no-peers", action="store_true", help="time ragged-mlir alone")
    ap.add_argument("--no-bench", action="store_true", help="numerics only")
    args = ap.parse_args(argv)
    start = time.monotonic()
    deadline = start + args.budget
    manifest = json.loads((args.folder / "manifest.json").read_text())
    targets = args.target or manifest["targets"]
    args.out.mkdir(parents=True, exist_ok=True)

    report = {
        "device": "",
        "machine": {
            "host": platform.node(),
            "cpu": platform.processor() or platform.machine(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "iree.runtime": _version("iree-base-runtime"),
            "prepared_on": manifest["prepared_on"],
        },
        "drivers": describe_drivers(),
        "gemm_peak": {},
        "numerics": [],
        "bench": [],
        "skipped": [],
    }

    def save():
        report["seconds"] = round(time.monotonic() - start, 1)
        report["gemm_peak"] = {k: v for k, v in report["gemm_peak"].items() if v}
        (args.out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
        (args.out / "gpu_check.md").write_text(markdown(report))

    peers_mod, torch_device = None, "cpu"
    if not args.no_peers and not args.no_bench:
        try:
            import peers as peers_mod

            torch_device = peers_mod.torch_device(DRIVERS[targets[0]])
            import torch

            report["machine"]["torch"] = torch.__version__
            if torch_device == "cuda":
                report["device"] = torch.cuda.get_device_name()
        except ImportError as e:
            report["skipped"].append(f"peers: {first_line(e)}")
            peers_mod = None
    report["device"] = report["device"] or f"{targets[0]} ({report['drivers'].get(DRIVERS[targets[0]], '?')})"
    log(f"# drivers: {report['drivers']}")

    devices = {}
    for target in targets:
        try:
            devices[target] = Device(DRIVERS[target])
        except Exception as e:  # noqa: BLE001
            report["skipped"].append(f"{target}: no {DRIVERS[target]} device ({first_line(e)})")
            log(f"# {target}: no device: {first_line(e)}")
    save()

    # 1. Numerics, every target.
    for target, dev in devices.items():
        for case in manifest["numerics"]:
            if time.monotonic() > deadline - 20:
                report["skipped"].append(f"numerics {case['name']} on {target}: out of time")
                continue
            rec = run_numerics_case(case, target, dev, args.folder)
            report["numerics"].append(rec)
            detail = (
                f"{rec['stage']}: {rec['error']}"
                if rec["status"] == "ERROR"
                else f"err/tol {rec['err_over_tol']:.3g} {rec['worst']}"
            )
            log(f"{rec['status']:<5} {target:<12} {rec['case']:<26} {detail}")
            save()

    # 2. Timed workloads: the first target with the peers, the others alone.
    if not args.no_bench:
        for dtype in ("f32", "f16"):
            if peers_mod is not None:
                try:
                    report["gemm_peak"][dtype] = peers_mod.gemm_peak_flops(torch_device, dtype)
                except Exception as e:  # noqa: BLE001
                    report["skipped"].append(f"GEMM peak {dtype}: {first_line(e)}")
            elif dtype == "f32":  # numpy's BLAS (numpy has no fast f16 GEMM)
                a = uniform(1, (2048, 2048), -1, 1, np.float32)
                best = min(_timed(lambda: a @ a) for _ in range(3))
                report["gemm_peak"][dtype] = 2 * 2048**3 / best
        run_bench(manifest, devices, targets, args.folder, peers_mod, torch_device, deadline, report, save)
    # The point of the folder: this process never needed a build of ragged-mlir.
    report["imported_ragged_mlir"] = any(m.split(".")[0] == "ragged_mlir" for m in sys.modules)
    save()
    counts = {s: sum(r["status"] == s for r in report["numerics"]) for s in ("PASS", "FAIL", "ERROR")}
    log(f"# numerics: {counts}; {len(report['bench'])} timed batches; {report['seconds']} s; {args.out}")
    return 0 if counts["FAIL"] == counts["ERROR"] == 0 and report["numerics"] else 1


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "?"


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    sys.exit(main())
