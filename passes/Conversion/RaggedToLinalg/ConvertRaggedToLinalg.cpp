//===- ConvertRaggedToLinalg.cpp - the convert-ragged-to-linalg pass ------===//
//
// A thin driver: the type conversion and the patterns live in
// populate...Patterns functions so other pipelines can reuse them.
//
//===----------------------------------------------------------------------===//

#include "dialect/RaggedDialect.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Func/Transforms/FuncConversions.h"

namespace mlir::ragged {
#define GEN_PASS_DEF_CONVERTRAGGEDTOLINALGPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;
using namespace mlir::ragged;

void mlir::ragged::populateRaggedTypeConversion(TypeConverter &converter) {
  converter.addConversion([](Type type) { return type; });
  converter.addConversion(
      [](RaggedTensorType type, SmallVectorImpl<Type> &results) {
        results.push_back(type.getValuesType());
        for (StringAttr symbol : type.getDistinctSymbols())
          results.push_back(type.getPartitionType(symbol));
        return success();
      });
}

namespace {
struct ConvertRaggedToLinalgPass
    : ragged::impl::ConvertRaggedToLinalgPassBase<ConvertRaggedToLinalgPass> {
  using ConvertRaggedToLinalgPassBase::ConvertRaggedToLinalgPassBase;

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    int64_t tile = balanceTile;
    if (tile < 0 || tile > kMaxBalanceTile) {
      getOperation()->emitError() << "balance-tile must be in [0, "
                                  << kMaxBalanceTile << "], got " << tile;
      return signalPassFailure();
    }
    if (attentionBuckets < 0 || attentionBuckets > kMaxAttentionBuckets) {
      getOperation()->emitError()
          << "attention-buckets must be in [0, " << kMaxAttentionBuckets
          << "], got " << attentionBuckets;
      return signalPassFailure();
    }
    TypeConverter converter;
    populateRaggedTypeConversion(converter);

    ConversionTarget target(*ctx);
    target.addIllegalDialect<RaggedDialect>();
    target.addLegalOp<ModuleOp>();
    target.addLegalDialect<arith::ArithDialect, cf::ControlFlowDialect,
                           linalg::LinalgDialect, math::MathDialect,
                           scf::SCFDialect, tensor::TensorDialect>();
    target.addDynamicallyLegalOp<func::FuncOp>([&](func::FuncOp op) {
      return converter.isSignatureLegal(op.getFunctionType()) &&
             converter.isLegal(&op.getBody());
    });
    target.addDynamicallyLegalOp<func::ReturnOp, func::CallOp>(
        [&](Operation *op) { return converter.isLegal(op); });

    // Only the offsets encoding has a lowering; say so where it is used.
    WalkResult encodings = getOperation().walk([](Operation *op) {
      for (Type t : llvm::concat<const Type>(op->getOperandTypes(),
                                             op->getResultTypes()))
        if (auto r = dyn_cast<RaggedTensorType>(t);
            r && r.getEncoding() != Encoding::offsets) {
          op->emitOpError() << "cannot be lowered: " << r << " uses the '"
                            << stringifyEncoding(r.getEncoding())
                            << "' encoding; only 'offsets' is lowered";
          return WalkResult::interrupt();
        }
      return WalkResult::advance();
    });
    if (encodings.wasInterrupted())
      return signalPassFailure();

    RewritePatternSet patterns(ctx);
    populateFunctionOpInterfaceTypeConversionPattern<func::FuncOp>(patterns,
                                                                   converter);
    populateReturnOpTypeConversionPattern(patterns, converter);
    populateCallOpTypeConversionPattern(patterns, converter);
    populateRaggedStructureToLinalgPatterns(converter, patterns);
    RaggedLoweringOptions options;
    options.balanceTile = balanceTile;
    options.attentionBuckets = attentionBuckets;
    populateRaggedComputeToLinalgPatterns(converter, patterns, options);

    // Partial: ops of other dialects (affine maps from torch-mlir, ops
    // left for IREE such as tm_tensor.attention) pass through unchanged.
    if (failed(applyPartialConversion(getOperation(), target,
                                      std::move(patterns))))
      signalPassFailure();
  }
};
} // namespace
