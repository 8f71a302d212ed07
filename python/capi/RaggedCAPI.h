/*===- RaggedCAPI.h - C API of the ragged dialect -----------------*- C -*-===*/

#ifndef RAGGED_CAPI_RAGGEDCAPI_H
#define RAGGED_CAPI_RAGGEDCAPI_H

#include "mlir-c/IR.h"
#include "mlir-c/Support.h"

#ifdef __cplusplus
extern "C" {
#endif

MLIR_DECLARE_CAPI_DIALECT_REGISTRATION(Ragged, ragged);

/// Registers every upstream dialect and extension plus the ragged dialect,
/// and (once per process) every upstream pass, the ragged passes and the
/// named ragged pipelines.
MLIR_CAPI_EXPORTED void raggedRegisterEverything(MlirDialectRegistry registry);

MLIR_CAPI_EXPORTED bool raggedTypeIsATensor(MlirType type);
MLIR_CAPI_EXPORTED MlirTypeID raggedTensorTypeGetTypeID(void);

/// Builds a !ragged.tensor; `shape` holds -1 for ragged dims and INT64_MIN
/// for dynamic dense dims; `symbols`/`parents` have one entry per ragged dim
/// (an empty parent means the batch). Returns a null type, after passing the
/// verifier's message to `onError`, when the arguments violate the type's
/// invariants.
MLIR_CAPI_EXPORTED MlirType raggedTensorTypeGetChecked(
    MlirContext ctx, int64_t batch, intptr_t rank, const int64_t *shape,
    intptr_t numRagged, const MlirStringRef *symbols,
    const MlirStringRef *parents, MlirType elementType, int32_t encoding,
    MlirStringCallback onError, void *userData);

MLIR_CAPI_EXPORTED int64_t raggedTensorTypeGetBatch(MlirType type);
MLIR_CAPI_EXPORTED intptr_t raggedTensorTypeGetItemRank(MlirType type);
MLIR_CAPI_EXPORTED int64_t raggedTensorTypeGetDim(MlirType type, intptr_t i);
MLIR_CAPI_EXPORTED intptr_t raggedTensorTypeGetNumRaggedDims(MlirType type);
MLIR_CAPI_EXPORTED MlirStringRef raggedTensorTypeGetSymbol(MlirType type,
                                                           intptr_t i);
MLIR_CAPI_EXPORTED MlirStringRef raggedTensorTypeGetParent(MlirType type,
                                                           intptr_t i);
MLIR_CAPI_EXPORTED MlirType raggedTensorTypeGetElementType(MlirType type);
MLIR_CAPI_EXPORTED int32_t raggedTensorTypeGetEncoding(MlirType type);
MLIR_CAPI_EXPORTED MlirType raggedTensorTypeGetValuesType(MlirType type);

#ifdef __cplusplus
}
#endif

#endif /* RAGGED_CAPI_RAGGEDCAPI_H */
