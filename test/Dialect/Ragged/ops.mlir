// RUN: ragged-opt %s | ragged-opt | FileCheck %s
// RUN: ragged-opt %s --mlir-print-op-generic | ragged-opt | FileCheck %s

// Round trip of the `!ragged.tensor` type in each of its forms and of every
// op of the dialect. Function arguments feed the ops.

//===----------------------------------------------------------------------===//
// !ragged.tensor
//===----------------------------------------------------------------------===//

// a) one ragged dim, dynamic batch: B x L(b) x 384.
// CHECK-LABEL: func.func @type_single
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [L], 384, f32>)
// CHECK-SAME:    -> !ragged.tensor<?, [L], 384, f32>
// CHECK-NEXT:    return %[[X]] : !ragged.tensor<?, [L], 384, f32>
func.func @type_single(%x: !ragged.tensor<?, [L], 384, f32>) -> !ragged.tensor<?, [L], 384, f32> {
  return %x : !ragged.tensor<?, [L], 384, f32>
}

// b) two independent ragged dims, static batch: 16 x H(b) x W(b) x 3.
// CHECK-LABEL: func.func @type_two_symbols
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<16, [H], [W], 3, f32>)
// CHECK-SAME:    -> !ragged.tensor<16, [H], [W], 3, f32>
// CHECK-NEXT:    return %[[X]] : !ragged.tensor<16, [H], [W], 3, f32>
func.func @type_two_symbols(%x: !ragged.tensor<16, [H], [W], 3, f32>) -> !ragged.tensor<16, [H], [W], 3, f32> {
  return %x : !ragged.tensor<16, [H], [W], 3, f32>
}

// c) nesting: B x S(b) x T(b, s) x 384.
// CHECK-LABEL: func.func @type_nested
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [S], [T(S)], 384, f32>)
// CHECK-SAME:    -> !ragged.tensor<?, [S], [T(S)], 384, f32>
// CHECK-NEXT:    return %[[X]] : !ragged.tensor<?, [S], [T(S)], 384, f32>
func.func @type_nested(%x: !ragged.tensor<?, [S], [T(S)], 384, f32>) -> !ragged.tensor<?, [S], [T(S)], 384, f32> {
  return %x : !ragged.tensor<?, [S], [T(S)], 384, f32>
}

// One symbol used twice: B x L(b) x L(b) x 12 (attention scores).
// CHECK-LABEL: func.func @type_square
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [L], [L], 12, f32>)
// CHECK-SAME:    -> !ragged.tensor<?, [L], [L], 12, f32>
// CHECK-NEXT:    return %[[X]] : !ragged.tensor<?, [L], [L], 12, f32>
func.func @type_square(%x: !ragged.tensor<?, [L], [L], 12, f32>) -> !ragged.tensor<?, [L], [L], 12, f32> {
  return %x : !ragged.tensor<?, [L], [L], 12, f32>
}

// Dynamic and zero dense dims, a dense dim before the ragged one, no
// trailing dims, integer element types.
// CHECK-LABEL: func.func @type_dense_dims
// CHECK-SAME:    (%[[A:.*]]: !ragged.tensor<0, [L], ?, i8>,
// CHECK-SAME:     %[[B:.*]]: !ragged.tensor<?, 4, [L], 0, i32>,
// CHECK-SAME:     %[[C:.*]]: !ragged.tensor<?, [L], f64>)
// CHECK-NEXT:    return
func.func @type_dense_dims(%a: !ragged.tensor<0, [L], ?, i8>,
                           %b: !ragged.tensor<?, 4, [L], 0, i32>,
                           %c: !ragged.tensor<?, [L], f64>) {
  return
}

// The `lengths` encoding is printed; the default `offsets` one is elided.
// CHECK-LABEL: func.func @type_encoding
// CHECK-SAME:    (%[[L:.*]]: !ragged.tensor<?, [L], 8, i32, lengths>,
// CHECK-SAME:     %[[O:.*]]: !ragged.tensor<?, [L], 8, i32>)
// CHECK-SAME:    -> !ragged.tensor<?, [L], 8, i32, lengths>
// CHECK-NEXT:    return %[[L]] : !ragged.tensor<?, [L], 8, i32, lengths>
func.func @type_encoding(%l: !ragged.tensor<?, [L], 8, i32, lengths>,
                         %o: !ragged.tensor<?, [L], 8, i32, offsets>) -> !ragged.tensor<?, [L], 8, i32, lengths> {
  return %l : !ragged.tensor<?, [L], 8, i32, lengths>
}

//===----------------------------------------------------------------------===//
// ragged.pack
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @pack
// CHECK-SAME:    (%[[V:.*]]: tensor<?x384xf32>, %[[O:.*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[X:.*]] = ragged.pack %[[V]][%[[O]]]
// CHECK-SAME:      : tensor<?x384xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], 384, f32>
// CHECK-NEXT:    return %[[X]]
func.func @pack(%v: tensor<?x384xf32>, %o: tensor<?xi64>) -> !ragged.tensor<?, [L], 384, f32> {
  %x = ragged.pack %v [%o] : tensor<?x384xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], 384, f32>
  return %x : !ragged.tensor<?, [L], 384, f32>
}

// A static batch of 16 gives partitions of 17 offsets; dynamic ones are
// accepted too.
// CHECK-LABEL: func.func @pack_two_symbols
// CHECK-SAME:    (%[[V:.*]]: tensor<?x3xf32>, %[[H:.*]]: tensor<17xi64>, %[[W:.*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[X:.*]] = ragged.pack %[[V]][%[[H]], %[[W]]]
// CHECK-SAME:      : tensor<?x3xf32>, tensor<17xi64>, tensor<?xi64> -> !ragged.tensor<16, [H], [W], 3, f32>
// CHECK-NEXT:    return %[[X]]
func.func @pack_two_symbols(%v: tensor<?x3xf32>, %h: tensor<17xi64>, %w: tensor<?xi64>) -> !ragged.tensor<16, [H], [W], 3, f32> {
  %x = ragged.pack %v [%h, %w] : tensor<?x3xf32>, tensor<17xi64>, tensor<?xi64> -> !ragged.tensor<16, [H], [W], 3, f32>
  return %x : !ragged.tensor<16, [H], [W], 3, f32>
}

// One partition per level; the nested one has one entry per sentence + 1.
// CHECK-LABEL: func.func @pack_nested
// CHECK-SAME:    (%[[V:.*]]: tensor<?x384xf32>, %[[S:.*]]: tensor<?xi64>, %[[T:.*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[X:.*]] = ragged.pack %[[V]][%[[S]], %[[T]]]
// CHECK-SAME:      : tensor<?x384xf32>, tensor<?xi64>, tensor<?xi64> -> !ragged.tensor<?, [S], [T(S)], 384, f32>
// CHECK-NEXT:    return %[[X]]
func.func @pack_nested(%v: tensor<?x384xf32>, %s: tensor<?xi64>, %t: tensor<?xi64>) -> !ragged.tensor<?, [S], [T(S)], 384, f32> {
  %x = ragged.pack %v [%s, %t] : tensor<?x384xf32>, tensor<?xi64>, tensor<?xi64> -> !ragged.tensor<?, [S], [T(S)], 384, f32>
  return %x : !ragged.tensor<?, [S], [T(S)], 384, f32>
}

// A symbol used twice has one partition.
// CHECK-LABEL: func.func @pack_square
// CHECK-SAME:    (%[[V:.*]]: tensor<?x12xf32>, %[[O:.*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[X:.*]] = ragged.pack %[[V]][%[[O]]]
// CHECK-SAME:      : tensor<?x12xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], [L], 12, f32>
// CHECK-NEXT:    return %[[X]]
func.func @pack_square(%v: tensor<?x12xf32>, %o: tensor<?xi64>) -> !ragged.tensor<?, [L], [L], 12, f32> {
  %x = ragged.pack %v [%o] : tensor<?x12xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], [L], 12, f32>
  return %x : !ragged.tensor<?, [L], [L], 12, f32>
}

// Values without trailing dense dims, `lengths` encoding.
// CHECK-LABEL: func.func @pack_lengths
// CHECK-SAME:    (%[[V:.*]]: tensor<?xi32>, %[[O:.*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[X:.*]] = ragged.pack %[[V]][%[[O]]]
// CHECK-SAME:      : tensor<?xi32>, tensor<?xi64> -> !ragged.tensor<?, [L], i32, lengths>
// CHECK-NEXT:    return %[[X]]
func.func @pack_lengths(%v: tensor<?xi32>, %o: tensor<?xi64>) -> !ragged.tensor<?, [L], i32, lengths> {
  %x = ragged.pack %v [%o] : tensor<?xi32>, tensor<?xi64> -> !ragged.tensor<?, [L], i32, lengths>
  return %x : !ragged.tensor<?, [L], i32, lengths>
}

//===----------------------------------------------------------------------===//
// ragged.values
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @values
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [L], 384, f32>)
// CHECK-NEXT:    %[[V:.*]] = ragged.values %[[X]]
// CHECK-SAME:      : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
// CHECK-NEXT:    return %[[V]]
func.func @values(%x: !ragged.tensor<?, [L], 384, f32>) -> tensor<?x384xf32> {
  %v = ragged.values %x : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
  return %v : tensor<?x384xf32>
}

// A static row count and a dynamic trailing dim are compatible.
// CHECK-LABEL: func.func @values_two_symbols
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<16, [H], [W], 3, f32>)
// CHECK-NEXT:    %[[V:.*]] = ragged.values %[[X]]
// CHECK-SAME:      : !ragged.tensor<16, [H], [W], 3, f32> -> tensor<100x?xf32>
// CHECK-NEXT:    return %[[V]]
func.func @values_two_symbols(%x: !ragged.tensor<16, [H], [W], 3, f32>) -> tensor<100x?xf32> {
  %v = ragged.values %x : !ragged.tensor<16, [H], [W], 3, f32> -> tensor<100x?xf32>
  return %v : tensor<100x?xf32>
}

// CHECK-LABEL: func.func @values_nested
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [S], [T(S)], 384, f32>)
// CHECK-NEXT:    %[[V:.*]] = ragged.values %[[X]]
// CHECK-SAME:      : !ragged.tensor<?, [S], [T(S)], 384, f32> -> tensor<?x384xf32>
// CHECK-NEXT:    return %[[V]]
func.func @values_nested(%x: !ragged.tensor<?, [S], [T(S)], 384, f32>) -> tensor<?x384xf32> {
  %v = ragged.values %x : !ragged.tensor<?, [S], [T(S)], 384, f32> -> tensor<?x384xf32>
  return %v : tensor<?x384xf32>
}

// Dense dims before the last ragged dim are not part of the values type.
// CHECK-LABEL: func.func @values_dense_before
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, 4, [L], i32>)
// CHECK-NEXT:    %[[V:.*]] = ragged.values %[[X]]
// CHECK-SAME:      : !ragged.tensor<?, 4, [L], i32> -> tensor<?xi32>
// CHECK-NEXT:    return %[[V]]
func.func @values_dense_before(%x: !ragged.tensor<?, 4, [L], i32>) -> tensor<?xi32> {
  %v = ragged.values %x : !ragged.tensor<?, 4, [L], i32> -> tensor<?xi32>
  return %v : tensor<?xi32>
}

//===----------------------------------------------------------------------===//
// ragged.offsets
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @offsets
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [L], 384, f32>)
// CHECK-NEXT:    %[[O:.*]] = ragged.offsets %[[X]]["L"]
// CHECK-SAME:      : !ragged.tensor<?, [L], 384, f32> -> tensor<?xi64>
// CHECK-NEXT:    return %[[O]]
func.func @offsets(%x: !ragged.tensor<?, [L], 384, f32>) -> tensor<?xi64> {
  %o = ragged.offsets %x["L"] : !ragged.tensor<?, [L], 384, f32> -> tensor<?xi64>
  return %o : tensor<?xi64>
}

// A static batch of 16 gives 17 offsets.
// CHECK-LABEL: func.func @offsets_two_symbols
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<16, [H], [W], 3, f32>)
// CHECK-NEXT:    %[[H:.*]] = ragged.offsets %[[X]]["H"]
// CHECK-SAME:      : !ragged.tensor<16, [H], [W], 3, f32> -> tensor<17xi64>
// CHECK-NEXT:    %[[W:.*]] = ragged.offsets %[[X]]["W"]
// CHECK-SAME:      : !ragged.tensor<16, [H], [W], 3, f32> -> tensor<?xi64>
// CHECK-NEXT:    return %[[H]], %[[W]]
func.func @offsets_two_symbols(%x: !ragged.tensor<16, [H], [W], 3, f32>) -> (tensor<17xi64>, tensor<?xi64>) {
  %h = ragged.offsets %x["H"] : !ragged.tensor<16, [H], [W], 3, f32> -> tensor<17xi64>
  %w = ragged.offsets %x["W"] : !ragged.tensor<16, [H], [W], 3, f32> -> tensor<?xi64>
  return %h, %w : tensor<17xi64>, tensor<?xi64>
}

// A nested symbol's partition size does not follow from the batch, even a
// static one.
// CHECK-LABEL: func.func @offsets_nested
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<4, [S], [T(S)], 8, f32>)
// CHECK-NEXT:    %[[S:.*]] = ragged.offsets %[[X]]["S"]
// CHECK-SAME:      : !ragged.tensor<4, [S], [T(S)], 8, f32> -> tensor<5xi64>
// CHECK-NEXT:    %[[T:.*]] = ragged.offsets %[[X]]["T"]
// CHECK-SAME:      : !ragged.tensor<4, [S], [T(S)], 8, f32> -> tensor<?xi64>
// CHECK-NEXT:    return %[[S]], %[[T]]
func.func @offsets_nested(%x: !ragged.tensor<4, [S], [T(S)], 8, f32>) -> (tensor<5xi64>, tensor<?xi64>) {
  %s = ragged.offsets %x["S"] : !ragged.tensor<4, [S], [T(S)], 8, f32> -> tensor<5xi64>
  %t = ragged.offsets %x["T"] : !ragged.tensor<4, [S], [T(S)], 8, f32> -> tensor<?xi64>
  return %s, %t : tensor<5xi64>, tensor<?xi64>
}

//===----------------------------------------------------------------------===//
// ragged.to_padded
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @to_padded
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [L], 384, f32>)
// CHECK-NEXT:    %[[P:.*]] = ragged.to_padded %[[X]] padding(0.000000e+00 : f32)
// CHECK-SAME:      : !ragged.tensor<?, [L], 384, f32> -> tensor<?x?x384xf32>
// CHECK-NEXT:    return %[[P]]
func.func @to_padded(%x: !ragged.tensor<?, [L], 384, f32>) -> tensor<?x?x384xf32> {
  %p = ragged.to_padded %x padding(0.0 : f32) : !ragged.tensor<?, [L], 384, f32> -> tensor<?x?x384xf32>
  return %p : tensor<?x?x384xf32>
}

// A static padded extent for a ragged dim is allowed (the caller knows it).
// CHECK-LABEL: func.func @to_padded_two_symbols
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<16, [H], [W], 3, f32>)
// CHECK-NEXT:    %[[P:.*]] = ragged.to_padded %[[X]] padding(-1.000000e+00 : f32)
// CHECK-SAME:      : !ragged.tensor<16, [H], [W], 3, f32> -> tensor<16x?x?x3xf32>
// CHECK-NEXT:    return %[[P]]
func.func @to_padded_two_symbols(%x: !ragged.tensor<16, [H], [W], 3, f32>) -> tensor<16x?x?x3xf32> {
  %p = ragged.to_padded %x padding(-1.0 : f32) : !ragged.tensor<16, [H], [W], 3, f32> -> tensor<16x?x?x3xf32>
  return %p : tensor<16x?x?x3xf32>
}

// CHECK-LABEL: func.func @to_padded_nested
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [S], [T(S)], 384, f32>)
// CHECK-NEXT:    %[[P:.*]] = ragged.to_padded %[[X]] padding(0.000000e+00 : f32)
// CHECK-SAME:      : !ragged.tensor<?, [S], [T(S)], 384, f32> -> tensor<?x?x?x384xf32>
// CHECK-NEXT:    return %[[P]]
func.func @to_padded_nested(%x: !ragged.tensor<?, [S], [T(S)], 384, f32>) -> tensor<?x?x?x384xf32> {
  %p = ragged.to_padded %x padding(0.0 : f32) : !ragged.tensor<?, [S], [T(S)], 384, f32> -> tensor<?x?x?x384xf32>
  return %p : tensor<?x?x?x384xf32>
}

// Integer padding.
// CHECK-LABEL: func.func @to_padded_square
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [L], [L], 12, i32>)
// CHECK-NEXT:    %[[P:.*]] = ragged.to_padded %[[X]] padding(-7 : i32)
// CHECK-SAME:      : !ragged.tensor<?, [L], [L], 12, i32> -> tensor<?x?x?x12xi32>
// CHECK-NEXT:    return %[[P]]
func.func @to_padded_square(%x: !ragged.tensor<?, [L], [L], 12, i32>) -> tensor<?x?x?x12xi32> {
  %p = ragged.to_padded %x padding(-7 : i32) : !ragged.tensor<?, [L], [L], 12, i32> -> tensor<?x?x?x12xi32>
  return %p : tensor<?x?x?x12xi32>
}

//===----------------------------------------------------------------------===//
// ragged.from_padded
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @from_padded
// CHECK-SAME:    (%[[P:.*]]: tensor<?x?x384xf32>, %[[LEN:.*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[X:.*]] = ragged.from_padded %[[P]] lengths(%[[LEN]])
// CHECK-SAME:      : tensor<?x?x384xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], 384, f32>
// CHECK-NEXT:    return %[[X]]
func.func @from_padded(%p: tensor<?x?x384xf32>, %len: tensor<?xi64>) -> !ragged.tensor<?, [L], 384, f32> {
  %x = ragged.from_padded %p lengths(%len) : tensor<?x?x384xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], 384, f32>
  return %x : !ragged.tensor<?, [L], 384, f32>
}

// A static batch of 16 takes 16 lengths per symbol.
// CHECK-LABEL: func.func @from_padded_two_symbols
// CHECK-SAME:    (%[[P:.*]]: tensor<16x32x32x3xf32>, %[[H:.*]]: tensor<16xi64>, %[[W:.*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[X:.*]] = ragged.from_padded %[[P]] lengths(%[[H]], %[[W]])
// CHECK-SAME:      : tensor<16x32x32x3xf32>, tensor<16xi64>, tensor<?xi64> -> !ragged.tensor<16, [H], [W], 3, f32>
// CHECK-NEXT:    return %[[X]]
func.func @from_padded_two_symbols(%p: tensor<16x32x32x3xf32>, %h: tensor<16xi64>, %w: tensor<?xi64>) -> !ragged.tensor<16, [H], [W], 3, f32> {
  %x = ragged.from_padded %p lengths(%h, %w) : tensor<16x32x32x3xf32>, tensor<16xi64>, tensor<?xi64> -> !ragged.tensor<16, [H], [W], 3, f32>
  return %x : !ragged.tensor<16, [H], [W], 3, f32>
}

// CHECK-LABEL: func.func @from_padded_square
// CHECK-SAME:    (%[[P:.*]]: tensor<?x?x?x12xf32>, %[[LEN:.*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[X:.*]] = ragged.from_padded %[[P]] lengths(%[[LEN]])
// CHECK-SAME:      : tensor<?x?x?x12xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], [L], 12, f32>
// CHECK-NEXT:    return %[[X]]
func.func @from_padded_square(%p: tensor<?x?x?x12xf32>, %len: tensor<?xi64>) -> !ragged.tensor<?, [L], [L], 12, f32> {
  %x = ragged.from_padded %p lengths(%len) : tensor<?x?x?x12xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], [L], 12, f32>
  return %x : !ragged.tensor<?, [L], [L], 12, f32>
}

//===----------------------------------------------------------------------===//
// ragged.mask
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @mask
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [L], 384, f32>)
// CHECK-NEXT:    %[[M:.*]] = ragged.mask %[[X]]
// CHECK-SAME:      : !ragged.tensor<?, [L], 384, f32> -> tensor<?x?xi1>
// CHECK-NEXT:    return %[[M]]
func.func @mask(%x: !ragged.tensor<?, [L], 384, f32>) -> tensor<?x?xi1> {
  %m = ragged.mask %x : !ragged.tensor<?, [L], 384, f32> -> tensor<?x?xi1>
  return %m : tensor<?x?xi1>
}

// Dense dims are dropped: [batch, H, W].
// CHECK-LABEL: func.func @mask_two_symbols
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<16, [H], [W], 3, f32>)
// CHECK-NEXT:    %[[M:.*]] = ragged.mask %[[X]]
// CHECK-SAME:      : !ragged.tensor<16, [H], [W], 3, f32> -> tensor<16x?x?xi1>
// CHECK-NEXT:    return %[[M]]
func.func @mask_two_symbols(%x: !ragged.tensor<16, [H], [W], 3, f32>) -> tensor<16x?x?xi1> {
  %m = ragged.mask %x : !ragged.tensor<16, [H], [W], 3, f32> -> tensor<16x?x?xi1>
  return %m : tensor<16x?x?xi1>
}

// CHECK-LABEL: func.func @mask_nested
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [S], [T(S)], 384, f32>)
// CHECK-NEXT:    %[[M:.*]] = ragged.mask %[[X]]
// CHECK-SAME:      : !ragged.tensor<?, [S], [T(S)], 384, f32> -> tensor<?x?x?xi1>
// CHECK-NEXT:    return %[[M]]
func.func @mask_nested(%x: !ragged.tensor<?, [S], [T(S)], 384, f32>) -> tensor<?x?x?xi1> {
  %m = ragged.mask %x : !ragged.tensor<?, [S], [T(S)], 384, f32> -> tensor<?x?x?xi1>
  return %m : tensor<?x?x?xi1>
}

// CHECK-LABEL: func.func @mask_square
// CHECK-SAME:    (%[[X:.*]]: !ragged.tensor<?, [L], [L], 12, f32>)
// CHECK-NEXT:    %[[M:.*]] = ragged.mask %[[X]]
// CHECK-SAME:      : !ragged.tensor<?, [L], [L], 12, f32> -> tensor<?x?x?xi1>
// CHECK-NEXT:    return %[[M]]
func.func @mask_square(%x: !ragged.tensor<?, [L], [L], 12, f32>) -> tensor<?x?x?xi1> {
  %m = ragged.mask %x : !ragged.tensor<?, [L], [L], 12, f32> -> tensor<?x?x?xi1>
  return %m : tensor<?x?x?xi1>
}

//===----------------------------------------------------------------------===//
// ragged.match
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @match
// CHECK-SAME:    (%[[Y:.*]]: !ragged.tensor<?, [M], 8, f32>, %[[X:.*]]: !ragged.tensor<?, [L], 8, f32>)
// CHECK-NEXT:    %[[R:.*]] = ragged.match %[[Y]] to %[[X]]
// CHECK-SAME:      : !ragged.tensor<?, [M], 8, f32> to !ragged.tensor<?, [L], 8, f32> -> !ragged.tensor<?, [L], 8, f32>
// CHECK-NEXT:    return %[[R]]
func.func @match(%y: !ragged.tensor<?, [M], 8, f32>, %x: !ragged.tensor<?, [L], 8, f32>) -> !ragged.tensor<?, [L], 8, f32> {
  %r = ragged.match %y to %x : !ragged.tensor<?, [M], 8, f32> to !ragged.tensor<?, [L], 8, f32> -> !ragged.tensor<?, [L], 8, f32>
  return %r : !ragged.tensor<?, [L], 8, f32>
}

// The result keeps the element type of the source and takes the symbols of
// the reference.
// CHECK-LABEL: func.func @match_element_type
// CHECK-SAME:    (%[[Y:.*]]: !ragged.tensor<?, [A], [B(A)], i32>, %[[X:.*]]: !ragged.tensor<?, [S], [T(S)], f32>)
// CHECK-NEXT:    %[[R:.*]] = ragged.match %[[Y]] to %[[X]]
// CHECK-SAME:      : !ragged.tensor<?, [A], [B(A)], i32> to !ragged.tensor<?, [S], [T(S)], f32> -> !ragged.tensor<?, [S], [T(S)], i32>
// CHECK-NEXT:    return %[[R]]
func.func @match_element_type(%y: !ragged.tensor<?, [A], [B(A)], i32>, %x: !ragged.tensor<?, [S], [T(S)], f32>) -> !ragged.tensor<?, [S], [T(S)], i32> {
  %r = ragged.match %y to %x : !ragged.tensor<?, [A], [B(A)], i32> to !ragged.tensor<?, [S], [T(S)], f32> -> !ragged.tensor<?, [S], [T(S)], i32>
  return %r : !ragged.tensor<?, [S], [T(S)], i32>
}

// Square: one symbol on each side.
// CHECK-LABEL: func.func @match_square
// CHECK-SAME:    (%[[Y:.*]]: !ragged.tensor<?, [M], [M], 12, f32>, %[[X:.*]]: !ragged.tensor<?, [L], [L], 12, f32>)
// CHECK-NEXT:    %[[R:.*]] = ragged.match %[[Y]] to %[[X]]
// CHECK-SAME:      : !ragged.tensor<?, [M], [M], 12, f32> to !ragged.tensor<?, [L], [L], 12, f32> -> !ragged.tensor<?, [L], [L], 12, f32>
// CHECK-NEXT:    return %[[R]]
func.func @match_square(%y: !ragged.tensor<?, [M], [M], 12, f32>, %x: !ragged.tensor<?, [L], [L], 12, f32>) -> !ragged.tensor<?, [L], [L], 12, f32> {
  %r = ragged.match %y to %x : !ragged.tensor<?, [M], [M], 12, f32> to !ragged.tensor<?, [L], [L], 12, f32> -> !ragged.tensor<?, [L], [L], 12, f32>
  return %r : !ragged.tensor<?, [L], [L], 12, f32>
}

//===----------------------------------------------------------------------===//
// All together
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @chain
// CHECK-SAME:    (%[[V:.*]]: tensor<?x4xf32>, %[[O:.*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[X:.*]] = ragged.pack %[[V]][%[[O]]]
// CHECK-NEXT:    %[[P:.*]] = ragged.to_padded %[[X]] padding(0.000000e+00 : f32)
// CHECK-NEXT:    %[[M:.*]] = ragged.mask %[[X]]
// CHECK-NEXT:    %[[VALS:.*]] = ragged.values %[[X]]
// CHECK-NEXT:    %[[OFFS:.*]] = ragged.offsets %[[X]]["L"]
// CHECK-NEXT:    return %[[P]], %[[M]], %[[VALS]], %[[OFFS]]
func.func @chain(%v: tensor<?x4xf32>, %o: tensor<?xi64>) -> (tensor<?x?x4xf32>, tensor<?x?xi1>, tensor<?x4xf32>, tensor<?xi64>) {
  %x = ragged.pack %v [%o] : tensor<?x4xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], 4, f32>
  %p = ragged.to_padded %x padding(0.0 : f32) : !ragged.tensor<?, [L], 4, f32> -> tensor<?x?x4xf32>
  %m = ragged.mask %x : !ragged.tensor<?, [L], 4, f32> -> tensor<?x?xi1>
  %vals = ragged.values %x : !ragged.tensor<?, [L], 4, f32> -> tensor<?x4xf32>
  %offs = ragged.offsets %x["L"] : !ragged.tensor<?, [L], 4, f32> -> tensor<?xi64>
  return %p, %m, %vals, %offs : tensor<?x?x4xf32>, tensor<?x?xi1>, tensor<?x4xf32>, tensor<?xi64>
}
