"""The CPU attention kernels (``kernels/attention.c``), reached from
``ragged.attention`` and ``ragged.attention_grad`` by
``ragged-cpu-kernels``: the default for f32, f16 and bf16
attention on CPU targets (``CompileOptions.cpu_kernels``).

Against an fp64 reference per item (each item alone, so nothing leaks
between items): the output and the lse, and the gradients with respect to
q, k and v (from the forward's output and lse, and without them), plain,
causal and with dropout (an independent NumPy implementation of the
dropout rule), on random lengths
with empty items, one item of one row, one item, an all-empty batch,
all-equal lengths and one 8192-row item among short ones; head sizes 24 (no
multiple of a vector), 32, 64 and 128, one head and twelve. The AVX2 object
runs on this host where it has AVX2 and FMA; the aarch64 object is linked
by test_cpu_targets (``neoverse-v1``, compile-only). IREE's codegen stays
behind ``cpu_kernels=False`` (test_ops_numerics runs it).

f16 and bf16 run on the same f32 kernels, widened before and rounded after:
against fp64 references on the inputs as rounded to the dtype, the output,
the lse and the gradients (recomputing the forward, and from a saved output
and lse given in the dtype) on every length distribution, within one
rounding of the result (``rtol = eps``, twice the half ulp) plus the f32
tests' absolute error. Every compiled module is checked to have each of its
attentions on the kernels, not IREE's codegen.
"""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
from references import ref_attention_grads, ref_dropout_kept

import ragged_mlir
from ragged_mlir import CompileOptions, RaggedArray
from ragged_mlir.compiler.options import _host_cpu_flags

SCALE, P, SEED = 0.3, 0.25, 0x0123_4567_89AB_CDEF

LENGTHS = {
    "random": [5, 0, 37, 1, 64, 100, 0, 33],
    "one-row": [1],
    "single": [77],
    "all-empty": [0, 0, 0],
    "all-equal": [48] * 6,
}
#: (heads, head size)
HEADS = {"h1d32": (1, 32), "h12d64": (12, 64), "h2d128": (2, 128), "h3d24": (3, 24)}
#: The narrow dtypes the kernels take, and their machine epsilon.
NARROW = {"f16": np.float16, "bf16": ml_dtypes.bfloat16}
EPS = {"f16": 2.0**-10, "bf16": 2.0**-7}


def _module(heads: int, d: int, dt: str = "f32") -> str:
    t = f"!ragged.tensor<?, [L], {heads}, {d}, {dt}>"
    s = f"!ragged.tensor<?, [L], {heads}, 1, {dt}>"
    return f"""
func.func @att(%q: {t}, %k: {t}, %v: {t}) -> ({t}, {s}) {{
  %o, %lse = ragged.attention %q, %k, %v {{scale = {SCALE} : f64}} : {t} lse {s}
  return %o, %lse : {t}, {s}
}}
func.func @causal(%q: {t}, %k: {t}, %v: {t}) -> ({t}, {s}) {{
  %o, %lse = ragged.attention %q, %k, %v {{scale = {SCALE} : f64, causal}} : {t} lse {s}
  return %o, %lse : {t}, {s}
}}
func.func @dropout(%q: {t}, %k: {t}, %v: {t}, %seed: tensor<i64>) -> {t} {{
  %o = ragged.attention %q, %k, %v dropout(%seed : tensor<i64>) {{scale = {SCALE} : f64, causal, dropout = {P} : f64}} : {t}
  return %o : {t}
}}
func.func @grad(%q: {t}, %k: {t}, %v: {t}, %g: {t}) -> ({t}, {t}, {t}) {{
  %dq, %dk, %dv = ragged.attention_grad %q, %k, %v, %g {{scale = {SCALE} : f64}} : {t}
  return %dq, %dk, %dv : {t}, {t}, {t}
}}
func.func @grad_causal_saved(%q: {t}, %k: {t}, %v: {t}, %g: {t}) -> ({t}, {t}, {t}) {{
  %o, %lse = ragged.attention %q, %k, %v {{scale = {SCALE} : f64, causal}} : {t} lse {s}
  %dq, %dk, %dv = ragged.attention_grad %q, %k, %v, %g output(%o : {t}) lse(%lse : {s}) {{scale = {SCALE} : f64, causal}} : {t}
  return %dq, %dk, %dv : {t}, {t}, {t}
}}
func.func @grad_saved(%q: {t}, %k: {t}, %v: {t}, %g: {t}, %o: {t}, %lse: {s}) -> ({t}, {t}, {t}) {{
  %dq, %dk, %dv = ragged.attention_grad %q, %k, %v, %g output(%o : {t}) lse(%lse : {s}) {{scale = {SCALE} : f64, causal}} : {t}
  return %dq, %dk, %dv : {t}, {t}, {t}
}}
func.func @grad_dropout(%q: {t}, %k: {t}, %v: {t}, %g: {t}, %seed: tensor<i64>) -> ({t}, {t}, {t}) {{
  %dq, %dk, %dv = ragged.attention_grad %q, %k, %v, %g dropout(%seed : tensor<i64>) {{scale = {SCALE} : f64, causal, dropout = {P} : f64}} : {t}
  return %dq, %dk, %dv : {t}, {t}, {t}
}}
"""


def _assert_on_kernel(text: str, options: CompileOptions) -> None:
    """Every attention of ``text`` lowers to a dispatch of the kernels: one
    forward per ``ragged.attention`` and per gradient without a saved
    output, one backward per ``ragged.attention_grad``."""
    lowered = ragged_mlir.lower(text, options=options)
    grads = re.findall(r"ragged\.attention_grad .*", text)
    forwards = text.count("ragged.attention %") + sum("output(" not in g for g in grads)
    assert lowered.count("@ragged_kernels::@attention_fwd") == forwards
    assert lowered.count("@ragged_kernels::@attention_bwd") == len(grads)


@pytest.fixture(scope="module")
def kernel_module():
    """``kernel_module(heads, d, cpu=None, dt="f32")``, compiled once each."""
    cache: dict = {}

    def get(heads: int, d: int, cpu: str | None = None, dt: str = "f32"):
        if (heads, d, cpu, dt) not in cache:
            options = CompileOptions(cpu=cpu, cpu_kernels=True)
            assert options.kernel_isa is not None
            assert "cpu-kernels=" in options.pipeline
            text = _module(heads, d, dt)
            _assert_on_kernel(text, options)
            cache[heads, d, cpu, dt] = ragged_mlir.compile(text, options=options)
        return cache[heads, d, cpu, dt]

    return get


def _reference(q, k, v, causal, item=0, dropout=False):
    """fp64 (output, lse) of one item [L, H, d], in blocks of query rows
    (an 8192-row item's scores would take GBs at once)."""
    n, heads, _ = q.shape
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    keep = ref_dropout_kept(SEED, item, heads, n, P) / (1 - P) if dropout else None
    out, lse = np.zeros_like(q), np.zeros((n, heads, 1))
    for i0 in range(0, n, 1024):
        i1 = min(n, i0 + 1024)
        s = SCALE * np.einsum("ihe,jhe->hij", q[i0:i1], k)
        if causal:
            s = np.where(np.arange(n)[None, None, :] <= np.arange(i0, i1)[None, :, None], s, -np.inf)
        m = s.max(-1, keepdims=True)
        e = np.exp(s - m)
        total = e.sum(-1, keepdims=True)
        w = e / total
        if dropout:
            w = w * keep[:, i0:i1]
        out[i0:i1] = np.einsum("hij,jhe->ihe", w, v)
        lse[i0:i1] = (m + np.log(total)).transpose(1, 0, 2)
    return out, lse


def _reference_grads(q, k, v, g, causal, item=0, dropout=False):
    """fp64 (dq, dk, dv) of one item [L, H, d]."""
    keep = ref_dropout_kept(SEED, item, q.shape[1], len(q), P) / (1 - P) if dropout else None
    return ref_attention_grads(q, k, v, g, SCALE, causal, keep)


def _items(rng, lengths, heads, d):
    return [
        [rng.uniform(-2, 2, (n, heads, d)).astype(np.float32) for n in lengths],
        [rng.uniform(-2, 2, (n, heads, d)).astype(np.float32) for n in lengths],
        [rng.uniform(-1, 1, (n, heads, d)).astype(np.float32) for n in lengths],
    ]


def _check(got: RaggedArray, want: list[np.ndarray], lengths, atol, what="output", rtol=1e-5):
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    np.testing.assert_array_equal(got.partitions[0], offsets)
    values = got.values.astype(np.float64)
    for b, w in enumerate(want):
        np.testing.assert_allclose(
            values[offsets[b] : offsets[b + 1]], w, rtol=rtol, atol=atol, err_msg=f"{what} of item {b}"
        )


def _run(module, rng, lengths, heads, d, causal):
    qs, ks, vs = _items(rng, lengths, heads, d)
    out, lse = (module.causal if causal else module.att)(*(RaggedArray.from_list(x) for x in (qs, ks, vs)))
    refs = [_reference(a, b, c, causal) for a, b, c in zip(qs, ks, vs, strict=True)]
    _check(out, [r[0] for r in refs], lengths, atol=2e-5)
    _check(lse, [r[1] for r in refs], lengths, atol=2e-5)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dist", sorted(LENGTHS))
@pytest.mark.parametrize("shape", sorted(HEADS))
def test_kernel_matches_fp64_per_item(kernel_module, rng, shape, dist, causal):
    heads, d = HEADS[shape]
    _run(kernel_module(heads, d), rng, LENGTHS[dist], heads, d, causal)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_one_long_item_among_short_ones(kernel_module, rng, causal):
    """An 8192-row item spans 256 workgroups of query rows, the short ones
    share workgroups with each other and with its first and last rows."""
    _run(kernel_module(1, 32), rng, [3, 8192, 5, 0, 17], 1, 32, causal)


@pytest.mark.parametrize("shape", ["h3d24", "h12d64"])
def test_dropout(kernel_module, rng, shape):
    heads, d = HEADS[shape]
    lengths = LENGTHS["random"]
    qs, ks, vs = _items(rng, lengths, heads, d)
    out = kernel_module(heads, d).dropout(*(RaggedArray.from_list(x) for x in (qs, ks, vs)), np.array(SEED))
    want = [
        _reference(a, b, c, causal=True, item=i, dropout=True)[0]
        for i, (a, b, c) in enumerate(zip(qs, ks, vs, strict=True))
    ]
    _check(out, want, lengths, atol=1e-5)


GRADS = {"plain": ("grad", False, False), "causal-saved": ("grad_causal_saved", True, False)}
GRAD_HEADS = ["h1d32", "h12d64", "h2d128", "h3d24"]


@pytest.mark.parametrize("dist", sorted(LENGTHS))
@pytest.mark.parametrize("shape", GRAD_HEADS)
@pytest.mark.parametrize("kind", sorted(GRADS))
def test_gradients_match_fp64_per_item(kernel_module, rng, kind, shape, dist):
    """dq, dk and dv from attention_bwd: recomputing the
    forward ("plain") and from the forward's saved output and lse."""
    heads, d = HEADS[shape]
    fname, causal, _ = GRADS[kind]
    lengths = LENGTHS[dist]
    qs, ks, vs = _items(rng, lengths, heads, d)
    gs = [rng.uniform(-1, 1, x.shape).astype(np.float32) for x in qs]
    got = getattr(kernel_module(heads, d), fname)(*(RaggedArray.from_list(x) for x in (qs, ks, vs, gs)))
    want = [_reference_grads(a, b, c, e, causal) for a, b, c, e in zip(qs, ks, vs, gs, strict=True)]
    for i, name in enumerate(("dq", "dk", "dv")):
        _check(got[i], [w[i] for w in want], lengths, atol=5e-5, what=name)


def test_gradients_with_dropout_and_one_long_item(kernel_module, rng):
    """Dropout's kept weights in the gradient kernel (key-major: it hashes a
    vector of queries per key), on one long item among short ones."""
    heads, d = HEADS["h3d24"]
    lengths = [5, 0, 700, 1, 33]
    qs, ks, vs = _items(rng, lengths, heads, d)
    gs = [rng.uniform(-1, 1, x.shape).astype(np.float32) for x in qs]
    got = kernel_module(heads, d).grad_dropout(
        *(RaggedArray.from_list(x) for x in (qs, ks, vs, gs)), np.array(SEED)
    )
    want = [
        _reference_grads(a, b, c, e, True, item=i, dropout=True)
        for i, (a, b, c, e) in enumerate(zip(qs, ks, vs, gs, strict=True))
    ]
    for i in range(3):
        _check(got[i], [w[i] for w in want], lengths, atol=1e-4)


def test_avx2_object(kernel_module, rng):
    """The AVX2 and FMA object (``x86_64_v3``, 8-float vectors) as a Haswell
    compile links it, run on this host."""
    if not {"avx2", "fma"} <= _host_cpu_flags():
        pytest.skip("this host has no AVX2 and FMA")
    assert CompileOptions(cpu="haswell").kernel_isa == "x86_64_v3"
    lengths = LENGTHS["random"]
    for heads, d in (HEADS["h3d24"], HEADS["h12d64"]):
        module = kernel_module(heads, d, "haswell")
        for causal in (False, True):
            _run(module, rng, lengths, heads, d, causal)
        qs, ks, vs = _items(rng, lengths, heads, d)
        gs = [rng.uniform(-1, 1, x.shape).astype(np.float32) for x in qs]
        got = module.grad_causal_saved(*(RaggedArray.from_list(x) for x in (qs, ks, vs, gs)))
        want = [_reference_grads(a, b, c, e, True) for a, b, c, e in zip(qs, ks, vs, gs, strict=True)]
        for i in range(3):
            _check(got[i], [w[i] for w in want], lengths, atol=5e-5)


def _reference_grads_saved(q, k, v, g, out, lse, causal):
    """fp64 (dq, dk, dv) of one item [L, H, d] from a saved output and lse
    as given (``ragged.attention_grad``'s rule): P = exp(scale q k^T - lse),
    dS = P o (dO v^T - rowsum(dO o out))."""
    q, k, v, g, out, lse = (np.asarray(x, np.float64) for x in (q, k, v, g, out, lse))
    n = len(q)
    s = SCALE * np.einsum("ihe,jhe->hij", q, k)
    if causal:
        s = np.where(np.tril(np.ones((n, n), bool)), s, -np.inf)
    p = np.exp(s - lse.transpose(1, 0, 2))
    dv = np.einsum("hij,ihe->jhe", p, g)
    rowsum = (g * out).sum(-1).T[:, :, None]
    ds = p * (np.einsum("ihe,jhe->hij", g, v) - rowsum)
    return SCALE * np.einsum("hij,jhe->ihe", ds, k), SCALE * np.einsum("hij,ihe->jhe", ds, q), dv


def _narrow_items(rng, lengths, heads, d, dt, count=3):
    """q, k, v (and with ``count`` 4 the incoming gradient) in ``dt``."""
    items = _items(rng, lengths, heads, d)
    if count == 4:
        items.append([rng.uniform(-1, 1, x.shape).astype(np.float32) for x in items[0]])
    return [[x.astype(NARROW[dt]) for x in xs] for xs in items]


NARROW_HEADS = ["h2d128", "h3d24"]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("dist", sorted(LENGTHS))
@pytest.mark.parametrize("shape", NARROW_HEADS)
@pytest.mark.parametrize("dt", sorted(NARROW))
def test_narrow_matches_fp64_per_item(kernel_module, rng, dt, shape, dist, causal):
    """The output and lse of f16 and bf16 attention, against fp64 on the
    rounded inputs."""
    heads, d = HEADS[shape]
    lengths = LENGTHS[dist]
    module = kernel_module(heads, d, dt=dt)
    qs, ks, vs = _narrow_items(rng, lengths, heads, d, dt)
    out, lse = (module.causal if causal else module.att)(*(RaggedArray.from_list(x) for x in (qs, ks, vs)))
    assert out.values.dtype == NARROW[dt] and lse.values.dtype == NARROW[dt]
    refs = [_reference(a, b, c, causal) for a, b, c in zip(qs, ks, vs, strict=True)]
    _check(out, [r[0] for r in refs], lengths, atol=2e-5, rtol=EPS[dt])
    _check(lse, [r[1] for r in refs], lengths, atol=2e-5, rtol=EPS[dt], what="lse")


@pytest.mark.parametrize("saved", [False, True], ids=["recomputed", "saved"])
@pytest.mark.parametrize("dist", sorted(LENGTHS))
@pytest.mark.parametrize("shape", NARROW_HEADS)
@pytest.mark.parametrize("dt", sorted(NARROW))
def test_narrow_gradients_match_fp64_per_item(kernel_module, rng, dt, shape, dist, saved):
    """dq, dk and dv of f16 and bf16 attention: recomputing the forward (in
    f32: against autograd on the rounded inputs), and causal from a saved
    output and lse given in the dtype (the fp64 ones rounded; against the
    gradient rule on exactly those)."""
    heads, d = HEADS[shape]
    lengths = LENGTHS[dist]
    module = kernel_module(heads, d, dt=dt)
    qs, ks, vs, gs = _narrow_items(rng, lengths, heads, d, dt, count=4)
    args = [RaggedArray.from_list(x) for x in (qs, ks, vs, gs)]
    if saved:
        fwd = [_reference(a, b, c, causal=True) for a, b, c in zip(qs, ks, vs, strict=True)]
        outs, lses = ([r[i].astype(NARROW[dt]) for r in fwd] for i in (0, 1))
        got = module.grad_saved(*args, RaggedArray.from_list(outs), RaggedArray.from_list(lses))
        want = [_reference_grads_saved(*x, causal=True) for x in zip(qs, ks, vs, gs, outs, lses, strict=True)]
    else:
        got = module.grad(*args)
        want = [_reference_grads(a, b, c, e, False) for a, b, c, e in zip(qs, ks, vs, gs, strict=True)]
    for i, name in enumerate(("dq", "dk", "dv")):
        assert got[i].values.dtype == NARROW[dt]
        _check(got[i], [w[i] for w in want], lengths, atol=5e-5, rtol=EPS[dt], what=name)


def test_kernel_is_the_cpu_default_and_a_choice():
    cpu = CompileOptions()
    assert cpu.kernel_isa in ("x86_64_v4", "x86_64_v3", "arm_64")
    assert f"cpu-kernels={cpu.kernel_isa}" in cpu.pipeline
    assert any(f.startswith("--iree-hal-executable-object-search-path=") for f in cpu.flags())
    off = CompileOptions(cpu_kernels=False)
    assert off.kernel_isa is None and "cpu-kernels" in CompileOptions().pipeline
    assert "cpu-kernels" not in off.pipeline
    assert not any("object-search-path" in f for f in off.flags())
    assert CompileOptions(cpu="znver4").kernel_isa == "x86_64_v4"
    assert CompileOptions(cpu="neoverse-v1").kernel_isa == "arm_64"
    assert CompileOptions(target="cuda").kernel_isa is None
    # Options that tune IREE's codegen choose it.
    for codegen in ({"iree_attention": True}, {"attention_buckets": 4}, {"attention_scores_max_rows": 256}):
        assert CompileOptions(**codegen).kernel_isa is None, codegen
        assert CompileOptions(**codegen, cpu_kernels=True).kernel_isa is not None, codegen
    with pytest.raises(ValueError, match="cpu_kernels: the CPU kernel serves llvm-cpu targets only"):
        CompileOptions(target="cuda", cpu_kernels=True).kernel_isa  # noqa: B018
