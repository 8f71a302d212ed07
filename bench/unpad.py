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
  flex_packed      packed tokens [N, D]: eager embeddings, then each layer
                   torch.compile'd with flex_attention and the batch's
                   document block mask (built once per batch)
  ort_padded       ONNX Runtime: the model exported and fused for BERT
                   (samples/onnx_baseline.py), on the padded batch
  ort_bucketed     the same session on 4 length-sorted buckets, each padded
                   to its own longest item (sentence-transformers' way)
  ort_plain_bucketed  the same without the BERT fusions (ORT's own graph
                   optimisations only)

Prints one JSON line per (dataset, variant) and a table: median ms, ratio to
padded eager, to inductor and to the fastest peer (every variant but ours), and roofline attainment (useful FLOP/s, real
tokens only, over the GEMM peak torch.mm reaches in the same process).
Benchmarks are not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import workloads as W  # noqa: E402
from common import gemm_peak_gflops, settled_call, setup  # noqa: E402
from lengths import sample_lengths  # noqa: E402

BATCH = {"mnli": 32, "squadv2": 8, "race": 8}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", nargs="+", default=["mnli", "squadv2", "race"])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--no-inductor", action="store_true", help="leave out inductor_padded and flex_packed")
    args = ap.parse_args()
    setup(args.threads)

    import onnx_baseline
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
    state = {k: t.detach() for k, t in hf.state_dict().items()}
    flex_layers = (
        None
        if args.no_inductor
        else W.compiled_layers(W.FlexLayer, state, hf.config.num_hidden_layers, "encoder.")
    )
    ort = {}
    why_not_ort = onnx_baseline.unavailable()
    if why_not_ort:
        print(f"ONNX Runtime left out: {why_not_ort}", file=sys.stderr)
    else:
        eager = BertModel.from_pretrained(minilm_path(), attn_implementation="eager")
        ort = {"fused": onnx_baseline.OrtBert(eager), "plain": onnx_baseline.OrtBert(eager, fused=False)}

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
        rows_of = {name: (lambda o: o[valid]) for name in calls}  # output -> packed rows
        calls["ragged_nested"] = lambda: ragged_nested(nt_ids, nt_pos)
        rows_of["ragged_nested"] = lambda o: o.values
        if flex_layers:
            block = W.flex_document_mask(lengths)
            packed_ids, packed_pos = ids[valid], nt_pos.values

            def flex(block=block, packed_ids=packed_ids, packed_pos=packed_pos):
                x = W._embed(state, packed_ids, packed_pos)
                for mod in flex_layers:
                    x = mod(x, block)
                return x

            calls["flex_packed"], rows_of["flex_packed"] = flex, lambda o: o
        if ort:
            ids_np, mask_np = ids.numpy(), mask.numpy()
            bks = onnx_baseline.length_sorted_buckets(ids_np, mask_np)
            packed = lambda outs: torch.from_numpy(np.concatenate(onnx_baseline.unbucket(bks, outs)))  # noqa: E731
            calls["ort_padded"] = lambda: ort["fused"](ids_np, mask_np)
            rows_of["ort_padded"] = lambda o: torch.from_numpy(o)[valid]
            for form in ("fused", "plain"):
                name = "ort_bucketed" if form == "fused" else "ort_plain_bucketed"
                calls[name] = lambda s=ort[form]: [s(i, m) for _, i, m in bks]
                rows_of[name] = packed
        times: dict[str, list[float]] = {k: [] for k in calls}
        errors = {}
        fallbacks0 = rb.stats["fallbacks"]
        with torch.no_grad():
            ref = hidden(ids, mask)[valid]
            for name, call in calls.items():  # warm-up: compile, check
                errors[name] = float((rows_of[name](call()) - ref).abs().max())
            for _ in range(args.rounds):
                for name, call in calls.items():
                    times[name].append(settled_call(call)[1])
        fell_back = rb.stats["fallbacks"] - fallbacks0
        util = float(lengths.sum()) / (len(lengths) * length)
        flops = W.useful_flops("W5", lengths, layers=6)  # the six encoder layers of MiniLM
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
                "vs_best_peer": round(
                    min(t for k, t in med.items() if not k.startswith("ragged")) / med[name], 2
                ),
                "roofline": round(flops / med[name] / 1e9 / peak, 3),
                "max_abs_err": errors[name],
            }
            if name.startswith("ragged") and fell_back:
                row["note"] = f"{fell_back} graph(s) fell back to eager: no speedup reported"
                row["vs_padded_eager"] = row["vs_inductor"] = row["vs_best_peer"] = None
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(
        "\n| dataset | B | util | variant | ms | vs padded eager | vs inductor | vs best peer | roofline | max err |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['dataset']} | {r['batch']} | {r['util']} | {r['variant']} | {r['median_ms']} | "
            f"{r['vs_padded_eager']} | {r['vs_inductor']} | {r['vs_best_peer']} | {r['roofline']} | "
            f"{r['max_abs_err']:.1e} |"
        )


if __name__ == "__main__":
    main()
