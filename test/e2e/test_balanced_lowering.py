"""Segment reductions and softmax over row tiles (``balance_tile``, 16 rows
by default; 0 loops over each segment's rows): same results as the
reference for every tile size, a dispatch count independent of the batch,
and the same count on CUDA as on CPU."""

import re

import numpy as np
import pytest

import ragged_mlir
from ragged_mlir import CompileOptions, RaggedArray

iree_compiler = pytest.importorskip("iree.compiler")

KINDS = {
    "sum": ("", lambda x: x.sum(0), 0.0),
    "mean": ("", lambda x: x.mean(0), 0.0),
    "max": (" empty(-7.0 : f32)", lambda x: x.max(0), -7.0),
    "min": (" empty(7.0 : f32)", lambda x: x.min(0), 7.0),
}
BALANCE_LENGTHS = {
    "mixed": [3, 0, 9, 1, 16, 17],
    "single": [5],
    "one-long": [1, 2, 300, 1],
    "all-equal": [4] * 6,
    "all-empty": [0, 0, 0],
    "no-items": [],
}


def module_text(batch="?"):
    fns = []
    for kind, (empty, _, _) in KINDS.items():
        t = f"!ragged.tensor<{batch}, [L], 8, f32>"
        r = f"tensor<{batch}x8xf32>"
        fns.append(
            f"func.func @{kind}(%x: {t}) -> {r} {{\n"
            f"  %r = ragged.reduce <{kind}> %x{empty} : {t} -> {r}\n  return %r : {r}\n}}"
        )
    t = f"!ragged.tensor<{batch}, [L], 8, f32>"
    fns.append(
        f"func.func @softmax(%x: {t}) -> {t} {{\n  %r = ragged.softmax %x : {t}\n  return %r : {t}\n}}"
    )
    return "\n".join(fns)


@pytest.fixture(scope="module", params=[0, 1, 4, 16], ids=lambda t: f"tile{t}")
def balanced(request):
    return ragged_mlir.compile(module_text(), options=CompileOptions(balance_tile=request.param))


def _items(case):
    rng = np.random.default_rng(3)
    return [rng.standard_normal((n, 8)).astype(np.float32) for n in BALANCE_LENGTHS[case]]


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("case", list(BALANCE_LENGTHS))
def test_balanced_reduce_matches_reference(balanced, kind, case):
    items = _items(case)
    got = getattr(balanced, kind)(RaggedArray.from_list(items, trailing_shape=(8,), dtype=np.float32))
    _, ref, empty = KINDS[kind]
    want = np.array([ref(x.astype(np.float64)) if len(x) else np.full(8, empty) for x in items])
    want = want.reshape(len(items), 8)
    np.testing.assert_allclose(
        got, want, rtol=1e-5, atol=1e-5 * np.sqrt(max(BALANCE_LENGTHS[case], default=1))
    )


@pytest.mark.parametrize("case", list(BALANCE_LENGTHS))
def test_balanced_softmax_matches_reference(balanced, case):
    items = _items(case)
    got = balanced.softmax(RaggedArray.from_list(items, trailing_shape=(8,), dtype=np.float32))
    assert got.offsets.tolist() == np.cumsum([0, *BALANCE_LENGTHS[case]]).tolist()
    for out, x in zip(got.to_list(), items, strict=True):
        x = x.astype(np.float64)
        e = np.exp(x - x.max(0)) if len(x) else x
        np.testing.assert_allclose(out, e / e.sum(0) if len(x) else x, rtol=1e-5, atol=1e-6)


def dispatches(text, backend, flags, tile):
    low = ragged_mlir.lower(text, options=CompileOptions(balance_tile=tile))
    flow = iree_compiler.compile_str(low, target_backends=[backend], extra_args=["--compile-to=flow", *flags])
    return len(re.findall(r"flow\.dispatch @", flow.decode() if isinstance(flow, bytes) else flow))


def test_balanced_dispatch_count_fixed_and_equal_on_cuda():
    cpu = ["--iree-llvmcpu-target-cpu=host"]
    small = dispatches(module_text(2), "llvm-cpu", cpu, 16)
    large = dispatches(module_text(64), "llvm-cpu", cpu, 16)
    cuda = dispatches(module_text(64), "cuda", ["--iree-cuda-target=sm_80"], 16)
    assert small == large == cuda, (small, large, cuda)


def _options(pipeline: str) -> dict[str, str]:
    inner = re.search(r"ragged-to-iree-input\{([^}]*)\}", pipeline).group(1)
    return dict(kv.split("=", 1) for kv in inner.split())


def test_gpu_targets_balance_by_default():
    assert _options(CompileOptions(target="cuda").pipeline)["attention-buckets"] == "0"
    assert _options(CompileOptions(balance_tile=4).pipeline)["balance-tile"] == "4"
    assert _options(CompileOptions(balance_tile=0).pipeline)["balance-tile"] == "0"
    # CPU: IREE's fused attention only on AVX-512 hosts.
    cpu = _options(CompileOptions(target="llvm-cpu").pipeline)
    host = ragged_mlir.compiler.options
    if host._host_has_avx512():
        assert cpu | {"iree-attention": "1", "peel-remainders": "0", "cpu-vector-bytes": "64"} == cpu
    elif host._host_is_x86():
        assert cpu | {"iree-attention": "0", "peel-remainders": "1", "cpu-vector-bytes": "32"} == cpu
    else:
        assert cpu | {"iree-attention": "0", "peel-remainders": "0", "cpu-vector-bytes": "16"} == cpu
    # A CPU named in the flags gets the tiles of the smallest native vector.
    named = CompileOptions(iree_flags=["--iree-llvmcpu-target-cpu=haswell"]).pipeline
    assert _options(named)["cpu-vector-bytes"] == "16"
    # IREE CPU workgroup sizes only for CPU targets.
    assert _options(CompileOptions(target="cuda").pipeline)["cpu-tiles"] == "0"
    assert cpu["cpu-tiles"] == "1"
    assert _options(CompileOptions(iree_attention=True).pipeline)["iree-attention"] == "1"
    for bad in (-1, 65):
        with pytest.raises(ValueError, match="balance_tile: expected 0 to 64"):
            _ = CompileOptions(balance_tile=bad).pipeline
    scores = CompileOptions(iree_attention=True, attention_scores_max_rows=256).pipeline
    assert _options(scores)["attention-scores-max-rows"] == "256"
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="attention_scores_max_rows: expected an int >= 0"):
            _ = CompileOptions(attention_scores_max_rows=bad).pipeline


def test_python_defaults_are_the_pipelines():
    """Python writes every pipeline option; for an AVX-512 CPU they are
    the C++ defaults, option for option (each pass's options as the
    registered pipeline expands them), but for the attention kernel: the
    bare pipeline (ragged-opt's) links no kernel object, which iree-compile
    could only find on the object search path Python passes."""
    from ragged_mlir import ir, passmanager

    def expand(pipeline: str) -> str:
        with ir.Context():
            return str(passmanager.PassManager.parse(pipeline))

    spelled = CompileOptions(cpu="znver4").pipeline
    assert set(_options(spelled)) == {
        "balance-tile",
        "attention-buckets",
        "iree-attention",
        "attention-scores-max-rows",
        "contraction-chunk",
        "cpu-tiles",
        "cpu-vector-bytes",
        "peel-remainders",
        "cpu-kernels",
    }
    bare = ragged_mlir.compiler.PIPELINE.replace(
        "ragged-to-iree-input", "ragged-to-iree-input{cpu-kernels=x86_64_v4}"
    )
    assert expand(spelled) == expand(bare)


def test_cpu_data_tiling_by_default():
    """CPU compiles pack GEMM operands (data tiling) unless the lowering
    marked the module ``ragged.no_data_tiling`` (a contraction IREE 3.13
    cannot data-tile, that no hint protects); a user's flag always stays."""
    flag = "--iree-opt-data-tiling"
    marked = "module attributes {ragged.no_data_tiling} {"
    assert flag in CompileOptions().flags()
    assert flag in CompileOptions().flags("linalg.batch_matmul")
    assert flag not in CompileOptions().flags(marked)
    assert flag in CompileOptions(iree_flags=[flag]).flags(marked)
    assert flag not in CompileOptions(target="cuda").flags()


def test_cpu_peels_vector_remainders_on_avx2(monkeypatch):
    """On x86 without AVX-512, CPU compiles peel the remainder of a dynamic
    extent instead of masking it (masked loads and stores are slow there);
    elsewhere IREE's default stays, and a user's strategy always wins."""
    compiler = ragged_mlir.compiler.options  # where the host is read
    peel = "--iree-llvmcpu-vector-pproc-strategy=peel"
    mask = "--iree-llvmcpu-vector-pproc-strategy=mask"
    monkeypatch.setattr(compiler, "_host_is_x86", lambda: True)
    monkeypatch.setattr(compiler, "_host_has_avx512", lambda: False)
    assert peel in CompileOptions().flags()
    assert peel not in CompileOptions(target="cuda").flags()
    user = CompileOptions(iree_flags=[mask]).flags()
    assert peel not in user and mask in user
    # The workgroup sizes ragged-cpu-whole-rows sets follow the same choice.
    assert _options(CompileOptions().pipeline)["peel-remainders"] == "1"
    assert _options(CompileOptions(target="cuda").pipeline)["peel-remainders"] == "0"
    assert _options(CompileOptions(iree_flags=[mask]).pipeline)["peel-remainders"] == "0"
    monkeypatch.setattr(compiler, "_host_has_avx512", lambda: True)
    assert peel not in CompileOptions().flags()
    assert _options(CompileOptions().pipeline)["peel-remainders"] == "0"
    assert _options(CompileOptions(iree_flags=[peel]).pipeline)["peel-remainders"] == "1"
    monkeypatch.setattr(compiler, "_host_is_x86", lambda: False)
    monkeypatch.setattr(compiler, "_host_has_avx512", lambda: False)
    assert peel not in CompileOptions().flags()


def test_cpu_workgroups_take_whole_rows():
    """On CPU the generics that read packed rows (the tile generic of a
    segment sum, the softmax output) carry IREE's workgroup sizes of whole
    rows; GPU targets leave IREE's own choice."""
    text = """
    func.func @f(%x: !ragged.tensor<?, [L], 8, f32>) -> (tensor<?x8xf32>, !ragged.tensor<?, [L], 8, f32>) {
      %s = ragged.reduce <sum> %x : !ragged.tensor<?, [L], 8, f32> -> tensor<?x8xf32>
      %y = ragged.softmax %x : !ragged.tensor<?, [L], 8, f32>
      return %s, %y : tensor<?x8xf32>, !ragged.tensor<?, [L], 8, f32>
    }"""
    # The sum and the softmax on IREE's codegen (on CPU they run on our
    # kernels by default).
    cpu = ragged_mlir.lower(text, options=CompileOptions(target="llvm-cpu", cpu_kernels=False))
    configs = re.findall(r"lowering_config<distribution = \[([0-9, ]*)\]", cpu)
    # The sum's tiles, the softmax's two tile generics and its output.
    assert configs == ["16, 0"] * 4, configs
    assert "ragged.whole_rows" not in cpu
    default = ragged_mlir.lower(text, options=CompileOptions(target="llvm-cpu"))
    assert "lowering_config" not in default
    assert "@ragged_kernels::@segment_softmax" in default and "@ragged_kernels::@segment_reduce" in default
    cuda = ragged_mlir.lower(text, options=CompileOptions(target="cuda"))
    assert "compilation_info" not in cuda


@pytest.mark.parametrize("strategy", ["mask", "peel"])
def test_whole_rows_vector_remainder(strategy):
    """19 features: a vector step of 16 and a remainder of 3, masked or
    peeled, in the tile generics and the softmax output."""
    t = "!ragged.tensor<?, [L], 19, f32>"
    text = f"""
    func.func @sum(%x: {t}) -> tensor<?x19xf32> {{
      %s = ragged.reduce <sum> %x : {t} -> tensor<?x19xf32>
      return %s : tensor<?x19xf32>
    }}
    func.func @softmax(%x: {t}) -> {t} {{
      %y = ragged.softmax %x : {t}
      return %y : {t}
    }}"""
    flags = [f"--iree-llvmcpu-vector-pproc-strategy={strategy}"]
    module = ragged_mlir.compile(text, options=CompileOptions(target="llvm-cpu", iree_flags=flags))
    rng = np.random.default_rng(5)
    for lengths in ([3, 0, 9, 1, 16, 17], [1, 2, 300, 1]):
        items = [rng.standard_normal((n, 19)).astype(np.float32) for n in lengths]
        x = RaggedArray.from_list(items, trailing_shape=(19,), dtype=np.float32)
        want = np.array([i.astype(np.float64).sum(0) for i in items])
        np.testing.assert_allclose(module.sum(x), want, rtol=1e-5, atol=1e-4)
        for out, i in zip(module.softmax(x).to_list(), items, strict=True):
            e = np.exp(i.astype(np.float64) - i.max(0, initial=-np.inf))
            np.testing.assert_allclose(out, e / e.sum(0) if len(i) else i, rtol=1e-5, atol=1e-6)


def test_balanced_softmax_with_masked_blocks(balanced):
    """-inf entries (masked scores) in whole tiles, in part of a tile, and in a
    whole item: the masked entries get 0 and an all -inf item NaN, as in
    numpy."""
    rng = np.random.default_rng(5)
    items = [rng.standard_normal((n, 8)).astype(np.float32) for n in (40, 7, 3, 20)]
    items[0][:21] = -np.inf
    items[1][2:5, :3] = -np.inf
    items[2][:] = -np.inf
    items[3][::2] = -np.inf
    got = balanced.softmax(RaggedArray.from_list(items, trailing_shape=(8,), dtype=np.float32))
    with np.errstate(invalid="ignore"):
        for out, x in zip(got.to_list(), items, strict=True):
            e = np.exp(x.astype(np.float64) - x.max(0))
            np.testing.assert_allclose(out, e / e.sum(0), rtol=1e-5, atol=1e-6)
