//===- PadSplatInserts.cpp - inserts into a shared splat as pads ----------===//
//
// torch-mlir lowers `slice_scatter(zeros_like(x), src, ...)`, the gradient
// of a slice, to a `tensor.insert_slice` of `src` into a zero-filled tensor,
// and CSE makes one fill of every pair of equal ones. IREE 3.13 turns the
// fill into a splat and updates it in place for each insert, so two inserts
// into one fill (the gradients of `x[1:]` and `x[:, 1:]`) wrote into the
// same buffer, and each result held the other's values. An insert into a
// tensor of one value, used more than once, is the same value as its
// source padded with that value; a `tensor.pad` is a tensor of its own.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::ragged {
#define GEN_PASS_DEF_PADSPLATINSERTSPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;

namespace {

/// The scalar every element of `value` holds, where its producer says so
/// (a fill, a splat, or a generic broadcasting a rank-0 tensor or a
/// constant); null otherwise. New ops are created at `b`'s insertion point.
Value splatScalar(OpBuilder &b, Value value) {
  Operation *op = value.getDefiningOp();
  if (auto fill = dyn_cast_or_null<linalg::FillOp>(op))
    return fill.getInputs()[0];
  if (auto splat = dyn_cast_or_null<tensor::SplatOp>(op))
    return splat.getInput();
  auto generic = dyn_cast_or_null<linalg::GenericOp>(op);
  if (!generic || generic.getNumDpsInits() != 1 || generic.getNumDpsInputs() > 1)
    return {};
  auto yield = cast<linalg::YieldOp>(generic.getBody()->getTerminator());
  Value yielded = yield.getValues()[0];
  if (Operation *def = yielded.getDefiningOp())
    return def->getBlock() == generic.getBody() ? Value() : yielded; // a constant from outside
  auto arg = cast<BlockArgument>(yielded);
  if (arg.getOwner() != generic.getBody() || arg.getArgNumber() != 0 || generic.getNumDpsInputs() != 1)
    return {};
  Value input = generic.getDpsInputs()[0];
  auto type = dyn_cast<RankedTensorType>(input.getType());
  if (!type)
    return input; // a scalar operand
  if (type.getRank() != 0)
    return {};
  return tensor::ExtractOp::create(b, value.getLoc(), input, ValueRange{});
}

struct PadSplatInsert : OpRewritePattern<tensor::InsertSliceOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(tensor::InsertSliceOp op, PatternRewriter &rewriter) const override {
    Value dest = op.getDest();
    if (dest.hasOneUse())
      return rewriter.notifyMatchFailure(op, "the destination has no other use");
    if (op.getSourceType().getRank() != op.getDestType().getRank() ||
        !llvm::all_of(op.getMixedStrides(), isOneInteger))
      return rewriter.notifyMatchFailure(op, "a rank-reducing or strided insert");
    Location loc = op.getLoc();
    Value scalar = splatScalar(rewriter, dest);
    if (!scalar)
      return rewriter.notifyMatchFailure(op, "the destination is not one value");
    SmallVector<OpFoldResult> low = op.getMixedOffsets(), high;
    for (auto [dim, offset, size] : llvm::enumerate(low, op.getMixedSizes())) {
      Value whole = tensor::DimOp::create(rewriter, loc, dest, dim);
      Value end = arith::AddIOp::create(rewriter, loc, getValueOrCreateConstantIndexOp(rewriter, loc, offset),
                                        getValueOrCreateConstantIndexOp(rewriter, loc, size));
      high.push_back(arith::SubIOp::create(rewriter, loc, whole, end).getResult());
    }
    auto pad = tensor::PadOp::create(rewriter, loc, op.getDestType(), op.getSource(), low, high, scalar);
    rewriter.replaceOp(op, pad.getResult());
    return success();
  }
};

struct PadSplatInsertsPass : ragged::impl::PadSplatInsertsPassBase<PadSplatInsertsPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    ragged::populatePadSplatInsertsPatterns(patterns);
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};

} // namespace

void mlir::ragged::populatePadSplatInsertsPatterns(RewritePatternSet &patterns) {
  patterns.add<PadSplatInsert>(patterns.getContext());
}
