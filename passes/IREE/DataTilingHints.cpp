//===- DataTilingHints.cpp - contractions IREE may data-tile --------------===//
//
// IREE's CPU data tiling packs the operands of every contraction it supports
// into the matmul kernel's tile layout. IREE 3.13 miscompiles one kind: a
// contraction whose reduction extent is dynamic, when an operand is computed
// inside the program (the packing is fused into the producer's dispatch and
// its codegen fails with "'affine.delinearize_index' op no basis element may
// be statically non-positive"). Such a contraction need not be one here:
// IREE fuses `sum(x * mask)` -- a dynamic reduction fed by a multiply -- into
// one. IREE data-tiles every supported contraction unless some op already
// carries its `iree.opt.data_tiling` hint, and then only the hinted ones, and
// it decides after inlining, for the program as a whole. The hint is how this
// pass keeps the fast packed GEMMs and leaves the others alone.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"

namespace mlir::ragged {
#define GEN_PASS_DEF_HINTDATATILINGPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;

namespace {

/// The discardable attribute IREE reads to data-tile a contraction.
constexpr StringLiteral kIreeHint = "iree.opt.data_tiling";

/// Whether `op` is a contraction IREE 3.13 can data-tile as it stands: a
/// matmul-like body with at most one batch, M, N and K dim each, a K dim
/// and an M or N dim (IREE packs it into one `mmt4d` or `batch_mmt4d`).
/// Unit-extent loops are refused too: IREE folds them away first, and the
/// op it rebuilds would drop the hint.
bool isPlainDataTilable(linalg::LinalgOp op) {
  if (!op.hasPureTensorSemantics() || !linalg::isaContractionOpInterface(op))
    return false;
  FailureOr<linalg::ContractionDimensions> dims =
      linalg::inferContractionDims(op);
  if (failed(dims) || dims->batch.size() > 1 || dims->m.size() > 1 ||
      dims->n.size() > 1 || dims->k.size() != 1 ||
      (dims->m.empty() && dims->n.empty()))
    return false;
  return llvm::none_of(op.getStaticLoopRanges(),
                       [](int64_t extent) { return extent == 1; });
}

/// Whether `op` has a reduction loop of dynamic extent: IREE data-tiles it,
/// after fusing its producers, folding unit dims and collapsing others, as
/// soon as it has a supported contraction's shape, and then fails or
/// computes garbage.
bool hasDynamicReduction(linalg::LinalgOp op) {
  SmallVector<int64_t> extents = op.getStaticLoopRanges();
  for (auto [extent, iterator] :
       llvm::zip_equal(extents, op.getIteratorTypesArray()))
    if (iterator == utils::IteratorType::reduction &&
        ShapedType::isDynamic(extent))
      return true;
  return false;
}

struct HintDataTilingPass
    : ragged::impl::HintDataTilingPassBase<HintDataTilingPass> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<linalg::LinalgOp> tilable;
    bool dynamicReduction = false;
    // The whole module: IREE inlines the functions before it decides.
    module.walk([&](linalg::LinalgOp op) {
      if (hasDynamicReduction(op))
        dynamicReduction = true;
      else if (isPlainDataTilable(op))
        tilable.push_back(op);
    });
    if (!dynamicReduction)
      return; // IREE's own choice is right for this module.
    // A hint on the others keeps IREE off the dynamic reductions; with none
    // to hint, IREE would take them, so data tiling must go.
    if (tilable.empty()) {
      module->setAttr(ragged::kNoDataTilingAttr, UnitAttr::get(&getContext()));
      return;
    }
    for (linalg::LinalgOp op : tilable)
      op->setAttr(kIreeHint, UnitAttr::get(&getContext()));
  }
};

} // namespace
