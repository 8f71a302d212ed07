"""Every ragged op, and a whole encoder layer, compiles for IREE's GPU
targets: compile-only, no GPU needed.

For each op of ``test_dispatch_counts.OPS`` (static batch B = 64), for
``ragged.attention_grad`` and for a BERT-style encoder layer written with :mod:`ragged_mlir.builders` (Q/K/V
matmuls, head split, attention, head merge, output matmul, residual add,
layer_norm, matmul + gelu + matmul FFN, residual add, layer_norm, reduce
mean), and for each GPU target:

* ``cuda`` (``--iree-cuda-target=sm_80``; sm_90 fails in IREE 3.13, Hopper
  runs sm_80 PTX through the driver JIT),
* ``vulkan-spirv`` (``--iree-vulkan-target=ampere``, compile()'s default:
  an Int64-capable profile),
* ``metal-spirv`` (on Linux it embeds MSL source),
* ``rocm`` (``--iree-rocm-target=gfx942``),

``test_flow_dispatch_count`` lowers to IREE's flow level with that target
and asserts the number of ``flow.dispatch`` ops equals llvm-cpu's (the
ragged lowering is target-independent: a GPU must not get more launches),
and ``test_compiles`` runs the full compile and asserts a non-empty
artifact that embeds the target's executable format.

Full compiles cover every op on every target (about 90 compiles, ~1.5 min
on 2 cores); the lowered text is computed once per op and shared by every
target.

The flags are compile()'s defaults for each target. IREE's own default
Vulkan profile (``vp_android_baseline_2022``) has no Int64 capability, and
the ops whose kernels compute with the i64 offsets inside a vector op fail
SPIR-V conversion there: ``test_baseline_vulkan_profile_lacks_int64`` pins
that, which is why compile() picks an Int64-capable profile.

The last section checks what a user sees with a GPU artifact on a machine
without that GPU: ``ragged_mlir.compile`` compiles (and can save) it, and the
first call fails with a RuntimeError that names the missing driver and
IREE's reason.
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

import pytest
from test_dispatch_counts import OPS  # test/e2e is on sys.path under pytest

import ragged_mlir

iree_compiler = pytest.importorskip("iree.compiler")
iree_runtime = pytest.importorskip("iree.runtime")

BATCH = 64

#: target name -> (backend, flags, executable format embedded in the vmfb)
TARGETS = {
    t: (t, ragged_mlir.CompileOptions(target=t).flags(), fmt)
    for t, fmt in [
        ("cuda", b"cuda-nvptx-fb"),
        ("vulkan-spirv", b"vulkan-spirv-fb"),
        ("metal-spirv", b"metal-msl-fb"),
        ("rocm", b"rocm-hsaco-fb"),
    ]
}
CPU_FLAGS = ["--iree-llvmcpu-target-cpu=host"]

# The two ways the default Vulkan target (no Int64 capability) fails, as
# IREE 3.13 prints them (after the `<stdin>:line:col: ` prefix).
_VK_BROADCAST = (
    "error: failed to legalize operation 'vector.broadcast' that was explicitly marked illegal: "
    '%14 = "vector.broadcast"(%13) : (i64) -> vector<1xi64>'
)
_VK_MATERIALIZE = (
    "error: failed to legalize unresolved target materialization from ('i64') to ('vector<2xi32>') "
    "that remained live after conversion (no matching callback)"
)
#: (target, case) -> the first IREE error line of a full compile.
KNOWN_FAILURES: dict = {
    # The bucket schedule's key-length table: a reduction over [n, S] that
    # IREE's HIP codegen fails to distribute once the table's gathers are
    # fused into it (CUDA compiles it since the reduction's domain is i64).
    ("rocm", "attention_grad"): "error: 'func.func' op failed to distribute",
}


# --------------------------------------------------------------------------
# The programs: one function per op, and an encoder layer from the builders
# --------------------------------------------------------------------------


def op_text(name: str, batch: int = BATCH) -> str:
    args, result, body = OPS[name]
    fmt = lambda s: s.replace("{{B}}", "{B}").replace("{B}", str(batch))  # noqa: E731
    return (
        f"func.func @{name}({fmt(args)}) -> {fmt(result)} {{\n"
        f"  {fmt(body)}\n  return %r : {fmt(result)}\n}}\n"
    )


def encoder_layer_text(batch=BATCH, d: int = 64, heads: int = 4, ff: int = 128, dtype: str = "f32") -> str:
    """A post-LN BERT encoder layer built with ragged_mlir.builders: the one
    the GPU check runs (bench/gpu/cases.py)."""
    sys.path[:0] = [str(Path(__file__).resolve().parents[2] / d) for d in ("bench/gpu", "bench")]
    from cases import encoder_program

    return encoder_program(d=d, heads=heads, ff=ff, dtype=dtype, batch=batch).module_text()


def attention_grad_text() -> str:
    """``ragged.attention_grad`` as the GPU check runs it (bench/gpu/cases.py)."""
    sys.path[:0] = [str(Path(__file__).resolve().parents[2] / d) for d in ("bench/gpu", "bench")]
    from cases import attention_grad_text as text

    return text("attention_grad", "f32", causal=False)


CASES = sorted(OPS) + ["encoder_layer", "attention_grad"]
TEXTS = {"encoder_layer": encoder_layer_text, "attention_grad": attention_grad_text}


@functools.cache
def lowered(case: str) -> str:
    """The IREE input of a case, lowered once with the GPU targets' pipeline
    options (the same for all four) and shared by every target."""
    text = TEXTS[case]() if case in TEXTS else op_text(case)
    return ragged_mlir.lower(text, options=ragged_mlir.CompileOptions(target="cuda"))


def _count(flow) -> int:
    flow = flow.decode() if isinstance(flow, bytes) else flow
    return len(re.findall(r"flow\.dispatch @", flow))


@functools.cache
def flow_dispatches(case: str, backend: str, flags: tuple) -> int:
    flow = iree_compiler.compile_str(
        lowered(case), target_backends=[backend], extra_args=["--compile-to=flow", *flags]
    )
    return _count(flow)


def _params(cases, targets, known=None):
    out = []
    for target in targets:
        for case in cases:
            marks = []
            if known and (target, case) in known:
                reason = known[(target, case)]
                marks = [
                    pytest.mark.xfail(strict=True, raises=iree_compiler.CompilerToolError, reason=reason)
                ]
            out.append(pytest.param(target, case, id=f"{target}-{case}", marks=marks))
    return out


# --------------------------------------------------------------------------
# Flow-level dispatch counts and full compiles
# --------------------------------------------------------------------------


@pytest.mark.parametrize("target,case", _params(CASES, TARGETS))
def test_flow_dispatch_count(target, case):
    backend, flags, _ = TARGETS[target]
    cpu = flow_dispatches(case, "llvm-cpu", tuple(CPU_FLAGS))
    gpu = flow_dispatches(case, backend, tuple(flags))
    assert cpu >= 1
    assert gpu == cpu, f"{case}: {gpu} flow dispatches for {target}, {cpu} for llvm-cpu"


def _full_compile(case: str, backend: str, flags: list[str], fmt: bytes) -> bytes:
    try:
        vmfb = iree_compiler.compile_str(lowered(case), target_backends=[backend], extra_args=flags)
    except iree_compiler.CompilerToolError as e:
        # Keep the failure readable in the report: IREE's first error line.
        e.add_note(f"{case} for {backend}: {first_error(e)}")
        raise
    assert isinstance(vmfb, bytes) and len(vmfb) > 0, f"{case}: empty artifact for {backend}"
    assert vmfb[:2] == b"PK", f"{case}: the {backend} artifact is not a vmfb archive"
    assert fmt in vmfb, f"{case}: the {backend} artifact has no {fmt.decode()} executable"
    return vmfb


def first_error(e: Exception) -> str:
    """IREE's first diagnostic line, without its `<stdin>:line:col: ` prefix."""
    line = next((line for line in str(e).splitlines() if "error:" in line), "")
    return line[line.index("error:") :] if line else ""


@pytest.mark.parametrize("target,case", _params(CASES, TARGETS, KNOWN_FAILURES))
def test_compiles(target, case):
    backend, flags, fmt = TARGETS[target]
    try:
        _full_compile(case, backend, flags, fmt)
    except iree_compiler.CompilerToolError as e:
        known = KNOWN_FAILURES.get((target, case))
        # A known failure must fail the known way: another error is a FAIL.
        assert known is None or known in first_error(e), f"expected {known!r}, got {first_error(e)!r}"
        raise


@pytest.mark.parametrize("case,error", [("from_padded", _VK_MATERIALIZE), ("attention", _VK_BROADCAST)])
def test_baseline_vulkan_profile_lacks_int64(case, error):
    """Why compile() passes an Int64-capable Vulkan profile: IREE's default
    one cannot convert the i64 offset arithmetic to SPIR-V."""
    with pytest.raises(iree_compiler.CompilerToolError) as info:
        iree_compiler.compile_str(lowered(case), target_backends=["vulkan-spirv"])
    assert error in str(info.value)


@pytest.mark.parametrize("dtype", ["f16"])
def test_encoder_layer_f16_compiles_for_cuda(dtype):
    """f16 ragged IR compiles for cuda, with llvm-cpu's dispatch count."""
    low = ragged_mlir.lower(
        encoder_layer_text(batch=None, dtype=dtype), options=ragged_mlir.CompileOptions(target="cuda")
    )
    cuda = ["--iree-cuda-target=sm_80"]
    flow = lambda backend, flags: iree_compiler.compile_str(  # noqa: E731
        low, target_backends=[backend], extra_args=["--compile-to=flow", *flags]
    )
    assert _count(flow("cuda", cuda)) == _count(flow("llvm-cpu", CPU_FLAGS))
    vmfb = iree_compiler.compile_str(low, target_backends=["cuda"], extra_args=cuda)
    assert b"cuda-nvptx-fb" in vmfb


# --------------------------------------------------------------------------
# Loading a GPU artifact where the GPU (or its driver library) is missing
# --------------------------------------------------------------------------

SMALL = (
    "func.func @f(%x: !ragged.tensor<?, [L], 8, f32>) -> tensor<?x8xf32> {\n"
    "  %r = ragged.reduce <sum> %x : !ragged.tensor<?, [L], 8, f32> -> tensor<?x8xf32>\n"
    "  return %r : tensor<?x8xf32>\n}\n"
)

#: target -> the runtime driver CompileOptions picks by default.
DEFAULT_DRIVERS = {"cuda": "cuda", "vulkan-spirv": "vulkan", "metal-spirv": "metal", "rocm": "hip"}


def _has_device(driver: str) -> bool:
    try:
        return bool(iree_runtime.get_driver(driver).query_available_devices())
    except (RuntimeError, ValueError):  # the driver library is missing
        return False


def _skip_if_present(driver: str) -> None:
    if _has_device(driver):
        pytest.skip(f"this machine has a {driver} device: the load succeeds")


@pytest.mark.parametrize("target", sorted(DEFAULT_DRIVERS))
def test_missing_driver_default_options(target, tmp_path):
    """compile(target=...) compiles and saves without the GPU; the first call
    fails with a RuntimeError naming the driver and the runtime's drivers."""
    driver = DEFAULT_DRIVERS[target]
    _skip_if_present(driver)
    assert ragged_mlir.CompileOptions(target=target).driver == driver
    module = ragged_mlir.compile(SMALL, target=target)
    assert module.save(tmp_path / "m.vmfb").stat().st_size > 0
    with pytest.raises(RuntimeError) as info:
        _ = module.f
    msg = str(info.value)
    assert f"IREE driver {driver!r} cannot open a device on this machine" in msg, msg
    listed = re.search(r"Drivers in this runtime: ([^.]*)\.", msg)
    assert listed, msg
    assert set(listed.group(1).split(", ")) == set(iree_runtime.query_available_drivers()), msg


def test_missing_driver_names_the_cause():
    """IREE's reason (the missing driver library) is part of the message."""
    _skip_if_present("cuda")
    with pytest.raises(RuntimeError) as info:
        _ = ragged_mlir.compile(SMALL, target="cuda").f
    assert "libcuda" in str(info.value), str(info.value)


def test_unknown_driver_name():
    options = ragged_mlir.CompileOptions(target="llvm-cpu", device="no-such-driver")
    with pytest.raises(
        ValueError,
        match=r"a 'llvm-cpu' artifact runs on 'local-task' or 'local-sync', not on 'no-such-driver'",
    ):
        ragged_mlir.compile(SMALL, options=options)


def test_cuda_artifact_on_cpu_device():
    """A cuda artifact cannot run on the CPU device: said before loading."""
    with pytest.raises(ValueError, match=r"device: a 'cuda' artifact runs on 'cuda', not on 'local-task'"):
        ragged_mlir.compile(SMALL, options=ragged_mlir.CompileOptions(target="cuda", device="local-task"))
