//===- FillSplats.cpp - broadcasts of one scalar as fills -----------------===//
//
// torch-mlir lowers `zeros_like(x)` and `full_like(x, c)` to a generic that
// broadcasts a rank-0 constant. IREE 3.13 makes such a generic a dispatch
// without operands, and after it cloned that dispatch for each consumer
// that updates it in place (an insert, a scatter), CSE merged the clones
// again: two updates of one zero tensor (the gradients of two slices, or of
// `sort` and `topk`, of one input) were written into one buffer, and each
// result held both. A `linalg.fill` is a splat to IREE, which it gives
// each in-place consumer a copy of. The consumer may lie in another
// function (a dense piece of the graph), so every such generic becomes a
// fill, but for those a scatter reads.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::ragged {
#define GEN_PASS_DEF_FILLSPLATSPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;

namespace {

/// Whether `use` is an input, or a reshape of one, of an op from a dialect
/// this context does not know (torch-mlir's `tm_tensor` and IREE's
/// `iree_linalg_ext` ops put their outputs in the last operand segment, their
/// inputs before it).
bool readByUnknownOp(OpOperand &use) {
  Operation *user = use.getOwner();
  if (isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::CastOp>(user))
    return llvm::any_of(user->getResult(0).getUses(), readByUnknownOp);
  if (user->isRegistered())
    return false;
  auto segments = user->getAttrOfType<DenseI32ArrayAttr>("operandSegmentSizes");
  return !segments || segments.empty() ||
         use.getOperandNumber() <
             user->getNumOperands() - segments.asArrayRef().back();
}

struct FillSplat : OpRewritePattern<linalg::GenericOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(linalg::GenericOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getNumDpsInits() != 1 || op.getNumDpsInputs() > 1 ||
        !op.hasPureTensorSemantics() ||
        op.getNumParallelLoops() != op.getNumLoops() ||
        !op.getMatchingIndexingMap(op.getDpsInitOperand(0)).isPermutation())
      return rewriter.notifyMatchFailure(
          op, "not an all-parallel generic writing every element of one init");
    // A fill among the inputs of a scatter is cloned into its dispatch,
    // which IREE's CPU backend then cannot compile.
    if (llvm::any_of(op->getUses(), readByUnknownOp))
      return rewriter.notifyMatchFailure(op, "a scatter reads it");
    Block *body = op.getBody();
    if (body->getOperations().size() != 1)
      return rewriter.notifyMatchFailure(op, "the body computes");
    Value yielded = cast<linalg::YieldOp>(body->getTerminator()).getValues()[0];
    Value scalar = yielded; // a value from outside the body
    if (auto arg = dyn_cast<BlockArgument>(yielded);
        arg && arg.getOwner() == body) {
      if (arg.getArgNumber() != 0 || op.getNumDpsInputs() != 1)
        return rewriter.notifyMatchFailure(op, "yields the init");
      Value input = op.getDpsInputs()[0];
      auto type = dyn_cast<RankedTensorType>(input.getType());
      if (type && type.getRank() != 0)
        return rewriter.notifyMatchFailure(
            op, "broadcasts a tensor of many values");
      scalar = type ? rewriter.createOrFold<tensor::ExtractOp>(
                          op.getLoc(), input, ValueRange{})
                    : input;
    }
    rewriter.replaceOpWithNewOp<linalg::FillOp>(op, scalar,
                                                op.getDpsInits()[0]);
    return success();
  }
};

struct FillSplatsPass : ragged::impl::FillSplatsPassBase<FillSplatsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    ragged::populateFillSplatsPatterns(patterns);
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};

} // namespace

void mlir::ragged::populateFillSplatsPatterns(RewritePatternSet &patterns) {
  patterns.add<FillSplat>(patterns.getContext());
}
