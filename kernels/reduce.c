//===- reduce.c - sum, mean, max or min over each item's rows -------------===//
//
// ragged.reduce over a ragged dim that holds each item's rows ([B, L(b),
// D...] with the trailing dims flattened to f): for every item and
// feature, the sum, mean, max or min over the item's rows; an item with no
// rows gets `empty`. One workgroup per item; the features in chunks of
// four vectors, each chunk's rows read once, accumulated in registers (a
// sum in blocks of RK_SUM_ROWS rows, so a long item's rounding error grows
// with the block size and the block count, not with its rows). max and min
// propagate NaN.
//
// Layouts (f32, row-major): x [rows, f], out [items, f]; offsets [items +
// 1] i64, item b holding rows offsets[b] .. offsets[b + 1].
//
//===----------------------------------------------------------------------===//

#include "vector.h"

#define RK_RC (4 * RK_VL) // features per chunk: four vectors
#define RK_SUM_ROWS 128

/// `nv` vectors (nv <= 4) of features from c over rows [r0, r1) into out.
static inline __attribute__((always_inline)) void
chunk(const float *x, float *out, int64_t f, int64_t c, int64_t r0,
      int64_t r1, int64_t kind, const int nv) {
  float inf = __builtin_inff();
  vf id = splat(kind == RK_MAX ? -inf : kind == RK_MIN ? inf : 0.0f);
  vf acc[4];
  for (int v = 0; v < nv; ++v)
    acc[v] = id;
  if (kind == RK_SUM || kind == RK_MEAN) {
    for (int64_t b = r0; b < r1; b += RK_SUM_ROWS) {
      vf part[4] = {0};
      for (int64_t r = b; r < r1 && r < b + RK_SUM_ROWS; ++r)
        for (int v = 0; v < nv; ++v)
          part[v] += load(x + r * f + c + v * RK_VL);
      for (int v = 0; v < nv; ++v)
        acc[v] += part[v];
    }
    if (kind == RK_MEAN)
      for (int v = 0; v < nv; ++v)
        acc[v] = acc[v] / (float)(r1 - r0);
  } else {
    for (int64_t r = r0; r < r1; ++r)
      for (int v = 0; v < nv; ++v)
        acc[v] = combine(acc[v], load(x + r * f + c + v * RK_VL), kind);
  }
  for (int v = 0; v < nv; ++v)
    store(out + c + v * RK_VL, acc[v]);
}

/// Item `item` (one workgroup): plain pointers, for tests.
void ragged_segment_reduce_item(const float *x, const int64_t *offsets,
                                float *out, int64_t f, int64_t kind,
                                float empty, int64_t item) {
  int64_t r0 = offsets[item], r1 = offsets[item + 1];
  float *o = out + item * f;
  if (r0 == r1) {
    for (int64_t c = 0; c < f; ++c)
      o[c] = empty;
    return;
  }
  int64_t c = 0;
  for (; c + RK_RC <= f; c += RK_RC)
    chunk(x, o, f, c, r0, r1, kind, 4);
  int nv = (int)((f - c) / RK_VL);
  if (nv == 3)
    chunk(x, o, f, c, r0, r1, kind, 3);
  else if (nv == 2)
    chunk(x, o, f, c, r0, r1, kind, 2);
  else if (nv == 1)
    chunk(x, o, f, c, r0, r1, kind, 1);
  c += nv * RK_VL;
  for (; c < f; ++c) { // the tail, one feature at a time
    float inf = __builtin_inff();
    float acc = kind == RK_MAX ? -inf : kind == RK_MIN ? inf : 0.0f;
    for (int64_t b = r0; b < r1; b += RK_SUM_ROWS) {
      float part = kind == RK_MAX || kind == RK_MIN ? acc : 0.0f;
      for (int64_t r = b; r < r1 && r < b + RK_SUM_ROWS; ++r) {
        part = combine1(part, x[r * f + c], kind);
      }
      acc = kind == RK_MAX || kind == RK_MIN ? part : acc + part;
    }
    o[c] = kind == RK_MEAN ? acc / (float)(r1 - r0) : acc;
  }
}

/// The entry point IREE calls: one workgroup per item (x: the item).
void ragged_segment_reduce(MEMREF(const float, x),
                           MEMREF(const int64_t, offsets), MEMREF(float, out),
                           int64_t f, int64_t kind, float empty, int64_t item,
                           int64_t y) {
  (void)y;
  ragged_segment_reduce_item(AT(x), AT(offsets), AT(out), f, kind, empty,
                             item);
}
