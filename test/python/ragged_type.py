# RUN: %PYTHON %s | FileCheck %s
# The typed Python API of !ragged.tensor and the op bindings.

from ragged_mlir import ir
from ragged_mlir.dialects import ragged

with ir.Context(), ir.Location.unknown():
    f32 = ir.F32Type.get()
    # CHECK: !ragged.tensor<?, [L], 384, f32>
    seq = ragged.RaggedTensorType.get(None, [ragged.Ragged("L"), 384], f32)
    print(seq)
    # CHECK: None ['L'] [384] tensor<?x384xf32> offsets
    print(seq.batch_size, seq.symbols, seq.dense_dims, seq.values_type, seq.encoding)

    # CHECK: !ragged.tensor<16, [H], [W], 3, f32>
    img = ragged.RaggedTensorType.get(16, [ragged.Ragged("H"), ragged.Ragged("W"), 3], f32)
    print(img)
    # CHECK: 16 ['H', 'W']
    print(img.batch_size, img.distinct_symbols)

    # CHECK: [Ragged(symbol='S', parent=None), Ragged(symbol='T', parent='S'), 8]
    nested = ir.Type.parse("!ragged.tensor<?, [S], [T(S)], 8, f32>")
    print(nested.dims)
    # Parsed types come back as RaggedTensorType.
    # CHECK: True
    print(isinstance(nested, ragged.RaggedTensorType))

    # Inconsistent arguments raise ValueError naming the argument.
    for args in [
        (None, [384], f32),
        (-1, [ragged.Ragged("L")], f32),
        (None, [ragged.Ragged("T", "S")], f32),
        (None, [ragged.Ragged("L"), -3], f32),
        (None, [ragged.Ragged("L")], ir.NoneType.get()),
    ]:
        try:
            ragged.RaggedTensorType.get(*args)
        except ValueError as e:
            print("ValueError:", e)
    # CHECK: ValueError: dims: a ragged tensor needs at least one Ragged dim
    # CHECK: ValueError: batch: expected a non-negative int or None, got -1
    # CHECK: ValueError: dims[0]: ragged dim 'T' is nested in 'S', which must be a ragged dim before it
    # CHECK: ValueError: dims[1]: expected a non-negative int, None or Ragged, got -3
    # CHECK: ValueError: element_type: expected an integer or float type, got

    # Malformed IR: a located diagnostic, not a crash.
    try:
        ir.Module.parse(
            "func.func @f(%x: !ragged.tensor<?, [L], 4, f32>) {\n"
            "  %v = ragged.values %x : !ragged.tensor<?, [L], 4, f32> -> tensor<?x5xf32>\n"
            "  return\n}"
        )
    except ir.MLIRError as e:
        print(e)
    # CHECK: error: "-":2:8: 'ragged.values' op inferred type(s) 'tensor<?x4xf32>' are incompatible with return type(s) of operation 'tensor<?x5xf32>'

    # Op builders from ODS.
    module = ir.Module.parse("""
    func.func @f(%x: !ragged.tensor<?, [L], 4, f32>) -> tensor<?xi64> {
      %o = ragged.offsets %x["L"] : !ragged.tensor<?, [L], 4, f32> -> tensor<?xi64>
      return %o : tensor<?xi64>
    }""")
    op = module.body.operations[0].regions[0].blocks[0].operations[0]
    # CHECK: OffsetsOp "L"
    print(type(op).__name__, op.symbol)

    # Ops whose result type follows from the operands infer it: the
    # generated builders take no result type.
    x = module.body.operations[0].regions[0].blocks[0].arguments[0]
    with ir.InsertionPoint(module.body.operations[0].regions[0].blocks[0].operations[0]):
        w = ir.Operation.create("tensor.empty", results=[ir.RankedTensorType.get([4, 6], f32)]).result
        y = ragged.matmul(x, w)
        # CHECK: !ragged.tensor<?, [L], 6, f32> tensor<?x6xf32> tensor<?x?xi1> tensor<?x6xf32>
        total = ragged.reduce(ir.Attribute.parse("#ragged.reduce_kind<sum>"), y)
        print(y.type, ragged.values(y).type, ragged.mask(y).type, total.type)

# Builders: a multi-head split and merge of the trailing dims.
from ragged_mlir.builders import Program, ragged

prog = Program()


@prog.func(x=ragged(None, "L", 8))
def heads(x):
    return x.reshape(2, 4).reshape(8)


# CHECK-LABEL: func.func @heads
# CHECK: tensor.expand_shape {{.*}} output_shape [%{{.*}}, 2, 4] : tensor<?x8xf32> into tensor<?x2x4xf32>
# CHECK: ragged.pack {{.*}} -> !ragged.tensor<?, [L], 2, 4, f32>
# CHECK: tensor.collapse_shape {{.*}} : tensor<?x2x4xf32> into tensor<?x8xf32>
# CHECK: ragged.pack {{.*}} -> !ragged.tensor<?, [L], 8, f32>
print(prog.module_text())
bad = Program()
try:

    @bad.func(x=ragged(None, "L", 8))
    def shrink(x):
        return x.reshape(3)

except ValueError as e:
    print("ValueError:", e)
# CHECK: ValueError: dims: (3,) do not hold the 8 elements of [8]
