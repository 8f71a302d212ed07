"""Drop-in unpadding: the unmodified Hugging Face all-MiniLM-L6-v2
``BertModel`` on padded ``input_ids`` + ``attention_mask``, side by side in one
process (interleaved rounds, median), on batches drawn from real length
histograms.

    python bench/unpad.py                      # mnli, squadv2, race
    python bench/unpad.py --datasets mnli --rounds 3 --no-inductor

Variants (all return the last hidden state; errors are taken over the valid
positions against padded eager):
  padded_eager     the model as it ships (SDPA attention), torch.no_grad
  inductor_padded  torch.compile(model, dynamic=True): inductor, still padded
  ragged_unpadded  torch.compile(model, backend="ragged", dynamic=True,
                   options={"unpad": True}): the same call, run on the
                   valid tokens only
  ragged_nested    samples/ragged_bert.py's RaggedBertModel with the same
                   weights on NestedTensors (the model rewritten by hand),
                   under backend="ragged"

Prints one JSON line per (dataset, variant) and a table: median ms, ratio to
padded eager and to inductor, and roofline attainment (useful FLOP/s, real
tokens only, over the GEMM peak torch.mm reaches in the same process).
Benchmarks are not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import gemm_peak_gflops, setup  # noqa: E402
from lengths import sample_lengths  # noqa: E402
from workloads import useful_flops  # noqa: E402

BATCH = {"mnli": 32, "squadv2": 8, "race": 8}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["mnli", "squadv2", "race"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-inductor", action="store_true")
    args = ap.parse_args()
    setup(args.threads)

    from ragged_bert import load_minilm, minilm_path
    from transformers import BertModel

    import ragged_mlir.torch.backend as rb
    from ragged_mlir.torch import NestedTensor

    hf = BertModel.from_pretrained(minilm_path(), attn_implementation="sdpa").eval()
    nested_model = load_minilm()[0].bert

    def hidden(i, m):
        return hf(input_ids=i, attention_mask=m).last_hidden_state

    variants = {"padded_eager": hidden}
    if not args.no_inductor:
        variants["inductor_padded"] = torch.compile(hidden, dynamic=True)
    variants["ragged_unpadded"] = torch.compile(
        hidden, backend="ragged", dynamic=True, options={"unpad": True}
    )
    ragged_nested = torch.compile(nested_model, backend="ragged", dynamic=True)

    peak = gemm_peak_gflops()
    print(f"GEMM peak (torch.mm 2048^2 fp32, {args.threads} threads): {peak:.1f} GFLOP/s", file=sys.stderr)
    rows = []
    for dataset in args.datasets:
        lengths = sample_lengths(dataset, BATCH.get(dataset, 32), args.seed)
        length = int(lengths.max())
        g = torch.Generator().manual_seed(args.seed)
        ids = torch.zeros(len(lengths), length, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for b, n in enumerate(lengths):
            ids[b, :n] = torch.randint(1000, 29000, (int(n),), generator=g)
            mask[b, :n] = 1
        nt_ids = NestedTensor([ids[b, :n] for b, n in enumerate(lengths)])
        nt_pos = NestedTensor([torch.arange(int(n)) for n in lengths])
        valid = mask.bool()
        calls = {name: (lambda f=f: f(ids, mask)) for name, f in variants.items()}
        calls["ragged_nested"] = lambda: ragged_nested(nt_ids, nt_pos)
        times: dict[str, list[float]] = {k: [] for k in calls}
        errors = {}
        fallbacks0 = rb.stats["fallbacks"]
        with torch.no_grad():
            ref = hidden(ids, mask)[valid]
            for name, call in calls.items():  # warm-up: compile, check
                out = call()
                got = out.values if name == "ragged_nested" else out[valid]
                errors[name] = float((got - ref).abs().max())
            for _ in range(args.rounds):
                for name, call in calls.items():
                    t0 = time.perf_counter()
                    call()
                    times[name].append(time.perf_counter() - t0)
        fell_back = rb.stats["fallbacks"] - fallbacks0
        util = float(lengths.sum()) / (len(lengths) * length)
        flops = useful_flops("W5", lengths, layers=6)  # the six encoder layers of MiniLM
        med = {k: statistics.median(v) for k, v in times.items()}
        for name in calls:
            row = {
                "dataset": dataset,
                "batch": len(lengths),
                "util": round(util, 3),
                "variant": name,
                "median_ms": round(med[name] * 1e3, 2),
                "vs_padded_eager": round(med["padded_eager"] / med[name], 2),
                "vs_inductor": round(med["inductor_padded"] / med[name], 2)
                if "inductor_padded" in med
                else None,
                "roofline": round(flops / med[name] / 1e9 / peak, 3),
                "max_abs_err": errors[name],
            }
            if name.startswith("ragged") and fell_back:
                row["note"] = f"{fell_back} graph(s) fell back to eager: no speedup reported"
                row["vs_padded_eager"] = row["vs_inductor"] = None
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| dataset | B | util | variant | ms | vs padded eager | vs inductor | roofline | max err |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['dataset']} | {r['batch']} | {r['util']} | {r['variant']} | {r['median_ms']} | "
            f"{r['vs_padded_eager']} | {r['vs_inductor']} | {r['roofline']} | {r['max_abs_err']:.1e} |"
        )


if __name__ == "__main__":
    main()
