//===- attention.c - varlen flash attention on packed rows ----------------===//
//
// ragged.attention's forward on CPU: softmax(scale * Q Kᵀ [+ causal]) V per
// item and head, read straight from the packed rows and the offsets. One
// workgroup takes a block of RK_BQ packed query rows and one head; where the
// block spans items, each item's rows attend to that item's keys only, so
// every item costs its own L(b)^2 and no row is padded to a bucket. Keys
// and values stream in blocks of RK_BK with an online softmax (running
// maximum and sum, the output rescaled as the maximum grows); the scores of
// a block stay in a small stack buffer.
//
// Built freestanding (no libc, no libm) for IREE's embedded ELF executables
// with GCC/Clang vector extensions, once per ISA: the vector width RK_VL is
// 16 floats on AVX-512 and 8 on AVX2 and NEON.
//
// Layouts (f32, row-major):
//   q, v     [rows, heads, d]   packed rows of every item
//   kt       [heads, d, kt_stride]   the keys transposed, kt_stride >= rows
//            + RK_BK (the tail is read as padding, never used)
//   offsets  [items + 1] i64    item b holds rows offsets[b] .. offsets[b+1]
//   out      [rows, heads, d]
//   lse      [rows, heads]      log-sum-exp of each row's scaled logits
//
//===----------------------------------------------------------------------===//

#include <stddef.h>
#include <stdint.h>

#ifndef RK_VL
#define RK_VL 16
#endif

#define RK_BQ 32  // query rows per workgroup
#define RK_BK 64  // keys per block
#define RK_MAX_D 256

typedef float vf __attribute__((vector_size(RK_VL * 4)));
typedef float vf_u __attribute__((vector_size(RK_VL * 4), aligned(4)));
typedef int32_t vi __attribute__((vector_size(RK_VL * 4)));
typedef uint32_t vu __attribute__((vector_size(RK_VL * 4)));

#if RK_VL == 16
#define RK_QK_ROWS 4 // scores tile: rows x vectors of keys
#define RK_QK_VECS 4
#define RK_PV_ACC 16 // output tile: accumulators (rows x vectors of d)
#else
#define RK_QK_ROWS 4
#define RK_QK_VECS 2
#define RK_PV_ACC 12
#endif
#define RK_NV (RK_BK / RK_VL)

static inline vf load(const float *p) { return *(const vf_u *)p; }
static inline void store(float *p, vf x) { *(vf_u *)p = x; }
static inline vf splat(float x) { return (vf){0} + x; }

static inline vf vmax(vf a, vf b) { return __builtin_elementwise_max(a, b); }

static inline float hmax(vf x) {
  float m = x[0];
  for (int i = 1; i < RK_VL; ++i)
    m = x[i] > m ? x[i] : m;
  return m;
}

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

/// 2^x, 0 below -126 (and for -inf). Relative error below 1e-7.
static inline vf exp2v(vf x) {
  vi under = x < -126.0f;
  x = __builtin_elementwise_min(vmax(x, splat(-126.0f)), splat(127.0f));
  const float magic = 12582912.0f; // 1.5 * 2^23: rounds to the nearest integer
  vf t = x + magic;
  vf n = t - magic;
  vf f = x - n; // [-0.5, 0.5]
  // 2^f = e^(f ln 2), Taylor to degree 7 (error < 1e-8 on [-0.5, 0.5]).
  const float l = 0.6931471805599453f;
  vf y = f * l;
  vf p = splat(1.0f / 5040.0f);
  p = p * y + 1.0f / 720.0f;
  p = p * y + 1.0f / 120.0f;
  p = p * y + 1.0f / 24.0f;
  p = p * y + 1.0f / 6.0f;
  p = p * y + 0.5f;
  p = p * y + 1.0f;
  p = p * y + 1.0f;
  vi e = (__builtin_convertvector(n, vi) + 127) << 23;
  vf s = (vf)e;
  vf r = p * s;
  return (vf)((vi)r & ~under);
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

/// MurmurHash3's 32-bit finaliser.
static inline vu mix(vu x) {
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return x;
}

/// What one workgroup's attention shares.
struct job {
  const float *q, *kt, *v;
  float *out, *lse;
  int64_t heads, d, rs, kt_stride;
  int64_t h;
  float scale2; // scale * log2(e): logits in base 2
  int causal;
  // Dropout (where `dropout`): kept where the hash >= threshold, kept
  // weights times `keep`.
  int dropout;
  uint32_t threshold, seed_lo, seed_hi;
  float keep;
};

/// Scores of query rows [i0, i0 + RK_QK_ROWS * rows4) (positions in the
/// item starting at packed row `start`, of length `len`) against keys
/// [j0, j0 + RK_BK): s[r][j], base-2 logits; rows past `last` repeat it.
static void scores(const struct job *J, int64_t start, int64_t i0,
                   int64_t last, int64_t tiles, int64_t j0,
                   float s[RK_BQ][RK_BK]) {
  const int64_t d = J->d;
  const float *kt = J->kt + J->h * d * J->kt_stride + start + j0;
  for (int64_t t = 0; t < tiles; ++t) {
    const float *qr[RK_QK_ROWS];
    for (int r = 0; r < RK_QK_ROWS; ++r) {
      int64_t i = i0 + t * RK_QK_ROWS + r;
      i = i < last ? i : last;
      qr[r] = J->q + (start + i) * J->rs + J->h * d;
    }
    for (int jv = 0; jv < RK_NV; jv += RK_QK_VECS) {
      vf acc[RK_QK_ROWS][RK_QK_VECS];
      for (int r = 0; r < RK_QK_ROWS; ++r)
        for (int k = 0; k < RK_QK_VECS; ++k)
          acc[r][k] = splat(0.0f);
      const float *kc = kt + jv * RK_VL;
      for (int64_t c = 0; c < d; ++c, kc += J->kt_stride) {
        vf kv[RK_QK_VECS];
        for (int k = 0; k < RK_QK_VECS; ++k)
          kv[k] = load(kc + k * RK_VL);
        for (int r = 0; r < RK_QK_ROWS; ++r) {
          vf qb = splat(qr[r][c]);
          for (int k = 0; k < RK_QK_VECS; ++k)
            acc[r][k] += qb * kv[k];
        }
      }
      for (int r = 0; r < RK_QK_ROWS; ++r)
        for (int k = 0; k < RK_QK_VECS; ++k)
          store(&s[t * RK_QK_ROWS + r][(jv + k) * RK_VL],
                acc[r][k] * J->scale2);
    }
  }
}

/// o[r][c0 ..] += sum_j p[r][j] v[j][c0 ..] for a tile of ROWS rows and
/// VECS vectors of columns.
#define PV_TILE(ROWS, VECS)                                                    \
  static inline void pv_##ROWS##_##VECS(const float *p0, const float *vrow,  \
                                        int64_t rs, int64_t nk, float *o0,    \
                                        int64_t ostride) {                    \
    vf acc[ROWS][VECS];                                                       \
    for (int r = 0; r < ROWS; ++r)                                            \
      for (int k = 0; k < VECS; ++k)                                          \
        acc[r][k] = load(o0 + r * ostride + k * RK_VL);                       \
    for (int64_t j = 0; j < nk; ++j, vrow += rs) {                            \
      vf vv[VECS];                                                            \
      for (int k = 0; k < VECS; ++k)                                          \
        vv[k] = load(vrow + k * RK_VL);                                       \
      for (int r = 0; r < ROWS; ++r) {                                        \
        vf pb = splat(p0[r * RK_BK + j]);                                     \
        for (int k = 0; k < VECS; ++k)                                        \
          acc[r][k] += pb * vv[k];                                            \
      }                                                                       \
    }                                                                         \
    for (int r = 0; r < ROWS; ++r)                                            \
      for (int k = 0; k < VECS; ++k)                                          \
        store(o0 + r * ostride + k * RK_VL, acc[r][k]);                       \
  }

// Row counts divide 8, so rows padded to 8 cover every tile.
#if RK_VL == 16
PV_TILE(4, 4)
PV_TILE(8, 2)
#define PV4 pv_4_4
#define PV4_ROWS 4
#define PV2 pv_8_2
#define PV2_ROWS 8
#else
PV_TILE(2, 4)
PV_TILE(4, 2)
#define PV4 pv_2_4
#define PV4_ROWS 2
#define PV2 pv_4_2
#define PV2_ROWS 4
#endif
PV_TILE(8, 1)

/// o[0 .. rows) += p v over nk keys of the value rows starting at `vrow`,
/// all d columns; rows are padded to the tiles (o and p have RK_BQ rows).
static void apply(const struct job *J, const float p[RK_BQ][RK_BK],
                  const float *vrow, int64_t nk, int64_t rows,
                  float o[RK_BQ][RK_MAX_D]) {
  const int64_t d = J->d;
  int64_t c = 0;
  for (; c + 4 * RK_VL <= d; c += 4 * RK_VL)
    for (int64_t r = 0; r < rows; r += PV4_ROWS)
      PV4(&p[r][0], vrow + c, J->rs, nk, &o[r][c], RK_MAX_D);
  for (; c + 2 * RK_VL <= d; c += 2 * RK_VL)
    for (int64_t r = 0; r < rows; r += PV2_ROWS)
      PV2(&p[r][0], vrow + c, J->rs, nk, &o[r][c], RK_MAX_D);
  for (; c + RK_VL <= d; c += RK_VL)
    for (int64_t r = 0; r < rows; r += 8)
      pv_8_1(&p[r][0], vrow + c, J->rs, nk, &o[r][c], RK_MAX_D);
  for (; c < d; ++c)
    for (int64_t r = 0; r < rows; ++r) {
      float a = o[r][c];
      for (int64_t j = 0; j < nk; ++j)
        a += p[r][j] * vrow[j * J->rs + c];
      o[r][c] = a;
    }
}

static inline int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

/// Attention of query rows [i0, i1) of item `item` (packed rows [start,
/// start + len)).
static void attend(const struct job *J, int64_t item, int64_t start,
                   int64_t len, int64_t i0, int64_t i1) {
  float s[RK_BQ][RK_BK] __attribute__((aligned(64)));
  float o[RK_BQ][RK_MAX_D] __attribute__((aligned(64)));
  float mx[RK_BQ], sum[RK_BQ];
  const int64_t m = i1 - i0, d = J->d;
  // Rows are computed in whole tiles (rows past m repeat the last one and
  // are never stored); 8 rows cover every tile.
  const int64_t rows = round_up(m, 8);
  const int64_t tiles = round_up(m, RK_QK_ROWS) / RK_QK_ROWS;
  for (int64_t r = 0; r < rows; ++r) {
    mx[r] = -__builtin_inff();
    sum[r] = 0.0f;
    for (int64_t c = 0; c < d; ++c)
      o[r][c] = 0.0f;
    for (int64_t j = 0; j < RK_BK; ++j)
      s[r][j] = 0.0f;
  }
  const int64_t kend = J->causal ? i1 : len;
  const vi lane = iota();
  for (int64_t j0 = 0; j0 < kend; j0 += RK_BK) {
    const int64_t nk = kend - j0 < RK_BK ? kend - j0 : RK_BK;
    scores(J, start, i0, i1 - 1, tiles, j0, s);
    for (int64_t r = 0; r < m; ++r) {
      // Keys past the block or (causal) after the query are masked.
      int64_t limit = nk;
      if (J->causal) {
        int64_t after = i0 + r + 1 - j0;
        limit = after < limit ? after : limit;
      }
      vf rowmax = splat(-__builtin_inff());
      for (int jv = 0; jv < RK_NV; ++jv) {
        vi valid = (lane + jv * RK_VL) < (int32_t)limit;
        vf x = load(&s[r][jv * RK_VL]);
        x = (vf)(((vi)x & valid) | ((vi)splat(-__builtin_inff()) & ~valid));
        store(&s[r][jv * RK_VL], x);
        rowmax = vmax(rowmax, x);
      }
      float mnew = hmax(rowmax);
      mnew = mnew > mx[r] ? mnew : mx[r];
      float alpha = exp2s(mx[r] - mnew);
      mx[r] = mnew;
      vf rowsum = splat(0.0f);
      uint32_t base = 0;
      if (J->dropout)
        base = 0x9E3779B1u * (uint32_t)item + 0x85EBCA77u * (uint32_t)J->h +
               0xC2B2AE3Du * (uint32_t)(i0 + r);
      for (int jv = 0; jv < RK_NV; ++jv) {
        vf p = exp2v(load(&s[r][jv * RK_VL]) - mnew);
        rowsum += p;
        if (J->dropout) {
          vu j = (vu)(lane + (int32_t)(j0 + jv * RK_VL));
          vu u = mix(mix((base + 0x27D4EB2Fu * j) ^ J->seed_lo) ^ J->seed_hi);
          vi kept = (vi)(u >= J->threshold);
          p = (vf)((vi)(p * J->keep) & kept);
        }
        store(&s[r][jv * RK_VL], p);
      }
      sum[r] = sum[r] * alpha + hsum(rowsum);
      if (alpha != 1.0f)
        for (int64_t c = 0; c < d; ++c)
          o[r][c] *= alpha;
    }
    apply(J, (const float(*)[RK_BK])s,
          J->v + (start + j0) * J->rs + J->h * d, nk, rows, o);
  }
  for (int64_t r = 0; r < m; ++r) {
    float inv = 1.0f / sum[r];
    float *dst = J->out + (start + i0 + r) * J->rs + J->h * d;
    for (int64_t c = 0; c < d; ++c)
      dst[c] = o[r][c] * inv;
    J->lse[(start + i0 + r) * J->heads + J->h] =
        (mx[r] + log2s(sum[r])) * 0.6931471805599453f;
  }
}

/// The first item whose rows reach past `row`.
static int64_t item_of(const int64_t *offsets, int64_t items, int64_t row) {
  int64_t lo = 0, hi = items; // offsets[lo] <= row < offsets[hi]
  while (hi - lo > 1) {
    int64_t mid = (lo + hi) / 2;
    if (offsets[mid] <= row)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/// One workgroup: packed query rows [block * RK_BQ, ...) of head `h`.
void ragged_attention_block(const float *q, const float *kt, const float *v,
                            const int64_t *offsets, int64_t items,
                            const int64_t *seed, float *out, float *lse,
                            int64_t rows, int64_t heads, int64_t d,
                            int64_t kt_stride, float scale, int64_t causal,
                            int64_t dropout, uint32_t threshold, float keep,
                            int64_t block, int64_t h) {
  struct job J = {q,         kt,
                  v,         out,
                  lse,       heads,
                  d,         heads * d,
                  kt_stride, h,
                  scale * 1.4426950408889634f,
                  (int)causal,
                  (int)dropout,
                  threshold,
                  0,
                  0,
                  keep};
  if (dropout) {
    J.seed_lo = (uint32_t)(uint64_t)seed[0];
    J.seed_hi = (uint32_t)((uint64_t)seed[0] >> 32);
  }
  int64_t r0 = block * RK_BQ, r1 = r0 + RK_BQ < rows ? r0 + RK_BQ : rows;
  for (int64_t b = item_of(offsets, items, r0); r0 < r1 && b < items; ++b) {
    int64_t start = offsets[b], end = offsets[b + 1];
    int64_t stop = end < r1 ? end : r1;
    if (stop > r0)
      attend(&J, b, start, end - start, r0 - start, stop - start);
    r0 = stop > r0 ? stop : r0;
  }
}

/// The entry point IREE calls (hal.import.static): each memref<?xT> arrives
/// as (base, aligned, offset, size, stride).
#define MEMREF(T, name)                                                        \
  T *name##_base, T *name, int64_t name##_offset, int64_t name##_size,        \
      int64_t name##_stride
void ragged_attention_fwd(MEMREF(const float, q), MEMREF(const float, kt),
                          MEMREF(const float, v), MEMREF(const int64_t, offsets),
                          MEMREF(const int64_t, seed), MEMREF(float, out),
                          MEMREF(float, lse), int64_t rows, int64_t heads,
                          int64_t d, int64_t key_stride, float scale,
                          int64_t causal, int64_t dropout, int32_t threshold,
                          float keep, int64_t block, int64_t h) {
  (void)q_base, (void)kt_base, (void)v_base, (void)offsets_base,
      (void)seed_base, (void)out_base, (void)lse_base;
  (void)q_size, (void)kt_size, (void)v_size, (void)seed_size, (void)out_size,
      (void)lse_size;
  (void)q_stride, (void)kt_stride, (void)v_stride, (void)offsets_stride,
      (void)seed_stride, (void)out_stride, (void)lse_stride;
  ragged_attention_block(q + q_offset, kt + kt_offset, v + v_offset,
                         offsets + offsets_offset, offsets_size - 1,
                         seed + seed_offset, out + out_offset,
                         lse + lse_offset, rows, heads, d, key_stride, scale,
                         causal, dropout, (uint32_t)threshold, keep, block,
                         h);
}
