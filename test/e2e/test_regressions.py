"""Regressions of the compiler core, each once a wrong answer or a failed
compile, checked end to end against fp64 numpy per item.

* IREE 3.13's data tiling (on by default on CPU) miscompiled contractions
  whose reduction extent is dynamic: a matmul by a weight of dynamic K fed
  by another op, and one-head attention on the linalg buckets (IREE folds
  the unit head dim, leaving a plain batch matmul over the bucket length).
  ``ragged-hint-data-tiling`` keeps data tiling off those and on the rest.
"""

from __future__ import annotations

import numpy as np
import pytest
from references import ref_attention_dense

import ragged_mlir
from ragged_mlir import CompileOptions, RaggedArray
from ragged_mlir.builders import Program, ragged, tensor

F32 = np.float32
F64 = np.float64
DATA_TILING = "--iree-opt-data-tiling"


def _iree_flags(module) -> list[str]:
    return (module.work_dir / "iree_flags.txt").read_text().split()


def _items(rng, lengths, trailing, dtype=F32):
    return [rng.uniform(-1, 1, (n, *trailing)).astype(dtype) for n in lengths]


def test_matmul_of_dynamic_k_fed_by_another_op(tmp_path):
    """``tanh(x) @ w`` with K dynamic: once "'affine.delinearize_index' op no
    basis element may be statically non-positive" in iree-compile."""
    prog = Program()

    @prog.func(x=ragged(None, "L", None), w=tensor(None, 8))
    def proj(x, w):
        return x.tanh() @ w

    module = ragged_mlir.compile(
        prog, options=CompileOptions(keep_intermediates=True, work_dir=str(tmp_path))
    )
    assert DATA_TILING not in _iree_flags(module)
    rng = np.random.default_rng(3)
    lengths = [3, 0, 17, 1, 40]
    items = _items(rng, lengths, (13,))
    w = rng.uniform(-1, 1, (13, 8)).astype(F32)
    out = module.proj(RaggedArray.from_list(items), w)
    np.testing.assert_array_equal(out.offsets, np.cumsum([0, *lengths]))
    for got, x in zip(out.to_list(), items, strict=True):
        np.testing.assert_allclose(got, np.tanh(x.astype(F64)) @ w.astype(F64), rtol=1e-5, atol=1e-5)


def test_data_tiling_kept_beside_a_dynamic_contraction(tmp_path):
    """A static-K matmul in the same function stays data-tiled (hinted);
    the one-head attention's dynamic contraction is left to plain codegen."""
    d = 11
    one = f"!ragged.tensor<?, [L], 1, {d}, f32>"
    rows = "!ragged.tensor<?, [L], 16, f32>"
    out_rows = f"!ragged.tensor<?, [L], {d}, f32>"
    text = f"""
func.func @f(%q: {one}, %k: {one}, %v: {one}, %y: {rows}, %w: tensor<16x{d}xf32>) -> ({one}, {out_rows}) {{
  %o = ragged.attention %q, %k, %v {{scale = 0.35 : f64}} : {one}
  %z = ragged.matmul %y, %w : {rows}, tensor<16x{d}xf32> -> {out_rows}
  return %o, %z : {one}, {out_rows}
}}"""
    options = CompileOptions(iree_attention=False, keep_intermediates=True, work_dir=str(tmp_path))
    module = ragged_mlir.compile(text, options=options)
    assert DATA_TILING in _iree_flags(module)
    assert "iree.opt.data_tiling" in (tmp_path / "lowered.mlir").read_text()
    rng = np.random.default_rng(4)
    lengths = [12, 5, 4, 16, 19, 97, 95, 10, 0]
    qs, ks, vs = (_items(rng, lengths, (1, d)) for _ in range(3))
    ys = _items(rng, lengths, (16,))
    w = rng.uniform(-1, 1, (16, d)).astype(F32)
    for _ in range(2):  # a wrong answer once changed from call to call
        o, z = module.f(*(RaggedArray.from_list(t) for t in (qs, ks, vs, ys)), w)
        for got, q, k, v in zip(o.to_list(), qs, ks, vs, strict=True):
            np.testing.assert_allclose(
                got, ref_attention_dense(q.astype(F64), k, v, 0.35), rtol=1e-4, atol=1e-5
            )
        for got, y in zip(z.to_list(), ys, strict=True):
            np.testing.assert_allclose(got, y.astype(F64) @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("iree_attention", [False, True], ids=["linalg_buckets", "iree_ladder"])
def test_one_head_attention_all_static(iree_attention):
    """A static batch, one head and a static head size: the linalg buckets
    once failed in IREE's data tiling like the dynamic case."""
    t = "!ragged.tensor<4, [L], 1, 8, f32>"
    text = f"""
func.func @att(%q: {t}, %k: {t}, %v: {t}) -> {t} {{
  %o = ragged.attention %q, %k, %v {{scale = 0.5 : f64}} : {t}
  return %o : {t}
}}"""
    module = ragged_mlir.compile(text, options=CompileOptions(iree_attention=iree_attention))
    rng = np.random.default_rng(5)
    lengths = [7, 0, 33, 1]
    qs, ks, vs = (_items(rng, lengths, (1, 8)) for _ in range(3))
    out = module.att(*(RaggedArray.from_list(t) for t in (qs, ks, vs)))
    for got, q, k, v in zip(out.to_list(), qs, ks, vs, strict=True):
        np.testing.assert_allclose(got, ref_attention_dense(q.astype(F64), k, v, 0.5), rtol=1e-4, atol=1e-5)


KEEP_OUTPUTS = """
import gc, threading, time
import numpy as np
import ragged_mlir

S = "!ragged.tensor<?, [L], 8, f32>"
module = ragged_mlir.compile(f'''
func.func @f(%x: {S}) -> ({S}, tensor<?x8xf32>, tensor<?x?xi1>) {{
  %y = ragged.unary <neg> %x : {S}
  %s = ragged.reduce <sum> %x : {S} -> tensor<?x8xf32>
  %m = ragged.mask %x : {S} -> tensor<?x?xi1>
  return %y, %s, %m : {S}, tensor<?x8xf32>, tensor<?x?xi1>
}}''')
items = [np.full((n, 8), n, np.float32) for n in (3, 0, 5)]
KEPT = module.f(items)
del module
gc.collect()
ragged, sums, mask = KEPT
assert np.array_equal(ragged.values, -np.concatenate(items)), ragged.values
assert np.array_equal(ragged.offsets, [0, 3, 3, 8]), ragged.offsets
assert np.array_equal(sums, [[9.0] * 8, [0.0] * 8, [25.0] * 8]), sums
assert np.array_equal(mask, [[1, 1, 1, 0, 0], [0] * 5, [1] * 5]), mask
# A daemon thread keeps the outputs past the interpreter's teardown.
HOLD = threading.Thread(target=lambda out=KEPT: time.sleep(3600), daemon=True)
HOLD.start()
print("ok")
"""


def test_outputs_outlive_the_module_without_leaks():
    """Outputs kept past the module's collection stay right, and outputs
    alive at interpreter exit leave no IREE objects behind (they once
    viewed IREE's mapped memory: 'nanobind: leaked instance ...
    HalBufferView / MappedMemory' at exit)."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", KEEP_OUTPUTS], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "ok"
    assert "leaked" not in run.stderr, run.stderr
