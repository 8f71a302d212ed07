"""Every ragged op compiles to a small, fixed number of IREE dispatches,
whatever the batch size: no host loop over items.

Each op is compiled for B = 1 and B = 64 (static batch in the type) down to
IREE's flow level, and the `flow.dispatch` ops are counted.
"""

import re

import pytest

import ragged_mlir

iree_compiler = pytest.importorskip("iree.compiler")

S = "!ragged.tensor<{B}, [L], 8, f32>"
H = "!ragged.tensor<{B}, [L], 2, 4, f32>"
P = "!ragged.tensor<{B}, [L], [L], 2, f32>"
N = "!ragged.tensor<{B}, [S], [T(S)], 8, f32>"
IDS = "!ragged.tensor<{B}, [L], i64>"
IMG = "!ragged.tensor<{B}, [H], [W], 4, f32>"
IMG8 = "!ragged.tensor<{B}, [Ho], [Wo], 8, f32>"
POOLED = "!ragged.tensor<{B}, [Ho], [Wo], 4, f32>"

# name -> (arguments, results, body); the body's result is %r.
OPS = {
    "unary": (f"%x: {S}", S, f"%r = ragged.unary <gelu> %x : {S}"),
    "binary_dense": (
        f"%x: {S}, %b: tensor<8xf32>",
        S,
        f"%r = ragged.binary <add> %x, %b : {S}, tensor<8xf32>",
    ),
    "binary_ragged": (f"%x: {S}, %y: {S}", S, f"%r = ragged.binary <mul> %x, %y : {S}, {S}"),
    "matmul": (
        f"%x: {S}, %w: tensor<8x16xf32>",
        S.replace("8, f32", "16, f32"),
        f"%r = ragged.matmul %x, %w : {S}, tensor<8x16xf32> -> " + S.replace("8, f32", "16, f32"),
    ),
    "reduce_sum": (
        f"%x: {S}",
        "tensor<{B}x8xf32>",
        f"%r = ragged.reduce <sum> %x : {S} -> tensor<{{B}}x8xf32>",
    ),
    "reduce_max": (
        f"%x: {S}",
        "tensor<{B}x8xf32>",
        f"%r = ragged.reduce <max> %x empty(0.0 : f32) : {S} -> tensor<{{B}}x8xf32>",
    ),
    "reduce_nested": (
        f"%x: {N}",
        "!ragged.tensor<{B}, [S], 8, f32>",
        f"%r = ragged.reduce <mean> %x : {N} -> !ragged.tensor<{{B}}, [S], 8, f32>",
    ),
    "broadcast": (
        f"%p: tensor<{{B}}x8xf32>, %x: {S}",
        S,
        f"%r = ragged.broadcast %p like %x : tensor<{{B}}x8xf32>, {S}",
    ),
    "softmax": (f"%x: {S}", S, f"%r = ragged.softmax %x : {S}"),
    "softmax_pairs": (f"%x: {P}", P, f"%r = ragged.softmax %x : {P}"),
    "layer_norm": (
        f"%x: {S}, %g: tensor<8xf32>, %b: tensor<8xf32>",
        S,
        f"%r = ragged.layer_norm %x, %g, %b : {S}, tensor<8xf32>, tensor<8xf32>",
    ),
    "scores": (f"%q: {H}, %k: {H}", P, f"%r = ragged.scores %q, %k {{scale = 0.5 : f64}} : {H}, {H} -> {P}"),
    "apply": (f"%p: {P}, %v: {H}", H, f"%r = ragged.apply %p, %v : {P}, {H} -> {H}"),
    "attention": (f"%q: {H}, %k: {H}, %v: {H}", H, f"%r = ragged.attention %q, %k, %v {{causal}} : {H}"),
    "gather": (
        f"%t: tensor<100x8xf32>, %ids: {IDS}",
        S,
        f"%r = ragged.gather %t[%ids] : tensor<100x8xf32>, {IDS} -> {S}",
    ),
    "concat": (
        f"%a: {S}, %b: " + S.replace("[L]", "[M]"),
        S.replace("[L]", "[K]"),
        f"%r = ragged.concat %a, %b : {S}, " + S.replace("[L]", "[M]") + " -> " + S.replace("[L]", "[K]"),
    ),
    "to_padded": (
        f"%x: {S}",
        "tensor<{B}x?x8xf32>",
        f"%r = ragged.to_padded %x padding(0.0 : f32) : {S} -> tensor<{{B}}x?x8xf32>",
    ),
    "mask": (f"%x: {S}", "tensor<{B}x?xi1>", f"%r = ragged.mask %x : {S} -> tensor<{{B}}x?xi1>"),
    "from_padded": (
        "%p: tensor<{B}x?x8xf32>, %l: tensor<{B}xi64>",
        S,
        f"%r = ragged.from_padded %p lengths(%l) : tensor<{{B}}x?x8xf32>, tensor<{{B}}xi64> -> {S}",
    ),
    "conv2d": (
        f"%x: {IMG}, %w: tensor<3x3x4x8xf32>, %b: tensor<8xf32>",
        IMG8,
        f"%r = ragged.conv2d %x, %w, %b {{strides = array<i64: 2, 2>, padding = array<i64: 1, 1>}}"
        f" : {IMG}, tensor<3x3x4x8xf32>, tensor<8xf32> -> {IMG8}",
    ),
    "conv2d_grouped": (
        f"%x: {IMG}, %w: tensor<3x3x2x8xf32>",
        IMG.replace("4, f32", "8, f32"),
        f"%r = ragged.conv2d %x, %w {{padding = array<i64: 1, 1>, groups = 2}}"
        f" : {IMG}, tensor<3x3x2x8xf32> -> " + IMG.replace("4, f32", "8, f32"),
    ),
    "max_pool2d": (
        f"%x: {IMG}",
        POOLED,
        f"%r = ragged.pool2d <max> %x {{kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>,"
        f" padding = array<i64: 1, 1>}} : {IMG} -> {POOLED}",
    ),
    "avg_pool2d": (
        f"%x: {IMG}",
        POOLED,
        f"%r = ragged.pool2d <mean> %x {{kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>,"
        f" ceil_mode}} : {IMG} -> {POOLED}",
    ),
    "flatten": (
        f"%x: {IMG}",
        "!ragged.tensor<{B}, [P], 4, f32>",
        f"%r = ragged.flatten %x : {IMG} -> !ragged.tensor<{{B}}, [P], 4, f32>",
    ),
}

#: Most ops need one to three dispatches. Every prefix sum over items
#: (offsets from lengths) is a two-level scan of three: the sums of chunks
#: of 64 items, their prefix, then each output (linear in B; one loop per
#: output would be quadratic). An op that builds new offsets (`apply`,
#: `from_padded`, `scores`, `flatten`) adds them. Reductions over row tiles
#: need six (the tile scan's three, the tile table, the tiles, the segments);
#: softmax ten (the same tables, the tiles' max and sum, the segments'
#: max, the rescaled tile sums, the segments' sum, the group of each row,
#: the normalisation). Softmax over the pair dim and the exact attention
#: (scores + softmax + apply) also scan the per-item pair and group counts;
#: they stay fixed in B (see docs/design.md). A strided convolution or
#: pooling builds its tables first: the input's and output's row offsets
#: (sizes and scan each), the output height and width offsets (a scan
#: each), the image of every output pixel; then the window gather and the
#: GEMM (conv), or the window reduction (pool). Kept extents skip the
#: output tables.
MAX_DISPATCHES = {
    "apply": 5,
    "from_padded": 5,
    "scores": 5,
    "flatten": 4,
    "conv2d": 17,
    "conv2d_grouped": 7,
    "max_pool2d": 16,
    "avg_pool2d": 16,
    "reduce_sum": 6,
    "reduce_max": 6,
    "reduce_nested": 6,
    "softmax": 10,
    "softmax_pairs": 19,
    "attention": 29,
}

#: This file checks the exact lowering of every op (the GPU one for
#: attention); the CPU's bucketed attention is checked on its own below.
EXACT = ragged_mlir.CompileOptions(attention_buckets=0, iree_attention=False)


def op_function(name: str, batch: int) -> str:
    """A function applying op `name` of OPS at batch size `batch`."""
    args, result, body = OPS[name]
    fmt = lambda s: s.replace("{{B}}", "{B}").replace("{B}", str(batch))  # noqa: E731
    return f"func.func @{name}({fmt(args)}) -> {fmt(result)} {{\n  {fmt(body)}\n  return %r : {fmt(result)}\n}}\n"


def dispatch_count(name: str, batch: int, options: ragged_mlir.CompileOptions = EXACT) -> int:
    return flow_dispatches(op_function(name, batch), options)


def flow_dispatches(text: str, options: ragged_mlir.CompileOptions) -> int:
    lowered = ragged_mlir.lower(text, options=options)
    flow = iree_compiler.compile_str(
        lowered,
        target_backends=["llvm-cpu"],
        extra_args=["--compile-to=flow", "--iree-llvmcpu-target-cpu=host"],
    )
    flow = flow.decode() if isinstance(flow, bytes) else flow
    return len(re.findall(r"flow\.dispatch @", flow))


@pytest.mark.parametrize("name", sorted(OPS))
def test_dispatch_count_independent_of_batch(name):
    """A fixed number of dispatches for any batch; a static batch of one may
    fold per-item scans and searches into constants, so B = 1 may need
    fewer."""
    small, large = dispatch_count(name, 1), dispatch_count(name, 64)
    assert large == dispatch_count(name, 2), f"{name}: dispatches differ between B=2 and B=64"
    assert large == dispatch_count(name, 512), f"{name}: dispatches differ between B=64 and B=512"
    assert small <= large, f"{name}: {small} dispatches at B=1, {large} at B=64"
    assert 1 <= large <= MAX_DISPATCHES.get(name, 3), f"{name}: {large} dispatches"


@pytest.mark.parametrize(
    "options,bound",
    [
        # Linalg buckets (16 sizes, 121): bookkeeping (the per-bucket
        # tables are one dispatch, see below), per bucket (7) a gather of
        # its blocks, its slots' lengths and the unfused attention, one
        # gather back. An empty bucket's dispatches have no workgroups.
        (ragged_mlir.CompileOptions(iree_attention=False), 121),
        # The fused kernel, the default on AVX-512 hosts (52): one slot
        # table for all buckets, then per bucket (13) its slices of it and
        # an iree_linalg_ext.attention (its gathers fused in, its output
        # written in place into the concatenated slab), one gather back.
        (ragged_mlir.CompileOptions(iree_attention=True), 55),
        # With materialised scores up to 256 rows (108): buckets of 32 to
        # 256 rows also have the scores' dispatches (two data-tiled
        # contractions with their packs, the softmax), which run instead
        # where the bucket's scores fit.
        (ragged_mlir.CompileOptions(iree_attention=True, attention_scores_max_rows=256), 110),
    ],
    ids=["linalg_buckets", "iree_attention", "iree_scores"],
)
def test_bucketed_attention_dispatch_count_fixed(options, bound):
    """Attention by length buckets: a fixed number of dispatches for any
    batch of more than one item; a static batch of one lets
    canonicalisation fold the per-item scans, so B = 1 needs fewer."""
    one, mid, large = (dispatch_count("attention", b, options) for b in (1, 64, 512))
    assert mid == large, f"{mid} dispatches at B=64, {large} at B=512"
    assert one <= mid <= bound, (one, mid)


def test_bucket_tables_are_one_dispatch():
    """The bucketed schedule's per-bucket tables are one dispatch: built
    from host values with tensor.from_elements, IREE wrote every entry with
    a fill of its own (37 fills on the static ladder), which the flow-level
    counts above do not see."""
    lowered = ragged_mlir.lower(
        op_function("attention", 64), options=ragged_mlir.CompileOptions(iree_attention=True)
    )
    assert "tensor.from_elements" not in lowered
    hal = iree_compiler.compile_str(
        lowered,
        target_backends=["llvm-cpu"],
        extra_args=["--compile-to=hal", "--iree-llvmcpu-target-cpu=host"],
    )
    hal = hal.decode() if isinstance(hal, bytes) else hal
    assert "__builtin_fill_i64" not in hal


def test_fused_attention_executables():
    """On the static ladder IREE compiles one executable per distinct
    dispatch: each rung's attention, and one slot table for all rungs (a
    table per rung of static size was one more executable per rung, about
    1.5 s of a six-layer model's cold compile). Causal attention adds each
    rung's [S, S] mask."""
    h = H.replace("{B}", "64")
    text = (
        f"func.func @a(%q: {h}, %k: {h}, %v: {h}) -> {h} {{\n"
        f"  %r = ragged.attention %q, %k, %v : {h}\n  return %r : {h}\n}}\n"
    )
    lowered = ragged_mlir.lower(text, options=ragged_mlir.CompileOptions(iree_attention=True))
    sources = iree_compiler.compile_str(
        lowered,
        target_backends=["llvm-cpu"],
        extra_args=["--compile-to=executable-sources", "--iree-llvmcpu-target-cpu=host"],
    )
    sources = sources.decode() if isinstance(sources, bytes) else sources
    exports = re.findall(r"hal\.executable\.export public @(\w+)", sources)
    attention = [e for e in exports if "_attention_" in e]
    # Thirteen rungs, one fused attention each (the largest of dynamic size).
    assert len(attention) == 13, attention
    # Besides them 15: the schedule, the slot table, copies of its slices,
    # the row gathers and the gather back. A slot table per rung was 27.
    assert len(exports) <= len(attention) + 15, exports


def attention_grad_dispatches(batch: int) -> int:
    h = H.replace("{B}", str(batch))
    return flow_dispatches(
        f"func.func @g(%q: {h}, %k: {h}, %v: {h}, %d: {h}) -> ({h}, {h}, {h}) {{\n"
        f"  %a, %b, %c = ragged.attention_grad %q, %k, %v, %d {{causal}} : {h}\n"
        f"  return %a, %b, %c : {h}, {h}, {h}\n}}\n",
        ragged_mlir.CompileOptions(),
    )


def test_attention_grad_dispatch_count_fixed():
    """The attention gradient (16 buckets on every target, 184 dispatches):
    the forward's bookkeeping, per bucket (11) a gather of four blocks and
    the gradient's contractions, one gather back of the three gradients;
    fixed for any batch of more than one item."""
    one, two, mid, large = (attention_grad_dispatches(b) for b in (1, 2, 64, 512))
    assert two == mid == large, f"{two} dispatches at B=2, {mid} at B=64, {large} at B=512"
    assert one <= mid <= 185, (one, mid)
