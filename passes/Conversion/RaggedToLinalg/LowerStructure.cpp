//===- LowerStructure.cpp - pack, padding, masks and checks ---------------===//

#include "passes/Conversion/RaggedToLinalg/LoweringUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::ragged;
using namespace mlir::ragged::lowering;

namespace {

/// Runtime sizes of the padded form [batch, item dims...].
SmallVector<Value> paddedSizes(OpBuilder &b, Location loc,
                               const Packed &packed) {
  RaggedTensorType type = packed.type;
  SmallVector<Value> sizes{numSegments(b, loc, packed.partitions.front())};
  unsigned r = 0;
  for (auto [d, size] : llvm::enumerate(type.getShape())) {
    if (size == RaggedTensorType::kRagged)
      sizes.push_back(
          maxSegmentLength(b, loc, packed.offsets(type.getSymbols()[r++])));
    else if (ShapedType::isDynamic(size))
      sizes.push_back(
          dimOf(b, loc, packed.values, d - type.getLastRaggedDim()));
    else
      sizes.push_back(constIndex(b, loc, size));
  }
  return sizes;
}

SmallVector<Value> dynamicOnly(RankedTensorType type, ArrayRef<Value> sizes) {
  SmallVector<Value> dyn;
  for (auto [size, v] : llvm::zip_equal(type.getShape(), sizes))
    if (ShapedType::isDynamic(size))
      dyn.push_back(v);
  return dyn;
}

struct PackLowering : OpConversionPattern<PackOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(PackOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    auto type = cast<RaggedTensorType>(op.getType());
    SmallVector<Type> converted;
    if (failed(getTypeConverter()->convertType(type, converted)))
      return failure();
    SmallVector<Value> flat{adaptor.getValues().front()};
    for (ValueRange p : adaptor.getPartitions())
      flat.push_back(p.front());
    for (auto [v, t] : llvm::zip_equal(flat, converted))
      v = castTo(rewriter, op.getLoc(), v, t);
    rewriter.replaceOpWithMultiple(op, {flat});
    return success();
  }
};

struct ValuesLowering : OpConversionPattern<ValuesOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(ValuesOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Value values = adaptor.getSource().front();
    rewriter.replaceOp(op, castTo(rewriter, op.getLoc(), values, op.getType()));
    return success();
  }
};

struct OffsetsLowering : OpConversionPattern<OffsetsOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(OffsetsOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Packed packed = unpack(op.getSource(), adaptor.getSource());
    Value offsets = packed.offsets(op.getSymbolAttr());
    rewriter.replaceOp(op,
                       castTo(rewriter, op.getLoc(), offsets, op.getType()));
    return success();
  }
};

/// The values pass through; the new partition is the items' row offsets.
struct FlattenLowering : OpConversionPattern<FlattenOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(FlattenOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Packed source = unpack(op.getSource(), adaptor.getSource());
    Value rows = Addressing(rewriter, op.getLoc(), source).rowOffsets();
    Packed result{cast<RaggedTensorType>(op.getType()), source.values, {rows}};
    rewriter.replaceOpWithMultiple(op, {result.flatten(rewriter, op.getLoc())});
    return success();
  }
};

struct ToPaddedLowering : OpConversionPattern<ToPaddedOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(ToPaddedOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    FailureOr<Packed> maybe =
        unpackAddressable(op, op.getSource(), adaptor.getSource());
    if (failed(maybe))
      return failure();
    Packed packed = *maybe;
    auto resultType = cast<RankedTensorType>(op.getType());
    Addressing addressing(rewriter, loc, packed);
    SmallVector<Value> sizes = paddedSizes(rewriter, loc, packed);
    Value init = emptyTensor(rewriter, loc, resultType.getShape(),
                             resultType.getElementType(),
                             dynamicOnly(resultType, sizes));
    unsigned last = packed.type.getLastRaggedDim();
    Value padding = arith::ConstantOp::create(rewriter, loc, op.getPadding());
    Value result = parallelGeneric(
        rewriter, loc, init, {}, {}, [&](OpBuilder &b, Location l, ValueRange) {
          SmallVector<Value> idx;
          for (int64_t d = 0; d < resultType.getRank(); ++d)
            idx.push_back(linalg::IndexOp::create(b, l, d));
          auto [valid, row] = addressing.address(
              b, l, idx[0], ArrayRef<Value>(idx).slice(1, last + 1));
          SmallVector<Value> at{row};
          llvm::append_range(at, ArrayRef<Value>(idx).drop_front(last + 2));
          auto ifOp = scf::IfOp::create(
              b, l, valid,
              [&](OpBuilder &tb, Location tl) {
                Value v = tensor::ExtractOp::create(tb, tl, packed.values, at);
                scf::YieldOp::create(tb, tl, v);
              },
              [&](OpBuilder &eb, Location el) {
                scf::YieldOp::create(eb, el, padding);
              });
          return ifOp.getResult(0);
        });
    rewriter.replaceOp(op, result);
    return success();
  }
};

struct FromPaddedLowering : OpConversionPattern<FromPaddedOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(FromPaddedOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    auto type = cast<RaggedTensorType>(op.getType());
    std::string why;
    if (failed(checkAddressable(type, why)))
      return unsupported(op, why);
    Value padded = adaptor.getPadded().front();
    // Lengths must fit the padded extent of their dims.
    Value ok =
        arith::ConstantIntOp::create(rewriter, loc, rewriter.getI1Type(), 1);
    Packed packed{type, Value(), {}};
    for (auto [i, lengths] : llvm::enumerate(adaptor.getLengths())) {
      StringAttr symbol = type.getDistinctSymbols()[i];
      unsigned dim =
          llvm::find(type.getSymbols(), symbol) - type.getSymbols().begin();
      unsigned pos = 0;
      for (unsigned d = 0, r = 0; d < type.getItemRank(); ++d)
        if (type.isRaggedDim(d) && r++ == dim)
          pos = d;
      Value extent =
          arith::IndexCastOp::create(rewriter, loc, rewriter.getI64Type(),
                                     dimOf(rewriter, loc, padded, pos + 1));
      Value fits = allOf(
          rewriter, loc, lengths.front(),
          [&](OpBuilder &b, Location l, Value len) {
            Value zero = arith::ConstantIntOp::create(b, l, b.getI64Type(), 0);
            Value lo = arith::CmpIOp::create(b, l, arith::CmpIPredicate::sge,
                                             len, zero);
            Value hi = arith::CmpIOp::create(b, l, arith::CmpIPredicate::sle,
                                             len, extent);
            return arith::AndIOp::create(b, l, lo, hi);
          });
      Value count =
          arith::CmpIOp::create(rewriter, loc, arith::CmpIPredicate::eq,
                                dimOf(rewriter, loc, lengths.front(), 0),
                                dimOf(rewriter, loc, padded, 0));
      ok = arith::AndIOp::create(
          rewriter, loc, ok, arith::AndIOp::create(rewriter, loc, fits, count));
      packed.partitions.push_back(
          exclusivePrefixSum(rewriter, loc, lengths.front()));
    }
    cf::AssertOp::create(rewriter, loc, ok,
                         "ragged.from_padded: lengths must have one entry per "
                         "padded item and lie in [0, padded extent]");
    Addressing addressing(rewriter, loc, packed);
    Value rowOffsets = addressing.rowOffsets();
    Value rows = loadIndex(rewriter, loc, rowOffsets,
                           numSegments(rewriter, loc, rowOffsets));
    RankedTensorType valuesType = type.getValuesType();
    SmallVector<Value> dyn{rows};
    unsigned last = type.getLastRaggedDim();
    for (int64_t d = 1; d < valuesType.getRank(); ++d)
      if (valuesType.isDynamicDim(d))
        dyn.push_back(dimOf(rewriter, loc, padded, last + 1 + d));
    // A dense dim of size 0 up to the last ragged dim leaves every item
    // without rows: the values are empty. The gather below would index a
    // padded tensor with a static extent of 0, which IREE's CPU codegen
    // rejects ("offset 1 is out-of-bounds: 0 >= 0").
    bool noRows = llvm::is_contained(type.getShape().take_front(last + 1), 0);
    if (noRows)
      dyn.front() = constIndex(rewriter, loc, 0);
    Value init = emptyTensor(rewriter, loc, valuesType.getShape(),
                             valuesType.getElementType(), dyn);
    if (noRows) {
      packed.values = init;
      rewriter.replaceOpWithMultiple(op, {packed.flatten(rewriter, loc)});
      return success();
    }
    packed.values = parallelGeneric(
        rewriter, loc, init, {}, {}, [&](OpBuilder &b, Location l, ValueRange) {
          Value row = linalg::IndexOp::create(b, l, 0);
          Value item = findSegment(b, l, rowOffsets, row);
          Value local = arith::SubIOp::create(
              b, l, row, loadIndex(b, l, rowOffsets, item));
          SmallVector<Value> at(last + 2);
          at[0] = item;
          for (int64_t d = last; d >= 0; --d) {
            Value extent = addressing.extent(b, l, d, item);
            at[d + 1] = arith::RemUIOp::create(b, l, local, extent);
            local = arith::DivUIOp::create(b, l, local, extent);
          }
          for (int64_t d = 1; d < valuesType.getRank(); ++d)
            at.push_back(linalg::IndexOp::create(b, l, d));
          return tensor::ExtractOp::create(b, l, padded, at);
        });
    rewriter.replaceOpWithMultiple(op, {packed.flatten(rewriter, loc)});
    return success();
  }
};

struct MaskLowering : OpConversionPattern<MaskOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(MaskOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    FailureOr<Packed> maybe =
        unpackAddressable(op, op.getSource(), adaptor.getSource());
    if (failed(maybe))
      return failure();
    Packed packed = *maybe;
    RaggedTensorType type = packed.type;
    auto maskType = cast<RankedTensorType>(op.getType());
    SmallVector<Value> padded = paddedSizes(rewriter, loc, packed);
    SmallVector<Value> sizes{padded[0]};
    for (unsigned d = 0; d < type.getItemRank(); ++d)
      if (type.isRaggedDim(d))
        sizes.push_back(padded[d + 1]);
    Value init =
        emptyTensor(rewriter, loc, maskType.getShape(), rewriter.getI1Type(),
                    dynamicOnly(maskType, sizes));
    Addressing addressing(rewriter, loc, packed);
    Value mask = parallelGeneric(
        rewriter, loc, init, {}, {}, [&](OpBuilder &b, Location l, ValueRange) {
          Value zero = constIndex(b, l, 0);
          SmallVector<Value> item;
          unsigned r = 1;
          for (unsigned d = 0; d <= type.getLastRaggedDim(); ++d)
            item.push_back(type.isRaggedDim(d)
                               ? linalg::IndexOp::create(b, l, r++)
                               : zero);
          return addressing
              .address(b, l, linalg::IndexOp::create(b, l, 0), item)
              .first;
        });
    rewriter.replaceOp(op, mask);
    return success();
  }
};

struct MatchLowering : OpConversionPattern<MatchOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(MatchOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Packed source = unpack(op.getSource(), adaptor.getSource());
    Packed reference = unpack(op.getReference(), adaptor.getReference());
    Value ok =
        arith::ConstantIntOp::create(rewriter, loc, rewriter.getI1Type(), 1);
    for (auto [mine, theirs] :
         llvm::zip_equal(source.partitions, reference.partitions)) {
      Value n = dimOf(rewriter, loc, mine, 0);
      Value sameSize =
          arith::CmpIOp::create(rewriter, loc, arith::CmpIPredicate::eq, n,
                                dimOf(rewriter, loc, theirs, 0));
      // Compare over the common prefix so reads stay in bounds.
      Value common = arith::MinUIOp::create(rewriter, loc, n,
                                            dimOf(rewriter, loc, theirs, 0));
      auto prefix = [&](Value t) -> Value {
        SmallVector<OpFoldResult> offs{rewriter.getIndexAttr(0)}, sizes{common},
            strides{rewriter.getIndexAttr(1)};
        return tensor::ExtractSliceOp::create(rewriter, loc, t, offs, sizes,
                                              strides);
      };
      Value a = prefix(mine), b = prefix(theirs);
      Value equal =
          allOf(rewriter, loc, a, [&](OpBuilder &nb, Location l, Value mineAt) {
            Value i = linalg::IndexOp::create(nb, l, 0);
            Value theirsAt = tensor::ExtractOp::create(nb, l, b, i);
            return arith::CmpIOp::create(nb, l, arith::CmpIPredicate::eq,
                                         mineAt, theirsAt);
          });
      ok = arith::AndIOp::create(
          rewriter, loc, ok,
          arith::AndIOp::create(rewriter, loc, sameSize, equal));
    }
    cf::AssertOp::create(rewriter, loc, ok,
                         "ragged.match: the partitions of the two ragged "
                         "tensors differ");
    Packed result{cast<RaggedTensorType>(op.getType()), source.values,
                  reference.partitions};
    rewriter.replaceOpWithMultiple(op, {result.flatten(rewriter, loc)});
    return success();
  }
};

} // namespace

void mlir::ragged::populateRaggedStructureToLinalgPatterns(
    const TypeConverter &converter, RewritePatternSet &patterns) {
  patterns
      .add<PackLowering, ValuesLowering, OffsetsLowering, FlattenLowering,
           ToPaddedLowering, FromPaddedLowering, MaskLowering, MatchLowering>(
          converter, patterns.getContext());
}
