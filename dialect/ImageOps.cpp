//===- ImageOps.cpp - verifiers of the ragged image ops -------------------===//
//
// flatten, conv2d and pool2d on `[B, H(b), W(b), C]` images.
//
//===----------------------------------------------------------------------===//

#include "dialect/RaggedDialect.h"
#include "dialect/Verification.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace mlir::ragged;
using namespace mlir::ragged::detail;

LogicalResult FlattenOp::verify() {
  auto source = cast<RaggedTensorType>(getSource().getType());
  auto result = cast<RaggedTensorType>(getResult().getType());
  unsigned ragged = source.getSymbols().size();
  if (!source.isSingleLevel() || ragged < 2 ||
      source.getLastRaggedDim() + 1 != ragged)
    return emitOpError() << "needs two or more leading ragged dims depending "
                            "on the batch, then dense dims, got "
                         << source;
  SmallVector<int64_t> shape{RaggedTensorType::kRagged};
  llvm::append_range(shape, source.getTrailingDims());
  StringAttr symbol = result.getSymbols().front();
  auto expected =
      RaggedTensorType::get(getContext(), source.getBatch(), shape, {symbol},
                            {StringAttr::get(getContext(), "")},
                            source.getElementType(), source.getEncoding());
  if (failed(requireSameType(*this, expected, result, "result type")))
    return failure();
  if (llvm::is_contained(source.getSymbols(), symbol))
    return emitOpError() << "result symbol '" << symbol.getValue()
                         << "' must be fresh: its extents differ from the "
                            "source's";
  return success();
}

/// `[B, H(b), W(b), C]`: two ragged dims depending on the batch, then a
/// static channel dim.
static bool isImage(RaggedTensorType type) {
  return type.getItemRank() == 3 && type.isRaggedDim(0) &&
         type.isRaggedDim(1) && type.isSingleLevel() &&
         !ShapedType::isDynamic(type.getShape()[2]);
}

static std::array<WindowDim, 2>
windowDims(ArrayRef<int64_t> kernel, ArrayRef<int64_t> strides,
           ArrayRef<int64_t> padding, ArrayRef<int64_t> dilation, bool ceil) {
  std::array<WindowDim, 2> dims;
  for (unsigned i = 0; i < 2; ++i)
    dims[i] = {kernel.size() > i ? kernel[i] : 0,
               strides.size() > i ? strides[i] : 0,
               padding.size() > i ? padding[i] : 0,
               dilation.size() > i ? dilation[i] : 0, ceil};
  return dims;
}

/// The shape rules both image ops share: a `[B, H(b), W(b), C]` source, a
/// window per spatial dim, and a result `[B, Ho(b), Wo(b), channels]` whose
/// symbols are the source's where the window keeps the extent and fresh
/// otherwise.
static LogicalResult verifyWindowOp(Operation *op, RaggedTensorType source,
                                    RaggedTensorType result,
                                    ArrayRef<WindowDim> dims,
                                    int64_t channels) {
  for (RaggedTensorType t : {source, result})
    if (!isImage(t))
      return op->emitOpError()
             << "works on images [B, H(b), W(b), C] (two ragged dims "
                "depending on the batch, then a static channel dim), got "
             << t;
  if (failed(requireFloat(op, source)))
    return failure();
  static const char *names[] = {"H", "W"};
  for (auto [i, dim] : llvm::enumerate(dims)) {
    if (dim.kernel < 1 || dim.stride < 1 || dim.dilation < 1 || dim.padding < 0)
      return op->emitOpError()
             << "window along " << names[i] << ": kernel " << dim.kernel
             << ", stride " << dim.stride << " and dilation " << dim.dilation
             << " must be >= 1 and padding " << dim.padding << " >= 0";
  }
  SmallVector<int64_t> shape{RaggedTensorType::kRagged,
                             RaggedTensorType::kRagged, channels};
  auto expected = RaggedTensorType::get(
      op->getContext(), source.getBatch(), shape, result.getSymbols(),
      result.getParents(), source.getElementType(), source.getEncoding());
  if (failed(requireSameType(op, expected, result, "result type")))
    return failure();
  ArrayRef<StringAttr> in = source.getSymbols(), out = result.getSymbols();
  for (auto [i, dim] : llvm::enumerate(dims)) {
    if (dim.keepsExtent() && out[i] != in[i])
      return op->emitOpError()
             << "the window keeps the extent of " << names[i]
             << ", so the result's dim " << i << " must keep the symbol '"
             << in[i].getValue() << "', got '" << out[i].getValue() << "'";
    if (!dim.keepsExtent() && llvm::is_contained(in, out[i]))
      return op->emitOpError()
             << "the window changes the extent of " << names[i]
             << ", so the result's dim " << i << " needs a fresh symbol, got '"
             << out[i].getValue() << "'";
  }
  // One symbol for both output dims means equal extents: only when the
  // source's are equal and so are the windows.
  bool sameWindow = dims[0].kernel == dims[1].kernel &&
                    dims[0].stride == dims[1].stride &&
                    dims[0].padding == dims[1].padding &&
                    dims[0].dilation == dims[1].dilation;
  if (out[0] == out[1] && (in[0] != in[1] || !sameWindow))
    return op->emitOpError()
           << "the result's dims have one symbol '" << out[0].getValue()
           << "' but their extents may differ";
  return success();
}

std::array<WindowDim, 2> Conv2dOp::getWindowDims() {
  auto weight = getWeight().getType();
  int64_t kernel[2] = {weight.getDimSize(0), weight.getDimSize(1)};
  return windowDims(kernel, getStrides(), getPadding(), getDilation(),
                    /*ceil=*/false);
}

LogicalResult Conv2dOp::verify() {
  auto source = cast<RaggedTensorType>(getSource().getType());
  auto result = cast<RaggedTensorType>(getResult().getType());
  auto weight = getWeight().getType();
  for (auto [name, attr] : {std::pair{"strides", getStrides()},
                            {"padding", getPadding()},
                            {"dilation", getDilation()}})
    if (attr.size() != 2)
      return emitOpError() << name << " needs 2 entries (H, W), got "
                           << attr.size();
  if (!weight.hasStaticShape())
    return emitOpError() << "weight [KH, KW, Cin / groups, Cout] must have a "
                            "static shape, got "
                         << weight;
  if (weight.getElementType() != source.getElementType())
    return emitOpError() << "weight element type " << weight.getElementType()
                         << " does not match " << source.getElementType();
  int64_t groups = getGroups();
  int64_t cout = weight.getDimSize(3);
  if (groups < 1 || cout % groups != 0)
    return emitOpError() << "groups " << groups
                         << " must be >= 1 and divide the " << cout
                         << " output channels";
  if (isImage(source) && weight.getDimSize(2) * groups != source.getShape()[2])
    return emitOpError() << "weight has " << weight.getDimSize(2)
                         << " input channels per group, times " << groups
                         << " groups; the source has " << source.getShape()[2];
  if (getBias()) {
    auto bias = getBias().getType();
    if (bias.getElementType() != source.getElementType() ||
        bias.getDimSize(0) != cout)
      return emitOpError() << "bias must be "
                           << RankedTensorType::get({cout},
                                                    source.getElementType())
                           << ", got " << bias;
  }
  return verifyWindowOp(*this, source, result, getWindowDims(), cout);
}

std::array<WindowDim, 2> Pool2dOp::getWindowDims() {
  return windowDims(getKernel(), getStrides(), getPadding(), getDilation(),
                    getCeilMode());
}

LogicalResult Pool2dOp::verify() {
  auto source = cast<RaggedTensorType>(getSource().getType());
  auto result = cast<RaggedTensorType>(getResult().getType());
  for (auto [name, attr] : {std::pair{"kernel", getKernel()},
                            {"strides", getStrides()},
                            {"padding", getPadding()},
                            {"dilation", getDilation()}})
    if (attr.size() != 2)
      return emitOpError() << name << " needs 2 entries (H, W), got "
                           << attr.size();
  if (getCountIncludePad() && getKind() != ReduceKind::mean)
    return emitOpError() << "count_include_pad applies to <mean> only";
  if (getKind() == ReduceKind::mean &&
      llvm::any_of(getDilation(), [](int64_t d) { return d != 1; }))
    return emitOpError() << "<mean> pooling has no dilation";
  for (WindowDim dim : getWindowDims())
    if (2 * dim.padding > dim.kernel)
      return emitOpError() << "padding " << dim.padding
                           << " must be at most half the kernel " << dim.kernel;
  return verifyWindowOp(*this, source, result, getWindowDims(),
                        source.getItemRank() == 3 ? source.getShape()[2] : 0);
}
