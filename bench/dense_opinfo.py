"""PyTorch's OpInfo samples of dense ops through backend="ragged".

Every op in ``torch.testing._internal.common_methods_invocations.op_db``
that runs on ``--dtype`` (f32 by default; f64 and bf16 too) on the CPU: its
first ``--samples`` sample inputs, each
compiled with ``torch.compile(backend="ragged", dynamic=True)`` with fallback
off and compared with eager on the same inputs. Counts per outcome:

* ``ok``: equal to eager (``torch.testing.assert_close``'s tolerances for
  the dtype, NaNs equal, integers exact);
* ``wrong``: it compiled and ran but differs from eager: a silent wrong
  answer, the worst outcome;
* ``refused``: the backend refused the graph (it would run eagerly with
  fallback on), by reason;
* ``error``: anything else (Dynamo cannot trace the op, eager fails too);
* ``crash``: the process died (a native crash in the compiler stack); the
  ops run in a child process, which the sweep restarts after the op that
  killed it.

Random ops (``normal``, ``bernoulli``, dropout) are skipped: eager and
compiled draw different numbers; so are ``empty`` and its kin, whose values
are undefined. Each sample's inputs are cloned for each
side, so an op's in-place update cannot leak between them. The wrong
answers are listed with their op, sample and largest difference. About half
an hour for all ops on 2 cores::

    python bench/dense_opinfo.py [--ops abs,add,...] [--samples 2] [--dtype f64] [--json out.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import warnings

os.environ["RAGGED_FALLBACK"] = "0"

import torch  # noqa: E402
from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

import ragged_mlir.torch  # noqa: E402, F401  (registers the backend)

RANDOM = re.compile(r"normal|uniform|bernoulli|dropout|rand|multinomial|cauchy|exponential|geometric|poisson")
# Ops whose values are undefined (uninitialised memory).
UNDEFINED = re.compile(r"^(new_)?empty")
DTYPES = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16}


def _clone(value):
    return torch.utils._pytree.tree_map(lambda v: v.clone() if isinstance(v, torch.Tensor) else v, value)


def _same(got, want) -> str | None:
    """None when ``got`` equals ``want``, else what differs."""
    try:
        torch.testing.assert_close(got, want, equal_nan=True, check_device=False)
    except AssertionError as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        return "; ".join(lines[:3])
    except Exception as e:  # structures that assert_close cannot compare
        return f"{type(e).__name__}: {e}"
    return None


def _reason(e: Exception) -> str:
    text = str(e)
    match = re.search(r"running this graph eagerly \(\w+\): (.*)", text)
    if match:
        reason = match.group(1)
        reason = re.sub(r"%\S+|\[[^\]]*\]|\(reproducer: [^)]*\)", "", reason)
        return "refused: " + reason[:140]
    return f"error: {type(e).__name__}: " + (text.strip().splitlines() or [""])[0][:140]


def run_op(op, samples: int, dtype: torch.dtype = torch.float32) -> list[tuple[str, str]]:
    """(outcome, detail) of each of ``op``'s first ``samples`` samples."""
    results = []
    try:
        inputs = list(op.sample_inputs("cpu", dtype, requires_grad=False))[:samples]
    except Exception as e:
        return [("error", f"error: samples: {type(e).__name__}")]
    for i, sample in enumerate(inputs):
        torch._dynamo.reset()

        def call(x, args, kwargs, op=op):
            return op(x, *args, **kwargs)

        try:
            want = call(*_clone((sample.input, sample.args, sample.kwargs)))
        except Exception:
            results.append(("error", "error: eager fails"))
            continue
        try:
            compiled = torch.compile(call, backend="ragged", dynamic=True)
            got = compiled(*_clone((sample.input, sample.args, sample.kwargs)))
        except Exception as e:
            detail = _reason(e)
            results.append(("refused" if detail.startswith("refused") else "error", detail))
            continue
        diff = _same(got, want)
        results.append(("ok", "") if diff is None else ("wrong", f"sample {i}: {diff}"))
    return results


def _key(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def _child(keys: list[str], samples: int, dtype: torch.dtype) -> int:
    """Runs ``keys`` in order, one JSON line per op, flushed before the next."""
    warnings.filterwarnings("ignore")
    torch.set_num_threads(2)
    by_key = {_key(op): op for op in op_db}
    for key in keys:
        print(json.dumps({"start": key}), flush=True)
        print(json.dumps({"key": key, "results": run_op(by_key[key], samples, dtype)}), flush=True)
    return 0


def _run_all(keys: list[str], samples: int, dtype: str):
    """(key, results) for each op, children restarted after a crash."""
    while keys:
        child = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--child",
                ",".join(keys),
                "--samples",
                str(samples),
                "--dtype",
                dtype,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        started = None
        for line in child.stdout:
            if not line.startswith("{"):
                continue
            record = json.loads(line)
            if "start" in record:
                started = record["start"]
            else:
                yield record["key"], [tuple(r) for r in record["results"]]
                keys = keys[keys.index(record["key"]) + 1 :]
        child.wait()
        if child.returncode != 0 and started is not None and keys and keys[0] == started:
            yield started, [("crash", f"crash: the process died ({child.returncode})")]
            keys = keys[1:]
        elif child.returncode != 0:
            break


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default=None, help="comma-separated OpInfo names (default: all)")
    parser.add_argument("--samples", type=int, default=2, help="sample inputs per op")
    parser.add_argument("--dtype", default="f32", choices=sorted(DTYPES), help="the samples' dtype")
    parser.add_argument("--json", default=None, help="write the per-op outcomes here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child is not None:
        return _child(args.child.split(","), args.samples, DTYPES[args.dtype])
    wanted = set(args.ops.split(",")) if args.ops else None
    keys = [
        _key(op)
        for op in op_db
        if (wanted is None or op.name in wanted)
        and DTYPES[args.dtype] in op.supported_dtypes("cpu")
        and not RANDOM.search(op.name)
        and not UNDEFINED.search(op.name)
    ]
    counts: collections.Counter = collections.Counter()
    reasons: collections.Counter = collections.Counter()
    per_op: dict[str, list] = {}
    for key, results in _run_all(list(dict.fromkeys(keys)), args.samples, args.dtype):
        per_op[key] = results
        for outcome, detail in results:
            counts[outcome] += 1
            if outcome != "ok":
                reasons[detail if outcome != "wrong" else "wrong"] += 1
            if outcome in ("wrong", "crash"):
                print(f"{outcome.upper()} {key}: {detail}", flush=True)
        print(f"{key}: " + ", ".join(o for o, _ in results), flush=True)
    print("\nsummary:", dict(counts))
    for reason, n in reasons.most_common(40):
        print(f"{n:5d}  {reason}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"counts": counts, "per_op": per_op}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
