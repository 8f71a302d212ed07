//===- GuardContractionSlices.cpp - slices a GEMM reads, copied first -----===//
//
// IREE 3.13 clones a `tensor.extract_slice` into the dispatch of the op that
// reads it. When that op is a contraction IREE data-tiles, the operand's
// packing (`set_encoding`) then stays in the GEMM's dispatch instead of
// getting a dispatch of its own, and with a dynamic M the CPU backend packs
// the strided rows on the stack: "'func.func' op exceeded stack allocation
// limit of 32768 bytes" (98304 bytes for BERT's pooler, `tanh(dense(x[:,
// 0]))`, 425984 for all-MiniLM-L6-v2's) on every x86 target. Behind a
// `util.optimization_barrier` the slice is a copy dispatch of its own, and
// the packing of its result is scheduled as for any function argument.
// (IREE's `flow.tensor.slice` is no way out: it copied a strided slice as if
// it were contiguous.)
//
//===----------------------------------------------------------------------===//

#include "passes/IREE/Barrier.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::ragged {
#define GEN_PASS_DEF_GUARDCONTRACTIONSLICESPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;

namespace {

/// Whether `value`, or a reshape of it, is an input of a contraction on
/// tensors (the ops IREE data-tiles).
bool feedsContraction(Value value) {
  for (OpOperand &use : value.getUses()) {
    Operation *user = use.getOwner();
    if (isa<tensor::CollapseShapeOp, tensor::ExpandShapeOp>(user)) {
      if (feedsContraction(user->getResult(0)))
        return true;
      continue;
    }
    auto op = dyn_cast<linalg::LinalgOp>(user);
    if (op && op.hasPureTensorSemantics() && op.isDpsInput(&use) &&
        linalg::isaContractionOpInterface(op))
      return true;
  }
  return false;
}

/// An `extract_slice` of dynamic shape in a function's body that a
/// contraction reads: its users read it behind a barrier, its dynamic sizes
/// tied to the slice's.
struct CopySliceFirst : OpRewritePattern<tensor::ExtractSliceOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(tensor::ExtractSliceOp slice,
                                PatternRewriter &rewriter) const override {
    if (!isa<func::FuncOp>(slice->getParentOp()))
      return rewriter.notifyMatchFailure(slice, "inside a loop or region");
    if (slice.getType().hasStaticShape())
      return rewriter.notifyMatchFailure(slice, "static: IREE packs it");
    if (!feedsContraction(slice.getResult()))
      return rewriter.notifyMatchFailure(slice, "no contraction reads it");
    SmallVector<OpOperand *> uses = llvm::to_vector(
        llvm::map_range(slice->getUses(), [](OpOperand &use) { return &use; }));
    rewriter.setInsertionPointAfter(slice);
    Value hidden =
        ragged::optimizationBarrier(rewriter, slice.getLoc(), slice.getResult(),
                                    /*tieShape=*/true);
    for (OpOperand *use : uses)
      rewriter.modifyOpInPlace(use->getOwner(), [&] { use->set(hidden); });
    return success();
  }
};

struct GuardContractionSlicesPass
    : ragged::impl::GuardContractionSlicesPassBase<GuardContractionSlicesPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    ragged::populateGuardContractionSlicesPatterns(patterns);
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};

} // namespace

void mlir::ragged::populateGuardContractionSlicesPatterns(
    RewritePatternSet &patterns) {
  patterns.add<CopySliceFirst>(patterns.getContext());
}
