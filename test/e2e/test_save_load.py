"""CompiledModule.save -> ragged_mlir.load gives a module with the same
functions, signatures and bit-identical results, without recompiling."""

from __future__ import annotations

import numpy as np
import pytest

import ragged_mlir
from ragged_mlir import RaggedArray

F32 = np.float32
S = "!ragged.tensor<?, [L], 2, 4, f32>"
N = "!ragged.tensor<?, [S], [T(S)], 4, f32>"

TEXT = f"""
func.func @block(%x: {S}, %g: tensor<4xf32>, %b: tensor<4xf32>) -> ({S}, tensor<?x2x4xf32>) {{
  %a = ragged.attention %x, %x, %x {{scale = 0.5 : f64, causal}} : {S}
  %n = ragged.layer_norm %a, %g, %b : {S}, tensor<4xf32>, tensor<4xf32>
  %m = ragged.reduce <max> %n empty(0xFF800000 : f32) : {S} -> tensor<?x2x4xf32>
  return %n, %m : {S}, tensor<?x2x4xf32>
}}
func.func @nested(%x: {N}) -> (!ragged.tensor<?, [S], 4, f32>, tensor<?x?x?x4xf32>) {{
  %r = ragged.reduce <mean> %x : {N} -> !ragged.tensor<?, [S], 4, f32>
  %p = ragged.to_padded %x padding(-1.0 : f32) : {N} -> tensor<?x?x?x4xf32>
  return %r, %p : !ragged.tensor<?, [S], 4, f32>, tensor<?x?x?x4xf32>
}}
"""


def test_save_load_round_trip(tmp_path, rng):
    module = ragged_mlir.compile(TEXT)
    x = RaggedArray.from_list([rng.uniform(-1, 1, (n, 2, 4)).astype(F32) for n in [3, 0, 7, 1]])
    g, b = rng.uniform(0.5, 1.5, 4).astype(F32), rng.uniform(-1, 1, 4).astype(F32)
    docs = RaggedArray.from_nested(
        [[rng.uniform(-1, 1, (t, 4)).astype(F32) for t in doc] for doc in [[2, 0], [], [1, 3, 0]]]
    )

    path = module.save(tmp_path / "m.vmfb")
    assert path == tmp_path / "m.vmfb" and path.is_file() and path.with_suffix(".json").is_file()
    loaded = ragged_mlir.load(tmp_path / "m.vmfb")
    assert loaded.functions == module.functions == ["block", "nested"]
    assert loaded.signatures == module.signatures

    for name, args in (("block", (x, g, b)), ("nested", (docs,))):
        want, got = getattr(module, name)(*args), getattr(loaded, name)(*args)
        assert len(want) == len(got)
        for w, o in zip(want, got, strict=False):
            assert type(w) is type(o)
            if isinstance(w, RaggedArray):
                assert w.layout == o.layout
                assert len(w.partitions) == len(o.partitions)
                for pw, po in zip(w.partitions, o.partitions, strict=False):
                    np.testing.assert_array_equal(pw, po)
                w, o = w.values, o.values
            assert w.dtype == o.dtype and w.shape == o.shape
            assert w.tobytes() == o.tobytes(), name


def test_load_missing_signature_file(tmp_path):
    (tmp_path / "m.vmfb").write_bytes(b"not a module")
    with pytest.raises(FileNotFoundError, match=r"m\.json"):
        ragged_mlir.load(tmp_path / "m.vmfb")


def test_frozen_arguments_bind_and_rebind(rng):
    """compile(frozen=...) moves dense arguments into IREE parameters: the
    function stops taking them, calls before binding fail clearly, and
    rebinding changes the results; frozen modules refuse to save."""
    src = """
func.func @lin(%x: !ragged.tensor<?, [L], 8, f32>, %w: tensor<8x8xf32>) -> !ragged.tensor<?, [L], 8, f32> {
  %y = ragged.matmul %x, %w : !ragged.tensor<?, [L], 8, f32>, tensor<8x8xf32> -> !ragged.tensor<?, [L], 8, f32>
  return %y : !ragged.tensor<?, [L], 8, f32>
}"""
    module = ragged_mlir.compile(src, frozen={"lin": [2]})
    assert module.parameter_keys == [ragged_mlir.compiler.parameter_key("lin", 2)] == ["lin.arg2"]
    x = RaggedArray.from_list([rng.standard_normal((n, 8)).astype(np.float32) for n in (3, 0, 5)])
    with pytest.raises(RuntimeError, match="not bound yet: lin.arg2"):
        module.lin(x)
    with pytest.raises(KeyError, match="no frozen argument named lin.arg0"):
        module.bind_parameters({"lin.arg0": np.zeros((8, 8), np.float32)})
    for _ in range(2):
        w = rng.standard_normal((8, 8)).astype(np.float32)
        module.bind_parameters({"lin.arg2": w})
        np.testing.assert_allclose(module.lin(x).values, x.values @ w, rtol=1e-5, atol=1e-5)
    other = module.with_parameters({"lin.arg2": np.eye(8, dtype=np.float32)})
    np.testing.assert_allclose(other.lin(x).values, x.values, rtol=1e-6)
    with pytest.raises(ValueError, match="frozen arguments bound at run time"):
        module.save("/nonexistent/m.vmfb")
    with pytest.raises(
        ValueError, match=r"argument 0 of 'lin' \(after lowering\) is not a dense tensor argument"
    ):
        ragged_mlir.compile(src, frozen={"lin": [0]})
    with pytest.raises(ValueError, match="no public function named 'nope'"):
        ragged_mlir.compile(src, frozen={"nope": [2]})
