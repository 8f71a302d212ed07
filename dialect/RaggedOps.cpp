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
    return op->emitOpError() << "values element type " << values.getElementType()
                             << " does not match " << type.getElementType();
  if (values.getRank() != expected.getRank())
    return op->emitOpError() << "values must have rank " << expected.getRank()
                             << " ([rows, trailing dense dims...]) for "
                             << type << ", got " << values.getRank();
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
    return op->emitOpError() << "padded element type " << padded.getElementType()
                             << " does not match " << type.getElementType();
  if (padded.getRank() != static_cast<int64_t>(type.getItemRank()) + 1)
    return op->emitOpError() << "padded tensor must have rank "
                             << type.getItemRank() + 1 << ", got "
                             << padded.getRank();
  if (!compatibleExtent(padded.getDimSize(0), type.getBatch()))
    return op->emitOpError() << "padded batch " << padded.getDimSize(0)
                             << " does not match " << type.getBatch();
  for (auto [i, size] : llvm::enumerate(type.getShape())) {
    if (size == RaggedTensorType::kRagged)
      continue;
    if (!compatibleExtent(padded.getDimSize(i + 1), size))
      return op->emitOpError() << "padded dim " << i + 1 << " is "
                               << padded.getDimSize(i + 1)
                               << " but the ragged type has " << size;
  }
  return success();
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

LogicalResult ValuesOp::verify() {
  auto type = cast<RaggedTensorType>(getSource().getType());
  return verifyValuesType(*this, type, getValues().getType());
}

LogicalResult OffsetsOp::verify() {
  auto type = cast<RaggedTensorType>(getSource().getType());
  StringAttr symbol = getSymbolAttr();
  if (!llvm::is_contained(type.getSymbols(), symbol))
    return emitOpError() << "symbol '" << symbol.getValue()
                         << "' is not a ragged dim of " << type;
  int64_t expected = type.getPartitionType(symbol).getDimSize(0);
  if (!compatibleExtent(getOffsets().getType().getDimSize(0), expected))
    return emitOpError() << "offsets of '" << symbol.getValue() << "' have "
                         << expected << " entries, result type has "
                         << getOffsets().getType().getDimSize(0);
  return success();
}

LogicalResult ToPaddedOp::verify() {
  auto type = cast<RaggedTensorType>(getSource().getType());
  if (getPadding().getType() != type.getElementType())
    return emitOpError() << "padding value type " << getPadding().getType()
                         << " does not match element type "
                         << type.getElementType();
  return verifyPaddedType(*this, type,
                          cast<RankedTensorType>(getResult().getType()));
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

LogicalResult MaskOp::verify() {
  auto type = cast<RaggedTensorType>(getSource().getType());
  auto mask = cast<RankedTensorType>(getMask().getType());
  int64_t expected = type.getSymbols().size() + 1;
  if (mask.getRank() != expected)
    return emitOpError() << "mask must have rank " << expected
                         << " (batch and each ragged dim), got "
                         << mask.getRank();
  if (!compatibleExtent(mask.getDimSize(0), type.getBatch()))
    return emitOpError() << "mask batch " << mask.getDimSize(0)
                         << " does not match " << type.getBatch();
  return success();
}

LogicalResult MatchOp::verify() {
  auto source = cast<RaggedTensorType>(getSource().getType());
  auto reference = cast<RaggedTensorType>(getReference().getType());
  auto result = cast<RaggedTensorType>(getResult().getType());
  if (source.getShape() != reference.getShape())
    return emitOpError() << "source " << source << " and reference "
                         << reference
                         << " must have the same dims (ragged dims in the "
                            "same places, equal dense sizes)";
  // Symbols must correspond one to one, so equal partitions imply equal
  // structure.
  llvm::DenseMap<StringAttr, StringAttr> forward, backward;
  for (auto [s, r] : llvm::zip_equal(source.getSymbols(), reference.getSymbols()))
    if (forward.try_emplace(s, r).first->second != r ||
        backward.try_emplace(r, s).first->second != s)
      return emitOpError() << "symbols of " << source << " and " << reference
                           << " do not correspond one to one";
  RaggedTensorType expected = reference.withElementType(source.getElementType());
  if (result != expected)
    return emitOpError() << "result must be " << expected << ", got " << result;
  return success();
}
