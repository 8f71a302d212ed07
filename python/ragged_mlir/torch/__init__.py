"""PyTorch integration: ragged custom ops, NestedTensor and the
``torch.compile(backend="ragged")`` backend. Needs ``torch`` (the core
ragged_mlir package does not)."""

from . import ops
from .backend import RaggedBackendOptions, ragged_backend

__all__ = ["RaggedBackendOptions", "ops", "ragged_backend"]

try:
    from .nested import NestedTensor  # noqa: F401

    __all__.append("NestedTensor")
except ImportError:  # pragma: no cover - nested.py is optional while being built
    pass


def _register() -> None:
    # Also reachable without the installed entry point (development trees).
    from torch._dynamo import list_backends, register_backend

    if "ragged" not in list_backends(exclude_tags=()):
        register_backend(name="ragged")(ragged_backend)


_register()
