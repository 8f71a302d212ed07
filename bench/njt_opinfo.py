"""Every PyTorch NJT OpInfo sample of the common ops through backend="ragged".

Runs the cases of ``bench/njt_opinfo_cases.py`` (fallback off, compared
with eager NJT) and prints per-op counts and the distinct failure messages.
The test command runs three kinds per op; this runs all of them (about half
an hour on 2 cores)::

    python bench/njt_opinfo.py [--ops abs,add,...] [--per-kind N]
"""

from __future__ import annotations

import argparse
import collections
import warnings

import torch
from njt_opinfo_cases import OPS, cases, check

import ragged_mlir.torch  # noqa: F401  (registers the backend)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated OpInfo names")
    parser.add_argument("--per-kind", type=int, default=None, help="samples of each kind per op")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(2)
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    failures: collections.Counter = collections.Counter()
    for case in cases(args.ops.split(","), per_kind=args.per_kind):
        try:
            counts[case.op]["ok" if check(case) else "eager fails"] += 1
        except Exception as e:  # every failure is reported, by message
            counts[case.op]["fail"] += 1
            lines = [
                ln
                for ln in str(e).splitlines()
                if ln.strip() and "TORCHDYNAMO" not in ln and "raised" not in ln
            ]
            failures[(case.op, (lines[0] if lines else type(e).__name__)[:200])] += 1
    total = collections.Counter()
    print(f"{'op':32} {'ok':>5} {'fail':>5} {'eager fails':>12}")
    for op, c in counts.items():
        total.update(c)
        print(f"{op:32} {c['ok']:5d} {c['fail']:5d} {c['eager fails']:12d}")
    print(f"{'total':32} {total['ok']:5d} {total['fail']:5d} {total['eager fails']:12d}")
    for (op, message), n in failures.most_common():
        print(f"{n:4d} {op}: {message}")
    return 0 if not failures else 1


if __name__ == "__main__":
    raise SystemExit(main())
