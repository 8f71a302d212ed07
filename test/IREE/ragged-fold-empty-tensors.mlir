// RUN: ragged-opt %s --allow-unregistered-dialect --ragged-fold-empty-tensors --split-input-file | FileCheck %s

// A weight gradient over no rows (a contraction of static extent 0) is its
// initial value; a reshape of rows without elements is an empty tensor.
// CHECK-LABEL: func.func @no_rows
// CHECK-SAME: (%[[X:.*]]: tensor<0x4xf32>, %[[DY:.*]]: tensor<0x8xf32>)
// CHECK: %[[Z:.*]] = linalg.fill
// CHECK-NOT: linalg.matmul
// CHECK-NOT: tensor.expand_shape
// CHECK: %[[V:.*]] = tensor.empty() : tensor<0x2x2xf32>
// CHECK: return %[[Z]], %[[V]]
func.func @no_rows(%x: tensor<0x4xf32>, %dy: tensor<0x8xf32>) -> (tensor<4x8xf32>, tensor<0x2x2xf32>) {
  %c0 = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<4x8xf32>
  %z = linalg.fill ins(%c0 : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
  %te = tensor.empty() : tensor<4x0xf32>
  %xt = linalg.transpose ins(%x : tensor<0x4xf32>) outs(%te : tensor<4x0xf32>) permutation = [1, 0]
  %g = linalg.matmul ins(%xt, %dy : tensor<4x0xf32>, tensor<0x8xf32>) outs(%z : tensor<4x8xf32>) -> tensor<4x8xf32>
  %v = tensor.expand_shape %x [[0], [1, 2]] output_shape [0, 2, 2] : tensor<0x4xf32> into tensor<0x2x2xf32>
  return %g, %v : tensor<4x8xf32>, tensor<0x2x2xf32>
}

// -----

// An elementwise op over no rows returns its init.
// CHECK-LABEL: func.func @elementwise
// CHECK-NOT: linalg.generic
// CHECK: %[[E:.*]] = tensor.empty() : tensor<0x4xf32>
// CHECK: return %[[E]]
func.func @elementwise(%x: tensor<0x4xf32>) -> tensor<0x4xf32> {
  %e = tensor.empty() : tensor<0x4xf32>
  %r = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%x : tensor<0x4xf32>) outs(%e : tensor<0x4xf32>) {
  ^bb0(%in: f32, %out: f32):
    %s = math.exp %in : f32
    linalg.yield %s : f32
  } -> tensor<0x4xf32>
  return %r : tensor<0x4xf32>
}

// -----

// A concatenation skips operands without rows along its dim (through
// casts); with none left with rows, the first stays.
// CHECK-LABEL: func.func @concat
// CHECK-SAME: (%[[A:.*]]: tensor<?x4xf32>, %[[B:.*]]: tensor<0x4xf32>, %[[C:.*]]: tensor<?x4xf32>)
// CHECK: %[[AC:.*]] = tensor.concat dim(0) %[[A]], %[[C]] : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
// CHECK: %[[E:.*]] = tensor.empty() : tensor<0x4xf32>
// CHECK: %[[EC:.*]] = tensor.cast %[[E]] : tensor<0x4xf32> to tensor<?x4xf32>
// CHECK: return %[[AC]], %[[EC]]
func.func @concat(%a: tensor<?x4xf32>, %b: tensor<0x4xf32>, %c: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<?x4xf32>) {
  %bc = tensor.cast %b : tensor<0x4xf32> to tensor<?x4xf32>
  %r = tensor.concat dim(0) %a, %bc, %c : (tensor<?x4xf32>, tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  %e = tensor.empty() : tensor<0x4xf32>
  %ec = tensor.cast %e : tensor<0x4xf32> to tensor<?x4xf32>
  %none = tensor.concat dim(0) %ec, %bc : (tensor<?x4xf32>, tensor<?x4xf32>) -> tensor<?x4xf32>
  return %r, %none : tensor<?x4xf32>, tensor<?x4xf32>
}

// -----

// Left alone: a size of 0 known only at run time, an op with side effects
// (or one unknown here), and a constant.
// CHECK-LABEL: func.func @kept
// CHECK-DAG: arith.constant dense<>
// CHECK-DAG: linalg.matmul
// CHECK-DAG: "unknown.op"
func.func @kept(%x: tensor<?x4xf32>, %w: tensor<4x8xf32>) -> (tensor<?x8xf32>, tensor<0xf32>, tensor<0xf32>) {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?x4xf32>
  %e = tensor.empty(%n) : tensor<?x8xf32>
  %r = linalg.matmul ins(%x, %w : tensor<?x4xf32>, tensor<4x8xf32>) outs(%e : tensor<?x8xf32>) -> tensor<?x8xf32>
  %u = "unknown.op"() : () -> tensor<0xf32>
  %k = arith.constant dense<> : tensor<0xf32>
  return %r, %u, %k : tensor<?x8xf32>, tensor<0xf32>, tensor<0xf32>
}
