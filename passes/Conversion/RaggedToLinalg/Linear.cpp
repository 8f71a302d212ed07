//===- Linear.cpp - products with a dense weight --------------------------===//
//
// A ragged operand times a dense weight is one contraction over the packed
// rows: linalg.matmul for [rows, K], a generic contraction over the last dim
// otherwise. Work is proportional to the real rows.
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

struct MatmulLowering : OpConversionPattern<MatmulOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(MatmulOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Packed x = unpack(op.getSource(), adaptor.getSource());
    Value weight = adaptor.getWeight().front();
    auto resultType = cast<RaggedTensorType>(op.getType());
    RankedTensorType outType = resultType.getValuesType();
    auto valuesType = cast<RankedTensorType>(x.values.getType());
    unsigned rank = valuesType.getRank();
    SmallVector<Value> dyn;
    for (unsigned d = 0; d + 1 < rank; ++d)
      if (outType.isDynamicDim(d))
        dyn.push_back(dimOf(rewriter, loc, x.values, d));
    if (outType.isDynamicDim(rank - 1))
      dyn.push_back(dimOf(rewriter, loc, weight, 1));
    Type elem = outType.getElementType();
    Value init = emptyTensor(rewriter, loc, outType.getShape(), elem, dyn);
    init = linalg::FillOp::create(rewriter, loc,
                                  floatConst(rewriter, loc, elem, 0.0), init)
               .getResult(0);
    // A static contraction extent of 0 makes the product all zeros. IREE 3.13
    // crashes (AnnotateDispatchesPass) on a contraction over an empty static
    // dim, so the zero fill is the result.
    int64_t k = valuesType.getDimSize(rank - 1);
    if (k == 0 || cast<RankedTensorType>(weight.getType()).getDimSize(0) == 0) {
      rewriter.replaceOpWithMultiple(
          op, {Packed{resultType, init, x.partitions}.flatten(rewriter, loc)});
      return success();
    }
    Value out;
    if (rank == 2) {
      out = linalg::MatmulOp::create(rewriter, loc, TypeRange{outType},
                                     ValueRange{x.values, weight},
                                     ValueRange{init})
                .getResult(0);
    } else {
      // [rows, t..., K] x [K, N]: a contraction over the last dim.
      MLIRContext *ctx = rewriter.getContext();
      unsigned loops = rank + 1;
      SmallVector<AffineExpr> in, w, o;
      for (unsigned d = 0; d + 1 < rank; ++d) {
        in.push_back(getAffineDimExpr(d, ctx));
        o.push_back(getAffineDimExpr(d, ctx));
      }
      AffineExpr n = getAffineDimExpr(rank - 1, ctx),
                 k = getAffineDimExpr(rank, ctx);
      in.push_back(k);
      w = {k, n};
      o.push_back(n);
      SmallVector<utils::IteratorType> iters(loops,
                                             utils::IteratorType::parallel);
      iters.back() = utils::IteratorType::reduction;
      out =
          linalg::GenericOp::create(
              rewriter, loc, outType, ValueRange{x.values, weight},
              ValueRange{init},
              {AffineMap::get(loops, 0, in, ctx),
               AffineMap::get(loops, 0, w, ctx),
               AffineMap::get(loops, 0, o, ctx)},
              iters,
              [&](OpBuilder &b, Location l, ValueRange args) {
                Value p = arith::MulFOp::create(b, l, args[0], args[1]);
                linalg::YieldOp::create(
                    b, l, ValueRange{arith::AddFOp::create(b, l, args[2], p)});
              })
              .getResult(0);
    }
    rewriter.replaceOpWithMultiple(
        op, {Packed{resultType, out, x.partitions}.flatten(rewriter, loc)});
    return success();
  }
};

} // namespace

void mlir::ragged::compute::populateLinearPatterns(
    const TypeConverter &converter, RewritePatternSet &patterns) {
  patterns.add<MatmulLowering>(converter, patterns.getContext());
}
