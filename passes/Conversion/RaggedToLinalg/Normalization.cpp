//===- Normalization.cpp - layer norm and softmax -------------------------===//
//
// Layer norm normalises each packed row over its last dim: two row
// reductions and one elementwise generic. Softmax normalises over a ragged
// dim: runs of rows (segments, or groups of rows within an item) whose row
// offsets are a table; its statistics are reductions over those runs, in row
// tiles by default (SegmentTiles.h).
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
    AffineMap lastMap =
        AffineMap::get(rank, 0, getAffineDimExpr(rank - 1, ctx));
    Value width =
        arith::IndexCastOp::create(rewriter, loc, rewriter.getI64Type(),
                                   dimOf(rewriter, loc, x.values, rank - 1));
    Value widthF = arith::SIToFPOp::create(rewriter, loc, elem, width);

    // Per-row statistics: a reduction over the last dim.
    SmallVector<int64_t> rowShape(valuesType.getShape().drop_back());
    SmallVector<Value> rowDyn;
    for (unsigned d = 0; d + 1 < rank; ++d)
      if (valuesType.isDynamicDim(d))
        rowDyn.push_back(dimOf(rewriter, loc, x.values, d));
    auto rowReduce =
        [&](ValueRange inputs, ArrayRef<AffineMap> maps,
            function_ref<Value(OpBuilder &, Location, ValueRange)> term) {
          Value init = emptyTensor(rewriter, loc, rowShape, elem, rowDyn);
          init = linalg::FillOp::create(
                     rewriter, loc, floatConst(rewriter, loc, elem, 0.0), init)
                     .getResult(0);
          SmallVector<AffineMap> allMaps(maps);
          allMaps.push_back(rowMap);
          SmallVector<utils::IteratorType> iters(rank,
                                                 utils::IteratorType::parallel);
          iters.back() = utils::IteratorType::reduction;
          return linalg::GenericOp::create(
                     rewriter, loc, init.getType(), inputs, ValueRange{init},
                     allMaps, iters,
                     [&](OpBuilder &b, Location l, ValueRange args) {
                       Value t = term(b, l, args.drop_back());
                       linalg::YieldOp::create(b, l,
                                               ValueRange{arith::AddFOp::create(
                                                   b, l, args.back(), t)});
                     })
              .getResult(0);
        };
    Value sum =
        rowReduce({x.values}, {id},
                  [](OpBuilder &, Location, ValueRange a) { return a[0]; });
    Value sq = rowReduce({x.values, sum}, {id, rowMap},
                         [&](OpBuilder &b, Location l, ValueRange a) {
                           Value mean =
                               arith::DivFOp::create(b, l, a[1], widthF);
                           Value c = arith::SubFOp::create(b, l, a[0], mean);
                           return arith::MulFOp::create(b, l, c, c);
                         });
    Value eps =
        floatConst(rewriter, loc, elem, op.getEpsilon().convertToDouble());
    Value out = parallelGeneric(
        rewriter, loc, emptyLike(rewriter, loc, x.values),
        {x.values, sum, sq, gamma, beta},
        {id, rowMap, rowMap, lastMap, lastMap},
        [&](OpBuilder &b, Location l, ValueRange a) {
          Value mean = arith::DivFOp::create(b, l, a[1], widthF);
          Value var = arith::DivFOp::create(b, l, a[2], widthF);
          Value inv = math::RsqrtOp::create(
              b, l, arith::AddFOp::create(b, l, var, eps));
          Value norm = arith::MulFOp::create(
              b, l, arith::SubFOp::create(b, l, a[0], mean), inv);
          return arith::AddFOp::create(
              b, l, arith::MulFOp::create(b, l, norm, a[3]), a[4]);
        });
    rewriter.replaceOpWithMultiple(
        op, {Packed{x.type, out, x.partitions}.flatten(rewriter, loc)});
    return success();
  }
};

/// The row offsets (`[groups + 1]`) of the softmax groups: contiguous runs
/// of rows over which one softmax runs. Either the segments of the innermost
/// offsets (`[B, L(b), D]`, nested chains) or, for single-level tensors with
/// dims before the last ragged one (`[B, L(b), L(b), H]`), runs of
/// `E_last(b)` rows, `G(b)` per item.
Value softmaxGroupRows(OpBuilder &b, Location loc, const Packed &x) {
  unsigned last = x.type.getLastRaggedDim();
  if (!x.type.isSingleLevel() || last == 0)
    return x.partitions.back();
  Addressing addressing(b, loc, x);
  Type i64 = b.getI64Type();
  Value items = numSegments(b, loc, x.partitions.front());
  Value counts = parallelGeneric(
      b, loc, emptyTensor(b, loc, {ShapedType::kDynamic}, i64, {items}), {}, {},
      [&](OpBuilder &nb, Location l, ValueRange) {
        Value item = linalg::IndexOp::create(nb, l, 0);
        Value prod = constIndex(nb, l, 1);
        for (unsigned d = 0; d < last; ++d)
          prod = arith::MulIOp::create(nb, l, prod,
                                       addressing.extent(nb, l, d, item));
        return arith::IndexCastOp::create(nb, l, i64, prod);
      });
  Value groupOffsets = exclusivePrefixSum(b, loc, counts);
  Value groups = loadIndex(b, loc, groupOffsets, items);
  Value size = arith::AddIOp::create(b, loc, groups, constIndex(b, loc, 1));
  Value rows = dimOf(b, loc, x.values, 0);
  return parallelGeneric(
      b, loc, emptyTensor(b, loc, {ShapedType::kDynamic}, i64, {size}), {}, {},
      [&](OpBuilder &nb, Location l, ValueRange) {
        Value g = linalg::IndexOp::create(nb, l, 0);
        Value inside =
            arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ult, g, groups);
        // Group g < groups starts at its item's first row plus q whole
        // groups; the entry past the last group is the row count.
        auto start = scf::IfOp::create(
            nb, l, inside,
            [&](OpBuilder &tb, Location tl) {
              Value item = findSegment(tb, tl, groupOffsets, g);
              Value q = arith::SubIOp::create(
                  tb, tl, g, loadIndex(tb, tl, groupOffsets, item));
              Value row = arith::AddIOp::create(
                  tb, tl, loadIndex(tb, tl, addressing.rowOffsets(), item),
                  arith::MulIOp::create(tb, tl, q,
                                        addressing.extent(tb, tl, last, item)));
              scf::YieldOp::create(tb, tl, row);
            },
            [&](OpBuilder &eb, Location el) {
              scf::YieldOp::create(eb, el, rows);
            });
        return arith::IndexCastOp::create(nb, l, i64, start.getResult(0));
      });
}

struct SoftmaxLowering : OpConversionPattern<SoftmaxOp> {
  SoftmaxLowering(const TypeConverter &converter, MLIRContext *ctx,
                  const RaggedLoweringOptions &options)
      : OpConversionPattern(converter, ctx), options(options) {}

  LogicalResult
  matchAndRewrite(SoftmaxOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    FailureOr<Packed> maybe =
        unpackAddressable(op, op.getSource(), adaptor.getSource());
    if (failed(maybe))
      return failure();
    Packed x = *maybe;
    Value groupRows = softmaxGroupRows(rewriter, loc, x);
    // softmax(x) = exp(x - lse) with lse = max + log(sum(exp(x - max))) per
    // group: one table read per element.
    Value lse = options.balanceTile > 0
                    ? logSumExpTiled(rewriter, loc, x.values, groupRows)
                    : logSumExpPerGroup(rewriter, loc, x.values, groupRows);
    unsigned rank = cast<RankedTensorType>(x.values.getType()).getRank();
    RowSegments groups = rowSegments(rewriter, loc, groupRows,
                                     dimOf(rewriter, loc, x.values, 0), rank);
    AffineMap id = rewriter.getMultiDimIdentityMap(rank);
    Value out = parallelGeneric(
        rewriter, loc, emptyLike(rewriter, loc, x.values),
        {x.values, groups.operand}, {id, groups.map},
        [&](OpBuilder &b, Location l, ValueRange args) {
          SmallVector<Value> idx = loopIndices(b, l, rank);
          SmallVector<Value> at{groups.at(b, l, idx[0])};
          llvm::append_range(at, ArrayRef<Value>(idx).drop_front());
          Value g = tensor::ExtractOp::create(b, l, lse, at);
          return groups.keep(
              b, l, args[1],
              math::ExpOp::create(b, l,
                                  arith::SubFOp::create(b, l, args[0], g)));
        });
    markWholeRows(out);
    rewriter.replaceOpWithMultiple(
        op, {Packed{x.type, out, x.partitions}.flatten(rewriter, loc)});
    return success();
  }

private:
  /// Per group: the max, then max + log of the sum of exp(x - max), each
  /// looping over the group's rows.
  static Value logSumExpPerGroup(OpBuilder &b, Location loc, Value values,
                                 Value groupRows) {
    Type elem = cast<RankedTensorType>(values.getType()).getElementType();
    Value statsInit = emptyRows(b, loc, numSegments(b, loc, groupRows), values);
    unsigned rank = cast<RankedTensorType>(statsInit.getType()).getRank();
    auto overRows =
        [&](OpBuilder &nb, Location l, ArrayRef<Value> idx, Value init,
            function_ref<Value(OpBuilder &, Location, Value, Value)> step) {
          Value next =
              arith::AddIOp::create(nb, l, idx[0], constIndex(nb, l, 1));
          return foldRows(nb, l, values, loadIndex(nb, l, groupRows, idx[0]),
                          loadIndex(nb, l, groupRows, next), idx, init, step);
        };
    Value maxima = parallelGeneric(
        b, loc, statsInit, {}, {}, [&](OpBuilder &nb, Location l, ValueRange) {
          return overRows(
              nb, l, loopIndices(nb, l, rank),
              floatConst(nb, l, elem, -std::numeric_limits<double>::infinity()),
              [](OpBuilder &sb, Location sl, Value acc, Value v) -> Value {
                return arith::MaximumFOp::create(sb, sl, acc, v);
              });
        });
    AffineMap id = b.getMultiDimIdentityMap(rank);
    return parallelGeneric(
        b, loc, emptyLike(b, loc, statsInit), {maxima}, {id},
        [&](OpBuilder &nb, Location l, ValueRange args) -> Value {
          Value sum = overRows(
              nb, l, loopIndices(nb, l, rank), floatConst(nb, l, elem, 0.0),
              [&](OpBuilder &sb, Location sl, Value acc, Value v) -> Value {
                Value c = arith::SubFOp::create(sb, sl, v, args[0]);
                return arith::AddFOp::create(sb, sl, acc,
                                             math::ExpOp::create(sb, sl, c));
              });
          return arith::AddFOp::create(nb, l, args[0],
                                       math::LogOp::create(nb, l, sum));
        });
  }

  /// The same over row tiles: each tile's max m_t and sum s_t of
  /// exp(x - m_t) (its rows unrolled), the group max M over its tiles, each
  /// tile's s_t * exp(m_t - M) (vectorised over the tiles), then M + log of
  /// their sum.
  Value logSumExpTiled(OpBuilder &b, Location loc, Value values,
                       Value groupRows) const {
    Type elem = cast<RankedTensorType>(values.getType()).getElementType();
    double inf = std::numeric_limits<double>::infinity();
    compute::SegmentTiles tiles(b, loc, groupRows, values, options.balanceTile);
    using Tile = compute::SegmentTiles::Tile;
    SmallVector<Value> tileStats = tiles.mapTiles(
        b, loc, {elem, elem}, {}, /*readRows=*/true,
        [&](OpBuilder &nb, Location l, const Tile &t) {
          Value ninf = floatConst(nb, l, elem, -inf),
                zero = floatConst(nb, l, elem, 0.0);
          Value m = ninf;
          for (auto [v, ok] : llvm::zip(t.rows, t.valid))
            m = arith::MaximumFOp::create(
                nb, l, m, arith::SelectOp::create(nb, l, ok, v, ninf));
          // A tile of -inf only (a masked causal block) sums to 0, not NaN.
          Value allInf =
              arith::CmpFOp::create(nb, l, arith::CmpFPredicate::OEQ, m, ninf);
          Value shift = arith::SelectOp::create(nb, l, allInf, zero, m);
          Value s = zero;
          for (auto [v, ok] : llvm::zip(t.rows, t.valid)) {
            Value e = math::ExpOp::create(
                nb, l, arith::SubFOp::create(nb, l, v, shift));
            s = arith::AddFOp::create(
                nb, l, s, arith::SelectOp::create(nb, l, ok, e, zero));
          }
          return SmallVector<Value>{m, s};
        });
    Value maxima =
        tiles
            .perSegment(b, loc, {elem},
                        [&](OpBuilder &nb, Location l, ArrayRef<Value> idx,
                            Value first, Value last) {
                          return SmallVector<Value>{
                              foldRows(nb, l, tileStats[0], first, last, idx,
                                       floatConst(nb, l, elem, -inf),
                                       [](OpBuilder &sb, Location sl, Value acc,
                                          Value v) -> Value {
                                         return arith::MaximumFOp::create(
                                             sb, sl, acc, v);
                                       })};
                        })
            .front();
    // Tiles without rows (past the last one) hold m = -inf, s = 0.
    Value scaled =
        tiles
            .mapTiles(
                b, loc, {elem}, tileStats, /*readRows=*/false,
                [&](OpBuilder &nb, Location l, const Tile &t) {
                  SmallVector<Value> at{t.segment};
                  llvm::append_range(at,
                                     ArrayRef<Value>(t.indices).drop_front());
                  Value big = tensor::ExtractOp::create(nb, l, maxima, at);
                  Value e = math::ExpOp::create(
                      nb, l, arith::SubFOp::create(nb, l, t.inputs[0], big));
                  Value zero =
                      arith::ConstantIntOp::create(nb, l, nb.getI64Type(), 0);
                  Value any = arith::CmpIOp::create(
                      nb, l, arith::CmpIPredicate::sgt, t.length, zero);
                  Value r = arith::MulFOp::create(nb, l, t.inputs[1], e);
                  return SmallVector<Value>{arith::SelectOp::create(
                      nb, l, any, r, floatConst(nb, l, elem, 0.0))};
                })
            .front();
    return tiles
        .perSegment(
            b, loc, {elem},
            [&](OpBuilder &nb, Location l, ArrayRef<Value> idx, Value first,
                Value last) {
              Value sum = foldRows(
                  nb, l, scaled, first, last, idx, floatConst(nb, l, elem, 0.0),
                  [](OpBuilder &sb, Location sl, Value acc, Value v) -> Value {
                    return arith::AddFOp::create(sb, sl, acc, v);
                  });
              Value big = tensor::ExtractOp::create(nb, l, maxima, idx);
              return SmallVector<Value>{arith::AddFOp::create(
                  nb, l, big, math::LogOp::create(nb, l, sum))};
            })
        .front();
  }

  RaggedLoweringOptions options;
};

} // namespace

void mlir::ragged::compute::populateNormalizationPatterns(
    const TypeConverter &converter, RewritePatternSet &patterns,
    const RaggedLoweringOptions &options) {
  patterns.add<LayerNormLowering>(converter, patterns.getContext());
  patterns.add<SoftmaxLowering>(converter, patterns.getContext(), options);
}
