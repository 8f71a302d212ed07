//===- softmax.c - softmax over each item's rows
//---------------------------===//
//
// ragged.softmax over a ragged dim that holds each item's rows ([B, L(b),
// D...] with the trailing dims flattened to f): for every item and feature,
// softmax over the item's rows. One workgroup per item; it takes the
// features in chunks of RK_SC, and for each chunk
//   1. the maximum of each feature over the rows,
//   2. e = exp(x - max), stored in the output, and its sum,
//   3. the output scaled by 1 / sum,
// so each exponential is computed once and a chunk of an item (its rows x
// RK_SC floats) is read from cache after the first pass. A feature whose
// maximum is not finite (a NaN, a +inf, or -inf throughout) gets NaN
// throughout, as exp(x - max) / sum does in eager PyTorch.
//
// Layouts (f32, row-major): x, out [rows, f]; offsets [items + 1] i64, item
// b holding rows offsets[b] .. offsets[b + 1].
//
//===----------------------------------------------------------------------===//

#include "vector.h"

#define RK_SC (4 * RK_VL) // features per chunk: four vectors
// Sums in two levels, of blocks of RK_SUM_ROWS rows: the rounding error of
// a long item's sum grows with the block size and the block count, not with
// its rows.
#define RK_SUM_ROWS 128

/// One chunk of `nv` vectors (nv <= 4) at feature c of the rows [r0, r1).
static void chunk(const float *x, float *out, int64_t f, int64_t c, int64_t r0,
                  int64_t r1, int nv) {
  vf m[4], s[4];
  for (int v = 0; v < nv; ++v)
    m[v] = splat(-__builtin_inff()), s[v] = splat(0.0f);
  for (int64_t r = r0; r < r1; ++r)
    for (int v = 0; v < nv; ++v) // NaN-propagating, unlike vmax
      m[v] =
          __builtin_elementwise_maximum(m[v], load(x + r * f + c + v * RK_VL));
  for (int64_t b = r0; b < r1; b += RK_SUM_ROWS) {
    vf part[4] = {0};
    for (int64_t r = b; r < r1 && r < b + RK_SUM_ROWS; ++r)
      for (int v = 0; v < nv; ++v) {
        vf e = exp2v((load(x + r * f + c + v * RK_VL) - m[v]) * LOG2E);
        store(out + r * f + c + v * RK_VL, e);
        part[v] += e;
      }
    for (int v = 0; v < nv; ++v)
      s[v] += part[v];
  }
  vi nan[4]; // all ones where the maximum is not finite
  for (int v = 0; v < nv; ++v) {
    s[v] = 1.0f / s[v];
    nan[v] = (m[v] - m[v]) != 0.0f;
  }
  for (int64_t r = r0; r < r1; ++r)
    for (int v = 0; v < nv; ++v) {
      float *o = out + r * f + c + v * RK_VL;
      store(o, (vf)((vi)(load(o) * s[v]) | (nan[v] & 0x7fc00000)));
    }
}

/// The same for one feature (the tail of f past whole vectors).
static void column(const float *x, float *out, int64_t f, int64_t c, int64_t r0,
                   int64_t r1) {
  float m = -__builtin_inff(), s = 0.0f;
  for (int64_t r = r0; r < r1; ++r)
    m = x[r * f + c] > m || x[r * f + c] != x[r * f + c] ? x[r * f + c] : m;
  for (int64_t b = r0; b < r1; b += RK_SUM_ROWS) {
    float part = 0.0f;
    for (int64_t r = b; r < r1 && r < b + RK_SUM_ROWS; ++r) {
      float e = exp2s((x[r * f + c] - m) * LOG2E);
      out[r * f + c] = e;
      part += e;
    }
    s += part;
  }
  float nan = __builtin_nanf("");
  for (int64_t r = r0; r < r1; ++r)
    out[r * f + c] = m - m != 0.0f ? nan : out[r * f + c] / s;
}

/// The softmax of item `item` (one workgroup): plain pointers, for tests.
void ragged_segment_softmax_item(const float *x, const int64_t *offsets,
                                 float *out, int64_t f, int64_t item) {
  int64_t r0 = offsets[item], r1 = offsets[item + 1];
  int64_t c = 0;
  for (; c + RK_SC <= f; c += RK_SC)
    chunk(x, out, f, c, r0, r1, 4);
  if (c + RK_VL <= f) {
    int nv = (int)((f - c) / RK_VL);
    chunk(x, out, f, c, r0, r1, nv);
    c += nv * RK_VL;
  }
  for (; c < f; ++c)
    column(x, out, f, c, r0, r1);
}

/// The entry point IREE calls: one workgroup per item (x: the item). The
/// rows are [rows, heads, d] with heads 1 and d = f (the pass's view).
void ragged_segment_softmax(MEMREF(const float, x),
                            MEMREF(const int64_t, offsets),
                            MEMREF(const int64_t, seed), MEMREF(float, out),
                            SCALARS) {
  (void)seed_data, (void)seed_offset, (void)rows, (void)heads, (void)ts,
      (void)scale, (void)causal, (void)dropout, (void)threshold, (void)keep,
      (void)h;
  ragged_segment_softmax_item(AT(x), AT(offsets), AT(out), d, block);
}
