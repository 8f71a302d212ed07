"""ragged-mlir: a compiler for ragged tensors.

The MLIR Python core lives under this package (``ragged_mlir.ir``,
``ragged_mlir.passmanager``, ``ragged_mlir.dialects``) with the ``ragged``
dialect registered in every new Context. :func:`compile` turns a ragged
program into an IREE artifact and returns a callable.
"""

from .array import RaggedArray
from .compiler import CompileError, CompileOptions, Target, compile, load, lower

__all__ = [
    "CompileError",
    "CompileOptions",
    "RaggedArray",
    "Target",
    "compile",
    "load",
    "lower",
]
