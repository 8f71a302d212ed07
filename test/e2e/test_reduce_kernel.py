"""The CPU segment reductions (``kernels/reduce.c``), reached from
``ragged.reduce`` over the ragged dim of ``[B, L(b), D...]`` (f32) by
``ragged-cpu-kernels``, the CPU default with the attention kernels
(``CompileOptions.cpu_kernels``).

Sum, mean, max and min against fp64 per item: on the attention kernel's
length distributions (random lengths with empty items, one row, one item,
an all-empty batch, all-equal lengths) and one 8192-row item among short
ones; features that fill whole chunks of four vectors (384), a chunk and a
tail of whole vectors and single features (40, 10 on AVX-512), several
trailing dims (2 x 5) and none (``[B, L(b)]``). An empty item gets the
op's ``empty`` value; max and min propagate NaN. The AVX2 object runs
where the host has AVX2 and FMA. Every compiled module is checked to run
its reductions on the kernel; IREE's codegen stays behind
``cpu_kernels=False`` (test_ops_numerics runs it).
"""

from __future__ import annotations

import numpy as np
import pytest
import test_attention_kernel

import ragged_mlir
from ragged_mlir import CompileOptions, RaggedArray
from ragged_mlir.compiler.options import _host_cpu_flags

LENGTHS = {**test_attention_kernel.LENGTHS, "one-long": [3, 8192, 5, 0, 17]}
FEATURES = {"d384": (384,), "d40": (40,), "d10": (10,), "d2x5": (2, 5), "scalar": ()}
#: kind -> (empty value in the IR, fp64 reference of a non-empty item)
KINDS = {
    "sum": ("0.0", lambda x: x.sum(axis=0)),
    "mean": ("-2.5", lambda x: x.mean(axis=0)),
    "max": ("0xFF800000", lambda x: x.max(axis=0)),
    "min": ("7.0", lambda x: x.min(axis=0)),
}


def _module(trailing: tuple[int, ...]) -> str:
    dims = "".join(f", {d}" for d in trailing)
    t = f"!ragged.tensor<?, [L]{dims}, f32>"
    r = f"tensor<?{''.join(f'x{d}' for d in trailing)}xf32>"
    funcs = [
        f"""
func.func @{kind}(%x: {t}) -> {r} {{
  %y = ragged.reduce <{kind}> %x empty({empty} : f32) : {t} -> {r}
  return %y : {r}
}}"""
        for kind, (empty, _) in KINDS.items()
    ]
    return "\n".join(funcs)


def _empty(kind: str) -> float:
    text = KINDS[kind][0]
    return -np.inf if text == "0xFF800000" else float(text)


@pytest.fixture(scope="module")
def reduce_module():
    """``reduce_module(trailing, cpu=None)``, compiled once each."""
    cache: dict = {}

    def get(trailing: tuple[int, ...], cpu: str | None = None):
        if (trailing, cpu) not in cache:
            options = CompileOptions(cpu=cpu, cpu_kernels=True)
            text = _module(trailing)
            assert ragged_mlir.lower(text, options=options).count("@ragged_kernels::@segment_reduce") == len(
                KINDS
            )
            cache[trailing, cpu] = ragged_mlir.compile(text, options=options)
        return cache[trailing, cpu]

    return get


def _check(module, items: list[np.ndarray], kinds=tuple(KINDS)) -> None:
    x = RaggedArray.from_list(items)
    before = x.values.copy()
    for kind in kinds:
        got = np.asarray(getattr(module, kind)(x))
        np.testing.assert_array_equal(x.values, before)
        assert got.shape == (len(items), *items[0].shape[1:]) if items else got.shape[0] == 0
        for b, item in enumerate(items):
            if len(item):
                with np.errstate(invalid="ignore"):
                    want = KINDS[kind][1](item.astype(np.float64))
            else:
                want = np.full(item.shape[1:], _empty(kind))
            tol = 2e-6 * max(len(item), 1) if kind == "sum" else 2e-6
            np.testing.assert_allclose(got[b], want, rtol=2e-6, atol=tol, err_msg=f"{kind} item {b}")


@pytest.mark.parametrize("dist", sorted(LENGTHS))
@pytest.mark.parametrize("features", sorted(FEATURES))
def test_kernel_matches_fp64_per_item(reduce_module, rng, features, dist):
    trailing = FEATURES[features]
    items = [rng.normal(0, 3, (n, *trailing)).astype(np.float32) for n in LENGTHS[dist]]
    if not items:
        pytest.skip("no items")
    _check(reduce_module(trailing), items)


def test_max_and_min_propagate_nan(reduce_module, rng):
    items = [rng.normal(0, 3, (n, 40)).astype(np.float32) for n in (6, 9, 1)]
    items[0][2, 3] = np.nan  # a vector lane
    items[1][4, 38] = np.nan  # the scalar tail on AVX-512 (40 = 2 x 16 + 8)
    items[2][0, 20] = np.inf
    _check(reduce_module((40,)), items)
    got = np.asarray(reduce_module((40,)).max(RaggedArray.from_list(items)))
    assert np.isnan(got[0, 3]) and np.isnan(got[1, 38]) and got[2, 20] == np.inf


def test_avx2_object(reduce_module, rng):
    if not {"avx2", "fma"} <= _host_cpu_flags():
        pytest.skip("the host has no AVX2 and FMA")
    for trailing in [(384,), (10,)]:
        items = [rng.normal(0, 3, (n, *trailing)).astype(np.float32) for n in LENGTHS["random"]]
        _check(reduce_module(trailing, "haswell"), items)


def test_codegen_stays_behind_the_flag():
    lowered = ragged_mlir.lower(_module((384,)), options=CompileOptions(cpu_kernels=False))
    assert "segment_reduce" not in lowered


def test_nested_reductions_stay_on_codegen():
    """Over the inner dim of ``[B, S(b), T(b, s), D]`` a segment is one
    sentence's tokens: not the kernel's (its result is ragged)."""
    t = "!ragged.tensor<?, [S], [T(S)], 8, f32>"
    r = "!ragged.tensor<?, [S], 8, f32>"
    text = (
        f"func.func @f(%x: {t}) -> {r} {{\n  %y = ragged.reduce <sum> %x : {t} -> {r}\n  return %y : {r}\n}}"
    )
    assert "segment_reduce" not in ragged_mlir.lower(text, options=CompileOptions(cpu_kernels=True))
