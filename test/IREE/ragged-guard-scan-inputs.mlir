// RUN: ragged-opt %s --allow-unregistered-dialect --ragged-guard-scan-inputs | FileCheck %s

// The input of a scan computed by an op is read behind a barrier, its
// dynamic size tied to the input's.
// CHECK-LABEL: func.func @computed_input
// CHECK:         %[[X:.*]] = linalg.generic
// CHECK:         %[[B:.*]] = "util.optimization_barrier"(%[[X]]) : (tensor<?xi64>) -> tensor<?xi64>
// CHECK:         %[[N:.*]] = tensor.dim %[[X]], %{{.*}} : tensor<?xi64>
// CHECK:         %[[T:.*]] = "flow.tensor.tie_shape"(%[[B]], %[[N]]) : (tensor<?xi64>, index) -> tensor<?xi64>
// CHECK:         "tm_tensor.scan"(%[[T]], %{{.*}}, %{{.*}})
func.func @computed_input(%a: tensor<?xi64>, %init: tensor<?xi64>, %acc: tensor<i64>) -> tensor<?xi64> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?xi64>
  %e = tensor.empty(%n) : tensor<?xi64>
  %x = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%a : tensor<?xi64>) outs(%e : tensor<?xi64>) {
  ^bb0(%v: i64, %o: i64):
    %m = arith.muli %v, %v : i64
    linalg.yield %m : i64
  } -> tensor<?xi64>
  %r:2 = "tm_tensor.scan"(%x, %init, %acc) <{dimension = 0 : i64, inclusive = true, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%p: i64, %q: i64):
    %s = arith.addi %p, %q : i64
    "tm_tensor.yield"(%s) : (i64) -> ()
  }) : (tensor<?xi64>, tensor<?xi64>, tensor<i64>) -> (tensor<?xi64>, tensor<i64>)
  return %r#0 : tensor<?xi64>
}

// An argument, a static input and a guarded input are left alone.
// CHECK-LABEL: func.func @left_alone
// CHECK-COUNT-1: "util.optimization_barrier"
// CHECK-NOT:     "util.optimization_barrier"
func.func @left_alone(%a: tensor<?xi64>, %s: tensor<4xi64>, %init: tensor<?xi64>, %init4: tensor<4xi64>, %acc: tensor<i64>) -> (tensor<?xi64>, tensor<4xi64>, tensor<?xi64>) {
  %c0 = arith.constant 0 : index
  %r:2 = "tm_tensor.scan"(%a, %init, %acc) <{dimension = 0 : i64, inclusive = true, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%p: i64, %q: i64):
    %x = arith.addi %p, %q : i64
    "tm_tensor.yield"(%x) : (i64) -> ()
  }) : (tensor<?xi64>, tensor<?xi64>, tensor<i64>) -> (tensor<?xi64>, tensor<i64>)
  %s2 = arith.addi %s, %s : tensor<4xi64>
  %t:2 = "tm_tensor.scan"(%s2, %init4, %acc) <{dimension = 0 : i64, inclusive = true, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%p: i64, %q: i64):
    %x = arith.addi %p, %q : i64
    "tm_tensor.yield"(%x) : (i64) -> ()
  }) : (tensor<4xi64>, tensor<4xi64>, tensor<i64>) -> (tensor<4xi64>, tensor<i64>)
  %n = tensor.dim %a, %c0 : tensor<?xi64>
  %b = "util.optimization_barrier"(%a) : (tensor<?xi64>) -> tensor<?xi64>
  %g = "flow.tensor.tie_shape"(%b, %n) : (tensor<?xi64>, index) -> tensor<?xi64>
  %u:2 = "tm_tensor.scan"(%g, %init, %acc) <{dimension = 0 : i64, inclusive = true, operandSegmentSizes = array<i32: 1, 2>}> ({
  ^bb0(%p: i64, %q: i64):
    %x = arith.addi %p, %q : i64
    "tm_tensor.yield"(%x) : (i64) -> ()
  }) : (tensor<?xi64>, tensor<?xi64>, tensor<i64>) -> (tensor<?xi64>, tensor<i64>)
  return %r#0, %t#0, %u#0 : tensor<?xi64>, tensor<4xi64>, tensor<?xi64>
}
