// RUN: ragged-opt %s --split-input-file --ragged-hint-data-tiling | FileCheck %s

// A matmul of dynamic K next to one of static K: IREE would data-tile both
// and fail on the first, so the second is hinted and the first left alone.
// CHECK-LABEL: module {
// CHECK-LABEL: func.func @mixed
// CHECK:         linalg.matmul ins(%[[A:.*]], %{{.*}} : tensor<?x?xf32>, tensor<?x8xf32>)
// CHECK:         linalg.matmul {iree.opt.data_tiling} ins(%{{.*}}, %{{.*}} : tensor<?x16xf32>, tensor<16x8xf32>)
// A unit dim (IREE folds it and rebuilds the op) or two batch dims (IREE
// does not data-tile it) get no hint.
// CHECK:         linalg.matmul ins(%{{.*}}, %{{.*}} : tensor<?x16xf32>, tensor<16x1xf32>)
// CHECK:         linalg.generic {indexing_maps
func.func @mixed(%a: tensor<?x?xf32>, %w: tensor<?x8xf32>, %x: tensor<?x16xf32>, %v: tensor<16x8xf32>,
                 %u: tensor<16x1xf32>, %p: tensor<?x?x?x16xf32>, %q: tensor<?x?x16x4xf32>)
    -> (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x1xf32>, tensor<?x?x?x4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %zero = arith.constant 0.0 : f32
  %m = tensor.dim %a, %c0 : tensor<?x?xf32>
  %e0 = tensor.empty(%m) : tensor<?x8xf32>
  %i0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<?x8xf32>) -> tensor<?x8xf32>
  %r0 = linalg.matmul ins(%a, %w : tensor<?x?xf32>, tensor<?x8xf32>) outs(%i0 : tensor<?x8xf32>) -> tensor<?x8xf32>
  %n = tensor.dim %x, %c0 : tensor<?x16xf32>
  %e1 = tensor.empty(%n) : tensor<?x8xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<?x8xf32>) -> tensor<?x8xf32>
  %r1 = linalg.matmul ins(%x, %v : tensor<?x16xf32>, tensor<16x8xf32>) outs(%i1 : tensor<?x8xf32>) -> tensor<?x8xf32>
  %e2 = tensor.empty(%n) : tensor<?x1xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<?x1xf32>) -> tensor<?x1xf32>
  %r2 = linalg.matmul ins(%x, %u : tensor<?x16xf32>, tensor<16x1xf32>) outs(%i2 : tensor<?x1xf32>) -> tensor<?x1xf32>
  %b0 = tensor.dim %p, %c0 : tensor<?x?x?x16xf32>
  %b1 = tensor.dim %p, %c1 : tensor<?x?x?x16xf32>
  %b2 = tensor.dim %p, %c2 : tensor<?x?x?x16xf32>
  %e3 = tensor.empty(%b0, %b1, %b2) : tensor<?x?x?x4xf32>
  %i3 = linalg.fill ins(%zero : f32) outs(%e3 : tensor<?x?x?x4xf32>) -> tensor<?x?x?x4xf32>
  %r3 = linalg.generic {
      indexing_maps = [affine_map<(b, h, m, n, k) -> (b, h, m, k)>, affine_map<(b, h, m, n, k) -> (b, h, k, n)>,
                       affine_map<(b, h, m, n, k) -> (b, h, m, n)>],
      iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]}
      ins(%p, %q : tensor<?x?x?x16xf32>, tensor<?x?x16x4xf32>) outs(%i3 : tensor<?x?x?x4xf32>) {
  ^bb0(%l: f32, %r: f32, %o: f32):
    %prod = arith.mulf %l, %r : f32
    %sum = arith.addf %o, %prod : f32
    linalg.yield %sum : f32
  } -> tensor<?x?x?x4xf32>
  return %r0, %r1, %r2, %r3 : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x1xf32>, tensor<?x?x?x4xf32>
}

// -----

// Without a dynamic reduction, IREE's own choice stands: no hint, no mark.
// CHECK-LABEL: module {
// CHECK-LABEL: func.func @static_k
// CHECK-NOT:     iree.opt.data_tiling
// CHECK:         return
func.func @static_k(%x: tensor<?x16xf32>, %v: tensor<16x8xf32>, %init: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %r = linalg.matmul ins(%x, %v : tensor<?x16xf32>, tensor<16x8xf32>) outs(%init : tensor<?x8xf32>) -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}

// -----

// A dynamic reduction and nothing to hint: the module is marked, and
// compile() leaves data tiling off.
// CHECK-LABEL: module attributes {ragged.no_data_tiling} {
// CHECK-LABEL: func.func @only_dynamic
// CHECK-NOT:     iree.opt.data_tiling
// CHECK:         return
func.func @only_dynamic(%a: tensor<?x?xf32>, %w: tensor<?x8xf32>, %init: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %r = linalg.matmul ins(%a, %w : tensor<?x?xf32>, tensor<?x8xf32>) outs(%init : tensor<?x8xf32>) -> tensor<?x8xf32>
  return %r : tensor<?x8xf32>
}

// -----

// A dynamic sum (IREE fuses the multiply before it into a contraction) in
// one function, a matmul in another: IREE inlines both into one program,
// so the matmul is hinted and the sum left alone.
// CHECK-LABEL: module {
// CHECK-LABEL: func.func private @masked_sum
// CHECK-NOT:     iree.opt.data_tiling
// CHECK-LABEL: func.func @project
// CHECK:         linalg.matmul {iree.opt.data_tiling}
func.func private @masked_sum(%x: tensor<?x?x4xf32>, %init: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %r = linalg.generic {
      indexing_maps = [affine_map<(b, l, d) -> (b, l, d)>, affine_map<(b, l, d) -> (b, d)>],
      iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%x : tensor<?x?x4xf32>) outs(%init : tensor<?x4xf32>) {
  ^bb0(%in: f32, %acc: f32):
    %s = arith.addf %acc, %in : f32
    linalg.yield %s : f32
  } -> tensor<?x4xf32>
  return %r : tensor<?x4xf32>
}
func.func @project(%x: tensor<?x16xf32>, %v: tensor<16x4xf32>, %init: tensor<?x4xf32>,
                   %t: tensor<?x?x4xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %r = linalg.matmul ins(%x, %v : tensor<?x16xf32>, tensor<16x4xf32>) outs(%init : tensor<?x4xf32>) -> tensor<?x4xf32>
  %s = func.call @masked_sum(%t, %init) : (tensor<?x?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %r, %s : tensor<?x4xf32>, tensor<?x4xf32>
}
