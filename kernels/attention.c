//===- attention.c - varlen flash attention on packed rows ----------------===//
//
// ragged.attention on CPU, forward and gradients: softmax(scale * Q Kᵀ
// [+ causal]) V per item and head, read straight from the packed rows and
// the offsets. A forward workgroup takes a block of RK_BQ packed rows; where
// the block spans items, each item's rows meet that item's rows only, so
// every item costs its own L(b)^2 and no row is padded to a bucket. The other side streams in blocks of RK_BK rows; the products of a
// block stay in small stack buffers.
//
// - forward: per query row, an online softmax over the key blocks (running
//   maximum and sum, the output rescaled as the maximum grows); also the
//   lse of each row.
// - backward: per item and head (a workgroup owns the item's rows at that
//   head), key blocks outer and query blocks inner: the weights recomputed
//   from the lse, dP = dO Vᵀ, dS = P o (kept dP - D) with D = rowsum(dO o
//   O), dV += (kept P)ᵀ dO, dK += scale dSᵀ Q, dQ += scale dS K.
// Dropout follows ragged.attention's hash of (seed, item, head, query, key).
//
// Built freestanding for IREE's embedded ELF executables, once per ISA
// (vector.h).
//
// Layouts (f32, row-major; ts: the stride of the transposed ones, at least
// rows + RK_BK: the tail is read as padding and never used; a stride off
// multiples of 4 KiB keeps a block's d rows out of each other's cache sets):
//   q, k, v, dout, out, dq, dk, dv   [rows, heads, d]  packed rows
//   qt, kt, dot                      [heads, d, ts]    transposed
//   lse                              [rows, heads]     log-sum-exp of each
//                                                      row's scaled logits
//   lset, dt                         [heads, ts]       lse and D transposed
//   offsets  [items + 1] i64   item b holds rows offsets[b] .. offsets[b+1]
//
//===----------------------------------------------------------------------===//

#include "vector.h"

#define RK_BQ 32  // query rows per workgroup
#define RK_BK 64  // keys per block
#define RK_MAX_D 256     // head size, forward
#define RK_MAX_BWD_D 128 // head size, gradients

#if RK_VL == 16
#define RK_QK_ROWS 4 // scores tile: rows x vectors of keys
#define RK_QK_VECS 4
#else
#define RK_QK_ROWS 4
#define RK_QK_VECS 2
#endif
#define RK_NV (RK_BK / RK_VL)
// A block's products fill whole tiles of RK_QK_ROWS rows within RK_BQ.
_Static_assert(RK_BQ % RK_QK_ROWS == 0, "score tiles must divide RK_BQ");

/// MurmurHash3's 32-bit finaliser.
static inline vu mix(vu x) {
  x ^= x >> 16;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  x ^= x >> 16;
  return x;
}

/// What one workgroup shares. Packed rows are [rows, heads, d] (row stride
/// rs); transposed operands are [heads, d, ts] and per-row statistics
/// [heads, ts] (ts: their row stride, past rows + RK_BK).
struct job {
  const float *q, *k, *v, *dout;   // packed rows
  const float *qt, *kt, *dot;      // transposed
  const float *lset, *dt;          // lse and rowsum(dO o O), [heads, ts]
  float *out, *lse, *dq, *dk, *dv; // results ([rows, heads] for lse)
  int64_t heads, d, rs, ts, h;
  float scale, scale2; // scale, and scale * log2(e): logits in base 2
  int causal;
  // Dropout (where `dropout`): kept where the hash >= threshold, kept
  // weights times `keep`.
  int dropout;
  uint32_t threshold, seed_lo, seed_hi;
  float keep;
};

// ragged.attention's dropout hash: c = A item + B head + C query + D key.
#define HASH_ITEM 0x9E3779B1u
#define HASH_HEAD 0x85EBCA77u
#define HASH_QUERY 0xC2B2AE3Du
#define HASH_KEY 0x27D4EB2Fu

/// The dropout factors (`keep` or 0) of RK_VL weights whose hash inputs are
/// `base` plus `mult` times first, first + 1, ...
static inline vf kept(const struct job *J, uint32_t base, uint32_t mult,
                      int64_t first) {
  vu idx = (vu)(iota() + (int32_t)first);
  vu u = mix(mix((base + mult * idx) ^ J->seed_lo) ^ J->seed_hi);
  return (vf)((vi)splat(J->keep) & (vi)(u >= J->threshold));
}

/// The transposed operand `t` at head h, column c = 0, position `at`.
static inline const float *column(const struct job *J, const float *t,
                                  int64_t at) {
  return t + J->h * J->d * J->ts + at;
}

/// The packed row `row` of `x` at head h.
static inline const float *row_of(const struct job *J, const float *x,
                                  int64_t row) {
  return x + row * J->rs + J->h * J->d;
}

/// s[r][jv * RK_VL ..] for the VECS vectors from `jv`, rows of `tiles`
/// tiles (see products).
#define QK_TILE(NAME, VECS)                                                    \
  static inline void NAME(const struct job *J, const float *ar[],            \
                               const float *bt, int jv, int64_t t,            \
                               float scale, float s[RK_BQ][RK_BK]) {       \
    vf acc[RK_QK_ROWS][VECS];                                                 \
    for (int r = 0; r < RK_QK_ROWS; ++r)                                      \
      for (int k = 0; k < VECS; ++k)                                          \
        acc[r][k] = splat(0.0f);                                              \
    const float *bc = bt + jv * RK_VL;                                        \
    for (int64_t c = 0; c < J->d; ++c, bc += J->ts) {                         \
      vf bv[VECS];                                                            \
      for (int k = 0; k < VECS; ++k)                                          \
        bv[k] = load(bc + k * RK_VL);                                         \
      for (int r = 0; r < RK_QK_ROWS; ++r) {                                  \
        vf ab = splat(ar[r][c]);                                              \
        for (int k = 0; k < VECS; ++k)                                        \
          acc[r][k] += ab * bv[k];                                            \
      }                                                                       \
    }                                                                         \
    for (int r = 0; r < RK_QK_ROWS; ++r)                                      \
      for (int k = 0; k < VECS; ++k)                                          \
        store(&s[t * RK_QK_ROWS + r][(jv + k) * RK_VL], acc[r][k] * scale);   \
  }
QK_TILE(qk_wide, RK_QK_VECS)
QK_TILE(qk_1, 1)

/// s[r][j] = scale * sum_c a_r[c] bt[c * J->ts + j] for the first nv
/// vectors of j and the rows of `tiles` tiles, a_r the packed row `first +
/// min(r, last)` of `a`. Only the vectors a block needs are computed: a
/// short item pays for its keys, not for RK_BK.
static void products(const struct job *J, const float *a, int64_t first,
                     int64_t last, int64_t tiles, const float *bt, int nv,
                     float scale, float s[RK_BQ][RK_BK]) {
  for (int64_t t = 0; t < tiles; ++t) {
    const float *ar[RK_QK_ROWS];
    for (int r = 0; r < RK_QK_ROWS; ++r) {
      int64_t i = t * RK_QK_ROWS + r;
      ar[r] = row_of(J, a, first + (i < last ? i : last));
    }
    int jv = 0;
    for (; jv + RK_QK_VECS <= nv; jv += RK_QK_VECS)
      qk_wide(J, ar, bt, jv, t, scale, s);
    for (; jv < nv; ++jv)
      qk_1(J, ar, bt, jv, t, scale, s);
  }
}

/// o[r][c0 ..] += sum_j w(r, j) b_j[c0 ..] for a tile of ROWS rows and
/// VECS vectors of columns, the weight w(r, j) at p0[r * pr + j * pj] (a
/// block row-major, or transposed).
#define PV_TILE(ROWS, VECS)                                                    \
  static inline void pv_##ROWS##_##VECS(                                      \
      const float *p0, int64_t pr, int64_t pj, const float *brow, int64_t rs, \
      int64_t nk, float *o0, int64_t ostride) {                               \
    vf acc[ROWS][VECS];                                                       \
    for (int r = 0; r < ROWS; ++r)                                            \
      for (int k = 0; k < VECS; ++k)                                          \
        acc[r][k] = load(o0 + r * ostride + k * RK_VL);                       \
    for (int64_t j = 0; j < nk; ++j, brow += rs) {                            \
      vf bv[VECS];                                                            \
      for (int k = 0; k < VECS; ++k)                                          \
        bv[k] = load(brow + k * RK_VL);                                       \
      for (int r = 0; r < ROWS; ++r) {                                        \
        vf pb = splat(p0[r * pr + j * pj]);                                   \
        for (int k = 0; k < VECS; ++k)                                        \
          acc[r][k] += pb * bv[k];                                            \
      }                                                                       \
    }                                                                         \
    for (int r = 0; r < ROWS; ++r)                                            \
      for (int k = 0; k < VECS; ++k)                                          \
        store(o0 + r * ostride + k * RK_VL, acc[r][k]);                       \
  }

// Wide tiles, then one row at a time for the rows they leave.
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
PV_TILE(1, 4)
PV_TILE(1, 2)
PV_TILE(1, 1)

/// Runs TILE over rows [0, rows) in tiles of ROWS and the rest one row at a
/// time with ONE, on the columns at c.
#define PV_ROWS(TILE, ROWS, ONE)                                               \
  do {                                                                        \
    int64_t r = 0;                                                            \
    for (; r + ROWS <= rows; r += ROWS)                                       \
      TILE(p + r * pr, pr, pj, brow + c, rs, nk, o + r * ostride + c,         \
           ostride);                                                          \
    for (; r < rows; ++r)                                                     \
      ONE(p + r * pr, pr, pj, brow + c, rs, nk, o + r * ostride + c,          \
          ostride);                                                           \
  } while (0)

/// o[r][:d] += sum_{j < nk} w(r, j) b_j for rows r < rows, b_j the packed
/// row `first + j` of `b`, w(r, j) at p[r * pr + j * pj]; o's rows are
/// `ostride` apart. Exactly `rows` rows of o are read and written.
static void apply(const struct job *J, const float *p, int64_t pr,
                  int64_t pj, const float *b, int64_t first, int64_t nk,
                  int64_t rows, float *o, int64_t ostride) {
  const int64_t d = J->d, rs = J->rs;
  const float *brow = row_of(J, b, first);
  int64_t c = 0;
  for (; c + 4 * RK_VL <= d; c += 4 * RK_VL)
    PV_ROWS(PV4, PV4_ROWS, pv_1_4);
  for (; c + 2 * RK_VL <= d; c += 2 * RK_VL)
    PV_ROWS(PV2, PV2_ROWS, pv_1_2);
  for (; c + RK_VL <= d; c += RK_VL)
    PV_ROWS(pv_8_1, 8, pv_1_1);
  for (; c < d; ++c)
    for (int64_t r = 0; r < rows; ++r) {
      float a = o[r * ostride + c];
      for (int64_t j = 0; j < nk; ++j)
        a += p[r * pr + j * pj] * brow[j * rs + c];
      o[r * ostride + c] = a;
    }
}

/// apply() with the weights of a row-major block [RK_BQ][RK_BK].
static inline void apply_rows(const struct job *J,
                              const float p[RK_BQ][RK_BK], const float *b,
                              int64_t first, int64_t nk, int64_t rows,
                              float *o, int64_t ostride) {
  apply(J, &p[0][0], RK_BK, 1, b, first, nk, rows, o, ostride);
}

static inline int64_t round_up(int64_t x, int64_t m) {
  return (x + m - 1) / m * m;
}

/// Lanes [0, limit) of a vector holding positions jv * RK_VL + lane.
static inline vi below(int jv, int64_t limit) {
  return (iota() + jv * RK_VL) < (int32_t)limit;
}

/// The forward of query rows [i0, i1) of item `item` (packed rows [start,
/// start + len)): online softmax over blocks of RK_BK keys.
static void forward(const struct job *J, int64_t item, int64_t start,
                    int64_t len, int64_t i0, int64_t i1) {
  float s[RK_BQ][RK_BK] __attribute__((aligned(64)));
  float o[RK_BQ][RK_MAX_D] __attribute__((aligned(64)));
  // Per row: the running maximum (base-2 logits) and the running sums of
  // the weights, kept as vectors (lanes summed once, at the end).
  float mx[RK_BQ];
  vf sum[RK_BQ];
  const int64_t m = i1 - i0, d = J->d;
  // Scores are computed in whole tiles (rows past m repeat the last one and
  // are never read).
  const int64_t tiles = round_up(m, RK_QK_ROWS) / RK_QK_ROWS;
  for (int64_t r = 0; r < m; ++r) {
    mx[r] = -__builtin_inff();
    sum[r] = splat(0.0f);
    for (int64_t c = 0; c < d; ++c)
      o[r][c] = 0.0f;
  }
  const int64_t kend = J->causal ? i1 : len;
  const vi minus_inf = (vi)splat(-__builtin_inff());
  for (int64_t j0 = 0; j0 < kend; j0 += RK_BK) {
    const int64_t nk = min64(kend - j0, RK_BK);
    const int nv = (int)((nk + RK_VL - 1) / RK_VL);
    products(J, J->q, start + i0, m - 1, tiles, column(J, J->kt, start + j0),
             nv, J->scale2, s);
    for (int64_t r = 0; r < m; ++r) {
      // Keys past the block or (causal) after the query are masked.
      const int64_t limit = J->causal ? min64(nk, i0 + r + 1 - j0) : nk;
      vf x[RK_NV];
      vf rowmax = splat(-__builtin_inff());
      for (int jv = 0; jv < RK_NV; ++jv) {
        if (jv >= nv)
          break;
        x[jv] = load(&s[r][jv * RK_VL]);
        if (limit < nv * RK_VL) {
          vi valid = below(jv, limit);
          x[jv] = (vf)(((vi)x[jv] & valid) | (minus_inf & ~valid));
        }
        rowmax = vmax(rowmax, x[jv]);
      }
      float mnew = hmax(rowmax), alpha = 1.0f;
      if (mnew > mx[r]) {
        alpha = exp2s(mx[r] - mnew);
        mx[r] = mnew;
      } else {
        mnew = mx[r];
      }
      vf acc = sum[r] * alpha;
      const uint32_t base = HASH_ITEM * (uint32_t)item +
                            HASH_HEAD * (uint32_t)J->h +
                            HASH_QUERY * (uint32_t)(i0 + r);
      for (int jv = 0; jv < RK_NV; ++jv) {
        if (jv >= nv)
          break;
        vf p = exp2v(x[jv] - mnew);
        acc += p;
        if (J->dropout)
          p *= kept(J, base, HASH_KEY, j0 + jv * RK_VL);
        store(&s[r][jv * RK_VL], p);
      }
      sum[r] = acc;
      if (alpha != 1.0f)
        for (int64_t c = 0; c < d; ++c)
          o[r][c] *= alpha;
    }
    apply_rows(J, (const float(*)[RK_BK])s, J->v, start + j0, nk, m, &o[0][0],
               RK_MAX_D);
  }
  for (int64_t r = 0; r < m; ++r) {
    float total = hsum(sum[r]), inv = 1.0f / total;
    float *dst = J->out + (start + i0 + r) * J->rs + J->h * d;
    for (int64_t c = 0; c < d; ++c)
      dst[c] = o[r][c] * inv;
    J->lse[(start + i0 + r) * J->heads + J->h] =
        (mx[r] + log2s(total)) * LN2;
  }
}

/// The gradients of item `item` (packed rows [start, start + len)) at head
/// J->h, from the lse: per block of RK_BQ key rows (outer) and block of
/// RK_BK query rows (inner), the transposed weights Pᵀ, dPᵀ = V dOᵀ and dSᵀ
/// = Pᵀ o (kept dPᵀ - D); dV += (kept Pᵀ) dO and dK += dSᵀ Q for the key
/// block, dQ += dS K straight into dq, whose rows of this item and head
/// this unit owns (no atomics, and five products per pair of blocks, as
/// FlashAttention-2's backward).
static void backward(const struct job *J, int64_t item, int64_t start,
                     int64_t len) {
  float s[RK_BQ][RK_BK] __attribute__((aligned(64)));
  float dp[RK_BQ][RK_BK] __attribute__((aligned(64)));
  float dk[RK_BQ][RK_MAX_BWD_D] __attribute__((aligned(64)));
  float dv[RK_BQ][RK_MAX_BWD_D] __attribute__((aligned(64)));
  const int64_t d = J->d, rs = J->rs;
  float *dq = J->dq + start * rs + J->h * d;
  for (int64_t r = 0; r < len; ++r)
    for (int64_t c = 0; c < d; ++c)
      dq[r * rs + c] = 0.0f;
  const float *lse = J->lset + J->h * J->ts, *dd = J->dt + J->h * J->ts;
  for (int64_t j0 = 0; j0 < len; j0 += RK_BQ) {
    const int64_t m = min64(len - j0, RK_BQ);
    const int64_t tiles = round_up(m, RK_QK_ROWS) / RK_QK_ROWS;
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < d; ++c)
        dk[r][c] = dv[r][c] = 0.0f;
    // Causal: key j is seen by queries j and after.
    for (int64_t i0 = J->causal ? j0 : 0; i0 < len; i0 += RK_BK) {
      const int64_t nq = min64(len - i0, RK_BK);
      const int nv = (int)((nq + RK_VL - 1) / RK_VL);
      products(J, J->k, start + j0, m - 1, tiles,
               column(J, J->qt, start + i0), nv, J->scale2, s);
      products(J, J->v, start + j0, m - 1, tiles,
               column(J, J->dot, start + i0), nv, 1.0f, dp);
      vf l2[RK_NV], dr[RK_NV];
      for (int iv = 0; iv < nv; ++iv) {
        l2[iv] = load(lse + start + i0 + iv * RK_VL) * LOG2E;
        dr[iv] = load(dd + start + i0 + iv * RK_VL);
      }
      for (int64_t r = 0; r < m; ++r) {
        const int64_t j = j0 + r;
        const uint32_t base = HASH_ITEM * (uint32_t)item +
                              HASH_HEAD * (uint32_t)J->h +
                              HASH_KEY * (uint32_t)j;
        for (int iv = 0; iv < nv; ++iv) {
          vf p = exp2v(load(&s[r][iv * RK_VL]) - l2[iv]);
          vi valid = below(iv, nq);
          if (J->causal) // query i0 + lane >= key j
            valid &= (iota() + (int32_t)(i0 + iv * RK_VL)) >= (int32_t)j;
          p = (vf)((vi)p & valid);
          vf g = load(&dp[r][iv * RK_VL]), f = splat(1.0f);
          if (J->dropout)
            f = kept(J, base, HASH_QUERY, i0 + iv * RK_VL);
          store(&s[r][iv * RK_VL], p * f);
          store(&dp[r][iv * RK_VL], p * (g * f - dr[iv]));
        }
      }
      apply_rows(J, (const float(*)[RK_BK])s, J->dout, start + i0, nq, m,
                 &dv[0][0], RK_MAX_BWD_D);
      apply_rows(J, (const float(*)[RK_BK])dp, J->q, start + i0, nq, m,
                 &dk[0][0], RK_MAX_BWD_D);
      // dQ rows i0 .. i0 + nq: dS is dSᵀ read transposed.
      apply(J, &dp[0][0], 1, RK_BK, J->k, start + j0, m, nq, dq + i0 * rs, rs);
    }
    for (int64_t r = 0; r < m; ++r) {
      float *kd = J->dk + (start + j0 + r) * rs + J->h * d;
      float *vd = J->dv + (start + j0 + r) * rs + J->h * d;
      for (int64_t c = 0; c < d; ++c) {
        kd[c] = dk[r][c] * J->scale;
        vd[c] = dv[r][c];
      }
    }
  }
  for (int64_t r = 0; r < len; ++r)
    for (int64_t c = 0; c < d; ++c)
      dq[r * rs + c] *= J->scale;
}

typedef void (*segment_fn)(const struct job *, int64_t item, int64_t start,
                           int64_t len, int64_t first, int64_t end);

/// Runs `fn` on every item's share of packed rows [block * RK_BQ, ...).
static void run_block(const struct job *J, segment_fn fn,
                      const int64_t *offsets, int64_t items, int64_t rows,
                      int64_t block) {
  int64_t r0 = block * RK_BQ, r1 = min64(r0 + RK_BQ, rows);
  for (int64_t b = segment_of(offsets, items, r0); r0 < r1 && b < items; ++b) {
    int64_t start = offsets[b], end = offsets[b + 1];
    int64_t stop = min64(end, r1);
    if (stop > r0)
      fn(J, b, start, end - start, r0 - start, stop - start);
    r0 = stop > r0 ? stop : r0;
  }
}

static struct job make_job(const int64_t *seed, SCALARS) {
  struct job J = {0};
  J.heads = heads, J.d = d, J.rs = heads * d, J.ts = ts, J.h = h;
  J.scale = scale, J.scale2 = scale * LOG2E;
  J.causal = (int)causal, J.dropout = (int)dropout;
  J.threshold = (uint32_t)threshold, J.keep = keep;
  if (dropout) {
    J.seed_lo = (uint32_t)(uint64_t)seed[0];
    J.seed_hi = (uint32_t)((uint64_t)seed[0] >> 32);
  }
  (void)rows, (void)block;
  return J;
}

#define FORWARD_SCALARS rows, heads, d, ts, scale, causal, dropout, threshold, keep, block, h

/// Plain-pointer entry points: one workgroup (block of RK_BQ packed rows,
/// head h) each.
void ragged_attention_block(const float *q, const float *kt, const float *v,
                            const int64_t *offsets, int64_t items,
                            const int64_t *seed, float *out, float *lse,
                            SCALARS) {
  struct job J = make_job(seed, FORWARD_SCALARS);
  J.q = q, J.kt = kt, J.v = v, J.out = out, J.lse = lse;
  run_block(&J, forward, offsets, items, rows, block);
}

/// The gradients of item `item` at head h (one workgroup).
void ragged_attention_bwd_unit(const float *q, const float *k, const float *v,
                               const float *qt, const float *dout,
                               const float *dot, const float *lset,
                               const float *dt, const int64_t *offsets,
                               const int64_t *seed, float *dq, float *dk,
                               float *dv, SCALARS) {
  struct job J = make_job(seed, FORWARD_SCALARS);
  J.q = q, J.k = k, J.v = v, J.qt = qt, J.dout = dout, J.dot = dot,
  J.lset = lset, J.dt = dt, J.dq = dq, J.dk = dk, J.dv = dv;
  backward(&J, block, offsets[block], offsets[block + 1] - offsets[block]);
}

/// The entry points IREE calls. One forward workgroup takes a block of
/// RK_BQ packed rows and every head: fewer, larger workgroups than one per
/// head (IREE's cost per workgroup is then a small share).
#define WORKGROUP_SCALARS                                                      \
  int64_t rows, int64_t heads, int64_t d, int64_t ts, float scale,            \
      int64_t causal, int64_t dropout, int32_t threshold, float keep,         \
      int64_t block
#define EACH_HEAD(call)                                                        \
  for (int64_t h = 0; h < heads; ++h)                                         \
  call

void ragged_attention_fwd(MEMREF(const float, q), MEMREF(const float, kt),
                          MEMREF(const float, v),
                          MEMREF(const int64_t, offsets),
                          MEMREF(const int64_t, seed), MEMREF(float, out),
                          MEMREF(float, lse), WORKGROUP_SCALARS) {
  EACH_HEAD(ragged_attention_block(AT(q), AT(kt), AT(v), AT(offsets),
                                   ITEMS(offsets), AT(seed), AT(out), AT(lse),
                                   FORWARD_SCALARS));
}

/// The gradients: one workgroup per item and head (x: the item, y: the
/// head).
void ragged_attention_bwd(MEMREF(const float, q), MEMREF(const float, k),
                          MEMREF(const float, v), MEMREF(const float, qt),
                          MEMREF(const float, dout), MEMREF(const float, dot),
                          MEMREF(const float, lset), MEMREF(const float, dt),
                          MEMREF(const int64_t, offsets),
                          MEMREF(const int64_t, seed), MEMREF(float, dq),
                          MEMREF(float, dk), MEMREF(float, dv), SCALARS) {
  ragged_attention_bwd_unit(AT(q), AT(k), AT(v), AT(qt), AT(dout), AT(dot),
                            AT(lset), AT(dt), AT(offsets), AT(seed), AT(dq),
                            AT(dk), AT(dv), FORWARD_SCALARS);
}
