// RUN: ragged-opt %s --allow-unregistered-dialect --ragged-guard-contraction-slices --split-input-file | FileCheck %s

// BERT's pooler as torch-mlir imports it: the first token of each item
// (a strided slice at a dynamic offset, collapsed) feeds a matmul. The
// matmul reads the slice behind a barrier, its dynamic size tied.
// CHECK-LABEL: func.func @pooler
// CHECK-SAME:    (%[[X:.*]]: tensor<?x?x64xf32>, %[[W:.*]]: tensor<64x64xf32>, %[[OFF:.*]]: index)
// CHECK:         %[[S:.*]] = tensor.extract_slice %[[X]][0, %[[OFF]], 0]
// CHECK-NEXT:    %[[H:.*]] = "util.optimization_barrier"(%[[S]]) : (tensor<?x1x64xf32>) -> tensor<?x1x64xf32>
// CHECK:         %[[D:.*]] = tensor.dim %[[S]], %{{.*}} : tensor<?x1x64xf32>
// CHECK-NEXT:    %[[T:.*]] = "flow.tensor.tie_shape"(%[[H]], %[[D]])
// CHECK-NEXT:    %[[C:.*]] = tensor.collapse_shape %[[T]] {{\[}}[0, 1], [2]]
// CHECK:         linalg.matmul ins(%[[C]], %[[W]] : tensor<?x64xf32>, tensor<64x64xf32>)
func.func @pooler(%x: tensor<?x?x64xf32>, %w: tensor<64x64xf32>, %off: index) -> tensor<?x64xf32> {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %b = tensor.dim %x, %c0 : tensor<?x?x64xf32>
  %s = tensor.extract_slice %x[0, %off, 0] [%b, 1, 64] [1, 1, 1] : tensor<?x?x64xf32> to tensor<?x1x64xf32>
  %c = tensor.collapse_shape %s [[0, 1], [2]] : tensor<?x1x64xf32> into tensor<?x64xf32>
  %e = tensor.empty(%b) : tensor<?x64xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<?x64xf32>) -> tensor<?x64xf32>
  %y = linalg.matmul ins(%c, %w : tensor<?x64xf32>, tensor<64x64xf32>) outs(%f : tensor<?x64xf32>) -> tensor<?x64xf32>
  return %y : tensor<?x64xf32>
}

// -----

// A rank-reducing slice of columns read as the right operand of a batch
// matmul: the barrier sits on the slice itself.
// CHECK-LABEL: func.func @columns
// CHECK:         %[[S:.*]] = tensor.extract_slice
// CHECK-NEXT:    %[[H:.*]] = "util.optimization_barrier"(%[[S]]) : (tensor<2x32x?xf32>) -> tensor<2x32x?xf32>
// CHECK:         %[[T:.*]] = "flow.tensor.tie_shape"(%[[H]]
// CHECK:         linalg.batch_matmul ins(%{{.*}}, %[[T]] : tensor<2x?x32xf32>, tensor<2x32x?xf32>)
func.func @columns(%a: tensor<2x?x32xf32>, %x: tensor<2x32x?xf32>, %n: index) -> tensor<2x?x?xf32> {
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0.0 : f32
  %m = tensor.dim %a, %c1 : tensor<2x?x32xf32>
  %s = tensor.extract_slice %x[0, 0, 0] [2, 32, %n] [1, 1, 1] : tensor<2x32x?xf32> to tensor<2x32x?xf32>
  %e = tensor.empty(%m, %n) : tensor<2x?x?xf32>
  %f = linalg.fill ins(%zero : f32) outs(%e : tensor<2x?x?xf32>) -> tensor<2x?x?xf32>
  %y = linalg.batch_matmul ins(%a, %s : tensor<2x?x32xf32>, tensor<2x32x?xf32>) outs(%f : tensor<2x?x?xf32>) -> tensor<2x?x?xf32>
  return %y : tensor<2x?x?xf32>
}

// -----

// Left alone: a static slice (IREE packs it within its bounds), a slice
// that only an elementwise op reads (the packing fuses into that op's
// dispatch), a slice used as a matmul's init, and slices inside a loop.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT:     util.optimization_barrier
// CHECK-NOT:     flow.tensor.tie_shape
// CHECK:         return
func.func @left_alone(%x: tensor<8x40x64xf32>, %y: tensor<?x64xf32>, %w: tensor<64x64xf32>, %n: index)
    -> (tensor<8x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %zero = arith.constant 0.0 : f32
  %s = tensor.extract_slice %x[0, 0, 0] [8, 1, 64] [1, 1, 1] : tensor<8x40x64xf32> to tensor<8x64xf32>
  %e8 = tensor.empty() : tensor<8x64xf32>
  %f8 = linalg.fill ins(%zero : f32) outs(%e8 : tensor<8x64xf32>) -> tensor<8x64xf32>
  %r0 = linalg.matmul ins(%s, %w : tensor<8x64xf32>, tensor<64x64xf32>) outs(%f8 : tensor<8x64xf32>) -> tensor<8x64xf32>
  %t = tensor.extract_slice %y[0, 0] [%n, 64] [1, 1] : tensor<?x64xf32> to tensor<?x64xf32>
  %e = tensor.empty(%n) : tensor<?x64xf32>
  %r1 = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                        iterator_types = ["parallel", "parallel"]} ins(%t : tensor<?x64xf32>) outs(%e : tensor<?x64xf32>) {
  ^bb0(%in: f32, %out: f32):
    %x2 = math.exp %in : f32
    linalg.yield %x2 : f32
  } -> tensor<?x64xf32>
  %i = tensor.extract_slice %y[0, 0] [%n, 64] [1, 1] : tensor<?x64xf32> to tensor<?x64xf32>
  %r2 = linalg.matmul ins(%r1, %w : tensor<?x64xf32>, tensor<64x64xf32>) outs(%i : tensor<?x64xf32>) -> tensor<?x64xf32>
  %r3 = scf.for %k = %c0 to %c2 step %c1 iter_args(%acc = %r2) -> tensor<?x64xf32> {
    %l = tensor.extract_slice %y[0, 0] [%n, 64] [1, 1] : tensor<?x64xf32> to tensor<?x64xf32>
    %p = linalg.matmul ins(%l, %w : tensor<?x64xf32>, tensor<64x64xf32>) outs(%acc : tensor<?x64xf32>) -> tensor<?x64xf32>
    scf.yield %p : tensor<?x64xf32>
  }
  return %r0, %r1, %r2, %r3 : tensor<8x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>, tensor<?x64xf32>
}
