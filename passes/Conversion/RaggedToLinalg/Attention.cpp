//===- Attention.cpp - scores, apply and fused attention ------------------===//
//
// Attention over a ragged dim: the score and apply ops over each item's
// L(b)^2 pairs, and ragged.attention either decomposed into them or lowered
// by length buckets (upstream linalg attention on blocks gathered from the
// packed rows; IREE's fused kernel is ragged-attention-to-iree's), so that
// work follows the real lengths and the number of dispatches does not grow
// with the batch.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/RaggedToLinalg/PopulatePatterns.h"

#include "passes/Conversion/RaggedToLinalg/BucketedAttention.h"
#include "passes/Conversion/RaggedToLinalg/LoweringUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <limits>

using namespace mlir;
using namespace mlir::ragged;
using namespace mlir::ragged::lowering;

namespace {

/// Offsets of the L(b)^2 query/key pairs of each item.
Value pairOffsets(OpBuilder &b, Location loc, Value offsets) {
  Value n = numSegments(b, loc, offsets);
  auto [lo, hi] = segmentBounds(b, loc, offsets);
  Value init = emptyTensor(b, loc, {ShapedType::kDynamic}, b.getI64Type(), {n});
  AffineMap id = b.getMultiDimIdentityMap(1);
  Value squares =
      parallelGeneric(b, loc, init, {lo, hi}, {id, id},
                      [](OpBuilder &nb, Location l, ValueRange a) {
                        Value len = arith::SubIOp::create(nb, l, a[1], a[0]);
                        return arith::MulIOp::create(nb, l, len, len);
                      });
  return exclusivePrefixSum(b, loc, squares);
}

/// What the buckets of `op` (ragged.attention or ragged.attention_grad)
/// share, its dropout seed read once.
template <typename OpTy, typename Adaptor>
AttnShape shapeOf(OpBuilder &b, Location loc, OpTy op, Adaptor adaptor,
                  Type elem) {
  AttnShape shape{op.getCausal(), op.getScale().convertToDouble(), elem};
  ValueRange seed = adaptor.getSeed();
  return withDropout(b, loc, shape, op.getDropout().convertToDouble(),
                     seed.empty() ? Value() : seed.front());
}

struct ScoresLowering : OpConversionPattern<ScoresOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(ScoresOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Packed q = unpack(op.getQuery(), adaptor.getQuery());
    Value k = adaptor.getKey().front();
    Value offsets = q.partitions.front();
    Value pairs = pairOffsets(rewriter, loc, offsets);
    Value numPairs =
        loadIndex(rewriter, loc, pairs, numSegments(rewriter, loc, pairs));
    auto resultType = cast<RaggedTensorType>(op.getType());
    Type elem = resultType.getElementType();
    Value heads = dimOf(rewriter, loc, q.values, 1);
    Value headDim = dimOf(rewriter, loc, q.values, 2);
    RankedTensorType outType = resultType.getValuesType();
    SmallVector<Value> dyn{numPairs};
    if (outType.isDynamicDim(1))
      dyn.push_back(heads);
    Value init = emptyTensor(rewriter, loc, outType.getShape(), elem, dyn);
    double scale = op.getScale().convertToDouble();
    bool causal = op.getCausal();
    Value out = parallelGeneric(
        rewriter, loc, init, {}, {}, [&](OpBuilder &b, Location l, ValueRange) {
          Value p = linalg::IndexOp::create(b, l, 0);
          Value h = linalg::IndexOp::create(b, l, 1);
          Value item = findSegment(b, l, pairs, p);
          Value local =
              arith::SubIOp::create(b, l, p, loadIndex(b, l, pairs, item));
          Value start = loadIndex(b, l, offsets, item);
          Value next = arith::AddIOp::create(b, l, item, constIndex(b, l, 1));
          Value len = arith::SubIOp::create(
              b, l, loadIndex(b, l, offsets, next), start);
          Value i = arith::DivUIOp::create(b, l, local, len);
          Value j = arith::RemUIOp::create(b, l, local, len);
          Value qi = arith::AddIOp::create(b, l, start, i);
          Value kj = arith::AddIOp::create(b, l, start, j);
          Value dot = forLoop(
              b, l, constIndex(b, l, 0), headDim, {floatConst(b, l, elem, 0.0)},
              [&](OpBuilder &lb, Location ll, Value c, ValueRange a) {
                Value qv = tensor::ExtractOp::create(lb, ll, q.values,
                                                     ValueRange{qi, h, c});
                Value kv =
                    tensor::ExtractOp::create(lb, ll, k, ValueRange{kj, h, c});
                return SmallVector<Value>{arith::AddFOp::create(
                    lb, ll, a[0], arith::MulFOp::create(lb, ll, qv, kv))};
              })[0];
          Value s =
              arith::MulFOp::create(b, l, dot, floatConst(b, l, elem, scale));
          if (!causal)
            return s;
          Value future =
              arith::CmpIOp::create(b, l, arith::CmpIPredicate::ugt, j, i);
          Value ninf =
              floatConst(b, l, elem, -std::numeric_limits<double>::infinity());
          return Value(arith::SelectOp::create(b, l, future, ninf, s));
        });
    rewriter.replaceOpWithMultiple(
        op, {Packed{resultType, out, {offsets}}.flatten(rewriter, loc)});
    return success();
  }
};

struct ApplyLowering : OpConversionPattern<ApplyOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(ApplyOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Value w = adaptor.getWeights().front();
    Packed v = unpack(op.getValues(), adaptor.getValues());
    Value offsets = v.partitions.front();
    Value pairs = pairOffsets(rewriter, loc, offsets);
    Type elem = v.type.getElementType();
    Value out = parallelGeneric(
        rewriter, loc, emptyLike(rewriter, loc, v.values), {}, {},
        [&](OpBuilder &b, Location l, ValueRange) {
          Value r = linalg::IndexOp::create(b, l, 0);
          Value h = linalg::IndexOp::create(b, l, 1);
          Value e = linalg::IndexOp::create(b, l, 2);
          Value item = findSegment(b, l, offsets, r);
          Value start = loadIndex(b, l, offsets, item);
          Value next = arith::AddIOp::create(b, l, item, constIndex(b, l, 1));
          Value end = loadIndex(b, l, offsets, next);
          Value len = arith::SubIOp::create(b, l, end, start);
          Value i = arith::SubIOp::create(b, l, r, start);
          Value base =
              arith::AddIOp::create(b, l, loadIndex(b, l, pairs, item),
                                    arith::MulIOp::create(b, l, i, len));
          return forLoop(
              b, l, constIndex(b, l, 0), len, {floatConst(b, l, elem, 0.0)},
              [&](OpBuilder &lb, Location ll, Value j, ValueRange a) {
                Value wij = tensor::ExtractOp::create(
                    lb, ll, w,
                    ValueRange{arith::AddIOp::create(lb, ll, base, j), h});
                Value vj = tensor::ExtractOp::create(
                    lb, ll, v.values,
                    ValueRange{arith::AddIOp::create(lb, ll, start, j), h, e});
                return SmallVector<Value>{arith::AddFOp::create(
                    lb, ll, a[0], arith::MulFOp::create(lb, ll, wij, vj))};
              })[0];
        });
    rewriter.replaceOpWithMultiple(
        op, {Packed{v.type, out, v.partitions}.flatten(rewriter, loc)});
    return success();
  }
};

/// attention = apply(softmax(scores(q, k)), v): a ragged-level rewrite; the
/// three ops it creates are lowered by their own patterns. An attention
/// that returns its lse runs by buckets instead.
struct DecomposeAttention : OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    if (op.getLse() || op.getSeed())
      return rewriter.notifyMatchFailure(
          op, "an lse result or dropout is made by the bucketed lowering");
    auto type = cast<RaggedTensorType>(op.getResult().getType());
    StringAttr l = type.getSymbols()[0];
    StringAttr none = rewriter.getStringAttr("");
    auto pairs = RaggedTensorType::get(
        op.getContext(), type.getBatch(),
        {RaggedTensorType::kRagged, RaggedTensorType::kRagged,
         type.getShape()[1]},
        {l, l}, {none, none}, type.getElementType(), type.getEncoding());
    Value s =
        ScoresOp::create(rewriter, op.getLoc(), pairs, op.getQuery(),
                         op.getKey(), op.getScaleAttr(), op.getCausalAttr());
    Value p = SoftmaxOp::create(rewriter, op.getLoc(), s);
    Value out = ApplyOp::create(rewriter, op.getLoc(), type, p, op.getValue());
    rewriter.replaceOp(op, out);
    return success();
  }
};

/// Attention by length buckets (BucketedAttention.h) with upstream linalg
/// attention (two contractions over the blocks in place and a masked
/// softmax), which any backend takes, on `buckets` dynamic sizes
/// ceil(maxL / sqrt(2)^(K-1-k)): within a bucket (but the first) lengths are
/// within sqrt(2) of the padded size. With `onlyLse`, it lowers only the
/// attentions that return their lse or drop (the others are decomposed).
struct BucketedAttentionLowering : OpConversionPattern<AttentionOp> {
  BucketedAttentionLowering(const TypeConverter &converter, MLIRContext *ctx,
                            int64_t buckets, bool onlyLse)
      : OpConversionPattern(converter, ctx, /*benefit=*/2), buckets(buckets),
        onlyLse(onlyLse) {}

  LogicalResult
  matchAndRewrite(AttentionOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    bool lse = bool(op.getLse());
    if (onlyLse && !lse && !op.getSeed())
      return rewriter.notifyMatchFailure(
          op, "decomposed: no lse result, no dropout");
    Location loc = op.getLoc();
    Packed q = unpack(op.getQuery(), adaptor.getQuery());
    BucketKernel kernel;
    kernel.buckets = buckets;
    AttnShape shape =
        shapeOf(rewriter, loc, op, adaptor, q.type.getElementType());
    SmallVector<Value> outs = bucketedRows(
        rewriter, loc,
        {q.values, adaptor.getKey().front(), adaptor.getValue().front()},
        q.partitions.front(), kernel, lse ? 2 : 1,
        [&](OpBuilder &b, Location l, ArrayRef<Value> blocks, Value mask,
            Value items) {
          return linalgAttention(b, l, blocks[0], blocks[1], blocks[2], mask,
                                 shape, lse, items);
        });
    SmallVector<SmallVector<Value>> results{
        Packed{q.type, outs[0], q.partitions}.flatten(rewriter, loc)};
    if (lse)
      results.push_back(Packed{cast<RaggedTensorType>(op.getLse().getType()),
                               outs[1], q.partitions}
                            .flatten(rewriter, loc));
    rewriter.replaceOpWithMultiple(op, results);
    return success();
  }

  int64_t buckets;
  bool onlyLse;
};

/// The gradients of ragged.attention by the same length buckets: per
/// bucket, upstream linalg recomputes the probabilities (from the saved
/// log-sum-exp where the op has it) and forms dQ, dK and dV on the blocks
/// (linalgAttentionGrad).
struct AttentionGradLowering : OpConversionPattern<AttentionGradOp> {
  AttentionGradLowering(const TypeConverter &converter, MLIRContext *ctx,
                        int64_t buckets)
      : OpConversionPattern(converter, ctx), buckets(buckets) {}

  LogicalResult
  matchAndRewrite(AttentionGradOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Packed q = unpack(op.getQuery(), adaptor.getQuery());
    BucketKernel kernel;
    kernel.buckets = buckets;
    AttnShape shape =
        shapeOf(rewriter, loc, op, adaptor, q.type.getElementType());
    SmallVector<Value> operands{q.values, adaptor.getKey().front(),
                                adaptor.getValue().front(),
                                adaptor.getGrad().front()};
    // What the forward kept, as blocks after the four above.
    int out = -1, lse = -1;
    if (op.getOutput()) {
      out = operands.size();
      operands.push_back(adaptor.getOutput().front());
    }
    if (op.getLse()) {
      lse = operands.size();
      operands.push_back(adaptor.getLse().front());
    }
    SmallVector<Value> grads =
        bucketedRows(rewriter, loc, operands, q.partitions.front(), kernel, 3,
                     [&](OpBuilder &b, Location l, ArrayRef<Value> blocks,
                         Value mask, Value items) {
                       return linalgAttentionGrad(
                           b, l, blocks[0], blocks[1], blocks[2], blocks[3],
                           mask, shape, out < 0 ? Value() : blocks[out],
                           lse < 0 ? Value() : blocks[lse], items);
                     });
    SmallVector<SmallVector<Value>> results;
    for (Value grad : grads)
      results.push_back(
          Packed{q.type, grad, q.partitions}.flatten(rewriter, loc));
    rewriter.replaceOpWithMultiple(op, results);
    return success();
  }

  int64_t buckets;
};

} // namespace

void mlir::ragged::compute::populateAttentionPatterns(
    const TypeConverter &converter, RewritePatternSet &patterns,
    const RaggedLoweringOptions &options) {
  patterns.add<ScoresLowering, ApplyLowering>(converter, patterns.getContext());
  // The gradient always runs by buckets: with attention-buckets=0 (the
  // forward decomposed into scores, softmax and apply) it takes the default
  // ladder.
  patterns.add<AttentionGradLowering>(converter, patterns.getContext(),
                                      options.attentionBuckets > 0
                                          ? options.attentionBuckets
                                          : kDefaultAttentionBuckets);
  // An attention that returns its lse runs by buckets as well.
  bool decompose = options.attentionBuckets == 0;
  patterns.add<BucketedAttentionLowering>(converter, patterns.getContext(),
                                          decompose ? kDefaultAttentionBuckets
                                                    : options.attentionBuckets,
                                          /*onlyLse=*/decompose);
  if (decompose)
    patterns.add<DecomposeAttention>(patterns.getContext());
}
