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

namespace {
struct RaggedPipelineOptions : PassPipelineOptions<RaggedPipelineOptions> {
  Option<int64_t> balanceTile{
      *this, "balance-tile",
      llvm::cl::desc("Rows per tile of segment reductions and softmax, at "
                     "most 64 (0: one unit per segment)"),
      llvm::cl::init(ragged::kDefaultBalanceTile)};
  Option<int64_t> attentionBuckets{
      *this, "attention-buckets",
      llvm::cl::desc("Length buckets of dense attention, sqrt(2) apart, at "
                     "most 24 (0: exact segment loops)"),
      llvm::cl::init(ragged::kDefaultAttentionBuckets)};
  Option<std::string> cpuKernels{
      *this, "cpu-kernels",
      llvm::cl::desc("Run ragged-cpu-kernels first with this ISA "
                     "(x86_64_v4, x86_64_v3, arm_64): f32, f16 and bf16 "
                     "attention as dispatches of our CPU kernel (needs "
                     "unregistered dialects allowed and the kernel objects "
                     "on IREE's object search path; empty: off)"),
      llvm::cl::init("")};
  Option<bool> ireeAttention{
      *this, "iree-attention",
      llvm::cl::desc("Run ragged-attention-to-iree first: f32 attention as "
                     "iree_linalg_ext.attention on static length buckets "
                     "(needs unregistered dialects allowed)"),
      llvm::cl::init(true)};
  Option<int64_t> scoresMaxRows{
      *this, "attention-scores-max-rows",
      llvm::cl::desc("With iree-attention: the largest static bucket (rows) "
                     "whose scores are materialised rather than computed by "
                     "IREE's fused kernel (0: fused everywhere)"),
      llvm::cl::init(ragged::kDefaultScoresMaxRows)};
  Option<bool> cpuTiles{
      *this, "cpu-tiles",
      llvm::cl::desc(
          "Run ragged-cpu-whole-rows and ragged-cpu-attention-tiles "
          "last: IREE CPU workgroups of whole rows for generics over "
          "packed rows, whole heads for the fused attention (needs "
          "unregistered dialects allowed; CPU targets only)"),
      llvm::cl::init(true)};
  Option<int64_t> cpuVectorBytes{
      *this, "cpu-vector-bytes",
      llvm::cl::desc("With cpu-tiles: the CPU target's native vector size in "
                     "bytes (64 for AVX-512, 32 for AVX2, 16 for NEON)"),
      llvm::cl::init(64)};
  Option<bool> peelRemainders{
      *this, "peel-remainders",
      llvm::cl::desc("With cpu-tiles: peel vector remainders rather than "
                     "mask them (x86 without AVX-512)"),
      llvm::cl::init(false)};
  Option<int64_t> contractionChunk{
      *this, "contraction-chunk",
      llvm::cl::desc("Rows per K chunk of contractions that sum over a "
                     "dynamic extent (0: leave them)"),
      llvm::cl::init(256)};
};
} // namespace

void mlir::ragged::registerRaggedPipelines() {
  PassPipelineRegistration<RaggedPipelineOptions>(
      "ragged-to-iree-input",
      "Lowers ragged programs to upstream linalg/tensor/scf that IREE accepts",
      [](OpPassManager &pm, const RaggedPipelineOptions &options) {
        ConvertRaggedToLinalgPassOptions lowering;
        lowering.balanceTile = options.balanceTile;
        lowering.attentionBuckets = options.attentionBuckets;
        if (!options.cpuKernels.empty())
          pm.addPass(createCpuKernelsPass({options.cpuKernels}));
        if (options.ireeAttention)
          pm.addPass(createRaggedAttentionToIreePass({options.scoresMaxRows}));
        pm.addPass(createConvertRaggedToLinalgPass(lowering));
        pm.addPass(createFoldViewReadsPass());
        pm.addPass(createExpandMathPass());
        pm.addPass(createCanonicalizerPass());
        pm.addPass(createCSEPass());
        // After canonicalization, which makes the sizes of an all-empty batch
        // static.
        pm.addPass(createFoldEmptyTensorsPass());
        pm.addPass(createFillSplatsPass());
        pm.addPass(createGuardInPlaceUpdatesPass());
        // After ragged-fill-splats, which makes broadcasts of one scalar fills.
        pm.addPass(createGuardSplatReductionsPass());
        pm.addPass(createGuardIntegerDivisionPass());
        pm.addPass(createGuardContractionSlicesPass());
        pm.addPass(createGuardScanInputsPass());
        // After canonicalization, which makes M and N static.
        SplitDynamicContractionsPassOptions split;
        split.chunk = options.contractionChunk;
        pm.addPass(createSplitDynamicContractionsPass(split));
        // Last: it reads the extents canonicalization made static.
        pm.addPass(createHintDataTilingPass());
        if (options.cpuTiles) {
          pm.addPass(createCpuWholeRowsPass({options.peelRemainders}));
          pm.addPass(createCpuAttentionTilesPass({options.cpuVectorBytes}));
        }
      });
}
