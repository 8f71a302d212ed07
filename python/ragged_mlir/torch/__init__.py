"""PyTorch integration. Needs ``torch`` (the core ragged_mlir package does not).

- :mod:`.nested`: ``NestedTensor``, a batch of tensors of different shapes
  stored packed, and its torch function table (no MLIR: importing it loads
  no compiler);
- :mod:`.ops`: the ``torch.ops.ragged.*`` custom ops the two share, with
  their fake and reference implementations and gradients;
- :mod:`.backend`: ``torch.compile(model, backend="ragged")``;
- :mod:`.rewrites`: the FX graph rewrites the backend applies first
  (unpadding, NJT patterns, torch-mlir workarounds).
"""

from . import ops
from .nested import NestedTensor

__all__ = ["NestedTensor", "RaggedBackendOptions", "ops", "ragged_backend"]


def ragged_backend(gm, example_inputs, options: dict | None = None):
    """``torch.compile(..., backend="ragged")``: see :mod:`.backend` (loaded
    on first use, with the MLIR bindings and torch-mlir)."""
    from .backend import ragged_backend as backend

    return backend(gm, example_inputs, options)


def __getattr__(name: str):
    if name == "RaggedBackendOptions":
        from .backend import RaggedBackendOptions

        return RaggedBackendOptions
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _register() -> None:
    # Also reachable without the installed entry point (development trees).
    from torch._dynamo import list_backends, register_backend

    if "ragged" not in list_backends(exclude_tags=()):
        register_backend(name="ragged")(ragged_backend)


_register()
