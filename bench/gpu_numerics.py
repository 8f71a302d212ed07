"""Numerics of a subset of ragged ops on a GPU (or any IREE target), against
float64 numpy references computed item by item.

    python bench/gpu_numerics.py                      # cuda (sm_80 PTX), device 'cuda'
    python bench/gpu_numerics.py --target llvm-cpu --device local-task   # CPU check
    python bench/gpu_numerics.py --only attention encoder_layer --no-f16

Ops: reduce (sum, mean, max), softmax over the ragged dim, matmul, layer_norm,
attention (full and causal, 12 heads x 32), a whole encoder layer (d 384,
12 heads, FF 1536), and f16 variants of matmul, softmax, layer_norm and
attention. Each op is its own module (a compile failure stays local), with a
dynamic batch, run on edge-case length sets (empty items mixed in, B = 1, one
300-long item, all-equal, all items empty), a random set and a batch of real
MNLI lengths (bench/lengths.py).

Prints one line per op: PASS / FAIL (worst error and where) / ERROR (compile
or run failure, first line), then a summary; writes gpu_numerics.json to
--out (default: $OUT if set, else bench/gpu_results). Exit status 1 if any
op did not pass.

Tolerances, ``|got - ref| <= atol + rtol * |ref|`` with ``scale = max(1,
max |ref|)``: f32 rtol 1e-4, atol 1e-4 * scale (the encoder layer 1e-3);
f16 rtol 3e-2, atol 3e-2 * scale (f16 storage and, on some targets, f16
accumulation); max reductions exact.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ragged_mlir  # noqa: E402
from ragged_mlir import CompileOptions, RaggedArray  # noqa: E402

F64 = np.float64

#: Edge-case batches of item lengths (as test/e2e/conftest.py).
EDGE_LENGTHS = {
    "empty_mixed": [3, 0, 5, 0],
    "batch1": [7],
    "one_long": [1, 2, 300, 1],
    "all_equal": [4] * 8,
    "all_empty": [0, 0, 0],
}

D, FF, HEADS, HD, N_OUT = 384, 1536, 12, 32, 256


def default_out() -> Path:
    return (
        Path(os.environ["OUT"]) if os.environ.get("OUT") else Path(__file__).resolve().parent / "gpu_results"
    )


def length_sets(seed: int) -> dict[str, list[int]]:
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 65, size=16)
    lens[rng.random(16) < 0.2] = 0
    sets = {**EDGE_LENGTHS, "random": [int(x) for x in lens]}
    try:
        from lengths import sample_lengths

        sets["mnli_b32"] = [int(x) for x in sample_lengths("mnli", 32, seed)]
    except (FileNotFoundError, ImportError) as e:
        print(f"# mnli lengths skipped: {e}", flush=True)
    return sets


# --------------------------------------------------------------------------
# Programs (the builders, plus a head split/merge on the packed values)
# --------------------------------------------------------------------------


def encoder_program(d=D, heads=HEADS, ff=FF, dtype="f32", batch=None, name="encoder_layer"):
    """Post-LN BERT encoder layer without biases: returns (y, mean-pooled y)."""
    from ragged_mlir.builders import Program, attention, ragged, tensor

    hd = d // heads
    prog = Program()
    w = lambda *s: tensor(*s, dtype=dtype)  # noqa: E731

    def layer(x, wq, wk, wv, wo, g1, b1, w1, w2, g2, b2):
        q, k, v = ((x @ m).reshape(heads, hd) for m in (wq, wk, wv))
        a = (attention(q, k, v, scale=hd**-0.5)).reshape(d)
        h = ((a @ wo) + x).layer_norm(g1, b1)
        y = (((h @ w1).gelu() @ w2) + h).layer_norm(g2, b2)
        return y, y.reduce("mean")

    layer.__name__ = name
    prog.func(
        x=ragged(batch, "L", d, dtype=dtype),
        wq=w(d, d),
        wk=w(d, d),
        wv=w(d, d),
        wo=w(d, d),
        g1=w(d),
        b1=w(d),
        w1=w(d, ff),
        w2=w(ff, d),
        g2=w(d),
        b2=w(d),
    )(layer)
    return prog


def op_program(case: str, dtype: str):
    from ragged_mlir.builders import Program, attention, ragged, tensor

    tok = {"x": ragged(None, "L", D, dtype=dtype)}
    att = {n: ragged(None, "L", HEADS, HD, dtype=dtype) for n in "qkv"}
    bodies = {
        "reduce_sum": (tok, lambda x: x.reduce("sum")),
        "reduce_mean": (tok, lambda x: x.reduce("mean")),
        "reduce_max": (tok, lambda x: x.reduce("max", empty=float("-inf"))),
        "softmax": (tok, lambda x: x.softmax()),
        "matmul": ({**tok, "w": tensor(D, N_OUT, dtype=dtype)}, lambda x, w: x @ w),
        "layer_norm": (
            {**tok, "g": tensor(D, dtype=dtype), "b": tensor(D, dtype=dtype)},
            lambda x, g, b: x.layer_norm(g, b),
        ),
        "attention": (att, lambda q, k, v: attention(q, k, v, scale=HD**-0.5)),
        "attention_causal": (att, lambda q, k, v: attention(q, k, v, scale=HD**-0.5, causal=True)),
    }
    specs, body = bodies[case]
    body.__name__ = case  # the function's symbol
    prog = Program()
    prog.func(**specs)(body)
    return prog


# --------------------------------------------------------------------------
# float64 references, item by item
# --------------------------------------------------------------------------

_erf = np.vectorize(math.erf, otypes=[F64])


def ref_gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))) if x.size else x.copy()


def ref_softmax(x, axis):
    if x.shape[axis] == 0:
        return x.copy()
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def ref_layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(-1, keepdims=True) + eps) * g + b


def ref_attention(q, k, v, scale, causal=False):
    """q, k, v: [n, H, d] -> [n, H, d]."""
    n = q.shape[0]
    if n == 0:
        return q.copy()
    s = np.einsum("ihd,jhd->hij", q, k) * scale
    if causal:
        s = np.where(np.triu(np.ones((n, n), bool), 1)[None], -np.inf, s)
    return np.einsum("hij,jhd->ihd", ref_softmax(s, -1), v)


def ref_encoder(x, wq, wk, wv, wo, g1, b1, w1, w2, g2, b2, heads=HEADS):
    n, d = x.shape
    hd = d // heads
    q, k, v = ((x @ m).reshape(n, heads, hd) for m in (wq, wk, wv))
    a = ref_attention(q, k, v, hd**-0.5).reshape(n, d)
    h = ref_layer_norm(a @ wo + x, g1, b1)
    y = ref_layer_norm(ref_gelu(h @ w1) @ w2 + h, g2, b2)
    return y, (y.mean(0) if n else np.zeros(d))


# --------------------------------------------------------------------------
# Cases: inputs, reference and comparison
# --------------------------------------------------------------------------

CASES = [
    "reduce_sum",
    "reduce_mean",
    "reduce_max",
    "softmax",
    "matmul",
    "layer_norm",
    "attention",
    "attention_causal",
    "encoder_layer",
]
F16_CASES = ["matmul", "softmax", "layer_norm", "attention"]


def _offsets(lengths):
    o = np.zeros(len(lengths) + 1, np.int64)
    o[1:] = np.cumsum(lengths)
    return o


def make_inputs(case: str, lengths, rng, np_dtype):
    """(args for the compiled function, float64 per-item reference outputs)."""
    cast = lambda a: np.asarray(a, np_dtype)  # noqa: E731
    up = lambda a: np.asarray(a, F64)  # noqa: E731  (reference sees the rounded inputs)

    def items(trailing, lo=-1.0, hi=1.0):
        return [cast(rng.uniform(lo, hi, (n, *trailing))) for n in lengths]

    if case.startswith("attention"):
        q, k, v = items((HEADS, HD), -2, 2), items((HEADS, HD), -2, 2), items((HEADS, HD))
        ref = [
            ref_attention(up(a), up(b), up(c), HD**-0.5, case.endswith("causal"))
            for a, b, c in zip(q, k, v, strict=False)
        ]
        return [RaggedArray.from_list(t) for t in (q, k, v)], ("ragged", ref)
    if case == "encoder_layer":
        x = items((D,))
        ws = [cast(rng.standard_normal(s) / math.sqrt(s[0])) for s in [(D, D)] * 4]
        g1, b1, g2, b2 = (
            cast(rng.uniform(0.5, 1.5, D) if i % 2 == 0 else rng.uniform(-0.1, 0.1, D)) for i in range(4)
        )
        w1 = cast(rng.standard_normal((D, FF)) / math.sqrt(D))
        w2 = cast(rng.standard_normal((FF, D)) / math.sqrt(FF))
        params = [*ws, g1, b1, w1, w2, g2, b2]
        refs = [ref_encoder(up(it), *map(up, params)) for it in x]
        pooled = np.stack([r[1] for r in refs]) if refs else np.zeros((0, D))
        return [RaggedArray.from_list(x), *params], ("encoder", ([r[0] for r in refs], pooled))
    x = items((D,))
    xs = [up(it) for it in x]
    if case == "reduce_sum":
        return [RaggedArray.from_list(x)], ("dense", np.stack([it.sum(0) for it in xs]))
    if case == "reduce_mean":
        return [RaggedArray.from_list(x)], (
            "dense",
            np.stack([it.mean(0) if len(it) else np.zeros(D) for it in xs]),
        )
    if case == "reduce_max":
        return [RaggedArray.from_list(x)], (
            "dense",
            np.stack([it.max(0) if len(it) else np.full(D, -np.inf) for it in xs]),
        )
    if case == "softmax":
        return [RaggedArray.from_list(x)], ("ragged", [ref_softmax(it, 0) for it in xs])
    if case == "matmul":
        w = cast(rng.standard_normal((D, N_OUT)) / math.sqrt(D))
        return [RaggedArray.from_list(x), w], ("ragged", [it @ up(w) for it in xs])
    if case == "layer_norm":
        g, b = cast(rng.uniform(0.5, 1.5, D)), cast(rng.uniform(-0.5, 0.5, D))
        return [RaggedArray.from_list(x), g, b], ("ragged", [ref_layer_norm(it, up(g), up(b)) for it in xs])
    raise KeyError(case)


def tolerance(case: str, dtype: str) -> tuple[float, float]:
    if dtype == "f16":
        return 3e-2, 3e-2
    if case == "encoder_layer":
        return 1e-3, 1e-3
    if case == "reduce_max":
        return 0.0, 0.0
    return 1e-4, 1e-4


def excess(got, want, rtol, atol_rel) -> tuple[float, float]:
    """(max |got - want|, max of |got - want| / allowed); infs must match."""
    got, want = np.asarray(got, F64), np.asarray(want, F64)
    if got.shape != want.shape:
        raise AssertionError(f"shape {got.shape} != {want.shape}")
    if got.size == 0:
        return 0.0, 0.0
    inf = np.isinf(want)
    if not np.array_equal(np.isinf(got) & (np.sign(got) == np.sign(want)), inf):
        return math.inf, math.inf
    g, w = got[~inf], want[~inf]
    if g.size == 0:
        return 0.0, 0.0
    if np.isnan(g).any():
        return math.nan, math.inf
    scale = max(1.0, float(np.abs(w).max()))
    err = np.abs(g - w)
    allowed = atol_rel * scale + rtol * np.abs(w)
    ratio = (
        float((err / np.maximum(allowed, 1e-300)).max())
        if allowed.max() > 0
        else (0.0 if err.max() == 0 else math.inf)
    )
    return float(err.max()), ratio


def check(out, expected, lengths, rtol, atol) -> tuple[float, float, str]:
    """Worst (error, error / allowed, where) of one call."""
    kind, ref = expected
    worst = (0.0, 0.0, "")

    def upd(e, r, where):
        nonlocal worst
        if not (r <= worst[1]):  # NaN-aware
            worst = (e, r, where)

    def ragged_items(ra, items):
        assert isinstance(ra, RaggedArray), type(ra)
        np.testing.assert_array_equal(ra.partitions[0], _offsets(lengths), err_msg="result offsets")
        o = _offsets(lengths)
        for b, want in enumerate(items):
            e, r = excess(ra.values[o[b] : o[b + 1]], want, rtol, atol)
            upd(e, r, f"item {b} (length {lengths[b]})")

    if kind == "dense":
        for b in range(len(lengths)):
            e, r = excess(out[b], ref[b], rtol, atol)
            upd(e, r, f"item {b} (length {lengths[b]})")
    elif kind == "ragged":
        ragged_items(out, ref)
    else:
        y, pooled = out
        ragged_items(y, ref[0])
        for b in range(len(lengths)):
            e, r = excess(pooled[b], ref[1][b], rtol, atol)
            upd(e, r, f"pooled item {b} (length {lengths[b]})")
    return worst


def first_line(e: BaseException) -> str:
    text = str(e)
    for line in text.splitlines():
        if "error:" in line:
            return line.strip()
    return f"{type(e).__name__}: " + (text.splitlines()[0] if text else "")


def run_case(case, dtype, options, sets, seed):
    name = case if dtype == "f32" else f"{case}_f16"
    rec = {"op": name, "dtype": dtype}
    t0 = time.perf_counter()
    try:
        prog = encoder_program(dtype=dtype) if case == "encoder_layer" else op_program(case, dtype)
        module = ragged_mlir.compile(prog, options=options)
    except Exception as e:  # noqa: BLE001 - report and go on
        rec.update(status="ERROR", stage="compile", error=first_line(e), detail=str(e)[-4000:])
        return rec
    rec["compile_s"] = round(time.perf_counter() - t0, 2)
    fn = getattr(module, module.functions[0])
    rtol, atol = tolerance(case, dtype)
    np_dtype = np.float16 if dtype == "f16" else np.float32
    worst = {"err": 0.0, "ratio": 0.0, "where": ""}
    per_set = {}
    for i, (set_name, lengths) in enumerate(sets.items()):
        rng = np.random.default_rng(seed * 1000 + i)
        try:
            args, expected = make_inputs(case, lengths, rng, np_dtype)
            out = fn(*args)
            e, r, where = check(out, expected, lengths, rtol, atol)
        except Exception as ex:  # noqa: BLE001
            rec.update(
                status="ERROR",
                stage=f"run {set_name}",
                error=first_line(ex),
                detail=traceback.format_exc()[-4000:],
            )
            return rec
        per_set[set_name] = {"max_err": e, "err_over_tol": r}
        if not (r <= worst["ratio"]):
            worst = {"err": e, "ratio": r, "where": f"{set_name}: {where}"}
    rec.update(
        status="PASS" if worst["ratio"] <= 1.0 else "FAIL",
        max_err=worst["err"],
        err_over_tol=worst["ratio"],
        worst=worst["where"],
        rtol=rtol,
        atol_rel=atol,
        sets=per_set,
    )
    return rec


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--target", default="cuda", help="IREE target backend (default cuda; llvm-cpu for a CPU check)"
    )
    ap.add_argument(
        "--device", default=None, help="IREE runtime driver (default: the target's, e.g. cuda / local-task)"
    )
    ap.add_argument("--iree-flag", action="append", default=[], help="extra iree-compile flag (repeatable)")
    ap.add_argument("--only", nargs="+", metavar="OP", help=f"subset of {CASES}")
    ap.add_argument("--no-f16", action="store_true", help="skip the f16 variants")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--out", type=Path, default=None, help="output folder (default $OUT, else bench/gpu_results)"
    )
    args = ap.parse_args(argv)

    options = CompileOptions(target=args.target, device=args.device, iree_flags=args.iree_flag)
    out_dir = args.out or default_out()
    out_dir.mkdir(parents=True, exist_ok=True)
    sets = length_sets(args.seed)
    cases = [c for c in CASES if not args.only or c in args.only]
    runs = [(c, "f32") for c in cases]
    if not args.no_f16:
        runs += [(c, "f16") for c in F16_CASES if c in cases]
    print(f"# target {options.target.value}, device {options.driver}, flags {options.flags()}", flush=True)
    print(
        "# length sets: " + ", ".join(f"{k} (B={len(v)}, {sum(v)} tokens)" for k, v in sets.items()),
        flush=True,
    )

    t0 = time.perf_counter()
    records = []
    for case, dtype in runs:
        rec = run_case(case, dtype, options, sets, args.seed)
        records.append(rec)
        if rec["status"] == "ERROR":
            print(f"ERROR {rec['op']:<18} {rec['stage']}: {rec['error']}", flush=True)
        else:
            print(
                f"{rec['status']:<5} {rec['op']:<18} {len(sets)} length sets, max err {rec['max_err']:.2e}, "
                f"err/tol {rec['err_over_tol']:.3f}, worst at {rec['worst'] or '-'}; compile {rec['compile_s']:.1f} s",
                flush=True,
            )
    counts = {s: sum(r["status"] == s for r in records) for s in ("PASS", "FAIL", "ERROR")}
    print(
        f"# {counts['PASS']} PASS, {counts['FAIL']} FAIL, {counts['ERROR']} ERROR in {time.perf_counter() - t0:.1f} s",
        flush=True,
    )
    summary = {
        "target": options.target.value,
        "device": options.driver,
        "flags": options.flags(),
        "length_sets": sets,
        "counts": counts,
        "results": records,
    }
    (out_dir / "gpu_numerics.json").write_text(json.dumps(summary, indent=1, default=float))
    return 0 if counts["PASS"] == len(records) else 1


if __name__ == "__main__":
    sys.exit(main())
