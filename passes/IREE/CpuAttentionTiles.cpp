//===- CpuAttentionTiles.cpp - IREE CPU tiles for the fused attention -----===//
//
// IREE's CPU heuristics tile `iree_linalg_ext.attention` in vector steps of
// 8 queries x 16 value columns, so a head of 32 columns takes two passes
// over every key step, and a head of 64 runs at a tenth of the speed (12
// heads, [8, 128] blocks, AMD EPYC with AVX-512, 2 threads: 6.5 GFLOP/s).
// This pass gives each attention the whole head in one vector step, and as
// many queries as keep IREE's largest vector (queries x head x key step)
// within the 256 native vectors IREE's CPU codegen accepts (16 KiB on
// AVX-512: 8 queries for heads of up to 32, 4 for 64). On 12 heads of 32 the
// kernel ran 1.4-1.7x faster and of 64 7.8x; a MiniLM layer on a
// NestedTensor 1.2x at SQuAD v2 and RACE lengths. The sizes are IREE's
// `compilation_info`, built by name for IREE to parse. A training forward's
// `iree_linalg_ext.online_attention` (the same kernel, which also returns
// each query's running maximum and sum) gets the same tiles.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "passes/IREE/CompilationInfo.h"

#include "mlir/IR/BuiltinAttributes.h"

namespace mlir::ragged {
#define GEN_PASS_DEF_CPUATTENTIONTILESPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;

namespace {

constexpr StringLiteral kAttentionOp = "iree_linalg_ext.attention";
/// The attention that also returns each query's running maximum and sum
/// (outputs: the unnormalised result, then the two statistics).
constexpr StringLiteral kOnlineAttentionOp = "iree_linalg_ext.online_attention";
/// Queries per workgroup (IREE's own choice; 32 and 128 ran alike).
constexpr int64_t kQueriesPerWorkgroup = 64;
/// Keys per step of the online softmax (32 exceeds the vector budget at 8
/// queries of 32 columns).
constexpr int64_t kKeyStep = 16;
/// IREE's CPU codegen rejects a vector of more than this many native
/// vectors ("large vector sizes": 32 KiB on AVX-512, 16 KiB on AVX2).
constexpr int64_t kMaxNativeVectors = 256;
/// Queries per vector step at most: 16 ran slower than 8 on heads of 16.
constexpr int64_t kMaxQueryStep = 8;

/// What each loop of an attention is, from its operand maps: batch (in every
/// operand), query (query and result), value column (value and result), head
/// column (query and key) or key (key and value).
enum class Loop { Batch, Query, Column, Head, Key };

/// The `compilation_info` for `op` on a target of `vectorBytes` native
/// vectors, or null where its loops or head sizes are not those of an
/// attention with static heads.
Attribute attentionConfig(Operation *op, int64_t vectorBytes) {
  auto maps = op->getAttrOfType<ArrayAttr>("indexing_maps");
  if (!maps || maps.size() != op->getNumOperands() || maps.size() < 5 ||
      !llvm::all_of(maps,
                    [](Attribute map) { return isa<AffineMapAttr>(map); }))
    return {};
  auto mapAt = [&](unsigned i) {
    return cast<AffineMapAttr>(maps[i]).getValue();
  };
  bool online = op->getName().getStringRef() == kOnlineAttentionOp;
  if (online && maps.size() < 7)
    return {};
  AffineMap q = mapAt(0), k = mapAt(1), v = mapAt(2),
            out = mapAt(maps.size() - (online ? 3 : 1));
  auto qType = dyn_cast<RankedTensorType>(op->getOperand(0).getType());
  auto vType = dyn_cast<RankedTensorType>(op->getOperand(2).getType());
  if (!qType || !vType)
    return {};
  auto in = [](AffineMap map, unsigned dim) {
    return map.getResultPosition(getAffineDimExpr(dim, map.getContext()));
  };
  SmallVector<Loop> loops;
  int64_t head = 0, columns = 0;
  for (unsigned dim = 0; dim < q.getNumDims(); ++dim) {
    std::optional<unsigned> inQ = in(q, dim), inK = in(k, dim),
                            inV = in(v, dim), inOut = in(out, dim);
    if (inQ && inK && inV && inOut) {
      loops.push_back(Loop::Batch);
    } else if (inQ && inOut && !inK) {
      loops.push_back(Loop::Query);
    } else if (inV && inOut && !inQ) {
      loops.push_back(Loop::Column);
      columns = vType.getDimSize(*inV);
    } else if (inQ && inK && !inOut) {
      loops.push_back(Loop::Head);
      head = qType.getDimSize(*inQ);
    } else if (inK && inV && !inQ) {
      loops.push_back(Loop::Key);
    } else {
      return {};
    }
  }
  if (ShapedType::isDynamic(head) || ShapedType::isDynamic(columns) ||
      head <= 0 || columns <= 0)
    return {};
  int64_t bytes = std::max<int64_t>(1, qType.getElementTypeBitWidth() / 8);
  int64_t budget = kMaxNativeVectors * vectorBytes;
  int64_t queries = std::clamp<int64_t>(
      budget / (std::max(head, columns) * kKeyStep * bytes), 1, kMaxQueryStep);
  SmallVector<int64_t> distribution, parallel, reduction;
  for (Loop loop : loops) {
    int64_t d = 0, p = 0, r = 0;
    switch (loop) {
    case Loop::Batch:
      d = p = 1;
      break;
    case Loop::Query:
      d = kQueriesPerWorkgroup;
      p = queries;
      break;
    case Loop::Column:
      d = p = columns;
      break;
    case Loop::Head:
      break;
    case Loop::Key:
      r = kKeyStep;
      break;
    }
    distribution.push_back(d);
    parallel.push_back(p);
    reduction.push_back(r);
  }
  return ragged::cpuCompilationInfo(op->getContext(),
                                    {{"distribution", distribution},
                                     {"vector_common_parallel", parallel},
                                     {"vector_reduction", reduction}},
                                    "LinalgExtTileAndVectorize");
}

struct CpuAttentionTilesPass
    : ragged::impl::CpuAttentionTilesPassBase<CpuAttentionTilesPass> {
  using CpuAttentionTilesPassBase::CpuAttentionTilesPassBase;

  void runOnOperation() override {
    if (vectorBytes <= 0) {
      emitError(getOperation().getLoc())
          << "ragged-cpu-attention-tiles: vector-bytes must be positive, got "
          << static_cast<int64_t>(vectorBytes);
      return signalPassFailure();
    }
    WalkResult result = getOperation()->walk([&](Operation *op) {
      StringRef name = op->getName().getStringRef();
      if ((name != kAttentionOp && name != kOnlineAttentionOp) ||
          op->hasAttr("compilation_info"))
        return WalkResult::advance();
      if (!getContext().allowsUnregisteredDialects()) {
        op->emitOpError(
            "IREE's compilation_info needs unregistered dialects allowed");
        return WalkResult::interrupt();
      }
      if (Attribute config = attentionConfig(op, vectorBytes))
        op->setAttr("compilation_info", config);
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
