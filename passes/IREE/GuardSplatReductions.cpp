//===- GuardSplatReductions.cpp - reductions of splats read a broadcast ---===//
//
// IREE 3.13's CPU backend miscompiles a reduction whose input is a
// `linalg.fill`: it adds the scalar once per vector instead of once per
// element, so `torch.ones(x.shape).sum()` over 5x5x5 gave 8 (ceil(125 / 16)
// with 16 f32 lanes) and the row sums of a [3, 100] fill 7, whatever the
// scalar and whether the shape is static or not. A broadcast of a rank-0
// tensor IREE cannot see into reduces correctly, so each such input is
// rewritten into one: the scalar in a rank-0 tensor behind a
// `util.optimization_barrier`, broadcast by a generic.
//
//===----------------------------------------------------------------------===//

#include "passes/IREE/Barrier.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::ragged {
#define GEN_PASS_DEF_GUARDSPLATREDUCTIONSPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;

namespace {

struct BroadcastHiddenScalar : OpInterfaceRewritePattern<linalg::LinalgOp> {
  using OpInterfaceRewritePattern::OpInterfaceRewritePattern;

  LogicalResult matchAndRewrite(linalg::LinalgOp op,
                                PatternRewriter &rewriter) const override {
    if (!op.hasPureTensorSemantics() || op.getNumReductionLoops() == 0)
      return rewriter.notifyMatchFailure(op, "not a reduction on tensors");
    bool changed = false;
    for (OpOperand *input : op.getDpsInputOperands()) {
      auto fill = input->get().getDefiningOp<linalg::FillOp>();
      if (!fill)
        continue;
      Location loc = fill.getLoc();
      rewriter.setInsertionPoint(op);
      auto type = cast<RankedTensorType>(fill.getResult(0).getType());
      Value scalar = fill.getInputs()[0];
      Value cell = tensor::FromElementsOp::create(
          rewriter, loc, RankedTensorType::get({}, type.getElementType()),
          scalar);
      Value hidden =
          ragged::optimizationBarrier(rewriter, loc, cell, /*tieShape=*/false);
      // The fill's init gives the shape; the broadcast does not read it.
      Value init = fill.getOutputs()[0];
      unsigned rank = type.getRank();
      SmallVector<AffineMap> maps{
          AffineMap::get(rank, 0, rewriter.getContext()),
          rewriter.getMultiDimIdentityMap(rank)};
      SmallVector<utils::IteratorType> iterators(rank,
                                                 utils::IteratorType::parallel);
      auto broadcast = linalg::GenericOp::create(
          rewriter, loc, TypeRange{type}, ValueRange{hidden}, ValueRange{init},
          maps, iterators, [](OpBuilder &b, Location at, ValueRange args) {
            linalg::YieldOp::create(b, at, args[0]);
          });
      rewriter.modifyOpInPlace(op, [&] { input->set(broadcast.getResult(0)); });
      changed = true;
    }
    return success(changed);
  }
};

struct GuardSplatReductionsPass
    : ragged::impl::GuardSplatReductionsPassBase<GuardSplatReductionsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    ragged::populateGuardSplatReductionsPatterns(patterns);
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};

} // namespace

void mlir::ragged::populateGuardSplatReductionsPatterns(
    RewritePatternSet &patterns) {
  patterns.add<BroadcastHiddenScalar>(patterns.getContext());
}
