//===- Pipelines.cpp - named ragged pipelines -----------------------------===//
//
// Python drives compilation by pipeline name, so every compile can be
// replayed with `ragged-opt --pass-pipeline=...`.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "mlir/Transforms/Passes.h"

using namespace mlir;

void mlir::ragged::registerRaggedPipelines() {
  PassPipelineRegistration<>(
      "ragged-to-iree-input",
      "Lowers ragged programs to upstream linalg/tensor/scf that IREE accepts",
      [](OpPassManager &pm) {
        pm.addPass(createConvertRaggedToLinalgPass());
        pm.addPass(createCanonicalizerPass());
        pm.addPass(createCSEPass());
      });
}
