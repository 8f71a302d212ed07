//===- BucketedAttention.h - attention by length buckets --------*- C++ -*-===//
//
// The bucketed lowering of ragged.attention on packed values, shared by the
// upstream lowering (convert-ragged-to-linalg: dynamic ladder, linalg
// kernel) and IREE's (ragged-attention-to-iree: static ladder, fused kernel,
// IREE's row gathers), which differ only in their `BucketKernel`.
//
//===----------------------------------------------------------------------===//

#ifndef RAGGED_PASSES_COMPUTE_BUCKETEDATTENTION_H
#define RAGGED_PASSES_COMPUTE_BUCKETEDATTENTION_H

#include "passes/Conversion/RaggedToLinalg/LoweringUtils.h"

#include <functional>
#include <optional>

namespace mlir::ragged::lowering {

/// What every bucket's attention shares.
struct AttnShape {
  bool causal;
  double scale;
  Type elem;
  /// Attention dropout: the rate, and the seed's low and high 32 bits (i32
  /// values); see ragged.attention for which weights are dropped.
  double dropout = 0.0;
  Value seedLo = {}, seedHi = {};
};

/// `dropout` and the seed's halves, read from an op's `tensor<i64>` seed
/// (null where the op does not drop).
AttnShape withDropout(OpBuilder &b, Location loc, AttnShape shape,
                      double dropout, Value seed);

/// The dropout rule's threshold for rate `dropout`: a weight is kept where
/// its 32-bit hash is at least round(p 2^32) (at most 2^32 - 1); see
/// ragged.attention.
uint32_t dropoutThreshold(double dropout);

/// In a generic over the pairs of a block, the factor of the weight of
/// item `item` (i64), head `h`, query `i` and key `j` (index): 1 / (1 - p)
/// where kept, 0 where dropped.
Value dropoutFactor(OpBuilder &b, Location loc, const AttnShape &blk,
                    Value item, Value h, Value i, Value j);

/// Rows gathered by a kernel's row gather: row i of a value is row
/// `index[i]` of `source`.
struct GatheredRows {
  Value source, index;
};

/// How a backend runs the buckets.
struct BucketKernel {
  /// Static bucket sizes, to which one bucket of max L rows is added; empty
  /// for `buckets` dynamic sizes sqrt(2) apart, ceil(maxL /
  /// sqrt(2)^(buckets-1-k)).
  ArrayRef<int64_t> staticLadder;
  int64_t buckets = 0;
  /// Dense attention on the [n, S, H, d] blocks (or [n, S, d], see
  /// `dropUnitHead`) under an [n, S] i1 key mask.
  std::function<Value(OpBuilder &, Location, Value q, Value k, Value v,
                      Value keyMask, const AttnShape &)>
      attend;
  /// A whole-row gather (`rows` [M] i64 of `source` [R, ...]), used when q,
  /// k and v are distinct; null: linalg.generic gathers.
  Value (*gatherRows)(OpBuilder &, Location, Value source,
                      Value rows) = nullptr;
  /// The source and row index of a value `gatherRows` produced (seen
  /// through reshapes), or nullopt; null: none is looked for.
  std::optional<GatheredRows> (*gatheredRows)(OpBuilder &, Location,
                                              Value) = nullptr;
  /// Operands with one head are read as [rows, d].
  bool dropUnitHead = false;
};

/// A dense computation on one bucket: the blocks [n, S, H, d] (or [n, S, d],
/// see `dropUnitHead`) of each operand, the [n, S] i1 mask of the slots
/// inside their item and the item of each block ([n] i64) give one output
/// block [n, S, ...] per result.
using BlockBody = function_ref<SmallVector<Value>(
    OpBuilder &, Location, ArrayRef<Value> blocks, Value mask, Value items)>;

/// Runs `body` by length buckets on packed operands [rows, H, x] sharing
/// `offsets` (x may differ between operands: [rows, H, 1] carries one
/// statistic per row and head) and returns `numResults` packed results
/// [rows, ...] shaped like the body's blocks (see bucketedAttention for the
/// layout). Only the ladder, the gathers and `dropUnitHead` of `kernel` are
/// used.
SmallVector<Value> bucketedRows(OpBuilder &b, Location loc,
                                ArrayRef<Value> operands, Value offsets,
                                const BucketKernel &kernel, unsigned numResults,
                                BlockBody body);

/// Attention by length buckets. Every non-empty item goes to the smallest
/// bucket that fits it; bucket k holds n_k items padded to S_k rows. Per
/// bucket, one gather reads the blocks [n_k, S_k, H, d] of q, k and v from
/// the packed rows (rows past an item's length repeat its last row: they
/// are masked as keys and dropped as queries), and dense attention runs on
/// them; the outputs, concatenated, form an output slab [sum_k n_k S_k, H,
/// d] from which one gather reads the packed rows back. Gathering per
/// bucket, rather than slicing one slab, spares IREE a copy of every slice;
/// concatenating, rather than inserting into a slab, lets IREE write each
/// output in place. The ladder and the kernel are the `BucketKernel`'s.
///
/// `q`, `k` and `v` are packed values [rows, H, d] under `offsets`; returns
/// the output values. The schedule (bucket sizes, items per bucket, read on
/// the host) is built right after `offsets` is defined, the rest at the
/// builder's insertion point.
Value bucketedAttention(OpBuilder &b, Location loc, Value q, Value k, Value v,
                        Value offsets, const AttnShape &shape,
                        const BucketKernel &kernel);

/// The gradients {dq, dk, dv} of linalgAttention's output on [n, S, H, d]
/// blocks, given the gradient `dout` of its output: rows past an item's
/// length (`mask` false) contribute nothing as queries or keys, and their
/// own gradients are 0. The probabilities are recomputed, from the
/// forward's log-sum-exp `lseBlock` [n, S, H, 1] where given (no reduction
/// over keys); with the forward's output `outBlock`, rowsum(P dP) is
/// rowsum(dO O).
/// With dropout, `items` ([n] i64) names each block's item.
SmallVector<Value> linalgAttentionGrad(OpBuilder &b, Location loc, Value qBlock,
                                       Value kBlock, Value vBlock,
                                       Value doutBlock, Value mask,
                                       const AttnShape &blk,
                                       Value outBlock = {}, Value lseBlock = {},
                                       Value items = {});

/// Upstream linalg attention over [n, S, H, d] blocks, read in place:
/// the two contractions index the blocks through their maps (batch dims
/// item and head), so no transposes are materialised, and having two
/// batch dims they stay plain contractions, which IREE tiles for the CPU
/// without data tiling (it data-tiles only single-batch contractions).
/// Scores [n, H, S, S] are materialised; masked keys get -inf. Returns the
/// output block and, with `lse`, the log-sum-exp of each query slot's
/// logits [n, S, H, 1] (ragged.attention's `lse` result). With dropout,
/// `items` ([n] i64) names each block's item.
SmallVector<Value> linalgAttention(OpBuilder &b, Location loc, Value qBlock,
                                   Value kBlock, Value vBlock, Value keyMask,
                                   const AttnShape &blk, bool lse,
                                   Value items = {});

} // namespace mlir::ragged::lowering

#endif // RAGGED_PASSES_COMPUTE_BUCKETEDATTENTION_H
