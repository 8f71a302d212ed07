"""ragged-mlir on a GPU against torch padded SDPA and torch NJT, one process,
interleaved (A B C A B C ...), on real length histograms.

    python bench/gpu_bench.py                         # cuda (sm_80 PTX), fp32 and fp16
    python bench/gpu_bench.py --target llvm-cpu --device local-task --quick   # CPU check

W3: ragged attention softmax(QK^T/sqrt d)V, 12 heads x 32, B=32.
W4: one post-LN encoder layer (d 384, 12 heads, FF 1536, no biases): Q/K/V
    matmuls, attention, output matmul, residual, layer_norm, gelu FFN,
    residual, layer_norm, mean pooling; B=32 (B=8 for squadv2, as in
    bench/README.md).
Datasets: mnli and squadv2 lengths (bench/lengths.py, bench/data/lengths).

Variants, all timed with the device synchronised after every call:
  ragged-mlir          inputs already on the device (IREE DeviceArrays), the
                       raw IREE function (its entry point waits for the
                       device before returning).
  ragged-mlir (host)   numpy in, numpy out through CompiledFunction: adds
                       the host-device copies.
  torch padded SDPA    [B, H, Lmax, d] with a boolean key-padding mask.
  torch NJT SDPA       jagged nested tensors (layout=torch.jagged).
Torch runs on CUDA when the target is a GPU and torch sees one, on the CPU
for --target llvm-cpu, and is skipped otherwise (--torch-device overrides).
fp16 runs where the ragged compile supports it (f16 element types) and torch
is on CUDA (on the CPU only with --dtypes f16).

Prints one JSON line per case and a table of median ms and ratios (time of
the alternative / time of ragged-mlir: > 1 means ragged-mlir is faster), and
the max |ragged-mlir - torch padded| over real tokens as a sanity check.
Writes gpu_bench.jsonl and gpu_bench.md to --out (default $OUT if set, else
bench/gpu_results). Benchmarks are not tests: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_numerics import default_out, encoder_program  # noqa: E402

import ragged_mlir  # noqa: E402
from ragged_mlir import CompileOptions, RaggedArray  # noqa: E402
from ragged_mlir.builders import Program, attention, ragged  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = None

MAX_LEN = {"mnli": 128, "squadv2": 384}


def lengths_for(dataset: str, batch: int, seed: int) -> tuple[np.ndarray, str]:
    from lengths import sample_lengths

    return sample_lengths(dataset, batch, seed, max_len=MAX_LEN.get(dataset, 128)), dataset


def attention_program(heads, hd, dtype) -> Program:
    prog = Program()

    def w3_attention(q, k, v):
        return attention(q, k, v, scale=hd**-0.5)

    spec = ragged(None, "L", heads, hd, dtype=dtype)
    prog.func(q=spec, k=spec, v=spec)(w3_attention)
    return prog


# --------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------


def timeit(fns: dict, repeats: int, sync) -> dict:
    """Median and p90 seconds of each fn, interleaved, after 2 warm-ups."""
    for f in fns.values():
        f(), f()
        sync()
    times = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            sync()
            t = time.perf_counter()
            f()
            sync()
            times[k].append(time.perf_counter() - t)
    return {k: (float(np.median(v)), float(np.percentile(v, 90))) for k, v in times.items()}


class Ragged:
    """A compiled ragged-mlir function, callable from numpy or device arrays."""

    def __init__(self, prog, name, options):
        t0 = time.perf_counter()
        self.module = ragged_mlir.compile(prog, options=options)
        self.compile_s = time.perf_counter() - t0
        self.fn = getattr(self.module, name)
        self.raw = self.module.raw(name)
        try:
            import iree.runtime as rt

            device = self.module._ctx.config.device  # the module's HAL device
            self.upload = lambda a: rt.asdevicearray(device, np.ascontiguousarray(a))
        except Exception as e:  # noqa: BLE001
            print(f"# device-resident inputs unavailable ({e}); timing host calls only", flush=True)
            self.upload = None

    def device_call(self, flat_host):
        """A no-argument callable running the raw function on uploaded inputs."""
        if self.upload is None:
            return None
        dev = [self.upload(a) for a in flat_host]
        return lambda: self.raw(*dev)


def flat_args(args) -> list[np.ndarray]:
    out = []
    for a in args:
        if isinstance(a, RaggedArray):
            out += [a.values, *a.partitions]
        else:
            out.append(np.asarray(a))
    return out


# --------------------------------------------------------------------------
# Torch baselines
# --------------------------------------------------------------------------


def build_torch_w3(qkv_items, lengths, heads, hd, tdev, tdtype):
    """(variants, padded_output_fn): q, k, v item lists of [n, H, d]."""
    b, lmax = len(lengths), int(lengths.max())
    mask = (torch.arange(lmax)[None, :] < torch.from_numpy(lengths)[:, None]).to(tdev)[:, None, None, :]

    def padded(items):
        p = torch.zeros(b, lmax, heads, hd, dtype=tdtype)
        for i, it in enumerate(items):
            p[i, : len(it)] = torch.from_numpy(np.asarray(it, np.float32)).to(tdtype)
        return p.to(tdev).transpose(1, 2)  # [B, H, L, d]

    qp, kp, vp = (padded(t) for t in qkv_items)
    nts = [
        torch.nested.nested_tensor(
            [torch.from_numpy(np.asarray(it, np.float32)) for it in t],
            layout=torch.jagged,
            dtype=tdtype,
            device=tdev,
        ).transpose(1, 2)  # [B, H, j, d]
        for t in qkv_items
    ]
    variants = {
        "torch padded SDPA": lambda: F.scaled_dot_product_attention(
            qp, kp, vp, attn_mask=mask, scale=hd**-0.5
        ),
        "torch NJT SDPA": lambda: F.scaled_dot_product_attention(*nts, scale=hd**-0.5),
    }

    def padded_tokens():
        o = variants["torch padded SDPA"]().transpose(1, 2).float().cpu().numpy()  # [B, L, H, d]
        return [o[i, :n] for i, n in enumerate(lengths)]

    return variants, padded_tokens


def torch_layer(x, params, heads, mask=None):
    """The W4 layer on padded [B, L, d] (with a [B, 1, 1, L] mask) or NJT [B, j, d]."""
    wq, wk, wv, wo, g1, b1, w1, w2, g2, b2 = params
    d = x.shape[-1]
    hd = d // heads
    q, k, v = ((x @ w).unflatten(-1, (heads, hd)).transpose(1, 2) for w in (wq, wk, wv))
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=hd**-0.5).transpose(1, 2).flatten(-2)
    h = F.layer_norm(a @ wo + x, (d,), g1, b1, 1e-5)
    return F.layer_norm(F.gelu(h @ w1) @ w2 + h, (d,), g2, b2, 1e-5)


def build_torch_w4(items, lengths, params, heads, tdev, tdtype):
    b, lmax = len(lengths), int(lengths.max())
    d = items[0].shape[-1]
    tp = [torch.from_numpy(np.asarray(p, np.float32)).to(device=tdev, dtype=tdtype) for p in params]
    pad = torch.zeros(b, lmax, d, dtype=tdtype)
    for i, it in enumerate(items):
        pad[i, : len(it)] = torch.from_numpy(np.asarray(it, np.float32)).to(tdtype)
    pad = pad.to(tdev)
    valid = (torch.arange(lmax)[None, :] < torch.from_numpy(lengths)[:, None]).to(tdev)
    mask = valid[:, None, None, :]
    count = valid.sum(1, keepdim=True).clamp(min=1).to(tdtype)
    nt = torch.nested.nested_tensor(
        [torch.from_numpy(np.asarray(it, np.float32)) for it in items],
        layout=torch.jagged,
        dtype=tdtype,
        device=tdev,
    )

    def padded():
        y = torch_layer(pad, tp, heads, mask)
        return y, (y * valid[:, :, None]).sum(1) / count

    def njt():
        y = torch_layer(nt, tp, heads)
        return y, y.mean(dim=1)

    variants = {"torch padded SDPA": padded, "torch NJT SDPA": njt}

    def padded_tokens():
        y, pooled = padded()
        y = y.float().cpu().numpy()
        return [y[i, :n] for i, n in enumerate(lengths)], pooled.float().cpu().numpy()

    return variants, padded_tokens


# --------------------------------------------------------------------------


def max_diff(ours, ref_tokens, lengths, pooled=None, ref_pooled=None) -> float:
    o = np.zeros(len(lengths) + 1, np.int64)
    o[1:] = np.cumsum(lengths)
    vals = np.asarray(ours.values, np.float32)
    err = max(
        (float(np.abs(vals[o[i] : o[i + 1]] - r).max(initial=0)) for i, r in enumerate(ref_tokens)),
        default=0.0,
    )
    if pooled is not None:
        err = max(err, float(np.abs(np.asarray(pooled, np.float32) - ref_pooled).max(initial=0)))
    return err


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="cuda", help="IREE target backend (default cuda)")
    ap.add_argument("--device", default=None, help="IREE runtime driver (default: the target's)")
    ap.add_argument("--iree-flag", action="append", default=[], help="extra iree-compile flag (repeatable)")
    ap.add_argument("--torch-device", default="auto", help="auto | cuda | cpu | none")
    ap.add_argument("--datasets", nargs="+", default=["mnli", "squadv2"])
    ap.add_argument("--workloads", nargs="+", default=["W3", "W4"], choices=["W3", "W4"])
    ap.add_argument(
        "--dtypes",
        nargs="+",
        default=None,
        choices=["f32", "f16"],
        help="default: f32 f16 on a GPU, f32 on the CPU",
    )
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--quick", action="store_true", help="small sizes, 3 repeats: checks that everything runs"
    )
    ap.add_argument(
        "--out", type=Path, default=None, help="output folder (default $OUT, else bench/gpu_results)"
    )
    args = ap.parse_args(argv)

    options = CompileOptions(target=args.target, device=args.device, iree_flags=args.iree_flag)
    on_cpu = options.target.value == "llvm-cpu"
    d, heads, ff = (64, 4, 128) if args.quick else (384, 12, 1536)
    hd = d // heads
    repeats = 3 if args.quick else args.repeats
    dtypes = args.dtypes or (["f32"] if on_cpu else ["f32", "f16"])
    out_dir = args.out or default_out()
    out_dir.mkdir(parents=True, exist_ok=True)

    tdev = None
    if torch is not None and args.torch_device != "none":
        if args.torch_device == "auto":
            tdev = "cpu" if on_cpu else ("cuda" if torch.cuda.is_available() else None)
        else:
            tdev = args.torch_device
        if tdev == "cuda" and not torch.cuda.is_available():
            print("# torch has no CUDA here: torch baselines skipped", flush=True)
            tdev = None
    sync = (lambda: torch.cuda.synchronize()) if tdev == "cuda" else (lambda: None)
    gpu_name = torch.cuda.get_device_name() if tdev == "cuda" else "-"
    print(
        f"# target {options.target.value}, device {options.driver}, flags {options.flags()}; "
        f"torch {torch.__version__ if torch else '-'} on {tdev or 'nothing'} ({gpu_name}); "
        f"{platform.processor() or platform.machine()}; d {d}, heads {heads}, ff {ff}, repeats {repeats}",
        flush=True,
    )

    compiled: dict = {}

    def get(workload, dtype):
        key = (workload, dtype)
        if key not in compiled:
            try:
                if workload == "W3":
                    compiled[key] = Ragged(attention_program(heads, hd, dtype), "w3_attention", options)
                else:
                    compiled[key] = Ragged(encoder_program(d, heads, ff, dtype), "encoder_layer", options)
                print(f"# compile {workload} {dtype}: {compiled[key].compile_s:.1f} s", flush=True)
            except Exception as e:  # noqa: BLE001
                line = next(
                    (ln for ln in str(e).splitlines() if "error:" in ln),
                    str(e).splitlines()[0] if str(e) else "",
                )
                print(f"# compile {workload} {dtype} FAILED: {type(e).__name__}: {line}", flush=True)
                compiled[key] = None
        return compiled[key]

    rows = []
    jsonl = open(out_dir / "gpu_bench.jsonl", "w")  # noqa: SIM115  (written as the cases run)
    for dtype in dtypes:
        np_dtype = np.float16 if dtype == "f16" else np.float32
        tdtype = (torch.float16 if dtype == "f16" else torch.float32) if torch is not None else None
        for workload in args.workloads:
            ours = get(workload, dtype)
            if ours is None:
                continue
            for dataset in args.datasets:
                batch = 8 if (workload == "W4" and dataset in ("squadv2", "race")) else 32
                lengths, source = lengths_for(dataset, batch, args.seed)
                rng = np.random.default_rng(args.seed)
                if workload == "W3":
                    qkv = [
                        [rng.standard_normal((n, heads, hd)).astype(np_dtype) for n in lengths]
                        for _ in range(3)
                    ]
                    call_args = [RaggedArray.from_list(t) for t in qkv]
                else:
                    items = [rng.standard_normal((n, d)).astype(np_dtype) for n in lengths]
                    params = [
                        (rng.standard_normal(s) / math.sqrt(s[0])).astype(np_dtype) for s in [(d, d)] * 4
                    ]
                    params = params[:4] + [
                        np.ones(d, np_dtype),
                        np.zeros(d, np_dtype),
                        (rng.standard_normal((d, ff)) / math.sqrt(d)).astype(np_dtype),
                        (rng.standard_normal((ff, d)) / math.sqrt(ff)).astype(np_dtype),
                        np.ones(d, np_dtype),
                        np.zeros(d, np_dtype),
                    ]
                    call_args = [RaggedArray.from_list(items), *params]
                variants = {}
                dev_call = ours.device_call(flat_args(call_args))
                if dev_call is not None:
                    variants["ragged-mlir"] = dev_call
                variants["ragged-mlir (host)"] = lambda f=ours.fn, a=call_args: f(*a)
                diff, notes = None, {}
                if tdev is not None and not (dtype == "f16" and tdev == "cpu" and args.dtypes is None):
                    try:
                        if workload == "W3":
                            tv, ref = build_torch_w3(qkv, lengths, heads, hd, tdev, tdtype)
                        else:
                            tv, ref = build_torch_w4(items, lengths, params, heads, tdev, tdtype)
                        for name, f in tv.items():
                            try:  # some NJT paths are unsupported for some dtypes / devices
                                f()
                                sync()
                                variants[name] = f
                            except Exception as e:  # noqa: BLE001
                                notes[name] = (
                                    f"unsupported: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                                )
                        got = ours.fn(*call_args)
                        if workload == "W3":
                            diff = max_diff(got, ref(), lengths)
                        else:
                            rt_, rp = ref()
                            diff = max_diff(got[0], rt_, lengths, got[1], rp)
                    except Exception as e:  # noqa: BLE001
                        notes["torch"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                try:
                    t = timeit(variants, repeats, sync)
                except Exception as e:  # noqa: BLE001
                    print(
                        f"# {workload} {dataset} {dtype}: timing failed: {type(e).__name__}: {e}", flush=True
                    )
                    continue
                base = "ragged-mlir" if "ragged-mlir" in t else "ragged-mlir (host)"
                ours_t = t[base][0]
                util = float(lengths.sum() / (len(lengths) * lengths.max()))
                rec = {
                    "workload": workload,
                    "dataset": dataset,
                    "lengths_from": source,
                    "dtype": dtype,
                    "batch": int(batch),
                    "util": round(util, 3),
                    "max_len": int(lengths.max()),
                    "tokens": int(lengths.sum()),
                    "target": options.target.value,
                    "device": options.driver,
                    "torch_device": tdev,
                    "median_ms": {k: round(v[0] * 1e3, 4) for k, v in t.items()},
                    "p90_ms": {k: round(v[1] * 1e3, 4) for k, v in t.items()},
                    "ratio_vs_ragged_mlir": {k: round(v[0] / ours_t, 3) for k, v in t.items() if k != base},
                    "max_abs_diff_vs_torch_padded": diff,
                    "notes": notes,
                    "compile_s": round(ours.compile_s, 2),
                }
                rows.append(rec)
                line = json.dumps(rec)
                print(line, flush=True)
                jsonl.write(line + "\n")
                jsonl.flush()
    jsonl.close()

    table = [
        "| workload | dataset | dtype | B | util | ragged-mlir ms | host ms | vs torch padded SDPA | vs torch NJT SDPA | max diff |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        m, rat = r["median_ms"], r["ratio_vs_ragged_mlir"]

        def fmt(k, rat=rat, notes=r["notes"]):
            return f"{rat[k]:.2f}x" if k in rat else ("unsupported" if k in notes else "n/a")

        table.append(
            f"| {r['workload']} | {r['dataset']} | {r['dtype']} | {r['batch']} | {r['util']:.2f} | "
            f"{m.get('ragged-mlir', float('nan')):.3f} | {m['ragged-mlir (host)']:.3f} | "
            f"{fmt('torch padded SDPA')} | {fmt('torch NJT SDPA')} | "
            f"{'-' if r['max_abs_diff_vs_torch_padded'] is None else format(r['max_abs_diff_vs_torch_padded'], '.1e')} |"
        )
    text = "\n".join(table)
    print()
    print(text)
    print("\nratio = torch time / ragged-mlir (device-resident) time: > 1 means ragged-mlir is faster")
    (out_dir / "gpu_bench.md").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
