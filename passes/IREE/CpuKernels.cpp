//===- CpuKernels.cpp - ragged ops on our CPU kernels ---------------------===//
//
// ragged.attention and ragged.attention_grad (f32, f16, bf16) on CPU
// targets run as custom IREE dispatches of our kernel library
// (kernels/attention.c): the kernels read the packed rows and the offsets
// directly (the forward: one workgroup per block of 32 packed rows, all
// heads; the gradients: one per item and head), so every item costs its own
// L(b)^2 and no bucket schedule is built. ragged.softmax and ragged.reduce
// over the ragged dim of [B, L(b), D...] (f32) run on kernels/softmax.c and
// kernels/reduce.c, one workgroup per item. ragged.conv2d (f32, groups 1)
// and ragged.pool2d (f32) run on kernels/conv.c and kernels/pool.c, one
// workgroup per 64 output pixels, each pixel's window read from the packed
// input. A dispatch is a `flow.dispatch` of the `stream.executable`
// @ragged_kernels, whose functions call the kernels (`hal.import.static`)
// and whose object file IREE links into the executable; both are built by
// name (IREE's dialects are not linked here), for IREE to parse.
//
// Operands the kernels read across a block of rows are laid out transposed,
// [H, d, stride] (and per-row statistics [H, stride]), with stride >= rows +
// 64, so that the products of a block are vector products with no packing
// in the kernel: `linalg.transpose` and `tensor.pad` lay them out.
//
// The kernels compute in f32. f16 and bf16 operands are widened to f32 by
// an elementwise `linalg.generic` (arith.extf; for a transposed operand,
// the generic that transposes it), and the results are rounded back
// (arith.truncf): the kernels accumulate in f32, as eager PyTorch does.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/RaggedToLinalg/BucketedAttention.h"
#include "passes/Conversion/RaggedToLinalg/LoweringUtils.h"
#include "passes/Passes.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Utils/Utils.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

namespace mlir::ragged {
#define GEN_PASS_DEF_CPUKERNELSPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;
using namespace mlir::ragged;
using namespace mlir::ragged::lowering;

namespace {

constexpr StringLiteral kExecutable = "ragged_kernels";
/// Packed rows per workgroup (RK_BQ) and the rows read past an item (RK_BK).
constexpr int64_t kBlockRows = 32;
constexpr int64_t kKeyPadding = 64;
/// The transposed operands' row stride: rows + 64 rounded up to 1024, plus
/// 16, so that the d rows of a block do not all fall into the same cache
/// sets (a stride of a multiple of 4 KiB would).
constexpr int64_t kStrideQuantum = 1024, kStrideSkew = 16;
/// The largest head sizes of the forward and of the gradients (RK_MAX_D,
/// RK_MAX_BWD_D).
constexpr int64_t kMaxHeadDim = 256, kMaxGradHeadDim = 128;
/// Output pixels per workgroup of the convolution and the pooling
/// (RK_CONV_BLOCK, RK_POOL_BLOCK), and the widest input the convolution
/// takes (RK_CONV_MAX_CIN).
constexpr int64_t kConvBlockPixels = 64, kConvMaxChannels = 4096;
/// The weight's output channels are padded to a multiple of this (16
/// floats, the widest vector).
constexpr int64_t kConvChannelQuantum = 16;

/// A kernel scalar's type.
enum class Scalar { Index, F32, I32 };

/// One export of the kernel library: its C symbol, its buffers (inputs, then
/// results; `i64` marks the integer ones, the others are f32) and the
/// scalars its kernel takes after them. Its workgroups are blocks of
/// `blockRows` of the workload's x (one call each, given the block), or with
/// `perItem` one per (x, y) of the workload (given both).
struct KernelExport {
  StringLiteral name, symbol;
  SmallVector<bool> i64;
  unsigned results;
  SmallVector<Scalar> scalars;
  bool perItem = false;
  int64_t blockRows = kBlockRows;
};

/// The scalars of the attention and softmax kernels (SCALARS in
/// kernels/vector.h): rows, heads, d, stride, scale, causal, dropout,
/// threshold, keep.
SmallVector<Scalar> attentionScalars() {
  using S = Scalar;
  return {S::Index, S::Index, S::Index, S::Index, S::F32,
          S::Index, S::Index, S::I32,   S::F32};
}

/// The exports of the kernel library (`kernels/`).
SmallVector<KernelExport> kernelExports() {
  const bool F = false, I = true;
  return {
      {"attention_fwd",
       "ragged_attention_fwd",
       {F, F, F, I, I, F, F},
       2,
       attentionScalars()},
      {"attention_bwd",
       "ragged_attention_bwd",
       {F, F, F, F, F, F, F, F, I, I, F, F, F},
       3,
       attentionScalars(),
       /*perItem=*/true},
      // kernels/softmax.c, on rows seen as [rows, 1, features].
      {"segment_softmax",
       "ragged_segment_softmax",
       {F, I, I, F},
       1,
       attentionScalars(),
       /*perItem=*/true},
      // kernels/reduce.c, on rows seen as [rows, f]: x, offsets, out; f,
      // the reduction (ReduceKind), the value of an empty item.
      {"segment_reduce",
       "ragged_segment_reduce",
       {F, I, F},
       1,
       {Scalar::Index, Scalar::Index, Scalar::F32},
       /*perItem=*/true},
      // kernels/conv.c: x, w, bias, in_rows, heights, widths, out_rows,
      // out_widths, out; output rows, cin, cout, the weight's padded cout,
      // kh, kw, strides, padding, dilation.
      {"conv2d",
       "ragged_conv2d",
       {F, F, F, I, I, I, I, I, F},
       1,
       SmallVector<Scalar>(12, Scalar::Index),
       /*perItem=*/false,
       kConvBlockPixels},
      // kernels/pool.c: x, in_rows, heights, widths, out_rows, out_widths,
      // out; output rows, channels, the reduction (ReduceKind), whether a
      // mean counts the padding, kh, kw, strides, padding, dilation.
      {"pool2d",
       "ragged_pool2d",
       {F, I, I, I, I, I, F},
       1,
       SmallVector<Scalar>(12, Scalar::Index),
       /*perItem=*/false,
       kConvBlockPixels},
  };
}

Operation *createByName(OpBuilder &b, Location loc, StringRef name,
                        ValueRange operands, TypeRange types,
                        ArrayRef<NamedAttribute> attrs = {},
                        unsigned regions = 0) {
  OperationState state(loc, name);
  state.addOperands(operands);
  state.addTypes(types);
  state.addAttributes(attrs);
  for (unsigned i = 0; i < regions; ++i)
    state.addRegion();
  return b.create(state);
}

/// Adds export `e` to the executable body at `b`'s insertion point, and its
/// function and kernel declaration to `inner`. The function takes the
/// buffers, the number of elements of each, then the kernel's scalars.
void buildExport(OpBuilder &b, Location loc, ModuleOp inner,
                 const KernelExport &e) {
  MLIRContext *ctx = b.getContext();
  Type index = b.getIndexType();
  Operation *exp = createByName(
      b, loc, "stream.executable.export", {}, {},
      {b.getNamedAttr("sym_name", b.getStringAttr(e.name)),
       b.getNamedAttr("sym_visibility", b.getStringAttr("public")),
       b.getNamedAttr("function_ref", FlatSymbolRefAttr::get(ctx, e.name))},
      1);
  {
    OpBuilder::InsertionGuard g(b);
    Block *wg =
        b.createBlock(&exp->getRegion(0), {}, {index, index}, {loc, loc});
    Value one = constIndex(b, loc, 1);
    if (e.perItem) {
      createByName(b, loc, "stream.return",
                   {wg->getArgument(0), wg->getArgument(1), one}, {});
    } else {
      Value x = arith::CeilDivUIOp::create(b, loc, wg->getArgument(0),
                                           constIndex(b, loc, e.blockRows));
      createByName(b, loc, "stream.return", {x, one, one}, {});
    }
  }

  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToEnd(inner.getBody());
  SmallVector<Type> scalarTypes;
  for (Scalar s : e.scalars)
    scalarTypes.push_back(s == Scalar::Index ? index
                          : s == Scalar::F32 ? Type(b.getF32Type())
                                             : Type(b.getI32Type()));
  SmallVector<Type> kernelArgs;
  for (bool i64 : e.i64)
    kernelArgs.push_back(
        MemRefType::get({ShapedType::kDynamic},
                        i64 ? Type(b.getI64Type()) : Type(b.getF32Type())));
  llvm::append_range(kernelArgs, scalarTypes);
  kernelArgs.append(e.perItem ? 2 : 1, index);
  auto kernel =
      func::FuncOp::create(b, loc, e.symbol, b.getFunctionType(kernelArgs, {}));
  kernel.setPrivate();
  kernel->setAttr("hal.import.static", b.getUnitAttr());

  unsigned n = e.i64.size();
  SmallVector<Type> args(n, parseType("!stream.binding", ctx));
  args.append(n, index);
  llvm::append_range(args, scalarTypes);
  auto fn = func::FuncOp::create(b, loc, e.name, b.getFunctionType(args, {}));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  Value c0 = constIndex(b, loc, 0);
  SmallVector<Value> callArgs;
  for (unsigned i = 0; i < n; ++i)
    callArgs.push_back(
        createByName(b, loc, "stream.binding.subspan",
                     {entry->getArgument(i), c0, entry->getArgument(n + i)},
                     kernelArgs[i])
            ->getResult(0));
  llvm::append_range(callArgs, entry->getArguments().drop_front(2 * n));
  for (int64_t dim = 0; dim < (e.perItem ? 2 : 1); ++dim)
    callArgs.push_back(
        createByName(b, loc, "stream.dispatch.workgroup.id", {}, index,
                     {b.getNamedAttr("dimension", b.getIndexAttr(dim))})
            ->getResult(0));
  func::CallOp::create(b, loc, kernel, callArgs);
  func::ReturnOp::create(b, loc);
}

/// The number of elements of a tensor of `type`, whose dynamic extents are
/// `dims` in order.
Value numElements(OpBuilder &b, Location loc, RankedTensorType type,
                  ValueRange dims) {
  Value n = constIndex(b, loc, 1);
  unsigned next = 0;
  for (int64_t i = 0; i < type.getRank(); ++i)
    n = arith::MulIOp::create(b, loc, n,
                              type.isDynamicDim(i)
                                  ? dims[next++]
                                  : constIndex(b, loc, type.getDimSize(i)));
  return n;
}

/// A `flow.dispatch` of export `name` of the kernel library on `workload`
/// (x, y), `buffers`, `scalars` (the kernel's), with results of
/// `resultTypes` whose dynamic extents are `resultDims`.
Operation *dispatchKernel(OpBuilder &b, Location loc, StringRef name,
                          ArrayRef<Value> workload, ArrayRef<Value> buffers,
                          ArrayRef<Value> scalars,
                          ArrayRef<RankedTensorType> resultTypes,
                          ArrayRef<Value> resultDims) {
  MLIRContext *ctx = b.getContext();
  SmallVector<Value> operands(buffers), argDims;
  for (Value t : buffers) {
    SmallVector<Value> dims = tensor::createDynamicDimValues(b, loc, t);
    operands.push_back(
        numElements(b, loc, cast<RankedTensorType>(t.getType()), dims));
    llvm::append_range(argDims, dims);
  }
  ArrayRef<Value> rest = resultDims;
  for (RankedTensorType t : resultTypes) {
    unsigned dynamic = t.getNumDynamicDims();
    operands.push_back(numElements(b, loc, t, rest.take_front(dynamic)));
    rest = rest.drop_front(dynamic);
  }
  llvm::append_range(operands, scalars);
  SmallVector<Value> all(workload);
  llvm::append_range(all, operands);
  llvm::append_range(all, argDims);
  llvm::append_range(all, resultDims);
  SmallVector<Type> types(resultTypes.begin(), resultTypes.end());
  SmallVector<Attribute> ties(types.size(), b.getIndexAttr(-1));
  return createByName(
      b, loc, "flow.dispatch", all, types,
      {b.getNamedAttr(
           "entry_points",
           b.getArrayAttr({SymbolRefAttr::get(
               ctx, kExecutable, {FlatSymbolRefAttr::get(ctx, name)})})),
       b.getNamedAttr("operandSegmentSizes",
                      b.getDenseI32ArrayAttr({int32_t(workload.size()),
                                              int32_t(operands.size()),
                                              int32_t(argDims.size()),
                                              int32_t(resultDims.size())})),
       b.getNamedAttr("tied_operands", b.getArrayAttr(ties))});
}

/// The kernel library's executable, linking `ragged_kernels_<isa>.o` (found
/// on IREE's object search path).
void buildExecutable(OpBuilder &b, Location loc, StringRef isa) {
  MLIRContext *ctx = b.getContext();
  std::string arch = StringRef(isa).starts_with("arm_64") ? "arm_64" : "x86_64";
  Attribute objects = parseAttribute(
      "#hal.executable.objects<{#hal.executable.target<\"llvm-cpu\", "
      "\"embedded-elf-" +
          arch + "\"> = [#hal.executable.object<{path = \"ragged_kernels_" +
          isa.str() + ".o\"}>]}>",
      ctx);
  Operation *exe = createByName(
      b, loc, "stream.executable", {}, {},
      {b.getNamedAttr("sym_name", b.getStringAttr(kExecutable)),
       b.getNamedAttr("sym_visibility", b.getStringAttr("private")),
       b.getNamedAttr("hal.executable.objects", objects)},
      1);
  OpBuilder::InsertionGuard guard(b);
  b.createBlock(&exe->getRegion(0));
  auto inner = ModuleOp::create(b, loc);
  createByName(b, loc, "stream.executable.end", {}, {});
  b.setInsertionPoint(inner);
  for (const KernelExport &e : kernelExports())
    buildExport(b, loc, inner, e);
}

/// `v` (a float scalar) as `to`: extended or truncated.
Value convertFloat(OpBuilder &b, Location loc, Value v, Type to) {
  if (v.getType() == to)
    return v;
  if (v.getType().getIntOrFloatBitWidth() < to.getIntOrFloatBitWidth())
    return arith::ExtFOp::create(b, loc, to, v);
  return arith::TruncFOp::create(b, loc, to, v);
}

/// `x` read through `map` and converted to `init`'s element type, into
/// `init`.
Value convertInto(OpBuilder &b, Location loc, Value x, Value init,
                  AffineMap map) {
  Type to = cast<RankedTensorType>(init.getType()).getElementType();
  return parallelGeneric(b, loc, init, x, map,
                         [&](OpBuilder &nb, Location l, ValueRange a) {
                           return convertFloat(nb, l, a[0], to);
                         });
}

/// `x` with elements of type `to`: itself where they are, else converted.
Value withElementType(OpBuilder &b, Location loc, Value x, Type to) {
  auto type = cast<RankedTensorType>(x.getType());
  if (type.getElementType() == to)
    return x;
  return convertInto(b, loc, x, emptyLike(b, loc, x, to),
                     b.getMultiDimIdentityMap(type.getRank()));
}

/// `x` as the kernels read it: in f32.
Value widened(OpBuilder &b, Location loc, Value x) {
  return withElementType(b, loc, x, b.getF32Type());
}

/// What the dispatches of one op share: the offsets, the sizes and the
/// scalars.
struct Dispatches {
  /// `offsetsSize`: items + 1.
  Value offsets, seed, rows, heads, d, stride, offsetsSize;
  SmallVector<Value> scalars;
  int64_t staticHeads;

  /// `x` ([rows, H, d] or [rows, H, 1] as [rows, H]) transposed to [H, d,
  /// stride] (or [H, stride]) in f32, the tail zero.
  Value transposed(OpBuilder &b, Location loc, Value x) const {
    auto type = cast<RankedTensorType>(x.getType());
    Type f32 = b.getF32Type();
    if (type.getRank() == 3 && type.getDimSize(2) == 1)
      x = tensor::CollapseShapeOp::create(
          b, loc, x, SmallVector<ReassociationIndices>{{0}, {1, 2}});
    type = cast<RankedTensorType>(x.getType());
    SmallVector<int64_t> shape(type.getShape().drop_front());
    shape.push_back(ShapedType::kDynamic);
    SmallVector<Value> initDyn;
    if (ShapedType::isDynamic(shape[0]))
      initDyn.push_back(heads);
    initDyn.push_back(rows);
    SmallVector<int64_t> perm = type.getRank() == 3
                                    ? SmallVector<int64_t>{1, 2, 0}
                                    : SmallVector<int64_t>{1, 0};
    Value init = emptyTensor(b, loc, shape, f32, initDyn);
    if (type.getElementType() == f32)
      return padToStride(
          b, loc,
          linalg::TransposeOp::create(b, loc, x, init, perm)->getResult(0));
    // A narrow x is widened by the copy that transposes it.
    AffineMap read =
        inversePermutation(AffineMap::getPermutationMap(perm, b.getContext()));
    return padToStride(b, loc, convertInto(b, loc, x, init, read));
  }

  /// `t` ([..., rows]) padded with zeros to [..., stride].
  Value padToStride(OpBuilder &b, Location loc, Value t) const {
    auto type = cast<RankedTensorType>(t.getType());
    SmallVector<Value> dyn = tensor::createDynamicDimValues(b, loc, t);
    dyn.back() = stride;
    return tensor::createPadHighOp(
        type, t, floatConst(b, loc, type.getElementType(), 0.0),
        /*nofold=*/false, loc, b, dyn);
  }

  /// `rowsum(dout o out)` per row and head ([rows, H, d] twice, each
  /// widened as it is read), as [H, stride] f32.
  Value rowDots(OpBuilder &b, Location loc, Value dout, Value out) const {
    MLIRContext *ctx = b.getContext();
    Type f32 = b.getF32Type();
    SmallVector<Value> dyn;
    if (ShapedType::isDynamic(staticHeads))
      dyn.push_back(heads);
    dyn.push_back(rows);
    Value init =
        linalg::FillOp::create(
            b, loc, floatConst(b, loc, f32, 0.0),
            emptyTensor(b, loc, {staticHeads, ShapedType::kDynamic}, f32, dyn))
            .getResult(0);
    auto d = [&](unsigned i) { return getAffineDimExpr(i, ctx); };
    // Loops (h, n, c).
    AffineMap in = AffineMap::get(3, 0, {d(1), d(0), d(2)}, ctx);
    AffineMap res = AffineMap::get(3, 0, {d(0), d(1)}, ctx);
    Value dots =
        linalg::GenericOp::create(
            b, loc, init.getType(), ValueRange{dout, out}, ValueRange{init},
            ArrayRef<AffineMap>{in, in, res},
            ArrayRef<utils::IteratorType>{utils::IteratorType::parallel,
                                          utils::IteratorType::parallel,
                                          utils::IteratorType::reduction},
            [&](OpBuilder &nb, Location l, ValueRange a) {
              Value g = convertFloat(nb, l, a[0], f32),
                    o = convertFloat(nb, l, a[1], f32);
              Value p = arith::MulFOp::create(nb, l, g, o);
              linalg::YieldOp::create(
                  nb, l, ValueRange{arith::AddFOp::create(nb, l, a[2], p)});
            })
            .getResult(0);
    return padToStride(b, loc, dots);
  }

  /// A dispatch of export `name` on `buffers` (offsets and seed appended)
  /// with results of `resultTypes`, each shaped like the packed rows'
  /// leading dim.
  Operation *dispatch(OpBuilder &b, Location loc, StringRef name,
                      SmallVector<Value> buffers,
                      ArrayRef<RankedTensorType> resultTypes,
                      bool perItem = false) const {
    buffers.append({offsets, seed});
    SmallVector<Value> resultDims;
    for (RankedTensorType t : resultTypes)
      for (int64_t i = 0; i < t.getRank(); ++i)
        if (t.isDynamicDim(i))
          resultDims.push_back(i == 0 ? rows : i == 1 ? heads : d);
    Value x = perItem ? arith::SubIOp::create(b, loc, offsetsSize,
                                              constIndex(b, loc, 1))
                            .getResult()
                      : rows;
    return dispatchKernel(b, loc, name, {x, heads}, buffers, scalars,
                          resultTypes, resultDims);
  }
};

/// The packed values of `ragged` (read through a pack where there is one).
Value valuesOf(OpBuilder &b, Location loc, Value ragged,
               RankedTensorType valuesType) {
  if (auto pack = ragged.getDefiningOp<PackOp>())
    if (pack.getValues().getType() == valuesType)
      return pack.getValues();
  return ValuesOp::create(b, loc, valuesType, ragged);
}

/// Whether the kernels take an op on `type` whose head size is at most
/// `maxHeadDim`; the reason otherwise.
LogicalResult checkOperands(PatternRewriter &rewriter, Operation *op,
                            RaggedTensorType type, int64_t maxHeadDim) {
  RankedTensorType valuesType = type.getValuesType();
  if (!isa<Float32Type, Float16Type, BFloat16Type>(type.getElementType()) ||
      valuesType.getRank() != 3)
    return rewriter.notifyMatchFailure(
        op, "the kernels take f32, f16 or bf16 [rows, H, d]");
  if (valuesType.isDynamicDim(2) || valuesType.getDimSize(2) > maxHeadDim)
    return rewriter.notifyMatchFailure(op, "the head size is dynamic or large");
  if (type.getDistinctSymbols().size() != 1)
    return rewriter.notifyMatchFailure(op, "one ragged dim");
  return success();
}

/// The sizes and scalars of the dispatches of an attention or its gradient
/// on `q` (packed values) under `query`'s partition.
Dispatches prepare(OpBuilder &b, Location loc, Value query, Value q,
                   RaggedTensorType type, Value seedOperand, double dropout,
                   bool causal, double scale) {
  Dispatches x;
  if (auto pack = query.getDefiningOp<PackOp>()) {
    x.offsets = pack.getPartitions().front();
  } else {
    StringAttr symbol = type.getDistinctSymbols().front();
    x.offsets =
        OffsetsOp::create(b, loc, type.getPartitionType(symbol), query, symbol);
  }
  x.staticHeads = type.getValuesType().getDimSize(1);
  x.rows = dimOf(b, loc, q, 0);
  x.heads = dimOf(b, loc, q, 1);
  x.d = dimOf(b, loc, q, 2);
  Value quantum = constIndex(b, loc, kStrideQuantum);
  x.stride = arith::AddIOp::create(
      b, loc,
      arith::MulIOp::create(
          b, loc,
          arith::CeilDivUIOp::create(
              b, loc,
              arith::AddIOp::create(b, loc, x.rows,
                                    constIndex(b, loc, kKeyPadding)),
              quantum),
          quantum),
      constIndex(b, loc, kStrideSkew));
  // Dropout: the seed as [1] i64, the threshold and the kept weights'
  // factor (see ragged.attention); otherwise the offsets stand in.
  bool drops = seedOperand && dropout > 0.0;
  x.seed = x.offsets;
  uint32_t threshold = 0;
  float keep = 1.0f;
  if (drops) {
    x.seed = tensor::ExpandShapeOp::create(
        b, loc, RankedTensorType::get({1}, b.getI64Type()), seedOperand,
        ArrayRef<ReassociationIndices>{});
    threshold = dropoutThreshold(dropout);
    keep = float(1.0 / (1.0 - dropout));
  }
  x.offsetsSize = dimOf(b, loc, x.offsets, 0);
  x.scalars = {
      x.rows,
      x.heads,
      x.d,
      x.stride,
      arith::ConstantOp::create(b, loc, b.getF32FloatAttr(float(scale))),
      constIndex(b, loc, causal ? 1 : 0),
      constIndex(b, loc, drops ? 1 : 0),
      arith::ConstantIntOp::create(b, loc, b.getI32Type(),
                                   int64_t(int32_t(threshold))),
      arith::ConstantOp::create(b, loc, b.getF32FloatAttr(keep))};
  return x;
}

/// The forward's output and lse values in f32 ([rows, H, d], [rows, H, 1])
/// from the op's packed values.
SmallVector<Value> forward(OpBuilder &b, Location loc, const Dispatches &x,
                           Value q, Value k, Value v) {
  Type f32 = b.getF32Type();
  auto valuesType = cast<RankedTensorType>(q.getType()).clone(f32);
  auto lseType = RankedTensorType::get(
      {ShapedType::kDynamic, valuesType.getDimSize(1), 1}, f32);
  Operation *fwd = x.dispatch(
      b, loc, "attention_fwd",
      {widened(b, loc, q), x.transposed(b, loc, k), widened(b, loc, v)},
      {valuesType, lseType});
  return {fwd->getResult(0), fwd->getResult(1)};
}

/// ragged.attention as a dispatch of `attention_fwd`.
struct AttentionOnKernel : OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    auto type = cast<RaggedTensorType>(op.getResult().getType());
    if (failed(checkOperands(rewriter, op, type, kMaxHeadDim)))
      return failure();
    Location loc = op.getLoc();
    RankedTensorType valuesType = type.getValuesType();
    Value q = valuesOf(rewriter, loc, op.getQuery(), valuesType),
          k = valuesOf(rewriter, loc, op.getKey(), valuesType),
          v = valuesOf(rewriter, loc, op.getValue(), valuesType);
    Dispatches x = prepare(rewriter, loc, op.getQuery(), q, type, op.getSeed(),
                           op.getDropout().convertToDouble(), op.getCausal(),
                           op.getScale().convertToDouble());
    SmallVector<Value> outs = forward(rewriter, loc, x, q, k, v);
    Type element = type.getElementType();
    Value out = PackOp::create(rewriter, loc, type,
                               withElementType(rewriter, loc, outs[0], element),
                               x.offsets);
    if (!op.getLse()) {
      rewriter.replaceOp(op, out);
      return success();
    }
    Value lse = withElementType(rewriter, loc, outs[1], element);
    auto lseType = cast<RaggedTensorType>(op.getLse().getType());
    if (lse.getType() != lseType.getValuesType())
      lse = tensor::CastOp::create(rewriter, loc, lseType.getValuesType(), lse);
    rewriter.replaceOp(
        op, {out, PackOp::create(rewriter, loc, lseType, lse, x.offsets)});
    return success();
  }
};

/// ragged.attention_grad as a dispatch of `attention_bwd` (after
/// `attention_fwd` where the forward's output or lse is not given).
struct AttentionGradOnKernel : OpRewritePattern<AttentionGradOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AttentionGradOp op,
                                PatternRewriter &rewriter) const override {
    auto type = cast<RaggedTensorType>(op.getQuery().getType());
    if (failed(checkOperands(rewriter, op, type, kMaxGradHeadDim)))
      return failure();
    Location loc = op.getLoc();
    RankedTensorType valuesType = type.getValuesType();
    auto values = [&](Value ragged) {
      return valuesOf(rewriter, loc, ragged, valuesType);
    };
    Value q = values(op.getQuery()), k = values(op.getKey()),
          v = values(op.getValue()), g = values(op.getGrad());
    Dispatches x = prepare(rewriter, loc, op.getQuery(), q, type, op.getSeed(),
                           op.getDropout().convertToDouble(), op.getCausal(),
                           op.getScale().convertToDouble());
    Value out, lse;
    if (op.getOutput() && op.getLse()) {
      out = values(op.getOutput());
      lse = valuesOf(
          rewriter, loc, op.getLse(),
          cast<RaggedTensorType>(op.getLse().getType()).getValuesType());
    } else {
      SmallVector<Value> outs = forward(rewriter, loc, x, q, k, v);
      out = outs[0], lse = outs[1];
    }
    Value lseT = x.transposed(rewriter, loc, lse);
    Value dots = x.rowDots(rewriter, loc, g, out);
    auto wide = [&](Value rows) { return widened(rewriter, loc, rows); };
    auto resultType = valuesType.clone(rewriter.getF32Type());
    Operation *bwd =
        x.dispatch(rewriter, loc, "attention_bwd",
                   {wide(q), wide(k), wide(v), x.transposed(rewriter, loc, q),
                    wide(g), x.transposed(rewriter, loc, g), lseT, dots},
                   {resultType, resultType, resultType},
                   /*perItem=*/true);
    auto pack = [&](Value rows) {
      rows = withElementType(rewriter, loc, rows, type.getElementType());
      return PackOp::create(rewriter, loc, type, rows, x.offsets).getResult();
    };
    rewriter.replaceOp(op, {pack(bwd->getResult(0)), pack(bwd->getResult(1)),
                            pack(bwd->getResult(2))});
    return success();
  }
};

/// ragged.softmax over the ragged dim of `[B, L(b), D...]` (f32) as a
/// dispatch of `segment_softmax`, one workgroup per item: the values
/// `[rows, D...]` seen as `[rows, 1, f]`.
struct SoftmaxOnKernel : OpRewritePattern<SoftmaxOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(SoftmaxOp op,
                                PatternRewriter &rewriter) const override {
    auto type = cast<RaggedTensorType>(op.getSource().getType());
    RankedTensorType valuesType = type.getValuesType();
    if (!type.getElementType().isF32() || type.getLastRaggedDim() != 0 ||
        valuesType.getRank() < 2)
      return rewriter.notifyMatchFailure(
          op, "the kernel takes f32 [B, L(b), D...] (one ragged dim, first)");
    Location loc = op.getLoc();
    Value values = valuesOf(rewriter, loc, op.getSource(), valuesType);
    SmallVector<ReassociationIndices> toRows{{0}, {}};
    for (int64_t i = 1; i < valuesType.getRank(); ++i)
      toRows.back().push_back(i);
    bool flat = valuesType.getRank() == 2;
    Value rows =
        flat ? values
             : tensor::CollapseShapeOp::create(rewriter, loc, values, toRows);
    auto rowsType = cast<RankedTensorType>(rows.getType());
    auto viewType =
        RankedTensorType::get({ShapedType::kDynamic, 1, rowsType.getDimSize(1)},
                              rowsType.getElementType());
    SmallVector<ReassociationIndices> split{{0}, {1, 2}};
    Value view =
        tensor::ExpandShapeOp::create(rewriter, loc, viewType, rows, split);
    Dispatches x = prepare(rewriter, loc, op.getSource(), view, type, Value(),
                           0.0, /*causal=*/false, 1.0);
    Value out = x.dispatch(rewriter, loc, "segment_softmax", {view}, {viewType},
                           /*perItem=*/true)
                    ->getResult(0);
    out = tensor::CollapseShapeOp::create(rewriter, loc, out, split);
    if (!flat)
      out = tensor::ExpandShapeOp::create(
          rewriter, loc, valuesType, out, toRows,
          tensor::getMixedSizes(rewriter, loc, values));
    rewriter.replaceOp(op, PackOp::create(rewriter, loc, type, out, x.offsets));
    return success();
  }
};

/// ragged.reduce over the ragged dim of `[B, L(b), D...]` (f32) as a
/// dispatch of `segment_reduce`, one workgroup per item: the values
/// `[rows, D...]` seen as `[rows, f]`, the result `[B, f]` seen as
/// `[B, D...]`.
struct ReduceOnKernel : OpRewritePattern<ReduceOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(ReduceOp op,
                                PatternRewriter &rewriter) const override {
    auto type = cast<RaggedTensorType>(op.getSource().getType());
    auto resultType = dyn_cast<RankedTensorType>(op.getType());
    RankedTensorType valuesType = type.getValuesType();
    if (!type.getElementType().isF32() || type.getLastRaggedDim() != 0 ||
        type.getDistinctSymbols().size() != 1 || !resultType ||
        llvm::any_of(valuesType.getShape().drop_front(), ShapedType::isDynamic))
      return rewriter.notifyMatchFailure(
          op, "the kernel takes f32 [B, L(b), D...] (one ragged dim, first, "
              "static D)");
    Location loc = op.getLoc();
    auto c = [&](int64_t v) { return constIndex(rewriter, loc, v); };
    Value values = valuesOf(rewriter, loc, op.getSource(), valuesType);
    StringAttr symbol = type.getDistinctSymbols().front();
    Value offsets = OffsetsOp::create(
        rewriter, loc, type.getPartitionType(symbol), op.getSource(), symbol);
    int64_t features = 1;
    for (int64_t d : valuesType.getShape().drop_front())
      features *= d;
    // [rows, D...] -> [rows, f] (a rank-1 [rows] gains a unit dim).
    SmallVector<ReassociationIndices> toRows{{0}, {}};
    for (int64_t i = 1; i < valuesType.getRank(); ++i)
      toRows.back().push_back(i);
    Type f32 = rewriter.getF32Type();
    auto rowsType =
        RankedTensorType::get({ShapedType::kDynamic, features}, f32);
    Value rows =
        valuesType.getRank() == 1
            ? tensor::ExpandShapeOp::create(
                  rewriter, loc, rowsType, values,
                  SmallVector<ReassociationIndices>{{0, 1}},
                  ArrayRef<OpFoldResult>{
                      tensor::getMixedSize(rewriter, loc, values, 0),
                      rewriter.getIndexAttr(1)})
                  .getResult()
        : valuesType.getRank() == 2
            ? values
            : tensor::CollapseShapeOp::create(rewriter, loc, values, toRows)
                  .getResult();
    double empty = 0.0;
    if (auto attr = op.getEmpty())
      empty = cast<FloatAttr>(*attr).getValueAsDouble();
    Value items = arith::SubIOp::create(rewriter, loc,
                                        dimOf(rewriter, loc, offsets, 0), c(1));
    auto outType = RankedTensorType::get({ShapedType::kDynamic, features}, f32);
    Value out =
        dispatchKernel(
            rewriter, loc, "segment_reduce", {items, c(1)}, {rows, offsets},
            {c(features), c(static_cast<int64_t>(op.getKind())),
             arith::ConstantOp::create(rewriter, loc,
                                       rewriter.getF32FloatAttr(float(empty)))},
            {outType}, {items})
            ->getResult(0);
    // [B, f] -> the result's [B, D...].
    SmallVector<OpFoldResult> sizes{OpFoldResult(items)};
    for (int64_t d : resultType.getShape().drop_front())
      sizes.push_back(rewriter.getIndexAttr(d));
    Value result;
    if (resultType.getRank() == 1)
      result = tensor::CollapseShapeOp::create(
          rewriter, loc, out, SmallVector<ReassociationIndices>{{0, 1}});
    else if (resultType.getRank() == 2)
      result = out;
    else
      result = tensor::ExpandShapeOp::create(
          rewriter, loc,
          RankedTensorType::get(
              [&] {
                SmallVector<int64_t> shape{ShapedType::kDynamic};
                llvm::append_range(shape, resultType.getShape().drop_front());
                return shape;
              }(),
              f32),
          out, toRows, sizes);
    if (result.getType() != resultType)
      result = tensor::CastOp::create(rewriter, loc, resultType, result);
    rewriter.replaceOp(op, result);
    return success();
  }
};

/// What a window op's dispatch reads besides the pixels: the input's and
/// the output's partitions and row offsets, and the output's pixel count.
struct ImageOffsets {
  Packed in, out;
  Value inRows, outRows, pixels;

  /// What the window kernels read after the pixels (and weights): the
  /// input's row offsets, heights and widths, the output's row offsets and
  /// widths.
  SmallVector<Value> offsetBuffers() const {
    ArrayRef<StringAttr> inSyms = in.type.getSymbols(),
                         outSyms = out.type.getSymbols();
    return {inRows, in.offsets(inSyms[0]), in.offsets(inSyms[1]), outRows,
            out.offsets(outSyms[1])};
  }
};

/// The offsets of window op `op` on `source` with result `resultType`: the
/// output extents by the op's rule (as `convert-ragged-to-linalg` computes
/// them), each image's first pixel in the input and in the output.
ImageOffsets imageOffsets(PatternRewriter &rewriter, Location loc, Value source,
                          RaggedTensorType resultType,
                          std::array<WindowDim, 2> dims) {
  auto type = cast<RaggedTensorType>(source.getType());
  ImageOffsets x;
  x.in.type = type;
  x.in.values = valuesOf(rewriter, loc, source, type.getValuesType());
  for (StringAttr sym : type.getDistinctSymbols())
    x.in.partitions.push_back(OffsetsOp::create(
        rewriter, loc, type.getPartitionType(sym), source, sym));
  x.out.type = resultType;
  for (unsigned i = 0; i < 2; ++i) {
    StringAttr sym = resultType.getSymbols()[i];
    if (i == 1 && sym == resultType.getSymbols()[0])
      break;
    x.out.partitions.push_back(windowOffsets(
        rewriter, loc, x.in.offsets(type.getSymbols()[i]), dims[i]));
  }
  x.inRows = Addressing(rewriter, loc, x.in).rowOffsets();
  x.outRows = dims[0].keepsExtent() && dims[1].keepsExtent()
                  ? x.inRows
                  : Addressing(rewriter, loc, x.out).rowOffsets();
  x.pixels = loadIndex(rewriter, loc, x.outRows,
                       numSegments(rewriter, loc, x.outRows));
  return x;
}

/// Whether the window kernels take an op on `type`: f32 images of one
/// level.
bool kernelImages(RaggedTensorType type) {
  return type.getElementType().isF32() && type.isSingleLevel();
}

/// Replaces window op `op` with the dispatch `result` (its values) packed
/// with the output partitions.
void replaceWithImages(PatternRewriter &rewriter, Operation *op, Value result,
                       const ImageOffsets &x) {
  Location loc = op->getLoc();
  RankedTensorType valuesType = x.out.type.getValuesType();
  if (result.getType() != valuesType)
    result = tensor::CastOp::create(rewriter, loc, valuesType, result);
  rewriter.replaceOp(
      op, PackOp::create(rewriter, loc, x.out.type, result, x.out.partitions));
}

/// The sizes of a window: kernel, stride, padding and dilation, each along
/// H then W.
SmallVector<Value> windowScalars(PatternRewriter &rewriter, Location loc,
                                 std::array<WindowDim, 2> dims) {
  auto c = [&](int64_t v) { return constIndex(rewriter, loc, v); };
  auto [dy, dx] = dims;
  return {c(dy.kernel),  c(dx.kernel),  c(dy.stride),   c(dx.stride),
          c(dy.padding), c(dx.padding), c(dy.dilation), c(dx.dilation)};
}

/// ragged.conv2d (f32, groups 1) as a dispatch of `conv2d`: each output
/// pixel's window read from the packed input, no window tile. The weight's
/// and the bias's output channels are padded with zeros to a whole vector
/// of the widest ISA.
struct Conv2dOnKernel : OpRewritePattern<Conv2dOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(Conv2dOp op,
                                PatternRewriter &rewriter) const override {
    auto type = cast<RaggedTensorType>(op.getSource().getType());
    auto wType = cast<RankedTensorType>(op.getWeight().getType());
    if (!kernelImages(type) || op.getGroups() != 1 || !wType.hasStaticShape() ||
        wType.getDimSize(2) > kConvMaxChannels)
      return rewriter.notifyMatchFailure(
          op, "the kernel takes f32 images, groups 1, a static weight and at "
              "most 4096 input channels");
    Location loc = op.getLoc();
    auto c = [&](int64_t v) { return constIndex(rewriter, loc, v); };
    Type f32 = rewriter.getF32Type();
    std::array<WindowDim, 2> dims = op.getWindowDims();
    ImageOffsets x = imageOffsets(rewriter, loc, op.getSource(),
                                  cast<RaggedTensorType>(op.getType()), dims);

    // The weight [KH, KW, Cin, Cout] and bias [Cout], Cout padded to a
    // multiple of every ISA's vector width.
    int64_t cout = wType.getDimSize(3);
    int64_t coutp = llvm::alignTo(cout, kConvChannelQuantum);
    Value zero = floatConst(rewriter, loc, f32, 0.0);
    auto padded = [&](Value t) {
      auto tType = cast<RankedTensorType>(t.getType());
      SmallVector<int64_t> shape(tType.getShape());
      shape.back() = coutp;
      return tensor::createPadHighOp(RankedTensorType::get(shape, f32), t, zero,
                                     /*nofold=*/false, loc, rewriter, {});
    };
    Value weight = padded(op.getWeight());
    Value bias = op.getBias()
                     ? padded(op.getBias())
                     : linalg::FillOp::create(
                           rewriter, loc, zero,
                           emptyTensor(rewriter, loc, {coutp}, f32, {}))
                           .getResult(0);
    SmallVector<Value> scalars{x.pixels, c(wType.getDimSize(2)), c(cout),
                               c(coutp)};
    llvm::append_range(scalars, windowScalars(rewriter, loc, dims));
    auto outValues = RankedTensorType::get({ShapedType::kDynamic, cout}, f32);
    SmallVector<Value> buffers{x.in.values, weight, bias};
    llvm::append_range(buffers, x.offsetBuffers());
    Value result = dispatchKernel(rewriter, loc, "conv2d", {x.pixels, c(1)},
                                  buffers, scalars, {outValues}, {x.pixels})
                       ->getResult(0);
    replaceWithImages(rewriter, op, result, x);
    return success();
  }
};

/// ragged.pool2d (f32) as a dispatch of `pool2d`: each output pixel's window
/// reduced from the packed input.
struct Pool2dOnKernel : OpRewritePattern<Pool2dOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(Pool2dOp op,
                                PatternRewriter &rewriter) const override {
    auto type = cast<RaggedTensorType>(op.getSource().getType());
    if (!kernelImages(type))
      return rewriter.notifyMatchFailure(op, "the kernel takes f32 images");
    Location loc = op.getLoc();
    auto c = [&](int64_t v) { return constIndex(rewriter, loc, v); };
    std::array<WindowDim, 2> dims = op.getWindowDims();
    ImageOffsets x = imageOffsets(rewriter, loc, op.getSource(),
                                  cast<RaggedTensorType>(op.getType()), dims);
    int64_t channels = type.getValuesType().getDimSize(1);
    SmallVector<Value> scalars{x.pixels, c(channels),
                               c(static_cast<int64_t>(op.getKind())),
                               c(op.getCountIncludePad() ? 1 : 0)};
    llvm::append_range(scalars, windowScalars(rewriter, loc, dims));
    auto outValues = RankedTensorType::get({ShapedType::kDynamic, channels},
                                           rewriter.getF32Type());
    SmallVector<Value> buffers{x.in.values};
    llvm::append_range(buffers, x.offsetBuffers());
    Value result = dispatchKernel(rewriter, loc, "pool2d", {x.pixels, c(1)},
                                  buffers, scalars, {outValues}, {x.pixels})
                       ->getResult(0);
    replaceWithImages(rewriter, op, result, x);
    return success();
  }
};

struct CpuKernelsPass : ragged::impl::CpuKernelsPassBase<CpuKernelsPass> {
  using CpuKernelsPassBase::CpuKernelsPassBase;
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    if (!ctx->allowsUnregisteredDialects()) {
      emitError(getOperation().getLoc())
          << "ragged-cpu-kernels emits IREE's stream.executable and "
             "flow.dispatch, which this context does not know: allow "
             "unregistered dialects (ragged-opt --allow-unregistered-dialect)";
      return signalPassFailure();
    }
    RewritePatternSet patterns(ctx);
    populateCpuKernelsPatterns(patterns);
    walkAndApplyPatterns(getOperation(), std::move(patterns));
    addKernelExecutable(getOperation(), isa);
  }
};

} // namespace

void mlir::ragged::populateCpuKernelsPatterns(RewritePatternSet &patterns) {
  patterns.add<AttentionOnKernel, AttentionGradOnKernel, SoftmaxOnKernel,
               ReduceOnKernel, Conv2dOnKernel, Pool2dOnKernel>(
      patterns.getContext());
}

void mlir::ragged::addKernelExecutable(ModuleOp module, StringRef isa) {
  bool used = false, present = false;
  module.walk([&](Operation *op) {
    if (op->getName().getStringRef() == "flow.dispatch")
      if (auto entries = op->getAttrOfType<ArrayAttr>("entry_points"))
        for (Attribute e : entries)
          if (auto ref = dyn_cast<SymbolRefAttr>(e))
            used |= ref.getRootReference().getValue() == kExecutable;
  });
  for (Operation &op : module.getBody()->getOperations())
    if (auto name = op.getAttrOfType<StringAttr>("sym_name"))
      present |= op.getName().getStringRef() == "stream.executable" &&
                 name.getValue() == kExecutable;
  if (!used || present)
    return;
  OpBuilder b = OpBuilder::atBlockBegin(module.getBody());
  buildExecutable(b, module.getLoc(), isa);
}
