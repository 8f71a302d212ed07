//===- LowerCompute.cpp - compute ops on packed values --------------------===//

#include "passes/LoweringUtils.h"

using namespace mlir;
using namespace mlir::ragged;
using namespace mlir::ragged::lowering;

void mlir::ragged::populateRaggedComputeToLinalgPatterns(
    const TypeConverter &converter, RewritePatternSet &patterns) {}
