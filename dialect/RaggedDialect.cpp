//===- RaggedDialect.cpp - ragged dialect registration --------------------===//

#include "dialect/RaggedDialect.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::ragged;

#include "dialect/RaggedDialect.cpp.inc"
#include "dialect/RaggedEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialect/RaggedAttrs.cpp.inc"

void RaggedDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialect/RaggedAttrs.cpp.inc"
      >();
  registerTypes();
  addOperations<
#define GET_OP_LIST
#include "dialect/RaggedOps.cpp.inc"
      >();
}
