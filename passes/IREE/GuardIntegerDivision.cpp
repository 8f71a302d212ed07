//===- GuardIntegerDivision.cpp - no division by a padded lane ------------===//
//
// IREE's CPU backend vectorises an integer division in a linalg body over
// whole vectors, and the lanes past a dynamic extent hold zeros: x86 has no
// vector integer division, so each lane is divided on its own and a zero
// lane raises SIGFPE. Integer `fmod`, `%` and truncating division by a
// tensor killed the process on any input. The divisor of every integer
// division and remainder whose divisor is not a constant becomes
// `select(divisor == 0, 1, divisor)`: no lane divides by zero, and a real
// division by zero, undefined in `arith`, gives the dividend instead of
// ending the process.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Matchers.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::ragged {
#define GEN_PASS_DEF_GUARDINTEGERDIVISIONPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;

namespace {

template <typename DivOp> struct GuardDivisor : OpRewritePattern<DivOp> {
  using OpRewritePattern<DivOp>::OpRewritePattern;

  LogicalResult matchAndRewrite(DivOp op,
                                PatternRewriter &rewriter) const override {
    Value divisor = op.getRhs();
    if (matchPattern(divisor, m_Constant()))
      return rewriter.notifyMatchFailure(op, "a constant divisor");
    if (auto select = divisor.getDefiningOp<arith::SelectOp>();
        select && matchPattern(select.getTrueValue(), m_One()))
      return rewriter.notifyMatchFailure(op, "already guarded");
    Location loc = op.getLoc();
    Type type = divisor.getType();
    Value zero = arith::ConstantOp::create(rewriter, loc, type,
                                           rewriter.getZeroAttr(type));
    Value one = arith::ConstantOp::create(rewriter, loc, type,
                                          rewriter.getOneAttr(type));
    Value isZero = arith::CmpIOp::create(
        rewriter, loc, arith::CmpIPredicate::eq, divisor, zero);
    Value safe = arith::SelectOp::create(rewriter, loc, isZero, one, divisor);
    rewriter.modifyOpInPlace(op, [&] { op->setOperand(1, safe); });
    return success();
  }
};

struct GuardIntegerDivisionPass
    : ragged::impl::GuardIntegerDivisionPassBase<GuardIntegerDivisionPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    ragged::populateGuardIntegerDivisionPatterns(patterns);
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};

} // namespace

void mlir::ragged::populateGuardIntegerDivisionPatterns(
    RewritePatternSet &patterns) {
  patterns
      .add<GuardDivisor<arith::DivSIOp>, GuardDivisor<arith::DivUIOp>,
           GuardDivisor<arith::RemSIOp>, GuardDivisor<arith::RemUIOp>,
           GuardDivisor<arith::FloorDivSIOp>, GuardDivisor<arith::CeilDivSIOp>,
           GuardDivisor<arith::CeilDivUIOp>>(patterns.getContext());
}
