//===- ExpandMath.cpp - f64 math IREE's CPU backend cannot lower ----------===//
//
// IREE 3.13's CPU backend lowers f64 `math.tanh` to a libm call its embedded
// linker cannot resolve ("undefined symbol: tanh") and does not legalize f64
// `math.erf` at all; f16 and bf16 it computes in f32. Its f64 `math.exp` and
// `math.log` are accurate to an ulp or two, so both functions are expanded
// into them with arithmetic that keeps f64 precision (a few ulps), not with
// upstream's f32 polynomial approximations. Its f64 sin, cos, tan, atan,
// atan2, asin, acos, log2 and log10 become libm calls its linker cannot
// resolve, so they are expanded too. Its f32 sin, cos and tan lose precision
// in their argument reduction, and its f32 log2 and log10 can become libm
// calls too, so those are computed in f64.
//
//===----------------------------------------------------------------------===//

#include "passes/Passes.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace mlir::ragged {
#define GEN_PASS_DEF_EXPANDMATHPASS
#include "passes/Passes.h.inc"
} // namespace mlir::ragged

using namespace mlir;

namespace {

/// Builds f64 arithmetic at one location.
struct F64Builder {
  PatternRewriter &b;
  Location loc;

  Value c(double v) {
    return arith::ConstantOp::create(b, loc, b.getF64FloatAttr(v));
  }
  Value add(Value x, Value y) { return arith::AddFOp::create(b, loc, x, y); }
  Value sub(Value x, Value y) { return arith::SubFOp::create(b, loc, x, y); }
  Value mul(Value x, Value y) { return arith::MulFOp::create(b, loc, x, y); }
  Value div(Value x, Value y) { return arith::DivFOp::create(b, loc, x, y); }
  Value neg(Value x) { return arith::NegFOp::create(b, loc, x); }
  Value abs(Value x) { return math::AbsFOp::create(b, loc, x); }
  Value exp(Value x) { return math::ExpOp::create(b, loc, x); }
  Value log(Value x) { return math::LogOp::create(b, loc, x); }
  Value floor(Value x) { return math::FloorOp::create(b, loc, x); }
  Value sqrt(Value x) { return math::SqrtOp::create(b, loc, x); }
  Value copySign(Value magnitude, Value sign) {
    return math::CopySignOp::create(b, loc, magnitude, sign);
  }
  Value greater(Value x, Value y) {
    return cmp(arith::CmpFPredicate::OGT, x, y);
  }
  Value cmp(arith::CmpFPredicate p, Value x, Value y) {
    return arith::CmpFOp::create(b, loc, p, x, y);
  }
  Value select(Value c, Value x, Value y) {
    return arith::SelectOp::create(b, loc, c, x, y);
  }
  /// `r` with the sign of `x` (r >= 0): odd functions evaluated on |x|.
  Value withSignOf(Value x, Value r) {
    return select(cmp(arith::CmpFPredicate::OLT, x, c(0.0)), neg(r), r);
  }
};

/// Whether `op` computes on scalar f64: the expansions below build scalars.
bool isScalarF64(Operation *op) { return op->getResult(0).getType().isF64(); }

/// tanh(x) = sign(x) * -m / (2 + m) with m = expm1(-2|x|). expm1 is Kahan's
/// exp(y) - 1 = (u - 1) y / log(u), u = exp(y): exact where u rounds to 1
/// (it returns y) and a few ulps elsewhere, so small |x| keeps its
/// relative precision, which 1 - exp(-2|x|) would lose.
struct ExpandTanh : OpRewritePattern<math::TanhOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::TanhOp op,
                                PatternRewriter &rewriter) const override {
    if (!isScalarF64(op))
      return failure();
    F64Builder f{rewriter, op.getLoc()};
    Value x = op.getOperand();
    Value y = f.mul(f.c(-2.0), f.abs(x));
    Value u = f.exp(y);
    Value um1 = f.sub(u, f.c(1.0));
    Value kahan = f.div(f.mul(um1, y), f.log(u));
    // u = 0 (|x| large): expm1 is -1; u = 1 (|x| tiny): expm1 is y.
    Value m = f.select(f.cmp(arith::CmpFPredicate::OEQ, um1, f.c(-1.0)),
                       f.c(-1.0), kahan);
    m = f.select(f.cmp(arith::CmpFPredicate::OEQ, u, f.c(1.0)), y, m);
    Value t = f.div(f.neg(m), f.add(f.c(2.0), m));
    rewriter.replaceOp(op, f.withSignOf(x, t));
    return success();
  }
};

/// erf(x) = sign(x) * erf(|x|), with erf(a) for a < 2 from its Taylor
/// series (2/sqrt(pi)) sum_n (-1)^n a^(2n+1) / (n! (2n+1)), 30 terms by
/// Horner in a^2, and for a >= 2 as 1 - erfc(a), erfc from its continued
/// fraction exp(-a^2) / sqrt(pi) / (a + (1/2)/(a + 1/(a + (3/2)/(a + ...)))),
/// 50 levels. Both stay within 1e-15 of erf on their ranges (the series'
/// alternating terms grow to e^4 / 4 at a = 2; the fraction converges faster
/// as a grows).
struct ExpandErf : OpRewritePattern<math::ErfOp> {
  using OpRewritePattern::OpRewritePattern;
  static constexpr int kSeriesTerms = 30;
  static constexpr int kFractionLevels = 50;
  static constexpr double kSplit = 2.0;

  LogicalResult matchAndRewrite(math::ErfOp op,
                                PatternRewriter &rewriter) const override {
    if (!isScalarF64(op))
      return failure();
    F64Builder f{rewriter, op.getLoc()};
    Value x = op.getOperand();
    Value a = f.abs(x);
    Value z = f.mul(a, a);
    // Series coefficients (2/sqrt(pi)) (-1)^n / (n! (2n+1)), highest first.
    double twoOverSqrtPi = 2.0 / std::sqrt(M_PI);
    SmallVector<double> coefficients;
    double factorial = 1.0;
    for (int n = 0; n < kSeriesTerms; ++n) {
      if (n > 0)
        factorial *= n;
      double sign = n % 2 ? -1.0 : 1.0;
      coefficients.push_back(twoOverSqrtPi * sign / (factorial * (2 * n + 1)));
    }
    Value p = f.c(coefficients.back());
    for (double coefficient : llvm::reverse(ArrayRef(coefficients).drop_back()))
      p = f.add(f.mul(p, z), f.c(coefficient));
    Value series = f.mul(a, p);
    Value k = a;
    for (int n = kFractionLevels; n >= 1; --n)
      k = f.add(a, f.div(f.c(n / 2.0), k));
    Value erfc = f.div(f.exp(f.neg(z)), f.mul(f.c(std::sqrt(M_PI)), k));
    Value fraction = f.sub(f.c(1.0), erfc);
    Value r = f.select(f.cmp(arith::CmpFPredicate::OLT, a, f.c(kSplit)), series,
                       fraction);
    rewriter.replaceOp(op, f.withSignOf(x, r));
    return success();
  }
};

/// sin, cos and tan of f64 from arithmetic and `floor`: IREE lowers the f64
/// ops to libm calls its embedded linker cannot resolve ("undefined symbol:
/// sin") wherever it does not vectorise them. The argument is reduced by
/// Cody-Waite, x = k pi/2 + r with pi/2 in three parts (k below 2^20 keeps
/// r within an ulp or two: |x| up to about 1.6e6), and sin r, cos r on
/// |r| <= pi/4 come from their Taylor series to r^17 and r^18 (the first
/// term left out is below 1e-19); k mod 4 picks the quadrant, and tan is
/// their ratio. inf and NaN give NaN.
template <typename Op> struct ExpandTrig : OpRewritePattern<Op> {
  using OpRewritePattern<Op>::OpRewritePattern;
  LogicalResult matchAndRewrite(Op op,
                                PatternRewriter &rewriter) const override {
    if (!isScalarF64(op))
      return failure();
    F64Builder f{rewriter, op.getLoc()};
    Value x = op.getOperand();
    // pi/2 = kPio2Hi + kPio2Mid + kPio2Lo, the first two with trailing zero
    // bits so that k * part is exact for k < 2^20.
    constexpr double kPio2Hi = 1.57079632673412561417e+00;
    constexpr double kPio2Mid = 6.07710050630396597660e-11;
    constexpr double kPio2Lo = 2.02226624879595063154e-21;
    Value k = f.floor(f.add(f.mul(x, f.c(2.0 / M_PI)), f.c(0.5)));
    Value r =
        f.sub(f.sub(f.sub(x, f.mul(k, f.c(kPio2Hi))), f.mul(k, f.c(kPio2Mid))),
              f.mul(k, f.c(kPio2Lo)));
    Value r2 = f.mul(r, r);
    // Horner in r^2: sin r = r (1 - r^2/3! + ...), cos r = 1 - r^2/2! + ...
    auto series = [&](int first) {
      double coefficient = 1.0;
      SmallVector<double> coefficients;
      for (int n = first; n <= first + 16; n += 2) {
        coefficients.push_back(coefficient);
        coefficient = -coefficient / ((n + 1) * (n + 2));
      }
      Value p = f.c(coefficients.back());
      for (double c : llvm::reverse(ArrayRef(coefficients).drop_back()))
        p = f.add(f.mul(p, r2), f.c(c));
      return p;
    };
    Value sinR = f.mul(r, series(1));
    Value cosR = series(0);
    auto modulo = [&](Value v, double m) {
      return f.sub(v, f.mul(f.c(m), f.floor(f.div(v, f.c(m)))));
    };
    // sin(q pi/2 + r) for the quadrant q in 0..3: sin r, cos r, -sin r, -cos r;
    // cos x is sin x one quadrant on.
    auto sinOfQuadrant = [&](Value q) {
      Value odd = f.cmp(arith::CmpFPredicate::OEQ, modulo(q, 2.0), f.c(1.0));
      Value magnitude = f.select(odd, cosR, sinR);
      return f.select(f.cmp(arith::CmpFPredicate::OGE, q, f.c(2.0)),
                      f.neg(magnitude), magnitude);
    };
    Value sinX = sinOfQuadrant(modulo(k, 4.0));
    Value cosX = sinOfQuadrant(modulo(f.add(k, f.c(1.0)), 4.0));
    Value result;
    if constexpr (std::is_same_v<Op, math::SinOp>)
      result = sinX;
    else if constexpr (std::is_same_v<Op, math::CosOp>)
      result = cosX;
    else
      result = f.div(sinX, cosX);
    rewriter.replaceOp(op, result);
    return success();
  }
};

/// atan(t) for t >= 0 (NaN stays NaN): above 1 as pi/2 - atan(1/t); on
/// [0, 1] as k pi/12 + atan(r) with r = (t - c) / (1 + t c), c = tan(k pi/12)
/// for the k in 0..3 nearest in angle, so |r| <= tan(pi/24) < 0.132, and
/// atan(r) from its Taylor series to r^23 (the first term left out is below
/// 1e-20 relative).
Value atanOfNonNegative(F64Builder &f, Value t) {
  Value above = f.greater(t, f.c(1.0));
  Value u = f.select(above, f.div(f.c(1.0), t), t);
  Value k = f.c(0.0);
  for (int j = 1; j <= 5; j += 2)
    k = f.add(k, f.select(f.greater(u, f.c(std::tan(j * M_PI / 24))), f.c(1.0),
                          f.c(0.0)));
  // tan(k pi/12) for k = 0..3, picked by comparisons.
  Value c = f.c(0.0);
  for (int j = 1; j <= 3; ++j)
    c = f.select(f.cmp(arith::CmpFPredicate::OEQ, k, f.c(j)),
                 f.c(j == 3 ? 1.0 : std::tan(j * M_PI / 12)), c);
  Value r = f.div(f.sub(u, c), f.add(f.c(1.0), f.mul(u, c)));
  Value r2 = f.mul(r, r);
  constexpr int kTerms = 12; // r, r^3, ..., r^23
  Value p =
      f.c((kTerms - 1) % 2 ? -1.0 / (2 * kTerms - 1) : 1.0 / (2 * kTerms - 1));
  for (int n = kTerms - 2; n >= 0; --n)
    p = f.add(f.mul(p, r2), f.c((n % 2 ? -1.0 : 1.0) / (2 * n + 1)));
  Value angle = f.add(f.mul(k, f.c(M_PI / 12)), f.mul(r, p));
  return f.select(above, f.sub(f.c(M_PI / 2), angle), angle);
}

/// atan, asin and acos of f64 from atanOfNonNegative (IREE lowers the f64
/// ops to libm calls it cannot link, as sin): atan(x) = sign(x) atan(|x|),
/// asin(x) = atan(x / sqrt((1 - x)(1 + x))), acos(x) = 2 atan(sqrt((1 - x) /
/// (1 + x))); the factored 1 - x^2 keeps its precision near |x| = 1, and
/// |x| > 1 gives NaN through the square root.
template <typename Op> struct ExpandInverseTrig : OpRewritePattern<Op> {
  using OpRewritePattern<Op>::OpRewritePattern;
  LogicalResult matchAndRewrite(Op op,
                                PatternRewriter &rewriter) const override {
    if (!isScalarF64(op))
      return failure();
    F64Builder f{rewriter, op.getLoc()};
    Value x = op.getOperand();
    Value result;
    if constexpr (std::is_same_v<Op, math::AtanOp>) {
      result = f.copySign(atanOfNonNegative(f, f.abs(x)), x);
    } else if constexpr (std::is_same_v<Op, math::AsinOp>) {
      Value cosine = f.sqrt(f.mul(f.sub(f.c(1.0), x), f.add(f.c(1.0), x)));
      result = f.copySign(atanOfNonNegative(f, f.div(f.abs(x), cosine)), x);
    } else {
      Value half = atanOfNonNegative(
          f, f.sqrt(f.div(f.sub(f.c(1.0), x), f.add(f.c(1.0), x))));
      result = f.mul(f.c(2.0), half);
    }
    rewriter.replaceOp(op, result);
    return success();
  }
};

/// atan2(y, x) of f64: a = atan(min(|x|, |y|) / max(|x|, |y|)) (0 when both
/// are 0, pi/4 when both are infinite), then pi/2 - a where |y| > |x|, pi - a
/// where x < 0 (or is -0), and y's sign, as C's atan2.
struct ExpandAtan2 : OpRewritePattern<math::Atan2Op> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(math::Atan2Op op,
                                PatternRewriter &rewriter) const override {
    if (!isScalarF64(op))
      return failure();
    F64Builder f{rewriter, op.getLoc()};
    Value y = op.getLhs(), x = op.getRhs();
    Value ay = f.abs(y), ax = f.abs(x);
    Value steep = f.greater(ay, ax);
    Value low = f.select(steep, ax, ay), high = f.select(steep, ay, ax);
    Value t = f.div(low, high);
    t = f.select(f.cmp(arith::CmpFPredicate::OEQ, high, f.c(0.0)), f.c(0.0), t);
    Value bothInf = f.cmp(arith::CmpFPredicate::OEQ, low, f.c(INFINITY));
    t = f.select(bothInf, f.c(1.0), t);
    Value a = atanOfNonNegative(f, t);
    a = f.select(steep, f.sub(f.c(M_PI / 2), a), a);
    // x < 0, or x = -0: the sign bit of x.
    Value negativeX =
        f.cmp(arith::CmpFPredicate::OLT, f.copySign(f.c(1.0), x), f.c(0.0));
    a = f.select(negativeX, f.sub(f.c(M_PI), a), a);
    // NaN in either gives NaN (t is NaN then, but for a NaN hidden by a
    // comparison above).
    Value unordered = f.cmp(arith::CmpFPredicate::UNO, x, y);
    a = f.select(unordered, f.add(x, y), a);
    rewriter.replaceOp(op, f.copySign(a, y));
    return success();
  }
};

/// log2 and log10 of f64 (libm calls IREE cannot link): for a positive
/// normal x = m 2^e with m in [sqrt(1/2), sqrt(2)), e + log(m) / ln 2 (exact
/// at powers of 2) and e log10(2) + log(m) / ln 10; elsewhere (0,
/// subnormals, negatives, inf, NaN) log(x) divided by the base's log, which
/// gives the same specials.
template <typename Op> struct ExpandLogBase : OpRewritePattern<Op> {
  using OpRewritePattern<Op>::OpRewritePattern;
  LogicalResult matchAndRewrite(Op op,
                                PatternRewriter &rewriter) const override {
    if (!isScalarF64(op))
      return failure();
    Location loc = op.getLoc();
    F64Builder f{rewriter, loc};
    constexpr bool two = std::is_same_v<Op, math::Log2Op>;
    // Correctly rounded: 1 / ln 2, 1 / ln 10 and log10(2).
    double perNat = two ? M_LOG2E : M_LOG10E;
    double perExponent = two ? 1.0 : 0.30102999566398119521;
    Value x = op.getOperand();
    Type i64 = rewriter.getI64Type();
    auto i = [&](int64_t v) {
      return arith::ConstantOp::create(rewriter, loc,
                                       rewriter.getI64IntegerAttr(v));
    };
    Value bits = arith::BitcastOp::create(rewriter, loc, i64, x);
    Value biased = arith::AndIOp::create(
        rewriter, loc, arith::ShRUIOp::create(rewriter, loc, bits, i(52)),
        i(0x7ff));
    Value exponent = arith::SIToFPOp::create(
        rewriter, loc, rewriter.getF64Type(),
        arith::SubIOp::create(rewriter, loc, biased, i(1023)));
    Value mantissaBits = arith::OrIOp::create(
        rewriter, loc,
        arith::AndIOp::create(rewriter, loc, bits, i((int64_t(1) << 52) - 1)),
        i(int64_t(1023) << 52));
    Value m = arith::BitcastOp::create(rewriter, loc, rewriter.getF64Type(),
                                       mantissaBits);
    // m in [sqrt(1/2), sqrt(2)): just below a power of 2, log(m) is then
    // small rather than e + log(m) a cancellation.
    Value high = f.greater(m, f.c(M_SQRT2));
    m = f.select(high, f.mul(m, f.c(0.5)), m);
    exponent = f.select(high, f.add(exponent, f.c(1.0)), exponent);
    Value split =
        f.add(f.mul(exponent, f.c(perExponent)), f.mul(f.log(m), f.c(perNat)));
    Value normal = f.cmp(arith::CmpFPredicate::OGE, x, f.c(0x1p-1022));
    normal = arith::AndIOp::create(
        rewriter, loc, normal,
        f.cmp(arith::CmpFPredicate::OLT, x, f.c(INFINITY)));
    rewriter.replaceOp(op,
                       f.select(normal, split, f.mul(f.log(x), f.c(perNat))));
    return success();
  }
};

/// sin, cos and tan of f32 are computed in f64 and rounded back. IREE's f32
/// versions reduce the argument in f32: against fp64, sin and cos were off
/// by 3.8e-7 on
/// [-10, 10] and 2.3e-4 on [1000, 8192] (rotary position embeddings' range),
/// where torch's are within 3.6e-8; tan near its poles by 2% relative. So
/// are log2 and log10, which IREE left as libm calls (log10f) on a 1-D
/// dynamic extent. The f64 ops are then expanded (ExpandTrig, ExpandLogBase).
template <typename Op> struct ViaF64 : OpRewritePattern<Op> {
  using OpRewritePattern<Op>::OpRewritePattern;
  LogicalResult matchAndRewrite(Op op,
                                PatternRewriter &rewriter) const override {
    Type type = op.getType();
    // f16 and bf16: their own precision hides the error.
    if (!type.isF32())
      return failure();
    Location loc = op.getLoc();
    Value wide = arith::ExtFOp::create(rewriter, loc, rewriter.getF64Type(),
                                       op.getOperand());
    Value result = Op::create(rewriter, loc, wide);
    rewriter.replaceOpWithNewOp<arith::TruncFOp>(op, type, result);
    return success();
  }
};

struct ExpandMathPass : ragged::impl::ExpandMathPassBase<ExpandMathPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    ragged::populateExpandF64MathPatterns(patterns);
    if (failed(applyPatternsGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

void mlir::ragged::populateExpandF64MathPatterns(RewritePatternSet &patterns) {
  patterns.add<ExpandTanh, ExpandErf, ExpandTrig<math::SinOp>,
               ExpandTrig<math::CosOp>, ExpandTrig<math::TanOp>,
               ViaF64<math::SinOp>, ViaF64<math::CosOp>, ViaF64<math::TanOp>,
               ViaF64<math::Log2Op>, ViaF64<math::Log10Op>,
               ExpandInverseTrig<math::AtanOp>, ExpandInverseTrig<math::AsinOp>,
               ExpandInverseTrig<math::AcosOp>, ExpandAtan2,
               ExpandLogBase<math::Log2Op>, ExpandLogBase<math::Log10Op>>(
      patterns.getContext());
}
