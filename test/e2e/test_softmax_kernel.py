"""The CPU segment softmax (``kernels/softmax.c``), reached from
``ragged.softmax`` over the ragged dim of ``[B, L(b), D...]`` (f32) by
``ragged-cpu-kernels``, the CPU default with the attention kernels
(``CompileOptions.cpu_kernels``).

Against fp64 per item (each item's softmax over its rows, per feature): on
random lengths with empty items, one row, one item, an all-empty batch,
all-equal lengths and one 8192-row item among short ones; features that
fill whole chunks of four vectors (384), a chunk and a tail of whole
vectors and single features (40, 10 on AVX-512), and several trailing dims
(2 x 5). A feature whose maximum is not finite (a NaN, a +inf, or -inf in
every row) is NaN throughout, as in eager PyTorch. The AVX2 object runs
where the host has AVX2 and FMA. Every compiled module is checked to run
its softmax on the kernel; IREE's codegen stays behind
``cpu_kernels=False`` (test_ops_numerics runs it).
"""

from __future__ import annotations

import numpy as np
import pytest
import test_attention_kernel

import ragged_mlir
from ragged_mlir import CompileOptions, RaggedArray
from ragged_mlir.compiler.options import _host_cpu_flags

#: The attention kernel's length distributions, and one 8192-row item among short ones.
LENGTHS = {**test_attention_kernel.LENGTHS, "one-long": [3, 8192, 5, 0, 17]}
#: Trailing dims: whole chunks, whole vectors and a tail, a tail alone, two dims.
FEATURES = {"d384": (384,), "d40": (40,), "d10": (10,), "d2x5": (2, 5)}


def _module(trailing: tuple[int, ...]) -> str:
    t = f"!ragged.tensor<?, [L], {', '.join(map(str, trailing))}, f32>"
    return f"""
func.func @softmax(%x: {t}) -> {t} {{
  %y = ragged.softmax %x : {t}
  return %y : {t}
}}
"""


@pytest.fixture(scope="module")
def softmax_module():
    """``softmax_module(trailing, cpu=None)``, compiled once each."""
    cache: dict = {}

    def get(trailing: tuple[int, ...], cpu: str | None = None):
        if (trailing, cpu) not in cache:
            options = CompileOptions(cpu=cpu, cpu_kernels=True)
            text = _module(trailing)
            assert ragged_mlir.lower(text, options=options).count("@ragged_kernels::@segment_softmax") == 1
            cache[trailing, cpu] = ragged_mlir.compile(text, options=options)
        return cache[trailing, cpu]

    return get


def _reference(x: np.ndarray) -> np.ndarray:
    """fp64 softmax over the rows of one item [L, ...]."""
    x = x.astype(np.float64)
    if not len(x):
        return x
    e = np.exp(x - x.max(axis=0, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def _check(module, items: list[np.ndarray]) -> None:
    got = module.softmax(RaggedArray.from_list(items))
    lengths = [len(x) for x in items]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    np.testing.assert_array_equal(got.partitions[0], offsets)
    for b, x in enumerate(items):
        with np.errstate(invalid="ignore"):
            want = _reference(x)
        np.testing.assert_allclose(
            got.values[offsets[b] : offsets[b + 1]], want, rtol=2e-6, atol=1e-7, err_msg=f"item {b}"
        )


@pytest.mark.parametrize("dist", sorted(LENGTHS))
@pytest.mark.parametrize("features", sorted(FEATURES))
def test_kernel_matches_fp64_per_item(softmax_module, rng, features, dist):
    trailing = FEATURES[features]
    items = [rng.normal(0, 3, (n, *trailing)).astype(np.float32) for n in LENGTHS[dist]]
    _check(softmax_module(trailing), items)


def test_non_finite_maxima_give_nan_columns(softmax_module, rng):
    items = [rng.normal(0, 3, (n, 40)).astype(np.float32) for n in (6, 9, 1)]
    items[0][:, 3] = -np.inf  # -inf throughout: NaN
    items[0][2, 17] = -np.inf  # one -inf among finite values: weight 0
    items[1][4, 5] = np.nan
    items[1][0, 38] = np.inf  # in the scalar tail on AVX2 and AVX-512 alike
    items[2][0, 20] = np.inf
    got = softmax_module((40,)).softmax(RaggedArray.from_list(items)).values
    rows = np.concatenate([[0], np.cumsum([len(x) for x in items])])
    for b, x in enumerate(items):
        with np.errstate(invalid="ignore"):
            want = _reference(x)
        assert np.array_equal(np.isnan(got[rows[b] : rows[b + 1]]), np.isnan(want)), f"item {b}"
        finite = ~np.isnan(want)
        np.testing.assert_allclose(got[rows[b] : rows[b + 1]][finite], want[finite], rtol=2e-6, atol=1e-7)
    assert np.isnan(got[0:6, 3]).all() and (got[2, 17] == 0.0) and np.isnan(got[6:15, 5]).all()


def test_avx2_object(softmax_module, rng):
    if not {"avx2", "fma"} <= _host_cpu_flags():
        pytest.skip("the host has no AVX2 and FMA")
    for trailing in [(384,), (10,)]:
        items = [rng.normal(0, 3, (n, *trailing)).astype(np.float32) for n in LENGTHS["random"]]
        _check(softmax_module(trailing, "haswell"), items)


def test_codegen_stays_behind_the_flag():
    lowered = ragged_mlir.lower(_module((384,)), options=CompileOptions(cpu_kernels=False))
    assert "segment_softmax" not in lowered


def test_scores_softmax_stays_on_codegen():
    """Over [B, L(b), L(b), H] a softmax group is one query's keys, not an
    item's rows: not the kernel's."""
    t = "!ragged.tensor<?, [L], [L], 12, f32>"
    text = f"func.func @f(%x: {t}) -> {t} {{\n  %y = ragged.softmax %x : {t}\n  return %y : {t}\n}}"
    assert "segment_softmax" not in ragged_mlir.lower(text, options=CompileOptions(cpu_kernels=True))
