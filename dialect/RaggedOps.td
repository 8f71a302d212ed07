//===- RaggedOps.td - ragged dialect ops -------------------*- tablegen -*-===//

#ifndef RAGGED_OPS_TD
#define RAGGED_OPS_TD

include "dialect/RaggedBase.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class Ragged_OpBase<string mnemonic, list<Trait> traits>
    : Op<Ragged_Dialect, mnemonic, traits> {
  let hasVerifier = 1;
}

// Ops compute values only, so they are Pure: an unused one may be erased.
class Ragged_Op<string mnemonic, list<Trait> traits = []>
    : Ragged_OpBase<mnemonic, !listconcat(traits, [Pure])>;

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

def Ragged_ValuesOp : Ragged_Op<"values", [InferTypeOpAdaptorWithIsCompatible]> {
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
  // The inferred type is the whole contract.
  let hasVerifier = 0;
  let assemblyFormat = "$source attr-dict `:` qualified(type($source)) `->` type($values)";
}

def Ragged_OffsetsOp : Ragged_Op<"offsets", [InferTypeOpAdaptorWithIsCompatible]> {
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
  // The inferred type is the whole contract.
  let hasVerifier = 0;
  let assemblyFormat = [{
    $source `[` $symbol `]` attr-dict `:` qualified(type($source)) `->` type($offsets)
  }];
}

def Ragged_FlattenOp : Ragged_Op<"flatten"> {
  let summary = "Merge the leading ragged dims of each item into one";
  let description = [{
    `[B, H(b), W(b), dense...] -> [B, P(b), dense...]` with
    `P(b) = H(b) * W(b)` (any number of leading ragged dims depending on the
    batch): each item's elements in the same row-major order, so the packed
    values are unchanged and only the partition is new. An image becomes the
    sequence of its pixels (patch tokens for a transformer, or a global
    average pool as `ragged.reduce <mean>` of the result). The result's
    symbol is fresh.

    ```mlir
    %t = ragged.flatten %x : !ragged.tensor<?, [H], [W], 64, f32>
        -> !ragged.tensor<?, [P], 64, f32>
    ```
  }];
  let arguments = (ins Ragged_Tensor:$source);
  let results = (outs Ragged_Tensor:$result);
  let assemblyFormat = [{
    $source attr-dict `:` qualified(type($source)) `->` qualified(type($result))
  }];
}

def Ragged_ToPaddedOp : Ragged_Op<"to_padded", [InferTypeOpAdaptorWithIsCompatible]> {
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

    Checked at run time: each `lengths` has one entry per padded item and
    `0 <= lengths[b] <=` the padded extent; otherwise the call fails.

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

def Ragged_MaskOp : Ragged_Op<"mask", [InferTypeOpAdaptorWithIsCompatible]> {
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
  // The inferred type is the whole contract.
  let hasVerifier = 0;
  let assemblyFormat = "$source attr-dict `:` qualified(type($source)) `->` type($mask)";
}

// Not Pure: the check is the op's purpose, so it must run even when its
// result is unused. Like cf.assert, which it lowers to, it may abort the call,
// modelled as a write to the default resource.
def Ragged_MatchOp : Ragged_OpBase<"match", [MemoryEffects<[MemWrite]>, InferTypeOpAdaptor]> {
  let summary = "Runtime check that two ragged tensors share their partitions";
  let description = [{
    Where symbols cannot prove that `source` and `reference` share their
    structure (they come from different `pack`s, say), this op checks at run
    time that every partition of `source` equals the corresponding one of
    `reference` and returns `source` retyped with the symbols of `reference`.
    A mismatch fails the call with an error rather than producing a wrong
    answer. The check runs even when the result is unused: the op has a
    side effect (it may abort the call) and is never erased as dead.

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


//===----------------------------------------------------------------------===//
// Compute
//===----------------------------------------------------------------------===//

def Ragged_UnaryOp : Ragged_Op<"unary", [AllTypesMatch<["source", "result"]>]> {
  let summary = "Elementwise unary function on the real elements";
  let description = [{
    Applies `fn` (neg, exp, log, tanh, relu, gelu, sqrt, rsqrt, abs, sigmoid)
    to every real element; `gelu` is the exact form `0.5 x (1 + erf(x / √2))`
    of `torch.nn.GELU()`. The result has the source's type.
    Lowered as one dense `linalg.generic` over the packed values: no padding
    is touched.

    ```mlir
    %y = ragged.unary <gelu> %x : !ragged.tensor<?, [L], 1536, f32>
    ```
  }];
  let arguments = (ins Ragged_UnaryFnAttr:$fn, Ragged_Tensor:$source);
  let results = (outs Ragged_Tensor:$result);
  let assemblyFormat = "$fn $source attr-dict `:` qualified(type($source))";
  let builders = [OpBuilder<(ins "::mlir::ragged::UnaryFn":$fn, "::mlir::Value":$source), [{
    build($_builder, $_state, source.getType(),
          ::mlir::ragged::UnaryFnAttr::get($_builder.getContext(), fn), source);
  }]>];
}

def Ragged_BinaryOp : Ragged_Op<"binary", [AllTypesMatch<["lhs", "result"]>]> {
  let summary = "Elementwise binary function, ragged with ragged or with a dense broadcast";
  let description = [{
    `lhs` is ragged. `rhs` is either a ragged tensor of the same type (the
    same symbols: the verifier proves both share their partitions) or a dense
    tensor broadcast against the trailing dense dims of `lhs` (its shape a
    suffix of them; rank 0 for a scalar). The result has the type of `lhs`.
    Lowered as one dense `linalg.generic` over the packed values.

    ```mlir
    %y = ragged.binary <add> %x, %bias : !ragged.tensor<?, [L], 384, f32>, tensor<384xf32>
    %z = ragged.binary <mul> %x, %y : !ragged.tensor<?, [L], 384, f32>, !ragged.tensor<?, [L], 384, f32>
    ```
  }];
  let arguments = (ins Ragged_BinaryFnAttr:$fn, Ragged_Tensor:$lhs, AnyType:$rhs);
  let results = (outs Ragged_Tensor:$result);
  let assemblyFormat = [{
    $fn $lhs `,` $rhs attr-dict `:` qualified(type($lhs)) `,` qualified(type($rhs))
  }];
  let builders = [OpBuilder<(ins "::mlir::ragged::BinaryFn":$fn, "::mlir::Value":$lhs, "::mlir::Value":$rhs), [{
    build($_builder, $_state, lhs.getType(),
          ::mlir::ragged::BinaryFnAttr::get($_builder.getContext(), fn), lhs, rhs);
  }]>];
}

def Ragged_MatmulOp : Ragged_Op<"matmul", [InferTypeOpAdaptor]> {
  let summary = "Ragged tensor times a dense weight over the last dim";
  let description = [{
    `[B, ..., K] x [K, N] -> [B, ..., N]`: every real row times `weight`.
    The last dim of `source` must be a trailing dense dim. Lowered as one
    `linalg.matmul` on the packed values `[rows, K]`: FLOPs are
    `2 * rows * K * N`, with rows the number of real tokens.

    ```mlir
    %y = ragged.matmul %x, %w : !ragged.tensor<?, [L], 384, f32>, tensor<384x1536xf32>
        -> !ragged.tensor<?, [L], 1536, f32>
    ```
  }];
  let arguments = (ins Ragged_Tensor:$source, 2DTensorOf<[AnyFloat, AnySignlessInteger]>:$weight);
  let results = (outs Ragged_Tensor:$result);
  let assemblyFormat = [{
    $source `,` $weight attr-dict `:` qualified(type($source)) `,` type($weight)
    `->` qualified(type($result))
  }];
}

def Ragged_ReduceOp : Ragged_Op<"reduce", [InferTypeOpAdaptor]> {
  let summary = "Sum, mean, max or min over the innermost ragged dim";
  let description = [{
    Reduces over the last ragged dim, which must be the only ragged dim of the
    innermost level and be followed by dense dims only:
    `[B, L(b), D] -> [B, D]` (a dense result) or
    `[B, S(b), T(b, s), D] -> [B, S(b), D]` (a ragged result).

    Empty segments yield `empty`: it defaults to 0 for `sum` and `mean` (the
    mean of an empty segment is defined as `empty`, never NaN by accident),
    and must be given for `max` and `min` (e.g. `-inf`).

    By default (`balance-tile` > 0) two levels of `linalg.generic`s: each
    tile of rows reduced with its rows unrolled, then each segment's tiles
    combined, so a long segment and many short ones give equal work units;
    with `balance-tile=0`, one generic over `[segments, D]` whose body loops
    over the segment's rows. A fixed number of dispatches, work = real
    elements.

    ```mlir
    %s = ragged.reduce <max> %x empty(0xFF800000 : f32)
        : !ragged.tensor<?, [L], 384, f32> -> tensor<?x384xf32>
    ```
  }];
  let arguments = (ins Ragged_ReduceKindAttr:$kind, Ragged_Tensor:$source,
                       OptionalAttr<TypedAttrInterface>:$empty);
  let results = (outs AnyType:$result);
  let extraClassDeclaration = [{
    /// The source type without its last ragged dim (dense when none is left).
    static ::mlir::Type inferResultType(::mlir::ragged::RaggedTensorType type);
  }];
  let assemblyFormat = [{
    $kind $source (`empty` `(` $empty^ `)`)? attr-dict `:` qualified(type($source))
    `->` qualified(type($result))
  }];
}

def Ragged_BroadcastOp : Ragged_Op<"broadcast", [AllTypesMatch<["like", "result"]>]> {
  let summary = "Each item's row of a dense tensor, repeated over the item's rows";
  let description = [{
    `[B, D...] -> [B, L(b), D...]`: every row of item b of the result is
    row b of `source`. `like` gives the result's type and partition (its
    values are not read). The adjoint of `ragged.reduce <sum>`: what a
    gradient flows through from a pooled item back to its rows. `like`
    must be `[B, L(b), dense...]` and `source` the type `ragged.reduce`
    gives for it.

    One `linalg.generic` over the packed rows reading `source` at each
    row's item (searched once per row).

    ```mlir
    %g = ragged.broadcast %pooled like %x
        : tensor<?x384xf32>, !ragged.tensor<?, [L], 384, f32>
    ```
  }];
  let arguments = (ins AnyRankedTensor:$source, Ragged_Tensor:$like);
  let results = (outs Ragged_Tensor:$result);
  let assemblyFormat = [{
    $source `like` $like attr-dict `:` type($source) `,` qualified(type($like))
  }];
}

def Ragged_SoftmaxOp : Ragged_Op<"softmax", [AllTypesMatch<["source", "result"]>]> {
  let summary = "Softmax over the last ragged dim";
  let description = [{
    For every position of the other dims, a softmax over the last ragged dim,
    which must be the last item dim before the trailing dense dims (so each
    softmax group is a contiguous run of rows): `[B, L(b), D]` (per item and
    feature) or attention scores `[B, L(b), L(b), H]` (per query and head).
    Numerically stable (max subtracted). Empty groups produce no elements.

    Lowered as the log-sum-exp of each group (by row tiles by default: each
    tile's max and exp-sum, rescaled to the group's max; with
    `balance-tile=0`, loops over each group's rows), then `exp(x - lse)` for
    every real element (plus a scan of per-item group counts for
    `[B, L, L, H]`): a fixed number of dispatches, independent of B.

    ```mlir
    %p = ragged.softmax %s : !ragged.tensor<?, [L], [L], 12, f32>
    ```
  }];
  let arguments = (ins Ragged_Tensor:$source);
  let results = (outs Ragged_Tensor:$result);
  let assemblyFormat = "$source attr-dict `:` qualified(type($source))";
  let builders = [OpBuilder<(ins "::mlir::Value":$source), [{
    build($_builder, $_state, source.getType(), source);
  }]>];
}

def Ragged_LayerNormOp : Ragged_Op<"layer_norm", [AllTypesMatch<["source", "result"]>]> {
  let summary = "Layer normalisation over the last dense dim";
  let description = [{
    `(x - mean) / sqrt(var + epsilon) * gamma + beta` over the last dim,
    which must be a trailing dense dim; `gamma` and `beta` have its size.
    A per-token op: lowered on the packed values.

    ```mlir
    %y = ragged.layer_norm %x, %gamma, %beta {epsilon = 1.0e-12 : f64}
        : !ragged.tensor<?, [L], 384, f32>, tensor<384xf32>, tensor<384xf32>
    ```
  }];
  let arguments = (ins Ragged_Tensor:$source, 1DTensorOf<[AnyFloat]>:$gamma,
                       1DTensorOf<[AnyFloat]>:$beta,
                       DefaultValuedAttr<F64Attr, "1.0e-5">:$epsilon);
  let results = (outs Ragged_Tensor:$result);
  let assemblyFormat = [{
    $source `,` $gamma `,` $beta attr-dict `:` qualified(type($source)) `,`
    type($gamma) `,` type($beta)
  }];
}

def Ragged_ScoresOp : Ragged_Op<"scores", [InferTypeOpAdaptor]> {
  let summary = "Per-item, per-head Q times K transposed: ragged in two dims";
  let description = [{
    `[B, L(b), H, d] x [B, L(b), H, d] -> [B, L(b), L(b), H]`, `scale * q . k`
    for every query/key pair of the same item and head; with `causal`, pairs
    with key > query get `-inf`. Work and storage are `sum_b L(b)^2 * H`,
    not `B * max L^2`.

    ```mlir
    %s = ragged.scores %q, %k {scale = 0.17677 : f64}
        : !ragged.tensor<?, [L], 12, 32, f32>, !ragged.tensor<?, [L], 12, 32, f32>
        -> !ragged.tensor<?, [L], [L], 12, f32>
    ```
  }];
  let arguments = (ins Ragged_Tensor:$query, Ragged_Tensor:$key,
                       DefaultValuedAttr<F64Attr, "1.0">:$scale, UnitAttr:$causal);
  let results = (outs Ragged_Tensor:$result);
  let assemblyFormat = [{
    $query `,` $key attr-dict `:` qualified(type($query)) `,` qualified(type($key))
    `->` qualified(type($result))
  }];
}

def Ragged_ApplyOp : Ragged_Op<"apply", [InferTypeOpAdaptor]> {
  let summary = "Per-item, per-head weights times values";
  let description = [{
    `[B, L(b), L(b), H] x [B, L(b), H, d] -> [B, L(b), H, d]`: for every
    query, the weighted sum of the item's value rows. Work is
    `sum_b L(b)^2 * H * d`.

    ```mlir
    %o = ragged.apply %p, %v : !ragged.tensor<?, [L], [L], 12, f32>,
        !ragged.tensor<?, [L], 12, 32, f32> -> !ragged.tensor<?, [L], 12, 32, f32>
    ```
  }];
  let arguments = (ins Ragged_Tensor:$weights, Ragged_Tensor:$values);
  let results = (outs Ragged_Tensor:$result);
  let assemblyFormat = [{
    $weights `,` $values attr-dict `:` qualified(type($weights)) `,`
    qualified(type($values)) `->` qualified(type($result))
  }];
}

def Ragged_AttentionOp : Ragged_Op<"attention",
    [AllTypesMatch<["query", "key", "value", "result"]>]> {
  let summary = "softmax(scale * Q Kᵀ [+ causal mask]) V per item and head";
  let description = [{
    On `[B, L(b), H, d]` queries, keys and values sharing the symbol `L`.
    Lowered as `scores`, `softmax` and `apply`, or by length buckets: a
    fixed number of dispatches, work `sum_b L(b)^2 * H * d`, never
    `B * max L^2`.

    With a second result type, the op also returns `lse`, the log-sum-exp
    of each query row's scaled (and masked) logits, `[B, L(b), H, 1]`,
    which `ragged.attention_grad` takes to recompute the probabilities
    without reducing over keys again.

    With `dropout = p > 0` and a `seed` (`tensor<i64>`), each weight is kept
    with probability `1 - p` and scaled by `1 / (1 - p)`, after the softmax
    and before the product with the values (as `F.scaled_dot_product_attention`
    drops). Whether the weight of query `i` and key `j` (positions in item
    `b`) of head `h` is kept is a function of `(seed, b, h, i, j)` alone
    (`ragged.attention_grad` with the same seed drops the same weights), not
    of the lowering's schedule:

    - `c = 0x9E3779B1 b + 0x85EBCA77 h + 0xC2B2AE3D i + 0x27D4EB2F j`
      (mod 2^32);
    - `u = mix(mix(c ^ lo(seed)) ^ hi(seed))`, with `mix` MurmurHash3's
      32-bit finaliser and `lo`/`hi` the seed's low and high 32 bits;
    - kept when `u >= round(p * 2^32)`.

    ```mlir
    %o = ragged.attention %q, %k, %v {scale = 0.17677 : f64, causal}
        : !ragged.tensor<?, [L], 12, 32, f32>
    %o2, %lse = ragged.attention %q, %k, %v {scale = 0.17677 : f64}
        : !ragged.tensor<?, [L], 12, 32, f32> lse !ragged.tensor<?, [L], 12, 1, f32>
    %o3 = ragged.attention %q, %k, %v dropout(%seed : tensor<i64>) {scale = 0.17677 : f64, dropout = 0.1 : f64}
        : !ragged.tensor<?, [L], 12, 32, f32>
    ```
  }];
  let arguments = (ins Ragged_Tensor:$query, Ragged_Tensor:$key, Ragged_Tensor:$value,
                       Optional<0DTensorOf<[I64]>>:$seed,
                       DefaultValuedAttr<F64Attr, "1.0">:$scale, UnitAttr:$causal,
                       DefaultValuedAttr<F64Attr, "0.0">:$dropout);
  let results = (outs Ragged_Tensor:$result, Optional<Ragged_Tensor>:$lse);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`dropout` `(` $seed^ `:` type($seed) `)`)? attr-dict `:` qualified(type($query))
    (`lse` qualified(type($lse))^)?
  }];
  let builders = [OpBuilder<(ins "::mlir::Value":$query, "::mlir::Value":$key,
                                 "::mlir::Value":$value, "double":$scale, "bool":$causal), [{
    build($_builder, $_state, query.getType(), /*lse=*/::mlir::Type(), query, key, value, /*seed=*/::mlir::Value(),
          $_builder.getF64FloatAttr(scale), causal ? $_builder.getUnitAttr() : nullptr,
          $_builder.getF64FloatAttr(0.0));
  }]>];
}

def Ragged_AttentionGradOp : Ragged_Op<"attention_grad",
    [AttrSizedOperandSegments,
     AllTypesMatch<["query", "key", "value", "grad", "query_grad", "key_grad", "value_grad"]>]> {
  let summary = "Gradients of ragged.attention with respect to Q, K and V";
  let description = [{
    Given the gradient `grad` of the loss with respect to the output of
    `ragged.attention %query, %key, %value` (same `scale` and `causal`),
    returns the gradients with respect to the query, key and value. With
    `P = softmax(scale * Q Kᵀ [+ causal mask])` and `dO = grad`, per item
    and head:

    - `dV = Pᵀ dO`
    - `dS = P ∘ (dO Vᵀ - rowsum(P ∘ dO Vᵀ))`
    - `dQ = scale * dS K`, `dK = scale * dSᵀ Q`

    By default `P` is recomputed from Q and K, so nothing but the operands
    is kept from the forward. What the forward can keep replaces the
    reductions over key pairs, so that every pass over them is part of a
    contraction:

    - `output(%o)`, the forward's output `O`: `rowsum(P ∘ dO Vᵀ)` is
      `rowsum(dO ∘ O)`;
    - `lse(%lse)`, the log-sum-exp of each query row's scaled logits,
      `[B, L(b), heads, 1]`: `P = exp(scale * Q Kᵀ - lse)`.

    With `dropout(%seed)` and `dropout = p`, the gradient of the attention
    that dropped with that seed and rate (the same weights, see
    `ragged.attention`): with `D` the kept weights' `1 / (1 - p)` (0 where
    dropped), `dV = (P ∘ D)ᵀ dO` and `dS = P ∘ (D ∘ dO Vᵀ - rowsum(P ∘ D ∘ dO Vᵀ))`.

    Lowered by length buckets like `ragged.attention`: work and storage
    `sum_b L(b)^2 * H` (bounded by 2x within a bucket), never
    `B * max L^2`, and a fixed number of dispatches.

    ```mlir
    %dq, %dk, %dv = ragged.attention_grad %q, %k, %v, %dout {scale = 0.17677 : f64, causal}
        : !ragged.tensor<?, [L], 12, 32, f32>
    %dq2, %dk2, %dv2 = ragged.attention_grad %q, %k, %v, %dout
        output(%o : !ragged.tensor<?, [L], 12, 32, f32>) lse(%lse : !ragged.tensor<?, [L], 12, 1, f32>)
        {scale = 0.17677 : f64} : !ragged.tensor<?, [L], 12, 32, f32>
    %dq3, %dk3, %dv3 = ragged.attention_grad %q, %k, %v, %dout dropout(%seed : tensor<i64>)
        {scale = 0.17677 : f64, dropout = 0.1 : f64} : !ragged.tensor<?, [L], 12, 32, f32>
    ```
  }];
  let arguments = (ins Ragged_Tensor:$query, Ragged_Tensor:$key, Ragged_Tensor:$value,
                       Ragged_Tensor:$grad, Optional<Ragged_Tensor>:$output,
                       Optional<Ragged_Tensor>:$lse, Optional<0DTensorOf<[I64]>>:$seed,
                       DefaultValuedAttr<F64Attr, "1.0">:$scale, UnitAttr:$causal,
                       DefaultValuedAttr<F64Attr, "0.0">:$dropout);
  let results = (outs Ragged_Tensor:$query_grad, Ragged_Tensor:$key_grad,
                      Ragged_Tensor:$value_grad);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $grad
    (`output` `(` $output^ `:` qualified(type($output)) `)`)?
    (`lse` `(` $lse^ `:` qualified(type($lse)) `)`)?
    (`dropout` `(` $seed^ `:` type($seed) `)`)?
    attr-dict `:` qualified(type($query))
  }];
}

def Ragged_GatherOp : Ragged_Op<"gather", [InferTypeOpAdaptor]> {
  let summary = "Embedding lookup: ragged token ids to rows of a table";
  let description = [{
    `table[V, D]` indexed by ragged int64 `ids [B, L(b)]` gives
    `[B, L(b), D]`. Ids outside `[0, V)` fail the call with an error rather
    than read out of bounds.

    ```mlir
    %e = ragged.gather %table[%ids] : tensor<30522x384xf32>,
        !ragged.tensor<?, [L], i64> -> !ragged.tensor<?, [L], 384, f32>
    ```
  }];
  let arguments = (ins 2DTensorOf<[AnyType]>:$table, Ragged_Tensor:$ids);
  let results = (outs Ragged_Tensor:$result);
  let assemblyFormat = [{
    $table `[` $ids `]` attr-dict `:` type($table) `,` qualified(type($ids))
    `->` qualified(type($result))
  }];
}

def Ragged_ConcatOp : Ragged_Op<"concat"> {
  let summary = "Per-item concatenation along the ragged dim";
  let description = [{
    `[B, L1(b), D] ++ [B, L2(b), D] -> [B, L3(b), D]` with
    `L3(b) = L1(b) + L2(b)`: item b of the result is item b of `lhs`
    followed by item b of `rhs`. Single-level, one ragged dim first.
    Batch sizes must agree (checked at run time).

    ```mlir
    %c = ragged.concat %a, %b : !ragged.tensor<?, [L1], 8, f32>,
        !ragged.tensor<?, [L2], 8, f32> -> !ragged.tensor<?, [L3], 8, f32>
    ```
  }];
  let arguments = (ins Ragged_Tensor:$lhs, Ragged_Tensor:$rhs);
  let results = (outs Ragged_Tensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` qualified(type($lhs)) `,` qualified(type($rhs))
    `->` qualified(type($result))
  }];
}

def Ragged_SplitOp : Ragged_Op<"split"> {
  let summary = "Per-item split along the ragged dim at given lengths";
  let description = [{
    The inverse of `concat`: item b's first `lengths[b]` rows go to `head`,
    the rest to `tail`. `0 <= lengths[b] <= L(b)` is checked at run time.

    ```mlir
    %h, %t = ragged.split %x, %len : !ragged.tensor<?, [L], 8, f32>, tensor<?xi64>
        -> !ragged.tensor<?, [L1], 8, f32>, !ragged.tensor<?, [L2], 8, f32>
    ```
  }];
  let arguments = (ins Ragged_Tensor:$source, Ragged_Partition:$lengths);
  let results = (outs Ragged_Tensor:$head, Ragged_Tensor:$tail);
  let assemblyFormat = [{
    $source `,` $lengths attr-dict `:` qualified(type($source)) `,` type($lengths)
    `->` qualified(type($head)) `,` qualified(type($tail))
  }];
}

//===----------------------------------------------------------------------===//
// Images: windows over two ragged dims
//===----------------------------------------------------------------------===//

// Operands of the window ops: `[B, H(b), W(b), C]`, item after item, each
// image row-major with its channels innermost (channels-last).
class Ragged_WindowOp<string mnemonic> : Ragged_Op<mnemonic> {
  code windowDecl = [{
    /// Kernel, stride, padding and dilation along H (0) and W (1).
    ::std::array<::mlir::ragged::WindowDim, 2> getWindowDims();
  }];
}

def Ragged_Conv2dOp : Ragged_WindowOp<"conv2d"> {
  let summary = "2-D convolution of each image at its own size";
  let description = [{
    `[B, H(b), W(b), Cin] * [KH, KW, Cin / groups, Cout] -> [B, Ho(b), Wo(b), Cout]`:
    each image convolved on its own, with zero padding (`padding` on both
    sides of each spatial dim), `strides`, `dilation` and `groups` as in
    `torch.nn.functional.conv2d`, plus the optional `bias [Cout]`. The
    weight is HWIO.

    The output extents are derived from the input's, per image:
    `Ho(b) = floor((H(b) + 2 pH - dH (KH - 1) - 1) / sH) + 1`, at least 0,
    and 0 when `H(b)` is 0 (an empty image stays empty); `Wo(b)` likewise.
    A spatial dim keeps its extent when `s = 1` and `2p = d (k - 1)`; the
    result then reuses the input's symbol, and otherwise names a fresh one
    that the op defines by this relation.

    Lowered with work proportional to the output pixels: their windows are
    gathered into a dense `[pixels, KH * KW * Cin]` tile (zeros outside the
    image) and multiplied with the weight as one GEMM. A fixed number of
    dispatches whatever the batch. On CPU targets an f32 convolution with
    `groups = 1` runs on the kernel library instead
    (`ragged-cpu-kernels`): no window tile.

    ```mlir
    %y = ragged.conv2d %x, %w, %bias {strides = array<i64: 2, 2>, padding = array<i64: 1, 1>}
        : !ragged.tensor<?, [H], [W], 3, f32>, tensor<3x3x3x16xf32>, tensor<16xf32>
        -> !ragged.tensor<?, [Ho], [Wo], 16, f32>
    ```
  }];
  let arguments = (ins Ragged_Tensor:$source, 4DTensorOf<[AnyFloat]>:$weight,
                       Optional<1DTensorOf<[AnyFloat]>>:$bias,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{1, 1}">:$strides,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{0, 0}">:$padding,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{1, 1}">:$dilation,
                       DefaultValuedAttr<I64Attr, "1">:$groups);
  let results = (outs Ragged_Tensor:$result);
  let extraClassDeclaration = windowDecl;
  let assemblyFormat = [{
    $source `,` $weight (`,` $bias^)? attr-dict `:` qualified(type($source)) `,` type($weight)
    (`,` type($bias)^)? `->` qualified(type($result))
  }];
}

def Ragged_Pool2dOp : Ragged_WindowOp<"pool2d"> {
  let summary = "Max, average, sum or min pooling of each image at its own size";
  let description = [{
    `[B, H(b), W(b), C] -> [B, Ho(b), Wo(b), C]`: every output pixel
    reduces a `kernel` window of its image, as `torch.nn.functional`'s
    `max_pool2d` (`<max>`) and `avg_pool2d` (`<mean>`) do: padded
    positions are never the max; a mean divides by the window clipped to
    the padded image (`count_include_pad`) or to the image itself.
    `padding` is at most half the kernel, so each window of a non-empty
    image starts inside it or in the padding before it.

    The output extents follow `ragged.conv2d`'s rule with `ceil_mode`
    rounding up instead of down, less one when the last window would start
    at or past `H(b) + pH`; an empty image stays empty. A kept extent keeps
    its symbol, others take a fresh one.

    One generic over the output pixels, the window reduced in its body:
    work proportional to the output pixels times the window.

    ```mlir
    %y = ragged.pool2d <max> %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>,
                                  padding = array<i64: 1, 1>}
        : !ragged.tensor<?, [H], [W], 64, f32> -> !ragged.tensor<?, [Ho], [Wo], 64, f32>
    ```
  }];
  let arguments = (ins Ragged_ReduceKindAttr:$kind, Ragged_Tensor:$source,
                       DenseI64ArrayAttr:$kernel,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{1, 1}">:$strides,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{0, 0}">:$padding,
                       DefaultValuedAttr<DenseI64ArrayAttr, "{1, 1}">:$dilation,
                       UnitAttr:$ceil_mode, UnitAttr:$count_include_pad);
  let results = (outs Ragged_Tensor:$result);
  let extraClassDeclaration = windowDecl;
  let assemblyFormat = [{
    $kind $source attr-dict `:` qualified(type($source)) `->` qualified(type($result))
  }];
}

#endif // RAGGED_OPS_TD
