// RUN: ragged-opt %s --ragged-guard-integer-division | FileCheck %s

// A division and a remainder by a tensor element (torch's fmod) divide by
// 1 where the divisor is 0.
// CHECK-LABEL: func.func @fmod
// CHECK-DAG:     %[[ZERO:.*]] = arith.constant 0 : i64
// CHECK-DAG:     %[[ONE:.*]] = arith.constant 1 : i64
// CHECK:         %[[IS:.*]] = arith.cmpi eq, %[[B:.*]], %[[ZERO]] : i64
// CHECK:         %[[D:.*]] = arith.select %[[IS]], %[[ONE]], %[[B]] : i64
// CHECK:         arith.divsi %{{.*}}, %[[D]] : i64
// CHECK:         arith.select
// CHECK:         arith.remui
func.func @fmod(%a: tensor<?xi64>, %b: tensor<?xi64>) -> tensor<?xi64> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %a, %c0 : tensor<?xi64>
  %e = tensor.empty(%n) : tensor<?xi64>
  %r = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%a, %b : tensor<?xi64>, tensor<?xi64>) outs(%e : tensor<?xi64>) {
  ^bb0(%x: i64, %y: i64, %o: i64):
    %q = arith.divsi %x, %y : i64
    %m = arith.remui %q, %y : i64
    linalg.yield %m : i64
  } -> tensor<?xi64>
  return %r : tensor<?xi64>
}

// A constant divisor, and float division, are left alone.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT:     arith.select
// CHECK:         arith.divsi %{{.*}}, %{{.*}} : i32
// CHECK:         arith.divf
func.func @left_alone(%x: i32, %f: f32, %g: f32) -> (i32, f32) {
  %c3 = arith.constant 3 : i32
  %q = arith.divsi %x, %c3 : i32
  %h = arith.divf %f, %g : f32
  return %q, %h : i32, f32
}
