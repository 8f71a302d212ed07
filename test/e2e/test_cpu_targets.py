"""Every CPU of ``ragged_mlir.compiler.CPU_TARGETS`` compiles our programs,
with the target-dependent choices of a host of that kind: compile-only, so
that what passes on the developer's CPU is known to compile for a user's.

The CPUs (``CompileOptions(cpu=...)``):

* ``haswell``: x86-64 with AVX2. The linalg attention buckets
  (``iree-attention=0``), remainders peeled (``peel-remainders=1`` and
  ``--iree-llvmcpu-vector-pproc-strategy=peel``), 32-byte vectors;
* ``skylake-avx512``, ``sapphirerapids`` (AVX-512 with AMX) and ``znver4``
  (AMD AVX-512): IREE's fused attention, masked remainders, 64-byte
  vectors: the pipeline's defaults;
* ``neoverse-v1`` (``aarch64-unknown-linux-gnu``): the linalg buckets,
  NEON's 16-byte vectors, no peeling, and remainders masked
  (``--iree-llvmcpu-vector-pproc-strategy=mask``): with SVE among its
  features IREE 3.13 ran out of memory on the buckets' contractions when
  it peeled them (``test_sve_peeling_runs_out_of_memory``).

The programs, each compiled once per CPU:

* ``encoder_layer``: the post-LN BERT encoder layer of
  ``test_gpu_targets`` (:mod:`ragged_mlir.builders`);
* ``bert``: Hugging Face ``BertModel`` shaped like all-MiniLM-L6-v2 but tiny
  (hidden 32, one layer, two heads, random weights), called on padded
  ``input_ids`` and ``attention_mask``; every output kept (hidden states
  and the pooler over the first token) with ``unpad=True``, so attention
  runs per item (``ragged.attention``) and the pooler reads each item's
  first row;
* ``llama``: Hugging Face ``LlamaModel`` (``bench/hf_models.py``, tiny) on a
  left-padded batch with ``unpad=True``: causal ragged attention,
  grouped-query heads, rotary embeddings;
* ``transformer_encoder_layer``: ``nn.TransformerEncoderLayer`` on a
  ``NestedTensor``;
* ``images``: the classifier of ``samples/classify_images.py`` (convolution,
  pooling, adaptive average pooling, linear) on a ``NestedTensor`` of
  images of their own sizes.

A torch model runs once on the host with the backend's ``debug_dir``; its
graph's ``ragged.mlir`` is then compiled as the backend compiles it (the
torch-mlir passthrough dialects, its frozen parameters, its training flags
for a training graph), with ``cpu`` set. On the host,
``test_cpus_this_host_runs_agree_with_the_host`` runs the encoder layer
compiled for each CPU whose code the host runs (``znver4``, the host's own
kind by IREE's name, ``skylake-avx512`` and ``haswell`` on the AMD EPYC
machines) against the host compile (``cpu=None``); the others are
compile-only.

An IREE failure with no workaround goes in :data:`KNOWN_FAILURES` as a
strict expected failure with IREE's first error line.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest
from test_gpu_targets import encoder_layer_text, first_error  # test/e2e is on sys.path under pytest

import ragged_mlir
from ragged_mlir import CompileOptions
from ragged_mlir.compiler import CPU_TARGETS, PARAMETER_SCOPE, CompiledModule

iree_compiler = pytest.importorskip("iree.compiler")

ROOT = Path(__file__).resolve().parents[2]

CPUS = ["haswell", "skylake-avx512", "sapphirerapids", "znver4", "neoverse-v1"]
CASES = ["encoder_layer", "bert", "llama", "transformer_encoder_layer", "images"]
#: The cases whose programs hold an attention (fused or linalg buckets).
ATTENTION_CASES = {"encoder_layer", "bert", "llama", "transformer_encoder_layer"}

#: The pipeline options of an AVX-512 CPU (the C++ defaults).
_AVX512 = {
    "balance-tile": "16",
    "attention-buckets": "16",
    "iree-attention": "1",
    "attention-scores-max-rows": "0",
    "contraction-chunk": "256",
    "cpu-tiles": "1",
    "cpu-vector-bytes": "64",
    "peel-remainders": "0",
}
#: cpu -> the pipeline options it gets (where they differ from AVX-512's).
#: Every CPU also links the attention kernel object of its ISA.
_V4 = {"cpu-kernels": "x86_64_v4"}
EXPECTED_OPTIONS = {
    "haswell": _AVX512
    | {
        "iree-attention": "0",
        "peel-remainders": "1",
        "cpu-vector-bytes": "32",
        "cpu-kernels": "x86_64_v3",
    },
    "skylake-avx512": _AVX512 | _V4,
    "sapphirerapids": _AVX512 | _V4,
    "znver4": _AVX512 | _V4,
    "neoverse-v1": _AVX512 | {"iree-attention": "0", "cpu-vector-bytes": "16", "cpu-kernels": "arm_64"},
}
_X86 = "--iree-llvmcpu-target-triple=x86_64-unknown-linux-gnu"
#: cpu -> the flags naming it and choosing its vectorisation.
EXPECTED_FLAGS = {
    "haswell": ["--iree-llvmcpu-target-cpu=haswell", _X86, "--iree-llvmcpu-vector-pproc-strategy=peel"],
    "skylake-avx512": ["--iree-llvmcpu-target-cpu=skylake-avx512", _X86],
    "sapphirerapids": ["--iree-llvmcpu-target-cpu=sapphirerapids", _X86],
    "znver4": ["--iree-llvmcpu-target-cpu=znver4", _X86],
    "neoverse-v1": [
        "--iree-llvmcpu-target-cpu=neoverse-v1",
        "--iree-llvmcpu-target-triple=aarch64-unknown-linux-gnu",
        "--iree-llvmcpu-vector-pproc-strategy=mask",
    ],
}

#: (cpu, case) -> IREE's first error line of a compile that fails with no
#: workaround (a strict xfail; another error fails the test).
KNOWN_FAILURES: dict[tuple[str, str], str] = {}


# --------------------------------------------------------------------------
# The choices each CPU gets
# --------------------------------------------------------------------------


def test_every_known_cpu_is_tested():
    assert sorted(CPU_TARGETS) == sorted(CPUS)


def _pipeline_options(pipeline: str) -> dict[str, str]:
    inner = re.search(r"ragged-to-iree-input(?:\{([^}]*)\})?", pipeline).group(1) or ""
    return dict(kv.split("=", 1) for kv in inner.split())


@pytest.mark.parametrize("cpu", CPUS)
def test_choices_follow_the_cpu(cpu):
    """Pipeline options and flags are those of a host of that kind,
    wherever this runs; explicit options still win."""
    options = CompileOptions(cpu=cpu)
    assert _pipeline_options(options.pipeline) == EXPECTED_OPTIONS[cpu]
    flags = options.flags()
    for flag in EXPECTED_FLAGS[cpu]:
        assert flag in flags, (flag, flags)
    assert "--iree-llvmcpu-target-cpu=host" not in flags
    assert "--iree-opt-data-tiling" in flags  # IREE packs for that CPU's GEMM tiles
    fused = CompileOptions(cpu=cpu, iree_attention=not CPU_TARGETS[cpu].fused_attention)
    assert _pipeline_options(fused.pipeline)["iree-attention"] == str(
        int(not CPU_TARGETS[cpu].fused_attention)
    )
    strategy = "--iree-llvmcpu-vector-pproc-strategy=mask"
    assert strategy in CompileOptions(cpu=cpu, iree_flags=[strategy]).flags()
    assert (
        _pipeline_options(CompileOptions(cpu=cpu, iree_flags=[strategy]).pipeline)["peel-remainders"] == "0"
    )


_TRIVIAL = """func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
  %r = arith.addf %a, %a : tensor<4xf32>
  return %r : tensor<4xf32>
}"""


def _iree_target(flags: list[str]) -> dict[str, str]:
    """The CPU, features, native vector size and triple IREE resolves for
    ``flags`` (its executable target, as the flow level shows it)."""
    flow = iree_compiler.compile_str(
        _TRIVIAL, target_backends=["llvm-cpu"], extra_args=["--compile-to=flow", *flags]
    )
    flow = flow.decode() if isinstance(flow, bytes) else flow
    patterns = {
        "cpu": r'\bcpu = "([^"]*)"',
        "cpu_features": r'cpu_features = "([^"]*)"',
        "native_vector_size": r"native_vector_size = (\d+)",
        "target_triple": r'target_triple = "([^"]*)"',
    }
    return {key: re.search(pattern, flow).group(1) for key, pattern in patterns.items()}


@pytest.mark.parametrize("cpu", CPUS)
def test_table_matches_iree(cpu):
    """The table's vector size and ISA facts are IREE's for that CPU."""
    target = _iree_target(CompileOptions(cpu=cpu).flags())
    facts = CPU_TARGETS[cpu]
    assert target["cpu"] == cpu
    assert int(target["native_vector_size"]) == facts.vector_bytes
    features = set(target["cpu_features"].split(","))
    assert ("+avx512f" in features) == facts.avx512
    assert ("+amx-tile" in features) == facts.amx
    assert ("+sve" in features) == facts.sve
    assert target["target_triple"].startswith("x86_64" if facts.x86 else "aarch64")


def test_cpu_option_errors():
    with pytest.raises(
        ValueError, match=r"cpu: unknown CPU 'pentium'; expected None \(the host\) or one of 'haswell'"
    ):
        CompileOptions(cpu="pentium")
    with pytest.raises(
        ValueError, match=r"cpu: names the CPU of an llvm-cpu compile, got cpu='znver4' with target 'cuda'"
    ):
        CompileOptions(cpu="znver4", target="cuda")
    with pytest.raises(
        ValueError,
        match=r"cpu: 'znver4' and iree_flags' --iree-llvmcpu-target-cpu=haswell name different CPUs",
    ):
        CompileOptions(cpu="znver4", iree_flags=["--iree-llvmcpu-target-cpu=haswell"])
    with pytest.raises(TypeError, match=r"cpu: expected an LLVM CPU name \(str\) or None, got int"):
        CompileOptions(cpu=4)
    # An unknown CPU with its own flags: compiled for it, choices as for any
    # CPU the flags name (the smallest vectors).
    own = CompileOptions(
        cpu="cortex-a76", iree_flags=["--iree-llvmcpu-target-triple=aarch64-unknown-linux-gnu"]
    )
    assert own.flags()[0] == "--iree-llvmcpu-target-cpu=cortex-a76"
    assert _pipeline_options(own.pipeline)["cpu-vector-bytes"] == "16"
    # "host" is the host; the user's own flags without cpu keep their meaning.
    assert CompileOptions(cpu="host") == CompileOptions()
    named = CompileOptions(iree_flags=["--iree-llvmcpu-target-cpu=haswell"])
    assert _pipeline_options(named.pipeline)["cpu-vector-bytes"] == "16"
    assert (
        CompileOptions(cpu="haswell", iree_flags=["--iree-llvmcpu-target-cpu=haswell"])
        .flags()
        .count("--iree-llvmcpu-target-cpu=haswell")
        == 1
    )


# --------------------------------------------------------------------------
# The programs: the builders' encoder layer, and three torch graphs
# --------------------------------------------------------------------------


@dataclass
class Graph:
    """A module text and how the backend compiles it (all but the CPU)."""

    text: str
    iree_flags: list[str] = field(default_factory=list)
    passthrough: tuple[str, ...] = ()
    frozen: list[int] = field(default_factory=list)

    def options(self, cpu: str | None) -> CompileOptions:
        return CompileOptions(cpu=cpu, iree_flags=self.iree_flags, passthrough_dialects=self.passthrough)

    def compile(self, cpu: str | None) -> CompiledModule:
        frozen = {"main": self.frozen} if self.frozen else None
        return ragged_mlir.compile(self.text, options=self.options(cpu), frozen=frozen)


ENCODER = {"d": 32, "heads": 2, "ff": 64}


@pytest.fixture(scope="module")
def encoder_layer() -> list[Graph]:
    return [Graph(encoder_layer_text(batch=None, **ENCODER))]


def _captured(directory: Path) -> list[Graph]:
    """The graphs a torch run left in ``directory``, as the backend
    compiled them (``compile_fx_graph``): its CompileOptions rebuilt and
    checked against the flags and pipeline it wrote."""
    from ragged_mlir.torch.backend.compile import _TRAINING_CPU_FLAGS
    from ragged_mlir.torch.backend.emit import PASSTHROUGH_DIALECTS

    graphs = []
    for graph_dir in sorted(directory.glob("graph-*")):
        kind = re.match(r"# (\w+) graph", (graph_dir / "fx_graph.txt").read_text()).group(1)
        lowered = (graph_dir / "lowered.mlir").read_text()
        keys = re.findall(rf'#flow\.parameter\.named<"{PARAMETER_SCOPE}"::"main\.arg(\d+)">', lowered)
        graph = Graph(
            (graph_dir / "ragged.mlir").read_text(),
            iree_flags=[] if kind == "inference" else list(_TRAINING_CPU_FLAGS),
            passthrough=tuple(PASSTHROUGH_DIALECTS),
            frozen=sorted({int(k) for k in keys}),
        )
        host = graph.options(None)
        assert (graph_dir / "iree_flags.txt").read_text().split() == host.flags(lowered), graph_dir
        assert (graph_dir / "pipeline.txt").read_text().strip() == host.pipeline, graph_dir
        graphs.append(graph)
    assert graphs, f"no graph was compiled into {directory}"
    return graphs


def _fresh_backend() -> None:
    """Compiles afresh: Dynamo's and the backend's caches would serve an
    identical graph compiled earlier in the session without a debug dump."""
    import torch

    from ragged_mlir.torch import backend

    torch._dynamo.reset()
    backend._cache.clear()


@pytest.fixture(scope="module")
def bert(tmp_path_factory) -> list[Graph]:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    _fresh_backend()
    torch.manual_seed(0)
    config = transformers.BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100
    )
    model = transformers.BertModel(config).eval()
    out = tmp_path_factory.mktemp("bert")
    options = {"debug_dir": str(out), "fallback": False, "unpad": True}
    run = torch.compile(model, backend="ragged", dynamic=True, options=options)
    ids = torch.randint(1, 100, (3, 7), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[1, 4:] = 0
    mask[2, 2:] = 0
    with torch.no_grad():
        got, want = run(input_ids=ids, attention_mask=mask), model(input_ids=ids, attention_mask=mask)
    torch.testing.assert_close(got.pooler_output, want.pooler_output, rtol=1e-4, atol=1e-4)
    graphs = _captured(out)
    assert any("ragged.attention" in g.text for g in graphs), "BERT was not unpadded"
    return graphs


@pytest.fixture(scope="module")
def llama(tmp_path_factory) -> list[Graph]:
    """A decoder on a left-padded batch, unpadded: causal ragged attention
    (and grouped-query heads, rotary embeddings)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(ROOT / "bench"))
        from hf_models import ARCHITECTURES, TINY, build, padded_batch

    _fresh_backend()
    arch = ARCHITECTURES["llama"]
    model = build(arch, TINY, "sdpa")
    out = tmp_path_factory.mktemp("llama")
    options = {"debug_dir": str(out), "fallback": False, "unpad": True}
    run = torch.compile(model, backend="ragged", dynamic=True, options=options)
    ids, mask = padded_batch([5, 2, 7], vocab=TINY.vocab, left=True)
    with torch.no_grad():
        got, want = run(input_ids=ids, attention_mask=mask), model(input_ids=ids, attention_mask=mask)
    valid = mask.bool()
    torch.testing.assert_close(
        got.last_hidden_state[valid], want.last_hidden_state[valid], rtol=1e-4, atol=1e-5
    )
    graphs = _captured(out)
    assert any("causal" in g.text and "ragged.attention" in g.text for g in graphs), "Llama was not unpadded"
    return graphs


@pytest.fixture(scope="module")
def transformer_encoder_layer(tmp_path_factory) -> list[Graph]:
    torch = pytest.importorskip("torch")
    from ragged_mlir.torch import NestedTensor

    _fresh_backend()
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 2, 64, dropout=0.0, batch_first=True).eval()
    out = tmp_path_factory.mktemp("transformer_encoder_layer")
    run = torch.compile(
        layer, backend="ragged", dynamic=True, options={"debug_dir": str(out), "fallback": False}
    )
    with torch.no_grad():
        run(NestedTensor(torch.randn(3, 32), torch.randn(5, 32), torch.randn(2, 32)))
    graphs = _captured(out)
    assert any("ragged.attention" in g.text for g in graphs)
    return graphs


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> list[Graph]:
    torch = pytest.importorskip("torch")
    from ragged_mlir.torch import NestedTensor

    # The sample sets RAGGED_FALLBACK=0 for its own process at import.
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(ROOT / "samples"))
        patch.setenv("RAGGED_FALLBACK", "0")
        from classify_images import OrientationNet, make_images

    _fresh_backend()
    pictures, _ = make_images(3, 8, 16, seed=0)
    model = OrientationNet().eval()
    out = tmp_path_factory.mktemp("images")
    run = torch.compile(
        model,
        backend="ragged",
        dynamic=True,
        fullgraph=True,
        options={"debug_dir": str(out), "fallback": False},
    )
    with torch.no_grad():
        run(NestedTensor(*pictures))
    return _captured(out)


@pytest.fixture(scope="module")
def artifacts(request):
    """``artifacts(case, cpu)``: the case's graphs compiled for ``cpu``, once."""
    cache: dict[tuple[str, str | None], list[CompiledModule]] = {}

    def get(case: str, cpu: str | None) -> list[CompiledModule]:
        if (case, cpu) not in cache:
            cache[(case, cpu)] = [graph.compile(cpu) for graph in request.getfixturevalue(case)]
        return cache[(case, cpu)]

    return get


# --------------------------------------------------------------------------
# The matrix
# --------------------------------------------------------------------------


def _params():
    out = []
    for cpu in CPUS:
        for case in CASES:
            marks = []
            if (cpu, case) in KNOWN_FAILURES:
                reason = KNOWN_FAILURES[(cpu, case)]
                marks = [pytest.mark.xfail(strict=True, raises=ragged_mlir.CompileError, reason=reason)]
            out.append(pytest.param(cpu, case, id=f"{cpu}-{case}", marks=marks))
    return out


@pytest.mark.parametrize("cpu,case", _params())
def test_compiles(request, artifacts, cpu, case):
    """The case compiles for the CPU, with its attention on our kernel (the
    object of the CPU's ISA), not on IREE's codegen."""
    graphs = request.getfixturevalue(case)
    if case in ATTENTION_CASES:
        lowered = "\n".join(ragged_mlir.lower(g.text, options=g.options(cpu)) for g in graphs)
        isa = CPU_TARGETS[cpu].kernel_isa
        assert "@ragged_kernels::@attention_fwd" in lowered, f"{case} for {cpu}: no attention kernel"
        assert f'path = "ragged_kernels_{isa}.o"' in lowered, f"{case} for {cpu}: not the {isa} kernel"
        assert "iree_linalg_ext.attention" not in lowered, f"{case} for {cpu}: IREE's fused attention"
    try:
        modules = artifacts(case, cpu)
    except ragged_mlir.CompileError as e:
        known = KNOWN_FAILURES.get((cpu, case))
        # A known failure must fail the known way: another error is a FAIL.
        assert known is None or known in str(e), f"expected {known!r}, got {first_error(e)!r}"
        raise
    for module in modules:
        assert isinstance(module.vmfb, bytes) and module.vmfb[:2] == b"PK", f"{case} for {cpu}"
        assert len(module.vmfb) > 1000, f"{case} for {cpu}: an empty artifact"


def test_sve_peeling_runs_out_of_memory():
    """Why SVE CPUs mask their remainders: with IREE's default peeling, the
    linalg buckets' attention contractions (dynamic lengths, two batch
    dims) do not compile for neoverse-v1. IREE tries to prove the peeled
    loops' masks all-true where the target has SVE (``eliminateVectorMasks``
    under ``GenericVectorization``) and its Fourier-Motzkin elimination
    runs out of memory (unbounded, at 1.7 GB; bounded here at 1 GiB of
    address space, where masking compiles). When peeling compiles too,
    ``CpuTarget.sve`` need not pick ``mask``."""
    from iree.compiler.tools.binaries import find_tool

    from ragged_mlir.builders import Program, attention, ragged

    prog = Program()

    @prog.func(q=ragged(None, "L", 2, 16), k=ragged(None, "L", 2, 16), v=ragged(None, "L", 2, 16))
    def att(q, k, v):
        return attention(q, k, v, scale=0.25)

    options = CompileOptions(cpu="neoverse-v1", attention_buckets=1)  # one bucket is enough
    lowered = ragged_mlir.lower(prog, options=options)
    flags = options.flags(lowered)
    assert "--iree-llvmcpu-vector-pproc-strategy=mask" in flags

    def iree_compile(strategy: str) -> subprocess.CompletedProcess:
        args = [f for f in flags if "vector-pproc-strategy" not in f]
        args += [f"--iree-llvmcpu-vector-pproc-strategy={strategy}", "--mlir-disable-threading"]
        tool = [find_tool("iree-compile"), "-", "--iree-hal-target-backends=llvm-cpu", "-o", "/dev/null"]
        # The limit is the shell's (a preexec_fn is unsafe in a process with
        # threads); one thread, so no thread's stack counts against it.
        limited = ["sh", "-c", f'ulimit -v {1 << 20} && exec "$0" "$@"', *tool, *args]
        return subprocess.run(limited, input=lowered, capture_output=True, text=True, timeout=300)

    masked = iree_compile("mask")
    assert masked.returncode == 0, masked.stderr[-2000:]
    peeled = iree_compile("peel")
    assert peeled.returncode != 0, "peeling compiles for SVE now: drop the mask strategy of CpuTarget.sve"
    assert "LLVM ERROR: out of memory" in peeled.stderr, peeled.stderr[-2000:]


# --------------------------------------------------------------------------
# The CPUs whose code this host runs agree with the host compile
# --------------------------------------------------------------------------


def _features(target: dict[str, str]) -> frozenset[str]:
    return frozenset(f for f in target["cpu_features"].split(",") if f.startswith("+"))


def test_cpus_this_host_runs_agree_with_the_host(encoder_layer, artifacts):
    """The encoder layer compiled for each CPU of the table whose code this
    host runs (its architecture, and features IREE enables that the host
    has: haswell, skylake-avx512 and znver4 on the AMD EPYC machines) gives
    the host compile's results (``cpu=None``). The host's own kind, by
    IREE's name for it (znver4 there), is among them when the table has
    it; the others compile only."""
    host = _iree_target(["--iree-llvmcpu-target-cpu=host"])
    arch = host["target_triple"].split("-")[0]
    runnable = []
    for cpu in CPUS:
        target = _iree_target(CompileOptions(cpu=cpu).flags())
        if target["target_triple"].split("-")[0] == arch and _features(target) <= _features(host):
            runnable.append(cpu)
    if host["cpu"] in CPU_TARGETS:
        assert host["cpu"] in runnable, f"{host['cpu']} code needs features this {host['cpu']} lacks"
    if not runnable:
        pytest.skip(f"this host ({host['cpu']}) runs the code of no CPU of CPU_TARGETS")
    rng = np.random.default_rng(7)
    d, ff = ENCODER["d"], ENCODER["ff"]
    lengths = [3, 0, 17, 1, 40]
    x = ragged_mlir.RaggedArray.from_list(
        [rng.standard_normal((n, d)).astype(np.float32) for n in lengths],
        trailing_shape=(d,),
        dtype=np.float32,
    )
    w = lambda *shape: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)  # noqa: E731
    ones, zeros = np.ones(d, np.float32), np.zeros(d, np.float32)
    args = (x, w(d, d), w(d, d), w(d, d), w(d, d), ones, zeros, w(d, ff), w(ff, d), ones, zeros)
    (reference,) = artifacts("encoder_layer", None)
    want_y, want_pooled = reference.encoder_layer(*args)
    assert want_y.values.shape == (sum(lengths), d) and np.isfinite(want_y.values).all()
    for cpu in runnable:
        (module,) = artifacts("encoder_layer", cpu)
        got_y, got_pooled = module.encoder_layer(*args)
        # The fused attention (AVX-512) and the linalg buckets (AVX2) add
        # in different orders.
        np.testing.assert_allclose(got_y.values, want_y.values, rtol=1e-4, atol=1e-5, err_msg=cpu)
        np.testing.assert_allclose(got_pooled, want_pooled, rtol=1e-4, atol=1e-5, err_msg=cpu)
