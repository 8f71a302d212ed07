//===- FoldViewReads.cpp - element reads through reshapes and slices ------===//
//
// The lowering's gathers read single elements (`tensor.extract` in a
// linalg body) of values that are often views: attention's q, k and v are
// column slices of one in-projection, reshaped to [rows, H, d]. IREE
// materialises a strided slice that a dispatch reads as a copy of its own;
// reading the element from the viewed tensor costs an index computation
// instead. The views are often made in a dense piece, a private function of
// its own, and read in its caller or in another piece: every such call is
// inlined first. (MLIR's inliner pass cannot run here: it needs the symbol
// uses of every op, and an unregistered op with regions, such as IREE's
// attention or torch-mlir's scatter, hides them.)
//
// One fold is needed for correctness too: IREE's CPU backend reads a
// unit-dim slice collapsed to a vector (a column) at its first element.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "mlir/Transforms/Inliner.h"
#include "mlir/Transforms/InliningUtils.h"

namespace mlir::ragged {
#define GEN_PASS_DEF_FOLDVIEWREADSPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;

namespace {

/// `tensor.extract` of a `tensor.expand_shape`: each group of indices,
/// linearised over the expanded sizes, indexes the source.
struct ExtractOfExpandShape : OpRewritePattern<tensor::ExtractOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(tensor::ExtractOp op,
                                PatternRewriter &rewriter) const override {
    auto expand = op.getTensor().getDefiningOp<tensor::ExpandShapeOp>();
    if (!expand)
      return rewriter.notifyMatchFailure(op, "not a read of an expand_shape");
    Location loc = op.getLoc();
    SmallVector<OpFoldResult> sizes = expand.getMixedOutputShape();
    SmallVector<Value> indices;
    for (const ReassociationIndices &group : expand.getReassociationIndices()) {
      Value at = op.getIndices()[group.front()];
      for (int64_t dim : ArrayRef(group).drop_front()) {
        Value size = getValueOrCreateConstantIndexOp(rewriter, loc, sizes[dim]);
        at = arith::AddIOp::create(
            rewriter, loc, arith::MulIOp::create(rewriter, loc, at, size),
            op.getIndices()[dim]);
      }
      indices.push_back(at);
    }
    rewriter.replaceOpWithNewOp<tensor::ExtractOp>(op, expand.getSrc(),
                                                   indices);
    return success();
  }
};

/// `tensor.extract` of a `tensor.collapse_shape` whose groups each hold at
/// most one dim that is not a static 1 (a column slice collapsed to a
/// vector): that dim takes the index, the unit dims 0. IREE's CPU backend
/// reads such a collapsed unit-dim slice at its first element only, and
/// folding the read into the source avoids the slice. Groups of several
/// sizes would need a division per read and are left alone.
struct ExtractOfUnitCollapseShape : OpRewritePattern<tensor::ExtractOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(tensor::ExtractOp op,
                                PatternRewriter &rewriter) const override {
    auto collapse = op.getTensor().getDefiningOp<tensor::CollapseShapeOp>();
    if (!collapse)
      return rewriter.notifyMatchFailure(op, "not a read of a collapse_shape");
    ArrayRef<int64_t> sizes = collapse.getSrcType().getShape();
    Value zero;
    SmallVector<Value> indices;
    for (auto [group, at] :
         llvm::zip_equal(collapse.getReassociationIndices(), op.getIndices())) {
      auto wide = llvm::make_filter_range(
          group, [&](int64_t dim) { return sizes[dim] != 1; });
      if (std::distance(wide.begin(), wide.end()) > 1)
        return rewriter.notifyMatchFailure(
            op, "a group of several dims that are not 1");
      for (int64_t dim : group) {
        bool takes = sizes[dim] != 1 || (wide.empty() && dim == group.back());
        if (!takes && !zero)
          zero = arith::ConstantIndexOp::create(rewriter, op.getLoc(), 0);
        indices.push_back(takes ? at : zero);
      }
    }
    rewriter.replaceOpWithNewOp<tensor::ExtractOp>(op, collapse.getSrc(),
                                                   indices);
    return success();
  }
};

/// `tensor.extract` of a `tensor.extract_slice`: the source is read at the
/// slice's offset plus the index times its stride (at the offset alone in a
/// dim the slice drops).
struct ExtractOfExtractSlice : OpRewritePattern<tensor::ExtractOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(tensor::ExtractOp op,
                                PatternRewriter &rewriter) const override {
    auto slice = op.getTensor().getDefiningOp<tensor::ExtractSliceOp>();
    if (!slice)
      return rewriter.notifyMatchFailure(op, "not a read of an extract_slice");
    Location loc = op.getLoc();
    llvm::SmallBitVector dropped = slice.getDroppedDims();
    SmallVector<OpFoldResult> offsets = slice.getMixedOffsets(),
                              strides = slice.getMixedStrides();
    SmallVector<Value> indices;
    auto index = op.getIndices().begin();
    for (size_t dim = 0; dim < offsets.size(); ++dim) {
      Value offset =
          getValueOrCreateConstantIndexOp(rewriter, loc, offsets[dim]);
      if (dropped.test(dim)) {
        indices.push_back(offset);
        continue;
      }
      Value step = *index++;
      if (!isOneInteger(strides[dim]))
        step = arith::MulIOp::create(
            rewriter, loc, step,
            getValueOrCreateConstantIndexOp(rewriter, loc, strides[dim]));
      indices.push_back(arith::AddIOp::create(rewriter, loc, offset, step));
    }
    rewriter.replaceOpWithNewOp<tensor::ExtractOp>(op, slice.getSource(),
                                                   indices);
    return success();
  }
};

/// The dialects' inliner interfaces, which also clone the ops of
/// unregistered dialects (torch-mlir's scatter, sort and scan; IREE's
/// attention): no interface answers for those, and a clone in the caller
/// computes what the callee's op did. A piece left behind a call keeps its
/// views out of the folds' reach, and IREE misreads the column views among
/// them.
struct CloningInlinerInterface : InlinerInterface {
  using InlinerInterface::InlinerInterface;

  bool isLegalToInline(Operation *op, Region *dest, bool wouldBeCloned,
                       IRMapping &mapping) const override {
    return !op->isRegistered() ||
           InlinerInterface::isLegalToInline(op, dest, wouldBeCloned, mapping);
  }
};

/// Inlines every call of a private function whose ops can all be inlined,
/// and erases the functions left without a call. (Calls are the only uses;
/// `SymbolTable::symbolKnownUseEmpty` cannot tell, since an unregistered op
/// may hold a symbol.)
void inlinePrivateCalls(ModuleOp module) {
  SymbolTable symbols(module);
  CloningInlinerInterface interface(module.getContext());
  // MLIR's default: the callee's blocks are cloned in after the call.
  InlinerConfig config;
  SmallVector<func::CallOp> calls;
  module.walk([&](func::CallOp call) { calls.push_back(call); });
  SetVector<func::FuncOp> inlined;
  for (func::CallOp call : calls) {
    auto callee = symbols.lookup<func::FuncOp>(call.getCallee());
    if (!callee || !callee.isPrivate() || callee.isExternal())
      continue;
    if (failed(inlineCall(interface, config.getCloneCallback(), call, callee,
                          &callee.getBody())))
      continue;
    call.erase();
    inlined.insert(callee);
  }
  module.walk([&](func::CallOp call) {
    inlined.remove(symbols.lookup<func::FuncOp>(call.getCallee()));
  });
  for (func::FuncOp callee : inlined)
    callee.erase();
}

struct FoldViewReadsPass
    : ragged::impl::FoldViewReadsPassBase<FoldViewReadsPass> {
  void runOnOperation() override {
    inlinePrivateCalls(getOperation());
    RewritePatternSet patterns(&getContext());
    ragged::populateFoldViewReadsPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

void mlir::ragged::populateFoldViewReadsPatterns(RewritePatternSet &patterns) {
  patterns.add<ExtractOfExpandShape, ExtractOfUnitCollapseShape,
               ExtractOfExtractSlice>(patterns.getContext());
}
