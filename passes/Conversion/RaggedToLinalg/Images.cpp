//===- Images.cpp - convolution and pooling of images of their own sizes --===//
//
// An image batch `[B, H(b), W(b), C]` is packed pixel after pixel, each
// image row-major, channels innermost. Every output pixel knows its image
// (searched once per pixel) and its (y, x) from the output partitions, so
// each op is a fixed number of generics over the real output pixels:
//
// - ragged.conv2d gathers each output pixel's window into a dense
//   `[pixels, KH, KW, Cin]` tile (zeros outside the image; the channel
//   reads are contiguous) and contracts it with the weight: one GEMM.
// - ragged.pool2d reduces the window in one generic (a second divides a
//   mean).
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/RaggedToLinalg/PopulatePatterns.h"

#include "passes/Conversion/RaggedToLinalg/LoweringUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

using namespace mlir;
using namespace mlir::ragged;
using namespace mlir::ragged::lowering;

namespace {

auto par = utils::IteratorType::parallel;
auto red = utils::IteratorType::reduction;

/// What the generics of one image op read to place an output pixel and its
/// window: the image of every output pixel, and both images' row offsets
/// and partitions.
struct ImageMap {
  Packed in, out;
  Value inRows, outRows, itemOfPixel, pixels;
  std::array<WindowDim, 2> dims;

  ImageMap(OpBuilder &b, Location loc, Packed source,
           RaggedTensorType resultType, std::array<WindowDim, 2> windows)
      : in(std::move(source)), dims(windows) {
    out.type = resultType;
    for (unsigned i = 0; i < 2; ++i) {
      StringAttr sym = resultType.getSymbols()[i];
      if (i == 1 && sym == resultType.getSymbols()[0])
        break;
      out.partitions.push_back(
          windowOffsets(b, loc, in.offsets(in.type.getSymbols()[i]), dims[i]));
    }
    inRows = Addressing(b, loc, in).rowOffsets();
    bool kept = dims[0].keepsExtent() && dims[1].keepsExtent();
    outRows = kept ? inRows : Addressing(b, loc, out).rowOffsets();
    pixels = loadIndex(b, loc, outRows, numSegments(b, loc, outRows));
    itemOfPixel = segmentOfRows(b, loc, outRows, pixels);
  }

  /// Inside a generic whose loop 0 runs over the output pixels.
  struct Pixel {
    Value inStart, height, width, y, x;
  };
  Pixel pixel(OpBuilder &b, Location loc) const {
    Value row = linalg::IndexOp::create(b, loc, 0);
    Value item = loadRowEntry(b, loc, itemOfPixel, row);
    Value next = arith::AddIOp::create(b, loc, item, constIndex(b, loc, 1));
    auto extent = [&](const Packed &p, unsigned i) {
      Value offsets = p.offsets(p.type.getSymbols()[i]);
      return arith::SubIOp::create(b, loc, loadIndex(b, loc, offsets, next),
                                   loadIndex(b, loc, offsets, item))
          .getResult();
    };
    Value local =
        arith::SubIOp::create(b, loc, row, loadIndex(b, loc, outRows, item));
    // At least 1: IREE may evaluate this on lanes past the last pixel
    // (masked loads read 0 there), and an integer division by 0 traps.
    Value outWidth =
        arith::MaxUIOp::create(b, loc, extent(out, 1), constIndex(b, loc, 1));
    return {loadIndex(b, loc, inRows, item), extent(in, 0), extent(in, 1),
            arith::DivUIOp::create(b, loc, local, outWidth),
            arith::RemUIOp::create(b, loc, local, outWidth)};
  }

  /// Whether window tap (ky, kx) of `p` lies inside the image, and the
  /// input row under it (the image's first row when outside).
  std::pair<Value, Value> tap(OpBuilder &b, Location loc, const Pixel &p,
                              Value ky, Value kx) const {
    auto coord = [&](Value o, Value k, const WindowDim &d) {
      Value start = arith::SubIOp::create(
          b, loc,
          arith::MulIOp::create(b, loc, o, constIndex(b, loc, d.stride)),
          constIndex(b, loc, d.padding));
      return arith::AddIOp::create(
                 b, loc, start,
                 arith::MulIOp::create(b, loc, k,
                                       constIndex(b, loc, d.dilation)))
          .getResult();
    };
    Value iy = coord(p.y, ky, dims[0]), ix = coord(p.x, kx, dims[1]);
    // Unsigned compares: a negative coordinate is a huge index.
    auto inside = [&](Value i, Value extent) {
      return arith::CmpIOp::create(b, loc, arith::CmpIPredicate::ult, i,
                                   extent);
    };
    Value valid = arith::AndIOp::create(b, loc, inside(iy, p.height),
                                        inside(ix, p.width));
    Value row = arith::AddIOp::create(
        b, loc, p.inStart,
        arith::AddIOp::create(b, loc,
                              arith::MulIOp::create(b, loc, iy, p.width), ix));
    return {valid,
            arith::SelectOp::create(b, loc, valid, row, p.inStart).getResult()};
  }

  /// An empty `[pixels, trailing...]` tensor.
  Value rows(OpBuilder &b, Location loc, ArrayRef<int64_t> trailing,
             Type elem) const {
    SmallVector<int64_t> shape{ShapedType::kDynamic};
    llvm::append_range(shape, trailing);
    return emptyTensor(b, loc, shape, elem, {pixels});
  }
};

struct Conv2dLowering : OpConversionPattern<Conv2dOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(Conv2dOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    auto resultType = cast<RaggedTensorType>(op.getType());
    ImageMap map(rewriter, loc, unpack(op.getSource(), adaptor.getSource()),
                 resultType, op.getWindowDims());
    Value weight = adaptor.getWeight().front();
    auto wType = cast<RankedTensorType>(weight.getType());
    int64_t kh = wType.getDimSize(0), kw = wType.getDimSize(1),
            cin = map.in.type.getShape()[2];
    int64_t cout = wType.getDimSize(3), groups = op.getGroups();
    Type elem = wType.getElementType();
    Value zero = floatConst(rewriter, loc, elem, 0.0);

    // windows[p, ky, kx, c]: the input under each tap, 0 outside the image.
    Value windows = structured(
        rewriter, loc, map.rows(rewriter, loc, {kh, kw, cin}, elem), {},
        {AffineMap::getMultiDimIdentityMap(4, ctx)}, {par, par, par, par},
        [&](OpBuilder &b, Location l, ValueRange) {
          ImageMap::Pixel p = map.pixel(b, l);
          auto [valid, row] = map.tap(b, l, p, linalg::IndexOp::create(b, l, 1),
                                      linalg::IndexOp::create(b, l, 2));
          Value v = tensor::ExtractOp::create(
              b, l, map.in.values,
              ValueRange{row, linalg::IndexOp::create(b, l, 3)});
          return arith::SelectOp::create(b, l, valid, v, zero).getResult();
        });

    // The accumulator starts at the bias (or 0) of each output channel.
    Value init = map.rows(rewriter, loc, {cout}, elem);
    if (Value bias =
            adaptor.getBias().empty() ? Value() : adaptor.getBias().front()) {
      AffineMap channel = AffineMap::get(2, 0, getAffineDimExpr(1, ctx));
      init = parallelGeneric(
          rewriter, loc, init, {bias}, {channel},
          [](OpBuilder &, Location, ValueRange a) { return a[0]; });
    } else {
      init = linalg::FillOp::create(rewriter, loc, zero, init).getResult(0);
    }

    Value out;
    if (groups == 1) {
      // [pixels, KH * KW * Cin] x [KH * KW * Cin, Cout]: one GEMM.
      Value lhs = tensor::CollapseShapeOp::create(
          rewriter, loc, windows,
          SmallVector<ReassociationIndices>{{0}, {1, 2, 3}});
      Value rhs = tensor::CollapseShapeOp::create(
          rewriter, loc, weight,
          SmallVector<ReassociationIndices>{{0, 1, 2}, {3}});
      out = linalg::MatmulOp::create(rewriter, loc, TypeRange{init.getType()},
                                     ValueRange{lhs, rhs}, ValueRange{init})
                .getResult(0);
    } else {
      // Per group g: windows[p, ky, kx, g, c] x weight[ky, kx, c, g, o]
      // summed over (ky, kx, c) into out[p, g, o].
      int64_t cg = cin / groups, og = cout / groups;
      Value lhs = tensor::ExpandShapeOp::create(
          rewriter, loc,
          RankedTensorType::get({ShapedType::kDynamic, kh, kw, groups, cg},
                                elem),
          windows, SmallVector<ReassociationIndices>{{0}, {1}, {2}, {3, 4}});
      Value rhs = tensor::ExpandShapeOp::create(
          rewriter, loc, RankedTensorType::get({kh, kw, cg, groups, og}, elem),
          weight, SmallVector<ReassociationIndices>{{0}, {1}, {2}, {3, 4}});
      Value acc = tensor::ExpandShapeOp::create(
          rewriter, loc,
          RankedTensorType::get({ShapedType::kDynamic, groups, og}, elem), init,
          SmallVector<ReassociationIndices>{{0}, {1, 2}},
          ArrayRef<OpFoldResult>{map.pixels, rewriter.getIndexAttr(groups),
                                 rewriter.getIndexAttr(og)});
      auto d = [&](unsigned i) { return getAffineDimExpr(i, ctx); };
      // Loops (p, g, o, ky, kx, c).
      auto m = [&](ArrayRef<AffineExpr> r) {
        return AffineMap::get(6, 0, r, ctx);
      };
      Value grouped = structured(
          rewriter, loc, acc, {lhs, rhs},
          {m({d(0), d(3), d(4), d(1), d(5)}), m({d(3), d(4), d(5), d(1), d(2)}),
           m({d(0), d(1), d(2)})},
          {par, par, par, red, red, red},
          [](OpBuilder &b, Location l, ValueRange a) {
            return arith::AddFOp::create(
                       b, l, a[2], arith::MulFOp::create(b, l, a[0], a[1]))
                .getResult();
          });
      out = tensor::CollapseShapeOp::create(
          rewriter, loc, grouped,
          SmallVector<ReassociationIndices>{{0}, {1, 2}});
    }
    rewriter.replaceOpWithMultiple(
        op,
        {Packed{resultType, out, map.out.partitions}.flatten(rewriter, loc)});
    return success();
  }
};

struct Pool2dLowering : OpConversionPattern<Pool2dOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(Pool2dOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    MLIRContext *ctx = rewriter.getContext();
    auto resultType = cast<RaggedTensorType>(op.getType());
    ImageMap map(rewriter, loc, unpack(op.getSource(), adaptor.getSource()),
                 resultType, op.getWindowDims());
    ReduceKind kind = op.getKind();
    int64_t channels = map.in.type.getShape()[2];
    Type elem = map.in.type.getElementType();
    auto [dy, dx] = map.dims;
    Value init = linalg::FillOp::create(
                     rewriter, loc, reduceIdentity(rewriter, loc, kind, elem),
                     map.rows(rewriter, loc, {channels}, elem))
                     .getResult(0);
    // Loops (p, c, ky, kx); the kernel extents come from a shape-only input.
    Value kernel = emptyTensor(rewriter, loc, {dy.kernel, dx.kernel},
                               rewriter.getI1Type(), {});
    auto d = [&](unsigned i) { return getAffineDimExpr(i, ctx); };
    Value pooled = structured(
        rewriter, loc, init, {kernel},
        {AffineMap::get(4, 0, {d(2), d(3)}, ctx),
         AffineMap::get(4, 0, {d(0), d(1)}, ctx)},
        {par, par, red, red}, [&](OpBuilder &b, Location l, ValueRange a) {
          ImageMap::Pixel p = map.pixel(b, l);
          auto [valid, row] = map.tap(b, l, p, linalg::IndexOp::create(b, l, 2),
                                      linalg::IndexOp::create(b, l, 3));
          Value v = tensor::ExtractOp::create(
              b, l, map.in.values,
              ValueRange{row, linalg::IndexOp::create(b, l, 1)});
          return arith::SelectOp::create(
                     b, l, valid, reduceCombine(b, l, kind, a[1], v), a[1])
              .getResult();
        });
    if (kind == ReduceKind::mean) {
      bool includePad = op.getCountIncludePad();
      pooled = parallelGeneric(
          rewriter, loc, emptyLike(rewriter, loc, pooled), {pooled},
          {AffineMap::getMultiDimIdentityMap(2, ctx)},
          [&](OpBuilder &b, Location l, ValueRange a) {
            ImageMap::Pixel p = map.pixel(b, l);
            // The window clipped to the padded image,
            // then (unless counting the padding) to
            // the image.
            auto span = [&](Value o, Value extent, const WindowDim &w) {
              auto c = [&](int64_t v) { return constIndex(b, l, v); };
              Value start = arith::SubIOp::create(
                  b, l, arith::MulIOp::create(b, l, o, c(w.stride)),
                  c(w.padding));
              Value end = arith::MinSIOp::create(
                  b, l, arith::AddIOp::create(b, l, start, c(w.kernel)),
                  arith::AddIOp::create(b, l, extent, c(w.padding)));
              if (!includePad) {
                start = arith::MaxSIOp::create(b, l, start, c(0));
                end = arith::MinSIOp::create(b, l, end, extent);
              }
              return arith::SubIOp::create(b, l, end, start).getResult();
            };
            Value count = arith::MulIOp::create(b, l, span(p.y, p.height, dy),
                                                span(p.x, p.width, dx));
            Value divisor = arith::SIToFPOp::create(
                b, l, elem,
                arith::IndexCastOp::create(b, l, b.getI64Type(), count));
            return arith::DivFOp::create(b, l, a[0], divisor).getResult();
          });
    }
    rewriter.replaceOpWithMultiple(
        op, {Packed{resultType, pooled, map.out.partitions}.flatten(rewriter,
                                                                    loc)});
    return success();
  }
};

} // namespace

void mlir::ragged::compute::populateImagePatterns(
    const TypeConverter &converter, RewritePatternSet &patterns) {
  patterns.add<Conv2dLowering, Pool2dLowering>(converter,
                                               patterns.getContext());
}
