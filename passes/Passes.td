//===- Passes.td - ragged passes ---------------------------*- tablegen -*-===//

#ifndef RAGGED_PASSES_TD
#define RAGGED_PASSES_TD

include "mlir/Pass/PassBase.td"

def ConvertRaggedToLinalgPass : Pass<"convert-ragged-to-linalg", "ModuleOp"> {
  let summary = "Lowers ragged ops to linalg/tensor/scf on packed values";
  let description = [{
    Replaces every `!ragged.tensor` by its physical form, a packed values
    tensor followed by one `tensor<?xi64>` offsets partition per distinct
    symbol, in function signatures, calls and returns too, and lowers each
    ragged op to upstream `linalg`, `tensor`, `arith`, `math` and `scf`.

    Why this shape: per-token ops become dense ops on the packed values, and
    per-item ops become a fixed number of `linalg.generic`s whose iteration
    space is the real elements (segment bounds are read from the offsets
    inside the body), so IREE forms a fixed number of dispatches whatever the
    batch size and does no work on padding.

    Before:
    ```mlir
    func.func @f(%x: !ragged.tensor<?, [L], 4, f32>) -> tensor<?x?x4xf32> {
      %p = ragged.to_padded %x padding(0.0 : f32)
          : !ragged.tensor<?, [L], 4, f32> -> tensor<?x?x4xf32>
      return %p : tensor<?x?x4xf32>
    }
    ```
    After:
    ```mlir
    func.func @f(%values: tensor<?x4xf32>, %offsets: tensor<?xi64>) -> tensor<?x?x4xf32> {
      // max length: a linalg.generic reduction over offsets[1:] - offsets[:-1]
      // padded: a linalg.generic over [B, max, 4] reading values[offsets[b] + l]
    }
    ```
  }];
  let options = [
    Option<"balanceTile", "balance-tile", "int64_t", /*default=*/"kDefaultBalanceTile",
           "Reduce segments (ragged.reduce, ragged.softmax) over tiles of N "
           "rows, 1 <= N <= 64, unrolled in the kernel, then combine each "
           "segment's tiles; one long segment and many short ones then give "
           "equal work units (0: one unit per segment, looping over its rows)">,
    Option<"attentionBuckets", "attention-buckets", "int64_t",
           /*default=*/"kDefaultAttentionBuckets",
           "Run attention densely per length bucket, at most 24 (sizes "
           "maxL/sqrt(2)^k), with at most sqrt(2)x padding per item in all but "
           "the shortest bucket; 0 computes exactly the sum of L(b)^2 scores "
           "in segment loops (attention_grad then takes 16 buckets)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::cf::ControlFlowDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
  ];
}

def CpuKernelsPass : Pass<"ragged-cpu-kernels", "ModuleOp"> {
  let summary = "Runs ragged.attention, its gradient, segment softmax and reductions, convolution and pooling on CPU as dispatches of our kernels";
  let description = [{
    The IREE-specific lowering of f32, f16 and bf16 attention for CPU
    targets, run before `ragged-attention-to-iree`. Each `ragged.attention`
    over packed values `[rows, H, d]` (static `d` of at most 256) becomes
    one `flow.dispatch` of the kernel library's `attention_fwd`
    (`kernels/attention.c`), which reads the packed rows and the offsets
    directly: one workgroup per block of 32 query rows and head, keys
    streamed in blocks of 64 with an online softmax, so each item costs its
    own `L(b)^2` with no bucket padding.
    Causal masks, dropout (the op's hash) and the lse result are the
    kernel's. Each `ragged.attention_grad` (`d` of at most 128) becomes one
    dispatch of `attention_bwd` (one workgroup per item and head), which
    recomputes the weights from the lse block by block and writes dQ, dK
    and dV; without the forward's output and lse, an `attention_fwd`
    dispatch computes them first. Operands read
    across a block of rows are laid out transposed, `[H, d, stride]`
    (`linalg.transpose`, `tensor.pad`; the stride at least `rows + 64`).
    The kernels compute in f32: f16 and bf16 operands are widened by an
    elementwise `linalg.generic` (`arith.extf`; a transposed operand by the
    generic that transposes it) and the results rounded back
    (`arith.truncf`).

    An f32 `ragged.softmax` over the ragged dim of `[B, L(b), D...]` (one
    ragged dim, the first item dim) becomes one dispatch of
    `segment_softmax` (`kernels/softmax.c`), one workgroup per item: per
    chunk of features the maximum over the item's rows, the exponentials
    (computed once, stored, summed) and their scaling, the chunk read from
    cache after the first pass. Softmax over attention scores (two ragged
    dims) is left to `convert-ragged-to-linalg`. An f32 `ragged.reduce`
    (sum, mean, max, min) over the same dim becomes one dispatch of
    `segment_reduce` (`kernels/reduce.c`), one workgroup per item, each
    chunk of features reduced over the item's rows in registers (an empty
    item takes the op's `empty`).

    An f32 `ragged.pool2d` becomes one dispatch of `pool2d`
    (`kernels/pool.c`), each output pixel's window reduced from the packed
    input. An f32 `ragged.conv2d` with `groups = 1`, a static weight and at most
    4096 input channels becomes one dispatch of `conv2d`
    (`kernels/conv.c`), one workgroup per 64 packed output pixels: each
    output pixel's window is read straight from the packed input (no
    `[pixels, KH KW Cin]` tile), a few pixels of one output row times a few
    vectors of output channels accumulated in registers, input channels in
    chunks of 128. The weight and bias are padded with zeros to a multiple
    of 16 output channels; the output partitions follow the op's extent
    rule, computed on the device as `convert-ragged-to-linalg` does.

    Every dispatch passes its buffers, the number of elements of each, then
    the kernel's scalars. The pass adds one `stream.executable @ragged_kernels` whose dispatch
    functions call the kernels (`hal.import.static`) and whose
    `hal.executable.objects` name the object `ragged_kernels_<isa>.o`, which
    iree-compile finds on `--iree-hal-executable-object-search-path` (the
    Python package's `kernels/` folder). IREE's ops are built by name, so
    the context must allow unregistered dialects.

    ```mlir
    %o = ragged.attention %q, %k, %v {scale = 0.5 : f64}
        : !ragged.tensor<?, [L], 2, 4, f32>
    ```
    becomes `ragged.values` of the operands, `ragged.offsets` of `L`, the
    transposed keys, `flow.dispatch @ragged_kernels::@attention_fwd[%rows,
    %heads](...)` and `ragged.pack %out[%offsets]`.
  }];
  let options = [
    Option<"isa", "isa", "std::string", /*default=*/"\"x86_64_v4\"",
           "The kernel object's ISA: x86_64_v4 (AVX-512), x86_64_v3 (AVX2 "
           "and FMA) or arm_64 (NEON)">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::func::FuncDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::ragged::RaggedDialect",
    "::mlir::tensor::TensorDialect",
  ];
}

def RaggedAttentionToIreePass : Pass<"ragged-attention-to-iree", "ModuleOp"> {
  let summary = "Runs ragged.attention on static length buckets with IREE's gathers and kernels";
  let description = [{
    The IREE-specific part of the lowering, run before
    `convert-ragged-to-linalg`, which emits upstream dialects only. f32
    attention with static heads and head size runs by length buckets on a
    static ladder (16 to 1024 rows, 1.5x apart, and one bucket of max L):
    IREE's `iree_linalg_ext.gather` reads each bucket's blocks from the
    packed rows, attention runs on them under a key mask, and one gather
    reads the packed rows back. IREE's CPU codegen picks fast tiles only for
    a static bucket size, hence the ladder. Each bucket runs IREE's fused
    `iree_linalg_ext.attention` (online softmax, no score blocks). With
    `scores-max-rows` (0 by default), buckets of 32 to that many rows with
    several heads whose n H S^2 scores take at most 32 MiB (checked on the
    device) materialise the scores instead: two contractions over
    head-major `[n H, S, d]` blocks, which IREE data-tiles, with the
    softmax between them (1.2-1.6x faster than the fused kernel on 12 heads
    of 32; both are compiled). The IREE ops are built by name for IREE
    to parse, so the context must allow unregistered dialects. An attention
    that also returns its lse (a training forward) runs IREE's
    `iree_linalg_ext.online_attention` on the same buckets, which returns
    each query's running maximum and sum beside the unnormalised output;
    the output and the lse are elementwise functions of them. Attentions
    that drop weights, and others, are left for `convert-ragged-to-linalg`.

    The rewrite stays at the ragged level:
    ```mlir
    %o = ragged.attention %q, %k, %v {scale = 0.5 : f64}
        : !ragged.tensor<?, [L], 2, 4, f32>
    ```
    becomes `ragged.values` of the operands and `ragged.offsets` of `L` (read
    through a `ragged.pack` where there is one), the bucket schedule built
    from the offsets, the IREE gathers and attentions, and
    `ragged.pack %out[%offsets]`.
  }];
  let options = [
    Option<"scoresMaxRows", "scores-max-rows", "int64_t",
           /*default=*/"kDefaultScoresMaxRows",
           "The largest bucket (rows) whose scores are materialised; larger "
           "ones, and all with 0, run IREE's fused kernel">,
  ];
  let dependentDialects = [
    "::mlir::arith::ArithDialect",
    "::mlir::linalg::LinalgDialect",
    "::mlir::math::MathDialect",
    "::mlir::ragged::RaggedDialect",
    "::mlir::scf::SCFDialect",
    "::mlir::tensor::TensorDialect",
  ];
}

def CpuAttentionTilesPass : Pass<"ragged-cpu-attention-tiles", "ModuleOp"> {
  let summary = "Gives IREE's fused attention CPU tiles of whole heads";
  let description = [{
    IREE's CPU heuristics tile `iree_linalg_ext.attention` in vector steps
    of 8 queries x 16 value columns: a head of 32 columns takes two passes
    over every key step, and a head of 64 ran at a tenth of the speed. This
    pass gives every attention whose head sizes are static IREE's
    `compilation_info`: 64 queries per workgroup; per vector step the whole
    head, 16 keys, and as many queries (at most 8) as keep IREE's largest
    vector, queries x head x keys, within the 256 native vectors IREE's CPU
    codegen accepts: with `vector-bytes` (the target's native vector size)
    64, as on AVX-512, 16 KiB (8 queries for heads of up to 32 columns, 4
    for 64, 2 for 128); AVX2 has 32 and NEON 16. On 12 heads of 32 (AMD EPYC, AVX-512, 2
    threads) the kernel ran 1.4-1.7x faster, on 12 heads of 64 7.8x. The
    loops are told apart by the operand maps, so any layout of batch and
    head dims is configured. An attention that already has a
    `compilation_info` is left as it is. The attribute is built by name for
    IREE to parse, so the context must allow unregistered dialects. For
    CPU targets only.

    Before:
    ```mlir
    %o = "iree_linalg_ext.attention"(%q, %k, %v, %scale, %mask, %init) ({...})
        {indexing_maps = [...]} : (tensor<?x64x12x32xf32>, ...) -> ...
    ```
    After:
    ```mlir
    %o = "iree_linalg_ext.attention"(...) ({...}) {compilation_info =
        #iree_codegen.compilation_info<lowering_config =
        #iree_cpu.lowering_config<distribution = [1, 1, 64, 32, 0, 0],
        vector_common_parallel = [1, 1, 8, 32, 0, 0],
        vector_reduction = [0, 0, 0, 0, 0, 16]>, translation_info = ...>,
        indexing_maps = [...]} : ...
    ```
  }];
  let options = [
    Option<"vectorBytes", "vector-bytes", "int64_t", /*default=*/"64",
           "The target's native vector size in bytes (IREE's native_vector_size)">,
  ];
}

def CpuWholeRowsPass : Pass<"ragged-cpu-whole-rows", "ModuleOp"> {
  let summary = "Gives generics over packed rows IREE CPU workgroups of whole rows";
  let description = [{
    Generics over (rows or row tiles, trailing dims) that read packed rows
    through a per-row index are marked `ragged.whole_rows` by
    `convert-ragged-to-linalg`: the tile generics of segment reductions and
    softmax (a tile's rows unrolled in the body), the softmax output, and
    segment broadcasts. IREE's CPU heuristics distribute them in 64 x 64
    (or 32 x 32) blocks, so a workgroup reads 256-byte pieces of every row.
    This pass replaces the marker with IREE's `compilation_info`: 16 rows
    (or tiles) per workgroup, the trailing dims whole, 16 elements of the
    innermost dim per vector step, the remainder masked or, with `peel`,
    peeled (as IREE's `--iree-llvmcpu-vector-pproc-strategy=peel`, for x86
    without AVX-512, where masked loads are slow). On [23586, 384] f32
    (RACE lengths) a segment sum ran 1.1-1.3x faster and a softmax 1.4x.
    The attribute is built by name for IREE to parse, so the context must
    allow unregistered dialects. Run it last, for CPU targets only.

    Before:
    ```mlir
    %t = linalg.generic {indexing_maps = [...], iterator_types = ["parallel",
        "parallel"]} ins(%starts, %ends : tensor<?xi64>, tensor<?xi64>)
        outs(%e : tensor<?x?xf32>) attrs = {ragged.whole_rows} { ... }
    ```
    After:
    ```mlir
    %t = linalg.generic {...} ins(...) outs(...) attrs = {compilation_info =
        #iree_codegen.compilation_info<lowering_config =
        #iree_cpu.lowering_config<distribution = [16, 0],
        vector_common_parallel = [1, 16]>, translation_info = ...>} { ... }
    ```
  }];
  let options = [
    Option<"peel", "peel", "bool", /*default=*/"false",
           "Peel the vector remainder rather than mask it">,
  ];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def HintDataTilingPass : Pass<"ragged-hint-data-tiling", "ModuleOp"> {
  let summary = "Keeps IREE's data tiling off the contractions it miscompiles";
  let description = [{
    IREE's CPU data tiling (`--iree-opt-data-tiling`) packs GEMM operands
    into the matmul kernel's tile layout, about 2x faster on dense
    projections. IREE 3.13 miscompiles a contraction whose reduction extent
    is dynamic once an operand is computed in the program ("'affine.
    delinearize_index' op no basis element may be statically non-positive"):
    a matmul by a weight of dynamic K fed by another op, the `P V`
    contraction of bucketed attention with one head (whose unit head dim IREE
    folds away, leaving a plain batch matmul over the bucket length), a
    dense `torch.bmm` with dynamic K.

    IREE data-tiles every supported contraction unless one of them carries
    its `iree.opt.data_tiling` hint, and then only the hinted ones; it
    decides after inlining, so for the whole module. A linalg op with a
    dynamic reduction extent may become such a contraction inside IREE (it
    fuses `sum(x * mask)` into one), so when the module has one, this pass
    hints the contractions IREE takes as they stand (static reduction, at
    most one batch, M, N and K dim, no unit dims), in every function; when
    there are none, it marks the module `ragged.no_data_tiling` and
    `compile()` leaves data tiling off. Modules without a dynamic reduction
    are left to IREE.

    Before:
    ```mlir
    %y = linalg.matmul ins(%x, %w : tensor<?x?xf32>, tensor<?x8xf32>) ...
    %z = linalg.matmul ins(%y, %v : tensor<?x8xf32>, tensor<8x4xf32>) ...
    ```
    After:
    ```mlir
    %y = linalg.matmul ins(%x, %w : tensor<?x?xf32>, tensor<?x8xf32>) ...
    %z = linalg.matmul {iree.opt.data_tiling} ins(%y, %v : ...) ...
    ```
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect"];
}

def SplitDynamicContractionsPass
    : Pass<"ragged-split-dynamic-contractions", "ModuleOp"> {
  let summary = "Splits GEMMs that sum over the tokens into static-K chunks";
  let description = [{
    A weight gradient sums over the packed tokens: a float contraction with
    static M and N and a dynamic K. IREE 3.13 cannot data-tile it (see
    `ragged-hint-data-tiling`), and untiled it runs at about a third of the
    packed GEMM's rate. This pass zero-pads K to whole chunks of `chunk`
    rows, views each operand's K dim as [chunks, chunk], computes one partial
    product per chunk in a batch contraction with a static K (which IREE
    data-tiles), and sums the partials into the original accumulator. Other
    contractions (a batch dim, dynamic M or N, static K) are left alone.
    `chunk = 0` turns the pass off.

    Before:
    ```mlir
    %dw = linalg.matmul ins(%dyT, %x : tensor<384x?xf32>, tensor<?x1536xf32>)
        outs(%acc : tensor<384x1536xf32>) -> tensor<384x1536xf32>
    ```
    After:
    ```mlir
    %c = arith.ceildivui %k, %c256 : index
    %dyT_p = tensor.pad %dyT low[0, 0] high[0, %h] ... : tensor<384x?xf32>
    %a = tensor.expand_shape %dyT_p [[0], [1, 2]] output_shape [384, %c, 256]
    ... // %b: %x padded and viewed as [%c, 256, 1536]
    %p = linalg.generic {iterator_types = [m, n, k, chunk]: parallel,
        parallel, reduction, parallel} ins(%a, %b) outs(%zeros)
        -> tensor<?x384x1536xf32>
    %dw = linalg.generic {reduction over the chunks} ins(%p) outs(%acc)
    ```
  }];
  let options = [
    Option<"chunk", "chunk", "int64_t", /*default=*/"256",
           "Rows of K per chunk (0: off)">,
  ];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect"];
}

def FoldViewReadsPass : Pass<"ragged-fold-view-reads", "ModuleOp"> {
  let summary = "Reads elements of reshaped and sliced tensors from their source";
  let description = [{
    The lowering's gathers read single elements (`tensor.extract` in a
    `linalg.generic` body) of values that are often views: attention's q, k
    and v are column slices of one in-projection, reshaped to [rows, H, d].
    IREE materialises a strided slice that a dispatch reads as a copy of its
    own. This pass reads such an element from the viewed tensor instead: an
    `expand_shape`'s index groups are linearised over the expanded sizes, an
    `extract_slice`'s indices become offset + index * stride. Views made in
    a dense piece (a private function) are read in its caller, so the pass
    first inlines the calls of private functions whose ops can be inlined
    (MLIR's inliner pass needs every op's symbol uses, which an unregistered
    op with regions, IREE's attention or torch-mlir's scan, hides).

    Before:
    ```mlir
    %k = tensor.extract_slice %qkv[0, 384] [%n, 384] [1, 1]
        : tensor<?x1152xf32> to tensor<?x384xf32>
    %kh = tensor.expand_shape %k [[0], [1, 2]] output_shape [%n, 12, 32]
        : tensor<?x384xf32> into tensor<?x12x32xf32>
    %x = tensor.extract %kh[%r, %h, %c] : tensor<?x12x32xf32>
    ```
    After:
    ```mlir
    %hc = arith.addi (%h * 32), %c : index
    %col = arith.addi %c384, %hc : index
    %x = tensor.extract %qkv[%r, %col] : tensor<?x1152xf32>
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::func::FuncDialect",
                           "::mlir::tensor::TensorDialect"];
}

def FoldEmptyTensorsPass : Pass<"ragged-fold-empty-tensors"> {
  let summary = "Removes the work on static tensors without elements";
  let description = [{
    Dynamo specialises a size of 0 to a constant, so an all-empty batch
    reaches the compiler as static zero-size tensors, and IREE divides by
    such sizes while it forms and names dispatches. Nothing needs computing
    there. A linalg op with a loop of static extent 0 is replaced by its
    inits (a sum over no rows is its initial value); an op without side
    effects whose one result is a static tensor without elements becomes a
    `tensor.empty`; a `tensor.concat` drops the operands without rows along
    its dim (IREE cannot export a concatenation of empty dynamic tensors).

    Before:
    ```mlir
    %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    %g = linalg.matmul ins(%xt, %dy : tensor<4x0xf32>, tensor<0x8xf32>)
                       outs(%z : tensor<4x8xf32>) -> tensor<4x8xf32>
    %v = tensor.expand_shape %x [[0], [1, 2]] output_shape [0, 2, 2]
        : tensor<0x4xf32> into tensor<0x2x2xf32>
    ```
    After:
    ```mlir
    %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
    %v = tensor.empty() : tensor<0x2x2xf32>
    ```
    (`%g` is `%z`.)
  }];
  let dependentDialects = ["::mlir::tensor::TensorDialect"];
}

def FillSplatsPass : Pass<"ragged-fill-splats"> {
  let summary = "Writes generics that broadcast one scalar as fills";
  let description = [{
    torch-mlir lowers `zeros_like` and `full_like` to a `linalg.generic`
    that broadcasts a rank-0 constant. IREE 3.13 makes that generic a
    dispatch without operands and, after cloning it for each consumer that
    updates it in place, merges the clones again by CSE: two inserts or
    scatters into one zero tensor (the gradients of two slices, or of `sort`
    and `topk`, of one input) wrote into one buffer. An all-parallel generic
    whose body only yields a scalar (an operand, the element of a rank-0
    tensor, or a value from outside) is a `linalg.fill` of that scalar,
    which IREE copies for each in-place consumer. The consumer may lie in
    another function, so every such generic becomes a fill, but for one
    among the inputs of an op this context does not know (a scatter's
    updates): IREE clones a fill into the scatter's dispatch and cannot
    compile it there.

    Before:
    ```mlir
    %z = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> ()>,
                                          affine_map<(d0, d1) -> (d0, d1)>],
                         iterator_types = ["parallel", "parallel"]}
        ins(%cst : tensor<f32>) outs(%e : tensor<?x?xf32>) {
    ^bb0(%in: f32, %out: f32):
      linalg.yield %in : f32
    } -> tensor<?x?xf32>
    ```
    After (`%cst` is `dense<0.0>`):
    ```mlir
    %c0 = arith.constant 0.000000e+00 : f32
    %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::tensor::TensorDialect"];
}

def GuardSplatReductionsPass : Pass<"ragged-guard-splat-reductions"> {
  let summary = "Reductions read a splat as a broadcast IREE cannot see into";
  let description = [{
    IREE 3.13's CPU backend miscompiles a reduction whose input is a
    `linalg.fill`: it adds the scalar once per vector rather than once per
    element, so `torch.ones(x.shape).sum()` over 5x5x5 gave 8 (125 / 16
    lanes, rounded up) and the row sums of a [3, 100] fill gave 7, for any
    scalar, static shape or not. A broadcast of a rank-0 tensor it cannot
    see into reduces correctly: each fill a reduction (a linalg op with a
    reduction loop) reads is replaced there by a generic that broadcasts
    the fill's scalar from a rank-0 tensor behind a
    `util.optimization_barrier`. Runs after `ragged-fill-splats`, which
    makes such broadcasts of constants fills.

    Before:
    ```mlir
    %f = linalg.fill ins(%c1 : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
    %s = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>,
                                          affine_map<(d0, d1) -> (d0)>],
                         iterator_types = ["parallel", "reduction"]}
        ins(%f : tensor<?x?xf32>) outs(%acc : tensor<?xf32>) { ... }
    ```
    After:
    ```mlir
    %t = tensor.from_elements %c1 : tensor<f32>
    %h = "util.optimization_barrier"(%t) : (tensor<f32>) -> tensor<f32>
    %b = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> ()>,
                                          affine_map<(d0, d1) -> (d0, d1)>],
                         iterator_types = ["parallel", "parallel"]}
        ins(%h : tensor<f32>) outs(%e2 : tensor<?x?xf32>) { ... }
    %s = linalg.generic ... ins(%b : tensor<?x?xf32>) outs(%acc : tensor<?xf32>) { ... }
    ```
  }];
  let dependentDialects = ["::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect"];
}

def GuardInPlaceUpdatesPass : Pass<"ragged-guard-in-place-updates"> {
  let summary = "Keeps in-place updates from sharing or reading their buffer";
  let description = [{
    A tensor computed from constants alone (an `arange`, a one-hot of
    iotas: linalg ops over empties, fills and constants) becomes an IREE
    dispatch without operands. IREE 3.13 answers a second in-place update of
    such a value by cloning the dispatch for the updating consumer, and CSE
    merges the clones again, so two scatters into one `arange` wrote into
    one buffer; with a static shape, IREE hoists the value into a constant
    global, which a barrier on the value let the updates write into. A
    generic whose result is the destination of an in-place update (an
    insert, the init a linalg body reads, the output of an op this context
    does not know) and is computed from constants alone reads a rank-0
    `false` behind a `util.optimization_barrier` and selects each yield on
    it. Its dispatch then has an operand, and IREE copies the result for
    each update. Fills are left alone: IREE copies a splat for each update.

    An input of an in-place update that is a view (slice, reshape, cast) of
    the tensor it updates, as in `x.index_add(0, i, x[:2])`, is read
    through a `util.optimization_barrier` too, its dynamic sizes given by a
    `flow.tensor.tie_shape`: IREE fused the view into the update's dispatch,
    which then read rows it had already written.

    Before:
    ```mlir
    %a = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>],
                         iterator_types = ["parallel"]} outs(%e : tensor<6xf32>) {
    ^bb0(%out: f32):
      ...
      linalg.yield %v : f32
    } -> tensor<6xf32>
    %s = tensor.insert_slice %u into %a[0] [2] [1] : tensor<2xf32> into tensor<6xf32>
    ```
    After:
    ```mlir
    %f = linalg.fill ins(%false : i1) outs(%e0 : tensor<i1>) -> tensor<i1>
    %h = "util.optimization_barrier"(%f) : (tensor<i1>) -> tensor<i1>
    %a = linalg.generic {indexing_maps = [affine_map<(d0) -> ()>, affine_map<(d0) -> (d0)>],
                         iterator_types = ["parallel"]}
        ins(%h : tensor<i1>) outs(%e : tensor<6xf32>) {
    ^bb0(%k: i1, %out: f32):
      ...
      %r = arith.select %k, %zero, %v : f32
      linalg.yield %r : f32
    } -> tensor<6xf32>
    %s = tensor.insert_slice %u into %a[0] [2] [1] : tensor<2xf32> into tensor<6xf32>
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::linalg::LinalgDialect",
                           "::mlir::tensor::TensorDialect"];
}

def GuardScanInputsPass : Pass<"ragged-guard-scan-inputs"> {
  let summary = "Computes the input of each scan in a dispatch of its own";
  let description = [{
    IREE 3.13 fuses the producers of a `tm_tensor.scan`'s input (torch-mlir's
    `aten.cumsum`) into the scan's dispatch. Where the input is computed
    from slices of an earlier scan's result, as the running sums of window
    extents are from one strided layer of a CNN to the next, the CPU
    backend bounds the fused dynamic extent by a value near 2^63 and
    allocates it on the stack: ResNet-18 on images of their own sizes
    failed with "'func.func' op exceeded stack allocation limit of 32768
    bytes for function. Got 72057594037927936 bytes".

    The input of each scan in a function's body that has dynamic sizes and
    is computed by an op is read behind a `util.optimization_barrier`, its
    dynamic sizes tied by a `flow.tensor.tie_shape` (both in generic form,
    so ragged-opt needs `--allow-unregistered-dialect`): IREE computes it in
    a dispatch of its own and the scan reads it from memory.

    Before:
    ```mlir
    %r:2 = "tm_tensor.scan"(%x, %init, %acc) ...
    ```
    After:
    ```mlir
    %b = "util.optimization_barrier"(%x) : (tensor<?xi64>) -> tensor<?xi64>
    %t = "flow.tensor.tie_shape"(%b, %n) : (tensor<?xi64>, index) -> tensor<?xi64>
    %r:2 = "tm_tensor.scan"(%t, %init, %acc) ...
    ```
  }];
  let dependentDialects = ["::mlir::tensor::TensorDialect"];
}

def GuardContractionSlicesPass : Pass<"ragged-guard-contraction-slices"> {
  let summary = "Copies the slices a contraction reads in dispatches of their own";
  let description = [{
    IREE 3.13 clones a `tensor.extract_slice` into the dispatch of the op
    that reads it. For a contraction IREE data-tiles, the packing of that
    operand then stays in the GEMM's dispatch, and with a dynamic M the CPU
    backend packs the strided rows on the stack: BERT's pooler,
    `tanh(dense(x[:, 0]))`, failed with "'func.func' op exceeded stack
    allocation limit of 32768 bytes" (98304 bytes; 425984 for
    all-MiniLM-L6-v2) on every x86 target, and `x[:, :32] @ w` too.

    Each `extract_slice` of dynamic shape in a function's body (not in a
    loop) that is an input of a contraction, directly or through reshapes,
    is read behind a `util.optimization_barrier`, its dynamic sizes tied to
    the slice's by a `flow.tensor.tie_shape` (both in generic form, so
    ragged-opt needs `--allow-unregistered-dialect`). IREE then copies the
    slice in a dispatch of its own and packs the copy as it packs a function
    argument. Static slices are left alone: IREE packs them within their
    bounds. (IREE's `flow.tensor.slice` is no way out: it copies a strided
    slice as if it were contiguous.)

    Before:
    ```mlir
    %s = tensor.extract_slice %x[0, 0, 0] [%b, 1, 64] [1, 1, 1]
        : tensor<?x?x64xf32> to tensor<?x64xf32>
    %y = linalg.matmul ins(%s, %w : tensor<?x64xf32>, tensor<64x64xf32>) ...
    ```
    After:
    ```mlir
    %s = tensor.extract_slice %x[0, 0, 0] [%b, 1, 64] [1, 1, 1]
        : tensor<?x?x64xf32> to tensor<?x64xf32>
    %h = "util.optimization_barrier"(%s) : (tensor<?x64xf32>) -> tensor<?x64xf32>
    %d = tensor.dim %s, %c0 : tensor<?x64xf32>
    %t = "flow.tensor.tie_shape"(%h, %d) : (tensor<?x64xf32>, index) -> tensor<?x64xf32>
    %y = linalg.matmul ins(%t, %w : tensor<?x64xf32>, tensor<64x64xf32>) ...
    ```
  }];
  let dependentDialects = ["::mlir::tensor::TensorDialect"];
}

def GuardIntegerDivisionPass : Pass<"ragged-guard-integer-division"> {
  let summary = "Keeps padded vector lanes from dividing integers by zero";
  let description = [{
    IREE's CPU backend vectorises an integer division in a linalg body over
    whole vectors whose lanes past a dynamic extent hold zeros, and divides
    each lane on its own (x86 has no vector integer division): a zero lane
    raises SIGFPE, so integer `fmod`, `%` and truncating division by a
    tensor ended the process on any input. Every integer division and
    remainder by a value that is not a constant divides by
    `select(divisor == 0, 1, divisor)` instead. A real division by zero
    (undefined in `arith`) then gives the dividend.

    Before:
    ```mlir
    %q = arith.divsi %a, %b : i64
    ```
    After:
    ```mlir
    %z = arith.cmpi eq, %b, %c0_i64 : i64
    %d = arith.select %z, %c1_i64, %b : i64
    %q = arith.divsi %a, %d : i64
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect"];
}

def ExpandMathPass : Pass<"ragged-expand-math"> {
  let summary = "Expands the f64 math ops IREE's CPU backend cannot lower";
  let description = [{
    IREE 3.13's CPU backend lowers f64 `math.tanh` to a libm call its
    embedded linker cannot resolve ("undefined symbol: tanh") and leaves f64
    `math.erf` illegal; f16 and bf16 math it computes in f32 itself. This
    pass rewrites f64 `tanh` and `erf` into f64 `exp`, `log` and arithmetic
    (which IREE lowers accurately) that keep f64 precision: tanh through
    Kahan's expm1, erf by its Taylor series below 2 and its continued
    fraction above. Upstream's polynomial approximations target f32 and
    would leave f64 results with f32 accuracy.

    f64 `sin`, `cos` and `tan` become arithmetic and `floor` (a Cody-Waite
    reduction by pi/2, Taylor series on |r| <= pi/4): IREE lowered them to
    libm calls its embedded linker cannot resolve wherever it did not
    vectorise them. f32 ones are computed through them and rounded back:
    IREE's f32 versions reduce the argument in f32, and were off by 2.3e-4
    at arguments in [1000, 8192] (rotary embeddings' range), and by 2%
    relative next to tan's poles.

    f64 `atan`, `asin`, `acos` and `atan2` reduce to atan on [0, 1], shifted
    by k pi/12 and summed by its Taylor series; f64 `log2` and `log10` take
    the exponent from the bits and the log of the mantissa. IREE lowered all
    of them to libm calls too. Each is within 2 ulps of libm. f32 `log2`
    and `log10`, which IREE left as libm calls on a 1-D dynamic extent,
    are computed through them and rounded back.

    Before:
    ```mlir
    %y = math.tanh %x : f64
    ```
    After:
    ```mlir
    %a = math.absf %x : f64
    %u = math.exp %m2a : f64   // m2a = -2 |x|
    ... // expm1(-2|x|) = (u - 1) (-2|x|) / log(u), t = -expm1 / (2 + expm1)
    %y = arith.select %negative, %minus_t, %t : f64
    ```
  }];
  let dependentDialects = ["::mlir::arith::ArithDialect",
                           "::mlir::math::MathDialect"];
}

#endif // RAGGED_PASSES_TD
