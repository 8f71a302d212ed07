//===- Barrier.h - util.optimization_barrier, built by name -----*- C++ -*-===//
//
// IREE's dialects are not linked into ragged-opt; the passes in iree/ build
// its barrier and shape tie in generic form.
//
//===----------------------------------------------------------------------===//

#ifndef RAGGED_PASSES_IREE_BARRIER_H
#define RAGGED_PASSES_IREE_BARRIER_H

#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/Builders.h"

namespace mlir::ragged {

constexpr StringLiteral kOptimizationBarrier = "util.optimization_barrier";
constexpr StringLiteral kTieShape = "flow.tensor.tie_shape";

/// `value` behind a `util.optimization_barrier`, which IREE cannot look
/// through; with `tieShape`, its dynamic sizes tied to `value`'s by a
/// `flow.tensor.tie_shape` (IREE cannot resolve a barrier's dynamic sizes).
inline Value optimizationBarrier(OpBuilder &b, Location loc, Value value,
                                 bool tieShape) {
  OperationState state(loc, kOptimizationBarrier);
  state.addOperands(value);
  state.addTypes(value.getType());
  Value hidden = b.create(state)->getResult(0);
  auto type = cast<RankedTensorType>(value.getType());
  if (!tieShape || type.hasStaticShape())
    return hidden;
  OperationState tie(loc, kTieShape);
  tie.addOperands(hidden);
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (type.isDynamicDim(d))
      tie.addOperands(tensor::DimOp::create(b, loc, value, d).getResult());
  tie.addTypes(type);
  return b.create(tie)->getResult(0);
}

} // namespace mlir::ragged

#endif // RAGGED_PASSES_IREE_BARRIER_H
