//===- RaggedOps.cpp - ragged op definitions, structure ops -------------===//
//
// The generated op classes, and the verifiers and type inference of the
// structure ops (pack, values, offsets, padding, masks, match). The compute
// ops are in ComputeOps.cpp, the image ops in ImageOps.cpp.
//
//===----------------------------------------------------------------------===//

#include "dialect/RaggedDialect.h"
#include "dialect/Verification.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace mlir::ragged;
using namespace mlir::ragged::detail;

#define GET_OP_CLASSES
#include "dialect/RaggedOps.cpp.inc"

//===----------------------------------------------------------------------===//
// Shared structural checks
//===----------------------------------------------------------------------===//

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
