"""``compile()``: ragged MLIR -> IREE artifact -> a Python callable.

The pipeline is the named C++ pipeline ``ragged-to-iree-input``; Python only
calls it by name, so ``ragged-opt --pass-pipeline=...`` replays any compile.

- :mod:`.options`: targets, CPUs, ``CompileOptions`` (the pipeline's options
  and the IREE flags);
- :mod:`.lowering`: ``lower()``, ``compile()``, reproducers, frozen
  arguments as IREE parameters;
- :mod:`.abi`: what a compiled function takes and returns;
- :mod:`.runtime`: devices, ``CompiledModule``, ``CompiledFunction``,
  ``load()``.
"""

from .abi import PARAMETER_SCOPE, CompileError, parameter_key
from .lowering import compile, lower
from .options import (
    ATTENTION_BUCKETS,
    ATTENTION_SCORES_MAX_ROWS,
    BALANCE_TILE,
    CONTRACTION_CHUNK,
    CPU_TARGETS,
    PIPELINE,
    CompileOptions,
    CpuTarget,
    Target,
)
from .runtime import CompiledFunction, CompiledModule, load

__all__ = [
    "ATTENTION_BUCKETS",
    "ATTENTION_SCORES_MAX_ROWS",
    "BALANCE_TILE",
    "CONTRACTION_CHUNK",
    "CPU_TARGETS",
    "PARAMETER_SCOPE",
    "PIPELINE",
    "CompileError",
    "CompileOptions",
    "CompiledFunction",
    "CompiledModule",
    "CpuTarget",
    "Target",
    "compile",
    "load",
    "lower",
    "parameter_key",
]
