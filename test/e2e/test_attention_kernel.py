"""The CPU attention kernel (``kernels/attention.c``), reached from
``ragged.attention`` by ``ragged-cpu-attention-kernel``: the default for f32
attention on CPU targets (``CompileOptions.attention_kernel``).

Against an fp64 reference per item (each item alone, so nothing leaks
between items): the output and the lse, plain, causal and with dropout (an
independent NumPy implementation of the dropout rule), on random lengths
with empty items, one item of one row, one item, an all-empty batch,
all-equal lengths and one 8192-row item among short ones; head sizes 24 (no
multiple of a vector), 32, 64 and 128, one head and twelve. The AVX2 object
runs on this host where it has AVX2 and FMA; the aarch64 object is linked
by test_cpu_targets (``neoverse-v1``, compile-only). IREE's codegen stays
behind ``attention_kernel=False`` (test_ops_numerics runs it).
"""

from __future__ import annotations

import numpy as np
import pytest
from references import ref_dropout_kept

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


def _module(heads: int, d: int) -> str:
    t = f"!ragged.tensor<?, [L], {heads}, {d}, f32>"
    s = f"!ragged.tensor<?, [L], {heads}, 1, f32>"
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
"""


@pytest.fixture(scope="module")
def kernel_module():
    """``kernel_module(heads, d, cpu=None)``, compiled once each."""
    cache: dict = {}

    def get(heads: int, d: int, cpu: str | None = None):
        if (heads, d, cpu) not in cache:
            options = CompileOptions(cpu=cpu, attention_kernel=True)
            assert options.kernel_isa is not None
            assert "cpu-attention-kernel=" in options.pipeline
            cache[heads, d, cpu] = ragged_mlir.compile(_module(heads, d), options=options)
        return cache[heads, d, cpu]

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


def _items(rng, lengths, heads, d):
    return [
        [rng.uniform(-2, 2, (n, heads, d)).astype(np.float32) for n in lengths],
        [rng.uniform(-2, 2, (n, heads, d)).astype(np.float32) for n in lengths],
        [rng.uniform(-1, 1, (n, heads, d)).astype(np.float32) for n in lengths],
    ]


def _check(got: RaggedArray, want: list[np.ndarray], lengths, atol):
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    np.testing.assert_array_equal(got.partitions[0], offsets)
    for b, w in enumerate(want):
        np.testing.assert_allclose(
            got.values[offsets[b] : offsets[b + 1]], w, rtol=1e-5, atol=atol, err_msg=f"item {b}"
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


def test_avx2_object(kernel_module, rng):
    """The AVX2 and FMA object (``x86_64_v3``, 8-float vectors) as a Haswell
    compile links it, run on this host."""
    if not {"avx2", "fma"} <= _host_cpu_flags():
        pytest.skip("this host has no AVX2 and FMA")
    assert CompileOptions(cpu="haswell").kernel_isa == "x86_64_v3"
    for heads, d in (HEADS["h3d24"], HEADS["h12d64"]):
        for causal in (False, True):
            _run(kernel_module(heads, d, "haswell"), rng, LENGTHS["random"], heads, d, causal)


def test_kernel_is_the_cpu_default_and_a_choice():
    cpu = CompileOptions()
    assert cpu.kernel_isa in ("x86_64_v4", "x86_64_v3", "arm_64")
    assert f"cpu-attention-kernel={cpu.kernel_isa}" in cpu.pipeline
    assert any(f.startswith("--iree-hal-executable-object-search-path=") for f in cpu.flags())
    off = CompileOptions(attention_kernel=False)
    assert off.kernel_isa is None and "cpu-attention-kernel" in CompileOptions().pipeline
    assert "cpu-attention-kernel" not in off.pipeline
    assert not any("object-search-path" in f for f in off.flags())
    assert CompileOptions(cpu="znver4").kernel_isa == "x86_64_v4"
    assert CompileOptions(cpu="neoverse-v1").kernel_isa == "arm_64"
    assert CompileOptions(target="cuda").kernel_isa is None
    with pytest.raises(ValueError, match="attention_kernel: the CPU kernel serves llvm-cpu targets only"):
        CompileOptions(target="cuda", attention_kernel=True).kernel_isa  # noqa: B018
