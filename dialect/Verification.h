//===- Verification.h - checks shared by the op verifiers -------*- C++ -*-===//
//
// Shape and type checks that several op families share. Internal to the
// dialect library.
//
//===----------------------------------------------------------------------===//

#ifndef RAGGED_DIALECT_VERIFICATION_H
#define RAGGED_DIALECT_VERIFICATION_H

#include "dialect/RaggedDialect.h"

namespace mlir::ragged::detail {

/// Equal extents, or at least one of them dynamic.
inline bool compatibleExtent(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

/// `[B, L(b), dense...]`: one ragged dim, first, depending on the batch.
inline bool isSequence(RaggedTensorType type) {
  return type.getSymbols().size() == 1 && type.isRaggedDim(0) &&
         type.isSingleLevel();
}

inline LogicalResult requireFloat(Operation *op, RaggedTensorType type) {
  if (!isa<FloatType>(type.getElementType()))
    return op->emitOpError()
           << "needs a float element type, got " << type.getElementType();
  return success();
}

inline LogicalResult requireSameType(Operation *op, Type expected, Type actual,
                                     StringRef what) {
  if (expected != actual)
    return op->emitOpError()
           << what << " must be " << expected << ", got " << actual;
  return success();
}

/// The last item dim is a dense dim after the last ragged dim.
inline LogicalResult requireDenseLastDim(Operation *op, RaggedTensorType type) {
  if (type.getTrailingDims().empty())
    return op->emitOpError() << "needs a dense last dim after the ragged dims, "
                                "got "
                             << type;
  return success();
}

} // namespace mlir::ragged::detail

#endif // RAGGED_DIALECT_VERIFICATION_H
