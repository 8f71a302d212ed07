// RUN: ragged-opt %s --allow-unregistered-dialect --ragged-cpu-whole-rows --split-input-file | FileCheck %s --implicit-check-not=ragged.whole_rows
// RUN: ragged-opt %s --allow-unregistered-dialect --ragged-cpu-whole-rows=peel=1 --split-input-file | FileCheck %s --check-prefix=PEEL

// A segment tile generic over (tile, feature): 16 tiles per workgroup, the
// features whole, 16 of them per vector step, the remainder masked (peeled
// with `peel`).
// CHECK-LABEL: func.func @tiles
// CHECK:         linalg.generic
// CHECK-SAME:      attrs = {compilation_info = #iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<distribution = [16, 0], vector_common_parallel = [1, 16]>, translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>>>}
// PEEL-LABEL:  func.func @tiles
// PEEL:          translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<DoubleTilingExpert>, {enable_loop_peeling}>
func.func @tiles(%starts: tensor<?xi64>, %ends: tensor<?xi64>, %init: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%starts, %ends : tensor<?xi64>, tensor<?xi64>) outs(%init : tensor<?x?xf32>) attrs = {ragged.whole_rows} {
  ^bb0(%s: i64, %e: i64, %o: f32):
    %n = arith.subi %e, %s : i64
    %f = arith.sitofp %n : i64 to f32
    linalg.yield %f : f32
  } -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}

// -----

// Trailing dims [heads, 4]: the vector step is the static innermost extent.
// CHECK-LABEL: func.func @heads
// CHECK:         lowering_config = #iree_cpu.lowering_config<distribution = [16, 0, 0], vector_common_parallel = [1, 1, 4]>
func.func @heads(%starts: tensor<?xi64>, %init: tensor<?x3x4xf64>) -> tensor<?x3x4xf64> {
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0)>, affine_map<(d0, d1, d2) -> (d0, d1, d2)>],
                       iterator_types = ["parallel", "parallel", "parallel"]}
      ins(%starts : tensor<?xi64>) outs(%init : tensor<?x3x4xf64>) attrs = {ragged.whole_rows} {
  ^bb0(%s: i64, %o: f64):
    %f = arith.sitofp %s : i64 to f64
    linalg.yield %f : f64
  } -> tensor<?x3x4xf64>
  return %r : tensor<?x3x4xf64>
}

// -----

// Generics without the marker keep IREE's own choice; a marked one over
// tiles alone (no trailing dims) only loses the marker.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT:     compilation_info
// CHECK:         return
func.func @left_alone(%a: tensor<?x?xf32>, %starts: tensor<?xi64>, %init: tensor<?xf32>) -> (tensor<?x?xf32>, tensor<?xf32>) {
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]} ins(%a : tensor<?x?xf32>) outs(%a : tensor<?x?xf32>) {
  ^bb0(%x: f32, %o: f32):
    %y = arith.addf %x, %x : f32
    linalg.yield %y : f32
  } -> tensor<?x?xf32>
  %t = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]}
      ins(%starts : tensor<?xi64>) outs(%init : tensor<?xf32>) attrs = {ragged.whole_rows} {
  ^bb0(%s: i64, %o: f32):
    %f = arith.sitofp %s : i64 to f32
    linalg.yield %f : f32
  } -> tensor<?xf32>
  return %r, %t : tensor<?x?xf32>, tensor<?xf32>
}
