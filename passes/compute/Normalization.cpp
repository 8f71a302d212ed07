//===- Normalization.cpp - layer norm and softmax ---------------------------===//
//
// Layer norm normalises each packed row over its last dim: two row
// reductions and one elementwise generic. Softmax normalises over a ragged
// dim: runs of rows (segments, or groups of rows within an item) whose bounds
// are read from the offsets inside the generics' bodies.
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

struct LayerNormLowering : OpConversionPattern<LayerNormOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(LayerNormOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    Packed x = unpack(op.getSource(), adaptor.getSource());
    Value gamma = adaptor.getGamma().front(), beta = adaptor.getBeta().front();
    auto valuesType = cast<RankedTensorType>(x.values.getType());
    unsigned rank = valuesType.getRank();
    Type elem = valuesType.getElementType();
    AffineMap id = rewriter.getMultiDimIdentityMap(rank);
    AffineMap rowMap = id.dropResult(rank - 1);
    AffineMap lastMap = AffineMap::get(rank, 0, getAffineDimExpr(rank - 1, ctx));
    Value width = arith::IndexCastOp::create(
        rewriter, loc, rewriter.getI64Type(), dimOf(rewriter, loc, x.values, rank - 1));
    Value widthF = arith::SIToFPOp::create(rewriter, loc, elem, width);

    // Per-row statistics: a reduction over the last dim.
    SmallVector<int64_t> rowShape(valuesType.getShape().drop_back());
    SmallVector<Value> rowDyn;
    for (unsigned d = 0; d + 1 < rank; ++d)
      if (valuesType.isDynamicDim(d))
        rowDyn.push_back(dimOf(rewriter, loc, x.values, d));
    auto rowReduce = [&](ValueRange inputs, ArrayRef<AffineMap> maps,
                         function_ref<Value(OpBuilder &, Location, ValueRange)> term) {
      Value init = emptyTensor(rewriter, loc, rowShape, elem, rowDyn);
      init = linalg::FillOp::create(rewriter, loc,
                                    floatConst(rewriter, loc, elem, 0.0), init)
                 .getResult(0);
      SmallVector<AffineMap> allMaps(maps);
      allMaps.push_back(rowMap);
      SmallVector<utils::IteratorType> iters(rank, utils::IteratorType::parallel);
      iters.back() = utils::IteratorType::reduction;
      return linalg::GenericOp::create(
                 rewriter, loc, init.getType(), inputs, ValueRange{init}, allMaps,
                 iters,
                 [&](OpBuilder &b, Location l, ValueRange args) {
                   Value t = term(b, l, args.drop_back());
                   linalg::YieldOp::create(
                       b, l, ValueRange{arith::AddFOp::create(b, l, args.back(), t)});
                 })
          .getResult(0);
    };
    Value sum = rowReduce({x.values}, {id},
                          [](OpBuilder &, Location, ValueRange a) { return a[0]; });
    Value sq = rowReduce({x.values, sum}, {id, rowMap},
                         [&](OpBuilder &b, Location l, ValueRange a) {
                           Value mean = arith::DivFOp::create(b, l, a[1], widthF);
                           Value c = arith::SubFOp::create(b, l, a[0], mean);
                           return arith::MulFOp::create(b, l, c, c);
                         });
    Value eps = floatConst(rewriter, loc, elem, op.getEpsilon().convertToDouble());
    Value out = parallelGeneric(
        rewriter, loc, emptyLike(rewriter, loc, x.values),
        {x.values, sum, sq, gamma, beta}, {id, rowMap, rowMap, lastMap, lastMap},
        [&](OpBuilder &b, Location l, ValueRange a) {
          Value mean = arith::DivFOp::create(b, l, a[1], widthF);
          Value var = arith::DivFOp::create(b, l, a[2], widthF);
          Value inv = math::RsqrtOp::create(b, l, arith::AddFOp::create(b, l, var, eps));
          Value norm = arith::MulFOp::create(
              b, l, arith::SubFOp::create(b, l, a[0], mean), inv);
          return arith::AddFOp::create(b, l, arith::MulFOp::create(b, l, norm, a[3]),
                                       a[4]);
        });
    rewriter.replaceOpWithMultiple(op, {Packed{x.type, out, x.partitions}.flatten(rewriter, loc)});
    return success();
  }
};

/// Softmax groups: contiguous runs of rows over which one softmax runs.
/// Either the segments of the innermost offsets (`[B, L(b), D]`, nested
/// chains) or, for single-level tensors with dims before the last ragged
/// one (`[B, L(b), L(b), H]`), runs of `E_last(b)` rows, `G(b)` per item.
struct SoftmaxGroups {
  Value groupOffsets; // [groups + 1] (segments) or per-item group counts' scan
  bool perItem = false;
  std::optional<Addressing> addressing;
  unsigned last = 0;

  /// First row and length of group `g`.
  std::pair<Value, Value> bounds(OpBuilder &b, Location l, Value g) const {
    if (!perItem) {
      Value next = arith::AddIOp::create(b, l, g, constIndex(b, l, 1));
      Value start = loadIndex(b, l, groupOffsets, g);
      return {start, arith::SubIOp::create(b, l, loadIndex(b, l, groupOffsets, next), start)};
    }
    Value item = findSegment(b, l, groupOffsets, g);
    Value q = arith::SubIOp::create(b, l, g, loadIndex(b, l, groupOffsets, item));
    Value e = addressing->extent(b, l, last, item);
    Value start = arith::AddIOp::create(
        b, l, loadIndex(b, l, addressing->rowOffsets(), item),
        arith::MulIOp::create(b, l, q, e));
    return {start, e};
  }

  /// The group holding row `r`.
  Value groupOf(OpBuilder &b, Location l, Value r) const {
    if (!perItem)
      return findSegment(b, l, groupOffsets, r);
    Value rowOffsets = addressing->rowOffsets();
    Value item = findSegment(b, l, rowOffsets, r);
    Value local = arith::SubIOp::create(b, l, r, loadIndex(b, l, rowOffsets, item));
    Value q = arith::DivUIOp::create(b, l, local, addressing->extent(b, l, last, item));
    return arith::AddIOp::create(b, l, loadIndex(b, l, groupOffsets, item), q);
  }
};

struct SoftmaxLowering : OpConversionPattern<SoftmaxOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(SoftmaxOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    FailureOr<Packed> maybe = unpackAddressable(op, op.getSource(), adaptor.getSource());
    if (failed(maybe))
      return failure();
    Packed x = *maybe;
    Type elem = x.type.getElementType();
    SoftmaxGroups groups;
    groups.last = x.type.getLastRaggedDim();
    Value numGroups;
    if (!x.type.isSingleLevel() || groups.last == 0) {
      groups.groupOffsets = x.partitions.back();
      numGroups = numSegments(rewriter, loc, groups.groupOffsets);
    } else {
      groups.perItem = true;
      groups.addressing.emplace(rewriter, loc, x);
      Value items = numSegments(rewriter, loc, x.partitions.front());
      Value init = emptyTensor(rewriter, loc, {ShapedType::kDynamic},
                               rewriter.getI64Type(), {items});
      Value counts = parallelGeneric(
          rewriter, loc, init, {}, {}, [&](OpBuilder &b, Location l, ValueRange) {
            Value item = linalg::IndexOp::create(b, l, 0);
            Value prod = constIndex(b, l, 1);
            for (unsigned d = 0; d < groups.last; ++d)
              prod = arith::MulIOp::create(b, l, prod,
                                           groups.addressing->extent(b, l, d, item));
            return arith::IndexCastOp::create(b, l, b.getI64Type(), prod);
          });
      groups.groupOffsets = exclusivePrefixSum(rewriter, loc, counts);
      numGroups = loadIndex(rewriter, loc, groups.groupOffsets, items);
    }
    Value statsInit = emptyRows(rewriter, loc, numGroups, x.values);
    unsigned rank = cast<RankedTensorType>(statsInit.getType()).getRank();
    auto read = [&](OpBuilder &b, Location l, Value row, ArrayRef<Value> idx) {
      SmallVector<Value> at{row};
      llvm::append_range(at, idx.drop_front());
      return tensor::ExtractOp::create(b, l, x.values, at);
    };
    // Pass 1: the max of each group; pass 2: the sum of exp(x - max).
    Value maxima = parallelGeneric(
        rewriter, loc, statsInit, {}, {}, [&](OpBuilder &b, Location l, ValueRange) {
          SmallVector<Value> idx = loopIndices(b, l, rank);
          auto [start, len] = groups.bounds(b, l, idx[0]);
          Value end = arith::AddIOp::create(b, l, start, len);
          return forLoop(b, l, start, end,
                         {floatConst(b, l, elem, -std::numeric_limits<double>::infinity())},
                         [&](OpBuilder &lb, Location ll, Value r, ValueRange a) {
                           return SmallVector<Value>{arith::MaximumFOp::create(
                               lb, ll, a[0], read(lb, ll, r, idx))};
                         })[0];
        });
    AffineMap id = rewriter.getMultiDimIdentityMap(rank);
    Value sums = parallelGeneric(
        rewriter, loc, emptyLike(rewriter, loc, statsInit), {maxima}, {id},
        [&](OpBuilder &b, Location l, ValueRange args) {
          SmallVector<Value> idx = loopIndices(b, l, rank);
          auto [start, len] = groups.bounds(b, l, idx[0]);
          Value end = arith::AddIOp::create(b, l, start, len);
          return forLoop(b, l, start, end, {floatConst(b, l, elem, 0.0)},
                         [&](OpBuilder &lb, Location ll, Value r, ValueRange a) {
                           Value c = arith::SubFOp::create(lb, ll, read(lb, ll, r, idx),
                                                           args[0]);
                           return SmallVector<Value>{arith::AddFOp::create(
                               lb, ll, a[0], math::ExpOp::create(lb, ll, c))};
                         })[0];
        });
    // The group of every row, searched once per row and read with
    // tensor.extract: as an input, IREE would fuse the search into (and
    // repeat it for) every element of the row.
    Value rows = dimOf(rewriter, loc, x.values, 0);
    Value groupOfRow = parallelGeneric(
        rewriter, loc, emptyTensor(rewriter, loc, {ShapedType::kDynamic}, rewriter.getI64Type(), {rows}), {}, {},
        [&](OpBuilder &b, Location l, ValueRange) {
          return arith::IndexCastOp::create(b, l, b.getI64Type(),
                                            groups.groupOf(b, l, linalg::IndexOp::create(b, l, 0)))
              .getResult();
        });
    Value out = parallelGeneric(
        rewriter, loc, emptyLike(rewriter, loc, x.values), {x.values}, {id},
        [&](OpBuilder &b, Location l, ValueRange args) {
          SmallVector<Value> idx = loopIndices(b, l, rank);
          SmallVector<Value> at{loadIndex(b, l, groupOfRow, ValueRange{idx[0]})};
          llvm::append_range(at, ArrayRef<Value>(idx).drop_front());
          Value m = tensor::ExtractOp::create(b, l, maxima, at);
          Value s = tensor::ExtractOp::create(b, l, sums, at);
          Value e = math::ExpOp::create(b, l, arith::SubFOp::create(b, l, args[0], m));
          return arith::DivFOp::create(b, l, e, s);
        });
    rewriter.replaceOpWithMultiple(op, {Packed{x.type, out, x.partitions}.flatten(rewriter, loc)});
    return success();
  }
};

} // namespace

void mlir::ragged::compute::populateNormalizationPatterns(const TypeConverter &converter,
                                                        RewritePatternSet &patterns) {
  patterns.add<LayerNormLowering, SoftmaxLowering>(converter, patterns.getContext());
}
