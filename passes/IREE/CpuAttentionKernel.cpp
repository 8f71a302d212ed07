//===- CpuAttentionKernel.cpp - ragged.attention on our CPU kernel --------===//
//
// f32 ragged.attention on CPU targets runs as one custom IREE dispatch of
// our kernel library (kernels/attention.c): the kernel reads the packed rows
// and the offsets directly, one workgroup per block of 32 query rows and
// head, so every item costs its own L(b)^2 and no bucket schedule is built.
// The dispatch is a `flow.dispatch` of a `stream.executable` whose function
// calls the kernel (`hal.import.static`) and whose object file IREE links
// into the executable; both are built by name (IREE's dialects are not
// linked here), for IREE to parse. The keys are read transposed, [H, d,
// rows + 64], so the scores of a block are vector products with no packing
// in the kernel: a `linalg.transpose` and a `tensor.pad` lay them out.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/RaggedToLinalg/LoweringUtils.h"
#include "passes/Passes.h"

#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/Dialect/Tensor/Utils/Utils.h"
#include "mlir/Transforms/WalkPatternRewriteDriver.h"

#include <cmath>

namespace mlir::ragged {
#define GEN_PASS_DEF_CPUATTENTIONKERNELPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;
using namespace mlir::ragged;
using namespace mlir::ragged::lowering;

namespace {

constexpr StringLiteral kExecutable = "ragged_kernels";
constexpr StringLiteral kExport = "attention_fwd";
constexpr StringLiteral kKernel = "ragged_attention_fwd";
/// Query rows per workgroup (RK_BQ) and the keys' padding (RK_BK).
constexpr int64_t kBlockRows = 32;
constexpr int64_t kKeyPadding = 64;
constexpr int64_t kMaxHeadDim = 256;

/// The dynamic sizes of `v`.
SmallVector<Value> dynamicSizes(OpBuilder &b, Location loc, Value v) {
  SmallVector<Value> sizes;
  auto type = cast<RankedTensorType>(v.getType());
  for (int64_t d = 0; d < type.getRank(); ++d)
    if (type.isDynamicDim(d))
      sizes.push_back(dimOf(b, loc, v, d));
  return sizes;
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

/// The kernel library's executable: one export, `attention_fwd`, whose
/// workgroups are (ceil(rows / 32), heads, 1), calling `ragged_attention_fwd`
/// from the object `ragged_kernels_<isa>.o` (found on IREE's object search
/// path).
void buildExecutable(OpBuilder &b, Location loc, StringRef isa) {
  MLIRContext *ctx = b.getContext();
  Type index = b.getIndexType(), f32 = b.getF32Type(), i32 = b.getI32Type();
  Type binding = parseType("!stream.binding", ctx);
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
  Block *body = b.createBlock(&exe->getRegion(0));

  // The export: workgroups from the workload (rows, heads).
  Operation *exp = createByName(
      b, loc, "stream.executable.export", {}, {},
      {b.getNamedAttr("sym_name", b.getStringAttr(kExport)),
       b.getNamedAttr("sym_visibility", b.getStringAttr("public")),
       b.getNamedAttr("function_ref", FlatSymbolRefAttr::get(ctx, kExport))},
      1);
  {
    OpBuilder::InsertionGuard g(b);
    Block *wg = b.createBlock(&exp->getRegion(0), {}, {index, index},
                              {loc, loc});
    Value x = arith::CeilDivUIOp::create(b, loc, wg->getArgument(0),
                                         constIndex(b, loc, kBlockRows));
    createByName(b, loc, "stream.return",
                 {x, wg->getArgument(1), constIndex(b, loc, 1)}, {});
  }

  // The module holding the kernel's declaration and the dispatch function.
  b.setInsertionPointToEnd(body);
  auto inner = ModuleOp::create(b, loc);
  createByName(b, loc, "stream.executable.end", {}, {});
  b.setInsertionPointToStart(inner.getBody());
  auto f32Rows = MemRefType::get({ShapedType::kDynamic}, f32);
  auto i64Rows = MemRefType::get({ShapedType::kDynamic}, b.getI64Type());
  // q, kt, v, offsets, seed, out, lse; rows, heads, d, key stride, scale,
  // causal, dropout, threshold, keep, workgroup x, workgroup y.
  SmallVector<Type> kernelArgs{f32Rows, f32Rows, f32Rows, i64Rows, i64Rows,
                               f32Rows, f32Rows, index,   index,   index,
                               index,   f32,     index,   index,   i32,
                               f32,     index,   index};
  auto kernel = func::FuncOp::create(b, loc, kKernel,
                                     b.getFunctionType(kernelArgs, {}));
  kernel.setPrivate();
  kernel->setAttr("hal.import.static", b.getUnitAttr());
  // Bindings (q, kt, v, offsets, seed, out, lse), then the scalars: rows,
  // heads, d, key stride, items + 1, seed size, scale, causal, dropout,
  // threshold, keep.
  SmallVector<Type> args(7, binding);
  args.append({index, index, index, index, index, index, f32, index, index,
               i32, f32});
  auto fn =
      func::FuncOp::create(b, loc, kExport, b.getFunctionType(args, {}));
  Block *entry = fn.addEntryBlock();
  b.setInsertionPointToStart(entry);
  auto arg = [&](unsigned i) { return entry->getArgument(i); };
  Value rows = arg(7), heads = arg(8), d = arg(9), keyStride = arg(10);
  Value rowSize = arith::MulIOp::create(b, loc, heads, d);
  Value qSize = arith::MulIOp::create(b, loc, rows, rowSize);
  Value ktSize = arith::MulIOp::create(b, loc, rowSize, keyStride);
  Value lseSize = arith::MulIOp::create(b, loc, rows, heads);
  Value c0 = constIndex(b, loc, 0);
  auto subspan = [&](unsigned i, MemRefType type, Value size) {
    return createByName(b, loc, "stream.binding.subspan", {arg(i), c0, size},
                        type)
        ->getResult(0);
  };
  SmallVector<Value> callArgs{
      subspan(0, f32Rows, qSize),  subspan(1, f32Rows, ktSize),
      subspan(2, f32Rows, qSize),  subspan(3, i64Rows, arg(11)),
      subspan(4, i64Rows, arg(12)), subspan(5, f32Rows, qSize),
      subspan(6, f32Rows, lseSize)};
  for (unsigned i : {7, 8, 9, 10, 13, 14, 15, 16, 17})
    callArgs.push_back(arg(i));
  for (int64_t dim : {0, 1})
    callArgs.push_back(
        createByName(b, loc, "stream.dispatch.workgroup.id", {}, index,
                     {b.getNamedAttr("dimension", b.getIndexAttr(dim))})
            ->getResult(0));
  func::CallOp::create(b, loc, kernel, callArgs);
  func::ReturnOp::create(b, loc);
}

/// ragged.attention as a dispatch of the kernel library's `attention_fwd`
/// (the executable itself is added by `addKernelExecutable`).
struct AttentionOnKernel : OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AttentionOp op,
                                PatternRewriter &rewriter) const override {
    auto type = cast<RaggedTensorType>(op.getResult().getType());
    RankedTensorType valuesType = type.getValuesType();
    if (!type.getElementType().isF32() || valuesType.getRank() != 3)
      return rewriter.notifyMatchFailure(op, "the kernel takes f32 [rows, H, d]");
    if (valuesType.isDynamicDim(2) || valuesType.getDimSize(2) > kMaxHeadDim)
      return rewriter.notifyMatchFailure(
          op, "the kernel takes a static head size of at most 256");
    if (type.getDistinctSymbols().size() != 1)
      return rewriter.notifyMatchFailure(op, "one ragged dim");
    Location loc = op.getLoc();
    auto valuesOf = [&](Value ragged) -> Value {
      if (auto pack = ragged.getDefiningOp<PackOp>())
        if (pack.getValues().getType() == valuesType)
          return pack.getValues();
      return ValuesOp::create(rewriter, loc, valuesType, ragged);
    };
    Value q = valuesOf(op.getQuery()), k = valuesOf(op.getKey()),
          v = valuesOf(op.getValue());
    Value offsets;
    if (auto pack = op.getQuery().getDefiningOp<PackOp>()) {
      offsets = pack.getPartitions().front();
    } else {
      StringAttr symbol = type.getDistinctSymbols().front();
      offsets = OffsetsOp::create(rewriter, loc, type.getPartitionType(symbol),
                                  op.getQuery(), symbol);
    }
    Type f32 = rewriter.getF32Type();
    Value rows = dimOf(rewriter, loc, q, 0), heads = dimOf(rewriter, loc, q, 1),
          d = dimOf(rewriter, loc, q, 2);
    // The keys transposed, [H, d, rows + 64], the tail zero.
    Value keyStride = arith::AddIOp::create(rewriter, loc, rows,
                                            constIndex(rewriter, loc, kKeyPadding));
    SmallVector<int64_t> ktShape{valuesType.getDimSize(1),
                                 valuesType.getDimSize(2), ShapedType::kDynamic};
    SmallVector<Value> ktDyn;
    if (valuesType.isDynamicDim(1))
      ktDyn.push_back(heads);
    Value ktInit = emptyTensor(rewriter, loc,
                               {ktShape[0], ktShape[1], ShapedType::kDynamic},
                               f32, llvm::to_vector(llvm::concat<Value>(
                                        ktDyn, ValueRange{rows})));
    Value kt = linalg::TransposeOp::create(rewriter, loc, k, ktInit,
                                           ArrayRef<int64_t>{1, 2, 0})
                   ->getResult(0);
    SmallVector<Value> paddedDyn = ktDyn;
    paddedDyn.push_back(keyStride);
    kt = tensor::createPadHighOp(
        RankedTensorType::get(ktShape, f32), kt,
        floatConst(rewriter, loc, f32, 0.0), /*nofold=*/false, loc, rewriter,
        paddedDyn);

    // Dropout: the seed as [1] i64, the threshold and the kept weights'
    // factor (see ragged.attention); otherwise the offsets stand in.
    double p = op.getDropout().convertToDouble();
    bool dropout = op.getSeed() && p > 0.0;
    Value seed = offsets;
    uint32_t threshold = 0;
    float keep = 1.0f;
    if (dropout) {
      seed = tensor::ExpandShapeOp::create(
          rewriter, loc, RankedTensorType::get({1}, rewriter.getI64Type()),
          op.getSeed(), ArrayRef<ReassociationIndices>{});
      threshold = uint32_t(std::min(std::round(std::ldexp(p, 32)),
                                    std::ldexp(1.0, 32) - 1.0));
      keep = float(1.0 / (1.0 - p));
    }

    RankedTensorType lseType =
        RankedTensorType::get({ShapedType::kDynamic, valuesType.getDimSize(1), 1}, f32);
    if (op.getLse())
      lseType = cast<RaggedTensorType>(op.getLse().getType()).getValuesType();
    SmallVector<Value> tensors{q, kt, v, offsets, seed};
    SmallVector<Value> operands(tensors);
    operands.append(
        {rows, heads, d, keyStride, dimOf(rewriter, loc, offsets, 0),
         dimOf(rewriter, loc, seed, 0),
         arith::ConstantOp::create(
             rewriter, loc, rewriter.getF32FloatAttr(float(op.getScale().convertToDouble()))),
         constIndex(rewriter, loc, op.getCausal() ? 1 : 0),
         constIndex(rewriter, loc, dropout ? 1 : 0),
         arith::ConstantIntOp::create(rewriter, loc, rewriter.getI32Type(),
                                      int64_t(int32_t(threshold))),
         arith::ConstantOp::create(rewriter, loc, rewriter.getF32FloatAttr(keep))});
    SmallVector<Value> argDims;
    for (Value t : tensors)
      llvm::append_range(argDims, dynamicSizes(rewriter, loc, t));
    // Both results are shaped like the queries' rows.
    SmallVector<Value> resultDims = dynamicSizes(rewriter, loc, q);
    SmallVector<Value> lseDims{rows};
    if (lseType.isDynamicDim(1))
      lseDims.push_back(heads);
    llvm::append_range(resultDims, lseDims);
    SmallVector<Value> allOperands{rows, heads};
    llvm::append_range(allOperands, operands);
    llvm::append_range(allOperands, argDims);
    llvm::append_range(allOperands, resultDims);
    MLIRContext *ctx = rewriter.getContext();
    Operation *dispatch = createByName(
        rewriter, loc, "flow.dispatch", allOperands, {valuesType, lseType},
        {rewriter.getNamedAttr(
             "entry_points",
             rewriter.getArrayAttr({SymbolRefAttr::get(
                 ctx, kExecutable, {FlatSymbolRefAttr::get(ctx, kExport)})})),
         rewriter.getNamedAttr(
             "operandSegmentSizes",
             rewriter.getDenseI32ArrayAttr(
                 {2, int32_t(operands.size()), int32_t(argDims.size()),
                  int32_t(resultDims.size())})),
         rewriter.getNamedAttr(
             "tied_operands",
             rewriter.getArrayAttr({rewriter.getIndexAttr(-1),
                                    rewriter.getIndexAttr(-1)}))});
    Value out = PackOp::create(rewriter, loc, type, dispatch->getResult(0),
                               ValueRange{offsets});
    if (!op.getLse()) {
      rewriter.replaceOp(op, out);
      return success();
    }
    Value lse = PackOp::create(rewriter, loc, op.getLse().getType(),
                               dispatch->getResult(1), ValueRange{offsets});
    rewriter.replaceOp(op, {out, lse});
    return success();
  }
};

struct CpuAttentionKernelPass
    : ragged::impl::CpuAttentionKernelPassBase<CpuAttentionKernelPass> {
  using CpuAttentionKernelPassBase::CpuAttentionKernelPassBase;
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    if (!ctx->allowsUnregisteredDialects()) {
      emitError(getOperation().getLoc())
          << "ragged-cpu-attention-kernel emits IREE's stream.executable and "
             "flow.dispatch, which this context does not know: allow "
             "unregistered dialects (ragged-opt --allow-unregistered-dialect)";
      return signalPassFailure();
    }
    RewritePatternSet patterns(ctx);
    populateCpuAttentionKernelPatterns(patterns);
    walkAndApplyPatterns(getOperation(), std::move(patterns));
    addKernelExecutable(getOperation(), isa);
  }
};

} // namespace

void mlir::ragged::populateCpuAttentionKernelPatterns(
    RewritePatternSet &patterns) {
  patterns.add<AttentionOnKernel>(patterns.getContext());
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
