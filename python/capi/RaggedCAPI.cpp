//===- RaggedCAPI.cpp - C API of the ragged dialect -----------------------===//

#include "capi/RaggedCAPI.h"

#include "dialect/RaggedDialect.h"
#include "passes/Passes.h"

#include "mlir/CAPI/IR.h"
#include "mlir/CAPI/Registration.h"
#include "mlir/CAPI/Support.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"

using namespace mlir;
using namespace mlir::ragged;

MLIR_DEFINE_CAPI_DIALECT_REGISTRATION(Ragged, ragged, RaggedDialect)

void raggedRegisterEverything(MlirDialectRegistry registry) {
  DialectRegistry &r = *unwrap(registry);
  registerAllDialects(r);
  registerAllExtensions(r);
  r.insert<RaggedDialect>();
  static bool passesRegistered = [] {
    registerAllPasses();
    registerRaggedPasses();
    registerRaggedPipelines();
    return true;
  }();
  (void)passesRegistered;
}

bool raggedTypeIsATensor(MlirType type) {
  return isa<RaggedTensorType>(unwrap(type));
}

MlirTypeID raggedTensorTypeGetTypeID(void) {
  return wrap(TypeID::get<RaggedTensorType>());
}

MlirType raggedTensorTypeGetChecked(
    MlirContext context, int64_t batch, intptr_t rank, const int64_t *shape,
    intptr_t numRagged, const MlirStringRef *symbols,
    const MlirStringRef *parents, MlirType elementType, int32_t encoding,
    MlirStringCallback onError, void *userData) {
  MLIRContext *ctx = unwrap(context);
  auto fail = [&](const std::string &message) {
    onError(wrap(StringRef(message)), userData);
    return MlirType{nullptr};
  };
  auto enc = symbolizeEncoding(static_cast<uint32_t>(encoding));
  if (!enc)
    return fail("unknown ragged encoding " + std::to_string(encoding));
  SmallVector<StringAttr> syms, pars;
  for (intptr_t i = 0; i < numRagged; ++i) {
    syms.push_back(StringAttr::get(ctx, unwrap(symbols[i])));
    pars.push_back(StringAttr::get(ctx, unwrap(parents[i])));
  }
  std::string message;
  RaggedTensorType type;
  {
    ScopedDiagnosticHandler capture(ctx, [&](Diagnostic &diag) {
      message = diag.str();
      return success();
    });
    type = RaggedTensorType::getChecked(
        [&] { return emitError(UnknownLoc::get(ctx)); }, ctx, batch,
        ArrayRef<int64_t>(shape, rank), ArrayRef<StringAttr>(syms),
        ArrayRef<StringAttr>(pars), unwrap(elementType), *enc);
  }
  if (!type)
    return fail(message);
  return wrap(Type(type));
}

static RaggedTensorType cast(MlirType type) {
  return llvm::cast<RaggedTensorType>(unwrap(type));
}

int64_t raggedTensorTypeGetBatch(MlirType type) {
  return cast(type).getBatch();
}
intptr_t raggedTensorTypeGetItemRank(MlirType type) {
  return cast(type).getItemRank();
}
int64_t raggedTensorTypeGetDim(MlirType type, intptr_t i) {
  return cast(type).getShape()[i];
}
intptr_t raggedTensorTypeGetNumRaggedDims(MlirType type) {
  return cast(type).getSymbols().size();
}
MlirStringRef raggedTensorTypeGetSymbol(MlirType type, intptr_t i) {
  return wrap(cast(type).getSymbols()[i].getValue());
}
MlirStringRef raggedTensorTypeGetParent(MlirType type, intptr_t i) {
  return wrap(cast(type).getParents()[i].getValue());
}
MlirType raggedTensorTypeGetElementType(MlirType type) {
  return wrap(cast(type).getElementType());
}
int32_t raggedTensorTypeGetEncoding(MlirType type) {
  return static_cast<int32_t>(cast(type).getEncoding());
}
MlirType raggedTensorTypeGetValuesType(MlirType type) {
  return wrap(Type(cast(type).getValuesType()));
}
