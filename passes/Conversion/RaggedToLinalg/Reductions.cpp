//===- Reductions.cpp - reductions over segments --------------------------===//
//
// A reduction over a ragged dim becomes a fixed number of linalg.generics:
// by default two levels over row tiles (SegmentTiles.h), or with
// balance-tile=0 one generic over the segments that loops over each
// segment's rows. Empty segments give the op's `empty` value.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/RaggedToLinalg/PopulatePatterns.h"

#include "passes/Conversion/RaggedToLinalg/LoweringUtils.h"
#include "passes/Conversion/RaggedToLinalg/SegmentTiles.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <limits>

using namespace mlir;
using namespace mlir::ragged;
using namespace mlir::ragged::lowering;

namespace {

/// `combine` for one kind, as a fold step.
auto combineKind(ReduceKind kind) {
  return [kind](OpBuilder &b, Location loc, Value acc, Value v) {
    return reduceCombine(b, loc, kind, acc, v);
  };
}

struct ReduceLowering : OpConversionPattern<ReduceOp> {
  ReduceLowering(const TypeConverter &converter, MLIRContext *ctx,
                 const RaggedLoweringOptions &options)
      : OpConversionPattern(converter, ctx), options(options) {}

  LogicalResult
  matchAndRewrite(ReduceOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Packed x = unpack(op.getSource(), adaptor.getSource());
    if (x.type.getEncoding() != Encoding::offsets)
      return unsupported(op, "only the 'offsets' encoding is lowered");
    // The reduced dim is the innermost level: its offsets are the segments.
    Value offsets = x.partitions.back();
    Type elem = x.type.getElementType();
    ReduceKind kind = op.getKind();
    Value empty = op.getEmpty()
                      ? Value(arith::ConstantOp::create(
                            rewriter, loc, cast<TypedAttr>(*op.getEmpty())))
                      : floatConst(rewriter, loc, elem, 0.0);
    Value out =
        options.balanceTile > 0
            ? reduceTiled(rewriter, loc, x.values, offsets, kind, empty)
            : reducePerSegment(rewriter, loc, x.values, offsets, kind, empty);
    Type resultType = op.getType();
    if (auto dense = dyn_cast<RankedTensorType>(resultType)) {
      if (out.getType() != dense)
        out = tensor::CastOp::create(rewriter, loc, dense, out);
      rewriter.replaceOp(op, out);
      return success();
    }
    SmallVector<Value> parts(ArrayRef<Value>(x.partitions).drop_back());
    rewriter.replaceOpWithMultiple(
        op, {Packed{cast<RaggedTensorType>(resultType), out, parts}.flatten(
                rewriter, loc)});
    return success();
  }

private:
  /// Rows of every segment reduced in one tile generic (the tile's rows
  /// combined pairwise, slots past its end replaced by the identity), then
  /// each segment's tile results combined in order.
  Value reduceTiled(OpBuilder &b, Location loc, Value values, Value offsets,
                    ReduceKind kind, Value empty) const {
    Type elem = cast<RankedTensorType>(values.getType()).getElementType();
    compute::SegmentTiles tiles(b, loc, offsets, values, options.balanceTile);
    Value partials =
        tiles
            .mapTiles(
                b, loc, {elem}, {}, /*readRows=*/true,
                [&](OpBuilder &nb, Location l,
                    const compute::SegmentTiles::Tile &t) {
                  Value id = reduceIdentity(nb, l, kind, elem);
                  SmallVector<Value> level;
                  for (auto [v, ok] : llvm::zip(t.rows, t.valid))
                    level.push_back(arith::SelectOp::create(nb, l, ok, v, id));
                  while (level.size() > 1) {
                    SmallVector<Value> next;
                    for (size_t i = 0; i + 1 < level.size(); i += 2)
                      next.push_back(
                          reduceCombine(nb, l, kind, level[i], level[i + 1]));
                    if (level.size() % 2)
                      next.push_back(level.back());
                    level = std::move(next);
                  }
                  return SmallVector<Value>{level.front()};
                })
            .front();
    return tiles
        .perSegment(b, loc, {elem},
                    [&](OpBuilder &nb, Location l, ArrayRef<Value> idx,
                        Value first, Value last) {
                      Value acc = foldRows(nb, l, partials, first, last, idx,
                                           reduceIdentity(nb, l, kind, elem),
                                           combineKind(kind));
                      Value len = tiles.segmentLength(nb, l, idx.front());
                      return SmallVector<Value>{
                          finish(nb, l, kind, acc, len, empty)};
                    })
        .front();
  }

  /// One generic over (segment, trailing dims) looping over the segment's
  /// rows.
  Value reducePerSegment(OpBuilder &b, Location loc, Value values,
                         Value offsets, ReduceKind kind, Value empty) const {
    Type elem = cast<RankedTensorType>(values.getType()).getElementType();
    auto [lo, hi] = segmentBounds(b, loc, offsets);
    Value init = emptyRows(b, loc, numSegments(b, loc, offsets), values);
    unsigned rank = cast<RankedTensorType>(init.getType()).getRank();
    AffineMap seg =
        AffineMap::get(rank, 0, getAffineDimExpr(0, b.getContext()));
    return parallelGeneric(
        b, loc, init, {lo, hi}, {seg, seg},
        [&](OpBuilder &nb, Location l, ValueRange args) {
          SmallVector<Value> idx = loopIndices(nb, l, rank);
          Value start =
              arith::IndexCastOp::create(nb, l, nb.getIndexType(), args[0]);
          Value end =
              arith::IndexCastOp::create(nb, l, nb.getIndexType(), args[1]);
          Value acc =
              foldRows(nb, l, values, start, end, idx,
                       reduceIdentity(nb, l, kind, elem), combineKind(kind));
          Value len = arith::SubIOp::create(nb, l, args[1], args[0]);
          return finish(nb, l, kind, acc, len, empty);
        });
  }

  /// The mean from the sum, and `empty` for a segment without rows.
  static Value finish(OpBuilder &b, Location l, ReduceKind kind, Value acc,
                      Value len, Value empty) {
    if (kind == ReduceKind::mean)
      acc = arith::DivFOp::create(
          b, l, acc, arith::SIToFPOp::create(b, l, acc.getType(), len));
    Value zero = arith::ConstantIntOp::create(b, l, b.getI64Type(), 0);
    Value isEmpty =
        arith::CmpIOp::create(b, l, arith::CmpIPredicate::eq, len, zero);
    return arith::SelectOp::create(b, l, isEmpty, empty, acc);
  }

  RaggedLoweringOptions options;
};

/// Row r of the result is row segment(r) of the source: one generic over
/// the packed rows, the segment read from a per-row table (rowSegments)
/// so that each row is one contiguous copy.
struct BroadcastLowering : OpConversionPattern<BroadcastOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(BroadcastOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Packed like = unpack(op.getLike(), adaptor.getLike());
    Value source = adaptor.getSource().front();
    unsigned rank = cast<RankedTensorType>(like.values.getType()).getRank();
    RowSegments segments =
        rowSegments(rewriter, loc, like.partitions.front(),
                    dimOf(rewriter, loc, like.values, 0), rank);
    Value out = parallelGeneric(
        rewriter, loc, emptyLike(rewriter, loc, like.values),
        {segments.operand}, {segments.map},
        [&](OpBuilder &b, Location l, ValueRange args) {
          SmallVector<Value> idx = loopIndices(b, l, rank);
          SmallVector<Value> at{segments.at(b, l, idx[0])};
          llvm::append_range(at, ArrayRef<Value>(idx).drop_front());
          return segments.keep(b, l, args[0],
                               tensor::ExtractOp::create(b, l, source, at));
        });
    markWholeRows(out);
    rewriter.replaceOpWithMultiple(
        op, {Packed{like.type, out, like.partitions}.flatten(rewriter, loc)});
    return success();
  }
};

} // namespace

void mlir::ragged::compute::populateReductionPatterns(
    const TypeConverter &converter, RewritePatternSet &patterns,
    const RaggedLoweringOptions &options) {
  patterns.add<ReduceLowering>(converter, patterns.getContext(), options);
  patterns.add<BroadcastLowering>(converter, patterns.getContext());
}
