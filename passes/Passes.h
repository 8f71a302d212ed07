//===- Passes.h - ragged passes and pipelines -------------------*- C++ -*-===//

#ifndef RAGGED_PASSES_PASSES_H
#define RAGGED_PASSES_PASSES_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlow.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Transforms/DialectConversion.h"

namespace mlir::ragged {

// Defaults of the lowering's options, shared by its pass, its pipeline and
// (checked by a test) the Python compile options.

/// Rows per tile of segment reductions and softmax.
constexpr int64_t kDefaultBalanceTile = 16;
/// The largest balance tile: its rows are unrolled in the tile kernel.
constexpr int64_t kMaxBalanceTile = 64;

/// Length buckets of attention (and of its gradient, whatever the option),
/// sqrt(2) apart: the smallest holds items of up to max L / 181, so one long
/// item does not pad the short ones towards it.
constexpr int64_t kDefaultAttentionBuckets = 16;
/// The most buckets: each one's schedule entries are scalars of the dispatch
/// that places the items, and IREE's CPU limit is 64 of them.
constexpr int64_t kMaxAttentionBuckets = 24;

/// The largest static bucket (rows) on which ragged-attention-to-iree may
/// materialise the scores rather than run IREE's fused kernel; they take
/// n H S^2 floats per bucket of n items (at most 32 MiB, else the bucket
/// runs the fused kernel). 0 by default: with 256, attention on small
/// buckets runs ~2x faster, but both kernels are compiled for every rung
/// from 32 to 256 rows, which doubles a six-layer model's executables (55
/// to 111) and its IREE compile time grows by half (12.3-13.7 to
/// 18.3-23.8 s for all-MiniLM-L6-v2), past the cold-compile budget.
constexpr int64_t kDefaultScoresMaxRows = 0;

#define GEN_PASS_DECL
#include "passes/Passes.h.inc"

/// Converts `!ragged.tensor` to its physical form: the packed values tensor
/// followed by one int64 offsets tensor per distinct symbol.
void populateRaggedTypeConversion(TypeConverter &converter);

/// Patterns lowering pack, values, offsets, to_padded, from_padded, mask and
/// match.
void populateRaggedStructureToLinalgPatterns(const TypeConverter &converter,
                                             RewritePatternSet &patterns);

/// Choices of the compute lowering.
struct RaggedLoweringOptions {
  /// When > 0, segment reductions and softmax run over tiles of this many
  /// rows (at most kMaxBalanceTile), so long and short segments give equal
  /// work per unit; 0 loops over each segment's rows.
  int64_t balanceTile = kDefaultBalanceTile;
  /// When > 0, attention runs densely per length bucket (that many buckets);
  /// 0 computes exactly sum L(b)^2 scores in segment loops. The gradient
  /// (ragged.attention_grad) always runs by buckets, kDefaultAttentionBuckets
  /// of them when this is 0.
  int64_t attentionBuckets = kDefaultAttentionBuckets;
};

/// Patterns lowering the compute ops (elementwise, matmul, reductions,
/// softmax, layer norm, attention, gather, concat and split).
void populateRaggedComputeToLinalgPatterns(
    const TypeConverter &converter, RewritePatternSet &patterns,
    const RaggedLoweringOptions &options = {});

/// The pattern of ragged-attention-to-iree: f32 ragged.attention with static
/// heads and head size by length buckets on a static ladder, on IREE's fused
/// attention, or with materialised scores on buckets of 32 to
/// `scoresMaxRows` rows whose scores fit (see kDefaultScoresMaxRows).
void populateRaggedAttentionToIreePatterns(
    RewritePatternSet &patterns, int64_t scoresMaxRows = kDefaultScoresMaxRows);

/// The ragged ops the CPU kernel library serves (attention and its gradient,
/// segment softmax and reductions, convolution, pooling) as dispatches of
/// its kernels (ragged-cpu-kernels).
void populateCpuKernelsPatterns(RewritePatternSet &patterns);
/// Adds the kernel library's `stream.executable`, linking the object
/// `ragged_kernels_<isa>.o`, to `module` where a dispatch uses it.
void addKernelExecutable(ModuleOp module, StringRef isa);

/// Patterns expanding f64 `math.tanh` and `math.erf` into f64 `exp`, `log`
/// and arithmetic, to a few ulps (`ragged-expand-math`).
void populateExpandF64MathPatterns(RewritePatternSet &patterns);

/// Patterns reading an element of an `expand_shape` or `extract_slice`
/// from its source (`ragged-fold-view-reads`).
void populateFoldViewReadsPatterns(RewritePatternSet &patterns);

/// A generic that broadcasts one scalar as a `linalg.fill` of it
/// (`ragged-fill-splats`).
void populateFillSplatsPatterns(RewritePatternSet &patterns);

/// A generic computed from constants alone whose result is updated in place
/// reads a `false` behind a `util.optimization_barrier`
/// (`ragged-guard-in-place-updates`).
void populateGuardInPlaceUpdatesPatterns(RewritePatternSet &patterns);

/// A `linalg.fill` a reduction reads becomes a broadcast of its scalar in
/// a rank-0 tensor behind a `util.optimization_barrier`
/// (`ragged-guard-splat-reductions`).
void populateGuardSplatReductionsPatterns(RewritePatternSet &patterns);

/// Integer divisions and remainders by a value that may be 0 divide by
/// `select(divisor == 0, 1, divisor)` (`ragged-guard-integer-division`).
void populateGuardIntegerDivisionPatterns(RewritePatternSet &patterns);

/// A dynamic `extract_slice` a contraction reads is read behind a
/// `util.optimization_barrier` (`ragged-guard-contraction-slices`).
void populateGuardContractionSlicesPatterns(RewritePatternSet &patterns);
/// The input of each `tm_tensor.scan` computed in a dispatch of its own
/// (`ragged-guard-scan-inputs`).
void populateGuardScanInputsPatterns(RewritePatternSet &patterns);

/// Rewrites ops on static tensors without elements (see FoldEmptyTensorsPass).
void populateFoldEmptyTensorsPatterns(RewritePatternSet &patterns);

/// The pattern of ragged-split-dynamic-contractions: a float contraction with
/// static M and N and a dynamic K as a batch contraction over K chunks of
/// `chunk` rows (static K), then a sum of the partials.
void populateSplitDynamicContractionPatterns(RewritePatternSet &patterns,
                                             int64_t chunk);

/// The unit attribute `ragged-hint-data-tiling` puts on a module whose
/// contractions IREE's data tiling would miscompile and no hint can protect:
/// compile such a module without `--iree-opt-data-tiling`.
constexpr llvm::StringLiteral kNoDataTilingAttr = "ragged.no_data_tiling";

/// The unit attribute convert-ragged-to-linalg puts on a generic over
/// (rows or row tiles, trailing dims) that reads packed rows through a
/// per-row index: segment tile generics (SegmentTiles.h), the
/// softmax output, segment broadcasts. ragged-cpu-whole-rows gives such a
/// generic IREE CPU tile sizes that keep its rows whole.
constexpr llvm::StringLiteral kWholeRowsAttr = "ragged.whole_rows";

/// Registers the named pipelines (`ragged-to-iree-input`).
void registerRaggedPipelines();

#define GEN_PASS_REGISTRATION
#include "passes/Passes.h.inc"

} // namespace mlir::ragged

#endif // RAGGED_PASSES_PASSES_H
