//===- RaggedBase.td - ragged dialect, encodings and types -*- tablegen -*-===//
//
// The `ragged` dialect: tensors whose items differ in shape, described by
// symbolic extents.
//
//===----------------------------------------------------------------------===//

#ifndef RAGGED_BASE_TD
#define RAGGED_BASE_TD

include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/OpBase.td"

def Ragged_Dialect : Dialect {
  let name = "ragged";
  let cppNamespace = "::mlir::ragged";
  let summary = "Tensors whose items differ in shape, with symbolic extents.";
  let description = [{
    The `ragged` dialect models batches whose items differ in length or shape:
    sentences of different lengths, images with their own height and width,
    documents made of sentences made of tokens.

    A `!ragged.tensor` has a batch dimension, one or more *ragged* dimensions
    whose extent depends on outer indices, and dense dimensions. Each ragged
    dimension names a *symbol*: two values whose types use the same symbol
    share that partition, so structural mismatches are compile-time errors.

    Physically a ragged tensor is a packed values buffer (no padding) plus one
    int64 offsets tensor per distinct symbol. Ops lower to upstream `linalg`,
    `tensor`, `arith`, `math` and `scf` with work proportional to the number of
    real elements.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let extraClassDeclaration = [{
    void registerTypes();
  }];
}

//===----------------------------------------------------------------------===//
// Encodings
//===----------------------------------------------------------------------===//

def Ragged_Encoding : I32EnumAttr<"Encoding", "physical layout of a ragged tensor", [
    I32EnumAttrCase<"offsets", 0>,
    I32EnumAttrCase<"lengths", 1>,
  ]> {
  let cppNamespace = "::mlir::ragged";
  let genSpecializedAttr = 0;
}

def Ragged_EncodingAttr : EnumAttr<Ragged_Dialect, Ragged_Encoding, "encoding"> {
  let summary = "Physical layout of a ragged tensor's partitions";
  let description = [{
    `offsets` (the default): each symbol's partition is an int64 tensor of
    `n + 1` monotonically non-decreasing offsets starting at 0, where `n` is
    the number of outer items. `lengths`: the partition holds the `n` extents
    themselves. Lowerings currently accept `offsets` and reject `lengths` with
    a diagnostic.
  }];
}

def Ragged_UnaryFn : I32EnumAttr<"UnaryFn", "elementwise unary function", [
    I32EnumAttrCase<"neg", 0>, I32EnumAttrCase<"exp", 1>,
    I32EnumAttrCase<"log", 2>, I32EnumAttrCase<"tanh", 3>,
    I32EnumAttrCase<"relu", 4>, I32EnumAttrCase<"gelu", 5>,
    I32EnumAttrCase<"sqrt", 6>, I32EnumAttrCase<"rsqrt", 7>,
    I32EnumAttrCase<"abs", 8>, I32EnumAttrCase<"sigmoid", 9>,
  ]> {
  let cppNamespace = "::mlir::ragged";
  let genSpecializedAttr = 0;
}
def Ragged_UnaryFnAttr : EnumAttr<Ragged_Dialect, Ragged_UnaryFn, "unary_fn"> {
  let assemblyFormat = "`<` $value `>`";
}

def Ragged_BinaryFn : I32EnumAttr<"BinaryFn", "elementwise binary function", [
    I32EnumAttrCase<"add", 0>, I32EnumAttrCase<"sub", 1>,
    I32EnumAttrCase<"mul", 2>, I32EnumAttrCase<"div", 3>,
    I32EnumAttrCase<"max", 4>, I32EnumAttrCase<"min", 5>,
  ]> {
  let cppNamespace = "::mlir::ragged";
  let genSpecializedAttr = 0;
}
def Ragged_BinaryFnAttr : EnumAttr<Ragged_Dialect, Ragged_BinaryFn, "binary_fn"> {
  let assemblyFormat = "`<` $value `>`";
}

def Ragged_ReduceKind : I32EnumAttr<"ReduceKind", "reduction over a ragged dim", [
    I32EnumAttrCase<"sum", 0>, I32EnumAttrCase<"mean", 1>,
    I32EnumAttrCase<"max", 2>, I32EnumAttrCase<"min", 3>,
  ]> {
  let cppNamespace = "::mlir::ragged";
  let genSpecializedAttr = 0;
}
def Ragged_ReduceKindAttr : EnumAttr<Ragged_Dialect, Ragged_ReduceKind, "reduce_kind"> {
  let assemblyFormat = "`<` $value `>`";
}

//===----------------------------------------------------------------------===//
// Types
//===----------------------------------------------------------------------===//

class Ragged_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Ragged_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def Ragged_TensorType : Ragged_Type<"RaggedTensor", "tensor"> {
  let summary = "A batch of items whose shapes differ, with symbolic extents";
  let description = [{
    Syntax: `!ragged.tensor<` batch (`,` dim)* `,` element-type (`,` encoding)? `>`
    where a dim is a static size, `?` (dynamic but equal for all items), or a
    ragged dim `[SYM]` whose extent depends on the batch index, or `[SYM(P)]`
    whose extent depends on the batch index and on the index of the ragged dim
    `P` (nesting).

    ```mlir
    // Sentences: B x L(b) x 384.
    !ragged.tensor<?, [L], 384, f32>
    // Images with their own height and width: B x H(b) x W(b) x 3.
    !ragged.tensor<16, [H], [W], 3, f32>
    // Documents -> sentences -> tokens: B x S(b) x T(b, s) x 384.
    !ragged.tensor<?, [S], [T(S)], 384, f32>
    // Attention scores: B x L(b) x L(b) x heads.
    !ragged.tensor<?, [L], [L], 12, f32>
    ```

    Invariants: there is at least one ragged dim; a symbol names one extent
    function, so every use of it has the same parent; a parent appears before
    the dims nested under it; dense sizes are non-negative.

    Storage: the values of item after item, each item in row-major order, as a
    tensor `[rows, trailing dense dims...]` where the trailing dense dims are
    those after the last ragged dim; one int64 partition per distinct symbol,
    in order of first appearance, with `n + 1` offsets where `n` is the
    number of outer items (the batch for top-level symbols, the total extent
    of the parent for nested ones).
  }];
  let parameters = (ins
    "int64_t":$batch,
    ArrayRefParameter<"int64_t", "item dims; ragged dims hold kRagged">:$shape,
    ArrayRefParameter<"::mlir::StringAttr", "symbol of each ragged dim">:$symbols,
    ArrayRefParameter<"::mlir::StringAttr", "parent symbol of each ragged dim, empty for the batch">:$parents,
    "::mlir::Type":$elementType,
    DefaultValuedParameter<"::mlir::ragged::Encoding", "::mlir::ragged::Encoding::offsets">:$encoding
  );
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Marker stored in `shape` for a ragged dimension.
    static constexpr int64_t kRagged = -1;

    bool isRaggedDim(unsigned i) const { return getShape()[i] == kRagged; }
    /// Number of item dims (the batch dim excluded).
    unsigned getItemRank() const { return getShape().size(); }
    /// Distinct symbols in order of first appearance: one partition each.
    ::llvm::SmallVector<::mlir::StringAttr> getDistinctSymbols() const;
    /// Parent of `symbol`, or a null attribute for the batch.
    ::mlir::StringAttr getParent(::mlir::StringAttr symbol) const;
    /// Position of the last ragged dim among the item dims.
    unsigned getLastRaggedDim() const;
    /// Dense dims after the last ragged dim.
    ::llvm::ArrayRef<int64_t> getTrailingDims() const;
    /// Type of the packed values buffer.
    ::mlir::RankedTensorType getValuesType() const;
    /// Type of one partition of `symbol` (n + 1 offsets).
    ::mlir::RankedTensorType getPartitionType(::mlir::StringAttr symbol) const;
    /// True when every ragged dim depends on the batch index only.
    bool isSingleLevel() const;
    /// The same structure with another element type.
    RaggedTensorType withElementType(::mlir::Type type) const;
  }];
}

def Ragged_Tensor : Type<CPred<"::llvm::isa<::mlir::ragged::RaggedTensorType>($_self)">,
    "ragged tensor", "::mlir::ragged::RaggedTensorType">;

def Ragged_Partition : 1DTensorOf<[I64]>;

#endif // RAGGED_BASE_TD
