// RUN: ragged-opt %s --ragged-pad-splat-inserts --split-input-file | FileCheck %s

// Two inserts into one zero fill (the gradients of x[1:] and x[:, 1:]):
// each becomes a pad of its source with the fill's value.
// CHECK-LABEL: func.func @two_inserts_into_one_fill
// CHECK-SAME:    (%[[S:.*]]: tensor<?x?xf32>, %[[T:.*]]: tensor<?x?xf32>, %[[M:.*]]: index, %[[N:.*]]: index)
// CHECK-DAG:     %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NOT:     tensor.insert_slice
// CHECK:         %[[A:.*]] = tensor.pad %[[S]] low[1, 0] high[%{{.*}}, %{{.*}}]
// CHECK:           tensor.yield %[[Z]] : f32
// CHECK:         %[[B:.*]] = tensor.pad %[[T]] low[0, 1] high[%{{.*}}, %{{.*}}]
// CHECK:           tensor.yield %[[Z]] : f32
// CHECK:         return %[[A]], %[[B]]
func.func @two_inserts_into_one_fill(%s: tensor<?x?xf32>, %t: tensor<?x?xf32>, %m: index, %n: index)
    -> (tensor<?x?xf32>, tensor<?x?xf32>) {
  %c0 = arith.constant 0.0 : f32
  %c1 = arith.constant 1 : index
  %e = tensor.empty(%m, %n) : tensor<?x?xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
  %r = arith.subi %m, %c1 : index
  %c = arith.subi %n, %c1 : index
  %a = tensor.insert_slice %s into %z[1, 0] [%r, %n] [1, 1] : tensor<?x?xf32> into tensor<?x?xf32>
  %b = tensor.insert_slice %t into %z[0, 1] [%m, %c] [1, 1] : tensor<?x?xf32> into tensor<?x?xf32>
  return %a, %b : tensor<?x?xf32>, tensor<?x?xf32>
}

// -----

// A generic broadcasting a rank-0 tensor (torch-mlir's zeros_like) is one
// value too; the pad yields the element read from it.
// CHECK-LABEL: func.func @broadcast_scalar
// CHECK:         %[[V:.*]] = tensor.extract %{{.*}}[] : tensor<f32>
// CHECK:         tensor.pad
// CHECK:           tensor.yield %[[V]] : f32
// CHECK:         tensor.pad
func.func @broadcast_scalar(%s: tensor<2x3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>) {
  %cst = arith.constant dense<0.0> : tensor<f32>
  %e = tensor.empty() : tensor<4x3xf32>
  %z = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> ()>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]} ins(%cst : tensor<f32>) outs(%e : tensor<4x3xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<4x3xf32>
  %a = tensor.insert_slice %s into %z[0, 0] [2, 3] [1, 1] : tensor<2x3xf32> into tensor<4x3xf32>
  %b = tensor.insert_slice %s into %z[2, 0] [2, 3] [1, 1] : tensor<2x3xf32> into tensor<4x3xf32>
  return %a, %b : tensor<4x3xf32>, tensor<4x3xf32>
}

// -----

// Left alone: an insert into a fill used once, a strided insert, and an
// insert into a tensor of many values.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT:     tensor.pad
// CHECK-COUNT-4: tensor.insert_slice
func.func @left_alone(%s: tensor<2x3xf32>, %x: tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>) {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x3xf32>
  %once = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x3xf32>) -> tensor<4x3xf32>
  %a = tensor.insert_slice %s into %once[0, 0] [2, 3] [1, 1] : tensor<2x3xf32> into tensor<4x3xf32>
  %e2 = tensor.empty() : tensor<4x3xf32>
  %twice = linalg.fill ins(%c0 : f32) outs(%e2 : tensor<4x3xf32>) -> tensor<4x3xf32>
  %b = tensor.insert_slice %s into %twice[0, 0] [2, 3] [2, 1] : tensor<2x3xf32> into tensor<4x3xf32>
  %c = tensor.insert_slice %s into %x[0, 0] [2, 3] [1, 1] : tensor<2x3xf32> into tensor<4x3xf32>
  %d = tensor.insert_slice %s into %x[2, 0] [2, 3] [1, 1] : tensor<2x3xf32> into tensor<4x3xf32>
  return %a, %b, %c, %d : tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>
}
