// RUN: ragged-opt %s -canonicalize | FileCheck %s
// RUN: ragged-opt %s --pass-pipeline='builtin.module(ragged-to-iree-input{iree-attention=0})' | FileCheck %s --check-prefix=LOWERED

// ragged.match checks at run time: an unused match is a check, not dead code.
// Canonicalization keeps it (a Pure op would be erased), and the lowered
// function still asserts the partitions are equal.
// CHECK-LABEL: func.func @unused_match
// CHECK:         ragged.match %arg0 to %arg1
// CHECK:         return %arg1
// LOWERED-LABEL: func.func @unused_match
// LOWERED:         cf.assert %{{.*}}, "ragged.match: the partitions of the two ragged tensors differ"
// LOWERED:         return %arg2, %arg3
func.func @unused_match(%x: !ragged.tensor<?, [M], 8, f32>,
                        %y: !ragged.tensor<?, [L], 8, f32>) -> !ragged.tensor<?, [L], 8, f32> {
  %unused = ragged.match %x to %y : !ragged.tensor<?, [M], 8, f32>
      to !ragged.tensor<?, [L], 8, f32> -> !ragged.tensor<?, [L], 8, f32>
  return %y : !ragged.tensor<?, [L], 8, f32>
}

// A Pure op beside it is still erased when unused.
// CHECK-LABEL: func.func @unused_pure
// CHECK-NOT:     ragged.unary
// CHECK:         return %arg0
func.func @unused_pure(%x: !ragged.tensor<?, [L], 8, f32>) -> !ragged.tensor<?, [L], 8, f32> {
  %unused = ragged.unary <neg> %x : !ragged.tensor<?, [L], 8, f32>
  return %x : !ragged.tensor<?, [L], 8, f32>
}
