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

#include "dialect/RaggedDialect.h.inc"
#include "dialect/RaggedEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialect/RaggedAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "dialect/RaggedTypes.h.inc"

#define GET_OP_CLASSES
#include "dialect/RaggedOps.h.inc"

#endif // RAGGED_DIALECT_RAGGEDDIALECT_H
