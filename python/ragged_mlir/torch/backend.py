"""``torch.compile(model, backend="ragged")``.

AOTAutograd hands us a forward graph of ATen ops and ``torch.ops.ragged.*``
custom ops over plain tensors (packed values, int64 offsets, SymInts). The
graph is split at the ragged ops: each dense piece goes through torch-mlir's
FX importer to linalg-on-tensors; each ragged op becomes a ragged-dialect op
on ``ragged.pack``-ed values; a ``main`` function calls them in order. The
module crosses from torch-mlir (LLVM 24) to ragged_mlir (LLVM 22) as text,
runs the ``ragged-to-iree-input`` pipeline and is compiled by IREE.

Anything the path cannot handle falls back to eager execution of that graph
with a warning that names the reason, never a wrong result.
"""

from __future__ import annotations

import atexit
import dataclasses
import hashlib
import math
import os
import time
import warnings
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch._guards import TracingContext
from torch.fx.passes.split_module import split_module

from . import ops  # noqa: F401  (registers torch.ops.ragged.*)
from .njt_patterns import rewrite_njt_patterns

__all__ = ["RaggedBackendOptions", "ragged_backend", "compile_fx_graph", "stats"]

_DTYPES = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.bool: "i1",
}

_RAGGED_OPS = {
    "ragged.segment_reduce.default",
    "ragged.segment_softmax.default",
    "ragged.attention.default",
}


@dataclasses.dataclass
class RaggedBackendOptions:
    """Options of the ``ragged`` backend (``torch.compile(..., options={...})``).

    target / device / iree_flags / balance_tile / attention_buckets /
    iree_attention: as :class:`ragged_mlir.CompileOptions` (None picks the
        target's default).
    freeze_parameters: parameters and buffers (the graph's static inputs)
        become IREE parameters, bound at the first call: IREE then packs
        weights for its GEMM kernels once per binding, not on every call.
        A different tensor, or an in-place change (a new version counter),
        rebinds them on the next call; False passes them on every call.
    debug_dir: dump, per graph, the FX graph, the imported and ragged IR, the
        lowered IR and the IREE flags there (also ``RAGGED_DEBUG_DIR``).
    fallback: run a graph eagerly (with a warning) when it cannot be
        compiled; False raises instead.
    """

    target: str = "llvm-cpu"
    device: str | None = None
    iree_flags: Sequence[str] = ()
    balance_tile: int | None = None
    attention_buckets: int | None = None
    iree_attention: bool | None = None
    freeze_parameters: bool = True
    debug_dir: str | None = None
    fallback: bool = True


#: Counters: graphs compiled, cache hits, fallbacks.
stats = {"compiled": 0, "cache_hits": 0, "fallbacks": 0}
_cache: dict[tuple, Any] = {}
# Release the IREE modules before the interpreter tears their bindings down.
atexit.register(_cache.clear)


class Unsupported(Exception):
    """The graph uses something the ragged path cannot compile."""


def _is_ragged(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and str(node.target) in _RAGGED_OPS


def _tensor_type(val) -> str:
    if isinstance(val, (torch.SymInt, int)):
        return "i64"
    if not isinstance(val, torch.Tensor):
        raise Unsupported(f"graph value of type {type(val).__name__} at the function boundary")
    if val.dtype not in _DTYPES:
        raise Unsupported(f"dtype {val.dtype} at the function boundary")
    dims = ["?" if not isinstance(d, int) else str(d) for d in val.shape]
    return f"tensor<{'x'.join(dims + [_DTYPES[val.dtype]])}>"


def _float(x: float, elem: str) -> str:
    if math.isinf(x):
        bits = {
            "f32": ("0x7F800000", "0xFF800000"),
            "f64": ("0x7FF0000000000000", "0xFFF0000000000000"),
            "f16": ("0x7C00", "0xFC00"),
        }[elem]
        return f"{bits[x < 0]} : {elem}"
    if math.isnan(x):
        return {"f32": "0x7FC00000", "f64": "0x7FF8000000000000", "f16": "0x7E00"}[elem] + f" : {elem}"
    return f"{x:.17e} : {elem}"


class _Emitter:
    """Builds the text of ``main`` and its callees."""

    def __init__(self):
        self.lines: list[str] = []
        self.callees: list[str] = []
        self.count = 0
        self.symbols: dict[str, str] = {}

    def fresh(self) -> str:
        self.count += 1
        return f"%v{self.count}"

    def symbol(self, offsets_name: str) -> str:
        # One symbol per offsets value: same offsets, provably same partition.
        return self.symbols.setdefault(offsets_name, f"L{len(self.symbols)}")

    def cast(self, name: str, have: str, want: str) -> tuple[str, str]:
        if have == want:
            return name, have
        out = self.fresh()
        self.lines.append(f"{out} = tensor.cast {name} : {have} to {want}")
        return out, want

    def ragged_type(self, values_type: str, symbol: str) -> str:
        inner = values_type[len("tensor<") : -1].split("x")
        dims, elem = inner[1:-1], inner[-1]
        return "!ragged.tensor<?, [" + symbol + "]" + "".join(f", {d}" for d in dims) + f", {elem}>"


def _emit_ragged(em: _Emitter, node: torch.fx.Node, env: dict) -> tuple[str, str]:
    target = str(node.target)
    args = node.args

    def value(a):
        return env[a.name]

    if target == "ragged.segment_reduce.default":
        (v, vt), (o, ot) = value(args[0]), value(args[1])
        kind, empty = args[2], float(args[3])
        sym = em.symbol(args[1].name)
        rt = em.ragged_type(vt, sym)
        elem = vt[:-1].split("x")[-1]
        packed, out = em.fresh(), em.fresh()
        # [?, trailing dims] from the op; the graph may know the batch.
        natural = "tensor<?x" + vt.split("x", 1)[1]
        em.lines.append(f"{packed} = ragged.pack {v} [{o}] : {vt}, {ot} -> {rt}")
        empty_attr = f" empty({_float(empty, elem)})"
        em.lines.append(f"{out} = ragged.reduce <{kind}> {packed}{empty_attr} : {rt} -> {natural}")
        return em.cast(out, natural, _tensor_type(node.meta["val"]))
    if target == "ragged.segment_softmax.default":
        (v, vt), (o, ot) = value(args[0]), value(args[1])
        rt = em.ragged_type(vt, em.symbol(args[1].name))
        packed, sm, out = em.fresh(), em.fresh(), em.fresh()
        em.lines.append(f"{packed} = ragged.pack {v} [{o}] : {vt}, {ot} -> {rt}")
        em.lines.append(f"{sm} = ragged.softmax {packed} : {rt}")
        em.lines.append(f"{out} = ragged.values {sm} : {rt} -> {vt}")
        return out, vt
    if target == "ragged.attention.default":
        q, k, v = (value(a) for a in args[:3])
        (o, ot) = value(args[3])
        scale, causal = float(args[4]), bool(args[5])
        rt = em.ragged_type(q[1], em.symbol(args[3].name))
        packed = []
        for name, t in (q, k, v):
            p = em.fresh()
            em.lines.append(f"{p} = ragged.pack {name} [{o}] : {t}, {ot} -> {rt}")
            packed.append(p)
        att, out = em.fresh(), em.fresh()
        attrs = f"scale = {scale:.17e} : f64" + (", causal" if causal else "")
        em.lines.append(f"{att} = ragged.attention {packed[0]}, {packed[1]}, {packed[2]} {{{attrs}}} : {rt}")
        em.lines.append(f"{out} = ragged.values {att} : {rt} -> {q[1]}")
        return out, q[1]
    raise Unsupported(f"ragged op {target}")


def _import_dense(name: str, sub: torch.fx.GraphModule) -> str:
    """torch-mlir import of a dense piece to linalg-on-tensors, as text."""
    try:
        import torch_mlir.fx as tfx
    except ImportError as e:
        raise Unsupported("torch-mlir is not installed (pip install torch-mlir==20261001)") from e
    try:
        module = tfx.stateless_fx_import(sub, output_type="linalg-on-tensors", model_name=name)
    except Exception as e:  # torch-mlir raises many kinds
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise Unsupported(f"torch-mlir could not lower {name}: {reason}") from e
    return str(module)


def compile_fx_graph(
    gm: torch.fx.GraphModule, example_inputs, options: RaggedBackendOptions, static: Sequence[int] = ()
):
    """Compiles an ATen FX graph with ragged custom ops; returns a callable
    over the same flat arguments, or raises :class:`Unsupported`. With
    ``options.freeze_parameters``, the ``static`` inputs (parameters and
    buffers) that are non-empty tensors become IREE parameters."""
    from .. import compile as ragged_compile
    from .. import ir
    from ..compiler import CompileOptions, parameter_key

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node in gm.graph.nodes:
        if node.op == "call_function" and str(node.target).startswith("ragged.") and not _is_ragged(node):
            raise Unsupported(f"ragged op {node.target} has no lowering")

    # Partition: dense nodes before the k-th ragged op go to 2k, the op itself to 2k+1.
    part, k = {}, 0
    for node in gm.graph.nodes:
        if _is_ragged(node):
            k += 1
            part[node] = 2 * k - 1
        else:
            part[node] = 2 * k
    split = split_module(gm, None, lambda n: part[n], keep_original_order=True)

    em = _Emitter()
    env: dict[str, tuple[str, str]] = {}
    arg_types = []
    for i, node in enumerate(placeholders):
        t = _tensor_type(node.meta.get("val"))
        env[node.name] = (f"%arg{i}", t)
        arg_types.append(t)

    t_start = time.perf_counter()
    dense_texts: list[str] = []
    declarations: list[str] = []
    outputs: list[tuple[str, str]] = []
    for node in split.graph.nodes:
        if node.op == "placeholder":
            continue
        if node.op == "output":
            outs = node.args[0]
            outs = outs if isinstance(outs, (tuple, list)) else (outs,)
            for o in outs:
                if not isinstance(o, torch.fx.Node):
                    raise Unsupported(f"non-tensor graph output {o!r}")
                outputs.append(env[o.name])
            continue
        if node.op == "call_module":
            sub = getattr(split, node.target)
            ragged_nodes = [n for n in sub.graph.nodes if _is_ragged(n)]
            if ragged_nodes:
                inner = {}
                for ph, a in zip(
                    [n for n in sub.graph.nodes if n.op == "placeholder"], node.args, strict=False
                ):
                    inner[ph.name] = env[a.name]
                rn = ragged_nodes[0]
                env[node.name] = _emit_ragged(em, rn, inner)
                continue
            fname = f"dense_{node.target}"
            text = _import_dense(fname, sub)
            with ir.Context():
                m = ir.Module.parse(text)
                fn = next(op for op in m.body.operations if op.operation.name == "func.func")
                ftype = fn.type
                ins = [str(t) for t in ftype.inputs]
                res = [str(t) for t in ftype.results]
            dense_texts.append(text)
            declarations.append(f"func.func private @{fname}({', '.join(ins)}) -> ({', '.join(res)})")
            call_args = []
            for a, want in zip(node.args, ins, strict=False):
                name, have = env[a.name]
                if have != want:
                    c = em.fresh()
                    if have.startswith("tensor"):
                        em.lines.append(f"{c} = tensor.cast {name} : {have} to {want}")
                    else:
                        raise Unsupported(f"argument type {have} vs {want} into {fname}")
                    name = c
                call_args.append(name)
            call = f"func.call @{fname}({', '.join(call_args)}) : ({', '.join(ins)}) -> ({', '.join(res)})"
            if not res:
                em.lines.append(call)  # a piece holding only runtime checks
                continue
            base = em.fresh()
            if len(res) > 1:
                em.lines.append(f"{base}:{len(res)} = {call}")
                results = [f"{base}#{i}" for i in range(len(res))]
            else:
                em.lines.append(f"{base} = {call}")
                results = [base]
            if len(res) == 1:
                env[node.name] = (results[0], res[0])
            else:
                env[node.name] = ("TUPLE", "")
                for user in node.users:
                    if user.op == "call_function" and user.target.__name__ == "getitem":
                        j = user.args[1]
                        env[user.name] = (results[j], res[j])
            continue
        if node.op == "call_function" and getattr(node.target, "__name__", "") == "getitem":
            continue  # bound above
        raise Unsupported(f"unexpected node {node.op} {node.target}")

    out_types = [t for _, t in outputs]
    body = "\n    ".join(em.lines)
    main = (
        f"func.func @main({', '.join(f'%arg{i}: {t}' for i, t in enumerate(arg_types))}) -> ({', '.join(out_types)}) {{\n"
        f"    {body}\n    return {', '.join(n for n, _ in outputs)} : {', '.join(out_types)}\n}}"
    )
    # One module: main plus each dense function, made private. main parses
    # against declarations, which the definitions then replace.
    with ir.Context():
        module = ir.Module.parse("\n".join(declarations) + "\n" + main)
        for op in list(module.body.operations):
            if op.operation.name == "func.func" and op.is_external:
                op.operation.erase()
        for text in dense_texts:
            m = ir.Module.parse(text)
            for op in list(m.body.operations):
                if op.operation.name == "func.func":
                    op.operation.attributes["sym_visibility"] = ir.StringAttr.get("private")
                module.body.append(op.detach_from_parent())
        text = str(module)

    t_imported = time.perf_counter()
    debug_dir = options.debug_dir or os.environ.get("RAGGED_DEBUG_DIR")
    work_dir = None
    if debug_dir:
        tag = hashlib.sha1(text.encode()).hexdigest()[:10]
        work_dir = Path(debug_dir) / f"graph-{tag}"
        work_dir.mkdir(parents=True, exist_ok=True)
        (work_dir / "fx_graph.txt").write_text(str(gm.graph))
        (work_dir / "imported.mlir").write_text("\n\n".join(dense_texts))
        (work_dir / "ragged.mlir").write_text(text)
    copts = CompileOptions(
        target=options.target,
        device=options.device,
        iree_flags=list(options.iree_flags),
        balance_tile=options.balance_tile,
        attention_buckets=options.attention_buckets,
        iree_attention=options.iree_attention,
        keep_intermediates=bool(work_dir),
        work_dir=str(work_dir) if work_dir else None,
    )
    frozen = []
    if options.freeze_parameters:
        for i in static:
            val = placeholders[i].meta.get("val") if i < len(placeholders) else None
            if (
                isinstance(val, torch.Tensor)
                and val.numel() > 0
                and arg_types[i].startswith("tensor<")
                and "?" not in arg_types[i]
            ):
                frozen.append(i)
    try:
        compiled = ragged_compile(text, options=copts, frozen={"main": frozen} if frozen else None)
    except Exception as e:
        raise Unsupported(f"compilation failed: {e}") from e
    n_out = len(outputs)
    # One bound module per set of frozen tensors (instances of one layer
    # share this graph): ids of the tensors -> (weak references to them,
    # their versions when bound, the module bound to them).
    bindings: dict[tuple[int, ...], tuple[list, list, Any]] = {}

    def version(t: torch.Tensor):
        try:
            return t._version
        except RuntimeError:  # inference tensors keep no version counter
            return None

    def module_for(args):
        tensors = [args[i] for i in frozen]
        key = tuple(id(t) for t in tensors)
        versions = [version(t) for t in tensors]
        entry = bindings.get(key)
        same = entry is not None and all(r() is t for r, t in zip(entry[0], tensors, strict=True))
        if same and None not in versions and entry[1] == versions:
            return entry[2]
        arrays = {parameter_key("main", i): args[i].detach().contiguous().numpy() for i in frozen}
        if same:
            entry[2].bind_parameters(arrays)
            module = entry[2]
        else:
            for k in [k for k, (refs, _, _) in bindings.items() if any(r() is None for r in refs)]:
                del bindings[k]
            module = compiled.with_parameters(arrays)
        bindings[key] = ([weakref.ref(t) for t in tensors], versions, module)
        return module

    skip = set(frozen)

    def run(*args):
        module = module_for(args) if frozen else compiled
        flat = []
        for i, a in enumerate(args):
            if i in skip:
                continue
            if isinstance(a, torch.Tensor):
                flat.append(a.detach().contiguous().numpy())
            elif isinstance(a, torch.SymInt) and a.node.is_nested_int():
                flat.append(0)  # NJT's ragged-size symbol: an input nothing reads
            else:
                flat.append(int(a))
        out = module.raw("main")(*flat)
        if n_out == 1:
            out = [out]
        return tuple(torch.from_numpy(np.asarray(o.to_host())) for o in out)

    run.compiled_module = compiled
    run.timings = {"import_s": t_imported - t_start, **compiled.timings}
    return run


def _key(gm: torch.fx.GraphModule, example_inputs, options) -> tuple:
    sig = tuple(
        (tuple(str(d) for d in x.shape), str(x.dtype)) if isinstance(x, torch.Tensor) else type(x).__name__
        for x in example_inputs
    )
    lowering = (
        options.balance_tile,
        options.attention_buckets,
        options.iree_attention,
        options.freeze_parameters,
    )
    return (gm.code, sig, options.target, options.device, tuple(options.iree_flags), lowering)


def _forward_compiler(options: RaggedBackendOptions):
    def fw_compiler(gm: torch.fx.GraphModule, example_inputs):
        # PyTorch NJT inputs: their pad -> op -> unpad patterns become ragged ops.
        rewrites = rewrite_njt_patterns(gm)
        if rewrites and (options.debug_dir or os.environ.get("RAGGED_DEBUG_DIR")):
            warnings.warn("ragged backend: NJT patterns rewritten: " + "; ".join(rewrites), stacklevel=2)
        key = _key(gm, example_inputs, options)
        if key in _cache:
            stats["cache_hits"] += 1
            return _cache[key]
        try:
            t0 = time.perf_counter()
            tracing = TracingContext.try_get()
            static = getattr(getattr(tracing, "fw_metadata", None), "static_input_indices", None) or ()
            fn = compile_fx_graph(gm, example_inputs, options, static)
            fn.compile_seconds = time.perf_counter() - t0
            stats["compiled"] += 1
        except Unsupported as e:
            if not options.fallback:
                raise
            stats["fallbacks"] += 1
            warnings.warn(f"ragged backend: running this graph eagerly: {e}", stacklevel=2)
            fn = gm.forward
        _cache[key] = fn
        return fn

    return fw_compiler


def ragged_backend(gm: torch.fx.GraphModule, example_inputs, options: dict | None = None) -> Callable:
    """The ``torch.compile`` backend (entry point ``torch_dynamo_backends``: ``ragged``)."""
    from torch._dynamo.backends.common import aot_autograd

    opts = RaggedBackendOptions(**(options or {}))
    return aot_autograd(fw_compiler=_forward_compiler(opts))(gm, example_inputs)
