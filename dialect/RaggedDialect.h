//===- RaggedDialect.h - ragged dialect, types and ops ----------*- C++ -*-===//

#ifndef RAGGED_DIALECT_RAGGEDDIALECT_H
#define RAGGED_DIALECT_RAGGEDDIALECT_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <array>

#include "dialect/RaggedDialect.h.inc"
#include "dialect/RaggedEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialect/RaggedAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialect/RaggedTypes.h.inc"

namespace mlir::ragged {
/// The window of an image op along one spatial dim (ragged.conv2d,
/// ragged.pool2d).
struct WindowDim {
  int64_t kernel, stride, padding, dilation;
  bool ceil = false;
  /// Whether every input extent maps to itself.
  bool keepsExtent() const {
    return stride == 1 && 2 * padding == dilation * (kernel - 1);
  }
};
} // namespace mlir::ragged

#define GET_OP_CLASSES
#include "dialect/RaggedOps.h.inc"

#endif // RAGGED_DIALECT_RAGGEDDIALECT_H
