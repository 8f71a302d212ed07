//===- GuardInPlaceUpdates.cpp - fresh buffers for updated tensors --------===//
//
// A tensor computed from nothing (an `arange`, or a one-hot built from
// iotas: linalg ops whose operands are constants, fills and empties all the
// way down) becomes an IREE dispatch without operands. IREE 3.13 answers a
// second in-place update of such a value (an insert, a scatter) by cloning
// the dispatch for the consumer, and CSE then merges the clones again: both
// updates were written into one buffer, so `a.scatter(0, i, u) +
// a.scatter(0, j, v)` for `a = arange(n)` added the two scatters twice.
// With a static shape, IREE hoists the value into a constant global
// instead, and a barrier on its result let the updates write into the
// global, so the next call read them. The generic whose result is updated
// therefore reads an operand IREE cannot look through: a rank-0 `false`
// behind a `util.optimization_barrier`, on which it selects its yields.
// The dispatch then has an operand, and IREE copies its result for each
// update.
//
// An input of an in-place update that views the tensor it updates
// (`x.index_add(0, i, x[:2])`) is read through a barrier as well: IREE
// fused the view into the update's dispatch, which read rows it had
// already written. (`flow.tensor.tie_shape` gives IREE the dynamic sizes
// of such a barrier's result.)
//
// A result of an in-place update that nothing reads, beside one that is
// read (the sorted values of `torch.sort(x)[1]`), goes into a barrier too:
// without a use, IREE kept the dispatch's copy of that operand in a stack
// allocation, which a dynamic size cannot bound.
//
// Splats are left to `ragged-fill-splats`: IREE copies a fill for each
// in-place consumer itself.
//
//===----------------------------------------------------------------------===//

#include "passes/IREE/Barrier.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/IRMapping.h"
#include "mlir/Transforms/RegionUtils.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::ragged {
#define GEN_PASS_DEF_GUARDINPLACEUPDATESPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;

namespace {

bool isView(Operation *op) {
  return isa<tensor::ExpandShapeOp, tensor::CollapseShapeOp, tensor::CastOp>(
      op);
}

/// Whether `value` is computed from constants alone: by linalg ops (and
/// views) over empties, fills and constants, with no tensor read from
/// elsewhere (an argument, or the result of any other op) in their operands
/// or bodies. IREE fuses such a tree into one dispatch without operands.
/// `seen` holds the values already found so.
bool computedFromNothing(Value value, DenseSet<Value> &seen) {
  if (seen.contains(value))
    return true;
  Operation *op = value.getDefiningOp();
  if (!op)
    return false;
  if (isView(op))
    return computedFromNothing(op->getOperand(0), seen) &&
           seen.insert(value).second;
  if (!isa<tensor::EmptyOp, arith::ConstantOp, linalg::FillOp>(op)) {
    auto linalgOp = dyn_cast<linalg::LinalgOp>(op);
    if (!linalgOp || !linalgOp.hasPureTensorSemantics())
      return false;
    SetVector<Value> captured;
    getUsedValuesDefinedAbove(op->getRegions(), captured);
    for (Value v :
         llvm::concat<Value>(op->getOperands(), captured.getArrayRef()))
      if (isa<TensorType>(v.getType()) && !computedFromNothing(v, seen))
        return false;
  }
  seen.insert(value);
  return true;
}

/// Whether `use` (or a use of a view of it) is the destination of an
/// in-place update: an insert's, the read init of a linalg op, or an
/// output of an op this context does not know (torch-mlir's `tm_tensor`
/// ops put their outputs in the last operand segment; without segments
/// every operand may be one).
bool updatedInPlace(OpOperand &use) {
  Operation *user = use.getOwner();
  if (isView(user))
    return llvm::any_of(user->getResult(0).getUses(), updatedInPlace);
  if (auto insert = dyn_cast<tensor::InsertSliceOp>(user))
    return &use == &insert.getDestMutable();
  if (auto insert = dyn_cast<tensor::InsertOp>(user))
    return &use == &insert.getDestMutable();
  if (auto linalgOp = dyn_cast<linalg::LinalgOp>(user))
    return linalgOp.isDpsInit(&use) &&
           linalgOp.payloadUsesValueFromOperand(&use);
  if (user->isRegistered())
    return false;
  // IREE's attention ops, which ragged-attention-to-iree builds: only their
  // inits are written (the output; and the running max and sum of the
  // online form). A causal mask, computed from indices alone, is an input.
  StringRef name = user->getName().getStringRef();
  if (name == "iree_linalg_ext.attention")
    return use.getOperandNumber() + 1 == user->getNumOperands();
  if (name == "iree_linalg_ext.online_attention")
    return use.getOperandNumber() + 3 >= user->getNumOperands();
  auto segments = user->getAttrOfType<DenseI32ArrayAttr>("operandSegmentSizes");
  return !segments || segments.empty() ||
         use.getOperandNumber() >=
             user->getNumOperands() - segments.asArrayRef().back();
}

struct ReadABarrier : OpRewritePattern<linalg::GenericOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(linalg::GenericOp op,
                                PatternRewriter &rewriter) const override {
    if (!op.hasPureTensorSemantics() ||
        llvm::none_of(op->getUses(), updatedInPlace))
      return rewriter.notifyMatchFailure(op, "not updated in place");
    DenseSet<Value> seen;
    if (!llvm::all_of(op->getResults(), [&](Value result) {
          return computedFromNothing(result, seen);
        }))
      return rewriter.notifyMatchFailure(op,
                                         "reads a tensor computed elsewhere");
    Block *body = op.getBody();
    auto yielded = body->getTerminator()->getOperands();
    if (llvm::any_of(yielded, [&](Value v) {
          return !rewriter.getZeroAttr(v.getType());
        }))
      return rewriter.notifyMatchFailure(op, "yields a type without a zero");

    Location loc = op.getLoc();
    Value no =
        arith::ConstantOp::create(rewriter, loc, rewriter.getBoolAttr(false));
    Value flag = tensor::EmptyOp::create(rewriter, loc, ArrayRef<int64_t>{},
                                         rewriter.getI1Type());
    flag = linalg::FillOp::create(rewriter, loc, no, flag).getResult(0);
    Value hidden =
        ragged::optimizationBarrier(rewriter, loc, flag, /*tieShape=*/false);

    SmallVector<Value> inputs(op.getDpsInputs());
    inputs.push_back(hidden);
    SmallVector<AffineMap> maps(op.getIndexingMapsArray());
    maps.insert(maps.begin() + op.getNumDpsInputs(),
                AffineMap::get(op.getNumLoops(), 0, rewriter.getContext()));
    auto guarded = linalg::GenericOp::create(
        rewriter, loc, op.getResultTypes(), inputs, op.getDpsInits(), maps,
        op.getIteratorTypesArray(),
        [&](OpBuilder &b, Location at, ValueRange args) {
          IRMapping mapping;
          unsigned numInputs = op.getNumDpsInputs();
          for (auto [i, arg] : llvm::enumerate(body->getArguments()))
            mapping.map(arg, args[i < numInputs ? i : i + 1]);
          for (Operation &bodyOp : body->without_terminator())
            b.clone(bodyOp, mapping);
          SmallVector<Value> results;
          for (Value v : yielded) {
            Value zero = arith::ConstantOp::create(
                b, at, cast<TypedAttr>(b.getZeroAttr(v.getType())));
            results.push_back(arith::SelectOp::create(
                b, at, args[numInputs], zero, mapping.lookupOrDefault(v)));
          }
          linalg::YieldOp::create(b, at, results);
        });
    rewriter.replaceOp(op, guarded->getResults());
    return success();
  }
};

/// The value `value` is a view of: through slices, reshapes and casts.
Value viewedRoot(Value value) {
  while (Operation *op = value.getDefiningOp()) {
    if (!isView(op) && !isa<tensor::ExtractSliceOp>(op))
      break;
    value = op->getOperand(0);
  }
  return value;
}

/// The operands an op this context does not know updates in place (its
/// last segment; every operand without segments), or an insert's
/// destination.
SmallVector<OpOperand *> updatedOperands(Operation *op) {
  SmallVector<OpOperand *> updated;
  if (auto insert = dyn_cast<tensor::InsertSliceOp>(op))
    updated.push_back(&insert.getDestMutable());
  else if (!op->isRegistered())
    for (OpOperand &use : op->getOpOperands())
      if (updatedInPlace(use))
        updated.push_back(&use);
  return updated;
}

/// An input of an in-place update that views the tensor it updates
/// (`x.index_add(0, i, x[:2])`) is read through a barrier. IREE fused the
/// view into the update's dispatch, which then read rows it had already
/// written.
struct HideViewsOfTheDestination : RewritePattern {
  HideViewsOfTheDestination(MLIRContext *context)
      : RewritePattern(MatchAnyOpTypeTag(), 1, context) {}

  LogicalResult matchAndRewrite(Operation *op,
                                PatternRewriter &rewriter) const override {
    SmallVector<OpOperand *> updated = updatedOperands(op);
    if (updated.empty())
      return rewriter.notifyMatchFailure(op, "updates nothing in place");
    SmallPtrSet<Value, 2> roots;
    for (OpOperand *use : updated)
      roots.insert(viewedRoot(use->get()));
    bool changed = false;
    for (OpOperand &use : op->getOpOperands()) {
      Value input = use.get();
      if (llvm::is_contained(updated, &use) ||
          !isa<TensorType>(input.getType()) ||
          input.getDefiningOp() == nullptr ||
          !roots.contains(viewedRoot(input)) ||
          llvm::is_contained({ragged::kOptimizationBarrier, ragged::kTieShape},
                             input.getDefiningOp()->getName().getStringRef()))
        continue;
      rewriter.setInsertionPoint(op);
      Value hidden = ragged::optimizationBarrier(rewriter, op->getLoc(), input,
                                                 /*tieShape=*/true);
      rewriter.modifyOpInPlace(op, [&] { use.set(hidden); });
      changed = true;
    }
    return success(changed);
  }
};

/// A result of an in-place update that nothing reads, beside one that is
/// read, goes into a barrier: IREE kept the dispatch's copy of its operand
/// in a stack allocation, which a dynamic size cannot bound
/// (`torch.sort(x)[1]` along a dynamic dim).
struct KeepUnreadResults : RewritePattern {
  KeepUnreadResults(MLIRContext *context)
      : RewritePattern(MatchAnyOpTypeTag(), 1, context) {}

  LogicalResult matchAndRewrite(Operation *op,
                                PatternRewriter &rewriter) const override {
    if (op->isRegistered() || updatedOperands(op).empty())
      return rewriter.notifyMatchFailure(op, "updates nothing in place");
    SmallVector<Value> unread;
    for (Value result : op->getResults())
      if (result.use_empty() && isa<RankedTensorType>(result.getType()))
        unread.push_back(result);
    if (unread.empty() ||
        llvm::all_of(op->getResults(), [](Value r) { return r.use_empty(); }))
      return rewriter.notifyMatchFailure(op,
                                         "no unread result beside a read one");
    rewriter.setInsertionPointAfter(op);
    for (Value result : unread)
      ragged::optimizationBarrier(rewriter, op->getLoc(), result,
                                  /*tieShape=*/false);
    return success();
  }
};

struct GuardInPlaceUpdatesPass
    : ragged::impl::GuardInPlaceUpdatesPassBase<GuardInPlaceUpdatesPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    ragged::populateGuardInPlaceUpdatesPatterns(patterns);
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};

} // namespace

void mlir::ragged::populateGuardInPlaceUpdatesPatterns(
    RewritePatternSet &patterns) {
  patterns.add<ReadABarrier, HideViewsOfTheDestination, KeepUnreadResults>(
      patterns.getContext());
}
