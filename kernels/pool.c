//===- pool.c - 2-D pooling of each image at its own size -----------------===//
//
// ragged.pool2d (f32): max, mean, sum or min over each output pixel's
// window, read straight from the packed input (images pixel after pixel,
// each row-major, channels innermost: x [rows, c], out [orows, c]). A
// workgroup takes RK_POOL_BLOCK consecutive output pixels; each pixel's
// window is clipped to its image (padded positions are never the max or
// the min and add nothing to a sum), channels in vectors. max and min
// propagate NaN. A mean divides by the window clipped to the padded image
// (`include_pad`) or to the image itself, as ragged.pool2d defines it.
//
// Offsets (i64, [items + 1]) as in conv.c: in_rows and out_rows, each
// image's first pixel; heights and widths, the input's; out_widths, the
// output's.
//
//===----------------------------------------------------------------------===//

#include "vector.h"

#define RK_POOL_BLOCK 64 // output pixels per workgroup

/// The window [start, end) along one dim clipped to what a mean divides by.
static inline int64_t span(int64_t start, int64_t extent, int64_t k,
                           int64_t p, int64_t include_pad) {
  int64_t end = min64(start + k, extent + p);
  if (!include_pad) {
    start = start > 0 ? start : 0;
    end = min64(end, extent);
  }
  return end - start;
}

/// The n <= RK_VL floats at p as a vector, the lanes past n `fill`.
static inline vf lanes(const float *p, int n, float fill) {
  if (n == RK_VL)
    return load(p);
  float t[RK_VL];
  for (int l = 0; l < RK_VL; ++l)
    t[l] = l < n ? p[l] : fill;
  return load(t);
}

/// Output pixels [p0, p1): plain pointers, for tests.
void ragged_pool2d_pixels(const float *x, const int64_t *in_rows,
                          const int64_t *heights, const int64_t *widths,
                          const int64_t *out_rows, const int64_t *out_widths,
                          float *out, int64_t items, int64_t c, int64_t kind,
                          int64_t include_pad, int64_t kh, int64_t kw,
                          int64_t sh, int64_t sw, int64_t ph, int64_t pw,
                          int64_t dh, int64_t dw, int64_t p0, int64_t p1) {
  if (p0 >= p1)
    return;
  float inf = __builtin_inff();
  float identity = kind == RK_MAX ? -inf : kind == RK_MIN ? inf : 0.0f;
  for (int64_t b = segment_of(out_rows, items, p0), p = p0; p < p1; ++p) {
    while (out_rows[b + 1] <= p)
      ++b;
    int64_t ow = out_widths[b + 1] - out_widths[b], local = p - out_rows[b];
    int64_t height = heights[b + 1] - heights[b];
    int64_t width = widths[b + 1] - widths[b];
    int64_t top = local / ow * sh - ph, left = local % ow * sw - pw;
    const float *image = x + in_rows[b] * c;
    float *o = out + p * c;
    float scale = 1.0f;
    if (kind == RK_MEAN)
      scale = 1.0f / (float)(span(top, height, kh, ph, include_pad) *
                             span(left, width, kw, pw, include_pad));
    // Channels a vector at a time; the last vector's lanes past c hold the
    // identity and are not stored.
    for (int64_t ch = 0; ch < c; ch += RK_VL) {
      int n = (int)min64(RK_VL, c - ch);
      vf acc = splat(identity);
      for (int64_t ky = 0; ky < kh; ++ky) {
        int64_t iy = top + ky * dh;
        if ((uint64_t)iy >= (uint64_t)height)
          continue;
        for (int64_t kx = 0; kx < kw; ++kx) {
          int64_t ix = left + kx * dw;
          if ((uint64_t)ix < (uint64_t)width)
            acc = combine(
                acc, lanes(image + (iy * width + ix) * c + ch, n, identity),
                kind);
        }
      }
      if (kind == RK_MEAN)
        acc = acc * scale;
      if (n == RK_VL) {
        store(o + ch, acc);
      } else {
        float tail[RK_VL];
        store(tail, acc);
        for (int l = 0; l < n; ++l)
          o[ch + l] = tail[l];
      }
    }
  }
}

/// The entry point IREE calls: workgroup x takes output pixels [64 x, 64 x +
/// 64).
void ragged_pool2d(MEMREF(const float, x), MEMREF(const int64_t, in_rows),
                   MEMREF(const int64_t, heights),
                   MEMREF(const int64_t, widths),
                   MEMREF(const int64_t, out_rows),
                   MEMREF(const int64_t, out_widths), MEMREF(float, out),
                   int64_t orows, int64_t c, int64_t kind, int64_t include_pad,
                   int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                   int64_t pw, int64_t dh, int64_t dw, int64_t block) {
  int64_t p0 = block * RK_POOL_BLOCK;
  ragged_pool2d_pixels(AT(x), AT(in_rows), AT(heights), AT(widths),
                       AT(out_rows), AT(out_widths), AT(out), ITEMS(in_rows),
                       c, kind, include_pad, kh, kw, sh, sw, ph, pw, dh, dw,
                       p0, min64(p0 + RK_POOL_BLOCK, orows));
}
