//===- RaggedOps.td - ragged dialect ops -------------------*- tablegen -*-===//

#ifndef RAGGED_OPS_TD
#define RAGGED_OPS_TD

include "dialect/RaggedBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class Ragged_Op<string mnemonic, list<Trait> traits = []>
    : Op<Ragged_Dialect, mnemonic, !listconcat(traits, [Pure])> {
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Structure: pack / unpack, padding, masks, runtime checks
//===----------------------------------------------------------------------===//

def Ragged_PackOp : Ragged_Op<"pack"> {
  let summary = "Builds a ragged tensor from packed values and partitions";
  let description = [{
    Wraps a packed values buffer and one int64 offsets tensor per distinct
    symbol of the result type (in order of first appearance) into a ragged
    tensor. No data moves.

    Invariant relied on: each partition holds `n + 1` non-decreasing offsets
    starting at 0, and the last offset of the innermost level equals the
    number of rows of `values`. The op cannot check values it does not see;
    the Python API checks them before a call.

    ```mlir
    %x = ragged.pack %values [%offsets]
        : tensor<?x384xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], 384, f32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$values, Variadic<Ragged_Partition>:$partitions);
  let results = (outs Ragged_Tensor:$result);
  let assemblyFormat = [{
    $values `[` $partitions `]` attr-dict `:` type($values) `,` type($partitions)
    `->` qualified(type($result))
  }];
}

def Ragged_ValuesOp : Ragged_Op<"values"> {
  let summary = "The packed values buffer of a ragged tensor";
  let description = [{
    Returns the values of every item, one after another, as a dense tensor
    `[rows, trailing dense dims...]`.

    ```mlir
    %v = ragged.values %x : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
    ```
  }];
  let arguments = (ins Ragged_Tensor:$source);
  let results = (outs AnyRankedTensor:$values);
  let assemblyFormat = "$source attr-dict `:` qualified(type($source)) `->` type($values)";
}

def Ragged_OffsetsOp : Ragged_Op<"offsets"> {
  let summary = "The int64 offsets partition of one symbol";
  let description = [{
    Returns the `n + 1` offsets of `symbol`, where `n` is the number of outer
    items (the batch for a top-level symbol).

    ```mlir
    %o = ragged.offsets %x["T"] : !ragged.tensor<?, [S], [T(S)], 8, f32> -> tensor<?xi64>
    ```
  }];
  let arguments = (ins Ragged_Tensor:$source, StrAttr:$symbol);
  let results = (outs Ragged_Partition:$offsets);
  let assemblyFormat = [{
    $source `[` $symbol `]` attr-dict `:` qualified(type($source)) `->` type($offsets)
  }];
}

def Ragged_ToPaddedOp : Ragged_Op<"to_padded"> {
  let summary = "Pads every item to the largest extent of each ragged dim";
  let description = [{
    Returns a dense tensor `[batch, item dims...]` where each ragged dim has
    the largest extent over the batch and the slots past an item's own
    extent hold `padding`. An empty batch gives extent 0.

    ```mlir
    %p = ragged.to_padded %x padding(0.0 : f32)
        : !ragged.tensor<?, [L], 384, f32> -> tensor<?x?x384xf32>
    ```
  }];
  let arguments = (ins Ragged_Tensor:$source, TypedAttrInterface:$padding);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $source `padding` `(` $padding `)` attr-dict `:` qualified(type($source)) `->` type($result)
  }];
}

def Ragged_FromPaddedOp : Ragged_Op<"from_padded"> {
  let summary = "Keeps the first `lengths[b]` slots of each item of a padded tensor";
  let description = [{
    The inverse of `to_padded` for single-level ragged tensors: one `lengths`
    tensor `[batch]` per distinct symbol of the result type gives each item's
    extent. Slots past the lengths are dropped.

    Invariant relied on: `0 <= lengths[b] <=` the padded extent.

    ```mlir
    %x = ragged.from_padded %p lengths(%len) : tensor<?x?x384xf32>, tensor<?xi64>
        -> !ragged.tensor<?, [L], 384, f32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$padded, Variadic<Ragged_Partition>:$lengths);
  let results = (outs Ragged_Tensor:$result);
  let assemblyFormat = [{
    $padded `lengths` `(` $lengths `)` attr-dict `:` type($padded) `,` type($lengths)
    `->` qualified(type($result))
  }];
}

def Ragged_MaskOp : Ragged_Op<"mask"> {
  let summary = "Validity mask of the padded form";
  let description = [{
    Returns an `i1` tensor `[batch, ragged dims...]` (dense dims dropped), true
    where the padded form of `source` holds a real element.

    ```mlir
    %m = ragged.mask %x : !ragged.tensor<?, [L], 384, f32> -> tensor<?x?xi1>
    ```
  }];
  let arguments = (ins Ragged_Tensor:$source);
  let results = (outs TensorOf<[I1]>:$mask);
  let assemblyFormat = "$source attr-dict `:` qualified(type($source)) `->` type($mask)";
}

def Ragged_MatchOp : Ragged_Op<"match"> {
  let summary = "Runtime check that two ragged tensors share their partitions";
  let description = [{
    Where symbols cannot prove that `source` and `reference` share their
    structure (they come from different `pack`s, say), this op checks at run
    time that every partition of `source` equals the corresponding one of
    `reference` and returns `source` retyped with the symbols of `reference`.
    A mismatch fails the call with an error rather than producing a wrong
    answer.

    ```mlir
    %y2 = ragged.match %y to %x : !ragged.tensor<?, [M], 8, f32>
        to !ragged.tensor<?, [L], 8, f32> -> !ragged.tensor<?, [L], 8, f32>
    ```
  }];
  let arguments = (ins Ragged_Tensor:$source, Ragged_Tensor:$reference);
  let results = (outs Ragged_Tensor:$result);
  let assemblyFormat = [{
    $source `to` $reference attr-dict `:` qualified(type($source)) `to`
    qualified(type($reference)) `->` qualified(type($result))
  }];
}

#endif // RAGGED_OPS_TD
