// RUN: ragged-opt %s -split-input-file -verify-diagnostics

// One case per verifier rule of the image ops.

!img = !ragged.tensor<?, [H], [W], 4, f32>

func.func @conv_not_image(%x: !ragged.tensor<?, [L], 4, f32>, %w: tensor<3x3x4x8xf32>) {
  // expected-error @+1 {{'ragged.conv2d' op works on images [B, H(b), W(b), C] (two ragged dims depending on the batch, then a static channel dim), got '!ragged.tensor<?, [L], 4, f32>'}}
  %y = ragged.conv2d %x, %w : !ragged.tensor<?, [L], 4, f32>, tensor<3x3x4x8xf32> -> !ragged.tensor<?, [Ho], [Wo], 8, f32>
  return
}

// -----

func.func @conv_nested(%x: !ragged.tensor<?, [H], [W(H)], 4, f32>, %w: tensor<1x1x4x8xf32>) {
  // expected-error @+1 {{works on images [B, H(b), W(b), C]}}
  %y = ragged.conv2d %x, %w : !ragged.tensor<?, [H], [W(H)], 4, f32>, tensor<1x1x4x8xf32> -> !ragged.tensor<?, [H], [W], 8, f32>
  return
}

// -----

func.func @conv_channels(%x: !ragged.tensor<?, [H], [W], 4, f32>, %w: tensor<3x3x3x8xf32>) {
  // expected-error @+1 {{weight has 3 input channels per group, times 1 groups; the source has 4}}
  %y = ragged.conv2d %x, %w : !ragged.tensor<?, [H], [W], 4, f32>, tensor<3x3x3x8xf32> -> !ragged.tensor<?, [Ho], [Wo], 8, f32>
  return
}

// -----

func.func @conv_groups(%x: !ragged.tensor<?, [H], [W], 4, f32>, %w: tensor<3x3x2x6xf32>) {
  // expected-error @+1 {{groups 4 must be >= 1 and divide the 6 output channels}}
  %y = ragged.conv2d %x, %w {groups = 4} : !ragged.tensor<?, [H], [W], 4, f32>, tensor<3x3x2x6xf32> -> !ragged.tensor<?, [Ho], [Wo], 6, f32>
  return
}

// -----

func.func @conv_dynamic_weight(%x: !ragged.tensor<?, [H], [W], 4, f32>, %w: tensor<?x3x4x8xf32>) {
  // expected-error @+1 {{weight [KH, KW, Cin / groups, Cout] must have a static shape, got 'tensor<?x3x4x8xf32>'}}
  %y = ragged.conv2d %x, %w : !ragged.tensor<?, [H], [W], 4, f32>, tensor<?x3x4x8xf32> -> !ragged.tensor<?, [Ho], [Wo], 8, f32>
  return
}

// -----

func.func @conv_weight_type(%x: !ragged.tensor<?, [H], [W], 4, f32>, %w: tensor<3x3x4x8xf16>) {
  // expected-error @+1 {{weight element type 'f16' does not match 'f32'}}
  %y = ragged.conv2d %x, %w : !ragged.tensor<?, [H], [W], 4, f32>, tensor<3x3x4x8xf16> -> !ragged.tensor<?, [Ho], [Wo], 8, f32>
  return
}

// -----

func.func @conv_bias(%x: !ragged.tensor<?, [H], [W], 4, f32>, %w: tensor<3x3x4x8xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{bias must be 'tensor<8xf32>', got 'tensor<4xf32>'}}
  %y = ragged.conv2d %x, %w, %b : !ragged.tensor<?, [H], [W], 4, f32>, tensor<3x3x4x8xf32>, tensor<4xf32> -> !ragged.tensor<?, [Ho], [Wo], 8, f32>
  return
}

// -----

func.func @conv_strides_rank(%x: !ragged.tensor<?, [H], [W], 4, f32>, %w: tensor<3x3x4x8xf32>) {
  // expected-error @+1 {{strides needs 2 entries (H, W), got 1}}
  %y = ragged.conv2d %x, %w {strides = array<i64: 2>} : !ragged.tensor<?, [H], [W], 4, f32>, tensor<3x3x4x8xf32> -> !ragged.tensor<?, [Ho], [Wo], 8, f32>
  return
}

// -----

func.func @conv_zero_stride(%x: !ragged.tensor<?, [H], [W], 4, f32>, %w: tensor<3x3x4x8xf32>) {
  // expected-error @+1 {{window along W: kernel 3, stride 0 and dilation 1 must be >= 1 and padding 0 >= 0}}
  %y = ragged.conv2d %x, %w {strides = array<i64: 1, 0>} : !ragged.tensor<?, [H], [W], 4, f32>, tensor<3x3x4x8xf32> -> !ragged.tensor<?, [Ho], [Wo], 8, f32>
  return
}

// -----

func.func @conv_result_channels(%x: !ragged.tensor<?, [H], [W], 4, f32>, %w: tensor<3x3x4x8xf32>) {
  // expected-error @+1 {{result type must be '!ragged.tensor<?, [Ho], [Wo], 8, f32>', got '!ragged.tensor<?, [Ho], [Wo], 4, f32>'}}
  %y = ragged.conv2d %x, %w : !ragged.tensor<?, [H], [W], 4, f32>, tensor<3x3x4x8xf32> -> !ragged.tensor<?, [Ho], [Wo], 4, f32>
  return
}

// -----

// A window that changes an extent needs a fresh symbol for it...
func.func @conv_reused_symbol(%x: !ragged.tensor<?, [H], [W], 4, f32>, %w: tensor<3x3x4x8xf32>) {
  // expected-error @+1 {{the window changes the extent of H, so the result's dim 0 needs a fresh symbol, got 'H'}}
  %y = ragged.conv2d %x, %w : !ragged.tensor<?, [H], [W], 4, f32>, tensor<3x3x4x8xf32> -> !ragged.tensor<?, [H], [Wo], 8, f32>
  return
}

// -----

// ... and one that keeps it keeps the symbol.
func.func @conv_kept_symbol(%x: !ragged.tensor<?, [H], [W], 4, f32>, %w: tensor<3x3x4x8xf32>) {
  // expected-error @+1 {{the window keeps the extent of W, so the result's dim 1 must keep the symbol 'W', got 'Wo'}}
  %y = ragged.conv2d %x, %w {padding = array<i64: 0, 1>} : !ragged.tensor<?, [H], [W], 4, f32>, tensor<3x3x4x8xf32> -> !ragged.tensor<?, [Ho], [Wo], 8, f32>
  return
}

// -----

func.func @conv_one_symbol(%x: !ragged.tensor<?, [H], [W], 4, f32>, %w: tensor<3x3x4x8xf32>) {
  // expected-error @+1 {{the result's dims have one symbol 'O' but their extents may differ}}
  %y = ragged.conv2d %x, %w : !ragged.tensor<?, [H], [W], 4, f32>, tensor<3x3x4x8xf32> -> !ragged.tensor<?, [O], [O], 8, f32>
  return
}

// -----

func.func @pool_int(%x: !ragged.tensor<?, [H], [W], 4, i32>) {
  // expected-error @+1 {{'ragged.pool2d' op needs a float element type, got 'i32'}}
  %y = ragged.pool2d <max> %x {kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>} : !ragged.tensor<?, [H], [W], 4, i32> -> !ragged.tensor<?, [Ho], [Wo], 4, i32>
  return
}

// -----

func.func @pool_padding(%x: !ragged.tensor<?, [H], [W], 4, f32>) {
  // expected-error @+1 {{padding 2 must be at most half the kernel 3}}
  %y = ragged.pool2d <max> %x {kernel = array<i64: 3, 3>, padding = array<i64: 2, 2>} : !ragged.tensor<?, [H], [W], 4, f32> -> !ragged.tensor<?, [Ho], [Wo], 4, f32>
  return
}

// -----

func.func @pool_include_pad(%x: !ragged.tensor<?, [H], [W], 4, f32>) {
  // expected-error @+1 {{count_include_pad applies to <mean> only}}
  %y = ragged.pool2d <max> %x {kernel = array<i64: 2, 2>, count_include_pad} : !ragged.tensor<?, [H], [W], 4, f32> -> !ragged.tensor<?, [Ho], [Wo], 4, f32>
  return
}

// -----

func.func @pool_mean_dilation(%x: !ragged.tensor<?, [H], [W], 4, f32>) {
  // expected-error @+1 {{<mean> pooling has no dilation}}
  %y = ragged.pool2d <mean> %x {kernel = array<i64: 2, 2>, dilation = array<i64: 2, 2>} : !ragged.tensor<?, [H], [W], 4, f32> -> !ragged.tensor<?, [Ho], [Wo], 4, f32>
  return
}

// -----

func.func @pool_kernel_rank(%x: !ragged.tensor<?, [H], [W], 4, f32>) {
  // expected-error @+1 {{kernel needs 2 entries (H, W), got 3}}
  %y = ragged.pool2d <max> %x {kernel = array<i64: 2, 2, 2>} : !ragged.tensor<?, [H], [W], 4, f32> -> !ragged.tensor<?, [Ho], [Wo], 4, f32>
  return
}

// -----

func.func @pool_channels(%x: !ragged.tensor<?, [H], [W], 4, f32>) {
  // expected-error @+1 {{result type must be '!ragged.tensor<?, [Ho], [Wo], 4, f32>', got '!ragged.tensor<?, [Ho], [Wo], 8, f32>'}}
  %y = ragged.pool2d <max> %x {kernel = array<i64: 2, 2>} : !ragged.tensor<?, [H], [W], 4, f32> -> !ragged.tensor<?, [Ho], [Wo], 8, f32>
  return
}

// -----

func.func @flatten_one_ragged_dim(%x: !ragged.tensor<?, [L], 4, f32>) {
  // expected-error @+1 {{'ragged.flatten' op needs two or more leading ragged dims depending on the batch, then dense dims, got '!ragged.tensor<?, [L], 4, f32>'}}
  %y = ragged.flatten %x : !ragged.tensor<?, [L], 4, f32> -> !ragged.tensor<?, [P], 4, f32>
  return
}

// -----

func.func @flatten_dense_between(%x: !ragged.tensor<?, [H], 2, [W], 4, f32>) {
  // expected-error @+1 {{needs two or more leading ragged dims}}
  %y = ragged.flatten %x : !ragged.tensor<?, [H], 2, [W], 4, f32> -> !ragged.tensor<?, [P], 4, f32>
  return
}

// -----

func.func @flatten_symbol(%x: !ragged.tensor<?, [H], [W], 4, f32>) {
  // expected-error @+1 {{result symbol 'H' must be fresh: its extents differ from the source's}}
  %y = ragged.flatten %x : !ragged.tensor<?, [H], [W], 4, f32> -> !ragged.tensor<?, [H], 4, f32>
  return
}

// -----

func.func @flatten_dims(%x: !ragged.tensor<?, [H], [W], 4, f32>) {
  // expected-error @+1 {{result type must be '!ragged.tensor<?, [P], 4, f32>', got '!ragged.tensor<?, [P], 2, 2, f32>'}}
  %y = ragged.flatten %x : !ragged.tensor<?, [H], [W], 4, f32> -> !ragged.tensor<?, [P], 2, 2, f32>
  return
}
