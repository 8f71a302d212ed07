//===- ragged-opt.cpp - the ragged dialect's opt driver -------------------===//
//
// mlir-opt with every upstream dialect and pass, plus the ragged dialect, its
// passes and its named pipelines. lit tests and compiler reproducers run
// through it.
//
//===----------------------------------------------------------------------===//

#include "dialect/RaggedDialect.h"
#include "passes/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/InitAllDialects.h"
#include "mlir/InitAllExtensions.h"
#include "mlir/InitAllPasses.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::registerAllPasses();
  mlir::ragged::registerRaggedPasses();
  mlir::ragged::registerRaggedPipelines();

  mlir::DialectRegistry registry;
  mlir::registerAllDialects(registry);
  mlir::registerAllExtensions(registry);
  registry.insert<mlir::ragged::RaggedDialect>();

  return mlir::asMainReturnCode(mlir::MlirOptMain(
      argc, argv, "ragged-mlir optimizer driver\n", registry));
}
