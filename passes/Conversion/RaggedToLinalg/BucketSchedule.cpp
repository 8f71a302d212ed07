//===- BucketSchedule.cpp - attention by length buckets: the schedule -----===//
//
// See BucketedAttention.h. Schedule: each non-empty item's bucket, the items
// per bucket (read on the host: they size the blocks), each item's first
// output-slab row and the item at each rank, all from the offsets alone;
// the gathers of each bucket's blocks and of the packed rows back. The
// dense kernels on one bucket's blocks, and their dropout factors, are in
// BlockAttention.cpp.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/RaggedToLinalg/BucketedAttention.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::ragged;
using namespace mlir::ragged::lowering;

namespace {

/// Where the blocks lie. Host values: counts[k] = n_k, firsts[k] = sum
/// over j < k of n_j, bases[k] = the first output-slab row of bucket k (sum
/// over j < k of n_j S_j), slabRows = all of them. Device tensors:
/// itemAt[j], the j-th non-empty item in (bucket, batch) order, and
/// slabStart[b], the first output-slab row of item b.
struct Layout {
  SmallVector<Value> counts, firsts, bases;
  Value slabRows;
  Value itemAt, slabStart;
  /// [K] i64 tables: the first output-slab row of bucket k (sum over j < k
  /// of n_j S_j), firsts and the sizes S_k. slabStart and itemAt read them
  /// rather than host values: captured scalars become push constants, and
  /// three tables of 13 buckets exceed IREE's CPU limit of 64 per dispatch.
  Value baseTable, firstTable, sizeTable;
};

/// The last bucket k whose entry table[k] ([K] i64) is at most `x` (i64),
/// bucket 0 if none: with first ranks or first slab rows, the bucket holding
/// rank or slab row `x` (an empty bucket starts where the next one does).
Value lastBucketAtOrBefore(OpBuilder &b, Location loc, Value table, Value x,
                           int64_t numBuckets) {
  Value bucket = constIndex(b, loc, 0);
  for (int64_t kk = 1; kk < numBuckets; ++kk) {
    Value kkIndex = constIndex(b, loc, kk);
    Value reached = arith::CmpIOp::create(
        b, loc, arith::CmpIPredicate::sle,
        tensor::ExtractOp::create(b, loc, table, kkIndex), x);
    bucket = arith::SelectOp::create(b, loc, reached, kkIndex, bucket);
  }
  return bucket;
}

Layout layout(OpBuilder &b, Location loc, Value lo, Value hi,
              ArrayRef<Value> sizes) {
  Type i64 = b.getI64Type();
  int64_t numBuckets = sizes.size();
  Value numItems = dimOf(b, loc, lo, 0);
  AffineMap id1 = b.getMultiDimIdentityMap(1);
  Value itemInit = emptyTensor(b, loc, {ShapedType::kDynamic}, i64, {numItems});
  // Bucket of each item, -1 when empty.
  Value bucketOf = parallelGeneric(
      b, loc, itemInit, {lo, hi}, {id1, id1},
      [&](OpBuilder &nb, Location l, ValueRange a) {
        Value len = arith::IndexCastOp::create(
            nb, l, nb.getIndexType(), arith::SubIOp::create(nb, l, a[1], a[0]));
        Value bucket = constIndex(nb, l, numBuckets - 1);
        for (int64_t kk = numBuckets - 2; kk >= 0; --kk) {
          Value fits = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ule,
                                             len, sizes[kk]);
          bucket = arith::SelectOp::create(nb, l, fits, constIndex(nb, l, kk),
                                           bucket);
        }
        Value empty = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                            len, constIndex(nb, l, 0));
        bucket = arith::SelectOp::create(nb, l, empty, constIndex(nb, l, -1),
                                         bucket);
        return arith::IndexCastOp::create(nb, l, nb.getI64Type(), bucket);
      });
  // A stable counting sort of the non-empty items by bucket, in two levels
  // so that no work is quadratic in the batch: the exclusive prefix over
  // chunks of each bucket's items per chunk ([chunks + 1, K]; its last row is
  // the items per bucket), then every rank and every item at a rank from its
  // chunk's prefix and a walk within the chunk.
  Value chunks = numScanChunks(b, loc, numItems);
  auto zero = [&](OpBuilder &nb, Location l) -> Value {
    return arith::ConstantIntOp::create(nb, l, i64, 0);
  };
  auto inBucket = [&](OpBuilder &nb, Location l, Value j,
                      Value bucket) -> Value {
    return arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                 tensor::ExtractOp::create(nb, l, bucketOf, j),
                                 bucket);
  };
  auto asI64 = [&](OpBuilder &nb, Location l, Value index) -> Value {
    return arith::IndexCastOp::create(nb, l, i64, index);
  };
  Value chunkFirst =
      chunkPrefix(b, loc, numItems, numBuckets,
                  [&](OpBuilder &nb, Location l, Value j, Value k) -> Value {
                    return arith::ExtUIOp::create(
                        nb, l, i64, inBucket(nb, l, j, asI64(nb, l, k)));
                  });
  // Items per bucket, read on the host: they size the blocks.
  Layout lay;
  Value first = constIndex(b, loc, 0), base = constIndex(b, loc, 0);
  for (int64_t kk = 0; kk < numBuckets; ++kk) {
    Value n = loadIndex(b, loc, chunkFirst,
                        ValueRange{chunks, constIndex(b, loc, kk)});
    lay.counts.push_back(n);
    lay.firsts.push_back(first);
    lay.bases.push_back(base);
    first = arith::AddIOp::create(b, loc, first, n);
    base = arith::AddIOp::create(b, loc, base,
                                 arith::MulIOp::create(b, loc, n, sizes[kk]));
  }
  lay.slabRows = base;
  // The tables, computed on the device from the counts (the generic
  // captures only the sizes and the chunk count). Built from host values
  // (tensor.from_elements), they cost IREE a fill dispatch per entry: 37
  // per attention on the static ladder.
  Value tableInit = emptyTensor(b, loc, {numBuckets}, i64, {});
  SmallVector<Value> tables = parallelGeneric(
      b, loc, {tableInit, tableInit, tableInit}, {}, {},
      [&](OpBuilder &nb, Location l, ValueRange) {
        Value k = linalg::IndexOp::create(nb, l, 0);
        Value base = zero(nb, l), firstRank = zero(nb, l), size = zero(nb, l);
        for (int64_t kk = 0; kk < numBuckets; ++kk) {
          Value kkIndex = constIndex(nb, l, kk);
          Value s = asI64(nb, l, sizes[kk]);
          Value n = tensor::ExtractOp::create(nb, l, chunkFirst,
                                              ValueRange{chunks, kkIndex});
          Value before = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ult,
                                               kkIndex, k);
          base = arith::SelectOp::create(
              nb, l, before,
              arith::AddIOp::create(nb, l, base,
                                    arith::MulIOp::create(nb, l, n, s)),
              base);
          firstRank = arith::SelectOp::create(
              nb, l, before, arith::AddIOp::create(nb, l, firstRank, n),
              firstRank);
          Value here = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                             kkIndex, k);
          size = arith::SelectOp::create(nb, l, here, s, size);
        }
        return SmallVector<Value>{base, firstRank, size};
      });
  lay.baseTable = tables[0];
  lay.firstTable = tables[1];
  lay.sizeTable = tables[2];
  // Each item's first slab row: bases[k] + (its rank within bucket k) * S_k,
  // the rank being the chunk's prefix plus the bucket's items before it in
  // the chunk. Empty items own no slab rows; they read bucket 0's tables.
  lay.slabStart = parallelGeneric(
      b, loc, itemInit, {bucketOf}, {id1},
      [&](OpBuilder &nb, Location l, ValueRange a) {
        Value item = linalg::IndexOp::create(nb, l, 0);
        Value empty = arith::CmpIOp::create(nb, l, arith::CmpIPredicate::slt,
                                            a[0], zero(nb, l));
        Value bucket = arith::IndexCastOp::create(
            nb, l, nb.getIndexType(),
            arith::MaxSIOp::create(nb, l, a[0], zero(nb, l)));
        Value c =
            arith::DivUIOp::create(nb, l, item, constIndex(nb, l, kScanChunk));
        // The bucket's items before this one in its chunk.
        Value before = sumTerms(
            nb, l, scanChunk(nb, l, c, numItems).first, item, zero(nb, l),
            [&](OpBuilder &lb, Location ll, Value j) -> Value {
              return arith::ExtUIOp::create(lb, ll, i64,
                                            inBucket(lb, ll, j, a[0]));
            });
        Value rank = arith::AddIOp::create(
            nb, l,
            tensor::ExtractOp::create(nb, l, chunkFirst, ValueRange{c, bucket}),
            before);
        rank = arith::SelectOp::create(nb, l, empty, zero(nb, l), rank);
        auto at = [&](Value t) {
          return tensor::ExtractOp::create(nb, l, t, ValueRange{bucket})
              .getResult();
        };
        return arith::AddIOp::create(
            nb, l, at(lay.baseTable),
            arith::MulIOp::create(nb, l, rank, at(lay.sizeTable)));
      });
  // The item at rank j: its bucket k (the last with firsts[k] <= j, never an
  // empty one), the chunk holding the bucket's (j - firsts[k])-th item (the
  // last whose prefix is at most that), and a walk within the chunk.
  lay.itemAt = parallelGeneric(
      b, loc, emptyTensor(b, loc, {ShapedType::kDynamic}, i64, {first}), {}, {},
      [&](OpBuilder &nb, Location l, ValueRange) {
        Value j = asI64(nb, l, linalg::IndexOp::create(nb, l, 0));
        Value bucket =
            lastBucketAtOrBefore(nb, l, lay.firstTable, j, numBuckets);
        Value bucket64 = arith::IndexCastOp::create(nb, l, i64, bucket);
        Value r = arith::SubIOp::create(
            nb, l, j, tensor::ExtractOp::create(nb, l, lay.firstTable, bucket));
        auto prefix = [&](OpBuilder &sb, Location sl, Value c) -> Value {
          return tensor::ExtractOp::create(sb, sl, chunkFirst,
                                           ValueRange{c, bucket});
        };
        Value c = searchLast(
            nb, l, constIndex(nb, l, 0),
            arith::SubIOp::create(nb, l, chunks, constIndex(nb, l, 1)),
            [&](OpBuilder &sb, Location sl, Value mid) -> Value {
              return arith::CmpIOp::create(sb, sl, arith::CmpIPredicate::sle,
                                           prefix(sb, sl, mid), r);
            });
        Value want = arith::SubIOp::create(nb, l, r, prefix(nb, l, c));
        auto [from, to] = scanChunk(nb, l, c, numItems);
        // Carries (items of the bucket seen, the item found).
        return forLoop(
            nb, l, from, to, {zero(nb, l), zero(nb, l)},
            [&](OpBuilder &lb, Location ll, Value i, ValueRange acc) {
              Value hit = inBucket(lb, ll, i, bucket64);
              Value isWanted = arith::AndIOp::create(
                  lb, ll, hit,
                  arith::CmpIOp::create(lb, ll, arith::CmpIPredicate::eq,
                                        acc[0], want));
              Value i64Item = arith::IndexCastOp::create(lb, ll, i64, i);
              return SmallVector<Value>{
                  arith::AddIOp::create(
                      lb, ll, acc[0], arith::ExtUIOp::create(lb, ll, i64, hit)),
                  arith::SelectOp::create(lb, ll, isWanted, i64Item, acc[1])};
            })[1];
      });
  return lay;
}

/// Indices of `values` grouped by type, in first-seen order.
SmallVector<SmallVector<unsigned>> sameTypeGroups(ArrayRef<Value> values) {
  SmallVector<SmallVector<unsigned>> groups;
  for (auto [i, value] : llvm::enumerate(values)) {
    auto group = llvm::find_if(groups, [&](ArrayRef<unsigned> g) {
      return values[g.front()].getType() == value.getType();
    });
    if (group == groups.end())
      groups.push_back({unsigned(i)});
    else
      group->push_back(i);
  }
  return groups;
}

} // namespace

SmallVector<Value> lowering::bucketedRows(OpBuilder &rewriter, Location loc,
                                          ArrayRef<Value> operands,
                                          Value offsets,
                                          const BucketKernel &kernel,
                                          unsigned numResults, BlockBody body) {
  Type i64 = rewriter.getI64Type();
  Value first0 = operands.front();
  auto valuesType = cast<RankedTensorType>(first0.getType());
  Type elem = valuesType.getElementType();
  OpBuilder::InsertPoint here = rewriter.saveInsertionPoint();

  // The schedule (bucket sizes, items per bucket, read on the host)
  // depends on the offsets alone: it is computed where they are defined,
  // so that the host reads it before any work is queued. Computed at the
  // attention, the read would split the work before and after it into two
  // submissions, each with its own transient memory.
  OpBuilder::InsertionGuard guard(rewriter);
  rewriter.setInsertionPointAfterValue(offsets);
  auto [lo, hi] = segmentBounds(rewriter, loc, offsets);
  Value maxLen = maxSegmentLength(rewriter, loc, offsets);
  // Bucket sizes: static where known, and as values.
  SmallVector<int64_t> staticSizes;
  SmallVector<Value> sizes;
  if (!kernel.staticLadder.empty()) {
    for (int64_t s : kernel.staticLadder) {
      staticSizes.push_back(s);
      sizes.push_back(constIndex(rewriter, loc, s));
    }
    staticSizes.push_back(ShapedType::kDynamic);
    sizes.push_back(maxLen);
  } else {
    // Sizes sqrt(2) apart, in fixed point: ceil(maxL * m_j / 2^30) with
    // m_j = 2^30 / sqrt(2)^j, j = 0 for the largest bucket.
    constexpr int64_t one = int64_t(1) << 30;
    for (int64_t kk = 0; kk < kernel.buckets; ++kk) {
      int64_t j = kernel.buckets - 1 - kk;
      staticSizes.push_back(ShapedType::kDynamic);
      if (j == 0) {
        sizes.push_back(maxLen);
        continue;
      }
      int64_t m = std::llround(std::ldexp(std::pow(2.0, -0.5 * double(j)), 30));
      Value scaled = arith::MulIOp::create(rewriter, loc, maxLen,
                                           constIndex(rewriter, loc, m));
      sizes.push_back(arith::CeilDivUIOp::create(
          rewriter, loc, scaled, constIndex(rewriter, loc, one)));
    }
  }
  Layout lay = layout(rewriter, loc, lo, hi, sizes);
  rewriter.restoreInsertionPoint(here);
  // The kernel's row gathers, for distinct operands only (a shared operand
  // is one linalg gather, one block).
  bool distinct = true;
  for (size_t i = 0; i < operands.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      distinct &= operands[i] != operands[j];
  bool rowGathers = kernel.gatherRows && distinct;
  // With `dropUnitHead`, one head reads [rows, d] views of the values.
  bool dropHead = kernel.dropUnitHead && valuesType.getDimSize(1) == 1;
  SmallVector<ReassociationIndices> headOf{{0}, {1, 2}};
  SmallVector<std::pair<Value, Value>> views;
  auto rowsOf = [&](Value values) -> Value {
    if (!dropHead)
      return values;
    for (auto [from, to] : views)
      if (from == values)
        return to;
    Value view = tensor::CollapseShapeOp::create(rewriter, loc, values, headOf);
    views.push_back({values, view});
    return view;
  };
  SmallVector<Value> rowValues;
  for (Value operand : operands)
    rowValues.push_back(rowsOf(operand));
  // An operand that is itself rows gathered by the kernel (the last step
  // of another attention) is read from that gather's source through the
  // composed row index.
  SmallVector<std::optional<GatheredRows>> rerouted(operands.size());
  if (rowGathers && kernel.gatheredRows)
    for (auto [i, operand] : llvm::enumerate(rowValues))
      rerouted[i] = kernel.gatheredRows(rewriter, loc, operand);
  // Dims of a row ([H, d], or [d] for a dropped head): every operand and
  // result has the same number, not always the same sizes (a per-head
  // statistic is [H, 1]).
  Value rowShaped = rowValues.front();
  unsigned rowRank = cast<RankedTensorType>(rowShaped.getType()).getRank() - 1;
  // [n, S] then each row dim: how blocks and rows reshape into each other.
  SmallVector<ReassociationIndices> slotsThenRow{{0, 1}};
  for (unsigned i = 0; i < rowRank; ++i)
    slotsThenRow.push_back({i + 2});

  // The first row and the length of the item at rank `rank` (in bucket
  // order); the row `i` of it that a block reads (rows past the item's end
  // repeat its last row), and whether `i` lies inside the item.
  auto rankedItem = [&](OpBuilder &b, Location l, Value rank) {
    Value item = loadIndex(b, l, lay.itemAt, ValueRange{rank});
    Value start = loadIndex(b, l, lo, item);
    return std::make_pair(
        start, arith::SubIOp::create(b, l, loadIndex(b, l, hi, item), start)
                   .getResult());
  };
  auto itemRow = [&](OpBuilder &b, Location l, Value rank, Value i) {
    auto [start, len] = rankedItem(b, l, rank);
    Value last = arith::SubIOp::create(b, l, len, constIndex(b, l, 1));
    Value row = arith::AddIOp::create(b, l, start,
                                      arith::MinUIOp::create(b, l, i, last));
    Value valid =
        arith::CmpIOp::create(b, l, arith::CmpIPredicate::ult, i, len);
    return std::make_pair(row, valid);
  };

  // With the kernel's row gathers, the source row and key mask of every
  // slot of every bucket come from one generic over the slab's slots (slot
  // s of bucket k lies at slab row baseTable[k] + s); each bucket reads its
  // part as a slice. One generic per bucket of static size S was one more
  // executable for IREE to compile per rung of the ladder.
  Value slotRows, slotMask;
  if (rowGathers) {
    Value init64 =
        emptyTensor(rewriter, loc, {ShapedType::kDynamic}, i64, {lay.slabRows});
    Value init1 = emptyTensor(rewriter, loc, {ShapedType::kDynamic},
                              rewriter.getI1Type(), {lay.slabRows});
    auto table = linalg::GenericOp::create(
        rewriter, loc, TypeRange{init64.getType(), init1.getType()},
        ValueRange{}, ValueRange{init64, init1},
        SmallVector<AffineMap>(2, rewriter.getMultiDimIdentityMap(1)),
        SmallVector<utils::IteratorType>{utils::IteratorType::parallel},
        [&](OpBuilder &b, Location l, ValueRange) {
          Value slot = arith::IndexCastOp::create(
              b, l, i64, linalg::IndexOp::create(b, l, 0));
          Value bucket =
              lastBucketAtOrBefore(b, l, lay.baseTable, slot, sizes.size());
          auto at = [&](Value t) {
            return arith::IndexCastOp::create(
                       b, l, b.getIndexType(),
                       tensor::ExtractOp::create(b, l, t, bucket))
                .getResult();
          };
          Value local = arith::SubIOp::create(
              b, l, arith::IndexCastOp::create(b, l, b.getIndexType(), slot),
              at(lay.baseTable));
          Value size = at(lay.sizeTable);
          Value rank =
              arith::AddIOp::create(b, l, at(lay.firstTable),
                                    arith::DivUIOp::create(b, l, local, size));
          auto [row, valid] =
              itemRow(b, l, rank, arith::RemUIOp::create(b, l, local, size));
          linalg::YieldOp::create(
              b, l,
              ValueRange{arith::IndexCastOp::create(b, l, i64, row), valid});
        });
    slotRows = table.getResult(0);
    slotMask = table.getResult(1);
  }

  // Each bucket's blocks [n, S, H, d] come from one gather of the packed
  // rows (rows past an item's length repeat its last row: the body masks
  // them), the body runs on them, and each of its results, as rows, is the
  // next part of that result's slab.
  SmallVector<SmallVector<Value>> outBlocks(numResults);
  for (size_t kk = 0; kk < sizes.size(); ++kk) {
    // Dynamic sizes of the [n, S] slot tensors; the [n, S, H, d] block of
    // rows like `rows`.
    SmallVector<Value> dyn2{lay.counts[kk]};
    if (ShapedType::isDynamic(staticSizes[kk]))
      dyn2.push_back(sizes[kk]);
    auto blockOf = [&](Value rows) {
      auto rowType = cast<RankedTensorType>(rows.getType());
      SmallVector<int64_t> shape{ShapedType::kDynamic, staticSizes[kk]};
      llvm::append_range(shape, rowType.getShape().drop_front());
      SmallVector<Value> dyn = dyn2;
      for (unsigned i = 1; i <= rowRank; ++i)
        if (rowType.isDynamicDim(i))
          dyn.push_back(dimOf(rewriter, loc, rows, i));
      return std::make_pair(RankedTensorType::get(shape, elem), dyn);
    };
    Value first = lay.firsts[kk];
    // The same for the item in slot `slot` of this bucket.
    auto slotItem = [&](OpBuilder &b, Location l, Value slot) {
      return rankedItem(b, l, arith::AddIOp::create(b, l, first, slot));
    };
    auto slotRow = [&](OpBuilder &b, Location l, Value slot, Value i) {
      return itemRow(b, l, arith::AddIOp::create(b, l, first, slot), i);
    };
    auto slotInit = [&](Type type) {
      return emptyTensor(rewriter, loc, {ShapedType::kDynamic, staticSizes[kk]},
                         type, dyn2);
    };
    SmallVector<Value> blocks;
    Value mask;
    if (rowGathers) {
      // This bucket's slots of the slot tables, then IREE's row gathers:
      // IREE flattens a linalg.generic gather to one loop over elements,
      // with index arithmetic and a scalar load for each.
      Value numSlots =
          arith::MulIOp::create(rewriter, loc, lay.counts[kk], sizes[kk]);
      auto slice = [&](Value table) {
        return tensor::ExtractSliceOp::create(
                   rewriter, loc, table, ArrayRef<OpFoldResult>{lay.bases[kk]},
                   ArrayRef<OpFoldResult>{numSlots},
                   ArrayRef<OpFoldResult>{rewriter.getIndexAttr(1)})
            .getResult();
      };
      Value slots = slice(slotRows);
      auto maskType = RankedTensorType::get(
          {ShapedType::kDynamic, staticSizes[kk]}, rewriter.getI1Type());
      mask = tensor::ExpandShapeOp::create(
          rewriter, loc, maskType, slice(slotMask),
          SmallVector<ReassociationIndices>{{0, 1}},
          ArrayRef<OpFoldResult>{lay.counts[kk], getAsOpFoldResult(sizes[kk])});
      auto block = [&](Value operand,
                       const std::optional<GatheredRows> &rows) -> Value {
        SmallVector<OpFoldResult> blockSizes{lay.counts[kk],
                                             getAsOpFoldResult(sizes[kk])};
        llvm::append_range(
            blockSizes, ArrayRef(tensor::getMixedSizes(rewriter, loc, operand))
                            .drop_front());
        Value gathered;
        if (rows) {
          // Slot j reads row index[slots[j]] of the earlier gather's source.
          AffineMap id1 = rewriter.getMultiDimIdentityMap(1);
          Value composed = parallelGeneric(
              rewriter, loc, emptyLike(rewriter, loc, slots), {slots}, {id1},
              [&](OpBuilder &b, Location l, ValueRange a) {
                Value at =
                    arith::IndexCastOp::create(b, l, b.getIndexType(), a[0]);
                return tensor::ExtractOp::create(b, l, rows->index, at)
                    .getResult();
              });
          gathered = kernel.gatherRows(rewriter, loc, rows->source, composed);
        } else {
          gathered = kernel.gatherRows(rewriter, loc, operand, slots);
        }
        return tensor::ExpandShapeOp::create(rewriter, loc,
                                             blockOf(operand).first, gathered,
                                             slotsThenRow, blockSizes)
            .getResult();
      };
      for (auto [operand, rows] : llvm::zip(rowValues, rerouted))
        blocks.push_back(block(operand, rows));
    } else {
      // One gather of the blocks of each row shape, or, when operands are
      // shared, one gather per distinct source: a shared operand is one
      // block. IREE merges results that yield the same value, and fails on
      // a gather one of whose several results feeds two operands of its
      // attention ('linalg.yield' op expected number of yield values (2) to
      // match ... (1)).
      SmallVector<Value> sources;
      for (Value source : rowValues)
        if (!llvm::is_contained(sources, source))
          sources.push_back(source);
      unsigned loops = rowRank + 2;
      auto gather = [&](ArrayRef<Value> from) {
        auto [blockType, dynBlock] = blockOf(from.front());
        Value init =
            emptyTensor(rewriter, loc, blockType.getShape(), elem, dynBlock);
        return linalg::GenericOp::create(
                   rewriter, loc, SmallVector<Type>(from.size(), blockType),
                   ValueRange{}, SmallVector<Value>(from.size(), init),
                   SmallVector<AffineMap>(
                       from.size(), rewriter.getMultiDimIdentityMap(loops)),
                   SmallVector<utils::IteratorType>(
                       loops, utils::IteratorType::parallel),
                   [&](OpBuilder &b, Location l, ValueRange) {
                     SmallVector<Value> at{
                         slotRow(b, l, linalg::IndexOp::create(b, l, 0),
                                 linalg::IndexOp::create(b, l, 1))
                             .first};
                     for (unsigned i = 2; i < loops; ++i)
                       at.push_back(linalg::IndexOp::create(b, l, i));
                     SmallVector<Value> read;
                     for (Value source : from)
                       read.push_back(
                           tensor::ExtractOp::create(b, l, source, at));
                     linalg::YieldOp::create(b, l, read);
                   })
            .getResults();
      };
      SmallVector<Value> gathered(sources.size());
      if (sources.size() == rowValues.size()) {
        for (SmallVector<unsigned> group : sameTypeGroups(sources)) {
          SmallVector<Value> from;
          for (unsigned i : group)
            from.push_back(sources[i]);
          for (auto [i, result] : llvm::zip(group, gather(from)))
            gathered[i] = result;
        }
      } else {
        for (auto [i, source] : llvm::enumerate(sources))
          gathered[i] = gather(source).front();
      }
      for (Value operand : rowValues)
        blocks.push_back(
            gathered[llvm::find(sources, operand) - sources.begin()]);
      // The key mask [n, S] compares each slot with its item's length, read
      // from a table [n] that a reduction makes (the count of valid slots
      // of each slot row). IREE fuses an elementwise producer into every
      // consumer, and the mask's consumers run over all [n, H, S, S] pairs:
      // a parallel table would look up the item and its offsets per pair (at
      // RACE lengths, 80 of a layer's 300 ms); a reduction stays a dispatch
      // of its own, so the pairs read one length per slot row through their
      // indexing maps.
      MLIRContext *ctx = rewriter.getContext();
      AffineMap slotOf = AffineMap::get(2, 0, {getAffineDimExpr(0, ctx)}, ctx);
      Value lenInit =
          linalg::FillOp::create(
              rewriter, loc,
              arith::ConstantIntOp::create(rewriter, loc, 0, 64).getResult(),
              emptyTensor(rewriter, loc, {ShapedType::kDynamic}, i64,
                          {lay.counts[kk]}))
              .getResult(0);
      // The item's length per slot [n] is looked up once per slot row, and
      // the reduction only compares it with the slot index: with the
      // lookups inside the reduction, IREE vectorised them as gathers over
      // [n, S] tiles and took 5 s to compile each bucket's reduction.
      Value slotLen = parallelGeneric(
          rewriter, loc,
          emptyTensor(rewriter, loc, {ShapedType::kDynamic}, i64,
                      {lay.counts[kk]}),
          {}, {}, [&](OpBuilder &b, Location l, ValueRange) {
            Value len = slotItem(b, l, linalg::IndexOp::create(b, l, 0)).second;
            return arith::IndexCastOp::create(b, l, b.getI64Type(), len)
                .getResult();
          });
      // (The empty [n, S] input only gives the loops their extents. Of i64,
      // the accumulator's type: IREE 3.13's CUDA codegen fails to
      // distribute this reduction over an i1 input, "failed to distribute".)
      Value lens = structured(
          rewriter, loc, lenInit, {slotInit(i64), slotLen},
          {rewriter.getMultiDimIdentityMap(2), slotOf, slotOf},
          {utils::IteratorType::parallel, utils::IteratorType::reduction},
          [&](OpBuilder &b, Location l, ValueRange a) {
            Value slot = arith::IndexCastOp::create(
                b, l, b.getI64Type(), linalg::IndexOp::create(b, l, 1));
            Value valid = arith::CmpIOp::create(b, l, arith::CmpIPredicate::ult,
                                                slot, a[1]);
            return arith::AddIOp::create(
                       b, l, a[2],
                       arith::ExtUIOp::create(b, l, b.getI64Type(), valid))
                .getResult();
          });
      mask = parallelGeneric(
          rewriter, loc, slotInit(rewriter.getI1Type()), {lens}, {slotOf},
          [&](OpBuilder &b, Location l, ValueRange a) {
            Value slot = arith::IndexCastOp::create(
                b, l, b.getI64Type(), linalg::IndexOp::create(b, l, 1));
            return arith::CmpIOp::create(b, l, arith::CmpIPredicate::ult, slot,
                                         a[0])
                .getResult();
          });
    }
    // The item of each block.
    Value items = parallelGeneric(
        rewriter, loc,
        emptyTensor(rewriter, loc, {ShapedType::kDynamic}, i64,
                    {lay.counts[kk]}),
        {}, {}, [&](OpBuilder &b, Location l, ValueRange) {
          Value rank = arith::AddIOp::create(b, l, first,
                                             linalg::IndexOp::create(b, l, 0));
          return tensor::ExtractOp::create(b, l, lay.itemAt, ValueRange{rank})
              .getResult();
        });
    SmallVector<Value> outs = body(rewriter, loc, blocks, mask, items);
    assert(outs.size() == numResults &&
           "block body returned the wrong number of results");
    for (auto [slab, out] : llvm::zip(outBlocks, outs))
      slab.push_back(
          tensor::CollapseShapeOp::create(rewriter, loc, out, slotsThenRow));
  }
  SmallVector<Value> slabs;
  for (ArrayRef<Value> parts : outBlocks)
    slabs.push_back(tensor::ConcatOp::create(rewriter, loc, /*dim=*/0, parts));

  // Back to packed rows: row r of item b is slab row slabStart[b] + r - lo[b].
  // The table has one entry more than there are rows: see the linalg gather.
  Value rows = dimOf(rewriter, loc, first0, 0);
  Value tableRows = rowGathers
                        ? rows
                        : arith::AddIOp::create(rewriter, loc, rows,
                                                constIndex(rewriter, loc, 1));
  Value slabRow = parallelGeneric(
      rewriter, loc,
      emptyTensor(rewriter, loc, {ShapedType::kDynamic}, i64, {tableRows}), {},
      {}, [&](OpBuilder &b, Location l, ValueRange) {
        Value r = linalg::IndexOp::create(b, l, 0);
        Value item = findSegment(b, l, offsets, r);
        Value at = arith::AddIOp::create(
            b, l, loadIndex(b, l, lay.slabStart, item),
            arith::SubIOp::create(b, l, r, loadIndex(b, l, lo, item)));
        return arith::IndexCastOp::create(b, l, b.getI64Type(), at);
      });
  SmallVector<Value> results(numResults);
  if (rowGathers) {
    for (auto [result, slab] : llvm::zip(results, slabs))
      result = kernel.gatherRows(rewriter, loc, slab, slabRow);
  } else {
    // One gather per row shape of the results. The row table goes in as
    // RowSegments' tables do (its first `rows` entries an operand mapped by
    // row), so that IREE keeps the row dim apart from the row's own dims:
    // with identity maps only it collapses them into one, and each element
    // divides to find its row. At MNLI lengths the gather runs 2-6x faster.
    RowSegments slabRows = rowTable(rewriter, loc, slabRow, rows, /*rank=*/2);
    // Rows are read flat, [rows, H * d].
    SmallVector<ReassociationIndices> flat{{0}, {}};
    for (unsigned i = 1; i <= rowRank; ++i)
      flat.back().push_back(i);
    for (SmallVector<unsigned> group : sameTypeGroups(slabs)) {
      SmallVector<Value> flatSlabs;
      for (unsigned i : group)
        flatSlabs.push_back(rowRank == 1 ? slabs[i]
                                         : tensor::CollapseShapeOp::create(
                                               rewriter, loc, slabs[i], flat)
                                               .getResult());
      Value init = emptyRows(rewriter, loc, rows, flatSlabs.front());
      SmallVector<Value> read = parallelGeneric(
          rewriter, loc, SmallVector<Value>(group.size(), init),
          {slabRows.operand}, {slabRows.map},
          [&](OpBuilder &b, Location l, ValueRange a) {
            Value at = slabRows.at(b, l, linalg::IndexOp::create(b, l, 0));
            SmallVector<Value> read;
            for (Value slab : flatSlabs) {
              Value v = tensor::ExtractOp::create(
                  b, l, slab, ValueRange{at, linalg::IndexOp::create(b, l, 1)});
              read.push_back(slabRows.keep(b, l, a[0], v));
            }
            return read;
          });
      for (auto [i, result] : llvm::zip(group, read)) {
        if (rowRank == 1) {
          results[i] = result;
          continue;
        }
        auto type = cast<RankedTensorType>(slabs[i].getType());
        SmallVector<int64_t> shape(type.getShape());
        shape.front() = ShapedType::kDynamic;
        SmallVector<OpFoldResult> sizes =
            tensor::getMixedSizes(rewriter, loc, slabs[i]);
        sizes.front() = rows;
        results[i] = tensor::ExpandShapeOp::create(
            rewriter, loc, RankedTensorType::get(shape, type.getElementType()),
            result, flat, sizes);
      }
    }
  }
  if (dropHead)
    for (Value &out : results) {
      auto type = cast<RankedTensorType>(out.getType());
      SmallVector<int64_t> shape{type.getDimSize(0), 1};
      llvm::append_range(shape, type.getShape().drop_front());
      SmallVector<OpFoldResult> outSizes =
          tensor::getMixedSizes(rewriter, loc, out);
      outSizes.insert(outSizes.begin() + 1, rewriter.getIndexAttr(1));
      out = tensor::ExpandShapeOp::create(
          rewriter, loc, RankedTensorType::get(shape, type.getElementType()),
          out, headOf, outSizes);
    }
  return results;
}

Value lowering::bucketedAttention(OpBuilder &b, Location loc, Value q, Value k,
                                  Value v, Value offsets,
                                  const AttnShape &shape,
                                  const BucketKernel &kernel) {
  return bucketedRows(b, loc, {q, k, v}, offsets, kernel, 1,
                      [&](OpBuilder &nb, Location l, ArrayRef<Value> blocks,
                          Value mask, Value) {
                        return SmallVector<Value>{
                            kernel.attend(nb, l, blocks[0], blocks[1],
                                          blocks[2], mask, shape)};
                      })
      .front();
}
