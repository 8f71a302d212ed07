"""Lowering and IREE compilation: ``lower()`` runs the named pipeline,
``compile()`` hands the lowered text to iree-compile and returns a loaded
:class:`~.runtime.CompiledModule`. On failure a reproducer directory holds the
input IR, the pipeline string and the IREE flags, and the error names it."""

from __future__ import annotations

import shlex
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from .. import cache as artifact_cache
from ..inplace import written_arguments
from .abi import PARAMETER_SCOPE, CompileError, _check_target_types, _signatures, parameter_key
from .options import CompileOptions, Target
from .runtime import CompiledModule


def _parse(program, ctx, passthrough: Sequence[str] = ()):
    from .. import ir

    if passthrough:
        ctx.allow_unregistered_dialects = True
        module = _parse(program, ctx)
        _check_passthrough(module, passthrough)
        return module
    if isinstance(program, ir.Module):
        return ir.Module.parse(str(program), ctx)
    text = program.module_text() if hasattr(program, "module_text") else program
    if not isinstance(text, str):
        raise TypeError(
            f"program: expected MLIR text, a ragged_mlir.ir.Module or a builders.Program, got {type(program).__name__}"
        )
    return ir.Module.parse(text, ctx)


def _check_passthrough(module, passthrough: Sequence[str]) -> None:
    """Every op of an unregistered dialect belongs to ``passthrough``."""
    unknown: list[str] = []

    def visit(op):
        name = op.operation.name
        if not op.context.is_registered_operation(name) and name.split(".", 1)[0] not in passthrough:
            unknown.append(name)
        for region in op.operation.regions:
            for block in region.blocks:
                for inner in block.operations:
                    visit(inner)

    visit(module.operation)
    if unknown:
        raise CompileError(
            f"invalid input IR: unknown ops {', '.join(sorted(set(unknown)))} "
            f"(only ops of {', '.join(passthrough)} may pass through to IREE)"
        )


class _WorkDir:
    """The directory of one compile's intermediates and reproducer, made on
    first use: a compile that writes nothing leaves nothing behind."""

    def __init__(self, given: str | None):
        self._given = given
        self.made: Path | None = None

    @property
    def path(self) -> Path:
        if self.made is None:
            if self._given is None:
                self.made = Path(tempfile.mkdtemp(prefix="ragged-"))
            else:
                self.made = Path(self._given)
                self.made.mkdir(parents=True, exist_ok=True)
        return self.made


def _reproducer(
    work: _WorkDir, stage: str, ir_text: str, pipeline: str, flags: list[str], message: str
) -> Path:
    repro = work.path / "reproducer"
    repro.mkdir(parents=True, exist_ok=True)
    (repro / "input.mlir").write_text(ir_text)
    (repro / "pipeline.txt").write_text(pipeline + "\n")
    (repro / "iree_flags.txt").write_text("\n".join(flags) + "\n")
    if stage == "lower":
        replay = f"ragged-opt input.mlir --allow-unregistered-dialect --pass-pipeline='{pipeline}'"
    else:
        replay = "iree-compile input.mlir " + " ".join(shlex.quote(f) for f in flags)
    (repro / "README.txt").write_text(f"stage: {stage}\nerror:\n{message}\n\nreplay:\n  {replay}\n")
    return repro


def lower(program, *, options: CompileOptions | None = None, work_dir: str | None = None) -> str:
    """Runs ``ragged-to-iree-input`` (with ``options``' pipeline options) and
    returns the lowered MLIR text."""
    options = options or CompileOptions()
    work = _WorkDir(work_dir or options.work_dir)
    text, _ = _lower(program, work, options.pipeline, options.flags(), None, options.passthrough_dialects)
    return text


def _lower(
    program,
    work: _WorkDir,
    pipeline: str,
    flags: list[str],
    frozen: dict[str, list[int]] | None = None,
    passthrough: Sequence[str] = (),
):
    from .. import ir, passmanager

    with ir.Context() as ctx, ir.Location.unknown():
        try:
            module = _parse(program, ctx, passthrough)
        except ir.MLIRError as e:
            raise CompileError(f"invalid input IR:\n{e}") from None
        try:
            module.operation.verify()
        except ir.MLIRError as e:
            raise CompileError(f"invalid input IR:\n{e}") from None
        input_text = str(module)
        sigs = _signatures(module)
        for name, indices in (frozen or {}).items():
            sigs[name]["inputs"] = _unfrozen_inputs(sigs, name, indices)
        # The input is verified; the lowering may now emit ops for IREE that
        # this context does not know (iree_linalg_ext.attention).
        ctx.allow_unregistered_dialects = True
        pm = passmanager.PassManager.parse(pipeline)
        try:
            pm.run(module.operation)
        except ir.MLIRError as e:
            repro = _reproducer(work, "lower", input_text, pipeline, flags, str(e))
            raise CompileError(f"lowering failed (reproducer: {repro}):\n{e}", repro) from None
        for name, indices in (frozen or {}).items():
            _freeze(module, name, indices)
        for name, indices in written_arguments(module).items():
            if name in sigs:
                sigs[name]["written"] = indices
        return str(module), (input_text, sigs)


def _unfrozen_inputs(sigs: dict, name: str, indices: Sequence[int]) -> list[dict]:
    """The inputs of ``name`` that stay arguments when the lowered arguments
    ``indices`` are frozen; each must be a dense tensor input (a ragged
    input lowers to 1 + (its partitions) arguments)."""
    if name not in sigs:
        raise ValueError(f"frozen: no public function named {name!r} (have {', '.join(sigs)})")
    kept, dense, at = [], set(), 0
    for desc in sigs[name]["inputs"]:
        if desc["kind"] == "tensor":
            dense.add(at)
        if not (desc["kind"] == "tensor" and at in indices):
            kept.append(desc)
        at += 1 + len(desc["symbols"]) if desc["kind"] == "ragged" else 1
    for i in indices:
        if i not in dense:
            raise ValueError(
                f"frozen: argument {i} of {name!r} (after lowering) is not a dense tensor argument; "
                f"those are {sorted(dense)}"
            )
    return kept


def _freeze(module, name: str, indices: Sequence[int]) -> None:
    """Moves arguments ``indices`` of the lowered function ``name`` into IREE
    parameters: ``name`` becomes a wrapper that loads them from globals
    initialised by ``#flow.parameter.named`` and calls the original, now
    private. IREE then hoists what depends only on them (the data-tiled
    packing of weights) into the module's initialiser, run once per load.
    The util ops and the parameter attribute are IREE's, unregistered here:
    built by name."""
    from .. import ir
    from ..dialects import func

    # `name` is public and `indices` are dense inputs (_unfrozen_inputs).
    fn = next(op for op in module.body.operations if isinstance(op, func.FuncOp) and op.name.value == name)
    inputs = list(fn.type.inputs)
    results = list(fn.type.results)
    for i in indices:
        if not ir.RankedTensorType(inputs[i]).has_static_shape:
            raise ValueError(f"frozen: argument {i} of {name!r} must be statically shaped, got {inputs[i]}")
    impl = f"{name}__frozen_impl"
    fn.operation.attributes["sym_name"] = ir.StringAttr.get(impl)
    fn.operation.attributes["sym_visibility"] = ir.StringAttr.get("private")
    frozen = set(indices)
    with ir.InsertionPoint(module.body):
        for i in indices:
            key = parameter_key(name, i)
            ir.Operation.create(
                "util.global",
                attributes={
                    "sym_name": ir.StringAttr.get(f"__param_{name}_{i}"),
                    "sym_visibility": ir.StringAttr.get("private"),
                    "type": ir.TypeAttr.get(inputs[i]),
                    "initial_value": ir.Attribute.parse(
                        f'#flow.parameter.named<"{PARAMETER_SCOPE}"::"{key}"> : {inputs[i]}'
                    ),
                },
            )
        wrapper = func.FuncOp(name, ([t for i, t in enumerate(inputs) if i not in frozen], results))
        entry = wrapper.add_entry_block()
    with ir.InsertionPoint(entry):
        args = iter(entry.arguments)
        operands = [
            ir.Operation.create(
                "util.global.load",
                results=[t],
                attributes={"global": ir.FlatSymbolRefAttr.get(f"__param_{name}_{i}")},
            ).result
            if i in frozen
            else next(args)
            for i, t in enumerate(inputs)
        ]
        call = func.CallOp(results, ir.FlatSymbolRefAttr.get(impl), operands)
        func.ReturnOp(list(call.results))


def compile(
    program,
    target: Target | str | None = None,
    options: CompileOptions | None = None,
    *,
    frozen: dict[str, Sequence[int]] | None = None,
):
    """Compiles a ragged program for an IREE target and loads it.

    ``program`` is MLIR text, a ``ragged_mlir.ir.Module`` or a
    :class:`ragged_mlir.builders.Program`. Returns a :class:`CompiledModule`
    whose functions take :class:`RaggedArray` / numpy arguments.

    ``frozen`` maps a function to the indices of dense tensor arguments
    (after lowering) that become IREE parameters: the function no longer
    takes them, :meth:`CompiledModule.bind_parameters` supplies them, and
    IREE computes what depends only on them (such as the packed layout of a
    weight) once per binding instead of on every call.
    """
    options = options or CompileOptions()
    if target is not None:
        options = replace(options, target=target)
    work = _WorkDir(options.work_dir)
    t0 = time.perf_counter()
    frozen = {name: sorted(set(indices)) for name, indices in (frozen or {}).items() if indices}
    lowered, (input_text, sigs) = _lower(
        program, work, options.pipeline, options.flags(), frozen, options.passthrough_dialects
    )
    _check_target_types(sigs, options.target)
    flags = options.flags(lowered)
    t_lowered = time.perf_counter()
    try:
        import iree.compiler as ireec
    except ImportError as e:  # pragma: no cover - declared dependency
        raise CompileError(
            "iree-base-compiler is not installed: pip install iree-base-compiler==3.13.0"
        ) from e

    def build() -> bytes:
        try:
            return ireec.compile_str(lowered, target_backends=[options.target.value], extra_args=flags)
        except ireec.CompilerToolError as e:
            repro = _reproducer(work, "iree-compile", lowered, options.pipeline, flags, str(e))
            raise CompileError(f"iree-compile failed (reproducer: {repro}):\n{e}", repro) from None

    vmfb, hit = artifact_cache.compile_cached(
        artifact_cache.key(lowered, options.target.value, flags), build, use=options.cache
    )
    t_iree = time.perf_counter()
    if options.keep_intermediates:
        (work.path / "input.mlir").write_text(input_text)
        (work.path / "lowered.mlir").write_text(lowered)
        (work.path / "pipeline.txt").write_text(options.pipeline + "\n")
        (work.path / "iree_flags.txt").write_text("\n".join(flags) + "\n")
        (work.path / "module.vmfb").write_bytes(vmfb)
    module = CompiledModule(vmfb, sigs, options.driver, options.target.value)
    module.parameter_keys = [parameter_key(name, i) for name, indices in frozen.items() for i in indices]
    module.compile_seconds = time.perf_counter() - t0
    module.timings = {"lower_s": t_lowered - t0, "iree_compile_s": t_iree - t_lowered}
    #: Whether the artifact came from the persistent cache.
    module.cache_hit = hit
    #: Where the intermediates went (keep_intermediates), else None.
    module.work_dir = work.made
    return module
