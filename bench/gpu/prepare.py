"""Prepares the GPU check on the CPU machine: compiles every program of
:mod:`cases` for each target, and writes one folder that the runtime-only
runner (:mod:`run`) reads on the machine with the GPU.

    python bench/gpu/prepare.py --out build/gpu_check                  # cuda and vulkan-spirv
    python bench/gpu/prepare.py --target llvm-cpu --quick --out /tmp/g  # the CPU smoke test

The folder:

    manifest.json         what to run: numerics cases and timed workloads
    <target>/<case>.vmfb  one module per case and target
    data/<case>.<batch>.npz
                          a numerics batch: ``in_<i>``, the function's flat
                          arguments (packed values, then offsets, per ragged
                          argument), and ``ref_<j>``, its flat results computed
                          in float64 numpy item by item (offsets exact)

Timed workloads (W3 attention, W4 encoder layers) carry no data: the runner
draws their inputs from the lengths in the manifest (MNLI, SQuAD v2 and
RACE histograms, bench/data/lengths), which keeps the folder to a few MiB.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import cases  # noqa: E402
from inputs import Draws  # noqa: E402

import ragged_mlir  # noqa: E402
from ragged_mlir import CompileOptions, RaggedArray  # noqa: E402

#: Histograms and batch sizes of the timed workloads, and the longest item
#: each dataset's model reads (BERT truncates at 512).
DATASETS = {"mnli": 128, "squadv2": 384, "race": 512}
BATCHES = (32, 256)
LAYERS = (1, 6)
FORMAT = 1


def flat(values) -> list[np.ndarray]:
    """A function's arguments or results as IREE sees them: each ragged
    array as its values, then its partitions."""
    out = []
    for v in values:
        if isinstance(v, RaggedArray):
            out += [np.ascontiguousarray(v.values), *(np.asarray(p, np.int64) for p in v.partitions)]
        else:
            out.append(np.ascontiguousarray(v))
    return out


def result_layout(signature: dict) -> list[dict]:
    """Per flat result: its kind and, for the values of a one-level ragged
    result, the flat index of its offsets (to name the item of an error)."""
    out = []
    for desc in signature["results"]:
        if desc["kind"] == "ragged":
            n = len(desc["symbols"])
            one_level = n == 1
            out.append({"kind": "values", "items": len(out) + 1 if one_level else None})
            out += [{"kind": "offsets"}] * n
        else:
            out.append({"kind": "dense", "items": None})
    return out


def _stored(ref: np.ndarray) -> np.ndarray:
    """A float64 reference as it travels: rounded to float32 (a relative
    6e-8, a thousandth of the tightest tolerance; max and pooling results
    are float32 values already), which halves the folder."""
    return ref.astype(np.float32) if ref.dtype == np.float64 else ref


def compile_for(
    program,
    targets: list[str],
    name: str,
    out: Path,
    log,
    options: CompileOptions | None = None,
    cpu_flags: tuple[str, ...] = (),
) -> tuple[dict, dict, dict]:
    """(paths per target, the signature, errors per target) of ``program``,
    compiled with ``options`` (the defaults) for each target, with
    ``cpu_flags`` added for llvm-cpu."""
    paths, errors, signature = {}, {}, None
    for target in targets:
        t0 = time.perf_counter()
        options_ = replace(options or CompileOptions(), target=target)
        if target == "llvm-cpu":
            options_ = replace(options_, iree_flags=[*options_.iree_flags, *cpu_flags])
        try:
            module = ragged_mlir.compile(program, options=options_)
        except Exception as e:  # noqa: BLE001 - one target's failure is a result
            errors[target] = _first_line(e)
            log(f"  {name} [{target}]: compile ERROR {errors[target]}")
            continue
        (out / target).mkdir(exist_ok=True)
        rel = f"{target}/{name}.vmfb"
        (out / rel).write_bytes(module.vmfb)
        paths[target] = rel
        signature = signature or module.signatures
        log(f"  {name} [{target}]: {len(module.vmfb) / 1024:.0f} KiB in {time.perf_counter() - t0:.1f} s")
    return paths, signature, errors


def _first_line(e: BaseException) -> str:
    text = str(e)
    for line in text.splitlines():
        if "error:" in line:
            return line.strip()
    return f"{type(e).__name__}: " + (text.splitlines()[0] if text else "")


def prepare_numerics(case: cases.Case, targets, out: Path, seed: int, log) -> dict:
    paths, sigs, errors = compile_for(case.program, targets, case.name, out, log)
    rec = {
        "name": case.name,
        "family": case.family,
        "dtype": case.dtype,
        "function": case.function,
        "rtol": case.tolerance[0],
        "atol": case.tolerance[1],
        "vmfb": paths,
        "compile_errors": errors,
        "batches": [],
    }
    if sigs is None:
        return rec
    rec["results"] = result_layout(sigs[case.function])
    np_dtype = np.float16 if case.dtype == "f16" else np.float32
    for i, (batch, shape) in enumerate(case.sets.items()):
        draw = Draws(seed * 1_000_000 + 10_000 * i, np_dtype)
        args, refs = case.make(shape, draw)
        ins, want = flat(args), flat(refs)
        if len(want) != len(rec["results"]):
            raise AssertionError(
                f"{case.name}: {len(want)} reference arrays for {len(rec['results'])} results"
            )
        # Drawn inputs are drawn again by the runner; the others (offsets)
        # travel with the references.
        specs = [draw.spec_of(a) for a in ins]
        stored = {f"in_{j}": a for j, (a, sp) in enumerate(zip(ins, specs, strict=True)) if sp is None}
        rel = f"data/{case.name}.{batch}.npz"
        np.savez_compressed(out / rel, **stored, **{f"ref_{j}": _stored(a) for j, a in enumerate(want)})
        rec["batches"].append({"name": batch, "shape": shape, "data": rel, "inputs": specs})
    return rec


def prepare_bench(targets, out: Path, seed: int, dtypes, quick: bool, log) -> list[dict]:
    from lengths import sample_lengths

    datasets = {"mnli": DATASETS["mnli"]} if quick else DATASETS
    batches = (4,) if quick else BATCHES
    lengths = [
        {
            "dataset": ds,
            "B": b,
            "lengths": [int(x) for x in np.minimum(sample_lengths(ds, b, seed), cap)],
        }
        for ds, cap in datasets.items()
        for b in batches
    ]
    recs = []
    for dtype in dtypes:
        name = f"w3_attention_{dtype}"
        prog = cases.attention_program(dtype=dtype, name="w3_attention")
        paths, _, errors = compile_for(prog, targets, name, out, log)
        recs.append(
            {
                "name": name,
                "workload": "w3",
                "dtype": dtype,
                "function": "w3_attention",
                "heads": cases.HEADS,
                "head_dim": cases.HD,
                "vmfb": paths,
                "compile_errors": errors,
                "batches": lengths,
            }
        )
        for layers in (1,) if quick else LAYERS:
            name = f"w4_encoder_{layers}l_{dtype}"
            prog = cases.encoder_program(dtype=dtype, layers=layers, name="w4_encoder")
            paths, _, errors = compile_for(prog, targets, name, out, log)
            recs.append(
                {
                    "name": name,
                    "workload": "w4",
                    "dtype": dtype,
                    "function": "w4_encoder",
                    "layers": layers,
                    "d_model": cases.D,
                    "heads": cases.HEADS,
                    "ff": cases.FF,
                    "vmfb": paths,
                    "compile_errors": errors,
                    "batches": lengths,
                }
            )
    return recs


def capture_training_step(lengths, layers: int, draw: Draws) -> list[dict]:
    """The graphs of one training step of ``nn.TransformerEncoderLayer`` s
    (bench/train_step.py's classifier, its weights drawn) on a NestedTensor
    under ``torch.compile(backend="ragged")``, run here on the CPU: per
    graph (forward, backward), the ragged IR the backend handed to
    ``ragged_mlir.compile``, its compile options, and the flat arguments
    and results of its call."""
    import torch
    import torch.nn.functional as F
    from train_step import CLASSES, Classifier

    from ragged_mlir.torch import NestedTensor

    torch.manual_seed(0)
    model = Classifier(layers)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim == 2:
                bound = (3.0 / p.shape[1]) ** 0.5
                p.copy_(torch.from_numpy(draw(tuple(p.shape), -bound, bound)))
            elif "norm" in name and name.endswith("weight"):
                p.copy_(torch.from_numpy(draw(tuple(p.shape), 0.5, 1.5)))
            else:
                p.copy_(torch.from_numpy(draw(tuple(p.shape), -0.1, 0.1)))
    rows = np.concatenate([[0], np.cumsum(lengths)])
    packed = torch.from_numpy(draw((int(rows[-1]), model.head.in_features)))
    x = NestedTensor([packed[rows[b] : rows[b + 1]] for b in range(len(lengths))])
    labels = torch.arange(len(lengths)) % CLASSES
    graphs: list[dict] = []
    compile_original = ragged_mlir.compile

    def capture(text, *args, options=None, **kwargs):
        module = compile_original(text, *args, options=options, **kwargs)
        graph = {"text": text, "options": options, "calls": []}
        graphs.append(graph)
        raw = module.raw

        def recording_raw(name):
            fn = raw(name)

            def call(*flat):
                out = fn(*flat)
                if not graph["calls"]:
                    results = out if isinstance(out, (list, tuple)) else [out]
                    graph["calls"].append(
                        ([np.array(a) for a in flat], [np.array(r.to_host()) for r in results])
                    )
                return out

            return call

        module.raw = recording_raw
        return module

    compiled = torch.compile(
        model, backend="ragged", dynamic=True, fullgraph=True, options={"fallback": False}
    )
    ragged_mlir.compile = capture
    try:
        loss = F.cross_entropy(compiled(x), labels)
        loss.backward()
    finally:
        ragged_mlir.compile = compile_original
    # The backend's flags are for llvm-cpu (a training graph keeps IREE from
    # fusing multi-use producers there, which its AVX2 codegen refuses).
    for g in graphs:
        g["cpu_flags"] = tuple(g["options"].iree_flags)
        g["options"] = replace(
            g["options"], cpu=None, cpu_kernels=None, iree_flags=(), keep_intermediates=False, work_dir=None
        )
    return graphs


def prepare_training(targets, out: Path, seed: int, quick: bool, log) -> tuple[list[dict], dict]:
    """(numerics cases of the training step's graphs, its timed workload).

    The references are this machine's results of the same graphs (the CPU
    compile, which test_models and test_attention_grad check against
    float64 per item): the training step is checked as a whole on the
    target, not op by op."""
    from lengths import sample_lengths

    # Small: the forward's results and the backward's arguments travel.
    lengths = [max(1, int(n)) for n in sample_lengths("mnli", 4 if quick else 6, seed)]
    layers = 1
    draw = Draws(seed * 1_000_000 + 900_000, np.float32)
    graphs = capture_training_step(lengths, layers, draw)
    names = ["train_forward", "train_backward"]
    if len(graphs) != 2 or any(not g["calls"] for g in graphs):
        raise RuntimeError(
            f"a training step gave {len(graphs)} compiled graphs, expected 2 (forward, backward)"
        )
    cases_, workload = (
        [],
        {
            "name": "train_step_1l_f32",
            "workload": "train",
            "dtype": "f32",
            "layers": layers,
            "d_model": cases.D,
            "heads": cases.HEADS,
            "ff": cases.FF,
            "lengths": lengths,
            "graphs": [],
            "vmfb": {},
            "compile_errors": {},
        },
    )
    earlier: list[tuple[str, int, np.ndarray]] = []  # the forward's results: the backward's saved tensors
    for name, g in zip(names, graphs, strict=True):
        paths, _, errors = compile_for(g["text"], targets, name, out, log, g["options"], g["cpu_flags"])
        (flat_in, flat_out) = g["calls"][0]
        specs = [draw.spec_of(a) or _earlier_output(earlier, a) for a in flat_in]
        stored = {f"in_{j}": a for j, (a, sp) in enumerate(zip(flat_in, specs, strict=True)) if sp is None}
        rel = f"data/{name}.npz"
        np.savez_compressed(out / rel, **stored, **{f"ref_{j}": _stored(a) for j, a in enumerate(flat_out)})
        cases_.append(
            {
                "name": name,
                "family": "training_step",
                "dtype": "f32",
                "function": "main",
                "rtol": 1e-3,
                "atol": 1e-3,
                "vmfb": paths,
                "compile_errors": errors,
                "results": [
                    {"kind": "values" if a.dtype.kind == "f" else "offsets", "items": None} for a in flat_out
                ],
                "batches": [{"name": "mnli", "shape": lengths, "data": rel, "inputs": specs}],
                "reference": "the same graph compiled for llvm-cpu",
            }
        )
        workload["graphs"].append({"name": name, "data": rel, "inputs": specs})
        earlier += [(rel, j, a) for j, a in enumerate(flat_out)]
        for target, path in paths.items():
            workload["vmfb"].setdefault(target, []).append(path)
        workload["compile_errors"].update({f"{name} {t}": e for t, e in errors.items()})
    workload["vmfb"] = {t: p for t, p in workload["vmfb"].items() if len(p) == 2}
    return cases_, workload


def _earlier_output(earlier, a: np.ndarray) -> dict | None:
    """Where an earlier graph's results hold ``a`` (as they travel), if
    anywhere: the backward takes what the forward saved."""
    for rel, j, b in earlier:
        if b.dtype == a.dtype and b.shape == a.shape and np.array_equal(_stored(b), a):
            return {"data": rel, "key": f"ref_{j}"}
    return None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--target",
        action="append",
        choices=["cuda", "vulkan-spirv", "llvm-cpu", "rocm", "metal-spirv"],
        help="IREE target (repeatable; default cuda and vulkan-spirv)",
    )
    ap.add_argument("--out", type=Path, required=True, help="the folder to write (emptied first)")
    ap.add_argument("--quick", action="store_true", help="edge-case batches only, small timed batches")
    ap.add_argument("--only", nargs="+", metavar="CASE", help="numerics cases to keep (f32 names)")
    ap.add_argument("--dtypes", nargs="+", default=["f32", "f16"], choices=["f32", "f16"])
    ap.add_argument("--no-bench", action="store_true", help="numerics only")
    ap.add_argument(
        "--no-training",
        dest="training",
        action="store_false",
        help="leave out the training step (needs torch)",
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    targets = args.target or ["cuda", "vulkan-spirv"]

    out = args.out
    if out.exists():
        for p in sorted(out.rglob("*"), reverse=True):
            p.unlink() if p.is_file() or p.is_symlink() else p.rmdir()
    (out / "data").mkdir(parents=True, exist_ok=True)

    def log(msg):
        print(msg, flush=True)

    t0 = time.perf_counter()
    numerics = []
    for case in cases.all_cases(args.seed, args.quick, tuple(args.dtypes), args.only):
        numerics.append(prepare_numerics(case, targets, out, args.seed, log))
    bench = [] if args.no_bench else prepare_bench(targets, out, args.seed, args.dtypes, args.quick, log)
    if args.training:
        train_cases, train_workload = prepare_training(targets, out, args.seed, args.quick, log)
        numerics += train_cases
        if not args.no_bench:
            bench.append(train_workload)
    manifest = {
        "format": FORMAT,
        "targets": targets,
        "prepared_on": {
            "host": platform.node(),
            "machine": platform.machine(),
            "python": platform.python_version(),
            "ragged_mlir": getattr(ragged_mlir, "__version__", "?"),
            "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            "seconds": round(time.perf_counter() - t0, 1),
        },
        "numerics": numerics,
        "bench": bench,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    errors = sum(len(r["compile_errors"]) for r in numerics + bench)
    log(
        f"# {len(numerics)} numerics cases, {len(bench)} timed workloads for {', '.join(targets)}: "
        f"{size / 2**20:.1f} MiB in {out}, {errors} compile errors, {time.perf_counter() - t0:.0f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
