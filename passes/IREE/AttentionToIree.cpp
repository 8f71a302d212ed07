//===- AttentionToIree.cpp - ragged.attention on IREE's fused kernel ------===//
//
// Everything IREE-specific in the lowering: f32 attention with static heads
// and head size runs by length buckets (BucketedAttention.h) on a static
// ladder, with IREE's fused `iree_linalg_ext.attention` (online softmax, no
// score blocks), or `iree_linalg_ext.online_attention` where the lse is
// wanted too (a training forward), and IREE's row gathers. IREE's CPU codegen
// picks fast tiles only when the bucket size is static, hence the ladder. The
// IREE ops are built by name, unregistered, for IREE to parse. The rewrite
// stays at the ragged level (ragged.values / ragged.offsets in, ragged.pack
// out), so convert-ragged-to-linalg lowers what is left.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/RaggedToLinalg/BucketedAttention.h"
#include "passes/IREE/Barrier.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
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
constexpr int64_t kStaticLadder[] = {16,  32,  48,  64,  96,  128,
                                     192, 256, 384, 512, 768, 1024};

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

/// What IREE's two attention ops share over [n, S, H, d] blocks, or [n, S,
/// d] for one head: the operands q, k, v, scale and the i1 mask, which
/// admits the keys inside the item ([n, S]) or, when causal, the keys at or
/// before the query ([S, S]: a valid query never reaches a padded key), with
/// their maps over the loops (b, h, m, n, k1, k2): batch, head (but for one
/// head), query, value column, head column, key; and the maps of an output
/// block and of a per-query statistic ([n, S, H] or [n, S]).
struct FusedOperands {
  SmallVector<Value> operands;
  SmallVector<AffineMap> maps;
  AffineMap outMap, statMap;
};

FusedOperands fusedOperands(OpBuilder &b, Location loc, Value qb, Value kb,
                            Value vb, Value keyMask, const AttnShape &blk) {
  MLIRContext *ctx = b.getContext();
  auto blockType = cast<RankedTensorType>(qb.getType());
  int64_t sStatic = blockType.getDimSize(1);
  bool oneHead = blockType.getRank() == 3;
  unsigned loops = oneHead ? 5 : 6, m = oneHead ? 1 : 2;
  unsigned n = m + 1, k1 = m + 2, k2 = m + 3;
  auto d = [&](unsigned i) { return getAffineDimExpr(i, ctx); };
  auto map = [&](ArrayRef<AffineExpr> r) {
    return AffineMap::get(loops, 0, r, ctx);
  };
  // [batch, row, (head,) column] operand maps.
  auto rowMap = [&](unsigned row, std::optional<unsigned> column) {
    SmallVector<AffineExpr> r{d(0), d(row)};
    if (!oneHead)
      r.push_back(d(1));
    if (column)
      r.push_back(d(*column));
    return map(r);
  };
  Value mask = keyMask;
  AffineMap maskMap = map({d(0), d(k2)});
  if (blk.causal) {
    SmallVector<Value> dynSq;
    if (ShapedType::isDynamic(sStatic))
      dynSq.assign(2, dimOf(b, loc, qb, 1));
    Value init = emptyTensor(b, loc, {sStatic, sStatic}, b.getI1Type(), dynSq);
    mask = parallelGeneric(
        b, loc, init, {}, {}, [&](OpBuilder &nb, Location l, ValueRange) {
          return arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ule,
                                       linalg::IndexOp::create(nb, l, 1),
                                       linalg::IndexOp::create(nb, l, 0))
              .getResult();
        });
    maskMap = map({d(m), d(k2)});
  }
  FusedOperands f;
  f.operands = {qb, kb, vb, floatConst(b, loc, blk.elem, blk.scale), mask};
  f.maps = {rowMap(m, k1), rowMap(k2, k1), rowMap(k2, n), map({}), maskMap};
  f.outMap = rowMap(m, n);
  f.statMap = rowMap(m, std::nullopt);
  return f;
}

/// An IREE attention op `name` (generic form) on `f` and `inits`, whose
/// region yields the score as is.
Operation *fusedOp(OpBuilder &b, Location loc, StringRef name,
                   const FusedOperands &f, ValueRange inits,
                   ArrayRef<AffineMap> initMaps, Type elem) {
  OperationState state(loc, name);
  state.addOperands(f.operands);
  state.addOperands(inits);
  state.addTypes(inits.getTypes());
  SmallVector<AffineMap> maps(f.maps);
  llvm::append_range(maps, initMaps);
  state.addAttribute("indexing_maps", b.getAffineMapArrayAttr(maps));
  Region *body = state.addRegion();
  auto *entry = new mlir::Block();
  body->push_back(entry);
  Value score = entry->addArgument(elem, loc);
  {
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(entry);
    OperationState yield(loc, "iree_linalg_ext.yield");
    yield.addOperands(score);
    b.create(yield);
  }
  return b.create(state);
}

/// IREE's fused attention over [n, S, H, d] blocks, or [n, S, d] for one
/// head (see FusedOperands for the mask).
Value ireeAttention(OpBuilder &b, Location loc, Value qb, Value kb, Value vb,
                    Value keyMask, const AttnShape &blk) {
  FusedOperands f = fusedOperands(b, loc, qb, kb, vb, keyMask, blk);
  return fusedOp(b, loc, "iree_linalg_ext.attention", f,
                 {emptyLike(b, loc, qb)}, {f.outMap}, blk.elem)
      ->getResult(0);
}

/// IREE's fused attention that also returns each query slot's log-sum-exp
/// of its logits (ragged.attention's `lse`, [n, S, H, 1] or [n, S, 1]):
/// `iree_linalg_ext.online_attention`, which returns the unnormalised
/// output with the running maximum and sum of every query, then out = acc /
/// sum and lse = ln 2 max + ln sum. IREE 3.13 keeps that maximum and
/// sum in base 2 (its softmax is exp2 of the logits times log2 e); the
/// training tests compare the gradient built from this lse with fp64.
SmallVector<Value> ireeAttentionWithLse(OpBuilder &b, Location loc, Value qb,
                                        Value kb, Value vb, Value keyMask,
                                        const AttnShape &blk) {
  FusedOperands f = fusedOperands(b, loc, qb, kb, vb, keyMask, blk);
  auto type = cast<RankedTensorType>(qb.getType());
  // The head size is static: a block and its statistics share their
  // dynamic sizes.
  SmallVector<int64_t> statShape(type.getShape().drop_back());
  SmallVector<Value> dyn;
  for (auto [i, extent] : llvm::enumerate(statShape))
    if (ShapedType::isDynamic(extent))
      dyn.push_back(dimOf(b, loc, qb, i));
  auto filled = [&](ArrayRef<int64_t> shape, double v) {
    return linalg::FillOp::create(b, loc, floatConst(b, loc, blk.elem, v),
                                  emptyTensor(b, loc, shape, blk.elem, dyn))
        .getResult(0);
  };
  // The running maximum starts at the lowest finite value: a key step whose
  // keys are all masked (-inf) then rescales by 0, not by NaN.
  Value acc = filled(type.getShape(), 0.0);
  Value max = filled(statShape, -double(std::numeric_limits<float>::max()));
  Value sum = filled(statShape, 0.0);
  Operation *online =
      fusedOp(b, loc, "iree_linalg_ext.online_attention", f, {acc, max, sum},
              {f.outMap, f.statMap, f.statMap}, blk.elem);
  // Loops over the output block: its statistic drops the last dim.
  unsigned rank = type.getRank();
  AffineMap identity = AffineMap::getMultiDimIdentityMap(rank, b.getContext());
  AffineMap statOf = identity.dropResult(rank - 1);
  Value out = parallelGeneric(
      b, loc, emptyLike(b, loc, qb),
      {online->getResult(0), online->getResult(2)}, {identity, statOf},
      [&](OpBuilder &nb, Location l, ValueRange a) {
        return arith::DivFOp::create(nb, l, a[0], a[1]).getResult();
      });
  SmallVector<int64_t> lseShape(statShape);
  lseShape.push_back(1);
  Value lse = parallelGeneric(
      b, loc, emptyTensor(b, loc, lseShape, blk.elem, dyn),
      {online->getResult(1), online->getResult(2)}, {statOf, statOf},
      [&](OpBuilder &nb, Location l, ValueRange a) {
        Value max = arith::MulFOp::create(
            nb, l, a[0], floatConst(nb, l, blk.elem, std::log(2.0)));
        return arith::AddFOp::create(nb, l, max,
                                     math::LogOp::create(nb, l, a[1]))
            .getResult();
      });
  return {out, lse};
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
Value bucketAttention(OpBuilder &b, Location loc, Value qb, Value kb, Value vb,
                      Value keyMask, const AttnShape &blk,
                      int64_t scoresMaxRows) {
  auto type = cast<RankedTensorType>(qb.getType());
  int64_t size = type.getDimSize(1);
  if (type.getRank() != 4 || ShapedType::isDynamic(size) ||
      size < kScoresMinRows || size > scoresMaxRows)
    return ireeAttention(b, loc, qb, kb, vb, keyMask, blk);
  int64_t perItem =
      type.getDimSize(2) * size * size * (blk.elem.getIntOrFloatBitWidth() / 8);
  Value fits = arith::CmpIOp::create(
      b, loc, arith::CmpIPredicate::ule, dimOf(b, loc, qb, 0),
      constIndex(b, loc, kScoresBudgetBytes / perItem));
  auto scores = [&](OpBuilder &nb, Location l) {
    scf::YieldOp::create(
        nb, l,
        linalgAttention(nb, l, qb, kb, vb, keyMask, blk, /*lse=*/false)
            .front());
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
        b, loc,
        RankedTensorType::get(shape, e.getResultType().getElementType()),
        source, e.getReassociationIndices(), sizes);
  }
  return GatheredRows{source, def->getOperand(1)};
}

/// Whether `v` is, through row-keeping reshapes, the result of an IREE
/// row gather (what gatheredRows reads through).
bool isGatheredRows(Value v) {
  Operation *def = v.getDefiningOp();
  while (def && isa<tensor::CollapseShapeOp, tensor::ExpandShapeOp>(def))
    def = def->getOperand(0).getDefiningOp();
  return def && def->getName().getStringRef() == "iree_linalg_ext.gather";
}

struct AttentionToIree : OpRewritePattern<AttentionOp> {
  AttentionToIree(MLIRContext *ctx, int64_t scoresMaxRows)
      : OpRewritePattern(ctx), scoresMaxRows(scoresMaxRows) {}
  int64_t scoresMaxRows;

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getSeed())
      return rewriter.notifyMatchFailure(
          op, "IREE's fused attention does not drop weights");
    auto type = cast<RaggedTensorType>(op.getResult().getType());
    RankedTensorType valuesType = type.getValuesType();
    if (!type.getElementType().isF32() || valuesType.getRank() != 3 ||
        valuesType.isDynamicDim(1) || valuesType.isDynamicDim(2))
      return rewriter.notifyMatchFailure(
          op, "IREE's attention takes f32 with static heads and head size");
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
    Value q = valuesOf(op.getQuery()), k = valuesOf(op.getKey()),
          v = valuesOf(op.getValue());
    // IREE propagates a reshape of an operand's head columns (rotary
    // embeddings rotate the two halves of each head: `cat(-x2, x1)`) through
    // the row gathers into the attention, which then has a loop the CPU
    // tiles (ragged-cpu-attention-tiles) do not describe: "large vector
    // sizes". Behind a barrier the operands keep their [rows, H, d] shape.
    // Rows gathered by another attention stay visible (see gatheredRows).
    SmallVector<std::pair<Value, Value>> hidden;
    auto opaque = [&](Value values) -> Value {
      for (auto [from, to] : hidden)
        if (from == values)
          return to;
      Value to =
          isGatheredRows(values)
              ? values
              : optimizationBarrier(rewriter, loc, values, /*tieShape=*/true);
      hidden.push_back({values, to});
      return to;
    };
    q = opaque(q), k = opaque(k), v = opaque(v);
    // The offsets, where they are defined: the schedule follows them.
    Value offsets;
    if (auto pack = op.getQuery().getDefiningOp<PackOp>()) {
      offsets = pack.getPartitions().front();
    } else {
      OpBuilder::InsertionGuard guard(rewriter);
      rewriter.setInsertionPointAfterValue(op.getQuery());
      StringAttr symbol = type.getDistinctSymbols().front();
      offsets = OffsetsOp::create(rewriter, loc, type.getPartitionType(symbol),
                                  op.getQuery(), symbol);
    }
    BucketKernel kernel;
    kernel.staticLadder = kStaticLadder;
    kernel.attend = [this](OpBuilder &b, Location l, Value qb, Value kb,
                           Value vb, Value mask, const AttnShape &blk) {
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
    AttnShape shape{op.getCausal(), op.getScale().convertToDouble(),
                    type.getElementType()};
    if (!op.getLse()) {
      Value out =
          bucketedAttention(rewriter, loc, q, k, v, offsets, shape, kernel);
      rewriter.replaceOpWithNewOp<PackOp>(op, type, out, ValueRange{offsets});
      return success();
    }
    // A training forward also returns the lse its gradient starts from.
    SmallVector<Value> outs =
        bucketedRows(rewriter, loc, {q, k, v}, offsets, kernel, 2,
                     [&](OpBuilder &b, Location l, ArrayRef<Value> blocks,
                         Value mask, Value) {
                       return ireeAttentionWithLse(b, l, blocks[0], blocks[1],
                                                   blocks[2], mask, shape);
                     });
    // A gradient in the same function reads these rows with linalg gathers
    // (tensor.extract), into whose dispatch IREE would fuse the row gather
    // that made them, which its CPU codegen then cannot distribute.
    auto feedsGrad = [](Value v) {
      return llvm::any_of(v.getUsers(), [](Operation *user) {
        return isa<AttentionGradOp>(user);
      });
    };
    if (feedsGrad(op.getResult()) || feedsGrad(op.getLse()))
      for (Value &rows : outs)
        rows = optimizationBarrier(rewriter, loc, rows, /*tieShape=*/true);
    Value out =
        PackOp::create(rewriter, loc, type, outs[0], ValueRange{offsets});
    Value lse = PackOp::create(rewriter, loc, op.getLse().getType(), outs[1],
                               ValueRange{offsets});
    rewriter.replaceOp(op, {out, lse});
    return success();
  }
};

struct RaggedAttentionToIreePass
    : ragged::impl::RaggedAttentionToIreePassBase<RaggedAttentionToIreePass> {
  using RaggedAttentionToIreePassBase::RaggedAttentionToIreePassBase;
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    if (!ctx->allowsUnregisteredDialects()) {
      emitError(getOperation().getLoc())
          << "ragged-attention-to-iree emits iree_linalg_ext.attention and "
             "iree_linalg_ext.gather, which this context does not know: "
             "allow unregistered dialects (ragged-opt "
             "--allow-unregistered-dialect)";
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

void mlir::ragged::populateRaggedAttentionToIreePatterns(
    RewritePatternSet &patterns, int64_t scoresMaxRows) {
  patterns.add<AttentionToIree>(patterns.getContext(), scoresMaxRows);
}
