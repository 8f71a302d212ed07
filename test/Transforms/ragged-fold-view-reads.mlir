// RUN: ragged-opt %s --allow-unregistered-dialect --ragged-fold-view-reads --canonicalize --split-input-file | FileCheck %s

// A read of a column slice reshaped to heads reads the sliced tensor at
// column 384 + h * 32 + c: no slice or reshape is left to copy.
// CHECK-LABEL: func.func @slice_then_expand
// CHECK-SAME:    (%[[QKV:.*]]: tensor<?x1152xf32>, %[[R:.*]]: index, %[[H:.*]]: index, %[[C:.*]]: index)
// CHECK-NOT:     tensor.extract_slice
// CHECK-NOT:     tensor.expand_shape
// CHECK-DAG:     %[[C32:.*]] = arith.constant 32 : index
// CHECK-DAG:     %[[C384:.*]] = arith.constant 384 : index
// CHECK:         %[[HD:.*]] = arith.muli %[[H]], %[[C32]] : index
// CHECK:         %[[HC:.*]] = arith.addi %[[HD]], %[[C]] : index
// CHECK:         %[[COL:.*]] = arith.addi %[[HC]], %[[C384]] : index
// CHECK:         %[[X:.*]] = tensor.extract %[[QKV]][%[[R]], %[[COL]]] : tensor<?x1152xf32>
// CHECK:         return %[[X]]
func.func @slice_then_expand(%qkv: tensor<?x1152xf32>, %r: index, %h: index, %c: index) -> f32 {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %qkv, %c0 : tensor<?x1152xf32>
  %k = tensor.extract_slice %qkv[0, 384] [%n, 384] [1, 1] : tensor<?x1152xf32> to tensor<?x384xf32>
  %kh = tensor.expand_shape %k [[0], [1, 2]] output_shape [%n, 12, 32] : tensor<?x384xf32> into tensor<?x12x32xf32>
  %x = tensor.extract %kh[%r, %h, %c] : tensor<?x12x32xf32>
  return %x : f32
}

// Inside a gather's body too, with a dynamic expanded size, a strided
// slice and a dim the slice drops (read at its offset).
// CHECK-LABEL: func.func @in_a_gather
// CHECK-SAME:    (%[[SRC:.*]]: tensor<8x?x10xf32>, %[[ROWS:.*]]: tensor<4xindex>, %[[N:.*]]: index, %[[D:.*]]: index)
// CHECK-NOT:     tensor.extract_slice
// CHECK-NOT:     tensor.expand_shape
// CHECK:         linalg.generic
// CHECK:           %[[I:.*]] = linalg.index 1 : index
// CHECK:           %[[ROW:.*]] = tensor.extract %[[ROWS]]
// CHECK:           %[[IS:.*]] = arith.muli %[[ROW]], %[[D]] : index
// CHECK:           %[[J:.*]] = arith.addi %[[IS]], %[[I]] : index
// CHECK:           %[[J2:.*]] = arith.muli %[[J]], %{{.*}} : index
// CHECK:           %[[COL:.*]] = arith.addi %[[J2]], %{{.*}} : index
// CHECK:           tensor.extract %[[SRC]][%{{.*}}, %{{.*}}, %[[COL]]] : tensor<8x?x10xf32>
func.func @in_a_gather(%src: tensor<8x?x10xf32>, %rows: tensor<4xindex>, %n: index, %d: index) -> tensor<4x?xf32> {
  // Row 3, the n odd columns of the last dim, seen as [n / d, d].
  %s = tensor.extract_slice %src[3, 0, 1] [1, 1, %n] [1, 1, 2] : tensor<8x?x10xf32> to tensor<?xf32>
  %blocks = arith.divui %n, %d : index
  %v = tensor.expand_shape %s [[0, 1]] output_shape [%blocks, %d] : tensor<?xf32> into tensor<?x?xf32>
  %init = tensor.empty(%d) : tensor<4x?xf32>
  %g = linalg.generic {indexing_maps = [affine_map<(i, j) -> (i, j)>], iterator_types = ["parallel", "parallel"]}
      outs(%init : tensor<4x?xf32>) {
  ^bb0(%out: f32):
    %i = linalg.index 0 : index
    %j = linalg.index 1 : index
    %row = tensor.extract %rows[%i] : tensor<4xindex>
    %x = tensor.extract %v[%row, %j] : tensor<?x?xf32>
    linalg.yield %x : f32
  } -> tensor<4x?xf32>
  return %g : tensor<4x?xf32>
}

// A column slice collapsed to a vector (scatter_add's source x[:4, 0]):
// the read goes to the sliced tensor at column 0 (IREE's CPU backend read
// every element of the collapsed slice at its first).
// CHECK-LABEL: func.func @collapsed_column
// CHECK-SAME:    (%[[X:.*]]: tensor<?x?xf32>, %[[I:.*]]: index)
// CHECK-NOT:     tensor.extract_slice
// CHECK-NOT:     tensor.collapse_shape
// CHECK:         %[[C0:.*]] = arith.constant 0 : index
// CHECK:         tensor.extract %[[X]][%[[I]], %[[C0]]] : tensor<?x?xf32>
func.func @collapsed_column(%x: tensor<?x?xf32>, %i: index) -> f32 {
  %col = tensor.extract_slice %x[0, 0] [4, 1] [1, 1] : tensor<?x?xf32> to tensor<4x1xf32>
  %v = tensor.collapse_shape %col [[0, 1]] : tensor<4x1xf32> into tensor<4xf32>
  %e = tensor.extract %v[%i] : tensor<4xf32>
  return %e : f32
}

// A group of unit dims only is read at its last; a group of two sizes
// other than 1 would need a division per read and is left alone.
// CHECK-LABEL: func.func @collapse_groups
// CHECK-SAME:    (%[[X:.*]]: tensor<1x1x?xf32>, %[[Y:.*]]: tensor<?x3xf32>, %[[I:.*]]: index)
// CHECK:         %[[C0:.*]] = arith.constant 0 : index
// CHECK:         tensor.extract %[[X]][%[[C0]], %[[C0]], %[[I]]] : tensor<1x1x?xf32>
// CHECK:         %[[F:.*]] = tensor.collapse_shape %[[Y]]
// CHECK:         tensor.extract %[[F]][%[[I]]]
func.func @collapse_groups(%x: tensor<1x1x?xf32>, %y: tensor<?x3xf32>, %i: index) -> (f32, f32) {
  %v = tensor.collapse_shape %x [[0, 1], [2]] : tensor<1x1x?xf32> into tensor<1x?xf32>
  %c0 = arith.constant 0 : index
  %e = tensor.extract %v[%c0, %i] : tensor<1x?xf32>
  %f = tensor.collapse_shape %y [[0, 1]] : tensor<?x3xf32> into tensor<?xf32>
  %g = tensor.extract %f[%i] : tensor<?xf32>
  return %e, %g : f32, f32
}

// A read of a value that is no view is left alone.
// CHECK-LABEL: func.func @no_view
// CHECK:         tensor.extract %arg0[%arg1] : tensor<?xf32>
func.func @no_view(%x: tensor<?xf32>, %i: index) -> f32 {
  %y = tensor.extract %x[%i] : tensor<?xf32>
  return %y : f32
}

// -----

// The views of a dense piece meet their reader once its call is inlined;
// the function, left without a call, goes.
// CHECK-NOT:     func.func private @project
// CHECK-LABEL: func.func @across_a_call
// CHECK-NOT:     call
// CHECK:         %[[P:.*]] = linalg.matmul
// CHECK:         tensor.extract %[[P]][%{{.*}}, %{{.*}}] : tensor<?x96xf32>
func.func private @project(%x: tensor<?x16xf32>, %w: tensor<16x96xf32>) -> tensor<?x4x8xf32> {
  %c0 = arith.constant 0 : index
  %cst = arith.constant 0.0 : f32
  %n = tensor.dim %x, %c0 : tensor<?x16xf32>
  %init = tensor.empty(%n) : tensor<?x96xf32>
  %zero = linalg.fill ins(%cst : f32) outs(%init : tensor<?x96xf32>) -> tensor<?x96xf32>
  %p = linalg.matmul ins(%x, %w : tensor<?x16xf32>, tensor<16x96xf32>) outs(%zero : tensor<?x96xf32>) -> tensor<?x96xf32>
  %k = tensor.extract_slice %p[0, 32] [%n, 32] [1, 1] : tensor<?x96xf32> to tensor<?x32xf32>
  %kh = tensor.expand_shape %k [[0], [1, 2]] output_shape [%n, 4, 8] : tensor<?x32xf32> into tensor<?x4x8xf32>
  return %kh : tensor<?x4x8xf32>
}
func.func @across_a_call(%x: tensor<?x16xf32>, %w: tensor<16x96xf32>, %r: index, %h: index, %c: index) -> f32 {
  %kh = call @project(%x, %w) : (tensor<?x16xf32>, tensor<16x96xf32>) -> tensor<?x4x8xf32>
  %y = tensor.extract %kh[%r, %h, %c] : tensor<?x4x8xf32>
  return %y : f32
}

// -----

// A piece holding an unregistered op (torch-mlir's scatter) is inlined as
// well: the column view another piece returns then meets its read there,
// which IREE would otherwise see as the read of a collapsed column.
// CHECK-NOT:     func.func private @column
// CHECK-NOT:     func.func private @scatter
// CHECK-LABEL: func.func @column_into_a_scatter
// CHECK-NOT:     call
// CHECK:         linalg.generic
// CHECK:           tensor.extract %arg0[%{{.*}}, %c2] : tensor<?x3xf32>
// CHECK:         "tm_tensor.scatter"
func.func private @column(%x: tensor<?x3xf32>) -> tensor<?xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %x, %c0 : tensor<?x3xf32>
  %s = tensor.extract_slice %x[0, 2] [%n, 1] [1, 1] : tensor<?x3xf32> to tensor<?x1xf32>
  %c = tensor.collapse_shape %s [[0, 1]] : tensor<?x1xf32> into tensor<?xf32>
  return %c : tensor<?xf32>
}
func.func private @scatter(%v: tensor<?xf32>, %i: tensor<?x1xi64>, %into: tensor<10xf32>) -> tensor<10xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %i, %c0 : tensor<?x1xi64>
  %init = tensor.empty(%n) : tensor<?xf32>
  %u = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>], iterator_types = ["parallel"]}
      outs(%init : tensor<?xf32>) {
  ^bb0(%out: f32):
    %r = linalg.index 0 : index
    %e = tensor.extract %v[%r] : tensor<?xf32>
    linalg.yield %e : f32
  } -> tensor<?xf32>
  %y = "tm_tensor.scatter"(%u, %i, %into) ({
  ^bb0(%a: f32, %b: f32):
    %sum = arith.addf %a, %b : f32
    "tm_tensor.yield"(%sum) : (f32) -> ()
  }) : (tensor<?xf32>, tensor<?x1xi64>, tensor<10xf32>) -> tensor<10xf32>
  return %y : tensor<10xf32>
}
func.func @column_into_a_scatter(%x: tensor<?x3xf32>, %i: tensor<?x1xi64>, %into: tensor<10xf32>) -> tensor<10xf32> {
  %c = call @column(%x) : (tensor<?x3xf32>) -> tensor<?xf32>
  %y = call @scatter(%c, %i, %into) : (tensor<?xf32>, tensor<?x1xi64>, tensor<10xf32>) -> tensor<10xf32>
  return %y : tensor<10xf32>
}

// -----

// Only private functions with a body are inlined.
// CHECK-LABEL: func.func @public
// CHECK-LABEL: func.func @keeps_public_calls
// CHECK:         call @public
func.func @public(%x: tensor<?xf32>) -> tensor<?xf32> {
  return %x : tensor<?xf32>
}
func.func @keeps_public_calls(%x: tensor<?xf32>, %i: index) -> f32 {
  %y = call @public(%x) : (tensor<?xf32>) -> tensor<?xf32>
  %e = tensor.extract %y[%i] : tensor<?xf32>
  return %e : f32
}
