// RUN: ragged-opt %s --allow-unregistered-dialect --ragged-cpu-attention-tiles --split-input-file | FileCheck %s
// RUN: ragged-opt %s --allow-unregistered-dialect --ragged-cpu-attention-tiles=vector-bytes=32 --split-input-file | FileCheck %s --check-prefix=AVX2
// RUN: not ragged-opt %s --allow-unregistered-dialect --ragged-cpu-attention-tiles=vector-bytes=0 --split-input-file 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: vector-bytes must be positive, got 0

// A bucket of 12 heads of 32 ([n, S, H, d], as ragged-attention-to-iree
// builds it): 64 queries per workgroup, the whole head and 8 queries per
// vector step, 16 keys per step of the online softmax.
// With 32-byte native vectors (AVX2) IREE accepts 8 KiB: 4 queries.
// CHECK-LABEL: func.func @heads_of_32
// AVX2-LABEL:  func.func @heads_of_32
// AVX2:          vector_common_parallel = [1, 1, 4, 32, 0, 0]
// CHECK:         "iree_linalg_ext.attention"
// CHECK:         compilation_info = #iree_codegen.compilation_info<lowering_config = #iree_cpu.lowering_config<distribution = [1, 1, 64, 32, 0, 0], vector_common_parallel = [1, 1, 8, 32, 0, 0], vector_reduction = [0, 0, 0, 0, 0, 16]>, translation_info = #iree_codegen.translation_info<pipeline = #iree_cpu.pipeline<LinalgExtTileAndVectorize>>>
func.func @heads_of_32(%q: tensor<?x64x12x32xf32>, %k: tensor<?x64x12x32xf32>, %v: tensor<?x64x12x32xf32>, %mask: tensor<?x64xi1>, %init: tensor<?x64x12x32xf32>) -> tensor<?x64x12x32xf32> {
  %scale = arith.constant 0.176776695 : f32
  %o = "iree_linalg_ext.attention"(%q, %k, %v, %scale, %mask, %init) ({
  ^bb0(%s: f32):
    "iree_linalg_ext.yield"(%s) : (f32) -> ()
  }) {indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d2, d1, d4)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d5, d1, d4)>,
                       affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d5, d1, d3)>, affine_map<(d0, d1, d2, d3, d4, d5) -> ()>,
                       affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d2, d1, d3)>]}
     : (tensor<?x64x12x32xf32>, tensor<?x64x12x32xf32>, tensor<?x64x12x32xf32>, f32, tensor<?x64xi1>, tensor<?x64x12x32xf32>) -> tensor<?x64x12x32xf32>
  return %o : tensor<?x64x12x32xf32>
}

// -----

// One head of 64 ([n, S, d]), a dynamic bucket size and a causal [S, S]
// mask: 4 queries per vector step keep 4 x 64 x 16 f32 within 16 KiB.
// CHECK-LABEL: func.func @one_head_of_64
// AVX2-LABEL:  func.func @one_head_of_64
// AVX2:          vector_common_parallel = [1, 2, 64, 0, 0]
// CHECK:         lowering_config = #iree_cpu.lowering_config<distribution = [1, 64, 64, 0, 0], vector_common_parallel = [1, 4, 64, 0, 0], vector_reduction = [0, 0, 0, 0, 16]>
func.func @one_head_of_64(%q: tensor<?x?x64xf32>, %k: tensor<?x?x64xf32>, %v: tensor<?x?x64xf32>, %mask: tensor<?x?xi1>, %init: tensor<?x?x64xf32>) -> tensor<?x?x64xf32> {
  %scale = arith.constant 0.125 : f32
  %o = "iree_linalg_ext.attention"(%q, %k, %v, %scale, %mask, %init) ({
  ^bb0(%s: f32):
    "iree_linalg_ext.yield"(%s) : (f32) -> ()
  }) {indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d3)>,
                       affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d2)>, affine_map<(d0, d1, d2, d3, d4) -> ()>,
                       affine_map<(d0, d1, d2, d3, d4) -> (d1, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>]}
     : (tensor<?x?x64xf32>, tensor<?x?x64xf32>, tensor<?x?x64xf32>, f32, tensor<?x?xi1>, tensor<?x?x64xf32>) -> tensor<?x?x64xf32>
  return %o : tensor<?x?x64xf32>
}

// -----

// Head-major blocks with the keys transposed ([n, H, d, S]): the loops are
// told apart by the maps, not by their order. Heads of 128: 2 queries per
// vector step.
// CHECK-LABEL: func.func @head_major
// AVX2-LABEL:  func.func @head_major
// AVX2:          vector_common_parallel = [1, 1, 1, 128, 0, 0]
// CHECK:         lowering_config = #iree_cpu.lowering_config<distribution = [1, 1, 64, 128, 0, 0], vector_common_parallel = [1, 1, 2, 128, 0, 0], vector_reduction = [0, 0, 0, 0, 0, 16]>
func.func @head_major(%q: tensor<4x2x32x128xf32>, %k: tensor<4x2x128x32xf32>, %v: tensor<4x2x32x128xf32>, %mask: tensor<4x32xi1>, %init: tensor<4x2x32x128xf32>) -> tensor<4x2x32x128xf32> {
  %scale = arith.constant 0.0883883461 : f32
  %o = "iree_linalg_ext.attention"(%q, %k, %v, %scale, %mask, %init) ({
  ^bb0(%s: f32):
    "iree_linalg_ext.yield"(%s) : (f32) -> ()
  }) {indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d4)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d4, d5)>,
                       affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d5, d3)>, affine_map<(d0, d1, d2, d3, d4, d5) -> ()>,
                       affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2, d3)>]}
     : (tensor<4x2x32x128xf32>, tensor<4x2x128x32xf32>, tensor<4x2x32x128xf32>, f32, tensor<4x32xi1>, tensor<4x2x32x128xf32>) -> tensor<4x2x32x128xf32>
  return %o : tensor<4x2x32x128xf32>
}

// -----

// The attention of a training forward (IREE's online_attention, which also
// returns each query's running maximum and sum): the same tiles, the loops
// told apart by the unnormalised output's map, not the statistics'.
// CHECK-LABEL: func.func @online
// AVX2-LABEL:  func.func @online
// AVX2:          vector_common_parallel = [1, 1, 4, 32, 0, 0]
// CHECK:         "iree_linalg_ext.online_attention"
// CHECK:         lowering_config = #iree_cpu.lowering_config<distribution = [1, 1, 64, 32, 0, 0], vector_common_parallel = [1, 1, 8, 32, 0, 0], vector_reduction = [0, 0, 0, 0, 0, 16]>
func.func @online(%q: tensor<?x64x12x32xf32>, %mask: tensor<?x64xi1>, %acc: tensor<?x64x12x32xf32>, %stat: tensor<?x64x12xf32>)
    -> (tensor<?x64x12x32xf32>, tensor<?x64x12xf32>, tensor<?x64x12xf32>) {
  %scale = arith.constant 0.176776695 : f32
  %o:3 = "iree_linalg_ext.online_attention"(%q, %q, %q, %scale, %mask, %acc, %stat, %stat) ({
  ^bb0(%s: f32):
    "iree_linalg_ext.yield"(%s) : (f32) -> ()
  }) {indexing_maps = [affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d2, d1, d4)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d5, d1, d4)>,
                       affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d5, d1, d3)>, affine_map<(d0, d1, d2, d3, d4, d5) -> ()>,
                       affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d5)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d2, d1, d3)>,
                       affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d2, d1)>, affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d2, d1)>]}
     : (tensor<?x64x12x32xf32>, tensor<?x64x12x32xf32>, tensor<?x64x12x32xf32>, f32, tensor<?x64xi1>, tensor<?x64x12x32xf32>, tensor<?x64x12xf32>, tensor<?x64x12xf32>)
    -> (tensor<?x64x12x32xf32>, tensor<?x64x12xf32>, tensor<?x64x12xf32>)
  return %o#0, %o#1, %o#2 : tensor<?x64x12x32xf32>, tensor<?x64x12xf32>, tensor<?x64x12xf32>
}

// -----

// A dynamic head size keeps IREE's own choice; so does an attention that
// already has a compilation_info.
// CHECK-LABEL: func.func @left_alone
// CHECK:         "iree_linalg_ext.attention"
// CHECK-NOT:     compilation_info
// CHECK:         }) {indexing_maps
// CHECK:         }) {compilation_info = "set by the user", indexing_maps
func.func @left_alone(%q: tensor<?x?x?xf32>, %mask: tensor<?x?xi1>) -> (tensor<?x?x?xf32>, tensor<?x?x?xf32>) {
  %scale = arith.constant 0.125 : f32
  %o = "iree_linalg_ext.attention"(%q, %q, %q, %scale, %mask, %q) ({
  ^bb0(%s: f32):
    "iree_linalg_ext.yield"(%s) : (f32) -> ()
  }) {indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d3)>,
                       affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d2)>, affine_map<(d0, d1, d2, d3, d4) -> ()>,
                       affine_map<(d0, d1, d2, d3, d4) -> (d0, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>]}
     : (tensor<?x?x?xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>, f32, tensor<?x?xi1>, tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
  %p = "iree_linalg_ext.attention"(%q, %q, %q, %scale, %mask, %q) ({
  ^bb0(%s: f32):
    "iree_linalg_ext.yield"(%s) : (f32) -> ()
  }) {compilation_info = "set by the user",
      indexing_maps = [affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d3)>,
                       affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d2)>, affine_map<(d0, d1, d2, d3, d4) -> ()>,
                       affine_map<(d0, d1, d2, d3, d4) -> (d0, d4)>, affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>]}
     : (tensor<?x?x?xf32>, tensor<?x?x?xf32>, tensor<?x?x?xf32>, f32, tensor<?x?xi1>, tensor<?x?x?xf32>) -> tensor<?x?x?xf32>
  return %o, %p : tensor<?x?x?xf32>, tensor<?x?x?xf32>
}

// -----

// Indexing maps that are not affine maps (IREE's verifier rejects them
// later) are left alone, not a crash.
// CHECK-LABEL: func.func @not_maps
// CHECK:         indexing_maps = [1, 2, 3, 4, 5, 6]
// CHECK-NOT:     compilation_info
func.func @not_maps(%q: tensor<1x4x1x16xf32>, %mask: tensor<1x4xi1>) -> tensor<1x4x1x16xf32> {
  %scale = arith.constant 0.25 : f32
  %o = "iree_linalg_ext.attention"(%q, %q, %q, %scale, %mask, %q) ({
  ^bb0(%s: f32):
    "iree_linalg_ext.yield"(%s) : (f32) -> ()
  }) {indexing_maps = [1, 2, 3, 4, 5, 6]}
     : (tensor<1x4x1x16xf32>, tensor<1x4x1x16xf32>, tensor<1x4x1x16xf32>, f32, tensor<1x4xi1>, tensor<1x4x1x16xf32>) -> tensor<1x4x1x16xf32>
  return %o : tensor<1x4x1x16xf32>
}
