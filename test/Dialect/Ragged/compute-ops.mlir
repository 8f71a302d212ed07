// RUN: ragged-opt %s | ragged-opt | FileCheck %s
// RUN: ragged-opt %s --mlir-print-op-generic | ragged-opt | FileCheck %s

// Round trip of every compute op of the dialect, in each of the layouts its
// verifier accepts. Function arguments feed the ops.

//===----------------------------------------------------------------------===//
// ragged.unary
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @unary
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [L], 384, f32>)
// CHECK-NEXT:    %[[A:.*]] = ragged.unary <gelu> %[[X]] : !ragged.tensor<?, [L], 384, f32>
// CHECK-NEXT:    %[[B:.*]] = ragged.unary <neg> %[[A]] : !ragged.tensor<?, [L], 384, f32>
// CHECK-NEXT:    %[[C:.*]] = ragged.unary <exp> %[[B]] : !ragged.tensor<?, [L], 384, f32>
// CHECK-NEXT:    %[[D:.*]] = ragged.unary <log> %[[C]] : !ragged.tensor<?, [L], 384, f32>
// CHECK-NEXT:    %[[E:.*]] = ragged.unary <tanh> %[[D]] : !ragged.tensor<?, [L], 384, f32>
// CHECK-NEXT:    %[[F:.*]] = ragged.unary <relu> %[[E]] : !ragged.tensor<?, [L], 384, f32>
// CHECK-NEXT:    %[[G:.*]] = ragged.unary <sqrt> %[[F]] : !ragged.tensor<?, [L], 384, f32>
// CHECK-NEXT:    %[[H:.*]] = ragged.unary <rsqrt> %[[G]] : !ragged.tensor<?, [L], 384, f32>
// CHECK-NEXT:    %[[I:.*]] = ragged.unary <abs> %[[H]] : !ragged.tensor<?, [L], 384, f32>
// CHECK-NEXT:    %[[J:.*]] = ragged.unary <sigmoid> %[[I]] : !ragged.tensor<?, [L], 384, f32>
// CHECK-NEXT:    return %[[J]]
func.func @unary(%x: !ragged.tensor<?, [L], 384, f32>) -> !ragged.tensor<?, [L], 384, f32> {
  %a = ragged.unary <gelu> %x : !ragged.tensor<?, [L], 384, f32>
  %b = ragged.unary <neg> %a : !ragged.tensor<?, [L], 384, f32>
  %c = ragged.unary <exp> %b : !ragged.tensor<?, [L], 384, f32>
  %d = ragged.unary <log> %c : !ragged.tensor<?, [L], 384, f32>
  %e = ragged.unary <tanh> %d : !ragged.tensor<?, [L], 384, f32>
  %f = ragged.unary <relu> %e : !ragged.tensor<?, [L], 384, f32>
  %g = ragged.unary <sqrt> %f : !ragged.tensor<?, [L], 384, f32>
  %h = ragged.unary <rsqrt> %g : !ragged.tensor<?, [L], 384, f32>
  %i = ragged.unary <abs> %h : !ragged.tensor<?, [L], 384, f32>
  %j = ragged.unary <sigmoid> %i : !ragged.tensor<?, [L], 384, f32>
  return %j : !ragged.tensor<?, [L], 384, f32>
}

// Any layout: nested, static batch, other float types, lengths encoding.
// CHECK-LABEL: func.func @unary_layouts
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<4, [S], [T(S)], 8, bf16>,
// CHECK-SAME:     %[[Y:.*]]: !ragged.tensor<?, [L], f16, lengths>)
// CHECK-NEXT:    %[[A:.*]] = ragged.unary <exp> %[[X]] : !ragged.tensor<4, [S], [T(S)], 8, bf16>
// CHECK-NEXT:    %[[B:.*]] = ragged.unary <tanh> %[[Y]] : !ragged.tensor<?, [L], f16, lengths>
// CHECK-NEXT:    return %[[A]], %[[B]]
func.func @unary_layouts(%x: !ragged.tensor<4, [S], [T(S)], 8, bf16>,
                         %y: !ragged.tensor<?, [L], f16, lengths>)
    -> (!ragged.tensor<4, [S], [T(S)], 8, bf16>, !ragged.tensor<?, [L], f16, lengths>) {
  %a = ragged.unary <exp> %x : !ragged.tensor<4, [S], [T(S)], 8, bf16>
  %b = ragged.unary <tanh> %y : !ragged.tensor<?, [L], f16, lengths>
  return %a, %b : !ragged.tensor<4, [S], [T(S)], 8, bf16>, !ragged.tensor<?, [L], f16, lengths>
}

//===----------------------------------------------------------------------===//
// ragged.binary
//===----------------------------------------------------------------------===//

// A ragged rhs of the same type, a dense rhs broadcast against the trailing
// dims (full, a suffix, dynamic) and a rank-0 scalar.
// CHECK-LABEL: func.func @binary
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [L], 2, 8, f32>, %[[Y:.*]]: !ragged.tensor<?, [L], 2, 8, f32>,
// CHECK-SAME:     %[[D2:.*]]: tensor<2x8xf32>, %[[D1:.*]]: tensor<8xf32>, %[[DD:.*]]: tensor<?xf32>, %[[S:.*]]: tensor<f32>)
// CHECK-NEXT:    %[[A:.*]] = ragged.binary <add> %[[X]], %[[Y]]
// CHECK-SAME:      : !ragged.tensor<?, [L], 2, 8, f32>, !ragged.tensor<?, [L], 2, 8, f32>
// CHECK-NEXT:    %[[B:.*]] = ragged.binary <sub> %[[A]], %[[D2]]
// CHECK-SAME:      : !ragged.tensor<?, [L], 2, 8, f32>, tensor<2x8xf32>
// CHECK-NEXT:    %[[C:.*]] = ragged.binary <mul> %[[B]], %[[D1]]
// CHECK-SAME:      : !ragged.tensor<?, [L], 2, 8, f32>, tensor<8xf32>
// CHECK-NEXT:    %[[D:.*]] = ragged.binary <div> %[[C]], %[[DD]]
// CHECK-SAME:      : !ragged.tensor<?, [L], 2, 8, f32>, tensor<?xf32>
// CHECK-NEXT:    %[[E:.*]] = ragged.binary <max> %[[D]], %[[S]]
// CHECK-SAME:      : !ragged.tensor<?, [L], 2, 8, f32>, tensor<f32>
// CHECK-NEXT:    %[[F:.*]] = ragged.binary <min> %[[E]], %[[X]]
// CHECK-SAME:      : !ragged.tensor<?, [L], 2, 8, f32>, !ragged.tensor<?, [L], 2, 8, f32>
// CHECK-NEXT:    return %[[F]]
func.func @binary(%x: !ragged.tensor<?, [L], 2, 8, f32>, %y: !ragged.tensor<?, [L], 2, 8, f32>,
                  %d2: tensor<2x8xf32>, %d1: tensor<8xf32>, %dd: tensor<?xf32>, %s: tensor<f32>)
    -> !ragged.tensor<?, [L], 2, 8, f32> {
  %a = ragged.binary <add> %x, %y : !ragged.tensor<?, [L], 2, 8, f32>, !ragged.tensor<?, [L], 2, 8, f32>
  %b = ragged.binary <sub> %a, %d2 : !ragged.tensor<?, [L], 2, 8, f32>, tensor<2x8xf32>
  %c = ragged.binary <mul> %b, %d1 : !ragged.tensor<?, [L], 2, 8, f32>, tensor<8xf32>
  %d = ragged.binary <div> %c, %dd : !ragged.tensor<?, [L], 2, 8, f32>, tensor<?xf32>
  %e = ragged.binary <max> %d, %s : !ragged.tensor<?, [L], 2, 8, f32>, tensor<f32>
  %f = ragged.binary <min> %e, %x : !ragged.tensor<?, [L], 2, 8, f32>, !ragged.tensor<?, [L], 2, 8, f32>
  return %f : !ragged.tensor<?, [L], 2, 8, f32>
}

// Without trailing dims only a scalar broadcasts.
// CHECK-LABEL: func.func @binary_no_trailing
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [S], [T(S)], f32>, %[[S:.*]]: tensor<f32>)
// CHECK-NEXT:    %[[A:.*]] = ragged.binary <mul> %[[X]], %[[S]] : !ragged.tensor<?, [S], [T(S)], f32>, tensor<f32>
// CHECK-NEXT:    return %[[A]]
func.func @binary_no_trailing(%x: !ragged.tensor<?, [S], [T(S)], f32>, %s: tensor<f32>) -> !ragged.tensor<?, [S], [T(S)], f32> {
  %a = ragged.binary <mul> %x, %s : !ragged.tensor<?, [S], [T(S)], f32>, tensor<f32>
  return %a : !ragged.tensor<?, [S], [T(S)], f32>
}

//===----------------------------------------------------------------------===//
// ragged.matmul
//===----------------------------------------------------------------------===//

// Rank-2 values [rows, K].
// CHECK-LABEL: func.func @matmul
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [L], 384, f32>, %[[W:.*]]: tensor<384x1536xf32>)
// CHECK-NEXT:    %[[Y:.*]] = ragged.matmul %[[X]], %[[W]]
// CHECK-SAME:      : !ragged.tensor<?, [L], 384, f32>, tensor<384x1536xf32> -> !ragged.tensor<?, [L], 1536, f32>
// CHECK-NEXT:    return %[[Y]]
func.func @matmul(%x: !ragged.tensor<?, [L], 384, f32>, %w: tensor<384x1536xf32>) -> !ragged.tensor<?, [L], 1536, f32> {
  %y = ragged.matmul %x, %w : !ragged.tensor<?, [L], 384, f32>, tensor<384x1536xf32> -> !ragged.tensor<?, [L], 1536, f32>
  return %y : !ragged.tensor<?, [L], 1536, f32>
}

// Rank-3 values [rows, heads, K]; dynamic weight extents.
// CHECK-LABEL: func.func @matmul_rank3
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [L], 12, 32, f32>, %[[W:.*]]: tensor<?x?xf32>)
// CHECK-NEXT:    %[[Y:.*]] = ragged.matmul %[[X]], %[[W]]
// CHECK-SAME:      : !ragged.tensor<?, [L], 12, 32, f32>, tensor<?x?xf32> -> !ragged.tensor<?, [L], 12, ?, f32>
// CHECK-NEXT:    return %[[Y]]
func.func @matmul_rank3(%x: !ragged.tensor<?, [L], 12, 32, f32>, %w: tensor<?x?xf32>) -> !ragged.tensor<?, [L], 12, ?, f32> {
  %y = ragged.matmul %x, %w : !ragged.tensor<?, [L], 12, 32, f32>, tensor<?x?xf32> -> !ragged.tensor<?, [L], 12, ?, f32>
  return %y : !ragged.tensor<?, [L], 12, ?, f32>
}

// Nested: every real row of the innermost level.
// CHECK-LABEL: func.func @matmul_nested
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<4, [S], [T(S)], 8, f32>, %[[W:.*]]: tensor<8x3xf32>)
// CHECK-NEXT:    %[[Y:.*]] = ragged.matmul %[[X]], %[[W]]
// CHECK-SAME:      : !ragged.tensor<4, [S], [T(S)], 8, f32>, tensor<8x3xf32> -> !ragged.tensor<4, [S], [T(S)], 3, f32>
// CHECK-NEXT:    return %[[Y]]
func.func @matmul_nested(%x: !ragged.tensor<4, [S], [T(S)], 8, f32>, %w: tensor<8x3xf32>) -> !ragged.tensor<4, [S], [T(S)], 3, f32> {
  %y = ragged.matmul %x, %w : !ragged.tensor<4, [S], [T(S)], 8, f32>, tensor<8x3xf32> -> !ragged.tensor<4, [S], [T(S)], 3, f32>
  return %y : !ragged.tensor<4, [S], [T(S)], 3, f32>
}

//===----------------------------------------------------------------------===//
// ragged.reduce
//===----------------------------------------------------------------------===//

// Every kind; `empty` is optional for sum and mean.
// CHECK-LABEL: func.func @reduce
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [L], 384, f32>)
// CHECK-NEXT:    %[[S:.*]] = ragged.reduce <sum> %[[X]]
// CHECK-SAME:      : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
// CHECK-NEXT:    %[[M:.*]] = ragged.reduce <mean> %[[X]]
// CHECK-SAME:      : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
// CHECK-NEXT:    %[[S1:.*]] = ragged.reduce <sum> %[[X]] empty(1.000000e+00 : f32)
// CHECK-SAME:      : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
// CHECK-NEXT:    %[[M1:.*]] = ragged.reduce <mean> %[[X]] empty(-2.000000e+00 : f32)
// CHECK-SAME:      : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
// CHECK-NEXT:    %[[MX:.*]] = ragged.reduce <max> %[[X]] empty(0xFF800000 : f32)
// CHECK-SAME:      : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
// CHECK-NEXT:    %[[MN:.*]] = ragged.reduce <min> %[[X]] empty(0x7F800000 : f32)
// CHECK-SAME:      : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
// CHECK-NEXT:    return %[[S]], %[[M]], %[[S1]], %[[M1]], %[[MX]], %[[MN]]
func.func @reduce(%x: !ragged.tensor<?, [L], 384, f32>)
    -> (tensor<?x384xf32>, tensor<?x384xf32>, tensor<?x384xf32>, tensor<?x384xf32>, tensor<?x384xf32>, tensor<?x384xf32>) {
  %s = ragged.reduce <sum> %x : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
  %m = ragged.reduce <mean> %x : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
  %s1 = ragged.reduce <sum> %x empty(1.0 : f32) : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
  %m1 = ragged.reduce <mean> %x empty(-2.0 : f32) : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
  %mx = ragged.reduce <max> %x empty(0xFF800000 : f32) : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
  %mn = ragged.reduce <min> %x empty(0x7F800000 : f32) : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
  return %s, %m, %s1, %m1, %mx, %mn
      : tensor<?x384xf32>, tensor<?x384xf32>, tensor<?x384xf32>, tensor<?x384xf32>, tensor<?x384xf32>, tensor<?x384xf32>
}

// A static batch and no trailing dims: the result is [B].
// CHECK-LABEL: func.func @reduce_static_no_trailing
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<16, [L], f64>)
// CHECK-NEXT:    %[[S:.*]] = ragged.reduce <sum> %[[X]]
// CHECK-SAME:      : !ragged.tensor<16, [L], f64> -> tensor<16xf64>
// CHECK-NEXT:    return %[[S]]
func.func @reduce_static_no_trailing(%x: !ragged.tensor<16, [L], f64>) -> tensor<16xf64> {
  %s = ragged.reduce <sum> %x : !ragged.tensor<16, [L], f64> -> tensor<16xf64>
  return %s : tensor<16xf64>
}

// A nested chain reduces over its innermost level: the result is ragged.
// CHECK-LABEL: func.func @reduce_nested
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [S], [T(S)], 384, f32>,
// CHECK-SAME:     %[[Y:.*]]: !ragged.tensor<?, [S], [T(S)], [U(T)], 2, f32>)
// CHECK-NEXT:    %[[A:.*]] = ragged.reduce <mean> %[[X]]
// CHECK-SAME:      : !ragged.tensor<?, [S], [T(S)], 384, f32> -> !ragged.tensor<?, [S], 384, f32>
// CHECK-NEXT:    %[[B:.*]] = ragged.reduce <max> %[[Y]] empty(0.000000e+00 : f32)
// CHECK-SAME:      : !ragged.tensor<?, [S], [T(S)], [U(T)], 2, f32> -> !ragged.tensor<?, [S], [T(S)], 2, f32>
// CHECK-NEXT:    return %[[A]], %[[B]]
func.func @reduce_nested(%x: !ragged.tensor<?, [S], [T(S)], 384, f32>,
                         %y: !ragged.tensor<?, [S], [T(S)], [U(T)], 2, f32>)
    -> (!ragged.tensor<?, [S], 384, f32>, !ragged.tensor<?, [S], [T(S)], 2, f32>) {
  %a = ragged.reduce <mean> %x : !ragged.tensor<?, [S], [T(S)], 384, f32> -> !ragged.tensor<?, [S], 384, f32>
  %b = ragged.reduce <max> %y empty(0.0 : f32) : !ragged.tensor<?, [S], [T(S)], [U(T)], 2, f32> -> !ragged.tensor<?, [S], [T(S)], 2, f32>
  return %a, %b : !ragged.tensor<?, [S], 384, f32>, !ragged.tensor<?, [S], [T(S)], 2, f32>
}

//===----------------------------------------------------------------------===//
// ragged.broadcast
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @broadcast
// CHECK-SAME:    (%[[P:.*]]: tensor<?x2x3xf32>, %[[X:.*]]: !ragged.tensor<?, [L], 2, 3, f32>)
// CHECK-NEXT:    %[[B:.*]] = ragged.broadcast %[[P]] like %[[X]] : tensor<?x2x3xf32>, !ragged.tensor<?, [L], 2, 3, f32>
// CHECK-NEXT:    return %[[B]]
func.func @broadcast(%p: tensor<?x2x3xf32>, %x: !ragged.tensor<?, [L], 2, 3, f32>) -> !ragged.tensor<?, [L], 2, 3, f32> {
  %b = ragged.broadcast %p like %x : tensor<?x2x3xf32>, !ragged.tensor<?, [L], 2, 3, f32>
  return %b : !ragged.tensor<?, [L], 2, 3, f32>
}

//===----------------------------------------------------------------------===//
// ragged.softmax
//===----------------------------------------------------------------------===//

// Per item and feature, [B, L(b), D]; attention scores [B, L(b), L(b), H].
// CHECK-LABEL: func.func @softmax
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [L], 384, f32>, %[[S:.*]]: !ragged.tensor<?, [L], [L], 12, f32>)
// CHECK-NEXT:    %[[A:.*]] = ragged.softmax %[[X]] : !ragged.tensor<?, [L], 384, f32>
// CHECK-NEXT:    %[[B:.*]] = ragged.softmax %[[S]] : !ragged.tensor<?, [L], [L], 12, f32>
// CHECK-NEXT:    return %[[A]], %[[B]]
func.func @softmax(%x: !ragged.tensor<?, [L], 384, f32>, %s: !ragged.tensor<?, [L], [L], 12, f32>)
    -> (!ragged.tensor<?, [L], 384, f32>, !ragged.tensor<?, [L], [L], 12, f32>) {
  %a = ragged.softmax %x : !ragged.tensor<?, [L], 384, f32>
  %b = ragged.softmax %s : !ragged.tensor<?, [L], [L], 12, f32>
  return %a, %b : !ragged.tensor<?, [L], 384, f32>, !ragged.tensor<?, [L], [L], 12, f32>
}

// Nested and without trailing dims.
// CHECK-LABEL: func.func @softmax_nested
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [S], [T(S)], f16>)
// CHECK-NEXT:    %[[A:.*]] = ragged.softmax %[[X]] : !ragged.tensor<?, [S], [T(S)], f16>
// CHECK-NEXT:    return %[[A]]
func.func @softmax_nested(%x: !ragged.tensor<?, [S], [T(S)], f16>) -> !ragged.tensor<?, [S], [T(S)], f16> {
  %a = ragged.softmax %x : !ragged.tensor<?, [S], [T(S)], f16>
  return %a : !ragged.tensor<?, [S], [T(S)], f16>
}

//===----------------------------------------------------------------------===//
// ragged.layer_norm
//===----------------------------------------------------------------------===//

// The default epsilon (1e-5) is elided, another one printed.
// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [L], 384, f32>, %[[G:.*]]: tensor<384xf32>, %[[B:.*]]: tensor<?xf32>)
// CHECK-NEXT:    %[[A:.*]] = ragged.layer_norm %[[X]], %[[G]], %[[B]] {epsilon = 9.765625E-4 : f64}
// CHECK-SAME:      : !ragged.tensor<?, [L], 384, f32>, tensor<384xf32>, tensor<?xf32>
// CHECK-NEXT:    %[[D:.*]] = ragged.layer_norm %[[A]], %[[G]], %[[B]] :
// CHECK-SAME:      !ragged.tensor<?, [L], 384, f32>, tensor<384xf32>, tensor<?xf32>
// CHECK-NEXT:    return %[[D]]
func.func @layer_norm(%x: !ragged.tensor<?, [L], 384, f32>, %g: tensor<384xf32>, %b: tensor<?xf32>) -> !ragged.tensor<?, [L], 384, f32> {
  %a = ragged.layer_norm %x, %g, %b {epsilon = 0.0009765625 : f64} : !ragged.tensor<?, [L], 384, f32>, tensor<384xf32>, tensor<?xf32>
  %d = ragged.layer_norm %a, %g, %b : !ragged.tensor<?, [L], 384, f32>, tensor<384xf32>, tensor<?xf32>
  return %d : !ragged.tensor<?, [L], 384, f32>
}

//===----------------------------------------------------------------------===//
// ragged.scores, ragged.apply, ragged.attention
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @scores_apply
// CHECK-SAME:    (%[[Q:.*]]: !ragged.tensor<?, [L], 12, 32, f32>, %[[K:.*]]: !ragged.tensor<?, [L], 12, 32, f32>,
// CHECK-SAME:     %[[V:.*]]: !ragged.tensor<?, [L], 12, 32, f32>)
// CHECK-NEXT:    %[[S:.*]] = ragged.scores %[[Q]], %[[K]] {causal, scale = 1.767700e-01 : f64}
// CHECK-SAME:      : !ragged.tensor<?, [L], 12, 32, f32>, !ragged.tensor<?, [L], 12, 32, f32>
// CHECK-SAME:      -> !ragged.tensor<?, [L], [L], 12, f32>
// CHECK-NEXT:    %[[S2:.*]] = ragged.scores %[[Q]], %[[K]] :
// CHECK-SAME:      -> !ragged.tensor<?, [L], [L], 12, f32>
// CHECK-NEXT:    %[[P:.*]] = ragged.softmax %[[S]] : !ragged.tensor<?, [L], [L], 12, f32>
// CHECK-NEXT:    %[[O:.*]] = ragged.apply %[[P]], %[[V]]
// CHECK-SAME:      : !ragged.tensor<?, [L], [L], 12, f32>, !ragged.tensor<?, [L], 12, 32, f32>
// CHECK-SAME:      -> !ragged.tensor<?, [L], 12, 32, f32>
// CHECK-NEXT:    return %[[O]], %[[S2]]
func.func @scores_apply(%q: !ragged.tensor<?, [L], 12, 32, f32>, %k: !ragged.tensor<?, [L], 12, 32, f32>,
                        %v: !ragged.tensor<?, [L], 12, 32, f32>)
    -> (!ragged.tensor<?, [L], 12, 32, f32>, !ragged.tensor<?, [L], [L], 12, f32>) {
  %s = ragged.scores %q, %k {scale = 0.17677 : f64, causal}
      : !ragged.tensor<?, [L], 12, 32, f32>, !ragged.tensor<?, [L], 12, 32, f32> -> !ragged.tensor<?, [L], [L], 12, f32>
  %s2 = ragged.scores %q, %k
      : !ragged.tensor<?, [L], 12, 32, f32>, !ragged.tensor<?, [L], 12, 32, f32> -> !ragged.tensor<?, [L], [L], 12, f32>
  %p = ragged.softmax %s : !ragged.tensor<?, [L], [L], 12, f32>
  %o = ragged.apply %p, %v : !ragged.tensor<?, [L], [L], 12, f32>, !ragged.tensor<?, [L], 12, 32, f32>
      -> !ragged.tensor<?, [L], 12, 32, f32>
  return %o, %s2 : !ragged.tensor<?, [L], 12, 32, f32>, !ragged.tensor<?, [L], [L], 12, f32>
}

// CHECK-LABEL: func.func @attention
// CHECK-SAME:    (%[[Q:.*]]: !ragged.tensor<8, [L], 2, 4, f32>, %[[K:.*]]: !ragged.tensor<8, [L], 2, 4, f32>,
// CHECK-SAME:     %[[V:.*]]: !ragged.tensor<8, [L], 2, 4, f32>)
// CHECK-NEXT:    %[[A:.*]] = ragged.attention %[[Q]], %[[K]], %[[V]] {scale = 5.000000e-01 : f64}
// CHECK-SAME:      : !ragged.tensor<8, [L], 2, 4, f32>
// CHECK-NEXT:    %[[B:.*]] = ragged.attention %[[A]], %[[K]], %[[V]] {causal}
// CHECK-SAME:      : !ragged.tensor<8, [L], 2, 4, f32>
// CHECK-NEXT:    return %[[B]]
func.func @attention(%q: !ragged.tensor<8, [L], 2, 4, f32>, %k: !ragged.tensor<8, [L], 2, 4, f32>,
                     %v: !ragged.tensor<8, [L], 2, 4, f32>) -> !ragged.tensor<8, [L], 2, 4, f32> {
  %a = ragged.attention %q, %k, %v {scale = 0.5 : f64} : !ragged.tensor<8, [L], 2, 4, f32>
  %b = ragged.attention %a, %k, %v {causal, scale = 1.0 : f64} : !ragged.tensor<8, [L], 2, 4, f32>
  return %b : !ragged.tensor<8, [L], 2, 4, f32>
}

// CHECK-LABEL: func.func @attention_dropout
// CHECK-SAME:    (%[[Q:.*]]: !ragged.tensor<?, [L], 2, 4, f32>, %[[S:.*]]: tensor<i64>)
// CHECK-NEXT:    %[[O:.*]], %[[LSE:.*]] = ragged.attention %[[Q]], %[[Q]], %[[Q]] dropout(%[[S]] : tensor<i64>) {dropout = 1.000000e-01 : f64}
// CHECK-SAME:      : !ragged.tensor<?, [L], 2, 4, f32> lse !ragged.tensor<?, [L], 2, 1, f32>
// CHECK-NEXT:    %{{.*}}, %{{.*}}, %{{.*}} = ragged.attention_grad %[[Q]], %[[Q]], %[[Q]], %[[O]] output(%[[O]] : {{.*}}) lse(%[[LSE]] : {{.*}}) dropout(%[[S]] : tensor<i64>) {dropout = 1.000000e-01 : f64}
func.func @attention_dropout(%q: !ragged.tensor<?, [L], 2, 4, f32>, %seed: tensor<i64>) -> !ragged.tensor<?, [L], 2, 4, f32> {
  %o, %lse = ragged.attention %q, %q, %q dropout(%seed : tensor<i64>) {dropout = 0.1 : f64}
      : !ragged.tensor<?, [L], 2, 4, f32> lse !ragged.tensor<?, [L], 2, 1, f32>
  %dq, %dk, %dv = ragged.attention_grad %q, %q, %q, %o output(%o : !ragged.tensor<?, [L], 2, 4, f32>)
      lse(%lse : !ragged.tensor<?, [L], 2, 1, f32>) dropout(%seed : tensor<i64>) {dropout = 0.1 : f64}
      : !ragged.tensor<?, [L], 2, 4, f32>
  return %dq : !ragged.tensor<?, [L], 2, 4, f32>
}

// CHECK-LABEL: func.func @attention_grad
// CHECK-SAME:    (%[[Q:.*]]: !ragged.tensor<?, [L], 2, 4, f32>, %[[G:.*]]: !ragged.tensor<?, [L], 2, 4, f32>)
// CHECK-NEXT:    %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = ragged.attention_grad %[[Q]], %[[Q]], %[[Q]], %[[G]] {causal, scale = 5.000000e-01 : f64}
// CHECK-SAME:      : !ragged.tensor<?, [L], 2, 4, f32>
// CHECK-NEXT:    return %[[DQ]], %[[DK]], %[[DV]]
func.func @attention_grad(%q: !ragged.tensor<?, [L], 2, 4, f32>, %g: !ragged.tensor<?, [L], 2, 4, f32>)
    -> (!ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>) {
  %dq, %dk, %dv = ragged.attention_grad %q, %q, %q, %g {causal, scale = 0.5 : f64} : !ragged.tensor<?, [L], 2, 4, f32>
  return %dq, %dk, %dv : !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>
}

// CHECK-LABEL: func.func @attention_saved
// CHECK-SAME:    (%[[Q:.*]]: !ragged.tensor<?, [L], 2, 4, f32>, %[[G:.*]]: !ragged.tensor<?, [L], 2, 4, f32>)
// CHECK-NEXT:    %[[O:.*]], %[[L:.*]] = ragged.attention %[[Q]], %[[Q]], %[[Q]] {causal}
// CHECK-SAME:      : !ragged.tensor<?, [L], 2, 4, f32> lse !ragged.tensor<?, [L], 2, 1, f32>
// CHECK-NEXT:    %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = ragged.attention_grad %[[Q]], %[[Q]], %[[Q]], %[[G]]
// CHECK-SAME:      output(%[[O]] : !ragged.tensor<?, [L], 2, 4, f32>) lse(%[[L]] : !ragged.tensor<?, [L], 2, 1, f32>) {causal}
// CHECK-NEXT:    %{{.*}}, %{{.*}}, %{{.*}} = ragged.attention_grad %[[Q]], %[[Q]], %[[Q]], %[[G]]
// CHECK-SAME:      output(%[[O]] : !ragged.tensor<?, [L], 2, 4, f32>) {causal}
func.func @attention_saved(%q: !ragged.tensor<?, [L], 2, 4, f32>, %g: !ragged.tensor<?, [L], 2, 4, f32>)
    -> (!ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>) {
  %o, %l = ragged.attention %q, %q, %q {causal} : !ragged.tensor<?, [L], 2, 4, f32> lse !ragged.tensor<?, [L], 2, 1, f32>
  %dq, %dk, %dv = ragged.attention_grad %q, %q, %q, %g output(%o : !ragged.tensor<?, [L], 2, 4, f32>)
      lse(%l : !ragged.tensor<?, [L], 2, 1, f32>) {causal} : !ragged.tensor<?, [L], 2, 4, f32>
  %dq2, %dk2, %dv2 = ragged.attention_grad %q, %q, %q, %g output(%o : !ragged.tensor<?, [L], 2, 4, f32>) {causal}
      : !ragged.tensor<?, [L], 2, 4, f32>
  return %dq, %dk, %dv2 : !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>
}

//===----------------------------------------------------------------------===//
// ragged.gather
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @gather
// CHECK-SAME:    (%[[T:.*]]: tensor<30522x384xf32>, %[[I:.*]]: !ragged.tensor<?, [L], i64>,
// CHECK-SAME:     %[[T2:.*]]: tensor<?x?xi32>, %[[J:.*]]: !ragged.tensor<?, [S], [T(S)], i64>)
// CHECK-NEXT:    %[[E:.*]] = ragged.gather %[[T]][%[[I]]]
// CHECK-SAME:      : tensor<30522x384xf32>, !ragged.tensor<?, [L], i64> -> !ragged.tensor<?, [L], 384, f32>
// CHECK-NEXT:    %[[F:.*]] = ragged.gather %[[T2]][%[[J]]]
// CHECK-SAME:      : tensor<?x?xi32>, !ragged.tensor<?, [S], [T(S)], i64> -> !ragged.tensor<?, [S], [T(S)], ?, i32>
// CHECK-NEXT:    return %[[E]], %[[F]]
func.func @gather(%t: tensor<30522x384xf32>, %ids: !ragged.tensor<?, [L], i64>,
                  %t2: tensor<?x?xi32>, %ids2: !ragged.tensor<?, [S], [T(S)], i64>)
    -> (!ragged.tensor<?, [L], 384, f32>, !ragged.tensor<?, [S], [T(S)], ?, i32>) {
  %e = ragged.gather %t[%ids] : tensor<30522x384xf32>, !ragged.tensor<?, [L], i64> -> !ragged.tensor<?, [L], 384, f32>
  %f = ragged.gather %t2[%ids2] : tensor<?x?xi32>, !ragged.tensor<?, [S], [T(S)], i64> -> !ragged.tensor<?, [S], [T(S)], ?, i32>
  return %e, %f : !ragged.tensor<?, [L], 384, f32>, !ragged.tensor<?, [S], [T(S)], ?, i32>
}

//===----------------------------------------------------------------------===//
// ragged.concat, ragged.split
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @concat
// CHECK-SAME:    (%[[A:.*]]: !ragged.tensor<?, [L1], 8, f32>, %[[B:.*]]: !ragged.tensor<?, [L2], 8, f32>)
// CHECK-NEXT:    %[[C:.*]] = ragged.concat %[[A]], %[[B]]
// CHECK-SAME:      : !ragged.tensor<?, [L1], 8, f32>, !ragged.tensor<?, [L2], 8, f32> -> !ragged.tensor<?, [L3], 8, f32>
// CHECK-NEXT:    %[[D:.*]] = ragged.concat %[[A]], %[[A]]
// CHECK-SAME:      : !ragged.tensor<?, [L1], 8, f32>, !ragged.tensor<?, [L1], 8, f32> -> !ragged.tensor<?, [L4], 8, f32>
// CHECK-NEXT:    return %[[C]], %[[D]]
func.func @concat(%a: !ragged.tensor<?, [L1], 8, f32>, %b: !ragged.tensor<?, [L2], 8, f32>)
    -> (!ragged.tensor<?, [L3], 8, f32>, !ragged.tensor<?, [L4], 8, f32>) {
  %c = ragged.concat %a, %b : !ragged.tensor<?, [L1], 8, f32>, !ragged.tensor<?, [L2], 8, f32> -> !ragged.tensor<?, [L3], 8, f32>
  %d = ragged.concat %a, %a : !ragged.tensor<?, [L1], 8, f32>, !ragged.tensor<?, [L1], 8, f32> -> !ragged.tensor<?, [L4], 8, f32>
  return %c, %d : !ragged.tensor<?, [L3], 8, f32>, !ragged.tensor<?, [L4], 8, f32>
}

// CHECK-LABEL: func.func @split
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [L], 2, 8, i32>, %[[N:.*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[H:.*]], %[[T:.*]] = ragged.split %[[X]], %[[N]]
// CHECK-SAME:      : !ragged.tensor<?, [L], 2, 8, i32>, tensor<?xi64>
// CHECK-SAME:      -> !ragged.tensor<?, [L1], 2, 8, i32>, !ragged.tensor<?, [L2], 2, 8, i32>
// CHECK-NEXT:    return %[[H]], %[[T]]
func.func @split(%x: !ragged.tensor<?, [L], 2, 8, i32>, %n: tensor<?xi64>)
    -> (!ragged.tensor<?, [L1], 2, 8, i32>, !ragged.tensor<?, [L2], 2, 8, i32>) {
  %h, %t = ragged.split %x, %n : !ragged.tensor<?, [L], 2, 8, i32>, tensor<?xi64>
      -> !ragged.tensor<?, [L1], 2, 8, i32>, !ragged.tensor<?, [L2], 2, 8, i32>
  return %h, %t : !ragged.tensor<?, [L1], 2, 8, i32>, !ragged.tensor<?, [L2], 2, 8, i32>
}
