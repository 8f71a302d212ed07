# RUN: %PYTHON %s | FileCheck %s
# The window rule is written twice: in Python (ragged_mlir.windows, which the
# builders, NestedTensor and the torch ops use) and in C++ (WindowDim in
# dialect/RaggedDialect.h, which the verifiers and the lowering use). Over
# every kernel, stride, padding, dilation and ceil mode, the C++ verifier
# accepts exactly the result symbols the Python rule gives: a kept extent keeps
# its symbol, any other extent gets a fresh one.

import itertools

from ragged_mlir import ir
from ragged_mlir.windows import keeps_extent, window_symbol

IMAGE = "!ragged.tensor<?, [H], [W], 4, f32>"


def verifies(k, s, p, d, ceil, out_h, out_w) -> bool:
    attrs = f"kernel = array<i64: {k}, {k}>, strides = array<i64: {s}, {s}>, "
    attrs += f"padding = array<i64: {p}, {p}>, dilation = array<i64: {d}, {d}>"
    attrs += ", ceil_mode" if ceil else ""
    result = f"!ragged.tensor<?, [{out_h}], [{out_w}], 4, f32>"
    text = (
        f"func.func @f(%x: {IMAGE}) -> {result} {{\n"
        f"  %y = ragged.pool2d <max> %x {{{attrs}}} : {IMAGE} -> {result}\n"
        f"  return %y : {result}\n}}"
    )
    try:
        ir.Module.parse(text)
    except ir.MLIRError:
        return False
    return True


with ir.Context():
    cases = disagreements = 0
    for k, s, p, d, ceil in itertools.product(
        (1, 2, 3, 5, 7), (1, 2, 3), (0, 1, 2, 3), (1, 2), (False, True)
    ):
        if 2 * p > k:
            continue  # pooling takes at most half the kernel as padding
        cases += 1
        keeps = keeps_extent(k, s, p, d)
        h, w = ("H", "W") if keeps else (window_symbol(n, k, s, p, d, ceil) for n in "HW")
        # The symbols the Python rule gives verify; the opposite choice does not.
        flipped = ("Hx", "Wx") if keeps else ("H", "W")
        if not verifies(k, s, p, d, ceil, h, w) or verifies(k, s, p, d, ceil, *flipped):
            disagreements += 1
            print("disagree:", k, s, p, d, ceil)
    # CHECK-NOT: disagree:
    # CHECK: windows: {{[0-9]+}}, disagreements: 0
    print(f"windows: {cases}, disagreements: {disagreements}")
    assert cases > 100
