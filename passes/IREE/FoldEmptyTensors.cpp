//===- FoldEmptyTensors.cpp - no work on tensors without elements ---------===//
//
// Dynamo specialises a size of 0 to a constant, so an all-empty batch
// reaches the compiler as static zero-size tensors. IREE 3.13 divides by
// such sizes while it forms and names dispatches (iree-compile dies with
// SIGFPE). Nothing needs computing there: a linalg op with a zero-trip
// loop returns its inits, a side-effect-free op whose result has no
// elements is an empty tensor, and a concatenation skips empty operands.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
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

  LogicalResult matchAndRewrite(linalg::LinalgOp op,
                                PatternRewriter &rewriter) const override {
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
  EmptyResult(MLIRContext *context)
      : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, context) {}

  LogicalResult matchAndRewrite(Operation *op,
                                PatternRewriter &rewriter) const override {
    if (isa<tensor::EmptyOp>(op) || op->getNumResults() != 1 ||
        !hasNoElements(op->getResult(0).getType()))
      return rewriter.notifyMatchFailure(op, "not one result without elements");
    if (!isMemoryEffectFree(op) || matchPattern(op->getResult(0), m_Constant()))
      return rewriter.notifyMatchFailure(op,
                                         "has side effects, or is a constant");
    auto type = cast<RankedTensorType>(op->getResult(0).getType());
    rewriter.replaceOpWithNewOp<tensor::EmptyOp>(
        op, type.getShape(), type.getElementType(), type.getEncoding());
    return success();
  }
};

/// A `tensor.concat` without the operands that have no rows along its dim
/// (seen through casts): IREE miscompiles the concatenation of empty
/// tensors whose type is dynamic ("hal.tensor.export op number of
/// source_dims must match"). With every operand empty, the first stays.
struct ConcatOfEmpty : OpRewritePattern<tensor::ConcatOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(tensor::ConcatOp op,
                                PatternRewriter &rewriter) const override {
    int64_t dim = op.getDim();
    auto hasRows = [&](Value input) {
      if (auto cast = input.getDefiningOp<tensor::CastOp>())
        input = cast.getSource();
      return cast<RankedTensorType>(input.getType()).getDimSize(dim) != 0;
    };
    SmallVector<Value> kept = llvm::filter_to_vector(op.getInputs(), hasRows);
    if (kept.size() == op.getInputs().size())
      return rewriter.notifyMatchFailure(op, "every operand may have rows");
    if (kept.empty())
      kept.push_back(op.getInputs().front());
    Value result =
        kept.size() == 1
            ? kept.front()
            : tensor::ConcatOp::create(rewriter, op.getLoc(), dim, kept);
    if (result.getType() != op.getType())
      result =
          tensor::CastOp::create(rewriter, op.getLoc(), op.getType(), result);
    rewriter.replaceOp(op, result);
    return success();
  }
};

struct FoldEmptyTensorsPass
    : ragged::impl::FoldEmptyTensorsPassBase<FoldEmptyTensorsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    ragged::populateFoldEmptyTensorsPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

void mlir::ragged::populateFoldEmptyTensorsPatterns(
    RewritePatternSet &patterns) {
  patterns.add<ZeroTripLinalgOp, EmptyResult, ConcatOfEmpty>(
      patterns.getContext());
}
