//===- Elementwise.cpp - per-token unary and binary ops -------------------===//
//
// Per-token ops read and write the packed values only: one all-parallel
// linalg.generic over the values, the partitions passed through.
//
//===----------------------------------------------------------------------===//

#include "passes/Conversion/RaggedToLinalg/PopulatePatterns.h"

#include "passes/Conversion/RaggedToLinalg/LoweringUtils.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/ControlFlow/IR/ControlFlowOps.h"
#include "mlir/Dialect/Linalg/IR/Linalg.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"

#include <cmath>

using namespace mlir;
using namespace mlir::ragged;
using namespace mlir::ragged::lowering;

namespace {

Value applyUnary(OpBuilder &b, Location loc, UnaryFn fn, Value x) {
  Type t = x.getType();
  switch (fn) {
  case UnaryFn::neg:
    return arith::NegFOp::create(b, loc, x);
  case UnaryFn::exp:
    return math::ExpOp::create(b, loc, x);
  case UnaryFn::log:
    return math::LogOp::create(b, loc, x);
  case UnaryFn::tanh:
    return math::TanhOp::create(b, loc, x);
  case UnaryFn::relu:
    return arith::MaximumFOp::create(b, loc, x, floatConst(b, loc, t, 0.0));
  case UnaryFn::gelu: {
    // Exact GELU: 0.5 x (1 + erf(x / sqrt 2)), as torch.nn.GELU().
    Value scaled =
        arith::MulFOp::create(b, loc, x, floatConst(b, loc, t, M_SQRT1_2));
    Value erf = math::ErfOp::create(b, loc, scaled);
    Value onePlus =
        arith::AddFOp::create(b, loc, erf, floatConst(b, loc, t, 1.0));
    Value half = arith::MulFOp::create(b, loc, x, floatConst(b, loc, t, 0.5));
    return arith::MulFOp::create(b, loc, half, onePlus);
  }
  case UnaryFn::sqrt:
    return math::SqrtOp::create(b, loc, x);
  case UnaryFn::rsqrt:
    return math::RsqrtOp::create(b, loc, x);
  case UnaryFn::abs:
    return math::AbsFOp::create(b, loc, x);
  case UnaryFn::sigmoid: {
    Value e = math::ExpOp::create(b, loc, arith::NegFOp::create(b, loc, x));
    Value den = arith::AddFOp::create(b, loc, e, floatConst(b, loc, t, 1.0));
    return arith::DivFOp::create(b, loc, floatConst(b, loc, t, 1.0), den);
  }
  }
  llvm_unreachable("unknown unary fn");
}

Value applyBinary(OpBuilder &b, Location loc, BinaryFn fn, Value x, Value y) {
  switch (fn) {
  case BinaryFn::add:
    return arith::AddFOp::create(b, loc, x, y);
  case BinaryFn::sub:
    return arith::SubFOp::create(b, loc, x, y);
  case BinaryFn::mul:
    return arith::MulFOp::create(b, loc, x, y);
  case BinaryFn::div:
    return arith::DivFOp::create(b, loc, x, y);
  case BinaryFn::max:
    return arith::MaximumFOp::create(b, loc, x, y);
  case BinaryFn::min:
    return arith::MinimumFOp::create(b, loc, x, y);
  }
  llvm_unreachable("unknown binary fn");
}

struct UnaryLowering : OpConversionPattern<UnaryOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(UnaryOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Packed x = unpack(op.getSource(), adaptor.getSource());
    unsigned rank = cast<RankedTensorType>(x.values.getType()).getRank();
    Value out =
        parallelGeneric(rewriter, loc, emptyLike(rewriter, loc, x.values),
                        {x.values}, {rewriter.getMultiDimIdentityMap(rank)},
                        [&](OpBuilder &b, Location l, ValueRange args) {
                          return applyUnary(b, l, op.getFn(), args[0]);
                        });
    rewriter.replaceOpWithMultiple(
        op, {Packed{x.type, out, x.partitions}.flatten(rewriter, loc)});
    return success();
  }
};

struct BinaryLowering : OpConversionPattern<BinaryOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult
  matchAndRewrite(BinaryOp op, OneToNOpAdaptor adaptor,
                  ConversionPatternRewriter &rewriter) const override {
    Location loc = op.getLoc();
    Packed x = unpack(op.getLhs(), adaptor.getLhs());
    unsigned rank = cast<RankedTensorType>(x.values.getType()).getRank();
    AffineMap id = rewriter.getMultiDimIdentityMap(rank);
    // A ragged rhs shares the lhs's packed layout; a dense one broadcasts
    // against the trailing dims.
    Value rhs = adaptor.getRhs().front();
    AffineMap rhsMap =
        isa<RaggedTensorType>(op.getRhs().getType())
            ? id
            : AffineMap::getMinorIdentityMap(
                  rank, cast<RankedTensorType>(rhs.getType()).getRank(),
                  rewriter.getContext());
    Value out = parallelGeneric(
        rewriter, loc, emptyLike(rewriter, loc, x.values), {x.values, rhs},
        {id, rhsMap}, [&](OpBuilder &b, Location l, ValueRange args) {
          return applyBinary(b, l, op.getFn(), args[0], args[1]);
        });
    rewriter.replaceOpWithMultiple(
        op, {Packed{x.type, out, x.partitions}.flatten(rewriter, loc)});
    return success();
  }
};

} // namespace

void mlir::ragged::compute::populateElementwisePatterns(
    const TypeConverter &converter, RewritePatternSet &patterns) {
  patterns.add<UnaryLowering, BinaryLowering>(converter, patterns.getContext());
}
