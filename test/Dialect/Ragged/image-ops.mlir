// RUN: ragged-opt %s | ragged-opt | FileCheck %s
// RUN: ragged-opt %s --mlir-print-op-generic | ragged-opt | FileCheck %s

// Round trip of the image ops: convolution and pooling of [B, H(b), W(b), C]
// batches, and flatten from an image to the sequence of its pixels.

// CHECK-LABEL: func.func @conv2d
// CHECK:         ragged.conv2d %{{.*}}, %{{.*}}, %{{.*}} {padding = array<i64: 1, 1>, strides = array<i64: 2, 2>}
// CHECK-SAME:      : !ragged.tensor<?, [H], [W], 3, f32>, tensor<3x3x3x16xf32>, tensor<16xf32> -> !ragged.tensor<?, [Ho], [Wo], 16, f32>
// CHECK:         ragged.conv2d %{{.*}}, %{{.*}} {groups = 4 : i64, padding = array<i64: 1, 1>}
// CHECK-SAME:      : !ragged.tensor<?, [Ho], [Wo], 16, f32>, tensor<3x3x4x16xf32> -> !ragged.tensor<?, [Ho], [Wo], 16, f32>
// CHECK:         ragged.conv2d %{{.*}}, %{{.*}} {dilation = array<i64: 2, 1>, padding = array<i64: 0, 1>}
// CHECK-SAME:      -> !ragged.tensor<4, [Hd], [Wo], 16, f32>
func.func @conv2d(%x: !ragged.tensor<?, [H], [W], 3, f32>, %w: tensor<3x3x3x16xf32>, %b: tensor<16xf32>,
                  %g: tensor<3x3x4x16xf32>, %x4: !ragged.tensor<4, [Ho], [Wo], 16, f32>, %r: tensor<2x3x16x16xf32>)
    -> (!ragged.tensor<?, [Ho], [Wo], 16, f32>, !ragged.tensor<4, [Hd], [Wo], 16, f32>) {
  %y = ragged.conv2d %x, %w, %b {strides = array<i64: 2, 2>, padding = array<i64: 1, 1>}
      : !ragged.tensor<?, [H], [W], 3, f32>, tensor<3x3x3x16xf32>, tensor<16xf32> -> !ragged.tensor<?, [Ho], [Wo], 16, f32>
  // Stride 1 and padding (k - 1) / 2 keep both extents, hence the symbols.
  %z = ragged.conv2d %y, %g {padding = array<i64: 1, 1>, groups = 4}
      : !ragged.tensor<?, [Ho], [Wo], 16, f32>, tensor<3x3x4x16xf32> -> !ragged.tensor<?, [Ho], [Wo], 16, f32>
  // Only W keeps its extent here.
  %d = ragged.conv2d %x4, %r {dilation = array<i64: 2, 1>, padding = array<i64: 0, 1>}
      : !ragged.tensor<4, [Ho], [Wo], 16, f32>, tensor<2x3x16x16xf32> -> !ragged.tensor<4, [Hd], [Wo], 16, f32>
  return %z, %d : !ragged.tensor<?, [Ho], [Wo], 16, f32>, !ragged.tensor<4, [Hd], [Wo], 16, f32>
}

// CHECK-LABEL: func.func @pool2d
// CHECK:         ragged.pool2d <max> %{{.*}} {kernel = array<i64: 3, 3>, padding = array<i64: 1, 1>, strides = array<i64: 2, 2>}
// CHECK-SAME:      : !ragged.tensor<?, [H], [W], 8, f32> -> !ragged.tensor<?, [Ho], [Wo], 8, f32>
// CHECK:         ragged.pool2d <mean> %{{.*}} {ceil_mode, count_include_pad, kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>}
// CHECK:         ragged.pool2d <mean> %{{.*}} {kernel = array<i64: 3, 3>, padding = array<i64: 1, 1>}
// CHECK-SAME:      : !ragged.tensor<?, [S], [S], 8, f32> -> !ragged.tensor<?, [S], [S], 8, f32>
func.func @pool2d(%x: !ragged.tensor<?, [H], [W], 8, f32>, %sq: !ragged.tensor<?, [S], [S], 8, f32>)
    -> (!ragged.tensor<?, [Ho], [Wo], 8, f32>, !ragged.tensor<?, [H2], [W2], 8, f32>, !ragged.tensor<?, [S], [S], 8, f32>) {
  %m = ragged.pool2d <max> %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1>}
      : !ragged.tensor<?, [H], [W], 8, f32> -> !ragged.tensor<?, [Ho], [Wo], 8, f32>
  %a = ragged.pool2d <mean> %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>, ceil_mode, count_include_pad}
      : !ragged.tensor<?, [H], [W], 8, f32> -> !ragged.tensor<?, [H2], [W2], 8, f32>
  // Square images (one symbol for both sides) stay square.
  %s = ragged.pool2d <mean> %sq {kernel = array<i64: 3, 3>, padding = array<i64: 1, 1>}
      : !ragged.tensor<?, [S], [S], 8, f32> -> !ragged.tensor<?, [S], [S], 8, f32>
  return %m, %a, %s : !ragged.tensor<?, [Ho], [Wo], 8, f32>, !ragged.tensor<?, [H2], [W2], 8, f32>, !ragged.tensor<?, [S], [S], 8, f32>
}

// CHECK-LABEL: func.func @flatten
// CHECK:         ragged.flatten %{{.*}} : !ragged.tensor<?, [H], [W], 8, f32> -> !ragged.tensor<?, [P], 8, f32>
// CHECK:         ragged.flatten %{{.*}} : !ragged.tensor<2, [A], [B], [C], 2, 3, f16> -> !ragged.tensor<2, [N], 2, 3, f16>
func.func @flatten(%x: !ragged.tensor<?, [H], [W], 8, f32>, %v: !ragged.tensor<2, [A], [B], [C], 2, 3, f16>)
    -> (!ragged.tensor<?, [P], 8, f32>, !ragged.tensor<2, [N], 2, 3, f16>) {
  %p = ragged.flatten %x : !ragged.tensor<?, [H], [W], 8, f32> -> !ragged.tensor<?, [P], 8, f32>
  %n = ragged.flatten %v : !ragged.tensor<2, [A], [B], [C], 2, 3, f16> -> !ragged.tensor<2, [N], 2, 3, f16>
  return %p, %n : !ragged.tensor<?, [P], 8, f32>, !ragged.tensor<2, [N], 2, 3, f16>
}
