// RUN: ragged-opt %s --ragged-fill-splats --split-input-file --allow-unregistered-dialect | FileCheck %s

// torch-mlir's zeros_like, updated in place by two inserts (the gradients
// of two slices): a broadcast of a rank-0 constant is a fill of its element.
// CHECK-LABEL: func.func @zeros_like
// CHECK-SAME:    (%[[N:.*]]: index, %[[S:.*]]: tensor<1x3xf32>)
// CHECK-DAG:     %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-DAG:     %[[E:.*]] = tensor.empty(%[[N]])
// CHECK-NOT:     linalg.generic
// CHECK:         %[[F:.*]] = linalg.fill ins(%[[Z]] : f32) outs(%[[E]] : tensor<?x3xf32>)
// CHECK:         tensor.insert_slice %[[S]] into %[[F]][0, 0]
// CHECK:         tensor.insert_slice %[[S]] into %[[F]][1, 0]
func.func @zeros_like(%n: index, %s: tensor<1x3xf32>) -> (tensor<?x3xf32>, tensor<?x3xf32>) {
  %cst = arith.constant dense<0.0> : tensor<f32>
  %e = tensor.empty(%n) : tensor<?x3xf32>
  %z = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> ()>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]} ins(%cst : tensor<f32>) outs(%e : tensor<?x3xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<?x3xf32>
  %a = tensor.insert_slice %s into %z[0, 0] [1, 3] [1, 1] : tensor<1x3xf32> into tensor<?x3xf32>
  %b = tensor.insert_slice %s into %z[1, 0] [1, 3] [1, 1] : tensor<1x3xf32> into tensor<?x3xf32>
  return %a, %b : tensor<?x3xf32>, tensor<?x3xf32>
}

// -----

// A rank-0 tensor computed at run time: the fill reads its element. A
// scalar operand, and a value from outside the body, fill as they are.
// Each is updated in place: by an insert, a linalg op and a scatter (an op
// of a dialect this context does not know: its last operand segment holds
// its outputs).
// CHECK-LABEL: func.func @scalars
// CHECK-SAME:    (%[[T:.*]]: tensor<i64>, %[[S:.*]]: f32, %[[C:.*]]: i1,
// CHECK:         %[[V:.*]] = tensor.extract %[[T]][] : tensor<i64>
// CHECK:         linalg.fill ins(%[[V]] : i64) outs(%{{.*}} : tensor<4xi64>)
// CHECK:         linalg.fill ins(%[[S]] : f32) outs(%{{.*}} : tensor<2x5xf32>)
// CHECK:         linalg.fill ins(%[[C]] : i1) outs(%{{.*}} : tensor<5x2xi1>)
// CHECK-NOT:     linalg.generic
func.func @scalars(%t: tensor<i64>, %s: f32, %c: i1, %u: tensor<2x5xf32>, %v: tensor<3xf32>, %i: tensor<3x2xi64>)
    -> (tensor<4xi64>, tensor<2x5xf32>, tensor<5x2xi1>) {
  %e = tensor.empty() : tensor<4xi64>
  %a = linalg.generic {indexing_maps = [affine_map<(d0) -> ()>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%t : tensor<i64>) outs(%e : tensor<4xi64>) {
  ^bb0(%in: i64, %out: i64):
    linalg.yield %in : i64
  } -> tensor<4xi64>
  %c7 = arith.constant 7 : i64
  %c1 = arith.constant 1 : index
  %a1 = tensor.insert %c7 into %a[%c1] : tensor<4xi64>
  %e2 = tensor.empty() : tensor<2x5xf32>
  %b = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> ()>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]} ins(%s : f32) outs(%e2 : tensor<2x5xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<2x5xf32>
  %b1 = linalg.add ins(%u, %u : tensor<2x5xf32>, tensor<2x5xf32>) outs(%b : tensor<2x5xf32>) -> tensor<2x5xf32>
  %e3 = tensor.empty() : tensor<5x2xi1>
  %d = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1, d0)>],
                       iterator_types = ["parallel", "parallel"]} outs(%e3 : tensor<5x2xi1>) {
  ^bb0(%out: i1):
    linalg.yield %c : i1
  } -> tensor<5x2xi1>
  %d1 = "tm_tensor.scatter"(%v, %i, %d) <{operandSegmentSizes = array<i32: 2, 1>}> : (tensor<3xf32>, tensor<3x2xi64>, tensor<5x2xi1>) -> tensor<5x2xi1>
  return %a1, %b1, %d1 : tensor<4xi64>, tensor<2x5xf32>, tensor<5x2xi1>
}

// -----

// Left alone: a broadcast of a tensor of many values, a generic that
// computes, one that yields its init, a reduction, and splats a scatter
// reads, directly or through a reshape (IREE clones a fill into the
// scatter's dispatch and cannot compile it there).
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT:     linalg.fill
// CHECK-COUNT-6: linalg.generic
func.func @left_alone(%v: tensor<3xf32>, %x: tensor<4x3xf32>, %s: f32, %i: tensor<4x1xi64>)
    -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4xf32>, tensor<4x3xf32>) {
  %e = tensor.empty() : tensor<4x3xf32>
  %a = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d1)>, affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]} ins(%v : tensor<3xf32>) outs(%e : tensor<4x3xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<4x3xf32>
  %b = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]} outs(%x : tensor<4x3xf32>) {
  ^bb0(%out: f32):
    %y = arith.addf %out, %s : f32
    linalg.yield %y : f32
  } -> tensor<4x3xf32>
  %c = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]} outs(%x : tensor<4x3xf32>) {
  ^bb0(%out: f32):
    linalg.yield %out : f32
  } -> tensor<4x3xf32>
  %e4 = tensor.empty() : tensor<4xf32>
  %d = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                       iterator_types = ["parallel", "reduction"]} ins(%x : tensor<4x3xf32>) outs(%e4 : tensor<4xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %s : f32
  } -> tensor<4xf32>
  %u = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]} outs(%e : tensor<4x3xf32>) {
  ^bb0(%out: f32):
    linalg.yield %s : f32
  } -> tensor<4x3xf32>
  %f = "tm_tensor.scatter"(%u, %i, %x) <{operandSegmentSizes = array<i32: 2, 1>}> : (tensor<4x3xf32>, tensor<4x1xi64>, tensor<4x3xf32>) -> tensor<4x3xf32>
  %w = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]} outs(%e : tensor<4x3xf32>) {
  ^bb0(%out: f32):
    linalg.yield %s : f32
  } -> tensor<4x3xf32>
  %w3 = tensor.expand_shape %w [[0], [1, 2]] output_shape [4, 1, 3] : tensor<4x3xf32> into tensor<4x1x3xf32>
  %g = "tm_tensor.scatter"(%w3, %i, %x) <{operandSegmentSizes = array<i32: 2, 1>}> : (tensor<4x1x3xf32>, tensor<4x1xi64>, tensor<4x3xf32>) -> tensor<4x3xf32>
  return %a, %b, %c, %d, %g : tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4xf32>, tensor<4x3xf32>
}

// -----

// A splat returned to the caller (a dense piece whose consumer lies in
// another function) is a fill too.
// CHECK-LABEL: func.func @returned
// CHECK:         %[[F:.*]] = linalg.fill
// CHECK:         return %[[F]]
func.func @returned(%n: index) -> tensor<?xi64> {
  %cst = arith.constant dense<3> : tensor<i64>
  %e = tensor.empty(%n) : tensor<?xi64>
  %z = linalg.generic {indexing_maps = [affine_map<(d0) -> ()>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%cst : tensor<i64>) outs(%e : tensor<?xi64>) {
  ^bb0(%in: i64, %out: i64):
    linalg.yield %in : i64
  } -> tensor<?xi64>
  return %z : tensor<?xi64>
}
