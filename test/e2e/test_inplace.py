"""Arguments IREE may write in place go in as copies.

On CPU the runtime hands arrays to IREE without copying them, and IREE
writes an op's result into its destination's buffer when that destination
is a function argument (a scatter, an accumulating matmul, an insert), even
through a copy, which it folds away. ``ragged_mlir.inplace`` finds those
arguments; the runtime copies them, and only them. Each call here uses
64-byte aligned arrays, the ones the runtime would otherwise not copy.
"""

from __future__ import annotations

import numpy as np
import pytest

import ragged_mlir
from ragged_mlir import CompileOptions, ir
from ragged_mlir.compiler.runtime import HostImporter
from ragged_mlir.inplace import written_arguments

F64 = np.float64

PROGRAM = """
func.func @acc(%a: tensor<4x3xf64>, %b: tensor<3x5xf64>, %c: tensor<4x5xf64>) -> tensor<4x5xf64> {
  %r = linalg.matmul ins(%a, %b : tensor<4x3xf64>, tensor<3x5xf64>) outs(%c : tensor<4x5xf64>) -> tensor<4x5xf64>
  return %r : tensor<4x5xf64>
}
func.func @scatter(%u: tensor<?x1x6xf64>, %i: tensor<?x1xi64>, %x: tensor<4x6xf64>) -> tensor<4x6xf64> {
  %e = tensor.empty() : tensor<4x6xf64>
  %c = linalg.copy ins(%x : tensor<4x6xf64>) outs(%e : tensor<4x6xf64>) -> tensor<4x6xf64>
  %r = "tm_tensor.scatter"(%u, %i, %c) <{dimension_map = array<i64: 0>, operandSegmentSizes = array<i32: 2, 1>,
                                          unique_indices = false}> ({
  ^bb0(%new: f64, %old: f64):
    %s = arith.addf %old, %new : f64
    "tm_tensor.yield"(%s) : (f64) -> ()
  }) : (tensor<?x1x6xf64>, tensor<?x1xi64>, tensor<4x6xf64>) -> tensor<4x6xf64>
  return %r : tensor<4x6xf64>
}
func.func @insert(%x: tensor<24xf64>, %y: tensor<2x6xf64>) -> tensor<4x6xf64> {
  %v = tensor.expand_shape %x [[0, 1]] output_shape [4, 6] : tensor<24xf64> into tensor<4x6xf64>
  %r = call @put(%y, %v) : (tensor<2x6xf64>, tensor<4x6xf64>) -> tensor<4x6xf64>
  return %r : tensor<4x6xf64>
}
func.func private @put(%y: tensor<2x6xf64>, %into: tensor<4x6xf64>) -> tensor<4x6xf64> {
  %r = tensor.insert_slice %y into %into[1, 0] [2, 6] [1, 1] : tensor<2x6xf64> into tensor<4x6xf64>
  return %r : tensor<4x6xf64>
}
"""

OPTIONS = CompileOptions(passthrough_dialects=("tm_tensor",))


def aligned(array: np.ndarray) -> np.ndarray:
    """A copy of ``array`` at a 64-byte boundary (what the runtime imports
    without copying)."""
    array = np.ascontiguousarray(array)
    raw = np.empty(array.nbytes + HostImporter.ALIGNMENT, np.uint8)
    start = -raw.ctypes.data % HostImporter.ALIGNMENT
    out = raw[start : start + array.nbytes].view(array.dtype).reshape(array.shape)
    out[...] = array
    return out


def test_written_arguments_are_found():
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(PROGRAM)
        # Through a copy, a view and a call; the read-only operands are not.
        assert written_arguments(module) == {"acc": [2], "scatter": [2], "insert": [0]}


@pytest.fixture(scope="module")
def module():
    return ragged_mlir.compile(PROGRAM, options=OPTIONS)


def test_signature_names_the_written_arguments(module):
    assert {name: sig["written"] for name, sig in module.signatures.items()} == {
        "acc": [2],
        "scatter": [2],
        "insert": [0],
    }


def test_destinations_in_arguments_are_not_mutated(module):
    rng = np.random.default_rng(0)
    a, b, c = (aligned(rng.standard_normal(s)) for s in [(4, 3), (3, 5), (4, 5)])
    updates = aligned(rng.standard_normal((3, 1, 6)))
    rows = aligned(np.array([[1], [3], [1]], np.int64))
    x = aligned(rng.standard_normal((4, 6)))
    flat, y = aligned(rng.standard_normal(24)), aligned(rng.standard_normal((2, 6)))
    calls = {
        "acc": ((a, b, c), c + a @ b),
        "scatter": (
            (updates, rows, x),
            x + np.stack([np.zeros(6), updates[0, 0] + updates[2, 0], np.zeros(6), updates[1, 0]]),
        ),
        "insert": ((flat, y), np.concatenate([flat.reshape(4, 6)[:1], y, flat.reshape(4, 6)[3:]])),
    }
    for name, (args, want) in calls.items():
        before = [arg.copy() for arg in args]
        for _ in range(2):  # a second call would see a first call's write
            np.testing.assert_allclose(getattr(module, name)(*args), want, rtol=1e-13, atol=1e-13)
            np.testing.assert_allclose(module.raw(name)(*args).to_host(), want, rtol=1e-13, atol=1e-13)
        for arg, kept in zip(args, before, strict=True):
            np.testing.assert_array_equal(arg, kept, err_msg=f"{name} mutated an argument")
