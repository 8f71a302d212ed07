//===- PopulatePatterns.h - the compute lowerings by op family --*- C++ -*-===//
//
// populateRaggedComputeToLinalgPatterns gathers these families, one file
// each in this folder.
//
//===----------------------------------------------------------------------===//

#ifndef RAGGED_PASSES_COMPUTE_POPULATEPATTERNS_H
#define RAGGED_PASSES_COMPUTE_POPULATEPATTERNS_H

#include "passes/Passes.h"

#include "mlir/Transforms/DialectConversion.h"

namespace mlir::ragged::compute {

/// Unary and binary per-token ops.
void populateElementwisePatterns(const TypeConverter &converter,
                                 RewritePatternSet &patterns);
/// ragged.matmul.
void populateLinearPatterns(const TypeConverter &converter,
                            RewritePatternSet &patterns);
/// ragged.layer_norm and ragged.softmax.
void populateNormalizationPatterns(const TypeConverter &converter,
                                   RewritePatternSet &patterns,
                                   const RaggedLoweringOptions &options);
/// ragged.reduce.
void populateReductionPatterns(const TypeConverter &converter,
                               RewritePatternSet &patterns,
                               const RaggedLoweringOptions &options);
/// ragged.scores, ragged.apply and ragged.attention.
void populateAttentionPatterns(const TypeConverter &converter,
                               RewritePatternSet &patterns,
                               const RaggedLoweringOptions &options);
/// ragged.gather, ragged.concat and ragged.split.
void populateDataMovementPatterns(const TypeConverter &converter,
                                  RewritePatternSet &patterns);
/// ragged.conv2d and ragged.pool2d.
void populateImagePatterns(const TypeConverter &converter,
                           RewritePatternSet &patterns);

} // namespace mlir::ragged::compute

#endif // RAGGED_PASSES_COMPUTE_POPULATEPATTERNS_H
