//===- RaggedOps.cpp - ragged op verifiers --------------------------------===//

#include "dialect/RaggedDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace mlir::ragged;

#define GET_OP_CLASSES
#include "dialect/RaggedOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Shared structural checks
//===----------------------------------------------------------------------===//

static bool compatibleExtent(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

/// One int64 partition per distinct symbol; top-level ones hold batch + 1.
static LogicalResult verifyPartitions(Operation *op, RaggedTensorType type,
                                      ValueRange partitions, StringRef what) {
  SmallVector<StringAttr> symbols = type.getDistinctSymbols();
  if (partitions.size() != symbols.size())
    return op->emitOpError() << "expected " << symbols.size() << " " << what
                             << " (one per distinct symbol of " << type
                             << "), got " << partitions.size();
  for (auto [i, symbol, partition] : llvm::enumerate(symbols, partitions)) {
    auto partType = cast<RankedTensorType>(partition.getType());
    int64_t expected = type.getPartitionType(symbol).getDimSize(0);
    // Lengths have one entry fewer than offsets.
    if (what == "lengths" && !ShapedType::isDynamic(expected))
      --expected;
    if (!compatibleExtent(partType.getDimSize(0), expected))
      return op->emitOpError()
             << what << " #" << i << " of symbol '" << symbol.getValue()
             << "' must have " << expected << " entries, got "
             << partType.getDimSize(0);
  }
  return success();
}

/// The values buffer is [rows, trailing dense dims...] of the element type.
static LogicalResult verifyValuesType(Operation *op, RaggedTensorType type,
                                      RankedTensorType values) {
  RankedTensorType expected = type.getValuesType();
  if (values.getElementType() != type.getElementType())
    return op->emitOpError()
           << "values element type " << values.getElementType()
           << " does not match " << type.getElementType();
  if (values.getRank() != expected.getRank())
    return op->emitOpError() << "values must have rank " << expected.getRank()
                             << " ([rows, trailing dense dims...]) for " << type
                             << ", got " << values.getRank();
  for (int64_t i = 1; i < expected.getRank(); ++i)
    if (!compatibleExtent(values.getDimSize(i), expected.getDimSize(i)))
      return op->emitOpError()
             << "values dim " << i << " is " << values.getDimSize(i)
             << " but the ragged type needs " << expected.getDimSize(i);
  return success();
}

/// A dense [batch, item dims...] tensor that pads `type`.
static LogicalResult verifyPaddedType(Operation *op, RaggedTensorType type,
                                      RankedTensorType padded) {
  if (padded.getElementType() != type.getElementType())
    return op->emitOpError()
           << "padded element type " << padded.getElementType()
           << " does not match " << type.getElementType();
  if (padded.getRank() != static_cast<int64_t>(type.getItemRank()) + 1)
    return op->emitOpError()
           << "padded tensor must have rank " << type.getItemRank() + 1
           << ", got " << padded.getRank();
  if (!compatibleExtent(padded.getDimSize(0), type.getBatch()))
    return op->emitOpError() << "padded batch " << padded.getDimSize(0)
                             << " does not match " << type.getBatch();
  for (auto [i, size] : llvm::enumerate(type.getShape())) {
    if (size == RaggedTensorType::kRagged)
      continue;
    if (!compatibleExtent(padded.getDimSize(i + 1), size))
      return op->emitOpError()
             << "padded dim " << i + 1 << " is " << padded.getDimSize(i + 1)
             << " but the ragged type has " << size;
  }
  return success();
}

/// Dense results whose inferred type leaves extents dynamic may be written
/// with those extents static: same element type and rank, and every extent
/// compatible.
static bool compatibleDenseTypes(TypeRange inferred, TypeRange actual) {
  if (inferred.size() != actual.size())
    return false;
  for (auto [a, b] : llvm::zip_equal(inferred, actual)) {
    auto ta = dyn_cast<RankedTensorType>(a);
    auto tb = dyn_cast<RankedTensorType>(b);
    if (!ta || !tb || ta.getElementType() != tb.getElementType() ||
        ta.getRank() != tb.getRank())
      return false;
    for (auto [x, y] : llvm::zip_equal(ta.getShape(), tb.getShape()))
      if (!compatibleExtent(x, y))
        return false;
  }
  return true;
}

//===----------------------------------------------------------------------===//
// Op verifiers
//===----------------------------------------------------------------------===//

LogicalResult PackOp::verify() {
  auto type = cast<RaggedTensorType>(getResult().getType());
  if (failed(verifyValuesType(*this, type, getValues().getType())))
    return failure();
  return verifyPartitions(*this, type, getPartitions(), "partitions");
}

LogicalResult ValuesOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                         Adaptor adaptor,
                                         SmallVectorImpl<Type> &types) {
  types.push_back(
      cast<RaggedTensorType>(adaptor.getSource().getType()).getValuesType());
  return success();
}

bool ValuesOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  return compatibleDenseTypes(inferred, actual);
}

LogicalResult ValuesOp::verify() { return success(); }

LogicalResult OffsetsOp::inferReturnTypes(MLIRContext *,
                                          std::optional<Location> loc,
                                          Adaptor adaptor,
                                          SmallVectorImpl<Type> &types) {
  auto type = cast<RaggedTensorType>(adaptor.getSource().getType());
  StringAttr symbol = adaptor.getSymbolAttr();
  if (!llvm::is_contained(type.getSymbols(), symbol))
    return emitOptionalError(loc, "'ragged.offsets' op symbol '",
                             symbol.getValue(), "' is not a ragged dim of ",
                             type);
  types.push_back(type.getPartitionType(symbol));
  return success();
}

bool OffsetsOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  return compatibleDenseTypes(inferred, actual);
}

LogicalResult OffsetsOp::verify() { return success(); }

LogicalResult ToPaddedOp::inferReturnTypes(MLIRContext *,
                                           std::optional<Location>,
                                           Adaptor adaptor,
                                           SmallVectorImpl<Type> &types) {
  // Ragged dims take the largest extent at run time.
  auto type = cast<RaggedTensorType>(adaptor.getSource().getType());
  SmallVector<int64_t> shape{type.getBatch()};
  for (int64_t size : type.getShape())
    shape.push_back(size == RaggedTensorType::kRagged ? ShapedType::kDynamic
                                                      : size);
  types.push_back(RankedTensorType::get(shape, type.getElementType()));
  return success();
}

bool ToPaddedOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  // Dynamic inferred extents are ragged dims (or a dynamic batch or dense
  // dim): a ragged dim must stay dynamic, checked by the verifier.
  return compatibleDenseTypes(inferred, actual);
}

LogicalResult ToPaddedOp::verify() {
  auto type = cast<RaggedTensorType>(getSource().getType());
  if (getPadding().getType() != type.getElementType())
    return emitOpError() << "padding value type " << getPadding().getType()
                         << " does not match element type "
                         << type.getElementType();
  auto result = cast<RankedTensorType>(getResult().getType());
  if (result.getRank() != type.getItemRank() + 1)
    return success(); // reported against the inferred type
  for (unsigned d = 0; d < type.getItemRank(); ++d)
    if (type.isRaggedDim(d) && !result.isDynamicDim(d + 1))
      return emitOpError() << "padded dim " << d + 1
                           << " is ragged and takes the largest extent at run "
                              "time, so it must be '?', got "
                           << result.getDimSize(d + 1);
  return success();
}

LogicalResult FromPaddedOp::verify() {
  auto type = cast<RaggedTensorType>(getResult().getType());
  if (!type.isSingleLevel())
    return emitOpError() << "needs a single-level result (no nested ragged "
                            "dims); got "
                         << type;
  if (failed(verifyPaddedType(*this, type, getPadded().getType())))
    return failure();
  return verifyPartitions(*this, type, getLengths(), "lengths");
}

LogicalResult MaskOp::inferReturnTypes(MLIRContext *context,
                                       std::optional<Location>, Adaptor adaptor,
                                       SmallVectorImpl<Type> &types) {
  // The batch and one dim per ragged dim (dense dims dropped).
  auto type = cast<RaggedTensorType>(adaptor.getSource().getType());
  SmallVector<int64_t> shape{type.getBatch()};
  shape.append(type.getSymbols().size(), ShapedType::kDynamic);
  types.push_back(RankedTensorType::get(shape, IntegerType::get(context, 1)));
  return success();
}

bool MaskOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  return compatibleDenseTypes(inferred, actual);
}

LogicalResult MaskOp::verify() { return success(); }

LogicalResult MatchOp::verify() {
  auto source = cast<RaggedTensorType>(getSource().getType());
  auto reference = cast<RaggedTensorType>(getReference().getType());
  if (source.getShape() != reference.getShape())
    return emitOpError() << "source " << source << " and reference "
                         << reference
                         << " must have the same dims (ragged dims in the "
                            "same places, equal dense sizes)";
  // Symbols must correspond one to one, so equal partitions imply equal
  // structure.
  llvm::DenseMap<StringAttr, StringAttr> forward, backward;
  for (auto [s, r] :
       llvm::zip_equal(source.getSymbols(), reference.getSymbols()))
    if (forward.try_emplace(s, r).first->second != r ||
        backward.try_emplace(r, s).first->second != s)
      return emitOpError() << "symbols of " << source << " and " << reference
                           << " do not correspond one to one";
  for (auto [sp, rp] :
       llvm::zip_equal(source.getParents(), reference.getParents()))
    if (sp.getValue().empty() != rp.getValue().empty() ||
        (!sp.getValue().empty() && forward.lookup(sp) != rp))
      return emitOpError() << "nesting of " << source << " and " << reference
                           << " differs";
  if (!compatibleExtent(source.getBatch(), reference.getBatch()))
    return emitOpError() << "batch sizes of " << source << " and " << reference
                         << " differ";
  if (source.getEncoding() != reference.getEncoding())
    return emitOpError() << "encodings of " << source << " and " << reference
                         << " differ";
  return success();
}

LogicalResult MatchOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                        Adaptor adaptor,
                                        SmallVectorImpl<Type> &types) {
  auto source = cast<RaggedTensorType>(adaptor.getSource().getType());
  auto reference = cast<RaggedTensorType>(adaptor.getReference().getType());
  types.push_back(reference.withElementType(source.getElementType()));
  return success();
}

//===----------------------------------------------------------------------===//
// Compute op verifiers
//===----------------------------------------------------------------------===//

/// `[B, L(b), dense...]`: one ragged dim, first, depending on the batch.
static bool isSequence(RaggedTensorType type) {
  return type.getSymbols().size() == 1 && type.isRaggedDim(0) &&
         type.isSingleLevel();
}

static LogicalResult requireFloat(Operation *op, RaggedTensorType type) {
  if (!isa<FloatType>(type.getElementType()))
    return op->emitOpError()
           << "needs a float element type, got " << type.getElementType();
  return success();
}

static LogicalResult requireSameType(Operation *op, Type expected, Type actual,
                                     StringRef what) {
  if (expected != actual)
    return op->emitOpError()
           << what << " must be " << expected << ", got " << actual;
  return success();
}

/// The last item dim is a dense dim after the last ragged dim.
static LogicalResult requireDenseLastDim(Operation *op, RaggedTensorType type) {
  if (type.getTrailingDims().empty())
    return op->emitOpError() << "needs a dense last dim after the ragged dims, "
                                "got "
                             << type;
  return success();
}

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

//===----------------------------------------------------------------------===//
// Images
//===----------------------------------------------------------------------===//

LogicalResult FlattenOp::verify() {
  auto source = cast<RaggedTensorType>(getSource().getType());
  auto result = cast<RaggedTensorType>(getResult().getType());
  unsigned ragged = source.getSymbols().size();
  if (!source.isSingleLevel() || ragged < 2 ||
      source.getLastRaggedDim() + 1 != ragged)
    return emitOpError() << "needs two or more leading ragged dims depending "
                            "on the batch, then dense dims, got "
                         << source;
  SmallVector<int64_t> shape{RaggedTensorType::kRagged};
  llvm::append_range(shape, source.getTrailingDims());
  StringAttr symbol = result.getSymbols().front();
  auto expected =
      RaggedTensorType::get(getContext(), source.getBatch(), shape, {symbol},
                            {StringAttr::get(getContext(), "")},
                            source.getElementType(), source.getEncoding());
  if (failed(requireSameType(*this, expected, result, "result type")))
    return failure();
  if (llvm::is_contained(source.getSymbols(), symbol))
    return emitOpError() << "result symbol '" << symbol.getValue()
                         << "' must be fresh: its extents differ from the "
                            "source's";
  return success();
}

/// `[B, H(b), W(b), C]`: two ragged dims depending on the batch, then a
/// static channel dim.
static bool isImage(RaggedTensorType type) {
  return type.getItemRank() == 3 && type.isRaggedDim(0) &&
         type.isRaggedDim(1) && type.isSingleLevel() &&
         !ShapedType::isDynamic(type.getShape()[2]);
}

static std::array<WindowDim, 2>
windowDims(ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
           ArrayRef<int64_t> padding, ArrayRef<int64_t> dilation, bool ceil) {
  std::array<WindowDim, 2> dims;
  for (unsigned i = 0; i < 2; ++i)
    dims[i] = {kernel.size() > i ? kernel[i] : 0,
               strides.size() > i ? strides[i] : 0,
               padding.size() > i ? padding[i] : 0,
               dilation.size() > i ? dilation[i] : 0, ceil};
  return dims;
}

/// The shape rules both image ops share: a `[B, H(b), W(b), C]` source, a
/// window per spatial dim, and a result `[B, Ho(b), Wo(b), channels]` whose
/// symbols are the source's where the window keeps the extent and fresh
/// otherwise.
static LogicalResult verifyWindowOp(Operation *op, RaggedTensorType source,
                                    RaggedTensorType result,
                                    ArrayRef<WindowDim> dims,
                                    int64_t channels) {
  for (RaggedTensorType t : {source, result})
    if (!isImage(t))
      return op->emitOpError()
             << "works on images [B, H(b), W(b), C] (two ragged dims "
                "depending on the batch, then a static channel dim), got "
             << t;
  if (failed(requireFloat(op, source)))
    return failure();
  static const char *names[] = {"H", "W"};
  for (auto [i, dim] : llvm::enumerate(dims)) {
    if (dim.kernel < 1 || dim.stride < 1 || dim.dilation < 1 || dim.padding < 0)
      return op->emitOpError()
             << "window along " << names[i] << ": kernel " << dim.kernel
             << ", stride " << dim.stride << " and dilation " << dim.dilation
             << " must be >= 1 and padding " << dim.padding << " >= 0";
  }
  SmallVector<int64_t> shape{RaggedTensorType::kRagged,
                             RaggedTensorType::kRagged, channels};
  auto expected = RaggedTensorType::get(
      op->getContext(), source.getBatch(), shape, result.getSymbols(),
      result.getParents(), source.getElementType(), source.getEncoding());
  if (failed(requireSameType(op, expected, result, "result type")))
    return failure();
  ArrayRef<StringAttr> in = source.getSymbols(), out = result.getSymbols();
  for (auto [i, dim] : llvm::enumerate(dims)) {
    if (dim.keepsExtent() && out[i] != in[i])
      return op->emitOpError()
             << "the window keeps the extent of " << names[i]
             << ", so the result's dim " << i << " must keep the symbol '"
             << in[i].getValue() << "', got '" << out[i].getValue() << "'";
    if (!dim.keepsExtent() && llvm::is_contained(in, out[i]))
      return op->emitOpError()
             << "the window changes the extent of " << names[i]
             << ", so the result's dim " << i << " needs a fresh symbol, got '"
             << out[i].getValue() << "'";
  }
  // One symbol for both output dims means equal extents: only when the
  // source's are equal and so are the windows.
  bool sameWindow = dims[0].kernel == dims[1].kernel &&
                    dims[0].stride == dims[1].stride &&
                    dims[0].padding == dims[1].padding &&
                    dims[0].dilation == dims[1].dilation;
  if (out[0] == out[1] && (in[0] != in[1] || !sameWindow))
    return op->emitOpError()
           << "the result's dims have one symbol '" << out[0].getValue()
           << "' but their extents may differ";
  return success();
}

std::array<WindowDim, 2> Conv2dOp::getWindowDims() {
  auto weight = getWeight().getType();
  int64_t kernel[2] = {weight.getDimSize(0), weight.getDimSize(1)};
  return windowDims(kernel, getStrides(), getPadding(), getDilation(),
                    /*ceil=*/false);
}

LogicalResult Conv2dOp::verify() {
  auto source = cast<RaggedTensorType>(getSource().getType());
  auto result = cast<RaggedTensorType>(getResult().getType());
  auto weight = getWeight().getType();
  for (auto [name, attr] : {std::pair{"strides", getStrides()},
                            {"padding", getPadding()},
                            {"dilation", getDilation()}})
    if (attr.size() != 2)
      return emitOpError() << name << " needs 2 entries (H, W), got "
                           << attr.size();
  if (!weight.hasStaticShape())
    return emitOpError() << "weight [KH, KW, Cin / groups, Cout] must have a "
                            "static shape, got "
                         << weight;
  if (weight.getElementType() != source.getElementType())
    return emitOpError() << "weight element type " << weight.getElementType()
                         << " does not match " << source.getElementType();
  int64_t groups = getGroups();
  int64_t cout = weight.getDimSize(3);
  if (groups < 1 || cout % groups != 0)
    return emitOpError() << "groups " << groups
                         << " must be >= 1 and divide the " << cout
                         << " output channels";
  if (isImage(source) && weight.getDimSize(2) * groups != source.getShape()[2])
    return emitOpError() << "weight has " << weight.getDimSize(2)
                         << " input channels per group, times " << groups
                         << " groups; the source has " << source.getShape()[2];
  if (getBias()) {
    auto bias = getBias().getType();
    if (bias.getElementType() != source.getElementType() ||
        bias.getDimSize(0) != cout)
      return emitOpError() << "bias must be "
                           << RankedTensorType::get({cout},
                                                    source.getElementType())
                           << ", got " << bias;
  }
  return verifyWindowOp(*this, source, result, getWindowDims(), cout);
}

std::array<WindowDim, 2> Pool2dOp::getWindowDims() {
  return windowDims(getKernel(), getStrides(), getPadding(), getDilation(),
                    getCeilMode());
}

LogicalResult Pool2dOp::verify() {
  auto source = cast<RaggedTensorType>(getSource().getType());
  auto result = cast<RaggedTensorType>(getResult().getType());
  for (auto [name, attr] : {std::pair{"kernel", getKernel()},
                            {"strides", getStrides()},
                            {"padding", getPadding()},
                            {"dilation", getDilation()}})
    if (attr.size() != 2)
      return emitOpError() << name << " needs 2 entries (H, W), got "
                           << attr.size();
  if (getCountIncludePad() && getKind() != ReduceKind::mean)
    return emitOpError() << "count_include_pad applies to <mean> only";
  if (getKind() == ReduceKind::mean &&
      llvm::any_of(getDilation(), [](int64_t d) { return d != 1; }))
    return emitOpError() << "<mean> pooling has no dilation";
  for (WindowDim dim : getWindowDims())
    if (2 * dim.padding > dim.kernel)
      return emitOpError() << "padding " << dim.padding
                           << " must be at most half the kernel " << dim.kernel;
  return verifyWindowOp(*this, source, result, getWindowDims(),
                        source.getItemRank() == 3 ? source.getShape()[2] : 0);
}
