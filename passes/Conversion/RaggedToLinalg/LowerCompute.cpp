//===- LowerCompute.cpp - compute ops on packed values --------------------===//
//
// Per-token ops become dense linalg on the packed values. Per-item ops become
// a fixed number of linalg.generics whose iteration space is the real
// elements (or the segments); segment bounds are read from the offsets inside
// the body, so no loop over items runs on the host and no padding is touched.
//
// The patterns live beside this file, one file per op family (as
// torch-mlir splits TorchToLinalg): Elementwise, Linear, Normalization,
// Reductions, Attention, DataMovement.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/RaggedToLinalg/PopulatePatterns.h"

using namespace mlir;
using namespace mlir::ragged;

void mlir::ragged::populateRaggedComputeToLinalgPatterns(
    const TypeConverter &converter, RewritePatternSet &patterns,
    const RaggedLoweringOptions &options) {
  compute::populateElementwisePatterns(converter, patterns);
  compute::populateLinearPatterns(converter, patterns);
  compute::populateNormalizationPatterns(converter, patterns, options);
  compute::populateReductionPatterns(converter, patterns, options);
  compute::populateAttentionPatterns(converter, patterns, options);
  compute::populateDataMovementPatterns(converter, patterns);
  compute::populateImagePatterns(converter, patterns);
}
