//===- conv.c - 2-D convolution of each image at its own size -------------===//
//
// ragged.conv2d (f32, groups 1) without a window tile: every output pixel's
// window is read straight from the packed input. Images are packed pixel
// after pixel, each row-major, channels innermost: x [rows, cin], out
// [orows, cout]; the weight is HWIO with its output channels padded with
// zeros to a multiple of the vector width, w [kh, kw, cin, coutp], and the
// bias [coutp].
//
// A workgroup takes RK_CONV_BLOCK consecutive output pixels (of one image or
// several). It walks them in runs of RK_CP consecutive pixels (across output
// rows and images: each pixel has its own image and window) and, for each
// chunk of RK_CV vectors of output channels and RK_CC input channels, keeps
// RK_CP x RK_CV accumulators in registers: per input channel of a tap,
// RK_CV weight vectors and RK_CP broadcast pixels, RK_CP x RK_CV FMAs. A
// tap outside a pixel's image reads a row of zeros. The weights of a
// chunk (kh kw RK_CC coutp floats at most) stay in cache across the
// workgroup's runs; the partial sums of one input-channel chunk go through
// the output.
//
// Offsets (i64, [items + 1]): in_rows and out_rows, each image's first
// pixel; heights and widths, the input's extents; out_widths, the output's.
//
//===----------------------------------------------------------------------===//

#include "vector.h"

#define RK_CONV_BLOCK 64 // output pixels per workgroup
#define RK_CC 128        // input channels per chunk
#if RK_VL >= 16
#define RK_CP 6 // pixels per run: 6 x 4 accumulators of 32 registers
#define RK_CV 4
#else
#define RK_CP 6 // 6 x 2 of 16
#define RK_CV 2
#endif
/// The widest input the zero row covers (larger inputs stay on codegen).
#define RK_CONV_MAX_CIN 4096

static const float zeros[RK_CONV_MAX_CIN];

/// An output pixel: its image and the input position of its window's
/// first tap (which may lie in the padding).
struct pixel {
  const float *image; // the image's first input pixel
  int64_t height, width, y, x;
};

/// Whether input row iy, column ix lies in pixel q's image.
static inline int inside(const struct pixel *q, int64_t iy, int64_t ix) {
  return (uint64_t)iy < (uint64_t)q->height && (uint64_t)ix < (uint64_t)q->width;
}

/// One chunk of a run of `n` <= RK_CP consecutive output pixels `px`: `nv`
/// vectors of output channels from `co`, input channels [c0, c1),
/// accumulated into `out` (rows of stride `cout`) or, for the first chunk,
/// started from the bias. A tap outside a pixel's image reads zeros.
static inline __attribute__((always_inline)) void
chunk(const struct pixel *px, int n, const float *w, const float *bias,
      float *out, int64_t cin, int64_t cout, int64_t coutp, int64_t kh,
      int64_t kw, int64_t dh, int64_t dw, int64_t co, int64_t c0, int64_t c1,
      const int nv) {
  vf acc[RK_CP][RK_CV];
  for (int i = 0; i < RK_CP; ++i)
    for (int v = 0; v < nv; ++v) {
      if (c0 == 0) {
        acc[i][v] = load(bias + co + v * RK_VL);
      } else if (i < n && co + (v + 1) * RK_VL <= cout) {
        acc[i][v] = load(out + i * cout + co + v * RK_VL);
      } else {
        acc[i][v] = splat(0.0f);
        for (int l = 0; i < n && l < RK_VL && co + v * RK_VL + l < cout; ++l)
          acc[i][v][l] = out[i * cout + co + v * RK_VL + l];
      }
    }
  for (int64_t ky = 0; ky < kh; ++ky)
    for (int64_t kx = 0; kx < kw; ++kx) {
      const float *src[RK_CP];
      for (int i = 0; i < RK_CP; ++i) {
        const struct pixel *q = &px[i < n ? i : 0];
        int64_t iy = q->y + ky * dh, ix = q->x + kx * dw;
        src[i] = i < n && inside(q, iy, ix)
                     ? q->image + (iy * q->width + ix) * cin
                     : zeros;
      }
      const float *wt = w + (ky * kw + kx) * cin * coutp + co;
      for (int64_t c = c0; c < c1; ++c) {
        vf wv[RK_CV];
        for (int v = 0; v < nv; ++v)
          wv[v] = load(wt + c * coutp + v * RK_VL);
        for (int i = 0; i < RK_CP; ++i) {
          vf s = splat(src[i][c]);
          for (int v = 0; v < nv; ++v)
            acc[i][v] += s * wv[v];
        }
      }
    }
  for (int i = 0; i < n; ++i)
    for (int v = 0; v < nv; ++v) {
      float *o = out + i * cout + co + v * RK_VL;
      if (co + (v + 1) * RK_VL <= cout)
        store(o, acc[i][v]);
      else
        for (int l = 0; co + v * RK_VL + l < cout; ++l)
          o[l] = acc[i][v][l];
    }
}

/// Output pixels [p0, p1) (at most RK_CONV_BLOCK): plain pointers, for
/// tests.
void ragged_conv2d_pixels(const float *x, const float *w, const float *bias,
                          const int64_t *in_rows, const int64_t *heights,
                          const int64_t *widths, const int64_t *out_rows,
                          const int64_t *out_widths, float *out, int64_t items,
                          int64_t cin, int64_t cout, int64_t coutp,
                          int64_t kh, int64_t kw, int64_t sh, int64_t sw,
                          int64_t ph, int64_t pw, int64_t dh, int64_t dw,
                          int64_t p0, int64_t p1) {
  if (p0 >= p1)
    return;
  // The output channels computed: whole vectors.
  int64_t cend = (cout + RK_VL - 1) / RK_VL * RK_VL;
  // Each pixel's image and window origin; runs of RK_CP consecutive pixels
  // may span output rows and images.
  struct pixel px[RK_CONV_BLOCK];
  int count = (int)(p1 - p0);
  for (int64_t b = segment_of(out_rows, items, p0), k = 0; k < count; ++k) {
    int64_t p = p0 + k;
    while (out_rows[b + 1] <= p)
      ++b;
    int64_t ow = out_widths[b + 1] - out_widths[b];
    int64_t local = p - out_rows[b];
    px[k] = (struct pixel){x + in_rows[b] * cin, heights[b + 1] - heights[b],
                           widths[b + 1] - widths[b], local / ow * sh - ph,
                           local % ow * sw - pw};
  }
  const int64_t step = RK_CV * RK_VL;
  for (int64_t c0 = 0; c0 < cin; c0 += RK_CC) {
    int64_t c1 = min64(c0 + RK_CC, cin);
    for (int64_t co = 0; co < cend; co += step) {
      int nv = (int)min64(RK_CV, (cend - co) / RK_VL);
      for (int k = 0; k < count; k += RK_CP) {
        int n = (int)min64(RK_CP, count - k);
        float *o = out + (p0 + k) * cout;
#define RK_CHUNK(NV)                                                           \
  chunk(&px[k], n, w, bias, o, cin, cout, coutp, kh, kw, dh, dw, co, c0, c1,  \
        NV)
        if (nv == RK_CV)
          RK_CHUNK(RK_CV);
#if RK_CV > 2
        else if (nv == 3)
          RK_CHUNK(3);
#endif
        else if (nv == 2)
          RK_CHUNK(2);
        else
          RK_CHUNK(1);
#undef RK_CHUNK
      }
    }
  }
}

/// The entry point IREE calls: workgroup x takes output pixels [64 x, 64 x +
/// 64).
void ragged_conv2d(MEMREF(const float, x), MEMREF(const float, w),
                   MEMREF(const float, bias), MEMREF(const int64_t, in_rows),
                   MEMREF(const int64_t, heights),
                   MEMREF(const int64_t, widths),
                   MEMREF(const int64_t, out_rows),
                   MEMREF(const int64_t, out_widths), MEMREF(float, out),
                   int64_t orows, int64_t cin, int64_t cout, int64_t coutp,
                   int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph,
                   int64_t pw, int64_t dh, int64_t dw, int64_t block) {
  int64_t p0 = block * RK_CONV_BLOCK;
  ragged_conv2d_pixels(AT(x), AT(w), AT(bias), AT(in_rows), AT(heights),
                       AT(widths), AT(out_rows), AT(out_widths), AT(out),
                       ITEMS(in_rows), cin, cout, coutp, kh, kw, sh, sw, ph, pw,
                       dh, dw, p0, min64(p0 + RK_CONV_BLOCK, orows));
}
