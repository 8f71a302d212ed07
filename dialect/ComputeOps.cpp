//===- ComputeOps.cpp - verifiers of the ragged compute ops ---------------===//
//
// Elementwise, matmul, reductions, normalisation, attention, gather and
// resequencing ops: verifiers and result type inference.
//
//===----------------------------------------------------------------------===//

#include "dialect/RaggedDialect.h"
#include "dialect/Verification.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace mlir::ragged;
using namespace mlir::ragged::detail;

LogicalResult UnaryOp::verify() {
  auto type = cast<RaggedTensorType>(getSource().getType());
  // AllTypesMatch guarantees result == source.
  return requireFloat(*this, type);
}

LogicalResult BinaryOp::verify() {
  auto type = cast<RaggedTensorType>(getLhs().getType());
  if (failed(requireFloat(*this, type)))
    return failure();
  Type rhs = getRhs().getType();
  if (isa<RaggedTensorType>(rhs))
    return requireSameType(*this, type, rhs,
                           "a ragged rhs (same symbols, so same partitions)");
  auto dense = dyn_cast<RankedTensorType>(rhs);
  if (!dense)
    return emitOpError() << "rhs must be a ragged or ranked tensor, got "
                         << rhs;
  if (dense.getElementType() != type.getElementType())
    return emitOpError() << "rhs element type " << dense.getElementType()
                         << " does not match " << type.getElementType();
  ArrayRef<int64_t> trailing = type.getTrailingDims();
  if (dense.getRank() > static_cast<int64_t>(trailing.size()))
    return emitOpError() << "a dense rhs broadcasts against the trailing dense "
                            "dims ("
                         << trailing.size() << "), so its rank must be at most "
                         << trailing.size() << ", got " << dense.getRank();
  ArrayRef<int64_t> suffix = trailing.take_back(dense.getRank());
  for (auto [i, pair] :
       llvm::enumerate(llvm::zip_equal(dense.getShape(), suffix)))
    if (!compatibleExtent(std::get<0>(pair), std::get<1>(pair)))
      return emitOpError() << "rhs dim " << i << " is " << std::get<0>(pair)
                           << " but broadcasts against " << std::get<1>(pair);
  return success();
}

LogicalResult MatmulOp::verify() {
  auto type = cast<RaggedTensorType>(getSource().getType());
  if (failed(requireFloat(*this, type)) ||
      failed(requireDenseLastDim(*this, type)))
    return failure();
  auto weight = getWeight().getType();
  if (weight.getElementType() != type.getElementType())
    return emitOpError() << "weight element type " << weight.getElementType()
                         << " does not match " << type.getElementType();
  if (!compatibleExtent(weight.getDimSize(0), type.getShape().back()))
    return emitOpError() << "weight has " << weight.getDimSize(0)
                         << " rows but the source's last dim is "
                         << type.getShape().back();
  return success();
}

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *context,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  // The source's last dim becomes the weight's columns.
  auto type = cast<RaggedTensorType>(adaptor.getSource().getType());
  auto weight = dyn_cast<RankedTensorType>(adaptor.getWeight().getType());
  if (type.getTrailingDims().empty())
    return emitOptionalError(loc,
                             "'ragged.matmul' op needs a dense last dim after "
                             "the ragged dims, got ",
                             type);
  if (!weight || weight.getRank() != 2)
    return emitOptionalError(loc,
                             "'ragged.matmul' op weight must be a 2-D "
                             "tensor, got ",
                             adaptor.getWeight().getType());
  SmallVector<int64_t> shape(type.getShape());
  shape.back() = weight.getDimSize(1);
  types.push_back(RaggedTensorType::get(
      context, type.getBatch(), shape, type.getSymbols(), type.getParents(),
      type.getElementType(), type.getEncoding()));
  return success();
}

Type ReduceOp::inferResultType(RaggedTensorType type) {
  // Drop the last ragged dim; a tensor without ragged dims left is dense.
  unsigned last = type.getLastRaggedDim();
  SmallVector<int64_t> shape(type.getShape());
  shape.erase(shape.begin() + last);
  if (type.getSymbols().size() == 1) {
    shape.insert(shape.begin(), type.getBatch());
    return RankedTensorType::get(shape, type.getElementType());
  }
  return RaggedTensorType::get(
      type.getContext(), type.getBatch(), shape, type.getSymbols().drop_back(),
      type.getParents().drop_back(), type.getElementType(), type.getEncoding());
}

LogicalResult ReduceOp::verify() {
  auto type = cast<RaggedTensorType>(getSource().getType());
  if (failed(requireFloat(*this, type)))
    return failure();
  unsigned numRagged = type.getSymbols().size();
  bool chain = type.getLastRaggedDim() + 1 == numRagged;
  for (unsigned i = 0; chain && i < numRagged; ++i)
    chain = type.getParents()[i].getValue() ==
            (i ? type.getSymbols()[i - 1].getValue() : StringRef());
  if (!(isSequence(type) || chain))
    return emitOpError() << "reduces over the innermost ragged dim of "
                            "[B, L(b), dense...] or of a nested chain "
                            "[B, S(b), T(b, s), dense...]; got "
                         << type;
  if (getEmpty() && getEmpty()->getType() != type.getElementType())
    return emitOpError() << "empty value type " << getEmpty()->getType()
                         << " does not match " << type.getElementType();
  if (!getEmpty() &&
      (getKind() == ReduceKind::max || getKind() == ReduceKind::min))
    return emitOpError() << stringifyReduceKind(getKind())
                         << " needs an explicit `empty` value for empty "
                            "segments (e.g. -inf)";
  return success();
}

LogicalResult ReduceOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  types.push_back(
      inferResultType(cast<RaggedTensorType>(adaptor.getSource().getType())));
  return success();
}

LogicalResult BroadcastOp::verify() {
  auto like = cast<RaggedTensorType>(getLike().getType());
  if (!isSequence(like))
    return emitOpError() << "broadcasts over the ragged dim of [B, L(b), "
                            "dense...]; got "
                         << like;
  return requireSameType(*this, ReduceOp::inferResultType(like),
                         getSource().getType(), "source type");
}

LogicalResult SoftmaxOp::verify() {
  return requireFloat(*this, cast<RaggedTensorType>(getSource().getType()));
}

LogicalResult LayerNormOp::verify() {
  auto type = cast<RaggedTensorType>(getSource().getType());
  if (failed(requireFloat(*this, type)) ||
      failed(requireDenseLastDim(*this, type)))
    return failure();
  for (auto [name, param] : {std::pair<StringRef, Value>{"gamma", getGamma()},
                             {"beta", getBeta()}}) {
    auto t = cast<RankedTensorType>(param.getType());
    if (t.getElementType() != type.getElementType())
      return emitOpError() << name << " element type " << t.getElementType()
                           << " does not match " << type.getElementType();
    if (!compatibleExtent(t.getDimSize(0), type.getShape().back()))
      return emitOpError() << name << " has " << t.getDimSize(0)
                           << " entries but the normalised dim is "
                           << type.getShape().back();
  }
  return success();
}

/// `[B, L(b), H, d]`: the per-head layout attention works on.
static LogicalResult requireHeads(Operation *op, RaggedTensorType type,
                                  StringRef what) {
  if (!isSequence(type) || type.getItemRank() != 3)
    return op->emitOpError() << what << " must be [B, L(b), heads, head_dim], "
                             << "got " << type;
  return requireFloat(op, type);
}

/// `[B, L(b), L(b), H]` for the symbol and heads of `heads`.
static RaggedTensorType pairType(RaggedTensorType heads) {
  StringAttr l = heads.getSymbols()[0];
  StringAttr none = StringAttr::get(heads.getContext(), "");
  return RaggedTensorType::get(heads.getContext(), heads.getBatch(),
                               {RaggedTensorType::kRagged,
                                RaggedTensorType::kRagged, heads.getShape()[1]},
                               {l, l}, {none, none}, heads.getElementType(),
                               heads.getEncoding());
}

/// The inferred type of an op over `[B, L(b), H, d]` operands: `result(heads)`
/// once `heads` has that layout.
static LogicalResult inferOverHeads(std::optional<Location> loc, StringRef op,
                                    StringRef what, Type heads,
                                    function_ref<Type(RaggedTensorType)> result,
                                    SmallVectorImpl<Type> &types) {
  auto type = cast<RaggedTensorType>(heads);
  if (!isSequence(type) || type.getItemRank() != 3)
    return emitOptionalError(loc, "'ragged.", op, "' op ", what,
                             " must be [B, L(b), heads, head_dim], got ", type);
  types.push_back(result(type));
  return success();
}

LogicalResult ScoresOp::inferReturnTypes(MLIRContext *,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  return inferOverHeads(loc, "scores", "query", adaptor.getQuery().getType(),
                        pairType, types);
}

LogicalResult ScoresOp::verify() {
  auto q = cast<RaggedTensorType>(getQuery().getType());
  if (failed(requireHeads(*this, q, "query")))
    return failure();
  return requireSameType(*this, q, getKey().getType(), "key type");
}

LogicalResult ApplyOp::inferReturnTypes(MLIRContext *,
                                        std::optional<Location> loc,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  return inferOverHeads(
      loc, "apply", "values", adaptor.getValues().getType(),
      [](RaggedTensorType v) -> Type { return v; }, types);
}

LogicalResult ApplyOp::verify() {
  auto v = cast<RaggedTensorType>(getValues().getType());
  if (failed(requireHeads(*this, v, "values")))
    return failure();
  return requireSameType(*this, pairType(v), getWeights().getType(),
                         "weights type");
}

/// `[B, L(b), H, 1]`: one value per query row and head of `heads`.
static RaggedTensorType rowStatType(RaggedTensorType heads) {
  return RaggedTensorType::get(
      heads.getContext(), heads.getBatch(),
      {RaggedTensorType::kRagged, heads.getShape()[1], 1}, heads.getSymbols(),
      heads.getParents(), heads.getElementType(), heads.getEncoding());
}

/// A dropout rate in [0, 1), with a seed exactly when it is positive.
template <typename OpTy> static LogicalResult verifyDropout(OpTy op) {
  double p = op.getDropout().convertToDouble();
  if (!(p >= 0.0 && p < 1.0))
    return op.emitOpError() << "dropout must be in [0, 1), got " << p;
  if (p > 0.0 && !op.getSeed())
    return op.emitOpError()
           << "dropout " << p << " needs a seed: dropout(%seed : tensor<i64>)";
  if (p == 0.0 && op.getSeed())
    return op.emitOpError()
           << "has a seed but no dropout rate (dropout = p with 0 < p < 1)";
  return success();
}

LogicalResult AttentionOp::verify() {
  // AllTypesMatch guarantees key, value and result have the query's type.
  auto q = cast<RaggedTensorType>(getQuery().getType());
  if (failed(requireHeads(*this, q, "query")) || failed(verifyDropout(*this)))
    return failure();
  if (getLse())
    return requireSameType(*this, rowStatType(q), getLse().getType(),
                           "lse type");
  return success();
}

LogicalResult AttentionGradOp::verify() {
  // AllTypesMatch gives q, k, v, the gradient and the results one type.
  auto q = cast<RaggedTensorType>(getQuery().getType());
  if (failed(requireHeads(*this, q, "query")) || failed(verifyDropout(*this)))
    return failure();
  if (getOutput() &&
      failed(requireSameType(*this, q, getOutput().getType(), "output type")))
    return failure();
  if (getLse() && failed(requireSameType(*this, rowStatType(q),
                                         getLse().getType(), "lse type")))
    return failure();
  return success();
}

LogicalResult GatherOp::verify() {
  auto ids = cast<RaggedTensorType>(getIds().getType());
  auto table = cast<RankedTensorType>(getTable().getType());
  if (!ids.getElementType().isSignlessInteger(64))
    return emitOpError() << "ids must be i64, got " << ids.getElementType();
  if (!table.getElementType().isIntOrIndexOrFloat())
    return emitOpError() << "table element type must be an integer, index or "
                            "float type, got "
                         << table.getElementType();
  return success();
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *context,
                                         std::optional<Location> loc,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  // One table row per id: `[B, L(b)] -> [B, L(b), D]`.
  auto ids = cast<RaggedTensorType>(adaptor.getIds().getType());
  auto table = dyn_cast<RankedTensorType>(adaptor.getTable().getType());
  if (!ids.getTrailingDims().empty())
    return emitOptionalError(loc,
                             "'ragged.gather' op ids must end with a ragged "
                             "dim (one id per position), got ",
                             ids);
  if (!table || table.getRank() != 2)
    return emitOptionalError(loc,
                             "'ragged.gather' op table must be a 2-D "
                             "tensor, got ",
                             adaptor.getTable().getType());
  SmallVector<int64_t> shape(ids.getShape());
  shape.push_back(table.getDimSize(1));
  types.push_back(RaggedTensorType::get(
      context, ids.getBatch(), shape, ids.getSymbols(), ids.getParents(),
      table.getElementType(), ids.getEncoding()));
  return success();
}

/// Same batch, trailing dims and element type; a fresh symbol for `result`.
static LogicalResult verifyResequence(Operation *op, RaggedTensorType a,
                                      RaggedTensorType result,
                                      ArrayRef<RaggedTensorType> others) {
  SmallVector<RaggedTensorType> operands{a};
  llvm::append_range(operands, others);
  for (RaggedTensorType t : llvm::concat<const RaggedTensorType>(
           ArrayRef<RaggedTensorType>(operands), ArrayRef(result)))
    if (!isSequence(t))
      return op->emitOpError()
             << "works on [B, L(b), dense...] tensors, got " << t;
  if (result.getTrailingDims() != a.getTrailingDims() ||
      result.getElementType() != a.getElementType() ||
      !compatibleExtent(result.getBatch(), a.getBatch()))
    return op->emitOpError() << result << " and " << a
                             << " must agree in batch, dense dims and "
                                "element type";
  for (RaggedTensorType t : operands)
    if (t.getSymbols()[0] == result.getSymbols()[0])
      return op->emitOpError()
             << "result symbol '" << result.getSymbols()[0].getValue()
             << "' must be fresh: its extents differ from the operands'";
  return success();
}

LogicalResult ConcatOp::verify() {
  auto lhs = cast<RaggedTensorType>(getLhs().getType());
  auto rhs = cast<RaggedTensorType>(getRhs().getType());
  auto result = cast<RaggedTensorType>(getResult().getType());
  if (!compatibleExtent(lhs.getBatch(), rhs.getBatch()))
    return emitOpError() << "batch sizes of " << lhs << " and " << rhs
                         << " differ";
  if (failed(verifyResequence(*this, lhs, result, {rhs})))
    return failure();
  return verifyResequence(*this, rhs, result, {lhs});
}

LogicalResult SplitOp::verify() {
  auto source = cast<RaggedTensorType>(getSource().getType());
  auto head = cast<RaggedTensorType>(getHead().getType());
  auto tail = cast<RaggedTensorType>(getTail().getType());
  if (head.getSymbols()[0] == tail.getSymbols()[0])
    return emitOpError() << "head and tail need different symbols";
  if (!compatibleExtent(getLengths().getType().getDimSize(0),
                        source.getBatch()))
    return emitOpError() << "lengths must have one entry per item ("
                         << source.getBatch() << "), got "
                         << getLengths().getType().getDimSize(0);
  if (failed(verifyResequence(*this, source, head, {})))
    return failure();
  return verifyResequence(*this, source, tail, {});
}
