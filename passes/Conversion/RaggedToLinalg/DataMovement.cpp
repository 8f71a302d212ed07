//===- DataMovement.cpp - gather, concat and split ------------------------===//
//
// Ops that move rows between ragged tensors: each output row reads its
// source row, found from the offsets inside one generic; indices and
// partitions are checked at run time.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/RaggedToLinalg/PopulatePatterns.h"

#include "passes/Conversion/RaggedToLinalg/LoweringUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::ragged;
using namespace mlir::ragged::lowering;

namespace {

struct GatherLowering : OpConversionPattern<GatherOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(GatherOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value table = adaptor.getTable().front();
    Packed ids = unpack(op.getIds(), adaptor.getIds());
    auto resultType = cast<RaggedTensorType>(op.getType());
    Value vocab = arith::IndexCastOp::create(
        rewriter, loc, rewriter.getI64Type(), dimOf(rewriter, loc, table, 0));
    assertAll(
        rewriter, loc, ids.values,
        "ragged.gather: an id lies outside [0, table rows)",
        [&](OpBuilder &b, Location l, Value id) {
          Value zero = arith::ConstantIntOp::create(b, l, b.getI64Type(), 0);
          Value ge =
              arith::CmpIOp::create(b, l, arith::CmpIPredicate::sge, id, zero);
          Value lt =
              arith::CmpIOp::create(b, l, arith::CmpIPredicate::slt, id, vocab);
          return arith::AndIOp::create(b, l, ge, lt);
        });
    RankedTensorType outType = resultType.getValuesType();
    SmallVector<Value> dyn{dimOf(rewriter, loc, ids.values, 0)};
    if (outType.isDynamicDim(1))
      dyn.push_back(dimOf(rewriter, loc, table, 1));
    Value init = emptyTensor(rewriter, loc, outType.getShape(),
                             outType.getElementType(), dyn);
    AffineMap rowMap =
        AffineMap::get(2, 0, getAffineDimExpr(0, rewriter.getContext()));
    Value out = parallelGeneric(
        rewriter, loc, init, {ids.values}, {rowMap},
        [&](OpBuilder &b, Location l, ValueRange args) {
          Value row =
              arith::IndexCastOp::create(b, l, b.getIndexType(), args[0]);
          Value col = linalg::IndexOp::create(b, l, 1);
          return tensor::ExtractOp::create(b, l, table, ValueRange{row, col});
        });
    rewriter.replaceOpWithMultiple(
        op, {Packed{resultType, out, ids.partitions}.flatten(rewriter, loc)});
    return success();
  }
};

/// Rows of a new sequence tensor, each read from a source chosen in `pick`.
Value gatherRows(OpBuilder &b, Location loc, Value offsets, Value like,
                 function_ref<Value(OpBuilder &, Location, Value item, Value i,
                                    ArrayRef<Value> trailing)>
                     pick) {
  Value rows = loadIndex(b, loc, offsets, numSegments(b, loc, offsets));
  Value init = emptyRows(b, loc, rows, like);
  unsigned rank = cast<RankedTensorType>(init.getType()).getRank();
  return parallelGeneric(
      b, loc, init, {}, {}, [&](OpBuilder &nb, Location l, ValueRange) {
        SmallVector<Value> idx = loopIndices(nb, l, rank);
        Value item = findSegment(nb, l, offsets, idx[0]);
        Value i = arith::SubIOp::create(nb, l, idx[0],
                                        loadIndex(nb, l, offsets, item));
        return pick(nb, l, item, i, ArrayRef<Value>(idx).drop_front());
      });
}

Value readRow(OpBuilder &b, Location loc, Value values, Value row,
              ArrayRef<Value> trailing) {
  SmallVector<Value> at{row};
  llvm::append_range(at, trailing);
  return tensor::ExtractOp::create(b, loc, values, at);
}

struct ConcatLowering : OpConversionPattern<ConcatOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(ConcatOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Packed a = unpack(op.getLhs(), adaptor.getLhs());
    Packed c = unpack(op.getRhs(), adaptor.getRhs());
    Value offA = a.partitions.front(), offC = c.partitions.front();
    Value sameBatch = arith::CmpIOp::create(
        rewriter, loc, arith::CmpIPredicate::eq, dimOf(rewriter, loc, offA, 0),
        dimOf(rewriter, loc, offC, 0));
    cf::AssertOp::create(rewriter, loc, sameBatch,
                         "ragged.concat: the operands' batch sizes differ");
    AffineMap id = rewriter.getMultiDimIdentityMap(1);
    Value offsets = parallelGeneric(
        rewriter, loc, emptyLike(rewriter, loc, offA), {offA, offC}, {id, id},
        [](OpBuilder &b, Location l, ValueRange x) {
          return arith::AddIOp::create(b, l, x[0], x[1]);
        });
    Value out = gatherRows(
        rewriter, loc, offsets, a.values,
        [&](OpBuilder &b, Location l, Value item, Value i, ArrayRef<Value> t) {
          Value next = arith::AddIOp::create(b, l, item, constIndex(b, l, 1));
          Value startA = loadIndex(b, l, offA, item);
          Value lenA =
              arith::SubIOp::create(b, l, loadIndex(b, l, offA, next), startA);
          Value inA =
              arith::CmpIOp::create(b, l, arith::CmpIPredicate::ult, i, lenA);
          auto ifOp = scf::IfOp::create(
              b, l, inA,
              [&](OpBuilder &tb, Location tl) {
                Value row = arith::AddIOp::create(tb, tl, startA, i);
                scf::YieldOp::create(tb, tl, readRow(tb, tl, a.values, row, t));
              },
              [&](OpBuilder &eb, Location el) {
                Value row = arith::AddIOp::create(
                    eb, el, loadIndex(eb, el, offC, item),
                    arith::SubIOp::create(eb, el, i, lenA));
                scf::YieldOp::create(eb, el, readRow(eb, el, c.values, row, t));
              });
          return ifOp.getResult(0);
        });
    rewriter.replaceOpWithMultiple(
        op,
        {Packed{cast<RaggedTensorType>(op.getType()), out, {offsets}}.flatten(
            rewriter, loc)});
    return success();
  }
};

struct SplitLowering : OpConversionPattern<SplitOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(SplitOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Packed x = unpack(op.getSource(), adaptor.getSource());
    Value lengths = adaptor.getLengths().front();
    Value offsets = x.partitions.front();
    auto [lo, hi] = segmentBounds(rewriter, loc, offsets);
    Value sameBatch = arith::CmpIOp::create(
        rewriter, loc, arith::CmpIPredicate::eq,
        dimOf(rewriter, loc, lengths, 0), numSegments(rewriter, loc, offsets));
    cf::AssertOp::create(rewriter, loc, sameBatch,
                         "ragged.split: lengths must have one entry per item");
    AffineMap id = rewriter.getMultiDimIdentityMap(1);
    // Clamp into [0, L(b)] so reads stay in bounds, and check it was a no-op.
    Value tailLengths = parallelGeneric(
        rewriter, loc, emptyLike(rewriter, loc, lengths), {lengths, lo, hi},
        {id, id, id}, [](OpBuilder &b, Location l, ValueRange a) {
          Value len = arith::SubIOp::create(b, l, a[2], a[1]);
          return arith::SubIOp::create(b, l, len, a[0]);
        });
    Value both =
        parallelGeneric(rewriter, loc, emptyLike(rewriter, loc, lengths),
                        {lengths, tailLengths}, {id, id},
                        [](OpBuilder &b, Location l, ValueRange a) {
                          return arith::MinSIOp::create(b, l, a[0], a[1]);
                        });
    assertAll(
        rewriter, loc, both, "ragged.split: lengths must lie in [0, L(b)]",
        [](OpBuilder &b, Location l, Value v) {
          Value zero = arith::ConstantIntOp::create(b, l, b.getI64Type(), 0);
          return arith::CmpIOp::create(b, l, arith::CmpIPredicate::sge, v,
                                       zero);
        });
    Value headOffsets = exclusivePrefixSum(rewriter, loc, lengths);
    Value tailOffsets = exclusivePrefixSum(rewriter, loc, tailLengths);
    Value head = gatherRows(
        rewriter, loc, headOffsets, x.values,
        [&](OpBuilder &b, Location l, Value item, Value i, ArrayRef<Value> t) {
          Value row =
              arith::AddIOp::create(b, l, loadIndex(b, l, offsets, item), i);
          return readRow(b, l, x.values, row, t);
        });
    Value tail = gatherRows(
        rewriter, loc, tailOffsets, x.values,
        [&](OpBuilder &b, Location l, Value item, Value i, ArrayRef<Value> t) {
          Value skip = loadIndex(b, l, lengths, item);
          Value row =
              arith::AddIOp::create(b, l, loadIndex(b, l, offsets, item),
                                    arith::AddIOp::create(b, l, skip, i));
          return readRow(b, l, x.values, row, t);
        });
    rewriter.replaceOpWithMultiple(
        op, {Packed{cast<RaggedTensorType>(op.getHead().getType()),
                    head,
                    {headOffsets}}
                 .flatten(rewriter, loc),
             Packed{cast<RaggedTensorType>(op.getTail().getType()),
                    tail,
                    {tailOffsets}}
                 .flatten(rewriter, loc)});
    return success();
  }
};

} // namespace

void mlir::ragged::compute::populateDataMovementPatterns(
    const TypeConverter &converter, RewritePatternSet &patterns) {
  patterns.add<GatherLowering, ConcatLowering, SplitLowering>(
      converter, patterns.getContext());
}
