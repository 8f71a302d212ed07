// RUN: ragged-opt %s -split-input-file -verify-diagnostics

// One case per verifier rule of the `!ragged.tensor` type and of each op.

//===----------------------------------------------------------------------===//
// !ragged.tensor
//===----------------------------------------------------------------------===//

// expected-error @+1 {{a ragged tensor needs at least one ragged dim '[SYM]'; use a builtin tensor otherwise}}
func.func private @no_ragged_dim(!ragged.tensor<?, 384, f32>)

// -----

// expected-error @+1 {{ragged dim 'T' is nested in 'S', which must be a ragged dim before it}}
func.func private @unknown_parent(!ragged.tensor<?, [T(S)], 384, f32>)

// -----

// The parent must come before the dims nested under it.
// expected-error @+1 {{ragged dim 'T' is nested in 'S', which must be a ragged dim before it}}
func.func private @parent_after_child(!ragged.tensor<?, [T(S)], [S], 384, f32>)

// -----

// expected-error @+1 {{ragged dim 'L' cannot be nested in itself}}
func.func private @self_nesting(!ragged.tensor<?, [L(L)], 384, f32>)

// -----

// expected-error @+1 {{symbol 'T' is used with two different parents}}
func.func private @two_parents(!ragged.tensor<?, [S], [T(S)], [T], f32>)

// -----

// expected-error @+1 {{symbol 'T' is used with two different parents}}
func.func private @two_nested_parents(!ragged.tensor<?, [S], [U], [T(S)], [T(U)], f32>)

// -----

// expected-error @+1 {{dense dims must be non-negative or '?', got -3}}
func.func private @negative_dense_dim(!ragged.tensor<?, [L], -3, f32>)

// -----

// expected-error @+1 {{batch size must be non-negative or '?', got -2}}
func.func private @negative_batch(!ragged.tensor<-2, [L], f32>)

// -----

// expected-error @+1 {{element type must be an integer, index or float type, got 'complex<f32>'}}
func.func private @complex_element(!ragged.tensor<?, [L], complex<f32>>)

// -----

// expected-error @+1 {{element type must be an integer, index or float type, got 'vector<4xf32>'}}
func.func private @vector_element(!ragged.tensor<?, [L], vector<4xf32>>)

// -----

// expected-error @+1 {{unknown ragged encoding 'dense', expected 'offsets' or 'lengths'}}
func.func private @unknown_encoding(!ragged.tensor<?, [L], f32, dense>)

// -----

// expected-error @+1 {{expected valid keyword}}
func.func private @empty_symbol(!ragged.tensor<?, [], f32>)

// -----

// expected-error @+1 {{expected ','}}
func.func private @missing_element_type(!ragged.tensor<?, [L], 384>)

//===----------------------------------------------------------------------===//
// ragged.pack
//===----------------------------------------------------------------------===//

// -----

func.func @pack_partition_count(%v: tensor<?x384xf32>, %o: tensor<?xi64>) {
  // expected-error @+1 {{'ragged.pack' op expected 1 partitions (one per distinct symbol of '!ragged.tensor<?, [L], 384, f32>'), got 2}}
  %x = ragged.pack %v [%o, %o] : tensor<?x384xf32>, tensor<?xi64>, tensor<?xi64> -> !ragged.tensor<?, [L], 384, f32>
  return
}

// -----

// Nesting adds a partition per level.
func.func @pack_partition_count_nested(%v: tensor<?x8xf32>, %o: tensor<?xi64>) {
  // expected-error @+1 {{'ragged.pack' op expected 2 partitions (one per distinct symbol of '!ragged.tensor<?, [S], [T(S)], 8, f32>'), got 1}}
  %x = ragged.pack %v [%o] : tensor<?x8xf32>, tensor<?xi64> -> !ragged.tensor<?, [S], [T(S)], 8, f32>
  return
}

// -----

func.func @pack_partition_not_i64(%v: tensor<?x384xf32>, %o: tensor<?xi32>) {
  // expected-error @+1 {{'ragged.pack' op operand #1 must be variadic of 1D tensor of 64-bit signless integer values, but got 'tensor<?xi32>'}}
  %x = ragged.pack %v [%o] : tensor<?x384xf32>, tensor<?xi32> -> !ragged.tensor<?, [L], 384, f32>
  return
}

// -----

func.func @pack_element_type(%v: tensor<?x384xf16>, %o: tensor<?xi64>) {
  // expected-error @+1 {{'ragged.pack' op values element type 'f16' does not match 'f32'}}
  %x = ragged.pack %v [%o] : tensor<?x384xf16>, tensor<?xi64> -> !ragged.tensor<?, [L], 384, f32>
  return
}

// -----

func.func @pack_values_rank(%v: tensor<?xf32>, %o: tensor<?xi64>) {
  // expected-error @+1 {{'ragged.pack' op values must have rank 2 ([rows, trailing dense dims...]) for '!ragged.tensor<?, [L], 384, f32>', got 1}}
  %x = ragged.pack %v [%o] : tensor<?xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], 384, f32>
  return
}

// -----

func.func @pack_trailing_dim(%v: tensor<?x128xf32>, %o: tensor<?xi64>) {
  // expected-error @+1 {{'ragged.pack' op values dim 1 is 128 but the ragged type needs 384}}
  %x = ragged.pack %v [%o] : tensor<?x128xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], 384, f32>
  return
}

// -----

// A static batch of 16 needs 17 offsets.
func.func @pack_partition_size(%v: tensor<?x384xf32>, %o: tensor<16xi64>) {
  // expected-error @+1 {{'ragged.pack' op partitions #0 of symbol 'L' must have 17 entries, got 16}}
  %x = ragged.pack %v [%o] : tensor<?x384xf32>, tensor<16xi64> -> !ragged.tensor<16, [L], 384, f32>
  return
}

// -----

func.func @pack_second_partition_size(%v: tensor<?x3xf32>, %h: tensor<?xi64>, %w: tensor<8xi64>) {
  // expected-error @+1 {{'ragged.pack' op partitions #1 of symbol 'W' must have 17 entries, got 8}}
  %x = ragged.pack %v [%h, %w] : tensor<?x3xf32>, tensor<?xi64>, tensor<8xi64> -> !ragged.tensor<16, [H], [W], 3, f32>
  return
}

//===----------------------------------------------------------------------===//
// ragged.values
//===----------------------------------------------------------------------===//

// -----

func.func @values_trailing_dim(%x: !ragged.tensor<?, [L], 384, f32>) {
  // expected-error @+2 {{'ragged.values' op inferred type(s) 'tensor<?x384xf32>' are incompatible with return type(s) of operation 'tensor<?x128xf32>'}}
  // expected-error @+1 {{'ragged.values' op failed to infer returned types}}
  %v = ragged.values %x : !ragged.tensor<?, [L], 384, f32> -> tensor<?x128xf32>
  return
}

// -----

func.func @values_element_type(%x: !ragged.tensor<?, [L], 384, f32>) {
  // expected-error @+2 {{'ragged.values' op inferred type(s) 'tensor<?x384xf32>' are incompatible with return type(s) of operation 'tensor<?x384xf16>'}}
  // expected-error @+1 {{'ragged.values' op failed to infer returned types}}
  %v = ragged.values %x : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf16>
  return
}

// -----

// The values are [rows, trailing dims...], not the padded form.
func.func @values_rank(%x: !ragged.tensor<?, [L], 384, f32>) {
  // expected-error @+2 {{'ragged.values' op inferred type(s) 'tensor<?x384xf32>' are incompatible with return type(s) of operation 'tensor<?x?x384xf32>'}}
  // expected-error @+1 {{'ragged.values' op failed to infer returned types}}
  %v = ragged.values %x : !ragged.tensor<?, [L], 384, f32> -> tensor<?x?x384xf32>
  return
}

//===----------------------------------------------------------------------===//
// ragged.offsets
//===----------------------------------------------------------------------===//

// -----

func.func @offsets_unknown_symbol(%x: !ragged.tensor<?, [L], 384, f32>) {
  // expected-error @+2 {{'ragged.offsets' op symbol 'M' is not a ragged dim of '!ragged.tensor<?, [L], 384, f32>'}}
  // expected-error @+1 {{'ragged.offsets' op failed to infer returned types}}
  %o = ragged.offsets %x["M"] : !ragged.tensor<?, [L], 384, f32> -> tensor<?xi64>
  return
}

// -----

func.func @offsets_size(%x: !ragged.tensor<16, [L], f32>) {
  // expected-error @+2 {{'ragged.offsets' op inferred type(s) 'tensor<17xi64>' are incompatible with return type(s) of operation 'tensor<16xi64>'}}
  // expected-error @+1 {{'ragged.offsets' op failed to infer returned types}}
  %o = ragged.offsets %x["L"] : !ragged.tensor<16, [L], f32> -> tensor<16xi64>
  return
}

// -----

func.func @offsets_not_i64(%x: !ragged.tensor<?, [L], 384, f32>) {
  // expected-error @+1 {{'ragged.offsets' op result #0 must be 1D tensor of 64-bit signless integer values, but got 'tensor<?xi32>'}}
  %o = ragged.offsets %x["L"] : !ragged.tensor<?, [L], 384, f32> -> tensor<?xi32>
  return
}

//===----------------------------------------------------------------------===//
// ragged.to_padded
//===----------------------------------------------------------------------===//

// -----

func.func @to_padded_padding_type(%x: !ragged.tensor<?, [L], 384, f32>) {
  // expected-error @+1 {{'ragged.to_padded' op padding value type 'i32' does not match element type 'f32'}}
  %p = ragged.to_padded %x padding(0 : i32) : !ragged.tensor<?, [L], 384, f32> -> tensor<?x?x384xf32>
  return
}

// -----

func.func @to_padded_element_type(%x: !ragged.tensor<?, [L], 384, f32>) {
  // expected-error @+2 {{'ragged.to_padded' op inferred type(s) 'tensor<?x?x384xf32>' are incompatible with return type(s) of operation 'tensor<?x?x384xf16>'}}
  // expected-error @+1 {{'ragged.to_padded' op failed to infer returned types}}
  %p = ragged.to_padded %x padding(0.0 : f32) : !ragged.tensor<?, [L], 384, f32> -> tensor<?x?x384xf16>
  return
}

// -----

func.func @to_padded_rank(%x: !ragged.tensor<?, [L], 384, f32>) {
  // expected-error @+2 {{'ragged.to_padded' op inferred type(s) 'tensor<?x?x384xf32>' are incompatible with return type(s) of operation 'tensor<?x384xf32>'}}
  // expected-error @+1 {{'ragged.to_padded' op failed to infer returned types}}
  %p = ragged.to_padded %x padding(0.0 : f32) : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
  return
}

// -----

func.func @to_padded_dense_dim(%x: !ragged.tensor<?, [L], 384, f32>) {
  // expected-error @+2 {{'ragged.to_padded' op inferred type(s) 'tensor<?x?x384xf32>' are incompatible with return type(s) of operation 'tensor<?x?x128xf32>'}}
  // expected-error @+1 {{'ragged.to_padded' op failed to infer returned types}}
  %p = ragged.to_padded %x padding(0.0 : f32) : !ragged.tensor<?, [L], 384, f32> -> tensor<?x?x128xf32>
  return
}

// -----

func.func @to_padded_batch(%x: !ragged.tensor<4, [L], f32>) {
  // expected-error @+2 {{'ragged.to_padded' op inferred type(s) 'tensor<4x?xf32>' are incompatible with return type(s) of operation 'tensor<8x?xf32>'}}
  // expected-error @+1 {{'ragged.to_padded' op failed to infer returned types}}
  %p = ragged.to_padded %x padding(0.0 : f32) : !ragged.tensor<4, [L], f32> -> tensor<8x?xf32>
  return
}

//===----------------------------------------------------------------------===//
// ragged.from_padded
//===----------------------------------------------------------------------===//

// -----

func.func @from_padded_nested(%p: tensor<?x?x?x8xf32>, %a: tensor<?xi64>, %b: tensor<?xi64>) {
  // expected-error @+1 {{'ragged.from_padded' op needs a single-level result (no nested ragged dims); got '!ragged.tensor<?, [S], [T(S)], 8, f32>'}}
  %x = ragged.from_padded %p lengths(%a, %b) : tensor<?x?x?x8xf32>, tensor<?xi64>, tensor<?xi64> -> !ragged.tensor<?, [S], [T(S)], 8, f32>
  return
}

// -----

func.func @from_padded_lengths_count(%p: tensor<?x?x384xf32>, %a: tensor<?xi64>) {
  // expected-error @+1 {{'ragged.from_padded' op expected 1 lengths (one per distinct symbol of '!ragged.tensor<?, [L], 384, f32>'), got 2}}
  %x = ragged.from_padded %p lengths(%a, %a) : tensor<?x?x384xf32>, tensor<?xi64>, tensor<?xi64> -> !ragged.tensor<?, [L], 384, f32>
  return
}

// -----

// Lengths have one entry per item, not one per item + 1.
func.func @from_padded_lengths_size(%p: tensor<16x?x384xf32>, %a: tensor<17xi64>) {
  // expected-error @+1 {{'ragged.from_padded' op lengths #0 of symbol 'L' must have 16 entries, got 17}}
  %x = ragged.from_padded %p lengths(%a) : tensor<16x?x384xf32>, tensor<17xi64> -> !ragged.tensor<16, [L], 384, f32>
  return
}

// -----

func.func @from_padded_rank(%p: tensor<?x?xf32>, %a: tensor<?xi64>) {
  // expected-error @+1 {{'ragged.from_padded' op padded tensor must have rank 3, got 2}}
  %x = ragged.from_padded %p lengths(%a) : tensor<?x?xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], 384, f32>
  return
}

//===----------------------------------------------------------------------===//
// ragged.mask
//===----------------------------------------------------------------------===//

// -----

// Dense dims are not part of the mask.
func.func @mask_rank(%x: !ragged.tensor<?, [L], 384, f32>) {
  // expected-error @+2 {{'ragged.mask' op inferred type(s) 'tensor<?x?xi1>' are incompatible with return type(s) of operation 'tensor<?x?x384xi1>'}}
  // expected-error @+1 {{'ragged.mask' op failed to infer returned types}}
  %m = ragged.mask %x : !ragged.tensor<?, [L], 384, f32> -> tensor<?x?x384xi1>
  return
}

// -----

func.func @mask_batch(%x: !ragged.tensor<4, [L], f32>) {
  // expected-error @+2 {{'ragged.mask' op inferred type(s) 'tensor<4x?xi1>' are incompatible with return type(s) of operation 'tensor<8x?xi1>'}}
  // expected-error @+1 {{'ragged.mask' op failed to infer returned types}}
  %m = ragged.mask %x : !ragged.tensor<4, [L], f32> -> tensor<8x?xi1>
  return
}

// -----

func.func @mask_element_type(%x: !ragged.tensor<?, [L], 384, f32>) {
  // expected-error @+1 {{'ragged.mask' op result #0 must be tensor of 1-bit signless integer values, but got 'tensor<?x?xi8>'}}
  %m = ragged.mask %x : !ragged.tensor<?, [L], 384, f32> -> tensor<?x?xi8>
  return
}

//===----------------------------------------------------------------------===//
// ragged.match
//===----------------------------------------------------------------------===//

// -----

func.func @match_dense_dims(%y: !ragged.tensor<?, [M], 8, f32>, %x: !ragged.tensor<?, [L], 4, f32>) {
  // expected-error @+1 {{'ragged.match' op source '!ragged.tensor<?, [M], 8, f32>' and reference '!ragged.tensor<?, [L], 4, f32>' must have the same dims (ragged dims in the same places, equal dense sizes)}}
  %r = ragged.match %y to %x : !ragged.tensor<?, [M], 8, f32> to !ragged.tensor<?, [L], 4, f32> -> !ragged.tensor<?, [L], 4, f32>
  return
}

// -----

func.func @match_ragged_dim_places(%y: !ragged.tensor<?, [M], 8, f32>, %x: !ragged.tensor<?, 8, [L], f32>) {
  // expected-error @+1 {{'ragged.match' op source '!ragged.tensor<?, [M], 8, f32>' and reference '!ragged.tensor<?, 8, [L], f32>' must have the same dims (ragged dims in the same places, equal dense sizes)}}
  %r = ragged.match %y to %x : !ragged.tensor<?, [M], 8, f32> to !ragged.tensor<?, 8, [L], f32> -> !ragged.tensor<?, 8, [L], f32>
  return
}

// -----

// Two symbols of the source onto one of the reference.
func.func @match_symbols_not_injective(%y: !ragged.tensor<?, [A], [B], f32>, %x: !ragged.tensor<?, [L], [L], f32>) {
  // expected-error @+1 {{'ragged.match' op symbols of '!ragged.tensor<?, [A], [B], f32>' and '!ragged.tensor<?, [L], [L], f32>' do not correspond one to one}}
  %r = ragged.match %y to %x : !ragged.tensor<?, [A], [B], f32> to !ragged.tensor<?, [L], [L], f32> -> !ragged.tensor<?, [L], [L], f32>
  return
}

// -----

// One symbol of the source onto two of the reference.
func.func @match_symbols_not_surjective(%y: !ragged.tensor<?, [L], [L], f32>, %x: !ragged.tensor<?, [A], [B], f32>) {
  // expected-error @+1 {{'ragged.match' op symbols of '!ragged.tensor<?, [L], [L], f32>' and '!ragged.tensor<?, [A], [B], f32>' do not correspond one to one}}
  %r = ragged.match %y to %x : !ragged.tensor<?, [L], [L], f32> to !ragged.tensor<?, [A], [B], f32> -> !ragged.tensor<?, [A], [B], f32>
  return
}

// -----

// The result takes the symbols of the reference.
func.func @match_result_symbols(%y: !ragged.tensor<?, [M], 8, f32>, %x: !ragged.tensor<?, [L], 8, f32>) {
  // expected-error @+2 {{'ragged.match' op inferred type(s) '!ragged.tensor<?, [L], 8, f32>' are incompatible with return type(s) of operation '!ragged.tensor<?, [M], 8, f32>'}}
  // expected-error @+1 {{'ragged.match' op failed to infer returned types}}
  %r = ragged.match %y to %x : !ragged.tensor<?, [M], 8, f32> to !ragged.tensor<?, [L], 8, f32> -> !ragged.tensor<?, [M], 8, f32>
  return
}

// -----

// The result keeps the element type of the source.
func.func @match_result_element_type(%y: !ragged.tensor<?, [M], 8, i32>, %x: !ragged.tensor<?, [L], 8, f32>) {
  // expected-error @+2 {{'ragged.match' op inferred type(s) '!ragged.tensor<?, [L], 8, i32>' are incompatible with return type(s) of operation '!ragged.tensor<?, [L], 8, f32>'}}
  // expected-error @+1 {{'ragged.match' op failed to infer returned types}}
  %r = ragged.match %y to %x : !ragged.tensor<?, [M], 8, i32> to !ragged.tensor<?, [L], 8, f32> -> !ragged.tensor<?, [L], 8, f32>
  return
}

// -----

func.func @to_padded_static_ragged_extent(%x: !ragged.tensor<?, [L], 4, f32>) {
  // expected-error @+1 {{'ragged.to_padded' op padded dim 1 is ragged and takes the largest extent at run time, so it must be '?', got 5}}
  %p = ragged.to_padded %x padding(0.0 : f32) : !ragged.tensor<?, [L], 4, f32> -> tensor<?x5x4xf32>
  return
}

// -----

func.func @mask_unranked(%x: !ragged.tensor<?, [L], 4, f32>) {
  // expected-error @+2 {{'ragged.mask' op inferred type(s) 'tensor<?x?xi1>' are incompatible with return type(s) of operation 'tensor<*xi1>'}}
  // expected-error @+1 {{'ragged.mask' op failed to infer returned types}}
  %m = ragged.mask %x : !ragged.tensor<?, [L], 4, f32> -> tensor<*xi1>
  return
}

// -----

func.func @match_nesting_differs(%x: !ragged.tensor<?, [A], [B(A)], 4, f32>, %y: !ragged.tensor<?, [S], [T], 4, f32>) {
  // expected-error @+1 {{'ragged.match' op nesting of '!ragged.tensor<?, [A], [B(A)], 4, f32>' and '!ragged.tensor<?, [S], [T], 4, f32>' differs}}
  %z = ragged.match %x to %y : !ragged.tensor<?, [A], [B(A)], 4, f32> to !ragged.tensor<?, [S], [T], 4, f32> -> !ragged.tensor<?, [S], [T], 4, f32>
  return
}

// -----

func.func @match_batch_differs(%x: !ragged.tensor<4, [M], 8, f32>, %y: !ragged.tensor<8, [L], 8, f32>) {
  // expected-error @+1 {{'ragged.match' op batch sizes of '!ragged.tensor<4, [M], 8, f32>' and '!ragged.tensor<8, [L], 8, f32>' differ}}
  %z = ragged.match %x to %y : !ragged.tensor<4, [M], 8, f32> to !ragged.tensor<8, [L], 8, f32> -> !ragged.tensor<8, [L], 8, f32>
  return
}

// -----

func.func @match_encoding_differs(%x: !ragged.tensor<?, [M], 8, f32, lengths>, %y: !ragged.tensor<?, [L], 8, f32>) {
  // expected-error @+1 {{'ragged.match' op encodings of '!ragged.tensor<?, [M], 8, f32, lengths>' and '!ragged.tensor<?, [L], 8, f32>' differ}}
  %z = ragged.match %x to %y : !ragged.tensor<?, [M], 8, f32, lengths> to !ragged.tensor<?, [L], 8, f32> -> !ragged.tensor<?, [L], 8, f32>
  return
}

// -----

// expected-error @+1 {{dense dims must be non-negative or '?', got -1}}
func.func @negative_dense_dim(%x: !ragged.tensor<?, [L], -1, f32>)
