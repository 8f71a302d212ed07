"""Compile options: targets, CPUs, and the pipeline and IREE flags they give.

``CompileOptions`` is the documented dataclass users pass to
:func:`ragged_mlir.compile`; its ``pipeline`` writes the named C++ pipeline
``ragged-to-iree-input`` with every option spelled out, and its ``flags()``
the iree-compile flags, both following the target CPU (the host's, or the one
``cpu`` names: docs/cpu_targets.md).
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

#: The named pipeline, bare: its C++ defaults are an AVX-512 CPU's choices
#: (what ``CompileOptions(cpu="znver4").pipeline`` spells out, a test checks).
#: Compiles from Python write every option (``CompileOptions.pipeline``).
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
#: Rows per static K chunk of a contraction that sums over a dynamic extent
#: (weight gradients), where IREE data-tiles: each chunk is a GEMM it packs.
CONTRACTION_CHUNK = 256


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

#: The kernel library's objects (``kernels/``, built by CMake), one per ISA:
#: ``ragged_kernels_<isa>.o``, linked by iree-compile from its object
#: search path.
KERNELS_DIR = Path(__file__).parent.parent / "kernels"
_OBJECT_SEARCH_PATH = "--iree-hal-executable-object-search-path"


def kernel_object(isa: str) -> Path:
    """The kernel library's object for ``isa``."""
    return KERNELS_DIR / f"ragged_kernels_{isa}.o"


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
    def kernel_isa(self) -> str | None:
        """The ISA of the kernel library's objects for this CPU
        (``kernels/``): ``x86_64_v4`` with AVX-512, ``x86_64_v3`` (AVX2 and
        FMA) on other x86, ``arm_64`` (NEON) on aarch64."""
        if self.x86:
            return "x86_64_v4" if self.avx512 else "x86_64_v3"
        return "arm_64"

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
    cpu_kernels: run the ops below on ragged-mlir's CPU kernel library
        (``kernels/``). f32, f16 and bf16 attention (static head size up
        to 256) runs as one dispatch of its attention kernel
        (``kernels/attention.c``), which reads the packed rows and offsets
        directly: no length buckets, each item costs its own L^2. It
        computes in f32: f16 and bf16 are widened before it and rounded
        after. The same switch runs f32 softmax over a ragged dim of
        ``[B, L(b), D...]`` on the library's segment softmax
        (``kernels/softmax.c``, one workgroup per item), f32 sum, mean, max
        and min over that dim on its segment reductions
        (``kernels/reduce.c``), and f32 convolution (groups 1) and pooling of
        images of their own sizes on its window kernels (``kernels/conv.c``,
        ``kernels/pool.c``: no window tile). None picks the
        kernels on CPU targets unless ``iree_attention``,
        ``attention_buckets`` or ``attention_scores_max_rows`` is given
        (they tune IREE's codegen); False keeps IREE's codegen; GPU
        targets never use them.
    attention_kernel: the former name of ``cpu_kernels``; still accepted,
        with a ``DeprecationWarning``.
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
    cache: look the artifact up in the persistent cache
        (:mod:`ragged_mlir.cache`) and keep it there; ``RAGGED_CACHE=0``
        turns the cache off for every compile.
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
    cache: bool = True
    cpu_kernels: bool | None = None
    attention_kernel: bool | None = None

    def __post_init__(self) -> None:
        _rename_deprecated(self, "attention_kernel", "cpu_kernels")
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
        if self.kernel_isa:
            defaults.append(f"{_OBJECT_SEARCH_PATH}={KERNELS_DIR}")
        defaults = [f for f in defaults if f.split("=", 1)[0] not in user]
        if lowered is not None and _NO_DATA_TILING in lowered:
            defaults = [f for f in defaults if f != _DATA_TILING]
        return defaults + list(self.iree_flags)

    @property
    def kernel_isa(self) -> str | None:
        """The ISA of the CPU kernel objects this compile links (see
        ``cpu_kernels``), or None where it links none."""
        if self.cpu_kernels is False:
            return None
        codegen = (self.iree_attention, self.attention_buckets, self.attention_scores_max_rows)
        if self.cpu_kernels is None and any(x is not None for x in codegen):
            return None  # IREE's codegen, which these options tune
        if self.target != Target.LLVM_CPU:
            if self.cpu_kernels:
                raise ValueError(
                    "cpu_kernels: the CPU kernel serves llvm-cpu targets only, "
                    f"got target {self.target.value!r}"
                )
            return None
        isa = self._cpu_target().kernel_isa
        if self.cpu is None and self._flags_name_cpu():
            isa = None  # a CPU the flags name, whose ISA is unknown here
        elif not kernel_object(isa).is_file():
            isa = None
        if isa is None and self.cpu_kernels:
            raise ValueError(
                "cpu_kernels: no CPU kernel object for this target "
                f"(looked for {kernel_object(self._cpu_target().kernel_isa)}; "
                "the build makes them with the ziglang package)"
            )
        return isa

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
        scores = self.attention_scores_max_rows
        if scores is None:
            scores = ATTENTION_SCORES_MAX_ROWS
        elif isinstance(scores, bool) or not isinstance(scores, int) or scores < 0:
            raise ValueError(f"attention_scores_max_rows: expected an int >= 0 or None, got {scores!r}")
        fused = self.iree_attention
        if fused is None:
            fused = cpu and self._cpu_target().fused_attention
        # Every option written out: the C++ defaults (passes/Passes.h,
        # Pipelines.cpp) serve ragged-opt users who name the pipeline bare,
        # and never decide a compile from Python.
        options = {
            "balance-tile": tile,
            "attention-buckets": buckets,
            "iree-attention": int(bool(fused)),
            "attention-scores-max-rows": scores,
            # Chunked weight gradients pay only where IREE packs them.
            "contraction-chunk": CONTRACTION_CHUNK if self._data_tiling else 0,
            # IREE CPU tile sizes and workgroups, for CPU targets only.
            "cpu-tiles": int(cpu),
            "cpu-vector-bytes": self._native_vector_bytes() if cpu else _AVX512_VECTOR_BYTES,
            # As IREE's own vectorisation for this CPU.
            "peel-remainders": int(cpu and _PEEL in self.flags()),
        }
        if self.kernel_isa:
            options["cpu-kernels"] = self.kernel_isa
        return f"builtin.module(ragged-to-iree-input{{{' '.join(f'{k}={v}' for k, v in options.items())}}})"


def _rename_deprecated(options, old: str, new: str) -> None:
    """Moves the value of the deprecated field ``old`` of an options
    dataclass to ``new`` (once: ``old`` is None afterwards, so
    ``dataclasses.replace`` does not warn again)."""
    value = getattr(options, old)
    if value is None:
        return
    import warnings

    warnings.warn(f"{old} is deprecated: it is now called {new}", DeprecationWarning, stacklevel=4)
    if getattr(options, new) is not None and getattr(options, new) != value:
        raise ValueError(
            f"{old} and {new} name one option: got {old}={value!r} and {new}={getattr(options, new)!r}"
        )
    setattr(options, new, value)
    setattr(options, old, None)


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
