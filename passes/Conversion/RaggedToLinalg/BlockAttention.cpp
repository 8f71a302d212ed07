//===- BlockAttention.cpp - dense attention on one bucket's blocks --------===//
//
// See BucketedAttention.h: linalgAttention, its log-sum-exp form and
// linalgAttentionGrad, the dense kernels the upstream lowering runs on the
// [n, S, H, d] blocks of one length bucket (BucketSchedule.cpp gathers
// them), and the dropout factors of their weights.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/RaggedToLinalg/BucketedAttention.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace mlir;
using namespace mlir::ragged;
using namespace mlir::ragged::lowering;

AttnShape lowering::withDropout(OpBuilder &b, Location loc, AttnShape shape,
                                double dropout, Value seed) {
  if (!seed || dropout <= 0.0)
    return shape;
  Type i32 = b.getI32Type();
  Value s = tensor::ExtractOp::create(b, loc, seed, ValueRange{});
  shape.dropout = dropout;
  shape.seedLo = arith::TruncIOp::create(b, loc, i32, s);
  Value high = arith::ShRUIOp::create(
      b, loc, s, arith::ConstantIntOp::create(b, loc, b.getI64Type(), 32));
  shape.seedHi = arith::TruncIOp::create(b, loc, i32, high);
  return shape;
}

uint32_t lowering::dropoutThreshold(double dropout) {
  return uint32_t(
      std::min(std::round(std::ldexp(dropout, 32)), std::ldexp(1.0, 32) - 1.0));
}

Value lowering::dropoutFactor(OpBuilder &b, Location loc, const AttnShape &blk,
                              Value item, Value h, Value i, Value j) {
  Type i32 = b.getI32Type();
  auto c32 = [&](uint32_t v) -> Value {
    return arith::ConstantIntOp::create(b, loc, i32, int64_t(int32_t(v)));
  };
  auto asI32 = [&](Value x) -> Value {
    return x.getType().isIndex()
               ? arith::IndexCastOp::create(b, loc, i32, x).getResult()
               : arith::TruncIOp::create(b, loc, i32, x).getResult();
  };
  // MurmurHash3's 32-bit finaliser.
  auto mix = [&](Value x) {
    auto xorShift = [&](Value y, uint32_t by) -> Value {
      return arith::XOrIOp::create(b, loc, y,
                                   arith::ShRUIOp::create(b, loc, y, c32(by)));
    };
    x = arith::MulIOp::create(b, loc, xorShift(x, 16), c32(0x85EBCA6B));
    x = arith::MulIOp::create(b, loc, xorShift(x, 13), c32(0xC2B2AE35));
    return xorShift(x, 16);
  };
  Value c = c32(0);
  for (auto [x, k] : llvm::zip(SmallVector<Value>{item, h, i, j},
                               SmallVector<uint32_t>{0x9E3779B1, 0x85EBCA77,
                                                     0xC2B2AE3D, 0x27D4EB2F}))
    c = arith::AddIOp::create(b, loc, c,
                              arith::MulIOp::create(b, loc, asI32(x), c32(k)));
  Value u = mix(arith::XOrIOp::create(
      b, loc, mix(arith::XOrIOp::create(b, loc, c, blk.seedLo)), blk.seedHi));
  Value kept = arith::CmpIOp::create(b, loc, arith::CmpIPredicate::uge, u,
                                     c32(dropoutThreshold(blk.dropout)));
  return arith::SelectOp::create(
      b, loc, kept, floatConst(b, loc, blk.elem, 1.0 / (1.0 - blk.dropout)),
      floatConst(b, loc, blk.elem, 0.0));
}

namespace {

/// What linalgAttention and its gradient share: the unnormalised weights
/// exp(logit - row max) [n, H, S, S] (0 for masked keys), the row maxima
/// and the row sums [n, H, S], with the loop helpers both use.
struct BlockSoftmax {
  Value weights, maxima, sums;
};

struct BlockMaps {
  MLIRContext *ctx;
  AffineExpr d(unsigned i) const { return getAffineDimExpr(i, ctx); }
  AffineMap map5(ArrayRef<AffineExpr> r) const {
    return AffineMap::get(5, 0, r, ctx);
  }
  AffineMap map4(ArrayRef<AffineExpr> r) const {
    return AffineMap::get(4, 0, r, ctx);
  }
  /// Four loops, the result dims named by position.
  AffineMap dims4(ArrayRef<unsigned> dims) const {
    SmallVector<AffineExpr> r;
    for (unsigned i : dims)
      r.push_back(d(i));
    return map4(r);
  }
  /// Loops (b, h, m, j, e): a row of the query side, of the key side, a pair.
  AffineMap rowsOf() const { return map5({d(0), d(2), d(1), d(4)}); }
  AffineMap keysOf() const { return map5({d(0), d(3), d(1), d(4)}); }
  AffineMap pairOf() const { return map5({d(0), d(1), d(2), d(3)}); }
  /// Loops (b, h, i, j) over pairs: all of it, its row, its key slot.
  AffineMap all4() const { return AffineMap::getMultiDimIdentityMap(4, ctx); }
  AffineMap row4() const { return map4({d(0), d(1), d(2)}); }
  AffineMap key4() const { return map4({d(0), d(3)}); }
  AffineMap query4() const { return map4({d(0), d(2)}); }
};

auto par = utils::IteratorType::parallel;
auto red = utils::IteratorType::reduction;

/// Item and head dims as one.
SmallVector<ReassociationIndices> headGroups() { return {{0, 1}, {2}, {3}}; }

/// `pairs` [n, H, S, S] times each pair's dropout factor (`items` [n] names
/// each block's item).
Value dropPairs(OpBuilder &b, Location loc, const BlockMaps &m, Value pairs,
                Value items, const AttnShape &blk) {
  return parallelGeneric(
      b, loc, emptyLike(b, loc, pairs), {pairs, items},
      {m.all4(), m.map4({m.d(0)})},
      [&](OpBuilder &nb, Location l, ValueRange a) {
        auto at = [&](int64_t dim) -> Value {
          return linalg::IndexOp::create(nb, l, dim);
        };
        Value f = dropoutFactor(nb, l, blk, a[1], at(1), at(2), at(3));
        return arith::MulFOp::create(nb, l, a[0], f).getResult();
      });
}

Value mulAdd(OpBuilder &nb, Location l, ValueRange a) {
  return arith::AddFOp::create(nb, l, a[2],
                               arith::MulFOp::create(nb, l, a[0], a[1]));
}

/// The dynamic values of `values` at the dynamic extents of `shape`.
SmallVector<Value> dynOf(ArrayRef<int64_t> shape, ArrayRef<Value> values) {
  SmallVector<Value> out;
  for (auto [extent, value] : llvm::zip(shape, values))
    if (ShapedType::isDynamic(extent))
      out.push_back(value);
  return out;
}

/// A zero-filled tensor.
Value zeros(OpBuilder &b, Location loc, ArrayRef<int64_t> shape, Type elem,
            ArrayRef<Value> dyn) {
  return linalg::FillOp::create(b, loc, floatConst(b, loc, elem, 0.0),
                                emptyTensor(b, loc, shape, elem, dyn))
      .getResult(0);
}

/// [n, H, S, S] and [n, H, S] shapes of a block's pairs and rows.
struct PairShapes {
  SmallVector<int64_t> pairs, rows;
  SmallVector<Value> pairDyn, rowDyn;
};

PairShapes pairShapes(OpBuilder &b, Location loc, Value block) {
  auto type = cast<RankedTensorType>(block.getType());
  int64_t s = type.getDimSize(1), h = type.getDimSize(2),
          dyn = ShapedType::kDynamic;
  Value items = dimOf(b, loc, block, 0), size = dimOf(b, loc, block, 1),
        heads = dimOf(b, loc, block, 2);
  PairShapes p;
  p.pairs = {dyn, h, s, s};
  p.rows = {dyn, h, s};
  p.pairDyn = dynOf(p.pairs, {items, heads, size, size});
  p.rowDyn = dynOf(p.rows, {items, heads, size});
  return p;
}

/// Whether the contractions of a block run with one batch dim (item and
/// head as one, the blocks transposed to [n H, S, e]). IREE data-tiles
/// such a contraction for the CPU, but only pays off when the bucket size
/// is static: 1.2-1.6x faster than two batch dims (which IREE tiles as is)
/// on static buckets of 32-512 rows, no faster with a dynamic size (where
/// IREE's transpose propagation also crashes on the gradient's).
bool headMajorContractions(Value block) {
  return !cast<RankedTensorType>(block.getType()).isDynamicDim(1);
}

/// A block [n, S, H, e] as [n H, S, e]; the transpose becomes part of the
/// data-tiling pack.
Value headMajor(OpBuilder &b, Location loc, Value block) {
  auto type = cast<RankedTensorType>(block.getType());
  SmallVector<int64_t> perm{0, 2, 1, 3}, shape;
  SmallVector<Value> dyn;
  for (int64_t i : perm) {
    shape.push_back(type.getDimSize(i));
    if (type.isDynamicDim(i))
      dyn.push_back(dimOf(b, loc, block, i));
  }
  Value init = emptyTensor(b, loc, shape, type.getElementType(), dyn);
  Value moved = linalg::TransposeOp::create(b, loc, block, init, perm)
                    .getResult()
                    .front();
  return tensor::CollapseShapeOp::create(b, loc, moved, headGroups());
}

/// [n H, ...] back to [n, H, ...], `like` giving n and H.
Value splitHeads(OpBuilder &b, Location loc, Value flat, Value like,
                 int64_t likeHeadDim) {
  auto type = cast<RankedTensorType>(flat.getType());
  auto likeType = cast<RankedTensorType>(like.getType());
  SmallVector<int64_t> shape{likeType.getDimSize(0),
                             likeType.getDimSize(likeHeadDim)};
  SmallVector<OpFoldResult> sizes{
      tensor::getMixedSize(b, loc, like, 0),
      tensor::getMixedSize(b, loc, like, likeHeadDim)};
  for (int64_t i = 1; i < type.getRank(); ++i) {
    shape.push_back(type.getDimSize(i));
    sizes.push_back(tensor::getMixedSize(b, loc, flat, i));
  }
  return tensor::ExpandShapeOp::create(
      b, loc, RankedTensorType::get(shape, type.getElementType()), flat,
      headGroups(), sizes);
}

/// sum_e a[b, ., h, e] c[b, ., h, e] for every pair: [n, H, S, S].
Value pairDots(OpBuilder &b, Location loc, const BlockMaps &m,
               const PairShapes &p, Type elem, Value a, Value c) {
  if (!headMajorContractions(a))
    return structured(b, loc, zeros(b, loc, p.pairs, elem, p.pairDyn), {a, c},
                      {m.rowsOf(), m.keysOf(), m.pairOf()},
                      {par, par, par, par, red}, mulAdd);
  // Loops (g, i, j, e) over [n H, S, e] operands, S static.
  SmallVector<int64_t> flat{ShapedType::kDynamic, p.pairs[2], p.pairs[3]};
  Value rows = headMajor(b, loc, a), keys = headMajor(b, loc, c);
  Value dots = structured(
      b, loc, zeros(b, loc, flat, elem, {dimOf(b, loc, rows, 0)}), {rows, keys},
      {m.dims4({0, 1, 3}), m.dims4({0, 2, 3}), m.dims4({0, 1, 2})},
      {par, par, par, red}, mulAdd);
  return splitHeads(b, loc, dots, a, 2);
}

/// The scaled logit of score `s` in a generic over pairs (b, h, i, j), -inf
/// where key j is masked (`keyOk` false) or, when causal, in query i's
/// future.
Value maskedLogit(OpBuilder &nb, Location l, Value s, Value keyOk,
                  const AttnShape &blk) {
  if (blk.causal)
    keyOk = arith::AndIOp::create(
        nb, l, keyOk,
        arith::CmpIOp::create(nb, l, arith::CmpIPredicate::ule,
                              linalg::IndexOp::create(nb, l, 3),
                              linalg::IndexOp::create(nb, l, 2)));
  Value scaled =
      arith::MulFOp::create(nb, l, s, floatConst(nb, l, blk.elem, blk.scale));
  return arith::SelectOp::create(
             nb, l, keyOk, scaled,
             floatConst(nb, l, blk.elem,
                        -std::numeric_limits<double>::infinity()))
      .getResult();
}

BlockSoftmax blockSoftmax(OpBuilder &b, Location loc, const BlockMaps &m,
                          const PairShapes &p, Value qBlock, Value kBlock,
                          Value keyMask, const AttnShape &blk) {
  Type elem = blk.elem;
  Value ninf =
      floatConst(b, loc, elem, -std::numeric_limits<double>::infinity());
  // scores[b, h, m, j] = sum_e q[b, m, h, e] k[b, j, h, e].
  Value scores = pairDots(b, loc, m, p, elem, qBlock, kBlock);
  // Masked, scaled logits: keys past the item's length (and the future,
  // when causal) get -inf. Loops (b, h, i, j).
  auto logit = [&](OpBuilder &nb, Location l, Value s, Value ok) {
    return maskedLogit(nb, l, s, ok, blk);
  };
  Value maxInit = linalg::FillOp::create(
                      b, loc, ninf, emptyTensor(b, loc, p.rows, elem, p.rowDyn))
                      .getResult(0);
  Value maxima = structured(
      b, loc, maxInit, {scores, keyMask}, {m.all4(), m.key4(), m.row4()},
      {par, par, par, red}, [&](OpBuilder &nb, Location l, ValueRange a) {
        return arith::MaximumFOp::create(nb, l, a[2], logit(nb, l, a[0], a[1]));
      });
  Value pairEmpty = emptyTensor(b, loc, p.pairs, elem, p.pairDyn);
  Value weights = structured(
      b, loc, pairEmpty, {scores, keyMask, maxima},
      {m.all4(), m.key4(), m.row4(), m.all4()}, {par, par, par, par},
      [&](OpBuilder &nb, Location l, ValueRange a) {
        return math::ExpOp::create(
                   nb, l,
                   arith::SubFOp::create(nb, l, logit(nb, l, a[0], a[1]), a[2]))
            .getResult();
      });
  Value sums =
      structured(b, loc, zeros(b, loc, p.rows, elem, p.rowDyn), {weights},
                 {m.all4(), m.row4()}, {par, par, par, red},
                 [&](OpBuilder &nb, Location l, ValueRange a) {
                   return arith::AddFOp::create(nb, l, a[1], a[0]).getResult();
                 });
  return {weights, maxima, sums};
}

/// out[b, m, h, e] = sum_j w[b, h, m, j] x[b, j, h, e], the reduction
/// innermost; `transposed` reads w[b, h, j, m] instead.
Value pairsTimesRows(OpBuilder &b, Location loc, const BlockMaps &m, Value w,
                     Value x, bool transposed) {
  Type elem = cast<RankedTensorType>(x.getType()).getElementType();
  if (!headMajorContractions(x)) {
    // Loops (b, h, m, e, j).
    auto d = [&](unsigned i) { return m.d(i); };
    AffineMap wMap = transposed ? m.map5({d(0), d(1), d(4), d(2)})
                                : m.map5({d(0), d(1), d(2), d(4)});
    Value init = linalg::FillOp::create(b, loc, floatConst(b, loc, elem, 0.0),
                                        emptyLike(b, loc, x))
                     .getResult(0);
    return structured(b, loc, init, {w, x},
                      {wMap, m.map5({d(0), d(4), d(1), d(3)}),
                       m.map5({d(0), d(2), d(1), d(3)})},
                      {par, par, par, par, red}, mulAdd);
  }
  // Loops (g, m, e, j) over [n H, ...] operands.
  Value pairs = tensor::CollapseShapeOp::create(b, loc, w, headGroups());
  Value rows = headMajor(b, loc, x);
  Value init = linalg::FillOp::create(b, loc, floatConst(b, loc, elem, 0.0),
                                      emptyLike(b, loc, rows))
                   .getResult(0);
  AffineMap pairsMap = transposed ? m.dims4({0, 3, 1}) : m.dims4({0, 1, 3});
  Value out = structured(b, loc, init, {pairs, rows},
                         {pairsMap, m.dims4({0, 3, 2}), m.dims4({0, 1, 2})},
                         {par, par, par, red}, mulAdd);
  // [n, H, S, e] -> [n, S, H, e].
  Value split = splitHeads(b, loc, out, w, 1);
  return linalg::TransposeOp::create(b, loc, split, emptyLike(b, loc, x),
                                     {0, 2, 1, 3})
      .getResult()
      .front();
}

} // namespace

SmallVector<Value> lowering::linalgAttention(OpBuilder &b, Location loc,
                                             Value qBlock, Value kBlock,
                                             Value vBlock, Value keyMask,
                                             const AttnShape &blk, bool lse,
                                             Value items) {
  BlockMaps m{b.getContext()};
  PairShapes p = pairShapes(b, loc, qBlock);
  BlockSoftmax sm = blockSoftmax(b, loc, m, p, qBlock, kBlock, keyMask, blk);
  // out = weights v / sums: the division after the contraction. Dropout
  // drops weights after the sums are taken.
  Value weights = blk.dropout > 0.0
                      ? dropPairs(b, loc, m, sm.weights, items, blk)
                      : sm.weights;
  Value out = pairsTimesRows(b, loc, m, weights, vBlock, /*transposed=*/false);
  AffineMap rowOf = m.map4({m.d(0), m.d(2), m.d(1)});
  SmallVector<Value> results{parallelGeneric(
      b, loc, emptyLike(b, loc, qBlock), {out, sm.sums}, {m.all4(), rowOf},
      [&](OpBuilder &nb, Location l, ValueRange a) {
        return arith::DivFOp::create(nb, l, a[0], a[1]).getResult();
      })};
  if (!lse)
    return results;
  // lse [n, S, H, 1] = max + log(sum), finite on every slot: key 0 is
  // inside every item and never in a query's future.
  auto qType = cast<RankedTensorType>(qBlock.getType());
  SmallVector<int64_t> lseShape(qType.getShape());
  lseShape.back() = 1;
  SmallVector<Value> lseDyn;
  for (unsigned i = 0; i + 1 < lseShape.size(); ++i)
    if (ShapedType::isDynamic(lseShape[i]))
      lseDyn.push_back(dimOf(b, loc, qBlock, i));
  results.push_back(parallelGeneric(
      b, loc, emptyTensor(b, loc, lseShape, blk.elem, lseDyn),
      {sm.maxima, sm.sums}, {rowOf, rowOf},
      [&](OpBuilder &nb, Location l, ValueRange a) {
        return arith::AddFOp::create(nb, l, a[0],
                                     math::LogOp::create(nb, l, a[1]))
            .getResult();
      }));
  return results;
}

SmallVector<Value>
lowering::linalgAttentionGrad(OpBuilder &b, Location loc, Value qBlock,
                              Value kBlock, Value vBlock, Value doutBlock,
                              Value mask, const AttnShape &blk, Value outBlock,
                              Value lseBlock, Value items) {
  BlockMaps m{b.getContext()};
  PairShapes p = pairShapes(b, loc, qBlock);
  Type elem = blk.elem;
  Value zero = floatConst(b, loc, elem, 0.0);
  Value scale = floatConst(b, loc, elem, blk.scale);
  // P on real query rows and keys, 0 elsewhere: a padded query slot then
  // adds nothing to dV or dK.
  Value probs;
  if (lseBlock) {
    // P = exp(logit - lse) (0 for a masked key: its logit is -inf and lse
    // finite): an elementwise consumer of the scores, which IREE fuses into
    // their contraction.
    Value scores = pairDots(b, loc, m, p, elem, qBlock, kBlock);
    AffineMap lseOf = m.map4(
        {m.d(0), m.d(2), m.d(1), getAffineConstantExpr(0, b.getContext())});
    probs = structured(
        b, loc, emptyTensor(b, loc, p.pairs, elem, p.pairDyn),
        {scores, mask, mask, lseBlock},
        {m.all4(), m.key4(), m.query4(), lseOf, m.all4()}, {par, par, par, par},
        [&](OpBuilder &nb, Location l, ValueRange a) {
          Value logit = maskedLogit(nb, l, a[0], a[1], blk);
          Value pr = math::ExpOp::create(
              nb, l, arith::SubFOp::create(nb, l, logit, a[3]));
          return arith::SelectOp::create(nb, l, a[2], pr, zero).getResult();
        });
  } else {
    // P = weights / sums, recomputed.
    BlockSoftmax sm = blockSoftmax(b, loc, m, p, qBlock, kBlock, mask, blk);
    probs = structured(
        b, loc, emptyTensor(b, loc, p.pairs, elem, p.pairDyn),
        {sm.weights, sm.sums, mask}, {m.all4(), m.row4(), m.query4(), m.all4()},
        {par, par, par, par}, [&](OpBuilder &nb, Location l, ValueRange a) {
          Value pr = arith::DivFOp::create(nb, l, a[0], a[1]);
          return arith::SelectOp::create(nb, l, a[2], pr, zero).getResult();
        });
  }
  // With dropout the forward multiplied P by D (1 / (1 - p) where kept, 0
  // where dropped): PD = P ∘ D stands for P in dV, and dS = scale (PD ∘ dP -
  // P rowsum(PD ∘ dP)).
  bool drop = blk.dropout > 0.0;
  Value dropped = drop ? dropPairs(b, loc, m, probs, items, blk) : probs;
  // dV[b, j, h, e] = sum_m PD[b, h, m, j] dO[b, m, h, e].
  Value dv = pairsTimesRows(b, loc, m, dropped, doutBlock, /*transposed=*/true);
  // dP = dO Vᵀ; dS = scale P (dP - sum_j P dP), where sum_j P dP =
  // sum_e dO O when the forward's output is given.
  Value dp = pairDots(b, loc, m, p, elem, doutBlock, vBlock);
  Value rowDot;
  if (outBlock) {
    // Loops (b, h, m, e).
    AffineMap rowOf = m.map4({m.d(0), m.d(2), m.d(1), m.d(3)});
    rowDot = structured(b, loc, zeros(b, loc, p.rows, elem, p.rowDyn),
                        {doutBlock, outBlock}, {rowOf, rowOf, m.row4()},
                        {par, par, par, red}, mulAdd);
  } else {
    rowDot = structured(b, loc, zeros(b, loc, p.rows, elem, p.rowDyn),
                        {dropped, dp}, {m.all4(), m.all4(), m.row4()},
                        {par, par, par, red}, mulAdd);
  }
  Value ds;
  if (drop)
    ds = structured(
        b, loc, emptyTensor(b, loc, p.pairs, elem, p.pairDyn),
        {probs, dropped, dp, rowDot},
        {m.all4(), m.all4(), m.all4(), m.row4(), m.all4()},
        {par, par, par, par}, [&](OpBuilder &nb, Location l, ValueRange a) {
          Value kept = arith::MulFOp::create(nb, l, a[1], a[2]);
          Value centred = arith::SubFOp::create(
              nb, l, kept, arith::MulFOp::create(nb, l, a[0], a[3]));
          return arith::MulFOp::create(nb, l, centred, scale).getResult();
        });
  else
    ds = structured(
        b, loc, emptyTensor(b, loc, p.pairs, elem, p.pairDyn),
        {probs, dp, rowDot}, {m.all4(), m.all4(), m.row4(), m.all4()},
        {par, par, par, par}, [&](OpBuilder &nb, Location l, ValueRange a) {
          Value centred = arith::SubFOp::create(nb, l, a[1], a[2]);
          return arith::MulFOp::create(
                     nb, l, arith::MulFOp::create(nb, l, a[0], centred), scale)
              .getResult();
        });
  // dQ = dS K; dK = dSᵀ Q.
  Value dq = pairsTimesRows(b, loc, m, ds, kBlock, /*transposed=*/false);
  Value dk = pairsTimesRows(b, loc, m, ds, qBlock, /*transposed=*/true);
  return {dq, dk, dv};
}
