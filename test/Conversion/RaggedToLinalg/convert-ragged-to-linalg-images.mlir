// RUN: ragged-opt %s --convert-ragged-to-linalg --split-input-file | FileCheck %s --implicit-check-not=ragged.

// The lowering of the image ops. Every output pixel finds its image once
// (a table of [pixels] i64 built from the output row offsets) and its
// window from the partitions; the work is a fixed number of generics over
// the real output pixels.

// A strided convolution: new height and width offsets (one two-level scan each),
// the output row offsets, the image of every output pixel, the windows
// gathered into [pixels, KH, KW, Cin], the bias broadcast into the
// accumulator, and one GEMM on [pixels, KH * KW * Cin] x [KH * KW * Cin, Cout].
// CHECK-LABEL: func.func @conv_strided
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x3xf32>, %[[H:[^:]*]]: tensor<?xi64>, %[[W:[^:]*]]: tensor<?xi64>,
// CHECK-SAME:     %[[K:[^:]*]]: tensor<3x3x3x8xf32>, %[[B:[^:]*]]: tensor<8xf32>)
// CHECK-SAME:    -> (tensor<?x8xf32>, tensor<?xi64>, tensor<?xi64>)
// CHECK:         linalg.generic {{.*}} outs(%{{.*}} : tensor<?x1xi64>)
// CHECK:           arith.floordivsi
// CHECK:         linalg.generic {{.*}} outs(%{{.*}} : tensor<?x1xi64>)
// CHECK:         %[[HO:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<?xi64>)
// CHECK:           arith.floordivsi
// CHECK:         linalg.generic {{.*}} outs(%{{.*}} : tensor<?x1xi64>)
// CHECK:           arith.floordivsi
// CHECK:         linalg.generic {{.*}} outs(%{{.*}} : tensor<?x1xi64>)
// CHECK:         %[[WO:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<?xi64>)
// CHECK:           arith.floordivsi
// CHECK:         %[[WIN:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel"]{{.*}} outs(%{{.*}} : tensor<?x3x3x3xf32>)
// CHECK:           tensor.extract %[[V]]
// CHECK:           arith.select
// CHECK:         %[[ACC:.*]] = linalg.generic {{.*}} ins(%[[B]] : tensor<8xf32>) outs(%{{.*}} : tensor<?x8xf32>)
// CHECK:         %[[LHS:.*]] = tensor.collapse_shape %[[WIN]] {{\[}}[0], [1, 2, 3]] : tensor<?x3x3x3xf32> into tensor<?x27xf32>
// CHECK:         %[[RHS:.*]] = tensor.collapse_shape %[[K]] {{\[}}[0, 1, 2], [3]] : tensor<3x3x3x8xf32> into tensor<27x8xf32>
// CHECK:         %[[OUT:.*]] = linalg.matmul ins(%[[LHS]], %[[RHS]] : {{.*}}) outs(%[[ACC]] : tensor<?x8xf32>)
// CHECK:         return %[[OUT]], %[[HO]], %[[WO]]
func.func @conv_strided(%x: !ragged.tensor<?, [H], [W], 3, f32>, %w: tensor<3x3x3x8xf32>, %b: tensor<8xf32>)
    -> !ragged.tensor<?, [Ho], [Wo], 8, f32> {
  %y = ragged.conv2d %x, %w, %b {strides = array<i64: 2, 2>, padding = array<i64: 1, 1>}
      : !ragged.tensor<?, [H], [W], 3, f32>, tensor<3x3x3x8xf32>, tensor<8xf32> -> !ragged.tensor<?, [Ho], [Wo], 8, f32>
  return %y : !ragged.tensor<?, [Ho], [Wo], 8, f32>
}

// -----

// A grouped convolution that keeps the extents: the partitions pass
// through, the accumulator starts at 0, and the product is one contraction
// per group over (ky, kx, c).
// CHECK-DAG:   #[[$LHSMAP:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d3, d4, d1, d5)>
// CHECK-DAG:   #[[$RHSMAP:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d3, d4, d5, d1, d2)>
// CHECK-DAG:   #[[$OUTMAP:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @conv_grouped
// CHECK-SAME:    (%{{[^:]*}}: tensor<?x4xf32>, %[[H:[^:]*]]: tensor<?xi64>, %[[W:[^:]*]]: tensor<?xi64>,
// CHECK:         linalg.fill
// CHECK:         tensor.expand_shape {{.*}} into tensor<?x3x3x2x2xf32>
// CHECK:         tensor.expand_shape {{.*}} into tensor<3x3x2x2x4xf32>
// CHECK:         %[[G:.*]] = linalg.generic {indexing_maps = [#[[$LHSMAP]], #[[$RHSMAP]], #[[$OUTMAP]]], iterator_types = ["parallel", "parallel", "parallel", "reduction", "reduction", "reduction"]}
// CHECK:         %[[OUT:.*]] = tensor.collapse_shape %[[G]] {{\[}}[0], [1, 2]] : tensor<?x2x4xf32> into tensor<?x8xf32>
// CHECK:         return %[[OUT]], %[[H]], %[[W]]
func.func @conv_grouped(%x: !ragged.tensor<?, [H], [W], 4, f32>, %w: tensor<3x3x2x8xf32>)
    -> !ragged.tensor<?, [H], [W], 8, f32> {
  %y = ragged.conv2d %x, %w {padding = array<i64: 1, 1>, groups = 2}
      : !ragged.tensor<?, [H], [W], 4, f32>, tensor<3x3x2x8xf32> -> !ragged.tensor<?, [H], [W], 8, f32>
  return %y : !ragged.tensor<?, [H], [W], 8, f32>
}

// -----

// Max pooling: one generic over (pixel, channel) reducing the window
// (ky, kx), whose extents come from a shape-only [KH, KW] operand. Ceil mode
// rounds the extents up.
// CHECK-DAG:   #[[$KMAP:.*]] = affine_map<(d0, d1, d2, d3) -> (d2, d3)>
// CHECK-DAG:   #[[$PMAP:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1)>
// CHECK-LABEL: func.func @max_pool
// CHECK:         arith.ceildivsi
// CHECK:         %[[INIT:.*]] = linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : tensor<?x4xf32>)
// CHECK:         %[[WIN:.*]] = tensor.empty() : tensor<3x2xi1>
// CHECK:         %[[P:.*]] = linalg.generic {indexing_maps = [#[[$KMAP]], #[[$PMAP]]], iterator_types = ["parallel", "parallel", "reduction", "reduction"]} ins(%[[WIN]] : tensor<3x2xi1>) outs(%[[INIT]] : tensor<?x4xf32>)
// CHECK:           arith.maximumf
// CHECK:           arith.select
// CHECK-NOT:     linalg.generic
// CHECK:         return %[[P]]
func.func @max_pool(%x: !ragged.tensor<?, [H], [W], 4, f32>) -> !ragged.tensor<?, [Ho], [Wo], 4, f32> {
  %y = ragged.pool2d <max> %x {kernel = array<i64: 3, 2>, strides = array<i64: 2, 2>, padding = array<i64: 1, 0>, ceil_mode}
      : !ragged.tensor<?, [H], [W], 4, f32> -> !ragged.tensor<?, [Ho], [Wo], 4, f32>
  return %y : !ragged.tensor<?, [Ho], [Wo], 4, f32>
}

// -----

// Mean pooling sums the window, then divides each pixel by its window's
// size in a second generic.
// CHECK-LABEL: func.func @mean_pool
// CHECK:         %[[S:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "reduction", "reduction"]
// CHECK:           arith.addf
// CHECK:         %[[M:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]{{.*}} ins(%[[S]] : tensor<?x4xf32>)
// CHECK:           arith.sitofp
// CHECK:           arith.divf
// CHECK:         return %[[M]]
func.func @mean_pool(%x: !ragged.tensor<?, [H], [W], 4, f32>) -> !ragged.tensor<?, [Ho], [Wo], 4, f32> {
  %y = ragged.pool2d <mean> %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>}
      : !ragged.tensor<?, [H], [W], 4, f32> -> !ragged.tensor<?, [Ho], [Wo], 4, f32>
  return %y : !ragged.tensor<?, [Ho], [Wo], 4, f32>
}

// -----

// Flatten moves no data: the values pass through and the new partition is
// the prefix sum of H(b) * W(b) (a two-level scan).
// CHECK-LABEL: func.func @flatten
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x8xf32>, %[[H:[^:]*]]: tensor<?xi64>, %[[W:[^:]*]]: tensor<?xi64>)
// CHECK-SAME:    -> (tensor<?x8xf32>, tensor<?xi64>)
// CHECK:         %[[SIZES:.*]] = linalg.generic
// CHECK:           tensor.extract %[[H]]
// CHECK:           tensor.extract %[[W]]
// CHECK:           arith.muli
// CHECK:         linalg.generic
// CHECK:           scf.for
// CHECK:         linalg.generic
// CHECK:         %[[ROWS:.*]] = linalg.generic
// CHECK:           scf.for
// CHECK:         return %[[V]], %[[ROWS]]
func.func @flatten(%x: !ragged.tensor<?, [H], [W], 8, f32>) -> !ragged.tensor<?, [P], 8, f32> {
  %p = ragged.flatten %x : !ragged.tensor<?, [H], [W], 8, f32> -> !ragged.tensor<?, [P], 8, f32>
  return %p : !ragged.tensor<?, [P], 8, f32>
}
