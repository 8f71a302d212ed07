"""``torch.compile(model, backend="ragged")``: the Dynamo/AOTAutograd backend.

- :mod:`.compile`: the entry point, its options, the fallback policy and the
  cache of compiled graphs;
- :mod:`.plan`: which FX nodes run on the device, as ragged ops or dense
  pieces, and which on the host;
- :mod:`.emit`: one MLIR module per graph (dense pieces through torch-mlir,
  ragged ops through the bindings);
- :mod:`.runtime`: calling a compiled graph with torch tensors;
- :mod:`.checks`: run-time checks the graph needs (indices, divisors);
- :mod:`.support`: the tables docs/torch.md is generated from.

The graph rewrites that run before planning are in :mod:`..rewrites`.
"""

from ..graphs import Unsupported
from .compile import (
    BackendRefused,
    RaggedBackendOptions,
    compile_fx_graph,
    fallback_reasons,
    ragged_backend,
    stats,
    unpad_refusals,
)
from .compile import _cache as _cache  # the compiled graphs (tests clear it)

__all__ = [
    "BackendRefused",
    "RaggedBackendOptions",
    "Unsupported",
    "compile_fx_graph",
    "fallback_reasons",
    "ragged_backend",
    "stats",
    "unpad_refusals",
]
