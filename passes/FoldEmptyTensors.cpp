//===- FoldEmptyTensors.cpp - no work on tensors without elements --------===//
//
// Dynamo specialises a size of 0 to a constant, so an all-empty batch
// reaches the compiler as static zero-size tensors. IREE 3.13 divides by
// such sizes while it forms and names dispatches (iree-compile dies with
// SIGFPE). Nothing needs computing there: a linalg op with a zero-trip
// loop returns its inits, and a side-effect-free op whose result has no
// elements is an empty tensor.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

namespace mlir::ragged {
#define GEN_PASS_DEF_FOLDEMPTYTENSORSPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;

namespace {

/// A linalg op with a loop of static extent 0 runs no iteration: its
/// results are its inits.
struct ZeroTripLinalgOp : OpInterfaceRewritePattern<linalg::LinalgOp> {
  using OpInterfaceRewritePattern::OpInterfaceRewritePattern;

  LogicalResult matchAndRewrite(linalg::LinalgOp op, PatternRewriter &rewriter) const override {
    if (!op.hasPureTensorSemantics())
      return rewriter.notifyMatchFailure(op, "not on tensors");
    if (!llvm::is_contained(op.getStaticLoopRanges(), 0))
      return rewriter.notifyMatchFailure(op, "no loop of static extent 0");
    rewriter.replaceOp(op, op.getDpsInits());
    return success();
  }
};

bool hasNoElements(Type type) {
  auto tensor = dyn_cast<RankedTensorType>(type);
  return tensor && tensor.hasStaticShape() && tensor.getNumElements() == 0;
}

/// An op without side effects whose one result is a static tensor without
/// elements: a `tensor.empty`.
struct EmptyResult : RewritePattern {
  EmptyResult(MLIRContext *context) : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, context) {}

  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rewriter) const override {
    if (isa<tensor::EmptyOp>(op) || op->getNumResults() != 1 || !hasNoElements(op->getResult(0).getType()))
      return rewriter.notifyMatchFailure(op, "not one result without elements");
    if (!isMemoryEffectFree(op) || matchPattern(op->getResult(0), m_Constant()))
      return rewriter.notifyMatchFailure(op, "has side effects, or is a constant");
    auto type = cast<RankedTensorType>(op->getResult(0).getType());
    rewriter.replaceOpWithNewOp<tensor::EmptyOp>(op, type.getShape(), type.getElementType(),
                                                 type.getEncoding());
    return success();
  }
};

struct FoldEmptyTensorsPass : ragged::impl::FoldEmptyTensorsPassBase<FoldEmptyTensorsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    ragged::populateFoldEmptyTensorsPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

void mlir::ragged::populateFoldEmptyTensorsPatterns(RewritePatternSet &patterns) {
  patterns.add<ZeroTripLinalgOp, EmptyResult>(patterns.getContext());
}
