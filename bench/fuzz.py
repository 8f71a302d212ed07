"""Differential fuzzing: random valid ragged programs, compiled and run on
IREE's CPU backend, against a float64 per-item reference.

    python bench/fuzz.py --count 500 --seed 1
    python bench/fuzz.py --minutes 60 --count 100000 --seed 7 --out bench/results/fuzz
    python bench/fuzz.py --replay bench/results/fuzz/mismatch/f1000003

Programs come from ``bench/fuzzing`` (generator, reference interpreter,
comparison); see that package's docs. Programs are compiled in batches of
``--batch`` functions per module (one module per compile), each batch with
random compile options (``balance_tile``, ``attention_buckets``,
``iree_attention``) and a random mode: plain, save/load round trip, or
frozen dense arguments. In plain mode, every program that passes is also
called with inputs that break a run-time check the dialect documents (gather
ids out of range, split / from_padded lengths beyond the extent, a match of
different partitions, a concat of different batch sizes): the call must
fail. Batches run in a worker process, so a crash of the
compiler or the runtime is counted (and the batch rerun one program at a
time to find the culprit) rather than ending the run.

Prints one line per batch and a summary: counts of ok / mismatch /
compile_failure (compile() refused a valid program) / runtime_error (a call
failed on valid inputs) / crash (iree-compile died, an unclear exception, or
the worker process died) / rejected (no inputs within the element type's
range: not a finding), and every failure class with its count and a
reproducer directory (program.mlir, program.txt, program.pkl, setup.json,
inputs.npz / inputs.pkl, got.npz, expected.txt, README.txt). Mismatches also
get ``single_op/``: the first op that is wrong on its own, with the compiled
values of its operands as inputs. ``--json`` writes the summary as JSON.
"""

from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import pickle
import sys
import time
from pathlib import Path

import numpy as np
from fuzzing.generator import KNOWN_FAILURES, OPS, GenConfig, generate
from fuzzing.runner import Case, default_plans, failure_class, serve

ROOT = Path(__file__).resolve().parents[1]

MODES = {"plain": 0.7, "saveload": 0.15, "frozen": 0.15}


def pick(rng: np.random.Generator, weights: dict):
    keys = list(weights)
    p = np.array([weights[k] for k in keys], float)
    return keys[int(rng.choice(len(keys), p=p / p.sum()))]


def batch_setup(rng: np.random.Generator, attention: bool) -> dict:
    """Compile options of one batch. Bucketed attention costs 30-80 s of
    iree-compile per attention op on 2 cores, so attention batches favour
    the exact lowering and the IREE ladder."""
    options = {}
    tile = pick(rng, {None: 3.0, 0: 1.0, 1: 0.5, 4: 0.5, 16: 1.0})
    if tile is not None:
        options["balance_tile"] = tile
    if attention:
        lowering = pick(rng, {"exact": 3.0, "ladder": 2.0, "buckets1": 0.5, "buckets2": 0.3, "default": 0.3})
        options.update(
            {
                "exact": {"attention_buckets": 0, "iree_attention": False},
                "ladder": {"attention_buckets": 0, "iree_attention": True},
                "buckets1": {"attention_buckets": 1, "iree_attention": False},
                "buckets2": {"attention_buckets": 2},
                "default": {},
            }[lowering]
        )
    else:
        variants = [{}, {"attention_buckets": 0}, {"iree_attention": False}]
        options.update(variants[int(rng.integers(0, len(variants)))])
    return options


class Worker:
    """A process that runs batches; restarted when it dies or hangs."""

    def __init__(self):
        self.ctx = mp.get_context("spawn")
        self.proc = None
        self._start()

    def _start(self):
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=serve, args=(child,), daemon=True)
        self.proc.start()
        child.close()

    def run(self, task: dict, timeout: float):
        """("ok", results) | ("error", traceback) | ("died", exit code) | ("timeout", None)"""
        try:
            self.conn.send(task)
            if self.conn.poll(timeout):
                return self.conn.recv()
            self.proc.kill()
            self.proc.join()
            self._start()
            return ("timeout", None)
        except (EOFError, BrokenPipeError, ConnectionResetError):
            self.proc.join()
            code = self.proc.exitcode
            self._start()
            return ("died", code)

    def close(self):
        try:
            self.conn.send(None)
        except (BrokenPipeError, OSError):
            pass
        self.proc.join(timeout=10)


def run_batch(worker: Worker, cases: list[Case], setup: dict, args) -> list[dict]:
    task = {
        **setup,
        "cases": cases,
        "out": str(args.out),
        "localize": not args.no_localize,
        "invalid": not args.no_invalid,
        "seen": set(args.seen_classes),
    }
    kind, payload = worker.run(task, args.timeout)
    if kind == "ok":
        return payload
    if len(cases) > 1:  # pin it on one program
        return [e for c in cases for e in run_batch(worker, [c], setup, args)]
    case = cases[0]
    detail = {
        "died": f"the process died (exit code {payload})",
        "timeout": f"no result after {args.timeout:.0f} s",
        "error": f"runner error:\n{payload}",
    }[kind]
    out = Path(args.out) / "crash" / case.fn.name
    out.mkdir(parents=True, exist_ok=True)
    (out / "program.pkl").write_bytes(pickle.dumps(case))
    (out / "program.txt").write_text(case.fn.describe() + "\n")
    (out / "README.txt").write_text(f"status: crash\nsetup: {json.dumps(setup)}\n\n{detail}\n")
    try:
        from fuzzing.program import module_text

        (out / "program.mlir").write_text(module_text([case.fn]))
    except Exception as e:  # noqa: BLE001
        (out / "program.mlir").write_text(f"// the builders failed: {e}\n")
    return [
        {
            "name": case.fn.name,
            "seed": case.seed,
            "status": "crash",
            "detail": detail,
            "class": failure_class("crash", detail),
            "setup": setup,
            "reproducer": str(out),
            "ops": sorted({n.op for n in case.fn.nodes if n.op != "arg"}),
        }
    ]


def replay(directory: Path) -> int:
    """Recompiles and reruns a reproducer directory; prints the comparison."""
    from fuzzing.check import as_list, compare_outputs
    from fuzzing.reference import Evaluator

    import ragged_mlir

    case = pickle.loads((directory / "program.pkl").read_bytes())
    setup = json.loads((directory / "setup.json").read_text())
    print(case.fn.describe())
    print("setup:", setup)
    try:
        module = ragged_mlir.compile(
            (directory / "program.mlir").read_text(), options=ragged_mlir.CompileOptions(**setup["options"])
        )
    except Exception as e:  # noqa: BLE001 - the reproducer of a compile failure
        print(f"compile failed: {type(e).__name__}: {e}")
        return 1
    if not (directory / "inputs.pkl").exists():
        print("ok: compiled (the reproducer has no inputs)")
        return 0
    inputs = pickle.loads((directory / "inputs.pkl").read_bytes())
    ev = Evaluator(case.fn, inputs=inputs).run()
    got = as_list(module[case.fn.name](*inputs), len(case.fn.outputs))
    m = compare_outputs(got, ev.outputs)
    print("mismatch:", m) if m else print("ok: the results match the reference")
    return 1 if m else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=200, help="number of programs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=6, help="functions per compiled module")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fuzz")
    ap.add_argument("--minutes", type=float, default=None, help="stop starting batches after this long")
    ap.add_argument(
        "--timeout", type=float, default=900.0, help="seconds per batch before it counts as a hang"
    )
    ap.add_argument("--attention", type=float, default=0.2, help="share of batches with fused attention")
    ap.add_argument(
        "--exclude",
        nargs="*",
        default=[],
        choices=sorted(KNOWN_FAILURES),
        help="known failure classes the generator avoids",
    )
    ap.add_argument(
        "--dtypes",
        nargs="*",
        default=None,
        choices=["f16", "f32", "f64"],
        help="element types to draw (default all)",
    )
    ap.add_argument("--p-zero-dim", type=float, default=None, help="probability of a dense dim of size 0")
    ap.add_argument("--p-large-dim", type=float, default=None, help="probability of a larger dense dim")
    ap.add_argument("--no-localize", action="store_true", help="do not look for the wrong op of a mismatch")
    ap.add_argument(
        "--no-invalid", action="store_true", help="do not also call plain-mode programs with invalid inputs"
    )
    ap.add_argument("--json", type=Path, default=None, help="also write the summary here")
    ap.add_argument("--replay", type=Path, default=None, help="rerun one reproducer directory")
    args = ap.parse_args()
    if args.replay:
        return replay(args.replay)
    args.out.mkdir(parents=True, exist_ok=True)
    args.seen_classes = set()  # failure classes already minimised
    t0 = time.time()
    worker = Worker()
    entries: list[dict] = []
    done, b = 0, 0
    try:
        while done < args.count:
            if args.minutes is not None and time.time() - t0 > 60 * args.minutes:
                print(f"time limit reached after {done} programs", flush=True)
                break
            rng = np.random.default_rng([args.seed, b])
            attention = bool(rng.random() < args.attention)
            mode = pick(rng, MODES)
            setup = {"mode": mode, "options": batch_setup(rng, attention)}
            ops = dict(OPS)
            if attention:
                ops.update(attention=6.0, scores=1.5, apply=1.5)
            else:
                ops["attention"] = 0.0
            # Now and then an item past the top of the attention ladder (1024).
            long = 1100 if attention and rng.random() < 0.3 else 300
            cfg = GenConfig(
                ops=ops,
                exclude=frozenset(args.exclude),
                p_frozen=0.5 if mode == "frozen" else 0.0,
                long=long,
                max_ops=int(rng.choice([3, 5, 8])),
                **({"dtypes": dict.fromkeys(args.dtypes, 1.0)} if args.dtypes else {}),
                **({"p_zero_dim": args.p_zero_dim} if args.p_zero_dim is not None else {}),
                **({"p_large_dim": args.p_large_dim} if args.p_large_dim is not None else {}),
            )
            n = min(args.batch if not attention else max(1, args.batch // 2), args.count - done)
            cases = []
            for i in range(n):
                seed = args.seed * 1_000_000 + done + i
                fn = generate(seed, cfg, name=f"f{seed}")
                cases.append(Case(fn, seed, default_plans(np.random.default_rng(seed)), cfg.long))
            t = time.time()
            batch = run_batch(worker, cases, setup, args)
            entries.extend(batch)
            args.seen_classes.update(e["class"] for e in batch)
            done += n
            b += 1
            counts = collections.Counter(e["status"] for e in batch)
            print(
                f"batch {b}: {n} programs, {setup['mode']}, {setup['options']}, {time.time() - t:.0f} s: "
                + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
                flush=True,
            )
            for e in batch:
                if e["status"] not in ("ok", "rejected"):
                    print(f"  {e['name']}: {e['class']}  [{e.get('reproducer', '')}]", flush=True)
    finally:
        worker.close()
    summary = summarize(entries, time.time() - t0)
    rejections = [r for e in entries for r in e.get("rejections", [])]
    if rejections:
        kinds = collections.Counter(
            r.split(":", 1)[0].rstrip("0123456789- ").split(" ")[0] for r in rejections
        )
        messages = collections.Counter(r.split(": ", 1)[1] for r in rejections)
        print(f"\ninvalid-input calls that failed as they must: {len(rejections)} ({dict(kinds)})")
        for m, n in messages.most_common(8):
            print(f"  {n:4d}  {m[:200]}")
        summary["invalid_calls_rejected"] = len(rejections)
    if args.json:
        args.json.write_text(json.dumps({"summary": summary, "entries": entries}, indent=1, default=str))
    return 0


def summarize(entries: list[dict], seconds: float) -> dict:
    counts = collections.Counter(e["status"] for e in entries)
    classes: dict[str, list[dict]] = collections.defaultdict(list)
    for e in entries:
        if e["status"] not in ("ok", "rejected"):
            classes[e["class"]].append(e)
    print()
    print(f"{len(entries)} programs in {seconds / 60:.1f} min")
    for status in ("ok", "mismatch", "compile_failure", "runtime_error", "crash", "rejected"):
        print(f"  {status:14s} {counts.get(status, 0)}")
    if classes:
        print("\nfailure classes:")
        for cls, es in sorted(classes.items(), key=lambda kv: -len(kv[1])):
            example = es[0]
            print(f"  {len(es):4d}  {cls}")
            print(f"        e.g. {example['name']} ({example['setup']}): {example.get('reproducer', '')}")
            if example.get("minimized"):
                print(f"        minimized: {example['minimized']}")
            if example.get("localized"):
                print(f"        first wrong op: {example['localized'][:300]}")
    return {
        "programs": len(entries),
        "minutes": seconds / 60,
        "counts": dict(counts),
        "classes": {k: len(v) for k, v in classes.items()},
    }


if __name__ == "__main__":
    sys.exit(main())
