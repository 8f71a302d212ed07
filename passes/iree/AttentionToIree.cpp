//===- AttentionToIree.cpp - ragged.attention on IREE's fused kernel ----===//
//
// Everything IREE-specific in the lowering: f32 attention with static heads
// and head size runs by length buckets (BucketedAttention.h) on a static
// ladder, with IREE's fused `iree_linalg_ext.attention` (online softmax, no
// score blocks) and IREE's row gathers. IREE's CPU codegen picks fast tiles
// only when the bucket size is static, hence the ladder. The IREE ops are
// built by name, unregistered, for IREE to parse. The rewrite stays at the
// ragged level (ragged.values / ragged.offsets in, ragged.pack out), so
// convert-ragged-to-linalg lowers what is left.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"
#include "passes/compute/BucketedAttention.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::ragged {
#define GEN_PASS_DEF_RAGGEDATTENTIONTOIREEPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;
using namespace mlir::ragged;
using namespace mlir::ragged::lowering;

namespace {

/// The bucket sizes: 1.5x apart (plus one of max L).
constexpr int64_t kStaticLadder[] = {16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024};

/// Rows `rows` ([M] i64) of `source` ([R, ...]) as IREE's
/// `iree_linalg_ext.gather` (generic form, unregistered here), which
/// copies whole rows.
Value ireeGather(OpBuilder &b, Location loc, Value source, Value rows) {
  Value init = emptyRows(b, loc, dimOf(b, loc, rows, 0), source);
  OperationState state(loc, "iree_linalg_ext.gather");
  state.addOperands({source, rows, init});
  state.addTypes(init.getType());
  state.addAttribute("dimension_map", b.getDenseI64ArrayAttr({0}));
  return b.create(state)->getResult(0);
}

/// IREE's fused attention over [n, S, H, d] blocks, or [n, S, d] for one
/// head. The i1 mask admits the keys inside the item ([n, S]) or, when
/// causal, the keys at or before the query ([S, S]: a valid query never
/// reaches a padded key).
Value ireeAttention(OpBuilder &b, Location loc, Value qb, Value kb, Value vb, Value keyMask,
                           const AttnShape &blk) {
  MLIRContext *ctx = b.getContext();
  auto blockType = cast<RankedTensorType>(qb.getType());
  int64_t sStatic = blockType.getDimSize(1);
  bool oneHead = blockType.getRank() == 3;
  // Loops (b, h, m, n, k1, k2): batch, head (but for one head), query,
  // value column, head column, key.
  unsigned loops = oneHead ? 5 : 6, m = oneHead ? 1 : 2;
  unsigned n = m + 1, k1 = m + 2, k2 = m + 3;
  auto d = [&](unsigned i) { return getAffineDimExpr(i, ctx); };
  auto map = [&](ArrayRef<AffineExpr> r) { return AffineMap::get(loops, 0, r, ctx); };
  // [batch, row, (head,) column] operand maps.
  auto rowMap = [&](unsigned row, unsigned column) {
    SmallVector<AffineExpr> r{d(0), d(row)};
    if (!oneHead)
      r.push_back(d(1));
    r.push_back(d(column));
    return map(r);
  };
  Value mask = keyMask;
  AffineMap maskMap = map({d(0), d(k2)});
  if (blk.causal) {
    SmallVector<Value> dynSq;
    if (ShapedType::isDynamic(sStatic))
      dynSq.assign(2, dimOf(b, loc, qb, 1));
    Value init = emptyTensor(b, loc, {sStatic, sStatic}, b.getI1Type(), dynSq);
    mask = parallelGeneric(b, loc, init, {}, {}, [&](OpBuilder &nb, Location l, ValueRange) {
      return arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ule, linalg::IndexOp::create(nb, l, 1),
                                   linalg::IndexOp::create(nb, l, 0))
          .getResult();
    });
    maskMap = map({d(m), d(k2)});
  }
  Value scale = floatConst(b, loc, blk.elem, blk.scale);
  Value init = emptyLike(b, loc, qb);
  OperationState state(loc, "iree_linalg_ext.attention");
  state.addOperands({qb, kb, vb, scale, mask, init});
  state.addTypes(init.getType());
  state.addAttribute("indexing_maps", b.getAffineMapArrayAttr({rowMap(m, k1), rowMap(k2, k1), rowMap(k2, n), map({}),
                                                               maskMap, rowMap(m, n)}));
  Region *body = state.addRegion();
  auto *entry = new mlir::Block();
  body->push_back(entry);
  Value score = entry->addArgument(blk.elem, loc);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(entry);
    OperationState yield(loc, "iree_linalg_ext.yield");
    yield.addOperands(score);
    b.create(yield);
  }
  return b.create(state)->getResult(0);
}

/// The most bytes of scores a bucket materialises; a bucket of more items
/// runs IREE's fused kernel (IREE holds three copies: the scores, the
/// weights and the pack of the weights for the second contraction).
constexpr int64_t kScoresBudgetBytes = 32 << 20;
/// The smallest bucket (rows) that may materialise its scores: on 16 rows
/// IREE's fused kernel was faster.
constexpr int64_t kScoresMinRows = 32;

/// One bucket's attention: on static buckets of several heads from 32 to
/// `scoresMaxRows` rows, materialised scores (two data-tiled contractions,
/// the softmax between them) when the bucket's n H S^2 scores fit
/// kScoresBudgetBytes, decided on the device; IREE's fused kernel
/// otherwise. On 12 heads of 32 (AVX-512, 2 threads) the scores were
/// 1.2-1.6x faster than the fused kernel from 32 to 512 rows, slower on 16
/// rows and on 1024, where they outgrow the caches.
Value bucketAttention(OpBuilder &b, Location loc, Value qb, Value kb, Value vb, Value keyMask, const AttnShape &blk,
                      int64_t scoresMaxRows) {
  auto type = cast<RankedTensorType>(qb.getType());
  int64_t size = type.getDimSize(1);
  if (type.getRank() != 4 || ShapedType::isDynamic(size) || size < kScoresMinRows || size > scoresMaxRows)
    return ireeAttention(b, loc, qb, kb, vb, keyMask, blk);
  int64_t perItem = type.getDimSize(2) * size * size * (blk.elem.getIntOrFloatBitWidth() / 8);
  Value fits = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ule, dimOf(b, loc, qb, 0),
                                     constIndex(b, loc, kScoresBudgetBytes / perItem));
  auto scores = [&](OpBuilder &nb, Location l) {
    scf::YieldOp::create(nb, l, linalgAttention(nb, l, qb, kb, vb, keyMask, blk, /*lse=*/false).front());
  };
  auto fused = [&](OpBuilder &nb, Location l) {
    scf::YieldOp::create(nb, l, ireeAttention(nb, l, qb, kb, vb, keyMask, blk));
  };
  return scf::IfOp::create(b, loc, fits, scores, fused).getResult(0);
}

/// When `v` is the result of an `iree_linalg_ext.gather` of whole rows,
/// seen through reshapes that keep the row dim apart, the gather's source
/// under the same reshapes and its row index.
std::optional<GatheredRows> gatheredRows(OpBuilder &b, Location loc, Value v) {
  SmallVector<Operation *> reshapes;
  Operation *def = v.getDefiningOp();
  auto keepsRows = [](ArrayRef<ReassociationIndices> groups) {
    return !groups.empty() && groups.front().size() == 1;
  };
  while (def) {
    if (auto c = dyn_cast<tensor::CollapseShapeOp>(def)) {
      if (!keepsRows(c.getReassociationIndices()))
        return std::nullopt;
    } else if (auto e = dyn_cast<tensor::ExpandShapeOp>(def)) {
      if (!keepsRows(e.getReassociationIndices()))
        return std::nullopt;
    } else {
      break;
    }
    reshapes.push_back(def);
    def = def->getOperand(0).getDefiningOp();
  }
  if (!def || def->getName().getStringRef() != "iree_linalg_ext.gather" ||
      def->getNumOperands() != 3 ||
      cast<RankedTensorType>(def->getOperand(1).getType()).getRank() != 1)
    return std::nullopt;
  Value source = def->getOperand(0);
  for (Operation *r : llvm::reverse(reshapes)) {
    if (auto c = dyn_cast<tensor::CollapseShapeOp>(r)) {
      source = tensor::CollapseShapeOp::create(b, loc, source,
                                               c.getReassociationIndices());
      continue;
    }
    auto e = cast<tensor::ExpandShapeOp>(r);
    SmallVector<int64_t> shape(e.getResultType().getShape());
    shape.front() = cast<RankedTensorType>(source.getType()).getDimSize(0);
    SmallVector<OpFoldResult> sizes = e.getMixedOutputShape();
    sizes.front() = tensor::getMixedSize(b, loc, source, 0);
    source = tensor::ExpandShapeOp::create(
        b, loc, RankedTensorType::get(shape, e.getResultType().getElementType()),
        source, e.getReassociationIndices(), sizes);
  }
  return GatheredRows{source, def->getOperand(1)};
}

struct AttentionToIree : OpRewritePattern<AttentionOp> {
  AttentionToIree(MLIRContext *ctx, int64_t scoresMaxRows) : OpRewritePattern(ctx), scoresMaxRows(scoresMaxRows) {}
  int64_t scoresMaxRows;

  LogicalResult matchAndRewrite(AttentionOp op, PatternRewriter &rewriter) const override {
    // IREE's fused kernel keeps no log-sum-exp: an attention returning its
    // lse (a training forward) takes the linalg buckets.
    if (op.getLse())
      return rewriter.notifyMatchFailure(op, "IREE's fused attention returns no lse");
    if (op.getSeed())
      return rewriter.notifyMatchFailure(op, "IREE's fused attention does not drop weights");
    auto type = cast<RaggedTensorType>(op.getResult().getType());
    RankedTensorType valuesType = type.getValuesType();
    if (!type.getElementType().isF32() || valuesType.getRank() != 3 || valuesType.isDynamicDim(1) ||
        valuesType.isDynamicDim(2))
      return rewriter.notifyMatchFailure(op, "IREE's attention takes f32 with static heads and head size");
    Location loc = op.getLoc();
    // The packed values of each distinct operand (the same value for a
    // shared one), read through a pack where there is one.
    SmallVector<std::pair<Value, Value>> seen;
    auto valuesOf = [&](Value ragged) -> Value {
      for (auto [from, to] : seen)
        if (from == ragged)
          return to;
      Value values;
      auto pack = ragged.getDefiningOp<PackOp>();
      if (pack && pack.getValues().getType() == valuesType) {
        values = pack.getValues();
      } else {
        OpBuilder::InsertionGuard guard(rewriter);
        rewriter.setInsertionPointAfterValue(ragged);
        values = ValuesOp::create(rewriter, loc, valuesType, ragged);
      }
      seen.push_back({ragged, values});
      return values;
    };
    Value q = valuesOf(op.getQuery()), k = valuesOf(op.getKey()), v = valuesOf(op.getValue());
    // The offsets, where they are defined: the schedule follows them.
    Value offsets;
    if (auto pack = op.getQuery().getDefiningOp<PackOp>()) {
      offsets = pack.getPartitions().front();
    } else {
      OpBuilder::InsertionGuard guard(rewriter);
      rewriter.setInsertionPointAfterValue(op.getQuery());
      StringAttr symbol = type.getDistinctSymbols().front();
      offsets = OffsetsOp::create(rewriter, loc, type.getPartitionType(symbol), op.getQuery(), symbol);
    }
    BucketKernel kernel;
    kernel.staticLadder = kStaticLadder;
    kernel.attend = [this](OpBuilder &b, Location l, Value qb, Value kb, Value vb, Value mask, const AttnShape &blk) {
      return bucketAttention(b, l, qb, kb, vb, mask, blk, scoresMaxRows);
    };
    // IREE's row gathers feed the fused attention, which IREE then fuses
    // with them (bucketedAttention keeps linalg gathers where q, k or v are
    // the same tensor: one gather feeding two of its operands fails IREE's
    // CPU codegen, "large vector sizes"). An operand that is itself rows
    // gathered by IREE (the last step of another attention) is read from
    // that gather's source through the composed row index: IREE would
    // otherwise fuse the earlier gather into this attention's dispatch,
    // where its CPU codegen vectorises it at its whole dynamic extent or
    // rejects the fused gathers; it also saves a copy of the rows.
    kernel.gatherRows = ireeGather;
    kernel.gatheredRows = gatheredRows;
    // IREE's attention gets no unit head dim: IREE would fold it, and it
    // mis-folds an attention whose operands repeat (q = k: "Rank Mismatch
    // for Query") or whose blocks are results of one gather.
    kernel.dropUnitHead = true;
    AttnShape shape{op.getCausal(), op.getScale().convertToDouble(), type.getElementType()};
    Value out = bucketedAttention(rewriter, loc, q, k, v, offsets, shape, kernel);
    rewriter.replaceOpWithNewOp<PackOp>(op, type, out, ValueRange{offsets});
    return success();
  }
};

struct RaggedAttentionToIreePass : ragged::impl::RaggedAttentionToIreePassBase<RaggedAttentionToIreePass> {
  using RaggedAttentionToIreePassBase::RaggedAttentionToIreePassBase;
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    if (!ctx->allowsUnregisteredDialects()) {
      emitError(getOperation().getLoc())
          << "ragged-attention-to-iree emits iree_linalg_ext.attention and "
             "iree_linalg_ext.gather, which this context does not know: "
             "allow unregistered dialects (ragged-opt --allow-unregistered-dialect)";
      return signalPassFailure();
    }
    RewritePatternSet patterns(ctx);
    populateRaggedAttentionToIreePatterns(patterns, scoresMaxRows);
    // One walk in program order: an attention reading another's result sees
    // it already rewritten (its IREE gather), and nothing is folded.
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};

} // namespace

void mlir::ragged::populateRaggedAttentionToIreePatterns(RewritePatternSet &patterns, int64_t scoresMaxRows) {
  patterns.add<AttentionToIree>(patterns.getContext(), scoresMaxRows);
}
