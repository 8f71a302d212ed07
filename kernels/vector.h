//===- vector.h - what the CPU kernels share -------------------*- C -*-===//
//
// The kernels are freestanding C (no libc, no libm) with GCC/Clang vector
// extensions, built once per ISA: RK_VL floats per vector (16 on AVX-512, 8
// on AVX2 and NEON). This header holds their vector helpers and the calling
// convention of the entry points IREE calls.
//
//===----------------------------------------------------------------------===//

#ifndef RAGGED_KERNELS_VECTOR_H
#define RAGGED_KERNELS_VECTOR_H

#include <stddef.h>
#include <stdint.h>

#ifndef RK_VL
#define RK_VL 16
#endif

typedef float vf __attribute__((vector_size(RK_VL * 4)));
typedef float vf_u __attribute__((vector_size(RK_VL * 4), aligned(4)));
typedef int32_t vi __attribute__((vector_size(RK_VL * 4)));
typedef uint32_t vu __attribute__((vector_size(RK_VL * 4)));

#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

static inline vf load(const float *p) { return *(const vf_u *)p; }
static inline void store(float *p, vf x) { *(vf_u *)p = x; }
static inline vf splat(float x) { return x - (vf){0}; }

static inline vf vmax(vf a, vf b) { return __builtin_elementwise_max(a, b); }

static inline float hmax(vf x) { return __builtin_reduce_max(x); }

static inline float hsum(vf x) {
  float s = 0.0f;
  for (int i = 0; i < RK_VL; ++i)
    s += x[i];
  return s;
}

static inline vi iota(void) {
  vi r;
  for (int i = 0; i < RK_VL; ++i)
    r[i] = i;
  return r;
}

/// 2^x for x <= 0 (the weights' exponents: logits minus their maximum), 0
/// below -126 (and for -inf). Relative error below 2e-7.
static inline vf exp2v(vf x) {
  vi under = x < -126.0f;
  x = vmax(x, splat(-126.0f));
  const float magic = 12582912.0f; // 1.5 * 2^23: rounds to the nearest integer
  vf n = (x + magic) - magic;
  vf f = x - n; // [-0.5, 0.5]
  // 2^f = e^(f ln 2), Taylor to degree 6 (error < 2e-7 on [-0.5, 0.5]).
  vf y = f * 0.6931471805599453f;
  vf p = splat(1.0f / 720.0f);
  p = p * y + 1.0f / 120.0f;
  p = p * y + 1.0f / 24.0f;
  p = p * y + 1.0f / 6.0f;
  p = p * y + 0.5f;
  p = p * y + 1.0f;
  p = p * y + 1.0f;
  vi e = (__builtin_convertvector(n, vi) + 127) << 23;
  return (vf)((vi)(p * (vf)e) & ~under);
}

static inline float exp2s(float x) {
  vf v = exp2v(splat(x));
  return v[0];
}

/// log2(x) for finite x > 0.
static inline float log2s(float x) {
  union {
    float f;
    uint32_t u;
  } b = {x};
  int e = (int)((b.u >> 23) & 0xff) - 127;
  b.u = (b.u & 0x007fffffu) | 0x3f800000u; // mantissa in [1, 2)
  float m = b.f;
  if (m > 1.41421356f) {
    m *= 0.5f;
    e += 1;
  }
  // log(m) = 2 atanh(t), t = (m - 1) / (m + 1), |t| <= 0.172.
  float t = (m - 1.0f) / (m + 1.0f), t2 = t * t;
  float s = 1.0f / 11.0f;
  s = s * t2 + 1.0f / 9.0f;
  s = s * t2 + 1.0f / 7.0f;
  s = s * t2 + 1.0f / 5.0f;
  s = s * t2 + 1.0f / 3.0f;
  s = s * t2 + 1.0f;
  return (float)e + 2.0f * t * s * 1.4426950408889634f;
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/// The reductions of ragged.reduce and ragged.pool2d (ReduceKind's values).
enum { RK_SUM = 0, RK_MEAN = 1, RK_MAX = 2, RK_MIN = 3 };

/// One step of reduction `kind` (a sum for RK_SUM and RK_MEAN); max and min
/// propagate NaN, unlike vmax.
static inline vf combine(vf a, vf b, int64_t kind) {
  if (kind == RK_MAX)
    return __builtin_elementwise_maximum(a, b);
  if (kind == RK_MIN)
    return __builtin_elementwise_minimum(a, b);
  return a + b;
}

/// `combine` on one float.
static inline float combine1(float a, float b, int64_t kind) {
  vf r = combine(splat(a), splat(b), kind);
  return r[0];
}

/// The segment of `row` among `items` segments of `offsets`: the last b with
/// offsets[b] <= row (binary search; an empty segment is skipped by the
/// caller's walk forward).
static inline int64_t segment_of(const int64_t *offsets, int64_t items,
                                 int64_t row) {
  int64_t lo = 0, hi = items;
  while (hi - lo > 1) {
    int64_t mid = (lo + hi) / 2;
    if (offsets[mid] <= row)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/// The entry points IREE calls (hal.import.static): each memref<?xT>
/// arrives as (base, aligned, offset, size, stride).
#define MEMREF(T, name)                                                        \
  T *name##_base __attribute__((unused)), T *name##_data,                      \
      int64_t name##_offset, int64_t name##_size __attribute__((unused)),      \
      int64_t name##_stride __attribute__((unused))
#define AT(name) (name##_data + name##_offset)
#define ITEMS(offsets) (offsets##_size - 1)

/// The scalars the attention and softmax entry points take, after their
/// buffers (those of ragged.attention; the softmax reads the sizes it
/// needs), then the workgroup's x and y. Other kernels list their own.
#define SCALARS                                                                \
  int64_t rows, int64_t heads, int64_t d, int64_t ts, float scale,             \
      int64_t causal, int64_t dropout, int32_t threshold, float keep,          \
      int64_t block, int64_t h

#endif // RAGGED_KERNELS_VECTOR_H
