//===- RaggedOps.td - Python bindings of the ragged ops ----*- tablegen -*-===//

#ifndef RAGGED_PYTHON_OPS_TD
#define RAGGED_PYTHON_OPS_TD

include "dialect/RaggedOps.td"

#endif // RAGGED_PYTHON_OPS_TD
