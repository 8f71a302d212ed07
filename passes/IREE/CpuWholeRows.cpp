//===- CpuWholeRows.cpp - IREE CPU workgroups of whole packed rows --------===//
//
// Some generics read packed rows through a per-row (or per-tile) index: the
// segment tile generics (Conversion/RaggedToLinalg/SegmentTiles.h), the softmax
// output and segment broadcasts. IREE's CPU heuristics distribute them in 64 x
// 64 (or 32 x 32) blocks of (rows, trailing), so a workgroup reads 256-byte
// pieces of rows strided by the row size. With whole rows per workgroup the
// reads are contiguous. On [23586, 384] f32 (RACE lengths; AMD EPYC, AVX-512, 2
// threads) the segment sum's tile dispatch went from 2.0 to 1.5 ms and the
// softmax's output dispatch from 6.2 to 3.5 ms; peeling the vector remainder
// rather than masking it cost 1.1-1.5x on that host. The sizes are IREE's
// `compilation_info`, built by name for IREE to parse.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "passes/IREE/CompilationInfo.h"

#include "mlir/Dialect/Linalg/IR/Linalg.h"

namespace mlir::ragged {
#define GEN_PASS_DEF_CPUWHOLEROWSPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;

namespace {

/// Rows (or row tiles) per workgroup: 8, 16 and 64 ran alike, 2 slower.
constexpr int64_t kRowsPerWorkgroup = 16;
/// Elements of the innermost dim per vector step.
constexpr int64_t kVectorWidth = 16;

/// `#iree_codegen.compilation_info` distributing `op`'s first loop in
/// blocks of kRowsPerWorkgroup and leaving the others whole, vectorised
/// along the innermost loop, its remainder masked or (`peel`) peeled.
Attribute wholeRowsConfig(linalg::GenericOp op, bool peel) {
  SmallVector<int64_t> extents = op.getStaticLoopRanges();
  SmallVector<int64_t> distribution(extents.size(), 0),
      vector(extents.size(), 1);
  distribution.front() = kRowsPerWorkgroup;
  int64_t last = extents.back();
  vector.back() =
      ShapedType::isDynamic(last) ? kVectorWidth : std::min(last, kVectorWidth);
  return ragged::cpuCompilationInfo(
      op.getContext(),
      {{"distribution", distribution}, {"vector_common_parallel", vector}},
      "DoubleTilingExpert", peel);
}

struct CpuWholeRowsPass : ragged::impl::CpuWholeRowsPassBase<CpuWholeRowsPass> {
  using CpuWholeRowsPassBase::CpuWholeRowsPassBase;

  void runOnOperation() override {
    WalkResult result = getOperation()->walk([&](linalg::GenericOp op) {
      if (!op->hasAttr(ragged::kWholeRowsAttr))
        return WalkResult::advance();
      op->removeAttr(ragged::kWholeRowsAttr);
      // Over rows alone there is nothing to keep whole.
      if (op.getNumLoops() < 2)
        return WalkResult::advance();
      Attribute config = wholeRowsConfig(op, peel);
      if (!config) {
        op.emitOpError("IREE's compilation_info did not parse: the context "
                       "must allow unregistered dialects");
        return WalkResult::interrupt();
      }
      op->setAttr("compilation_info", config);
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
