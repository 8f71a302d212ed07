// RUN: ragged-opt %s --allow-unregistered-dialect --ragged-guard-splat-reductions | FileCheck %s

// The row sums of a fill read its scalar broadcast from a rank-0 tensor
// behind a barrier (IREE 3.13 added the scalar once per vector); the
// accumulator's fill, an init, stays.
// CHECK-LABEL: func.func @row_sums_of_ones
// CHECK:         %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK:         %[[E:.*]] = tensor.empty
// CHECK:         linalg.fill ins(%[[ONE]] : f32) outs(%[[E]] : tensor<?x?xf32>)
// CHECK:         %[[ACC:.*]] = linalg.fill
// CHECK:         %[[T:.*]] = tensor.from_elements %[[ONE]] : tensor<f32>
// CHECK:         %[[H:.*]] = "util.optimization_barrier"(%[[T]]) : (tensor<f32>) -> tensor<f32>
// CHECK:         %[[B:.*]] = linalg.generic {{.*}} ins(%[[H]] : tensor<f32>) outs(%[[E]] : tensor<?x?xf32>)
// CHECK-NEXT:    ^bb0(%[[IN:.*]]: f32, %{{.*}}: f32):
// CHECK-NEXT:      linalg.yield %[[IN]] : f32
// CHECK:         linalg.generic {{.*}} ins(%[[B]] : tensor<?x?xf32>) outs(%[[ACC]] : tensor<?xf32>)
func.func @row_sums_of_ones(%n: index, %m: index) -> tensor<?xf32> {
  %one = arith.constant 1.0 : f32
  %zero = arith.constant 0.0 : f32
  %e = tensor.empty(%n, %m) : tensor<?x?xf32>
  %f = linalg.fill ins(%one : f32) outs(%e : tensor<?x?xf32>) -> tensor<?x?xf32>
  %a = tensor.empty(%n) : tensor<?xf32>
  %acc = linalg.fill ins(%zero : f32) outs(%a : tensor<?xf32>) -> tensor<?xf32>
  %s = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0)>],
                       iterator_types = ["parallel", "reduction"]}
      ins(%f : tensor<?x?xf32>) outs(%acc : tensor<?xf32>) {
  ^bb0(%in: f32, %out: f32):
    %sum = arith.addf %in, %out : f32
    linalg.yield %sum : f32
  } -> tensor<?xf32>
  return %s : tensor<?xf32>
}

// A static fill read by a named reduction, and a fill an elementwise
// generic reads, which is left alone.
// CHECK-LABEL: func.func @static_and_parallel
// CHECK:         %[[E:.*]] = tensor.empty() : tensor<5x5xi64>
// CHECK:         %[[F:.*]] = linalg.fill ins(%{{.*}} : i64) outs(%[[E]] : tensor<5x5xi64>)
// CHECK:         "util.optimization_barrier"
// CHECK:         %[[B:.*]] = linalg.generic {{.*}} outs(%[[E]] : tensor<5x5xi64>)
// CHECK:         linalg.reduce ins(%[[B]] : tensor<5x5xi64>)
// CHECK-NOT:     util.optimization_barrier
// CHECK:         linalg.generic {{.*}} ins(%[[F]], %arg0 : tensor<5x5xi64>, tensor<5x5xi64>)
func.func @static_and_parallel(%x: tensor<5x5xi64>) -> (tensor<5xi64>, tensor<5x5xi64>) {
  %one = arith.constant 1 : i64
  %zero = arith.constant 0 : i64
  %e = tensor.empty() : tensor<5x5xi64>
  %f = linalg.fill ins(%one : i64) outs(%e : tensor<5x5xi64>) -> tensor<5x5xi64>
  %a = tensor.empty() : tensor<5xi64>
  %acc = linalg.fill ins(%zero : i64) outs(%a : tensor<5xi64>) -> tensor<5xi64>
  %s = linalg.reduce ins(%f : tensor<5x5xi64>) outs(%acc : tensor<5xi64>) dimensions = [1]
    (%in: i64, %out: i64) {
      %sum = arith.addi %in, %out : i64
      linalg.yield %sum : i64
    }
  %p = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>, affine_map<(d0, d1) -> (d0, d1)>,
                                        affine_map<(d0, d1) -> (d0, d1)>],
                       iterator_types = ["parallel", "parallel"]}
      ins(%f, %x : tensor<5x5xi64>, tensor<5x5xi64>) outs(%e : tensor<5x5xi64>) {
  ^bb0(%a0: i64, %b0: i64, %out: i64):
    %sum = arith.addi %a0, %b0 : i64
    linalg.yield %sum : i64
  } -> tensor<5x5xi64>
  return %s, %p : tensor<5xi64>, tensor<5x5xi64>
}
