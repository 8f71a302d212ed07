//===- CompilationInfo.h - IREE CPU compilation_info by name ----*- C++ -*-===//
//
// IREE's dialects are not linked into ragged-opt; the CPU tile passes in
// iree/ build IREE's `#iree_codegen.compilation_info` as text for the
// context to parse (it must allow unregistered dialects).
//
//===----------------------------------------------------------------------===//

#ifndef RAGGED_PASSES_IREE_COMPILATIONINFO_H
#define RAGGED_PASSES_IREE_COMPILATIONINFO_H

#include "mlir/AsmParser/AsmParser.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <string>
#include <utility>

namespace mlir::ragged {

/// `[a, b, ...]` as IREE's tile size lists print.
inline std::string tileList(ArrayRef<int64_t> sizes) {
  std::string text = "[";
  for (auto [i, size] : llvm::enumerate(sizes))
    text += (i ? ", " : "") + std::to_string(size);
  return text + "]";
}

/// IREE's `compilation_info` for a CPU op: a `#iree_cpu.lowering_config`
/// with the named tile size lists (`{"distribution", {16, 0}}`, ...) and the
/// codegen `pipeline` (`DoubleTilingExpert`, ...), with loop peeling when
/// `peel`; null where the context cannot parse it.
inline Attribute
cpuCompilationInfo(MLIRContext *ctx,
                   ArrayRef<std::pair<StringRef, SmallVector<int64_t>>> tiles,
                   StringRef pipeline, bool peel = false) {
  std::string config;
  for (auto [i, tile] : llvm::enumerate(tiles))
    config +=
        (i ? ", " : "") + tile.first.str() + " = " + tileList(tile.second);
  std::string text =
      "#iree_codegen.compilation_info<lowering_config = "
      "#iree_cpu.lowering_config<" +
      config +
      ">, translation_info = #iree_codegen.translation_info<pipeline = "
      "#iree_cpu.pipeline<" +
      pipeline.str() + ">" + (peel ? ", {enable_loop_peeling}" : "") + ">>";
  return parseAttribute(text, ctx);
}

} // namespace mlir::ragged

#endif // RAGGED_PASSES_IREE_COMPILATIONINFO_H
