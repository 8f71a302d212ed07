// RUN: ragged-opt %s --ragged-expand-math | FileCheck %s

// f64 tanh becomes -expm1(-2|x|) / (2 + expm1(-2|x|)) with the sign of x,
// expm1 by Kahan's (u - 1) y / log(u), u = exp(y).
// CHECK-LABEL: func.func @tanh_f64
// CHECK-NOT:     math.tanh
// CHECK:         %[[A:.*]] = math.absf %arg0 : f64
// CHECK:         %[[Y:.*]] = arith.mulf %[[A]], %{{.*}} : f64
// CHECK:         %[[U:.*]] = math.exp %[[Y]] : f64
// CHECK:         math.log %[[U]] : f64
// CHECK:         arith.cmpf oeq, %[[U]]
// CHECK:         arith.cmpf olt, %arg0
// CHECK:         return
func.func @tanh_f64(%x: f64) -> f64 {
  %y = math.tanh %x : f64
  return %y : f64
}

// f64 erf: a Taylor series below 2, a continued fraction for erfc above.
// CHECK-LABEL: func.func @erf_f64
// CHECK-NOT:     math.erf
// CHECK:         math.absf %arg0 : f64
// CHECK:         math.exp
// CHECK:         arith.cmpf olt, %{{.*}}, %cst{{.*}} : f64
// CHECK:         arith.select
// CHECK:         return
func.func @erf_f64(%x: f64) -> f64 {
  %y = math.erf %x : f64
  return %y : f64
}

// Other types are left to IREE, which computes f32, f16 and bf16 math.
// CHECK-LABEL: func.func @narrow
// CHECK:         math.tanh %arg0 : f32
// CHECK:         math.erf %arg1 : f16
// CHECK:         math.tanh %arg2 : bf16
func.func @narrow(%a: f32, %b: f16, %c: bf16) -> (f32, f16, bf16) {
  %x = math.tanh %a : f32
  %y = math.erf %b : f16
  %z = math.tanh %c : bf16
  return %x, %y, %z : f32, f16, bf16
}

// f64 sin: x = k pi/2 + r (k = floor(x 2/pi + 1/2), pi/2 in three parts),
// Taylor series of sin r and cos r, the quadrant k mod 4 picks one; no
// libm call is left.
// CHECK-LABEL: func.func @sin_f64
// CHECK-NOT:     math.sin
// CHECK:         %[[K:.*]] = math.floor %{{.*}} : f64
// CHECK:         arith.mulf %[[K]]
// CHECK:         arith.subf %arg0
// CHECK:         arith.select
// CHECK:         return
func.func @sin_f64(%x: f64) -> f64 {
  %y = math.sin %x : f64
  return %y : f64
}

// f32 cos and tan are computed in f64 (IREE's f32 forms reduce the
// argument in f32) and rounded back; f16 is left to IREE.
// CHECK-LABEL: func.func @trig_f32
// CHECK-NOT:     math.cos
// CHECK-NOT:     math.tan
// CHECK:         arith.extf %arg0 : f32 to f64
// CHECK:         math.floor
// CHECK:         arith.truncf %{{.*}} : f64 to f32
// CHECK:         arith.divf %{{.*}} : f64
// CHECK:         arith.truncf %{{.*}} : f64 to f32
// CHECK:         math.sin %arg1 : f16
func.func @trig_f32(%x: f32, %h: f16) -> (f32, f32, f16) {
  %c = math.cos %x : f32
  %t = math.tan %x : f32
  %s = math.sin %h : f16
  return %c, %t, %s : f32, f32, f16
}

// f64 atan, asin, acos and atan2 reduce to atan on [0, 1] (a Taylor series
// after a shift by k pi/12) and copy the sign back; no libm call is left.
// CHECK-LABEL: func.func @inverse_trig_f64
// CHECK-NOT:     math.atan
// CHECK-NOT:     math.asin
// CHECK-NOT:     math.acos
// CHECK:         math.absf %arg0 : f64
// CHECK:         math.copysign
// CHECK:         math.sqrt
// CHECK:         math.copysign
// CHECK:         math.sqrt
// CHECK:         math.copysign
// CHECK:         return
func.func @inverse_trig_f64(%x: f64, %y: f64) -> (f64, f64, f64, f64) {
  %a = math.atan %x : f64
  %b = math.asin %x : f64
  %c = math.acos %x : f64
  %d = math.atan2 %y, %x : f64
  return %a, %b, %c, %d : f64, f64, f64, f64
}

// f64 log2 and log10: the exponent from the bits, log of the mantissa in
// [sqrt(1/2), sqrt(2)); f32 goes through f64 (IREE left log10f calls), f16
// is left to IREE.
// CHECK-LABEL: func.func @log_bases
// CHECK-NOT:     math.log2 %arg0
// CHECK:         arith.bitcast %arg0 : f64 to i64
// CHECK:         arith.shrui
// CHECK:         math.log
// CHECK:         arith.select
// CHECK-NOT:     math.log10
// CHECK:         arith.extf %arg1 : f32 to f64
// CHECK:         arith.bitcast %{{.*}} : f64 to i64
// CHECK:         arith.truncf %{{.*}} : f64 to f32
// CHECK:         math.log2 %arg2 : f16
func.func @log_bases(%x: f64, %h: f32, %q: f16) -> (f64, f64, f32, f16) {
  %a = math.log2 %x : f64
  %b = math.log10 %x : f64
  %c = math.log10 %h : f32
  %d = math.log2 %q : f16
  return %a, %b, %c, %d : f64, f64, f32, f16
}
