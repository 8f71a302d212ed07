// RUN: ragged-opt %s --convert-ragged-to-linalg --split-input-file -verify-diagnostics

// Compute ops that verify but whose layout the lowering rejects with a
// diagnostic instead of crashing or producing wrong code.

// softmax accepts any float layout; the lowering needs the rows of a softmax
// group to be addressable. A dense dim between two levels is not.
func.func @softmax_dense_between_levels(%x: !ragged.tensor<?, [S], 4, [T(S)], f32>) -> !ragged.tensor<?, [S], 4, [T(S)], f32> {
  // expected-error @+2 {{'ragged.softmax' op cannot be lowered: nested ragged tensors are lowered when their ragged dims come first, one per level}}
  // expected-error @+1 {{failed to legalize operation 'ragged.softmax'}}
  %y = ragged.softmax %x : !ragged.tensor<?, [S], 4, [T(S)], f32>
  return %y : !ragged.tensor<?, [S], 4, [T(S)], f32>
}

// -----

// Two ragged dims nested in the same parent (siblings, not a chain).
func.func @softmax_sibling_levels(%x: !ragged.tensor<?, [S], [T(S)], [U(S)], f32>) -> !ragged.tensor<?, [S], [T(S)], [U(S)], f32> {
  // expected-error @+2 {{'ragged.softmax' op cannot be lowered: nested ragged tensors are lowered when each ragged dim is nested in the one before it}}
  // expected-error @+1 {{failed to legalize operation 'ragged.softmax'}}
  %y = ragged.softmax %x : !ragged.tensor<?, [S], [T(S)], [U(S)], f32>
  return %y : !ragged.tensor<?, [S], [T(S)], [U(S)], f32>
}

// -----

// The extent of a dynamic dense dim before the last ragged dim, which sizes
// the softmax groups, is not stored anywhere.
func.func @softmax_dynamic_dense_before_ragged(%x: !ragged.tensor<?, ?, [L], f32>) -> !ragged.tensor<?, ?, [L], f32> {
  // expected-error @+2 {{'ragged.softmax' op cannot be lowered: dynamic dense dims before the last ragged dim cannot be recovered from the packed values}}
  // expected-error @+1 {{failed to legalize operation 'ragged.softmax'}}
  %y = ragged.softmax %x : !ragged.tensor<?, ?, [L], f32>
  return %y : !ragged.tensor<?, ?, [L], f32>
}

// -----

// Only the offsets encoding is lowered; the pass says so before converting.
func.func @reduce_lengths_encoding(%x: !ragged.tensor<?, [L], 4, f32, lengths>) -> tensor<?x4xf32> {
  // expected-error @+1 {{'ragged.reduce' op cannot be lowered: '!ragged.tensor<?, [L], 4, f32, lengths>' uses the 'lengths' encoding; only 'offsets' is lowered}}
  %y = ragged.reduce <sum> %x : !ragged.tensor<?, [L], 4, f32, lengths> -> tensor<?x4xf32>
  return %y : tensor<?x4xf32>
}
