"""Calling a compiled graph: torch arguments in, torch results out.

Tensors cross to IREE without a copy on CPU (see
:class:`ragged_mlir.compiler.runtime.HostImporter`); sizes the graph computes on the
host are evaluated from the arguments (:class:`~.graph.SymbolTable`);
outputs that are inputs, sizes or constants never touch the device.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..graphs import value_of
from .plan import Plan

__all__ = ["CompiledGraph"]


def _version(t: torch.Tensor):
    try:
        return t._version
    except RuntimeError:  # inference tensors keep no version counter
        return None


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A host array of ``t`` (no copy when it is a contiguous CPU tensor);
    bfloat16, which numpy lacks, as ``ml_dtypes.bfloat16`` (what IREE's
    runtime takes and returns); bool as int8, as bool tensors cross into
    a compiled graph (:func:`.emit.boundary_type`)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    t = t.contiguous()
    if t.dtype == torch.bool:
        return t.view(torch.int8).numpy()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def to_torch(array) -> torch.Tensor:
    """A torch tensor owning a copy of a device result. IREE may hand the
    memory behind a mapped result to a later call, so a tensor that only
    viewed it could change under its owner (seen as wrong values when one
    compiled graph's output fed the next)."""
    host = array if isinstance(array, np.ndarray) else np.asarray(array.to_host())
    if host.dtype.name == "bfloat16":
        return torch.from_numpy(host.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(host.copy())


class _Parameters:
    """One bound module per set of frozen tensors (the instances of one layer
    share a graph): keyed by the tensors' ids, checked against weak
    references and version counters, so an in-place update rebinds."""

    def __init__(self, compiled, positions: Sequence[int], keys: Sequence[str]):
        self._compiled = compiled
        self._positions = list(positions)
        self._keys = list(keys)
        self._bindings: dict[tuple[int, ...], tuple[list, list, Any]] = {}

    def module_for(self, args: Sequence[Any]):
        tensors = [args[i] for i in self._positions]
        key = tuple(id(t) for t in tensors)
        versions = [_version(t) for t in tensors]
        entry = self._bindings.get(key)
        same = entry is not None and all(r() is t for r, t in zip(entry[0], tensors, strict=True))
        if same and None not in versions and entry[1] == versions:
            return entry[2]
        arrays = {k: to_numpy(t) for k, t in zip(self._keys, tensors, strict=True)}
        if same:
            entry[2].bind_parameters(arrays)
            module = entry[2]
        else:
            for k in [k for k, (refs, _, _) in self._bindings.items() if any(r() is None for r in refs)]:
                del self._bindings[k]
            module = self._compiled.with_parameters(arrays)
        self._bindings[key] = ([weakref.ref(t) for t in tensors], versions, module)
        return module


class CompiledGraph:
    """The callable a graph compiles to: same flat arguments and results as
    the FX graph."""

    def __init__(self, plan: Plan, compiled=None, frozen: Sequence[int] = (), parameter_keys=()):
        self.plan = plan
        self.compiled_module = compiled
        index = {node: i for i, node in enumerate(plan.placeholders)}
        frozen_set = set(frozen)
        # main's arguments, frozen ones left out: ("arg", placeholder) or ("host", evaluate).
        self._inputs: list[tuple[str, Any]] = []
        for k, node in enumerate(plan.device_inputs):
            if k in frozen_set:
                continue
            if node in plan.host_values:
                self._inputs.append(("host", plan.host_values[node]))
            else:
                self._inputs.append(("arg", index[node]))
        positions = [index[plan.device_inputs[k]] for k in sorted(frozen_set)]
        self._parameters = _Parameters(compiled, positions, parameter_keys) if frozen_set else None
        self.timings: dict[str, float] = {}
        # Bool tensors come back as int8 (.emit.boundary_type), uint8 ones
        # as int8 too (MLIR's integers are signless): both are viewed back.
        self._viewed_results = [
            (k, v.dtype)
            for k, node in enumerate(plan.device_outputs)
            if isinstance(v := value_of(node), torch.Tensor) and v.dtype in (torch.bool, torch.uint8)
        ]

    def __call__(self, *args):
        plan = self.plan
        for check, message in plan.host_checks:
            if not check(args):
                raise RuntimeError(f"ragged backend: {message}")
        results: list[torch.Tensor] = []
        if self.compiled_module is not None:
            module = self._parameters.module_for(args) if self._parameters else self.compiled_module
            flat = []
            for kind, what in self._inputs:
                if kind == "arg":
                    flat.append(to_numpy(args[what]))
                else:
                    flat.append(what(args))
            if plan.seeded:
                flat.append(np.asarray(torch.empty((), dtype=torch.int64).random_().item(), dtype=np.int64))
            out = module.raw("main")(*flat)
            if len(plan.device_outputs) == 1:
                out = [out]
            results = [to_torch(o) for o in out] if plan.device_outputs else []
            for k, dtype in self._viewed_results:
                results[k] = results[k].view(dtype)
        built = []
        for spec in plan.outputs:
            if spec.kind == "device":
                built.append(results[spec.index])
            elif spec.kind == "input":
                built.append(args[spec.index])
            elif spec.kind == "host":
                built.append(spec.evaluate(args))
            elif spec.kind in ("view", "late"):
                built.append(spec.evaluate(args, results))
            else:
                built.append(spec.value)
        return tuple(built)
