//===- SplitDynamicContractions.cpp - static-K chunks of a GEMM -----------===//
//
// A weight gradient `dW = dY^T X` sums over the packed tokens: a contraction
// with static M and N (the layer's widths) and a dynamic K (the token count).
// IREE 3.13 cannot data-tile a contraction whose K is dynamic once an operand
// is computed in the program (see DataTilingHints.cpp), and without data
// tiling such a GEMM runs at about a third of the packed kernel's rate. This
// pass splits K into chunks of a static size: the operands are zero-padded
// to whole chunks and viewed as [chunks, chunk, ...], one batch contraction
// over the chunks (static K, data-tilable) writes a partial product per
// chunk, and one reduction adds the partials into the original accumulator.
// The padding adds at most one chunk of zero rows; the partials add
// chunks * M * N elements of traffic.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Utils/Utils.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Linalg/Utils/Utils.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::ragged {
#define GEN_PASS_DEF_SPLITDYNAMICCONTRACTIONSPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;

namespace {

/// The reduction loop of a float contraction with one M, one N and one
/// dynamic K loop, static M and N and no batch loop; -1 otherwise.
int64_t splittableReduction(linalg::LinalgOp op) {
  if (!op.hasPureTensorSemantics() || op.getNumDpsInputs() != 2 ||
      op.getNumDpsInits() != 1 || !linalg::isaContractionOpInterface(op) ||
      !isa<FloatType>(getElementTypeOrSelf(op.getDpsInits()[0].getType())))
    return -1;
  FailureOr<linalg::ContractionDimensions> dims =
      linalg::inferContractionDims(op);
  if (failed(dims) || !dims->batch.empty() || dims->m.size() != 1 ||
      dims->n.size() != 1 || dims->k.size() != 1)
    return -1;
  SmallVector<int64_t> extents = op.getStaticLoopRanges();
  if (ShapedType::isDynamic(extents[dims->m.front()]) ||
      ShapedType::isDynamic(extents[dims->n.front()]) ||
      !ShapedType::isDynamic(extents[dims->k.front()]))
    return -1;
  return dims->k.front();
}

/// `v` zero-padded at the end of dim `dim` by `high`, then that dim viewed
/// as [chunks, chunk].
Value chunked(OpBuilder &b, Location loc, Value v, int64_t dim, Value high,
              Value chunks, int64_t chunk) {
  auto type = cast<RankedTensorType>(v.getType());
  int64_t rank = type.getRank();
  SmallVector<OpFoldResult> low(rank, b.getIndexAttr(0));
  SmallVector<OpFoldResult> highs(rank, b.getIndexAttr(0));
  highs[dim] = high;
  Value zero =
      arith::ConstantOp::create(b, loc, b.getZeroAttr(type.getElementType()));
  Value padded = tensor::PadOp::create(b, loc, type, v, low, highs, zero);

  SmallVector<int64_t> shape;
  SmallVector<OpFoldResult> sizes;
  SmallVector<ReassociationIndices> groups;
  for (int64_t d = 0; d < rank; ++d) {
    int64_t next = static_cast<int64_t>(shape.size());
    if (d == dim) {
      shape.append({ShapedType::kDynamic, chunk});
      sizes.append({chunks, b.getIndexAttr(chunk)});
      groups.push_back({next, next + 1});
      continue;
    }
    shape.push_back(type.getDimSize(d));
    sizes.push_back(linalg::createFoldedDimOp(b, loc, padded, d));
    groups.push_back({next});
  }
  auto expanded = RankedTensorType::get(shape, type.getElementType());
  return tensor::ExpandShapeOp::create(b, loc, expanded, padded, groups, sizes);
}

struct SplitDynamicContraction
    : public OpInterfaceRewritePattern<linalg::LinalgOp> {
  SplitDynamicContraction(MLIRContext *ctx, int64_t chunk)
      : OpInterfaceRewritePattern(ctx), chunk(chunk) {}

  LogicalResult matchAndRewrite(linalg::LinalgOp op,
                                PatternRewriter &rewriter) const override {
    int64_t k = splittableReduction(op);
    if (k < 0)
      return rewriter.notifyMatchFailure(
          op, "not a float M x N contraction with one dynamic K");
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    unsigned loops = op.getNumLoops();
    AffineExpr chunkDim = getAffineDimExpr(loops, ctx);

    // Each operand's source and the dim of it that K indexes. A transposed
    // operand (a weight gradient's Xᵀ) is read in place: the transpose
    // moves into the indexing map, and IREE packs its source.
    struct Operand {
      Value source;
      SmallVector<AffineExpr> exprs;
      int64_t kDim = -1;
    };
    SmallVector<Operand> operands;
    for (OpOperand *input : op.getDpsInputOperands()) {
      Operand o{input->get(),
                llvm::to_vector(op.getMatchingIndexingMap(input).getResults())};
      if (auto transpose = o.source.getDefiningOp<linalg::TransposeOp>()) {
        SmallVector<AffineExpr> permuted(o.exprs.size());
        for (auto [i, p] : llvm::enumerate(transpose.getPermutation()))
          permuted[p] = o.exprs[i];
        o.exprs = permuted;
        o.source = transpose.getInput();
      }
      for (auto [i, e] : llvm::enumerate(o.exprs))
        if (e == getAffineDimExpr(k, ctx))
          o.kDim = static_cast<int64_t>(i);
      operands.push_back(std::move(o));
    }

    // K, the number of chunks, and the zero rows that complete the last.
    Value extent = linalg::createOrFoldDimOp(
        rewriter, loc, operands.front().source, operands.front().kDim);
    Value size = arith::ConstantIndexOp::create(rewriter, loc, chunk);
    Value chunks = arith::CeilDivUIOp::create(rewriter, loc, extent, size);
    Value high = arith::SubIOp::create(
        rewriter, loc, arith::MulIOp::create(rewriter, loc, chunks, size),
        extent);

    // The batch contraction: loop `loops` runs over the chunks, and K within
    // one chunk.
    SmallVector<Value> inputs;
    SmallVector<AffineMap> maps;
    for (const Operand &o : operands) {
      SmallVector<AffineExpr> results(o.exprs);
      results.insert(results.begin() + o.kDim, chunkDim);
      inputs.push_back(
          chunked(rewriter, loc, o.source, o.kDim, high, chunks, chunk));
      maps.push_back(AffineMap::get(loops + 1, 0, results, ctx));
    }
    OpOperand *init = op.getDpsInitOperand(0);
    AffineMap initMap = op.getMatchingIndexingMap(init);
    SmallVector<AffineExpr> partialResults{chunkDim};
    llvm::append_range(partialResults, initMap.getResults());
    maps.push_back(AffineMap::get(loops + 1, 0, partialResults, ctx));

    auto initType = cast<RankedTensorType>(init->get().getType());
    SmallVector<OpFoldResult> partialSizes{chunks};
    for (int64_t d = 0; d < initType.getRank(); ++d)
      partialSizes.push_back(
          linalg::createFoldedDimOp(rewriter, loc, init->get(), d));
    Value empty = tensor::EmptyOp::create(rewriter, loc, partialSizes,
                                          initType.getElementType());
    Value zero = arith::ConstantOp::create(
        rewriter, loc, rewriter.getZeroAttr(initType.getElementType()));
    Value partialInit =
        linalg::FillOp::create(rewriter, loc, zero, empty).getResult(0);

    SmallVector<utils::IteratorType> iterators = op.getIteratorTypesArray();
    iterators.push_back(utils::IteratorType::parallel);
    auto partial = linalg::GenericOp::create(
        rewriter, loc, TypeRange{partialInit.getType()}, inputs,
        ValueRange{partialInit}, maps, iterators);
    rewriter.cloneRegionBefore(op->getRegion(0), partial.getRegion(),
                               partial.getRegion().begin());

    // The partials, summed over the chunks into the original accumulator.
    int64_t rank = initType.getRank();
    SmallVector<AffineExpr> sumResults{getAffineDimExpr(rank, ctx)};
    for (int64_t d = 0; d < rank; ++d)
      sumResults.push_back(getAffineDimExpr(d, ctx));
    SmallVector<utils::IteratorType> sumIterators(
        rank, utils::IteratorType::parallel);
    sumIterators.push_back(utils::IteratorType::reduction);
    auto sum = linalg::GenericOp::create(
        rewriter, loc, TypeRange{initType}, partial.getResult(0), init->get(),
        {AffineMap::get(rank + 1, 0, sumResults, ctx),
         AffineMap::getMultiDimIdentityMap(rank + 1, ctx).getMajorSubMap(rank)},
        sumIterators, [](OpBuilder &b, Location l, ValueRange args) {
          linalg::YieldOp::create(
              b, l, ValueRange{arith::AddFOp::create(b, l, args[1], args[0])});
        });
    rewriter.replaceOp(op, sum.getResults());
    return success();
  }

  int64_t chunk;
};

struct SplitDynamicContractionsPass
    : ragged::impl::SplitDynamicContractionsPassBase<
          SplitDynamicContractionsPass> {
  using Base::Base;

  void runOnOperation() override {
    if (chunk < 0) {
      getOperation()->emitError("chunk: expected 0 or more, got ")
          << static_cast<int64_t>(chunk);
      return signalPassFailure();
    }
    if (chunk == 0)
      return; // Off.
    RewritePatternSet patterns(&getContext());
    ragged::populateSplitDynamicContractionPatterns(patterns, chunk);
    walkAndApplyPatterns(getOperation(), std::move(patterns));
  }
};

} // namespace

void mlir::ragged::populateSplitDynamicContractionPatterns(
    RewritePatternSet &patterns, int64_t chunk) {
  patterns.add<SplitDynamicContraction>(patterns.getContext(), chunk);
}
