"""Differential fuzzing of ragged-mlir: random valid programs, compiled and
run, against a float64 reference interpreter written from the op docs.

* :mod:`fuzzing.program`: the fuzzer's description of a program and its
  emission with the public builders.
* :mod:`fuzzing.generator`: random programs, type-correct by construction.
* :mod:`fuzzing.reference`: per-item float64 evaluation with error bounds, and
  the drawing of inputs (edge-case length plans).
* :mod:`fuzzing.check`: comparison of compiled results with the reference.
* :mod:`fuzzing.runner`: compile a batch of programs as one module, run them,
  classify each outcome and write reproducers.
"""
