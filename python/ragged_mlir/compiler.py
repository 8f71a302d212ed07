"""``compile()``: ragged MLIR -> IREE artifact -> a Python callable.

The pipeline is the named C++ pipeline ``ragged-to-iree-input``; Python only
calls it by name, so ``ragged-opt --pass-pipeline=...`` replays any compile.
On failure a reproducer directory holds the input IR, the pipeline string and
the IREE flags, and the error names it.
"""

from __future__ import annotations

import atexit
import enum
import functools
import json
import os
import shlex
import tempfile
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .array import RaggedArray, _rows, check_offsets
from .host_memory import heap_in_use, warm_calls
from .inplace import written_arguments

__all__ = [
    "CompileError",
    "CompileOptions",
    "CompiledFunction",
    "CompiledModule",
    "BALANCE_TILE",
    "CPU_TARGETS",
    "CpuTarget",
    "PIPELINE",
    "Target",
    "compile",
    "load",
    "lower",
]

#: The textual pass pipeline of a CPU compile (replayable with ragged-opt).
PIPELINE = "builtin.module(ragged-to-iree-input)"

#: Rows per tile of segment reductions and softmax (the pipeline's default, on
#: every target): each tile's rows are read with contiguous vector loads, and
#: one long item and many short ones give equal units of work.
BALANCE_TILE = 16
#: The largest tile: its rows are unrolled in the kernel (kMaxBalanceTile in
#: passes/Passes.h, which the pass checks too).
_MAX_BALANCE_TILE = 64
#: Length buckets of attention on CPU targets (the pipeline's default),
#: sqrt(2) apart: the smallest holds items of up to max L / 181, so one long
#: item does not pad the short ones towards it. At most _MAX_ATTENTION_BUCKETS
#: (kMaxAttentionBuckets in passes/Passes.h: IREE's CPU limit of 64 scalars
#: per dispatch).
ATTENTION_BUCKETS = 16
_MAX_ATTENTION_BUCKETS = 24
#: With ``iree_attention``: the largest static bucket (rows) whose attention
#: scores are materialised, as two data-tiled contractions with the softmax
#: between them, rather than computed by IREE's fused kernel
#: (kDefaultScoresMaxRows in passes/Passes.h). 0: the fused kernel everywhere,
#: which keeps cold compiles short.
ATTENTION_SCORES_MAX_ROWS = 0


class Target(enum.StrEnum):
    """IREE target backends; the strings are accepted too."""

    LLVM_CPU = "llvm-cpu"
    CUDA = "cuda"
    VULKAN_SPIRV = "vulkan-spirv"
    METAL_SPIRV = "metal-spirv"
    ROCM = "rocm"


_DEFAULT_DEVICE = {
    Target.LLVM_CPU: "local-task",
    Target.CUDA: "cuda",
    Target.VULKAN_SPIRV: "vulkan",
    Target.METAL_SPIRV: "metal",
    Target.ROCM: "hip",
}

_DATA_TILING = "--iree-opt-data-tiling"
_HOST_CPU = "--iree-llvmcpu-target-cpu=host"
#: The module attribute of a lowering that must not be data-tiled.
_NO_DATA_TILING = "ragged.no_data_tiling"

#: IREE demotes f64 to f32 by default, in the function signatures too, so
#: the runtime then refuses the caller's f64 buffers: f64 is computed in f64
#: where the target has it.
_KEEP_F64 = "--iree-input-demote-f64-to-f32=false"

_DEFAULT_FLAGS = {
    # Data tiling packs GEMM operands into the CPU's tile layout: the dense
    # projections of an encoder run ~2x faster with it (189 against 83
    # GFLOP/s on [1478, 384] x [384, 1536], torch's addmm 178).
    Target.LLVM_CPU: [_HOST_CPU, _DATA_TILING, _KEEP_F64],
    Target.CUDA: ["--iree-cuda-target=sm_80", _KEEP_F64],
    # IREE's default Vulkan profile has no Int64, which ragged kernels use
    # for offsets; desktop GPUs have it.
    Target.VULKAN_SPIRV: ["--iree-vulkan-target=ampere"],
    Target.METAL_SPIRV: [],
    Target.ROCM: ["--iree-rocm-target=gfx942", _KEEP_F64],
}

#: IREE vectorizes a dynamic extent with masked loads and stores by default.
#: On x86 without AVX-512 those are vmaskmovps, which made an exp over
#: [22805, 384] f32 take 30 ms against 6.4 ms with the remainder peeled
#: into its own loop (AMD EPYC, AVX2, 2 threads); all-MiniLM-L6-v2 runs
#: 1.0x (MNLI) to 1.14x (RACE lengths) faster end to end.
_VECTOR_STRATEGY = "--iree-llvmcpu-vector-pproc-strategy"
_PEEL = f"{_VECTOR_STRATEGY}=peel"

#: Native vector bytes on AVX-512: the pipeline's default ``cpu-vector-bytes``.
_AVX512_VECTOR_BYTES = 64
#: Flags that name the CPU target instead of the host.
_CPU_TARGET_FLAGS = {
    "--iree-llvmcpu-target-cpu",
    "--iree-llvmcpu-target-cpu-features",
    "--iree-llvmcpu-target-triple",
}
_TARGET_CPU = "--iree-llvmcpu-target-cpu"
_TARGET_TRIPLE = "--iree-llvmcpu-target-triple"


@dataclass(frozen=True)
class CpuTarget:
    """The facts about a CPU that a CPU compile's target-dependent choices
    follow, so that a compile for a named CPU (``CompileOptions.cpu``) makes
    the choices a host of that kind makes, and what passes for it here
    passes there.

    name: the LLVM CPU name (``--iree-llvmcpu-target-cpu``).
    triple: the LLVM target triple (``--iree-llvmcpu-target-triple``), so
        that the artifact is the same whatever the compiling host is;
        empty for the host's own.
    x86: an x86-64 CPU.
    avx512: x86 with AVX-512 (``avx512f``). There IREE 3.13 vectorises its
        fused attention well (with AVX2 only it is 2.7-4.8x slower than the
        linalg buckets) and masked vector loads and stores are fast (with
        AVX2 only they are ``vmaskmovps``, so remainders are peeled).
    vector_bytes: the native vector size IREE derives for the CPU (its
        ``native_vector_size``): IREE's CPU codegen rejects a vector of more
        than 256 of them, which bounds the tiles ``cpu-tiles`` sets.
    sve: aarch64 with SVE. IREE 3.13 vectorises for NEON's fixed 16 bytes
        all the same (scalable vectors only with
        ``--iree-llvmcpu-enable-scalable-vectorization``), but with SVE
        among the features it also tries to prove masks all-true, and on
        the loops its default peeling leaves in the linalg buckets'
        attention contractions (dynamic lengths, two batch dims) that runs
        out of memory ("LLVM ERROR: out of memory", in
        ``eliminateVectorMasks``). So SVE CPUs mask remainders, which
        LLVM lowers to SVE predicated loads and stores.
    amx: Intel AMX tile units; a fact only: no choice depends on it, so
        the choices are AVX-512's.
    summary: what the CPU is, for error messages and docs.
    """

    name: str
    triple: str
    x86: bool
    avx512: bool
    vector_bytes: int
    sve: bool = False
    amx: bool = False
    summary: str = ""

    @property
    def fused_attention(self) -> bool:
        """Whether ``iree_attention=None`` picks IREE's fused attention."""
        return self.avx512

    @property
    def vector_strategy(self) -> str | None:
        """IREE's ``--iree-llvmcpu-vector-pproc-strategy`` for the
        remainders of dynamic extents, where its default does not suit:
        ``peel`` on x86 without AVX-512, ``mask`` with SVE."""
        if self.x86 and not self.avx512:
            return "peel"
        return "mask" if self.sve else None

    def flags(self) -> list[str]:
        """The iree-compile flags that name this CPU."""
        return [f"{_TARGET_CPU}={self.name}"] + ([f"{_TARGET_TRIPLE}={self.triple}"] if self.triple else [])


_X86_TRIPLE = "x86_64-unknown-linux-gnu"
_AARCH64_TRIPLE = "aarch64-unknown-linux-gnu"

#: The CPUs ``CompileOptions(cpu=...)`` knows, by LLVM name. Each is
#: compiled by test/e2e/test_cpu_targets.py (compile-only), and its
#: ``vector_bytes`` is the ``native_vector_size`` IREE 3.13 derives for it.
CPU_TARGETS: dict[str, CpuTarget] = {
    t.name: t
    for t in (
        CpuTarget(
            "haswell", _X86_TRIPLE, x86=True, avx512=False, vector_bytes=32, summary="x86-64 with AVX2"
        ),
        CpuTarget(
            "skylake-avx512", _X86_TRIPLE, x86=True, avx512=True, vector_bytes=64, summary="Intel AVX-512"
        ),
        CpuTarget(
            "sapphirerapids",
            _X86_TRIPLE,
            x86=True,
            avx512=True,
            vector_bytes=64,
            amx=True,
            summary="Intel AVX-512 with AMX",
        ),
        CpuTarget("znver4", _X86_TRIPLE, x86=True, avx512=True, vector_bytes=64, summary="AMD AVX-512"),
        CpuTarget(
            "neoverse-v1",
            _AARCH64_TRIPLE,
            x86=False,
            avx512=False,
            vector_bytes=16,
            sve=True,
            summary="Arm aarch64 with NEON and SVE (AWS Graviton3)",
        ),
    )
}

#: Targets without f64: SPIR-V's GLSL functions (exp, tanh, ...) take 16
#: and 32-bit floats only, and Metal has no f64 buffers.
_NO_F64 = {Target.VULKAN_SPIRV: "SPIR-V's GLSL functions", Target.METAL_SPIRV: "Metal"}


@dataclass
class CompileOptions:
    """Options of :func:`compile`.

    target: IREE backend (a :class:`Target` or its string). Defaults per
        target: CPU ``--iree-llvmcpu-target-cpu=host`` (or the CPU ``cpu``
        names) and ``--iree-opt-data-tiling`` (plus
        ``--iree-llvmcpu-vector-pproc-strategy=peel`` on x86 CPUs without
        AVX-512, where masked vector loads and stores are slow); CUDA ``sm_80`` PTX (IREE 3.13 cannot
        target sm_90; Hopper runs sm_80 PTX through the driver); Vulkan ``ampere`` (an Int64-capable profile: pass
        ``--iree-vulkan-target=rdna3`` etc. in ``iree_flags`` for others);
        ROCm ``gfx942``. CPU, CUDA and ROCm compute f64 in f64
        (``--iree-input-demote-f64-to-f32=false``); Vulkan and Metal have no
        f64, and :func:`compile` refuses programs that take or return it.
    cpu: the CPU a CPU compile is for, by LLVM name; None (or ``"host"``)
        is this machine's. Every target-dependent choice follows it as it
        would on a host of that kind, so a compile for a user's CPU can be
        checked from here: the iree-compile flags
        (``--iree-llvmcpu-target-cpu`` and ``--iree-llvmcpu-target-triple``,
        so data tiling takes that CPU's GEMM tile layout), the peeled
        vector remainders, the fused attention or the linalg buckets
        (``iree_attention=None``) and the attention tiles' native vector
        size (the pipeline's ``cpu-vector-bytes``). The known CPUs are
        :data:`CPU_TARGETS` (``haswell``, ``skylake-avx512``,
        ``sapphirerapids``, ``znver4``, ``neoverse-v1``); another name is
        a ValueError unless ``iree_flags`` name the target too
        (``--iree-llvmcpu-target-triple``, ``-cpu`` or ``-cpu-features``):
        then the compile passes ``--iree-llvmcpu-target-cpu=<cpu>`` and
        chooses as for a CPU named in the flags (below), since its facts
        are unknown. ``iree_flags`` and explicit options still win over
        the CPU's defaults; an ``--iree-llvmcpu-target-cpu`` in
        ``iree_flags`` that names another CPU is a ValueError. With
        ``cpu`` None and a target CPU in ``iree_flags``, the attention
        tiles take the smallest vector of IREE's CPU targets (NEON's 16
        bytes), legal on all of them, and the rest follows the host. Only
        for ``llvm-cpu``.
    device: IREE runtime driver; None picks the target's default
        (``local-task`` for CPU).
    iree_flags: extra ``iree-compile`` flags, appended after the defaults; a
        flag whose name is already among the defaults overrides it. With
        data tiling on, contractions that sum over a dynamic extent (weight
        gradients) run as GEMMs over static chunks of 256 rows, which IREE
        packs; with it off they stay whole.
    balance_tile: rows per tile of segment reductions and softmax, 0 to 64;
        0 loops over each segment's rows in one work unit per segment. None
        picks ``BALANCE_TILE``.
    attention_buckets: attention runs as dense linalg per length bucket
        (sizes maxL / sqrt(2)^k; at most sqrt(2)x padding per item but in the
        shortest bucket), which vectorises; 0 computes exactly sum L(b)^2
        scores in segment loops; at most 24. None picks
        ``ATTENTION_BUCKETS`` (16) on CPU and 0 on GPU targets.
    iree_attention: f32 attention with static heads and head size runs as
        IREE's fused ``iree_linalg_ext.attention`` (online softmax, no score
        blocks) on a static ladder of length buckets, 16 to 1024 rows 1.5x
        apart; other attentions follow ``attention_buckets``. None picks it
        for CPUs with AVX-512 (the host's, or ``cpu``'s; IREE 3.13
        vectorises it well there) and the linalg buckets on other CPUs
        (with AVX2 only, the fused op is 2.7x slower at MNLI and 4.8x at
        SQuAD v2 lengths); GPU targets keep the exact lowering.
    attention_scores_max_rows: with ``iree_attention``, buckets of 32 up to
        this many rows (with more than one head) materialise their scores
        and run as two data-tiled contractions where the bucket's n H S^2
        scores take at most 32 MiB (larger buckets run the fused kernel):
        with 256, attention alone ran about 2x faster on few items per
        bucket (SQuAD v2 lengths B 8, MNLI lengths B 32), a whole layer
        1.03-1.08x, for 50-75% more IREE compile time (both kernels are
        compiled for each of those rungs). 0 runs the fused kernel on every
        bucket. None picks ``ATTENTION_SCORES_MAX_ROWS`` (0).
    keep_intermediates: keep the input, lowered IR and flags in ``work_dir``.
    work_dir: where intermediates and reproducers go (default: a fresh
        temporary directory, made only when a compile writes one of them).
    passthrough_dialects: dialects whose ops the input may hold in generic
        form, unknown to ragged-mlir and left for IREE to lower (the torch
        backend passes torch-mlir's ``tm_tensor``); any other unknown op is
        an error.
    """

    target: Target | str = Target.LLVM_CPU
    device: str | None = None
    iree_flags: Sequence[str] = field(default_factory=list)
    balance_tile: int | None = None
    attention_buckets: int | None = None
    iree_attention: bool | None = None
    attention_scores_max_rows: int | None = None
    keep_intermediates: bool = False
    work_dir: str | None = None
    passthrough_dialects: Sequence[str] = ()
    # Last, so that positional arguments keep their meaning.
    cpu: str | None = None

    def __post_init__(self) -> None:
        try:
            self.target = Target(self.target)
        except ValueError:
            raise ValueError(
                f"target: expected one of {[t.value for t in Target]}, got {self.target!r}"
            ) from None
        if isinstance(self.iree_flags, str):
            raise TypeError("iree_flags: expected a list of flags, got a string")
        self.iree_flags = list(self.iree_flags)
        self._check_cpu()

    def _check_cpu(self) -> None:
        """Checks ``cpu`` against the target and the flags (``"host"`` is None)."""
        if self.cpu is None:
            return
        if not isinstance(self.cpu, str):
            raise TypeError(f"cpu: expected an LLVM CPU name (str) or None, got {type(self.cpu).__name__}")
        if self.cpu == "host":
            self.cpu = None
            return
        if self.target != Target.LLVM_CPU:
            raise ValueError(
                f"cpu: names the CPU of an llvm-cpu compile, got cpu={self.cpu!r} "
                f"with target {self.target.value!r}"
            )
        named = [f for f in self.iree_flags if f.split("=", 1)[0] == _TARGET_CPU]
        if any(f != f"{_TARGET_CPU}={self.cpu}" for f in named):
            raise ValueError(
                f"cpu: {self.cpu!r} and iree_flags' {', '.join(named)} name different CPUs; name it once"
            )
        if self.cpu not in CPU_TARGETS and not self._flags_name_cpu():
            known = ", ".join(f"{n!r} ({t.summary})" for n, t in CPU_TARGETS.items())
            raise ValueError(
                f"cpu: unknown CPU {self.cpu!r}; expected None (the host) or one of {known}, "
                f"or the CPU's own flags ({', '.join(sorted(_CPU_TARGET_FLAGS))}) in iree_flags too"
            )

    def _flags_name_cpu(self) -> bool:
        """Whether the user's flags name a CPU target other than the host."""
        return any(f.split("=", 1)[0] in _CPU_TARGET_FLAGS and f != _HOST_CPU for f in self.iree_flags)

    def _cpu_target(self) -> CpuTarget:
        """The CPU whose facts make the target-dependent choices: ``cpu``'s
        entry in :data:`CPU_TARGETS`, else the host's (``cpu`` None, or an
        unknown ``cpu`` given with the user's own flags: its facts are
        unknown, and the choices stay those of a CPU named in the flags)."""
        if self.cpu in CPU_TARGETS:
            return CPU_TARGETS[self.cpu]
        x86, avx512 = _host_is_x86(), _host_has_avx512()
        vector_bytes = _AVX512_VECTOR_BYTES if avx512 else 32 if x86 else 16
        sve = not x86 and _host_has_sve()
        return CpuTarget("host", "", x86=x86, avx512=avx512, vector_bytes=vector_bytes, sve=sve)

    def flags(self, lowered: str | None = None) -> list[str]:
        """The iree-compile flags; with the ``lowered`` IR, the defaults drop
        data tiling where the pipeline's ``ragged-hint-data-tiling`` marked
        the module ``ragged.no_data_tiling``: IREE 3.13 miscompiles a
        contraction whose reduction extent is dynamic ('affine.delinearize_index'
        op no basis element may be statically non-positive), and that module
        has one that no hint keeps data tiling off."""
        user = {f.split("=", 1)[0] for f in self.iree_flags}
        defaults = list(_DEFAULT_FLAGS[self.target])
        if self.target == Target.LLVM_CPU:
            cpu = self._cpu_target()
            if self.cpu is not None:
                named = cpu.flags() if self.cpu in CPU_TARGETS else [f"{_TARGET_CPU}={self.cpu}"]
                defaults = named + [f for f in defaults if f != _HOST_CPU]
            if cpu.vector_strategy:
                defaults.append(f"{_VECTOR_STRATEGY}={cpu.vector_strategy}")
        defaults = [f for f in defaults if f.split("=", 1)[0] not in user]
        if lowered is not None and _NO_DATA_TILING in lowered:
            defaults = [f for f in defaults if f != _DATA_TILING]
        return defaults + list(self.iree_flags)

    def _native_vector_bytes(self) -> int:
        """The CPU target's native vector size in bytes, as IREE's
        ``native_vector_size``: IREE's CPU codegen rejects a vector of more
        than 256 of them, which bounds the tiles ``cpu-tiles`` sets. A
        known ``cpu``'s, else the host's, unless the flags (or an unknown
        ``cpu``) name another CPU, triple or features; then the smallest of
        IREE's CPU targets (NEON's 16), which is legal on all of them."""
        if self.cpu in CPU_TARGETS:
            return CPU_TARGETS[self.cpu].vector_bytes
        if self.cpu is not None or self._flags_name_cpu():
            return 16
        return self._cpu_target().vector_bytes

    @property
    def driver(self) -> str:
        return self.device or _DEFAULT_DEVICE[self.target]

    @property
    def _data_tiling(self) -> bool:
        """Whether the flags ask IREE to data-tile contractions."""
        return any(f == _DATA_TILING or f == f"{_DATA_TILING}=true" for f in self.flags())

    @property
    def pipeline(self) -> str:
        """The named pipeline with this compile's options, as ragged-opt takes it."""
        cpu = self.target == Target.LLVM_CPU
        tile = self.balance_tile if self.balance_tile is not None else BALANCE_TILE
        buckets = self.attention_buckets
        if buckets is None:
            buckets = ATTENTION_BUCKETS if cpu else 0
        if not 0 <= tile <= _MAX_BALANCE_TILE:
            raise ValueError(f"balance_tile: expected 0 to {_MAX_BALANCE_TILE} or None, got {tile}")
        if not 0 <= buckets <= _MAX_ATTENTION_BUCKETS:
            raise ValueError(
                f"attention_buckets: expected 0 to {_MAX_ATTENTION_BUCKETS} or None, got {buckets}"
            )
        options = []
        if tile != BALANCE_TILE:  # the pipeline's default
            options.append(f"balance-tile={tile}")
        if buckets != ATTENTION_BUCKETS:  # the pipeline's default
            options.append(f"attention-buckets={buckets}")
        if not self._data_tiling:
            # Chunked weight gradients pay only where IREE packs them.
            options.append("contraction-chunk=0")  # the pipeline's default is 256
        fused = self.iree_attention
        if fused is None:
            fused = cpu and self._cpu_target().fused_attention
        if not fused:
            options.append("iree-attention=0")  # the pipeline's default is 1
        if not cpu:
            options.append("cpu-tiles=0")  # IREE CPU tile sizes; the pipeline's default is 1
        else:
            if _PEEL in self.flags():
                options.append("peel-remainders=1")  # as IREE's own vectorisation for this CPU
            vector_bytes = self._native_vector_bytes()
            if vector_bytes != _AVX512_VECTOR_BYTES:  # the pipeline's default
                options.append(f"cpu-vector-bytes={vector_bytes}")
        scores = self.attention_scores_max_rows
        if scores is not None:
            if isinstance(scores, bool) or not isinstance(scores, int) or scores < 0:
                raise ValueError(f"attention_scores_max_rows: expected an int >= 0 or None, got {scores!r}")
            if scores != ATTENTION_SCORES_MAX_ROWS:  # the pipeline's default
                options.append(f"attention-scores-max-rows={scores}")
        return PIPELINE if not options else f"builtin.module(ragged-to-iree-input{{{' '.join(options)}}})"


class CompileError(RuntimeError):
    """A compile failed; ``reproducer`` is the directory replaying it."""

    def __init__(self, message: str, reproducer: Path | None = None):
        super().__init__(message)
        self.reproducer = reproducer


# --------------------------------------------------------------------------
# Signatures: what a compiled function takes and returns, in plain Python.
# --------------------------------------------------------------------------

_NP_DTYPES = {
    "bf16": None,  # ml_dtypes.bfloat16, imported on first use
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "i1": np.bool_,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
}


def _host_is_x86() -> bool:
    import platform

    return platform.machine().lower() in ("x86_64", "amd64")


@functools.cache
def _host_cpu_flags() -> frozenset[str]:
    """The x86 host's CPU feature flags from /proc/cpuinfo (empty elsewhere
    or where it cannot be read)."""
    if not _host_is_x86():
        return frozenset()
    return _cpuinfo_features("flags")


@functools.cache
def _cpuinfo_features(key: str) -> frozenset[str]:
    """The words of the first ``key`` line of /proc/cpuinfo (x86's
    ``flags``, aarch64's ``Features``); empty where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.split(":", 1)[0].strip() == key:
                    return frozenset(line.split(":", 1)[-1].split())
    except OSError:
        pass
    return frozenset()


def _host_has_avx512() -> bool:
    """Whether this x86 host has AVX-512 (CPU compiles target the host)."""
    return "avx512f" in _host_cpu_flags()


def _host_has_sve() -> bool:
    """Whether this aarch64 host has SVE (see ``CpuTarget.sve``)."""
    import platform

    return platform.machine().lower() in ("aarch64", "arm64") and "sve" in _cpuinfo_features("Features")


def _describe(ty) -> dict:
    from .dialects import ragged
    from .ir import FloatType, IntegerType, RankedTensorType

    if ragged.RaggedTensorType.isinstance(ty):
        rt = ragged.RaggedTensorType(ty)
        dims = []
        for d in rt.dims:
            dims.append({"symbol": d.symbol, "parent": d.parent} if isinstance(d, ragged.Ragged) else d)
        return {
            "kind": "ragged",
            "type": str(ty),
            "batch": rt.batch_size,
            "dims": dims,
            "element": str(rt.element_type),
            "symbols": rt.distinct_symbols,
        }
    if isinstance(ty, RankedTensorType):
        t = ty
        shape = [None if t.is_dynamic_dim(i) else t.shape[i] for i in range(t.rank)]
        return {"kind": "tensor", "type": str(ty), "shape": shape, "element": str(t.element_type)}
    if isinstance(ty, (IntegerType, FloatType)):
        return {"kind": "scalar", "type": str(ty), "element": str(ty)}
    raise CompileError(f"unsupported function boundary type {ty}: use tensors, ragged tensors or scalars")


def _np_dtype(element: str):
    if element not in _NP_DTYPES:
        raise CompileError(f"element type {element} has no numpy counterpart at the function boundary")
    if element == "bf16":
        # numpy has no bfloat16; ml_dtypes (which iree-base-runtime
        # depends on) registers one that IREE's runtime exchanges.
        import ml_dtypes

        return ml_dtypes.bfloat16
    return _NP_DTYPES[element]


def _check_target_types(sigs: dict, target: Target) -> None:
    """Refuses a program whose functions take or return f64 on a target
    without f64, and element types with no numpy counterpart."""
    for name, sig in sigs.items():
        for kind, descs in (("argument", sig["inputs"]), ("result", sig["results"])):
            for i, desc in enumerate(descs):
                _np_dtype(desc["element"])
                if desc["element"] == "f64" and target in _NO_F64:
                    raise CompileError(
                        f"{name} {kind} {i}: {desc['type']} is f64, which {_NO_F64[target]} cannot compute "
                        f"(target {target.value}); use f32, or compile for llvm-cpu, cuda or rocm"
                    )


# --------------------------------------------------------------------------
# Lowering and IREE compilation
# --------------------------------------------------------------------------


def _parse(program, ctx, passthrough: Sequence[str] = ()):
    from . import ir

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


def _signatures(module) -> dict:
    from .dialects import func

    sigs = {}
    for op in module.body.operations:
        if op.operation.name != "func.func":
            continue
        fn = func.FuncOp(op.operation) if not isinstance(op, func.FuncOp) else op
        if fn.is_external or (
            "sym_visibility" in fn.attributes and str(fn.attributes["sym_visibility"]) == '"private"'
        ):
            continue
        ftype = fn.type
        sigs[fn.name.value] = {
            "inputs": [_describe(t) for t in ftype.inputs],
            "results": [_describe(t) for t in ftype.results],
        }
    return sigs


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
    from . import ir, passmanager

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


#: The scope of the IREE parameters that frozen arguments become.
PARAMETER_SCOPE = "ragged"


def parameter_key(function: str, index: int) -> str:
    """The IREE parameter name of argument ``index`` of ``function`` when frozen."""
    return f"{function}.arg{index}"


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
    The util ops are written in generic form (unregistered here)."""
    from . import ir
    from .dialects import func

    # `name` is public and `indices` are dense inputs (_unfrozen_inputs).
    fn = next(op for op in module.body.operations if isinstance(op, func.FuncOp) and op.name.value == name)
    inputs = [str(t) for t in fn.type.inputs]
    results = [str(t) for t in fn.type.results]
    for i in indices:
        if "?" in inputs[i]:
            raise ValueError(f"frozen: argument {i} of {name!r} must be statically shaped, got {inputs[i]}")
    impl = f"{name}__frozen_impl"
    fn.operation.attributes["sym_name"] = ir.StringAttr.get(impl)
    fn.operation.attributes["sym_visibility"] = ir.StringAttr.get("private")
    keep = [i for i in range(len(inputs)) if i not in set(indices)]
    lines = []
    for i in indices:
        lines.append(
            f'"util.global"() <{{initial_value = #flow.parameter.named<"{PARAMETER_SCOPE}"::"{parameter_key(name, i)}">'
            f' : {inputs[i]}, sym_name = "__param_{name}_{i}", sym_visibility = "private", type = {inputs[i]}}}>'
            " : () -> ()"
        )
    body = [
        f'%p{i} = "util.global.load"() <{{global = @__param_{name}_{i}}}> : () -> {inputs[i]}'
        for i in indices
    ]
    args = ", ".join(f"%a{i}" if i in keep else f"%p{i}" for i in range(len(inputs)))
    call = f"func.call @{impl}({args}) : ({', '.join(inputs)}) -> ({', '.join(results)})"
    outs = ", ".join(f"%r#{j}" for j in range(len(results)))
    body.append(f"%r:{len(results)} = {call}" if results else call)
    body.append(f"return {outs} : {', '.join(results)}" if results else "return")
    signature = ", ".join(f"%a{i}: {inputs[i]}" for i in keep)
    lines.append(
        f"func.func @{name}({signature}) -> ({', '.join(results)}) {{\n  " + "\n  ".join(body) + "\n}"
    )
    # The wrapper parses against a declaration of the original, left behind.
    lines.append(f"func.func private @{impl}({', '.join(inputs)}) -> ({', '.join(results)})")
    wrapper = ir.Module.parse("\n".join(lines))
    for op in list(wrapper.body.operations)[:-1]:
        module.body.append(op.detach_from_parent())


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
    try:
        vmfb = ireec.compile_str(lowered, target_backends=[options.target.value], extra_args=flags)
    except ireec.CompilerToolError as e:
        repro = _reproducer(work, "iree-compile", lowered, options.pipeline, flags, str(e))
        raise CompileError(f"iree-compile failed (reproducer: {repro}):\n{e}", repro) from None
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
    #: Where the intermediates went (keep_intermediates), else None.
    module.work_dir = work.made
    return module


def load(path: str | os.PathLike, device: str | None = None) -> CompiledModule:
    """Loads a module saved by :meth:`CompiledModule.save` without recompiling."""
    path = Path(path)
    meta_path = path.with_suffix(".json")
    if not path.exists() or not meta_path.exists():
        raise FileNotFoundError(f"path: expected {path} and {meta_path} written by CompiledModule.save")
    meta = json.loads(meta_path.read_text())
    return CompiledModule(path.read_bytes(), meta["functions"], device or meta["device"], meta["target"])


# --------------------------------------------------------------------------
# Runtime
# --------------------------------------------------------------------------


#: Which runtime drivers can run an artifact of each target.
_DRIVERS_OF_TARGET = {
    Target.LLVM_CPU: ("local-task", "local-sync"),
    Target.CUDA: ("cuda",),
    Target.VULKAN_SPIRV: ("vulkan",),
    Target.METAL_SPIRV: ("metal",),
    Target.ROCM: ("hip",),
}


#: How far the memory a `local-task` device holds may grow before modules
#: move to a fresh one (see _Devices).
_DEVICE_GROWTH_LIMIT = 1 << 30
#: The driver whose devices _Devices replaces.
_RECYCLED_DRIVER = "local-task"


class _Devices:
    """One IREE device per driver, shared by the modules that run on it.

    IREE 3.13's `local-task` device serves a call's transient memory from
    64 MiB slabs that it keeps until the device is destroyed, and some
    graphs (a six-layer training backward) take new slabs on every call
    (about 400 MB a call; docs/torch.md says why). So, after a call on a
    `local-task` device, once the bytes the process holds in ``malloc``
    have grown by `_DEVICE_GROWTH_LIMIT` over their least since that
    device was created, a fresh device replaces it: each module loads onto
    it at its next call (a few ms), and the old one is freed with the last
    module and result holding it. The least, not the value at creation:
    the old device's slabs are freed after the new one starts, and the new
    one's may then take their place. Without glibc's ``mallinfo2`` the
    process's peak resident memory stands in. Other drivers keep IREE's
    cached device. Calls from several threads see one device per
    generation."""

    def __init__(self):
        # driver -> (generation, device, least usage since it started)
        self._current: dict[str, tuple[int, object, int]] = {}
        self._lock = threading.Lock()

    @staticmethod
    def _usage_bytes() -> int:
        in_use = heap_in_use()
        if in_use is not None:
            return in_use
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def _start(self, driver: str, generation: int) -> None:
        """A device of IREE's own (not its cached one) as ``generation``."""
        import iree.runtime as rt

        self._current[driver] = (generation, rt.get_first_device([driver], cache=False), self._usage_bytes())

    def get(self, driver: str) -> tuple[int, object]:
        """(generation, device) for ``driver``."""
        if driver != _RECYCLED_DRIVER:
            import iree.runtime as rt

            return 0, rt.get_first_device([driver])
        with self._lock:
            if driver not in self._current:
                self._start(driver, 0)
            generation, device, _ = self._current[driver]
        return generation, device

    def generation(self, driver: str) -> int:
        return self._current[driver][0] if driver in self._current else 0

    def after_call(self, driver: str) -> None:
        """Replaces ``driver``'s device once the process has grown too far on it."""
        with self._lock:
            current = self._current.get(driver)
            if current is None:
                return
            generation, device, least = current
            usage = self._usage_bytes()
            if usage - least > _DEVICE_GROWTH_LIMIT:
                self._start(driver, generation + 1)
            elif usage < least:
                self._current[driver] = (generation, device, usage)


_DEVICES = _Devices()
#: Modules loaded onto a device, so that they can let it go at exit.
_LOADED: weakref.WeakSet = weakref.WeakSet()


def _unload_all() -> None:
    """Frees every loaded module's IREE objects, and the devices, before the
    interpreter tears IREE's bindings down. Modules outlive the program in
    places we do not own (Dynamo's code cache, AOTAutograd's backward of a
    graph that was never differentiated), and IREE objects alive at that
    point are reported by nanobind as leaks, about 130 lines at the end of a
    training script. A module called after this loads again."""
    for module in list(_LOADED):
        module._unload()
    with _DEVICES._lock:
        _DEVICES._current.clear()


atexit.register(_unload_all)


def _release_context(ctx) -> None:
    """Lets reference counting free an IREE SystemContext: it and its bound
    modules refer to each other (iree.runtime 3.13), a cycle otherwise left
    to a full collection, which took about 230 ms in a training process."""
    bound = getattr(ctx, "_bound_modules", None)
    if isinstance(bound, dict):
        bound.clear()
    else:
        import gc

        gc.collect()


def _recycling(fn, driver: str):
    """``fn``, followed by _Devices.after_call."""

    def call(*args):
        try:
            return fn(*args)
        finally:
            _DEVICES.after_call(driver)

    return call


class CompiledModule:
    """A compiled IREE module; each public function is an attribute.

    The module is loaded onto its device on first use, so an artifact for a
    GPU this machine lacks still compiles and saves (run it where the GPU
    is, with :func:`load`)."""

    def __init__(self, vmfb: bytes, signatures: dict, driver: str, target: str):
        self.vmfb = vmfb
        self.signatures = signatures
        self.target = target
        self.driver = driver
        allowed = _DRIVERS_OF_TARGET.get(Target(target), ())
        if driver not in allowed:
            raise ValueError(
                f"device: a {target!r} artifact runs on {' or '.join(repr(d) for d in allowed)}, "
                f"not on {driver!r}"
            )
        self._loaded: dict | None = None
        #: IREE parameters the module reads (frozen arguments) and their arrays.
        self.parameter_keys: list[str] = []
        self._parameters: dict[str, np.ndarray] = {}

    def bind_parameters(self, arrays: dict[str, np.ndarray]) -> None:
        """Supplies the frozen arguments (keys as :func:`parameter_key`
        names them); the module reloads on its next call, so rebinding
        repeats the work that depends only on them."""
        unknown = sorted(set(arrays) - set(self.parameter_keys))
        if unknown:
            raise KeyError(
                f"arrays: no frozen argument named {', '.join(unknown)} (expected {self.parameter_keys})"
            )
        for key, array in arrays.items():
            if not isinstance(array, np.ndarray):
                raise TypeError(f"arrays[{key!r}]: expected a numpy array, got {type(array).__name__}")
        self._parameters.update({key: np.ascontiguousarray(a) for key, a in arrays.items()})
        self._loaded = None

    def with_parameters(self, arrays: dict[str, np.ndarray]) -> CompiledModule:
        """A new module sharing this one's artifact, bound to ``arrays``."""
        module = CompiledModule(self.vmfb, self.signatures, self.driver, self.target)
        module.parameter_keys = list(self.parameter_keys)
        module.bind_parameters(arrays)
        return module

    def _unload(self) -> None:
        """Lets the module's context, functions and device go."""
        if self._loaded is not None:
            _release_context(self._loaded.pop("ctx"))
            self._loaded = None

    def _load(self) -> dict:
        if self._loaded is not None:
            if self._loaded["generation"] == _DEVICES.generation(self.driver):
                return self._loaded
            # Moving to a fresh device: the old context goes, and with it
            # (once no result holds it) the old device's memory.
            self._unload()
        missing = [k for k in self.parameter_keys if k not in self._parameters]
        if missing:
            raise RuntimeError(
                f"the module reads frozen arguments not bound yet: {', '.join(missing)} (bind_parameters)"
            )
        import iree.runtime as rt

        try:
            generation, device = _DEVICES.get(self.driver)
            config = rt.Config(device=device)
        except Exception as e:
            # IREE's own reason (e.g. "CUDA driver library 'libcuda.so' not
            # available") is the chained exception.
            causes, cause = [str(e).strip()], e.__cause__ or e.__context__
            while cause is not None:
                causes.append(str(cause).strip())
                cause = cause.__cause__ or cause.__context__
            raise RuntimeError(
                f"device: IREE driver {self.driver!r} cannot open a device on this machine "
                f"({' '.join(c for c in causes if c)}). Drivers in this runtime: "
                f"{', '.join(rt.query_available_drivers())}. Run the module where such a device "
                "exists (CompiledModule.save, then ragged_mlir.load), or compile for llvm-cpu."
            ) from e
        ctx = rt.SystemContext(config=config)
        if self.parameter_keys:
            index = rt.ParameterIndex()
            for key in self.parameter_keys:
                index.add_buffer(key, self._parameters[key])
            provider = index.create_provider(scope=PARAMETER_SCOPE)
            ctx.add_vm_module(rt.create_io_parameters_module(config.vm_instance, provider))
        ctx.add_vm_module(rt.VmModule.copy_buffer(config.vm_instance, self.vmfb))
        host = HostImporter(config.device) if self.driver.startswith("local") else None
        entries = {name: getattr(ctx.modules.module, name) for name in self.signatures}
        if host is not None:
            entries = {name: warm_calls(fn) for name, fn in entries.items()}
        if self.driver == _RECYCLED_DRIVER:
            entries = {name: _recycling(fn, self.driver) for name, fn in entries.items()}
        self._loaded = {
            "generation": generation,
            "ctx": ctx,
            "host": host,
            "entries": entries,
            "functions": {
                name: CompiledFunction(name, sig, entries[name], host)
                for name, sig in self.signatures.items()
            },
        }
        _LOADED.add(self)
        return self._loaded

    def __getattr__(self, name: str) -> CompiledFunction:
        signatures = self.__dict__.get("signatures", {})
        if name not in signatures:
            raise AttributeError(f"no function {name!r}; this module has {sorted(signatures)}")
        return self._load()["functions"][name]

    def __getitem__(self, name: str) -> CompiledFunction:
        return self.__getattr__(name)

    @property
    def functions(self) -> list[str]:
        return sorted(self.signatures)

    def raw(self, name: str):
        """The IREE function itself, taking flat arguments (values,
        offsets..., arrays, scalars) without checks, for callers that already
        validated them; arrays go in without a copy on CPU devices."""
        loaded = self._load()
        if name not in loaded["entries"]:
            raise AttributeError(f"no function {name!r}; this module has {sorted(self.signatures)}")
        fn = loaded["entries"][name]
        host = loaded["host"]
        if host is None:
            return fn
        written = frozenset(self.signatures[name].get("written", ()))
        return lambda *args: fn(*_hand_over(host, args, written))

    def save(self, path: str | os.PathLike) -> Path:
        """Writes ``path`` (.vmfb) and its signature file (``.json``)."""
        if self.parameter_keys:
            raise ValueError(
                "save: this module reads frozen arguments bound at run time; compile it without `frozen`"
            )
        path = Path(path)
        path.write_bytes(self.vmfb)
        meta = {"functions": self.signatures, "device": self.driver, "target": self.target}
        path.with_suffix(".json").write_text(json.dumps(meta, indent=1))
        return path


class HostImporter:
    """Hands numpy arrays to a CPU device without copying them: the HAL
    buffer wraps the array's memory (and keeps it alive). Passing arrays
    directly would copy every argument, weights included, on every call."""

    _ELEMENT_TYPES = {
        np.dtype(np.float32): "FLOAT_32",
        np.dtype(np.float64): "FLOAT_64",
        np.dtype(np.float16): "FLOAT_16",
        np.dtype(np.int64): "SINT_64",
        np.dtype(np.int32): "SINT_32",
        np.dtype(np.int8): "SINT_8",
        np.dtype(np.bool_): "BOOL_8",
    }

    #: IREE's CPU kernels assume buffers aligned like its own allocations.
    ALIGNMENT = 64

    def __init__(self, device):
        import iree.runtime as rt

        self._rt = rt
        self._allocator = device.allocator
        self._memory = rt.MemoryType.DEVICE_LOCAL | rt.MemoryType.HOST_VISIBLE
        self._usage = rt.BufferUsage.DEFAULT

    def __call__(self, array: np.ndarray):
        kind = self._ELEMENT_TYPES.get(array.dtype)
        if (
            kind is None
            or array.ndim == 0
            or array.size == 0
            or not array.flags.c_contiguous
            or array.ctypes.data % self.ALIGNMENT
        ):
            return array  # the runtime's own (copying) path
        buffer = self._allocator.import_host_allocation(array, self._memory, self._usage)
        return self._rt.HalBufferView(buffer, array.shape, getattr(self._rt.HalElementType, kind))


def _hand_over(host: HostImporter, args, written: frozenset[int]) -> list:
    """Flat arguments for an IREE call on a CPU device: arrays without a
    copy, except those IREE may write in place (:mod:`.inplace`), which the
    runtime copies."""
    return [host(a) if isinstance(a, np.ndarray) and i not in written else a for i, a in enumerate(args)]


class CompiledFunction:
    """Calls one compiled function: checks and flattens ragged arguments,
    rebuilds ragged results."""

    def __init__(self, name: str, signature: dict, fn, host: HostImporter | None = None):
        self.name = name
        self.signature = signature
        self._fn = fn
        self._host = host
        self._written = frozenset(signature.get("written", ()))

    def __call__(self, *args):
        inputs = self.signature["inputs"]
        if len(args) != len(inputs):
            raise TypeError(f"{self.name}() takes {len(inputs)} arguments ({len(args)} given)")
        flat: list[np.ndarray] = []
        bound: dict[str, tuple[str, np.ndarray]] = {}
        for i, (arg, desc) in enumerate(zip(args, inputs, strict=False)):
            name = f"argument {i}"
            if desc["kind"] == "ragged":
                flat.extend(_flatten_ragged(name, arg, desc, bound))
            elif desc["kind"] == "scalar":
                flat.append(_check_scalar(name, arg, desc))
            else:
                flat.append(_check_dense(name, arg, desc))
        if self._host is not None:
            flat = _hand_over(self._host, flat, self._written)
        out = self._fn(*flat)
        if not isinstance(out, (list, tuple)):
            out = [out]
        # Copied out of IREE's memory: to_host() maps the result buffer, and
        # an array viewing that mapping keeps IREE objects (the mapping, the
        # buffer view) alive as long as it lives. One that outlives the
        # interpreter's teardown (held by a daemon thread, say) then shows as
        # nanobind leaks at exit; a copy owns its memory and holds nothing.
        host = [np.array(o.to_host()) for o in out]
        del out
        results, k = [], 0
        for desc in self.signature["results"]:
            if desc["kind"] == "ragged":
                n = len(desc["symbols"])
                values, parts = host[k], host[k + 1 : k + 1 + n]
                k += 1 + n
                results.append(RaggedArray(values, list(parts), layout=_layout_of(desc), _checked=True))
            else:
                results.append(host[k])
                k += 1
        return results[0] if len(results) == 1 else tuple(results)


def _layout_of(desc) -> tuple | None:
    """The RaggedArray layout of a ragged type (None for nested levels)."""
    dims = desc["dims"]
    ragged = [d for d in dims if isinstance(d, dict)]
    if any(d["parent"] for d in ragged) or (len(ragged) == 1 and isinstance(dims[0], dict)):
        return None
    last = max(i for i, d in enumerate(dims) if isinstance(d, dict))
    return tuple(
        (desc["symbols"].index(d["symbol"]),) if isinstance(d, dict) else d for d in dims[: last + 1]
    )


def _check_scalar(name: str, arg, desc):
    want = np.dtype(_np_dtype(desc["element"]))
    if isinstance(arg, np.ndarray) and arg.ndim != 0:
        raise TypeError(f"{name}: expected a {desc['type']} scalar, got an array of shape {arg.shape}")
    if want.kind in "iu" and not isinstance(arg, (int, np.integer)):
        raise TypeError(f"{name}: expected an int for {desc['type']}, got {type(arg).__name__}")
    return want.type(arg)


def _check_dense(name: str, arg, desc) -> np.ndarray:
    if isinstance(arg, RaggedArray):
        raise TypeError(f"{name}: expected a dense array {desc['type']}, got a RaggedArray")
    arr = np.asarray(arg)
    want = _np_dtype(desc["element"])
    if arr.dtype != want:
        raise TypeError(f"{name}: expected dtype {np.dtype(want)} for {desc['type']}, got {arr.dtype}")
    shape = desc["shape"]
    if arr.ndim != len(shape):
        raise ValueError(f"{name}: expected rank {len(shape)} for {desc['type']}, got shape {arr.shape}")
    for d, (have, need) in enumerate(zip(arr.shape, shape, strict=False)):
        if need is not None and have != need:
            raise ValueError(f"{name}: dim {d} must be {need} for {desc['type']}, got {have}")
    # np.ascontiguousarray would turn a rank-0 array into rank 1.
    return np.require(arr, requirements="C")


def _flatten_ragged(name: str, arg, desc, bound) -> list[np.ndarray]:
    if not isinstance(arg, RaggedArray):
        if isinstance(arg, (list, tuple)):
            arg = RaggedArray.from_list(arg)
        else:
            raise TypeError(
                f"{name}: expected a RaggedArray (or a list of arrays) for {desc['type']}, got {type(arg).__name__}"
            )
    symbols = desc["symbols"]
    if len(arg.partitions) != len(symbols):
        raise ValueError(
            f"{name}: {desc['type']} takes {len(symbols)} partitions ({', '.join(symbols)}), "
            f"got a RaggedArray with {len(arg.partitions)}"
        )
    want = _np_dtype(desc["element"])
    values = arg.values
    if values.dtype != want:
        raise TypeError(
            f"{name}: expected values of dtype {np.dtype(want)} for {desc['type']}, got {values.dtype}"
        )
    dims = desc["dims"]
    last = max(i for i, d in enumerate(dims) if isinstance(d, dict))
    trailing = dims[last + 1 :]
    if values.ndim != 1 + len(trailing):
        raise ValueError(
            f"{name}: values must have rank {1 + len(trailing)} ([rows, {', '.join(map(str, trailing))}]) "
            f"for {desc['type']}, got shape {values.shape}"
        )
    for j, (have, need) in enumerate(zip(values.shape[1:], trailing, strict=False)):
        if need is not None and have != need:
            raise ValueError(f"{name}: values dim {j + 1} must be {need} for {desc['type']}, got {have}")
    parents = {d["symbol"]: d["parent"] for d in dims if isinstance(d, dict)}
    parts = {
        s: check_offsets(f"{name}: offsets of {s}", p) for s, p in zip(symbols, arg.partitions, strict=False)
    }
    batch = desc["batch"]
    for s in symbols:
        p = parts[s]
        parent = parents[s]
        expected = (parts[parent][-1] + 1) if parent else (None if batch is None else batch + 1)
        if parent is None:
            first = parts[symbols[0]]
            if p.size != first.size:
                raise ValueError(
                    f"{name}: offsets of {s} have {p.size} entries, offsets of {symbols[0]} have {first.size}"
                )
        if expected is not None and p.size != expected:
            raise ValueError(f"{name}: offsets of {s} must have {int(expected)} entries, got {p.size}")
    rows = _rows([parts[s] for s in symbols], _layout_of(desc))
    if values.shape[0] != rows:
        raise ValueError(f"{name}: the partitions describe {rows} rows of values, got {values.shape[0]}")
    for s in symbols:
        if s in bound and not np.array_equal(bound[s][1], parts[s]):
            raise ValueError(
                f"{name}: symbol {s} must have the same partition as in {bound[s][0]} "
                f"(the types share the symbol), but the offsets differ"
            )
        bound.setdefault(s, (name, parts[s]))
    return [np.require(values, requirements="C")] + [parts[s] for s in symbols]
