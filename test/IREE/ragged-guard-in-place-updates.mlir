// RUN: ragged-opt %s --ragged-guard-in-place-updates --split-input-file --allow-unregistered-dialect | FileCheck %s

// An arange updated in place by two inserts reads a false behind a barrier
// and selects its yield on it: its dispatch has an operand, so IREE copies
// it for each insert.
// CHECK-LABEL: func.func @arange_inserted_twice
// CHECK:         %[[NO:.*]] = arith.constant false
// CHECK:         %[[F:.*]] = linalg.fill ins(%[[NO]] : i1) outs(%{{.*}} : tensor<i1>)
// CHECK:         %[[H:.*]] = "util.optimization_barrier"(%[[F]]) : (tensor<i1>) -> tensor<i1>
// CHECK:         %[[A:.*]] = linalg.generic {{.*}} ins(%[[H]] : tensor<i1>)
// CHECK-NEXT:    ^bb0(%[[K:.*]]: i1, %{{.*}}: f32):
// CHECK:           %[[V:.*]] = arith.sitofp
// CHECK:           %[[Z:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:           %[[R:.*]] = arith.select %[[K]], %[[Z]], %[[V]] : f32
// CHECK:           linalg.yield %[[R]] : f32
// CHECK:         tensor.insert_slice %{{.*}} into %[[A]][0]
// CHECK:         tensor.insert_slice %{{.*}} into %[[A]][3]
func.func @arange_inserted_twice(%u: tensor<2xf32>) -> (tensor<6xf32>, tensor<6xf32>) {
  %e = tensor.empty() : tensor<6xf32>
  %a = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      outs(%e : tensor<6xf32>) {
  ^bb0(%out: f32):
    %i = linalg.index 0 : index
    %c = arith.index_cast %i : index to i64
    %f = arith.sitofp %c : i64 to f32
    linalg.yield %f : f32
  } -> tensor<6xf32>
  %x = tensor.insert_slice %u into %a[0] [2] [1] : tensor<2xf32> into tensor<6xf32>
  %y = tensor.insert_slice %u into %a[3] [2] [1] : tensor<2xf32> into tensor<6xf32>
  return %x, %y : tensor<6xf32>, tensor<6xf32>
}

// -----

// The tree counts: an arange doubled by a second generic, reshaped, is the
// output of a scatter (an op this context does not know; outputs last).
// Only the generic the scatter's output comes from reads the barrier.
// CHECK-LABEL: func.func @doubled_arange_scattered
// CHECK:         %[[A:.*]] = linalg.generic {{.*}} outs(
// CHECK:         %[[H:.*]] = "util.optimization_barrier"
// CHECK:         %[[D:.*]] = linalg.generic {{.*}} ins(%[[A]], %[[H]] : tensor<?xf32>, tensor<i1>)
// CHECK:         %[[R:.*]] = tensor.expand_shape %[[D]]
// CHECK:         "tm_tensor.scatter"(%{{.*}}, %{{.*}}, %[[R]])
func.func @doubled_arange_scattered(%n: index, %u: tensor<2x1xf32>, %i: tensor<2x1xi64>) -> tensor<?x1xf32> {
  %e = tensor.empty(%n) : tensor<?xf32>
  %a = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      outs(%e : tensor<?xf32>) {
  ^bb0(%out: f32):
    %k = linalg.index 0 : index
    %c = arith.index_cast %k : index to i64
    %f = arith.sitofp %c : i64 to f32
    linalg.yield %f : f32
  } -> tensor<?xf32>
  %d = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%a : tensor<?xf32>) outs(%e : tensor<?xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.addf %in, %in : f32
    linalg.yield %t : f32
  } -> tensor<?xf32>
  %r = tensor.expand_shape %d [[0, 1]] output_shape [%n, 1] : tensor<?xf32> into tensor<?x1xf32>
  %s = "tm_tensor.scatter"(%u, %i, %r) <{operandSegmentSizes = array<i32: 2, 1>}> ({
  ^bb0(%x: f32, %y: f32):
    %sum = arith.addf %x, %y : f32
    "tm_tensor.yield"(%sum) : (f32) -> ()
  }) : (tensor<2x1xf32>, tensor<2x1xi64>, tensor<?x1xf32>) -> tensor<?x1xf32>
  return %s : tensor<?x1xf32>
}

// -----

// Left alone: a fill (IREE copies splats itself), a generic over an
// argument, a generic whose body reads an argument, a computed tensor that
// is only read (the scatter's updates), and a linalg init its body does
// not read.
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT:     util.optimization_barrier
func.func @left_alone(%x: tensor<6xf32>, %u: tensor<6xf32>, %i: tensor<6x1xi64>) -> (tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>) {
  %cst = arith.constant 0.0 : f32
  %e = tensor.empty() : tensor<6xf32>
  %z = linalg.fill ins(%cst : f32) outs(%e : tensor<6xf32>) -> tensor<6xf32>
  %a = tensor.insert_slice %x into %z[0] [6] [1] : tensor<6xf32> into tensor<6xf32>
  %g = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%x : tensor<6xf32>) outs(%e : tensor<6xf32>) {
  ^bb0(%in: f32, %out: f32):
    %t = arith.addf %in, %in : f32
    linalg.yield %t : f32
  } -> tensor<6xf32>
  %b = tensor.insert_slice %u into %g[0] [6] [1] : tensor<6xf32> into tensor<6xf32>
  %h = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      outs(%e : tensor<6xf32>) {
  ^bb0(%out: f32):
    %k = linalg.index 0 : index
    %v = tensor.extract %x[%k] : tensor<6xf32>
    linalg.yield %v : f32
  } -> tensor<6xf32>
  %c = tensor.insert_slice %u into %h[0] [6] [1] : tensor<6xf32> into tensor<6xf32>
  %w = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      outs(%e : tensor<6xf32>) {
  ^bb0(%out: f32):
    %k = linalg.index 0 : index
    %c1 = arith.index_cast %k : index to i64
    %f = arith.sitofp %c1 : i64 to f32
    linalg.yield %f : f32
  } -> tensor<6xf32>
  %s = "tm_tensor.scatter"(%w, %i, %z) <{operandSegmentSizes = array<i32: 2, 1>}> ({
  ^bb0(%p: f32, %q: f32):
    "tm_tensor.yield"(%p) : (f32) -> ()
  }) : (tensor<6xf32>, tensor<6x1xi64>, tensor<6xf32>) -> tensor<6xf32>
  %o = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
                       iterator_types = ["parallel"]} ins(%x : tensor<6xf32>) outs(%w : tensor<6xf32>) {
  ^bb0(%in: f32, %out: f32):
    linalg.yield %in : f32
  } -> tensor<6xf32>
  return %a, %b, %c, %s : tensor<6xf32>, tensor<6xf32>, tensor<6xf32>, tensor<6xf32>
}

// -----

// A scatter whose updates view the tensor it updates (`x.index_add(0, i,
// x[:2])`) reads them through a barrier: IREE fused the slice into the
// scatter's dispatch, which read rows it had already written. Indices from
// elsewhere are left alone.
// CHECK-LABEL: func.func @updates_view_the_destination
// CHECK:         %[[S:.*]] = tensor.extract_slice %arg0[0] [2] [1]
// CHECK:         %[[E:.*]] = tensor.expand_shape %[[S]]
// CHECK:         %[[H:.*]] = "util.optimization_barrier"(%[[E]]) : (tensor<2x1xf32>) -> tensor<2x1xf32>
// CHECK-NOT:     util.optimization_barrier
// CHECK:         "tm_tensor.scatter"(%[[H]], %arg1, %arg0)
func.func @updates_view_the_destination(%x: tensor<?xf32>, %i: tensor<2x1xi64>) -> tensor<?xf32> {
  %s = tensor.extract_slice %x[0] [2] [1] : tensor<?xf32> to tensor<2xf32>
  %u = tensor.expand_shape %s [[0, 1]] output_shape [2, 1] : tensor<2xf32> into tensor<2x1xf32>
  %y = "tm_tensor.scatter"(%u, %i, %x) <{operandSegmentSizes = array<i32: 2, 1>}> ({
  ^bb0(%a: f32, %b: f32):
    %sum = arith.addf %a, %b : f32
    "tm_tensor.yield"(%sum) : (f32) -> ()
  }) : (tensor<2x1xf32>, tensor<2x1xi64>, tensor<?xf32>) -> tensor<?xf32>
  return %y : tensor<?xf32>
}

// -----

// The barrier's dynamic sizes are tied to its input's.
// CHECK-LABEL: func.func @dynamic_updates
// CHECK:         %[[S:.*]] = tensor.extract_slice %arg0[0, 0] [2, %{{.*}}] [1, 1]
// CHECK:         %[[H:.*]] = "util.optimization_barrier"(%[[S]]) : (tensor<2x?xf32>) -> tensor<2x?xf32>
// CHECK:         %[[N:.*]] = tensor.dim %[[S]], %c1
// CHECK:         %[[T:.*]] = "flow.tensor.tie_shape"(%[[H]], %[[N]]) : (tensor<2x?xf32>, index) -> tensor<2x?xf32>
// CHECK:         tensor.insert_slice %[[T]] into %arg0[1, 0]
func.func @dynamic_updates(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %c1 = arith.constant 1 : index
  %n = tensor.dim %x, %c1 : tensor<?x?xf32>
  %s = tensor.extract_slice %x[0, 0] [2, %n] [1, 1] : tensor<?x?xf32> to tensor<2x?xf32>
  %y = tensor.insert_slice %s into %x[1, 0] [2, %n] [1, 1] : tensor<2x?xf32> into tensor<?x?xf32>
  return %y : tensor<?x?xf32>
}

// -----

// A sort whose sorted values nothing reads (`torch.sort(x)[1]`) keeps them
// through a barrier: IREE put its copy of them in a stack allocation, which
// a dynamic size cannot bound. A sort whose results are all read is left
// alone.
// CHECK-LABEL: func.func @indices_of_a_sort
// CHECK:         %[[S:.*]]:2 = "tm_tensor.sort"(%arg0, %arg1)
// CHECK:         "util.optimization_barrier"(%[[S]]#0) : (tensor<?x?xf32>) -> tensor<?x?xf32>
// CHECK:         return %[[S]]#1
// CHECK-LABEL: func.func @values_and_indices_of_a_sort
// CHECK-NOT:     util.optimization_barrier
func.func @indices_of_a_sort(%x: tensor<?x?xf32>, %i: tensor<?x?xi64>) -> tensor<?x?xi64> {
  %s:2 = "tm_tensor.sort"(%x, %i) <{dimension = 1 : i64, operandSegmentSizes = array<i32: 0, 2>}> ({
  ^bb0(%a: f32, %b: f32, %c: i64, %d: i64):
    %le = arith.cmpf ole, %a, %b : f32
    "tm_tensor.yield"(%le) : (i1) -> ()
  }) : (tensor<?x?xf32>, tensor<?x?xi64>) -> (tensor<?x?xf32>, tensor<?x?xi64>)
  return %s#1 : tensor<?x?xi64>
}
func.func @values_and_indices_of_a_sort(%x: tensor<?x?xf32>, %i: tensor<?x?xi64>) -> (tensor<?x?xf32>, tensor<?x?xi64>) {
  %s:2 = "tm_tensor.sort"(%x, %i) <{dimension = 1 : i64, operandSegmentSizes = array<i32: 0, 2>}> ({
  ^bb0(%a: f32, %b: f32, %c: i64, %d: i64):
    %le = arith.cmpf ole, %a, %b : f32
    "tm_tensor.yield"(%le) : (i1) -> ()
  }) : (tensor<?x?xf32>, tensor<?x?xi64>) -> (tensor<?x?xf32>, tensor<?x?xi64>)
  return %s#0, %s#1 : tensor<?x?xf32>, tensor<?x?xi64>
}

// -----

// IREE's attention writes only its init: a causal mask computed from
// indices alone is an input and stays as it is (a barrier would keep IREE
// from cloning it into each attention's dispatch), while a constant init
// is guarded like any in-place destination.
// CHECK-LABEL: func.func @attention_mask_is_read
// CHECK-NOT:     util.optimization_barrier
// CHECK:         %[[M:.*]] = linalg.generic
// CHECK-NOT:     util.optimization_barrier
// CHECK:         "iree_linalg_ext.attention"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[M]], %[[O:.*]])
// CHECK-LABEL: func.func @attention_init_is_written
// CHECK:         "util.optimization_barrier"
// CHECK:         %[[O:.*]] = linalg.generic
// CHECK:         "iree_linalg_ext.attention"(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %[[O]])
func.func @attention_mask_is_read(%q: tensor<2x16x4xf32>, %o: tensor<2x16x4xf32>) -> tensor<2x16x4xf32> {
  %s = arith.constant 0.5 : f32
  %e = tensor.empty() : tensor<16x16xi1>
  %m = linalg.generic {indexing_maps = [affine_map<(d0, d1) -> (d0, d1)>], iterator_types = ["parallel", "parallel"]}
      outs(%e : tensor<16x16xi1>) {
  ^bb0(%out: i1):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %c = arith.cmpi ule, %j, %i : index
    linalg.yield %c : i1
  } -> tensor<16x16xi1>
  %r = "iree_linalg_ext.attention"(%q, %q, %q, %s, %m, %o) : (tensor<2x16x4xf32>, tensor<2x16x4xf32>, tensor<2x16x4xf32>, f32, tensor<16x16xi1>, tensor<2x16x4xf32>) -> tensor<2x16x4xf32>
  return %r : tensor<2x16x4xf32>
}
func.func @attention_init_is_written(%q: tensor<2x16x4xf32>) -> tensor<2x16x4xf32> {
  %s = arith.constant 0.5 : f32
  %e = tensor.empty() : tensor<2x16x4xf32>
  %o = linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1, d2)>], iterator_types = ["parallel", "parallel", "parallel"]}
      outs(%e : tensor<2x16x4xf32>) {
  ^bb0(%out: f32):
    %i = linalg.index 1 : index
    %c = arith.index_cast %i : index to i32
    %f = arith.sitofp %c : i32 to f32
    linalg.yield %f : f32
  } -> tensor<2x16x4xf32>
  %r = "iree_linalg_ext.attention"(%q, %q, %q, %s, %o) : (tensor<2x16x4xf32>, tensor<2x16x4xf32>, tensor<2x16x4xf32>, f32, tensor<2x16x4xf32>) -> tensor<2x16x4xf32>
  return %r : tensor<2x16x4xf32>
}
