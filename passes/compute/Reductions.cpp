//===- Reductions.cpp - reductions over segments ----------------------------===//
//
// A reduction over a ragged dim becomes a fixed number of linalg.generics
// whose iteration space is the segments (or balanced tiles of rows, with one
// combine of the partial results); empty segments give the identity.
//
//===----------------------------------------------------------------------===//

#include "passes/compute/PopulatePatterns.h"

#include "passes/LoweringUtils.h"

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

/// Identity of a reduction: the value an empty segment starts from.
Value reduceIdentity(OpBuilder &b, Location loc, ReduceKind kind, Type t) {
  double inf = std::numeric_limits<double>::infinity();
  switch (kind) {
  case ReduceKind::sum:
  case ReduceKind::mean:
    return floatConst(b, loc, t, 0.0);
  case ReduceKind::max:
    return floatConst(b, loc, t, -inf);
  case ReduceKind::min:
    return floatConst(b, loc, t, inf);
  }
  llvm_unreachable("unknown reduce kind");
}

Value combine(OpBuilder &b, Location loc, ReduceKind kind, Value acc, Value v) {
  if (kind == ReduceKind::max)
    return arith::MaximumFOp::create(b, loc, acc, v);
  if (kind == ReduceKind::min)
    return arith::MinimumFOp::create(b, loc, acc, v);
  return arith::AddFOp::create(b, loc, acc, v);
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
    Value n = numSegments(rewriter, loc, offsets);
    Type elem = x.type.getElementType();
    ReduceKind kind = op.getKind();
    Value empty = op.getEmpty()
                      ? Value(arith::ConstantOp::create(rewriter, loc,
                                                        cast<TypedAttr>(*op.getEmpty())))
                      : floatConst(rewriter, loc, elem, 0.0);
    auto [lo, hi] = segmentBounds(rewriter, loc, offsets);

    // What the final per-segment loop walks: the rows themselves, or (when
    // balancing) the partial results of fixed-size row tiles.
    Value source = x.values;
    SmallVector<Value> inputs{lo, hi};
    if (options.balanceTile > 0) {
      auto [partials, first, last] = tilePartials(rewriter, loc, x.values, lo, hi, kind);
      source = partials;
      inputs.append({first, last});
    }

    Value init = emptyRows(rewriter, loc, n, x.values);
    unsigned rank = cast<RankedTensorType>(init.getType()).getRank();
    AffineMap seg = AffineMap::get(rank, 0, getAffineDimExpr(0, rewriter.getContext()));
    SmallVector<AffineMap> maps(inputs.size(), seg);
    Value out = parallelGeneric(
        rewriter, loc, init, inputs, maps,
        [&](OpBuilder &b, Location l, ValueRange args) {
          SmallVector<Value> idx = loopIndices(b, l, rank);
          // Rows [lo, hi) of the values, or tiles [first, last) of partials.
          ValueRange range = args.take_front(inputs.size()).take_back(2);
          Value start = arith::IndexCastOp::create(b, l, b.getIndexType(), range[0]);
          Value end = arith::IndexCastOp::create(b, l, b.getIndexType(), range[1]);
          Value acc = forLoop(
              b, l, start, end, {reduceIdentity(b, l, kind, elem)},
              [&](OpBuilder &lb, Location ll, Value r, ValueRange a) {
                SmallVector<Value> at{r};
                llvm::append_range(at, ArrayRef<Value>(idx).drop_front());
                Value v = tensor::ExtractOp::create(lb, ll, source, at);
                return SmallVector<Value>{combine(lb, ll, kind, a[0], v)};
              })[0];
          Value len = arith::SubIOp::create(b, l, args[1], args[0]);
          if (kind == ReduceKind::mean) {
            Value lenF = arith::SIToFPOp::create(b, l, elem, len);
            acc = arith::DivFOp::create(b, l, acc, lenF);
          }
          Value zero = arith::ConstantIntOp::create(b, l, b.getI64Type(), 0);
          Value isEmpty = arith::CmpIOp::create(b, l, arith::CmpIPredicate::eq, len, zero);
          return arith::SelectOp::create(b, l, isEmpty, empty, acc);
        });
    Type resultType = op.getType();
    if (auto dense = dyn_cast<RankedTensorType>(resultType)) {
      if (out.getType() != dense)
        out = tensor::CastOp::create(rewriter, loc, dense, out);
      rewriter.replaceOp(op, out);
      return success();
    }
    SmallVector<Value> parts(ArrayRef<Value>(x.partitions).drop_back());
    rewriter.replaceOpWithMultiple(
        op, {Packed{cast<RaggedTensorType>(resultType), out, parts}.flatten(rewriter, loc)});
    return success();
  }

private:
  /// Splits every segment into tiles of `balanceTile` rows (the last one of
  /// a segment shorter), reduces each tile in one generic whose parallel
  /// dim is the flat (segment, tile) list, and returns the tile results with
  /// each segment's [first, last) tile range. One long segment and many
  /// short ones then give equal-sized units of work.
  std::tuple<Value, Value, Value> tilePartials(OpBuilder &b, Location loc,
                                               Value values, Value lo, Value hi,
                                               ReduceKind kind) const {
    int64_t tile = options.balanceTile;
    Type i64 = b.getI64Type();
    Type elem = cast<RankedTensorType>(values.getType()).getElementType();
    Value tileC = arith::ConstantIntOp::create(b, loc, i64, tile);
    AffineMap id1 = b.getMultiDimIdentityMap(1);
    // Tiles per segment, and where each segment's tiles start.
    Value counts = parallelGeneric(
        b, loc, emptyLike(b, loc, lo), {lo, hi}, {id1, id1},
        [&](OpBuilder &nb, Location l, ValueRange a) {
          Value len = arith::SubIOp::create(nb, l, a[1], a[0]);
          return arith::CeilDivSIOp::create(nb, l, len, tileC);
        });
    Value tileOffsets = exclusivePrefixSum(b, loc, counts);
    Value numTiles = loadIndex(b, loc, tileOffsets, dimOf(b, loc, counts, 0));
    // First and end row of every tile.
    Value tileInit = emptyTensor(b, loc, {ShapedType::kDynamic}, i64, {numTiles});
    auto tileBound = [&](bool end) {
      return parallelGeneric(b, loc, tileInit, {}, {}, [&](OpBuilder &nb, Location l, ValueRange) {
        Value t = linalg::IndexOp::create(nb, l, 0);
        Value s = findSegment(nb, l, tileOffsets, t);
        Value q = arith::SubIOp::create(nb, l, t, loadIndex(nb, l, tileOffsets, s));
        Value start = arith::AddIOp::create(
            nb, l, loadIndex(nb, l, lo, s),
            arith::MulIOp::create(nb, l, q, constIndex(nb, l, tile)));
        Value bound = start;
        if (end)
          bound = arith::MinUIOp::create(
              nb, l, arith::AddIOp::create(nb, l, start, constIndex(nb, l, tile)),
              loadIndex(nb, l, hi, s));
        return arith::IndexCastOp::create(nb, l, nb.getI64Type(), bound);
      });
    };
    Value tileStart = tileBound(false), tileEnd = tileBound(true);
    // Partial results [tiles, trailing...]: a static reduction dim of
    // `tile` rows, masked past the tile's end.
    Value partialInit = emptyRows(b, loc, numTiles, values);
    auto partialType = cast<RankedTensorType>(partialInit.getType());
    unsigned rank = partialType.getRank();
    partialInit =
        linalg::FillOp::create(b, loc, reduceIdentity(b, loc, kind, elem), partialInit)
            .getResult(0);
    Value domain = tensor::EmptyOp::create(b, loc, ArrayRef<int64_t>{tile}, elem);
    MLIRContext *ctx = b.getContext();
    unsigned loops = rank + 1;
    SmallVector<AffineExpr> outExprs{getAffineDimExpr(0, ctx)};
    for (unsigned d = 2; d < loops; ++d)
      outExprs.push_back(getAffineDimExpr(d, ctx));
    AffineMap perTile = AffineMap::get(loops, 0, getAffineDimExpr(0, ctx));
    AffineMap perRow = AffineMap::get(loops, 0, getAffineDimExpr(1, ctx));
    AffineMap out = AffineMap::get(loops, 0, outExprs, ctx);
    SmallVector<utils::IteratorType> iters(loops, utils::IteratorType::parallel);
    iters[1] = utils::IteratorType::reduction;
    Value partials =
        linalg::GenericOp::create(
            b, loc, partialType, ValueRange{tileStart, tileEnd, domain},
            ValueRange{partialInit}, {perTile, perTile, perRow, out}, iters,
            [&](OpBuilder &nb, Location l, ValueRange a) {
              Value start = arith::IndexCastOp::create(nb, l, nb.getIndexType(), a[0]);
              Value end = arith::IndexCastOp::create(nb, l, nb.getIndexType(), a[1]);
              Value row = arith::AddIOp::create(nb, l, start,
                                                linalg::IndexOp::create(nb, l, 1));
              Value valid =
                  arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ult, row, end);
              SmallVector<Value> at{arith::SelectOp::create(nb, l, valid, row, start)};
              for (unsigned d = 2; d < loops; ++d)
                at.push_back(linalg::IndexOp::create(nb, l, d));
              Value v = tensor::ExtractOp::create(nb, l, values, at);
              v = arith::SelectOp::create(nb, l, valid, v,
                                          reduceIdentity(nb, l, kind, elem));
              linalg::YieldOp::create(nb, l, ValueRange{combine(nb, l, kind, a[3], v)});
            })
            .getResult(0);
    auto [first, last] = segmentBounds(b, loc, tileOffsets);
    return {partials, first, last};
  }

  RaggedLoweringOptions options;
};

} // namespace

void mlir::ragged::compute::populateReductionPatterns(const TypeConverter &converter,
                                                    RewritePatternSet &patterns,
                                                    const RaggedLoweringOptions &options) {
  patterns.add<ReduceLowering>(converter, patterns.getContext(), options);
}
