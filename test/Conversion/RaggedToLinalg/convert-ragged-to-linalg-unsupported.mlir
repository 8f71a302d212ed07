// RUN: ragged-opt %s --convert-ragged-to-linalg --split-input-file -verify-diagnostics

// Layouts the lowering rejects with a diagnostic instead of crashing or
// producing wrong code.

// A dense dim between two levels of a nested tensor.
func.func @to_padded_dense_between_levels(%x: !ragged.tensor<?, [S], 4, [T(S)], f32>) -> tensor<?x?x4x?xf32> {
  // expected-error @+2 {{'ragged.to_padded' op cannot be lowered: nested ragged tensors are lowered when their ragged dims come first, one per level}}
  // expected-error @+1 {{failed to legalize operation 'ragged.to_padded'}}
  %p = ragged.to_padded %x padding(0.0 : f32) : !ragged.tensor<?, [S], 4, [T(S)], f32> -> tensor<?x?x4x?xf32>
  return %p : tensor<?x?x4x?xf32>
}

// -----

func.func @to_padded_lengths_encoding(%x: !ragged.tensor<?, [L], 4, f32, lengths>) -> tensor<?x?x4xf32> {
  // expected-error @+1 {{'ragged.to_padded' op cannot be lowered: '!ragged.tensor<?, [L], 4, f32, lengths>' uses the 'lengths' encoding; only 'offsets' is lowered}}
  %p = ragged.to_padded %x padding(0.0 : f32) : !ragged.tensor<?, [L], 4, f32, lengths> -> tensor<?x?x4xf32>
  return %p : tensor<?x?x4xf32>
}

// -----

// The extent of a dynamic dense dim before the last ragged dim is not stored
// anywhere.
func.func @to_padded_dynamic_dense_before_ragged(%x: !ragged.tensor<?, ?, [L], f32>) -> tensor<?x?x?xf32> {
  // expected-error @+2 {{'ragged.to_padded' op cannot be lowered: dynamic dense dims before the last ragged dim cannot be recovered from the packed values}}
  // expected-error @+1 {{failed to legalize operation 'ragged.to_padded'}}
  %p = ragged.to_padded %x padding(0.0 : f32) : !ragged.tensor<?, ?, [L], f32> -> tensor<?x?x?xf32>
  return %p : tensor<?x?x?xf32>
}

// -----

// Two ragged dims nested in the same parent (siblings, not a chain).
func.func @mask_sibling_levels(%x: !ragged.tensor<?, [S], [T(S)], [U(S)], f32>) -> tensor<?x?x?x?xi1> {
  // expected-error @+2 {{'ragged.mask' op cannot be lowered: nested ragged tensors are lowered when each ragged dim is nested in the one before it}}
  // expected-error @+1 {{failed to legalize operation 'ragged.mask'}}
  %m = ragged.mask %x : !ragged.tensor<?, [S], [T(S)], [U(S)], f32> -> tensor<?x?x?x?xi1>
  return %m : tensor<?x?x?x?xi1>
}

// -----

func.func @mask_lengths_encoding(%x: !ragged.tensor<?, [L], 4, f32, lengths>) -> tensor<?x?xi1> {
  // expected-error @+1 {{'ragged.mask' op cannot be lowered: '!ragged.tensor<?, [L], 4, f32, lengths>' uses the 'lengths' encoding; only 'offsets' is lowered}}
  %m = ragged.mask %x : !ragged.tensor<?, [L], 4, f32, lengths> -> tensor<?x?xi1>
  return %m : tensor<?x?xi1>
}

// -----

func.func @from_padded_lengths_encoding(%p: tensor<?x?x4xf32>, %len: tensor<?xi64>) -> !ragged.tensor<?, [L], 4, f32, lengths> {
  // expected-error @+1 {{'ragged.from_padded' op cannot be lowered: '!ragged.tensor<?, [L], 4, f32, lengths>' uses the 'lengths' encoding; only 'offsets' is lowered}}
  %x = ragged.from_padded %p lengths(%len) : tensor<?x?x4xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], 4, f32, lengths>
  return %x : !ragged.tensor<?, [L], 4, f32, lengths>
}

// -----

func.func @from_padded_dynamic_dense_before_ragged(%p: tensor<?x?x?xf32>, %len: tensor<?xi64>) -> !ragged.tensor<?, ?, [L], f32> {
  // expected-error @+2 {{'ragged.from_padded' op cannot be lowered: dynamic dense dims before the last ragged dim cannot be recovered from the packed values}}
  // expected-error @+1 {{failed to legalize operation 'ragged.from_padded'}}
  %x = ragged.from_padded %p lengths(%len) : tensor<?x?x?xf32>, tensor<?xi64> -> !ragged.tensor<?, ?, [L], f32>
  return %x : !ragged.tensor<?, ?, [L], f32>
}
