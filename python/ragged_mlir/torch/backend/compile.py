"""``torch.compile(model, backend="ragged")``.

AOTAutograd hands the backend graphs of ATen ops and ``torch.ops.ragged.*``
custom ops over plain tensors (packed values, int64 offsets) and sizes: a
forward, a backward when something requires grad, or an inference graph.
Each one is planned (:mod:`.graph`: device, ragged and host nodes), built
into one MLIR module (:mod:`.emit`: dense pieces through torch-mlir, ragged
ops through the bindings), compiled by IREE (``ragged_mlir.compile``) and
called through :class:`.runtime.CompiledGraph`.

A graph the path cannot compile runs eagerly, with one warning that names
the op and the reason, and is counted in :data:`stats`. ``fallback=False``
(or ``RAGGED_FALLBACK=0`` in the environment) raises
:class:`BackendRefused` instead; tests run that way so that nothing passes
by running eagerly.
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import operator
import os
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch._functorch.aot_autograd import make_boxed_func
from torch._guards import TracingContext

from .. import ops  # noqa: F401  (registers torch.ops.ragged.*)
from ..graphs import Unsupported
from ..rewrites.decompositions import count_dims_from_the_front, decompose, imports_wrong
from ..rewrites.gelu import exact_gelu
from ..rewrites.masked_rows import guard_masked_rows
from ..rewrites.njt_patterns import rewrite_njt_patterns
from ..rewrites.reshapes import reshape_groups
from ..rewrites.unpad import log as unpad_log
from ..rewrites.unpad import unpad_graph
from ..rewrites.widen import widen_low_precision, widen_uint8
from . import lowerings  # noqa: F401  (fills the registry)
from .checks import check_divisors, check_indices
from .emit import PASSTHROUGH_DIALECTS, ImportFailed, build_module, describe_steps
from .plan import plan_graph
from .registry import LOWERINGS, emits, empty_result
from .runtime import CompiledGraph

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


@dataclasses.dataclass
class RaggedBackendOptions:
    """Options of the ``ragged`` backend (``torch.compile(..., options={...})``).

    target / cpu / device / iree_flags / balance_tile / attention_buckets /
        iree_attention / attention_scores_max_rows / cpu_kernels: as
        :class:`ragged_mlir.CompileOptions` (None picks the target's
        default; ``cpu`` None is the host, docs/cpu_targets.md). The
        compiled graphs run in this process: name a CPU whose code this
        machine runs.
    freeze_parameters: parameters and buffers (an inference graph's static
        inputs) become IREE parameters, bound at the first call: IREE then
        packs weights for its GEMM kernels once per binding, not on every
        call. A different tensor, or an in-place change (a new version
        counter), rebinds them on the next call; False passes them on every
        call. Training graphs always pass them: the optimizer changes them
        at every step.
    debug_dir: dump, per graph, the FX graph, the imported and ragged IR, the
        lowered IR and the IREE flags there (also ``RAGGED_DEBUG_DIR``).
    fallback: run a graph eagerly (with a warning) when it cannot be
        compiled; False raises :class:`BackendRefused` instead. None (the
        default) reads the environment: ``RAGGED_FALLBACK=0`` means False,
        anything else True.
    unpad: inference graphs of padded models whose attention is masked by
        a 0/1 key-padding input (``attention_mask``) run on the valid
        tokens only (:mod:`.unpad`). True applies it wherever the analysis
        proves it safe; outputs at padded positions are then 0 instead of
        what eager computes there. None (the default) applies it only where
        no output changes: every output is per item (masked pooling) or
        free of the batch. False never applies it. Graphs the analysis
        cannot prove safe compile as they are (the reason is logged at
        debug level by ``ragged_mlir.torch.unpad``).
    cache: keep compiled artifacts in the persistent cache and look them up
        there (:mod:`ragged_mlir.cache`; ``RAGGED_CACHE=0`` turns it off for
        every compile), so a second process compiles nothing it compiled
        before.
    """

    target: str = "llvm-cpu"
    cpu: str | None = None
    device: str | None = None
    iree_flags: Sequence[str] = ()
    balance_tile: int | None = None
    attention_buckets: int | None = None
    iree_attention: bool | None = None
    attention_scores_max_rows: int | None = None
    cpu_kernels: bool | None = None
    freeze_parameters: bool = True
    debug_dir: str | None = None
    fallback: bool | None = None
    unpad: bool | None = None
    cache: bool = True
    attention_kernel: bool | None = None  # the former name of cpu_kernels

    def __post_init__(self) -> None:
        from ...compiler.options import _rename_deprecated

        _rename_deprecated(self, "attention_kernel", "cpu_kernels")
        if self.fallback is None:
            env = os.environ.get("RAGGED_FALLBACK", "").strip().lower()
            self.fallback = env not in ("0", "false", "no", "off")
        if self.cpu is not None:
            from ...compiler import CompileOptions

            # An unknown CPU is an error now, naming `cpu`, not at a graph's compile.
            CompileOptions(target=self.target, cpu=self.cpu, iree_flags=list(self.iree_flags))


class BackendRefused(RuntimeError):
    """A graph could not be compiled and fallback is off; the message says
    which op and why."""


#: Counters: graphs compiled; graphs served from the cache of an identical
#: one; graphs that run eagerly (a graph identical to a refused one is
#: counted again), and the calls of those graphs; inference graphs that run
#: on the valid tokens only (:mod:`.unpad`; cache hits included); compiled
#: graphs whose artifact came from the persistent cache
#: (:mod:`ragged_mlir.cache`) or was compiled by iree-compile.
stats = {
    "compiled": 0,
    "cache_hits": 0,
    "fallbacks": 0,
    "fallback_calls": 0,
    "unpadded": 0,
    "artifact_hits": 0,
    "artifact_misses": 0,
}
#: Why each fallback happened (one line per graph), oldest first.
fallback_reasons: list[str] = []
#: Why unpadding did not apply to an inference graph that has a key-padding
#: mask candidate (one line per graph), oldest first.
unpad_refusals: list[str] = []
_cache: dict[tuple, Callable] = {}


def _release_cache() -> None:
    _cache.clear()


# Release the IREE modules before the interpreter tears their bindings down.
atexit.register(_release_cache)


def _is_emitted(node: torch.fx.Node) -> bool:
    """Ragged ops (and the results of those with several), and reshapes
    torch-mlir would get wrong (see :mod:`.reshapes`)."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        source = node.args[0]
        return isinstance(source, torch.fx.Node) and source.op == "call_function" and emits(source)
    return emits(node) or empty_result(node) or reshape_groups(node) is not None


def _build(gm: torch.fx.GraphModule):
    """The plan of ``gm``, and when it needs the device, its module's text and
    torch-mlir's text of each dense piece."""
    from ... import ir

    plan = plan_graph(gm, _is_emitted)
    if not plan.needs_device:
        return plan, None, None
    with ir.Context() as ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module, imported = build_module(plan, gm)
        module.operation.verify()
        return plan, str(module), imported


#: Flags for training graphs (forward and backward) on CPU. They keep IREE's
#: data tiling, but not its fusion of multi-use producers: a training
#: forward keeps intermediates for the backward (a GEMM's biased output
#: feeds both the GELU and the saved tensors), and IREE 3.13 then unpacks
#: two results in the GEMM's dispatch, transposing a vector<8x8x8x8xf32> its
#: CPU backend refuses ("One or more operations with large vector sizes
#: (16384 bytes) were found"). The weight gradients, which sum over the
#: tokens, become data-tiled GEMMs over static K chunks
#: (ragged-split-dynamic-contractions). A user's own flag wins.
_TRAINING_CPU_FLAGS = ("--iree-dispatch-creation-fuse-multi-use=false",)


def compile_fx_graph(
    gm: torch.fx.GraphModule,
    options: RaggedBackendOptions,
    static: Sequence[int] = (),
    kind: str = "forward",
) -> CompiledGraph:
    """Compiles an ATen FX graph with ragged custom ops; returns a callable
    over the same flat arguments, or raises :class:`Unsupported`. With
    ``options.freeze_parameters``, the ``static`` inputs (parameters and
    buffers) that are non-empty, statically shaped tensors become IREE
    parameters."""
    from ... import compile as ragged_compile
    from ...compiler import CompileError, CompileOptions, parameter_key

    for node in gm.graph.nodes:
        if (
            node.op == "call_function"
            and str(node.target).startswith("ragged.")
            and node.target not in LOWERINGS
        ):
            raise Unsupported("this ragged op has no lowering", node)
    t_start = time.perf_counter()
    guard_masked_rows(gm)
    count_dims_from_the_front(gm)
    check_indices(gm)
    check_divisors(gm)
    widen_uint8(gm)
    widen_low_precision(gm)
    exact_gelu(gm)
    if gm.graph.eliminate_dead_code():
        gm.recompile()
    if imports_wrong(gm):
        gm = decompose(gm)
    try:
        plan, text, imported = _build(gm)
    except ImportFailed as first:
        # Retry once with torch-mlir's decompositions (its own export path
        # applies them); sizes they compute become host nodes again.
        try:
            gm = decompose(gm)
            plan, text, imported = _build(gm)
        # Retracing can fail in any way (a view of permuted strides): the
        # first reason stands, the retry's error chained to it.
        except Exception as retry:  # noqa: BLE001
            raise first from retry
    if text is None:
        graph = CompiledGraph(plan)
        graph.timings = {"import_s": time.perf_counter() - t_start}
        return graph
    t_imported = time.perf_counter()
    debug_dir = options.debug_dir or os.environ.get("RAGGED_DEBUG_DIR")
    work_dir = None
    if debug_dir:
        tag = hashlib.sha1(text.encode()).hexdigest()[:10]
        work_dir = Path(debug_dir) / f"graph-{tag}"
        work_dir.mkdir(parents=True, exist_ok=True)
        (work_dir / "fx_graph.txt").write_text(
            f"# {kind} graph\n{gm.graph}\n\n# steps\n" + "\n".join(describe_steps(plan))
        )
        (work_dir / "imported.mlir").write_text("\n\n".join(imported.values()))
        (work_dir / "ragged.mlir").write_text(text)
    flags = list(options.iree_flags)
    if kind != "inference" and options.target == "llvm-cpu":
        named = {f.split("=", 1)[0] for f in flags}
        flags += [f for f in _TRAINING_CPU_FLAGS if f.split("=", 1)[0] not in named]
    copts = CompileOptions(
        target=options.target,
        cpu=options.cpu,
        device=options.device,
        iree_flags=flags,
        balance_tile=options.balance_tile,
        attention_buckets=options.attention_buckets,
        iree_attention=options.iree_attention,
        attention_scores_max_rows=options.attention_scores_max_rows,
        cpu_kernels=options.cpu_kernels,
        keep_intermediates=bool(work_dir),
        work_dir=str(work_dir) if work_dir else None,
        passthrough_dialects=PASSTHROUGH_DIALECTS,
        cache=options.cache,
    )
    index = {node: i for i, node in enumerate(plan.placeholders)}
    frozen = []
    if options.freeze_parameters:
        for k, node in enumerate(plan.device_inputs):
            val = node.meta.get("val")
            if (
                node.op == "placeholder"
                and index[node] in static
                and isinstance(val, torch.Tensor)
                and val.numel() > 0
                and all(isinstance(d, int) for d in val.shape)
            ):
                frozen.append(k)
    try:
        compiled = ragged_compile(text, options=copts, frozen={"main": frozen} if frozen else None)
    except CompileError as e:
        raise Unsupported(f"compilation failed: {e}") from e
    stats["artifact_hits" if compiled.cache_hit else "artifact_misses"] += 1
    graph = CompiledGraph(plan, compiled, frozen, [parameter_key("main", k) for k in frozen])
    graph.timings = {"import_s": t_imported - t_start, **compiled.timings}
    return graph


def _value_sig(val):
    """What a node's value is: a tensor's shape and dtype, a size's value or
    expression, or those of each element of a tuple."""
    if isinstance(val, torch.Tensor):
        return tuple(str(d) for d in val.shape), str(val.dtype)
    if isinstance(val, (tuple, list)):
        return tuple(_value_sig(v) for v in val)
    if isinstance(val, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool)):
        return str(val)
    return type(val).__name__


def _key(gm: torch.fx.GraphModule, example_inputs, options: RaggedBackendOptions, kind: str, static) -> tuple:
    # The values of every node, not only of the inputs: graphs with the same
    # code can differ in what Dynamo specialised (`x.split([s0, s1, s2], 2)`
    # of a 5x5x5 tensor with sizes 2, 1, 2 or 1, 3, 1), which the compiled
    # plan bakes in.
    sig = tuple(_value_sig(x) for x in example_inputs)
    sig += tuple(_value_sig(n.meta.get("val")) for n in gm.graph.nodes)
    lowering = (
        options.balance_tile,
        options.attention_buckets,
        options.iree_attention,
        options.attention_scores_max_rows,
        options.cpu_kernels,
        options.freeze_parameters,
        options.fallback,  # a refused graph is cached as its eager fallback
        options.unpad,
    )
    return (
        kind,
        gm.code,
        sig,
        tuple(static),
        options.target,
        options.cpu,
        options.device,
        tuple(options.iree_flags),
        lowering,
    )


class _Refused:
    """What the cache keeps of a graph that runs eagerly: why."""

    def __init__(self, reason: str):
        self.reason = reason


class _EagerGraph:
    """A graph that runs eagerly: every call is counted in
    ``stats["fallback_calls"]``."""

    def __init__(self, eager: Callable, message: str):
        self.eager = eager
        self.message = message

    def __call__(self, *args):
        stats["fallback_calls"] += 1
        return self.eager(*args)


def _refuse(options: RaggedBackendOptions, kind: str, reason: str, eager: Callable) -> Callable:
    """``eager``, counted, after one warning for this graph (or
    :class:`BackendRefused` without fallback)."""
    message = f"ragged backend: running this graph eagerly ({kind}): {reason}"
    if not options.fallback:
        raise BackendRefused(message)
    stats["fallbacks"] += 1
    fallback_reasons.append(message)
    # The graph's number keeps Python's warning filter from hiding a second
    # graph refused for the same reason.
    warnings.warn(f"{message} [graph {stats['fallbacks']}]", stacklevel=3)
    return _EagerGraph(eager, message)


def _guarded(
    fn: CompiledGraph, eager: Callable, options: RaggedBackendOptions, kind: str, key: tuple
) -> Callable:
    """The first call checks that the compiled graph runs; if IREE refuses
    it, the graph falls back like a compile-time refusal (never on later
    calls, whose failures are the caller's), and so does every identical
    graph after it."""
    state: dict[str, Any] = {"run": None}

    def run(*args):
        if state["run"] is not None:
            return state["run"](*args)
        try:
            out = fn(*args)
        except (RuntimeError, ValueError) as e:  # IREE's and the runtime's errors; a bug propagates
            text = str(e).strip()
            reason = f"the compiled graph failed at its first call: {text.splitlines()[0] if text else type(e).__name__}"
            state["run"] = _refuse(options, kind, reason, eager)
            _cache[key] = _Refused(reason)
            return state["run"](*args)
        state["run"] = fn
        return out

    run.compiled_graph = fn
    return run


def _compiler(options: RaggedBackendOptions, kind: str):
    def compile_graph(gm: torch.fx.GraphModule, example_inputs):
        # PyTorch NJT inputs: their pad -> op -> unpad patterns become ragged ops.
        rewrites = rewrite_njt_patterns(gm)
        if rewrites and (options.debug_dir or os.environ.get("RAGGED_DEBUG_DIR")):
            warnings.warn("ragged backend: NJT patterns rewritten: " + "; ".join(rewrites), stacklevel=2)
        static: Sequence[int] = ()
        # Parameters become IREE parameters for inference only: a training
        # step updates them in place, and each update would rebind them and
        # reload the module on the next call (memory grew ~50 MB a step).
        if kind == "inference":
            tracing = TracingContext.try_get()
            static = getattr(getattr(tracing, "fw_metadata", None), "static_input_indices", None) or ()
        key = _key(gm, example_inputs, options, kind, static)
        eager = gm.forward
        if key in _cache:
            stats["cache_hits"] += 1
            cached = _cache[key]
            if isinstance(cached, _Refused):
                # An identical graph was refused: this one runs eagerly too,
                # its own code, and says so.
                fn = _refuse(options, kind, f"{cached.reason} (as an identical graph before it)", eager)
                return make_boxed_func(fn) if kind == "backward" else fn
            if getattr(cached, "unpadded", None) is not None:
                stats["unpadded"] += 1
            return cached
        unpadded = None
        if options.unpad is not False and kind == "inference":
            region = _copy_graph(gm)
            refused = len(unpad_refusals)
            unpadded = unpad_graph(region, unpad_refusals)
            if unpadded is None and options.unpad and len(unpad_refusals) > refused:
                # Asked for and not given: say so, once per graph.
                warnings.warn(
                    f"ragged backend: unpad=True, but this graph runs padded: {unpad_refusals[-1]}",
                    stacklevel=3,
                )
            if unpadded is not None and not (options.unpad or unpadded.exact):
                reason = "not applied by default: outputs at padded positions would change"
                unpad_log.debug("unpadding %s", reason)
                unpad_refusals.append(reason)
                unpadded = None
            if unpadded is not None:
                gm = region
        try:
            t0 = time.perf_counter()
            graph = compile_fx_graph(gm, options, static, kind)
            graph.compile_seconds = time.perf_counter() - t0
            stats["compiled"] += 1
            if unpadded is None:
                fn = _guarded(graph, eager, options, kind, key)
            else:
                stats["unpadded"] += 1
                fn = unpadded.wrap(_guarded(graph, gm.forward, options, kind, key), eager)
                fn.unpadded = unpadded
            cached = fn
        except Unsupported as e:
            fn = _refuse(options, kind, str(e), eager)
            cached = _Refused(str(e))
        if kind == "backward":
            # AOTAutograd calls a backward with one list of arguments.
            fn = make_boxed_func(fn)
            if not isinstance(cached, _Refused):
                cached = fn
        _cache[key] = cached
        return fn

    return compile_graph


def _copy_graph(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` with its own nodes (metadata shared) to rewrite."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return torch.fx.GraphModule(gm, graph)


def ragged_backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None) -> Callable:
    """The ``torch.compile`` backend (entry point ``torch_dynamo_backends``: ``ragged``)."""
    from torch._dynamo.backends.common import aot_autograd

    opts = RaggedBackendOptions(**(options or {}))
    return aot_autograd(
        fw_compiler=_compiler(opts, "forward"),
        bw_compiler=_compiler(opts, "backward"),
        inference_compiler=_compiler(opts, "inference"),
    )(gm, example_inputs)
