// RUN: ragged-opt %s --split-input-file --ragged-split-dynamic-contractions=chunk=16 | FileCheck %s
// RUN: ragged-opt %s --split-input-file --ragged-split-dynamic-contractions=chunk=0 | FileCheck %s --check-prefix=OFF

// A weight gradient, dW = X^T dY over the packed tokens: both operands are
// zero-padded to whole chunks and viewed as [chunks, 16, ...], one batch
// contraction of static K writes a partial per chunk, and one reduction adds
// the partials into the accumulator.
// CHECK-DAG:   #[[$LHS:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d3, d2)>
// CHECK-DAG:   #[[$RHS:.*]] = affine_map<(d0, d1, d2, d3) -> (d3, d2, d1)>
// CHECK-DAG:   #[[$PART:.*]] = affine_map<(d0, d1, d2, d3) -> (d3, d0, d1)>
// CHECK-DAG:   #[[$SUMIN:.*]] = affine_map<(d0, d1, d2) -> (d2, d0, d1)>
// CHECK-DAG:   #[[$SUMOUT:.*]] = affine_map<(d0, d1, d2) -> (d0, d1)>
// CHECK-LABEL: func.func @weight_grad
// CHECK-SAME:    (%[[X:.*]]: tensor<8x?xf32>, %[[DY:.*]]: tensor<?x4xf32>, %[[ACC:.*]]: tensor<8x4xf32>)
// CHECK:         %[[K:.*]] = tensor.dim %[[X]], %c1
// CHECK:         %[[N:.*]] = arith.ceildivui %[[K]], %c16
// CHECK:         %[[WHOLE:.*]] = arith.muli %[[N]], %c16
// CHECK:         %[[HIGH:.*]] = arith.subi %[[WHOLE]], %[[K]]
// CHECK:         %[[XP:.*]] = tensor.pad %[[X]] low[0, 0] high[0, %[[HIGH]]]
// CHECK:         %[[XC:.*]] = tensor.expand_shape %[[XP]] {{\[}}[0], [1, 2]] output_shape [8, %[[N]], 16] : tensor<8x?xf32> into tensor<8x?x16xf32>
// CHECK:         %[[DP:.*]] = tensor.pad %[[DY]] low[0, 0] high[%[[HIGH]], 0]
// CHECK:         %[[DC:.*]] = tensor.expand_shape %[[DP]] {{\[}}[0, 1], [2]] output_shape [%[[N]], 16, 4] : tensor<?x4xf32> into tensor<?x16x4xf32>
// CHECK:         %[[E:.*]] = tensor.empty(%[[N]]) : tensor<?x8x4xf32>
// CHECK:         %[[Z:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%[[E]] : tensor<?x8x4xf32>)
// CHECK:         %[[P:.*]] = linalg.generic {indexing_maps = [#[[$LHS]], #[[$RHS]], #[[$PART]]], iterator_types = ["parallel", "parallel", "reduction", "parallel"]}
// CHECK-SAME:        ins(%[[XC]], %[[DC]] : tensor<8x?x16xf32>, tensor<?x16x4xf32>) outs(%[[Z]] : tensor<?x8x4xf32>)
// CHECK:           arith.mulf
// CHECK:           arith.addf
// CHECK:         %[[R:.*]] = linalg.generic {indexing_maps = [#[[$SUMIN]], #[[$SUMOUT]]], iterator_types = ["parallel", "parallel", "reduction"]}
// CHECK-SAME:        ins(%[[P]] : tensor<?x8x4xf32>) outs(%[[ACC]] : tensor<8x4xf32>)
// CHECK:           arith.addf
// CHECK:         return %[[R]]
// OFF-LABEL:   func.func @weight_grad
// OFF:           linalg.matmul
func.func @weight_grad(%x: tensor<8x?xf32>, %dy: tensor<?x4xf32>, %acc: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %r = linalg.matmul ins(%x, %dy : tensor<8x?xf32>, tensor<?x4xf32>) outs(%acc : tensor<8x4xf32>) -> tensor<8x4xf32>
  return %r : tensor<8x4xf32>
}

// -----

// A transposed operand in the indexing maps (K leading in both) splits the
// same way: K becomes (chunk, row) wherever it appears.
// CHECK-LABEL: func.func @transposed_maps
// CHECK:         tensor.expand_shape %{{.*}} {{\[}}[0, 1], [2]] output_shape [%{{.*}}, 16, 8] : tensor<?x8xf32> into tensor<?x16x8xf32>
// CHECK:         tensor.expand_shape %{{.*}} {{\[}}[0, 1], [2]] output_shape [%{{.*}}, 16, 4] : tensor<?x4xf32> into tensor<?x16x4xf32>
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction", "parallel"]
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction"]
func.func @transposed_maps(%x: tensor<?x8xf32>, %dy: tensor<?x4xf32>, %acc: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %r = linalg.generic {
      indexing_maps = [affine_map<(m, n, k) -> (k, m)>, affine_map<(m, n, k) -> (k, n)>, affine_map<(m, n, k) -> (m, n)>],
      iterator_types = ["parallel", "parallel", "reduction"]}
      ins(%x, %dy : tensor<?x8xf32>, tensor<?x4xf32>) outs(%acc : tensor<8x4xf32>) {
  ^bb0(%a: f32, %b: f32, %c: f32):
    %p = arith.mulf %a, %b : f32
    %s = arith.addf %c, %p : f32
    linalg.yield %s : f32
  } -> tensor<8x4xf32>
  return %r : tensor<8x4xf32>
}

// -----

// A transposed operand is read in place: the chunks view the transpose's
// source, and the transpose moves into the indexing map.
// CHECK-DAG:   #[[$XMAP:.*]] = affine_map<(d0, d1, d2, d3) -> (d3, d2, d0)>
// CHECK-LABEL: func.func @transposed_producer
// CHECK-SAME:    (%[[X:.*]]: tensor<?x8xf32>, %[[DY:.*]]: tensor<?x4xf32>
// CHECK:         %[[XP:.*]] = tensor.pad %[[X]] low[0, 0] high[%{{.*}}, 0]
// CHECK:         %[[XC:.*]] = tensor.expand_shape %[[XP]] {{\[}}[0, 1], [2]] output_shape [%{{.*}}, 16, 8] : tensor<?x8xf32> into tensor<?x16x8xf32>
// CHECK:         linalg.generic {indexing_maps = [#[[$XMAP]], {{.*}}ins(%[[XC]], %{{.*}} : tensor<?x16x8xf32>, tensor<?x16x4xf32>)
func.func @transposed_producer(%x: tensor<?x8xf32>, %dy: tensor<?x4xf32>, %acc: tensor<8x4xf32>) -> tensor<8x4xf32> {
  %c0 = arith.constant 0 : index
  %t = tensor.dim %x, %c0 : tensor<?x8xf32>
  %e = tensor.empty(%t) : tensor<8x?xf32>
  %xt = linalg.transpose ins(%x : tensor<?x8xf32>) outs(%e : tensor<8x?xf32>) permutation = [1, 0]
  %r = linalg.matmul ins(%xt, %dy : tensor<8x?xf32>, tensor<?x4xf32>) outs(%acc : tensor<8x4xf32>) -> tensor<8x4xf32>
  return %r : tensor<8x4xf32>
}

// -----

// Left alone: a static K, a dynamic M (the projection itself), a batch dim,
// and an integer contraction.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT:     tensor.pad
// CHECK-NOT:     tensor.expand_shape
// CHECK:         return
func.func @left_alone(%x: tensor<?x8xf32>, %w: tensor<8x4xf32>, %a: tensor<?x?xf32>, %b: tensor<?x4xf32>,
                      %p: tensor<2x8x?xf32>, %q: tensor<2x?x4xf32>, %i: tensor<8x?xi32>, %j: tensor<?x4xi32>)
    -> (tensor<?x4xf32>, tensor<?x4xf32>, tensor<2x8x4xf32>, tensor<8x4xi32>) {
  %c0 = arith.constant 0 : index
  %zero = arith.constant 0.0 : f32
  %izero = arith.constant 0 : i32
  %m = tensor.dim %x, %c0 : tensor<?x8xf32>
  %e0 = tensor.empty(%m) : tensor<?x4xf32>
  %i0 = linalg.fill ins(%zero : f32) outs(%e0 : tensor<?x4xf32>) -> tensor<?x4xf32>
  %r0 = linalg.matmul ins(%x, %w : tensor<?x8xf32>, tensor<8x4xf32>) outs(%i0 : tensor<?x4xf32>) -> tensor<?x4xf32>
  %n = tensor.dim %a, %c0 : tensor<?x?xf32>
  %e1 = tensor.empty(%n) : tensor<?x4xf32>
  %i1 = linalg.fill ins(%zero : f32) outs(%e1 : tensor<?x4xf32>) -> tensor<?x4xf32>
  %r1 = linalg.matmul ins(%a, %b : tensor<?x?xf32>, tensor<?x4xf32>) outs(%i1 : tensor<?x4xf32>) -> tensor<?x4xf32>
  %e2 = tensor.empty() : tensor<2x8x4xf32>
  %i2 = linalg.fill ins(%zero : f32) outs(%e2 : tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  %r2 = linalg.batch_matmul ins(%p, %q : tensor<2x8x?xf32>, tensor<2x?x4xf32>) outs(%i2 : tensor<2x8x4xf32>) -> tensor<2x8x4xf32>
  %e3 = tensor.empty() : tensor<8x4xi32>
  %i3 = linalg.fill ins(%izero : i32) outs(%e3 : tensor<8x4xi32>) -> tensor<8x4xi32>
  %r3 = linalg.matmul ins(%i, %j : tensor<8x?xi32>, tensor<?x4xi32>) outs(%i3 : tensor<8x4xi32>) -> tensor<8x4xi32>
  return %r0, %r1, %r2, %r3 : tensor<?x4xf32>, tensor<?x4xf32>, tensor<2x8x4xf32>, tensor<8x4xi32>
}

// -----

// A negative chunk is an error.
// RUN: not ragged-opt %s --split-input-file --ragged-split-dynamic-contractions=chunk=-1 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: chunk: expected 0 or more, got -1
