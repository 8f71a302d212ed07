//===- SiteInitialize.cpp - registers dialects in every new Context -------===//
//
// ragged_mlir's _mlir_libs imports `_site_initialize_0` when it loads and
// calls `register_dialects` on the registry every Context starts from: all
// upstream dialects, extensions and passes plus the ragged ones.
//
//===----------------------------------------------------------------------===//

#include "capi/RaggedCAPI.h"

#include "mlir/Bindings/Python/Nanobind.h"
#include "mlir/Bindings/Python/NanobindAdaptors.h"

NB_MODULE(_site_initialize_0, m) {
  m.def("register_dialects", [](MlirDialectRegistry registry) {
    raggedRegisterEverything(registry);
  });
}
