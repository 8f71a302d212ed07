//===- GuardScanInputs.cpp - scans read their input from memory -----------===//
//
// IREE 3.13 fuses the producers of a `tm_tensor.scan`'s input into the
// scan's dispatch. When that input is computed from slices of an earlier
// scan's result (the running sums of window extents from one strided layer
// to the next: ResNet-18 on images of their own sizes), the CPU backend
// bounds the fused dynamic extent by a value near 2^63 and allocates it on
// the stack: "'func.func' op exceeded stack allocation limit of 32768 bytes
// for function. Got 72057594037927936 bytes". Behind a
// `util.optimization_barrier` the input is computed in a dispatch of its
// own, and the scan reads it from memory as it reads an argument.
//
//===----------------------------------------------------------------------===//

#include "passes/IREE/Barrier.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::ragged {
#define GEN_PASS_DEF_GUARDSCANINPUTSPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;

namespace {

/// torch-mlir's scan (`aten.cumsum` and friends), in generic form: IREE's
/// dialects are not linked into ragged-opt.
constexpr StringLiteral kScan = "tm_tensor.scan";

/// A scan in a function's body whose input has dynamic sizes and is
/// computed by an op: the scan reads it behind a barrier, its dynamic sizes
/// tied to the input's.
struct ReadScanInputFromMemory : RewritePattern {
  ReadScanInputFromMemory(MLIRContext *context)
      : RewritePattern(kScan, /*benefit=*/1, context) {}

  LogicalResult matchAndRewrite(Operation *scan,
                                PatternRewriter &rewriter) const override {
    if (!isa<func::FuncOp>(scan->getParentOp()))
      return rewriter.notifyMatchFailure(scan, "inside a loop or region");
    if (scan->getNumOperands() == 0)
      return rewriter.notifyMatchFailure(scan, "no input");
    Value input = scan->getOperand(0);
    auto type = dyn_cast<RankedTensorType>(input.getType());
    if (!type || type.hasStaticShape())
      return rewriter.notifyMatchFailure(scan, "static input");
    Operation *producer = input.getDefiningOp();
    if (!producer)
      return rewriter.notifyMatchFailure(scan, "a block argument");
    StringRef name = producer->getName().getStringRef();
    if (name == ragged::kTieShape || name == ragged::kOptimizationBarrier)
      return rewriter.notifyMatchFailure(scan, "already guarded");
    rewriter.setInsertionPoint(scan);
    Value hidden = ragged::optimizationBarrier(rewriter, scan->getLoc(), input,
                                               /*tieShape=*/true);
    rewriter.modifyOpInPlace(scan, [&] { scan->setOperand(0, hidden); });
    return success();
  }
};

struct GuardScanInputsPass
    : ragged::impl::GuardScanInputsPassBase<GuardScanInputsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    ragged::populateGuardScanInputsPatterns(patterns);
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};

} // namespace

void mlir::ragged::populateGuardScanInputsPatterns(
    RewritePatternSet &patterns) {
  patterns.add<ReadScanInputFromMemory>(patterns.getContext());
}
