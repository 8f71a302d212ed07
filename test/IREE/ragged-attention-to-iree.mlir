// RUN: ragged-opt %s --allow-unregistered-dialect --ragged-attention-to-iree=scores-max-rows=256 --convert-ragged-to-linalg | FileCheck %s --implicit-check-not=ragged.
// RUN: not ragged-opt %s --ragged-attention-to-iree 2>&1 | FileCheck %s --check-prefix=UNREGISTERED
// RUN: ragged-opt %s --allow-unregistered-dialect --ragged-attention-to-iree | FileCheck %s --check-prefix=RAGGED
// RUN: ragged-opt %s --allow-unregistered-dialect --ragged-attention-to-iree | FileCheck %s --check-prefix=FUSED

// The maps of the online attention below, at the top of the output: loops
// (b, h, m, n, k1, k2) over [n, S, H, d] blocks, statistics [n, S, H].
// RAGGED-DAG: #[[$Q:.+]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d2, d1, d4)>
// RAGGED-DAG: #[[$K:.+]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d5, d1, d4)>
// RAGGED-DAG: #[[$V:.+]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d5, d1, d3)>
// RAGGED-DAG: #[[$SCALE:.+]] = affine_map<(d0, d1, d2, d3, d4, d5) -> ()>
// RAGGED-DAG: #[[$MASK:.+]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d5)>
// RAGGED-DAG: #[[$OUT:.+]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d2, d1, d3)>
// RAGGED-DAG: #[[$STAT:.+]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d2, d1)>

// UNREGISTERED: error: ragged-attention-to-iree emits iree_linalg_ext.attention and iree_linalg_ext.gather, which this context does not know: allow unregistered dialects

// f32 attention with static heads and head size runs on
// the static ladder (12 sizes, 16 to 1024, and an overflow bucket of maxL
// rows): bucket counts over 13 buckets; one generic giving the source row
// and key mask of every slot of every bucket (the slab's rows); per bucket
// its slices of them (the mask viewed as [n, S]), IREE's row gathers
// (iree_linalg_ext.gather, in generic form) of q, k and v viewed as
// static-S [n, S, H, d] blocks, and
// the attention on them: iree_linalg_ext.attention on 16 rows, past 256 and
// on the overflow bucket; with scores-max-rows=256, from 32 to 256 rows,
// materialised scores (two contractions of head-major [n H, S, d]
// operands, which IREE data-tiles) where the bucket's scores take at most
// 32 MiB, the fused kernel otherwise;
// the outputs concatenated into the output slab; one IREE row gather back to
// the packed rows.
// Loops (batch, head, query, value column, head column, key).
// CHECK-DAG: #[[$QMAP:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d2, d1, d4)>
// CHECK-DAG: #[[$KMAP:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d5, d1, d4)>
// CHECK-DAG: #[[$VMAP:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d5, d1, d3)>
// CHECK-DAG: #[[$SMAP:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> ()>
// CHECK-DAG: #[[$MMAP:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d5)>
// CHECK-DAG: #[[$OMAP:.*]] = affine_map<(d0, d1, d2, d3, d4, d5) -> (d0, d2, d1, d3)>
// One head (@one_head_shared): loops (batch, query, value column, head column, key).
// CHECK-DAG: #[[$Q1:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d3)>
// CHECK-DAG: #[[$K1:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d3)>
// CHECK-DAG: #[[$V1:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d2)>
// CHECK-DAG: #[[$O1:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2)>
// Materialised scores: loops (item and head, query, key, column).
// CHECK-DAG: #[[$DQ:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-DAG: #[[$DK:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d2, d3)>
// CHECK-DAG: #[[$DS:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// By default (scores-max-rows=0) every bucket runs IREE's fused kernel.
// FUSED-LABEL: func.func @attention
// FUSED-NOT:     linalg.transpose
// FUSED-COUNT-13: "iree_linalg_ext.attention"
// FUSED-NOT:     linalg.transpose
// FUSED:         return
// CHECK-LABEL: func.func @attention
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]} outs({{.*}} : tensor<?x13xi64>)
// CHECK:         %[[SLOTS:.*]]:2 = linalg.generic {{.*}}outs({{.*}} : tensor<?xi64>, tensor<?xi1>)
// CHECK:         %[[ROWS:.*]] = tensor.extract_slice %[[SLOTS]]#0[%{{.*}}] [%{{.*}}] [1] : tensor<?xi64> to tensor<?xi64>
// CHECK:         %[[MASKS:.*]] = tensor.extract_slice %[[SLOTS]]#1[%{{.*}}] [%{{.*}}] [1] : tensor<?xi1> to tensor<?xi1>
// CHECK:         %[[MASK:.*]] = tensor.expand_shape %[[MASKS]] {{\[}}[0, 1]] output_shape [%{{.*}}, 16] : tensor<?xi1> into tensor<?x16xi1>
// CHECK:         %[[QG:.*]] = "iree_linalg_ext.gather"(%{{.*}}, %[[ROWS]], %{{.*}}) {dimension_map = array<i64: 0>} : (tensor<?x2x4xf32>, tensor<?xi64>, tensor<?x2x4xf32>) -> tensor<?x2x4xf32>
// CHECK:         %[[Q:.*]] = tensor.expand_shape %[[QG]] {{.*}} : tensor<?x2x4xf32> into tensor<?x16x2x4xf32>
// CHECK:         "iree_linalg_ext.gather"(%{{.*}}, %[[ROWS]], %{{.*}})
// CHECK:         %[[K:.*]] = tensor.expand_shape
// CHECK:         "iree_linalg_ext.gather"(%{{.*}}, %[[ROWS]], %{{.*}})
// CHECK:         %[[V:.*]] = tensor.expand_shape
// CHECK:         %[[SCALE:.*]] = arith.constant 5.000000e-01 : f32
// CHECK:         "iree_linalg_ext.attention"(%[[Q]], %[[K]], %[[V]], %[[SCALE]], %[[MASK]], %{{.*}}) ({
// CHECK-NEXT:    ^bb0(%[[S:.*]]: f32):
// CHECK-NEXT:      "iree_linalg_ext.yield"(%[[S]]) : (f32) -> ()
// CHECK-NEXT:    }) {indexing_maps = [#[[$QMAP]], #[[$KMAP]], #[[$VMAP]], #[[$SMAP]], #[[$MMAP]], #[[$OMAP]]]} : (tensor<?x16x2x4xf32>, tensor<?x16x2x4xf32>, tensor<?x16x2x4xf32>, f32, tensor<?x16xi1>, tensor<?x16x2x4xf32>) -> tensor<?x16x2x4xf32>
// CHECK:         tensor.collapse_shape
// CHECK:         %[[FITS:.*]] = arith.cmpi ule, %{{.*}}, %c4096 : index
// CHECK:         scf.if %[[FITS]] -> (tensor<?x32x2x4xf32>) {
// CHECK:           %[[Q32T:.*]] = linalg.transpose ins(%{{.*}} : tensor<?x32x2x4xf32>) outs(%{{.*}} : tensor<?x2x32x4xf32>) permutation = [0, 2, 1, 3]
// CHECK:           %[[Q32:.*]] = tensor.collapse_shape %[[Q32T]] {{\[}}[0, 1], [2], [3]] : tensor<?x2x32x4xf32> into tensor<?x32x4xf32>
// CHECK:           linalg.transpose
// CHECK:           %[[K32:.*]] = tensor.collapse_shape
// CHECK:           linalg.generic {indexing_maps = [#[[$DQ]], #[[$DK]], #[[$DS]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[Q32]], %[[K32]] : tensor<?x32x4xf32>, tensor<?x32x4xf32>) outs(%{{.*}} : tensor<?x32x32xf32>)
// CHECK:           math.exp
// CHECK:           linalg.generic {indexing_maps = [#[[$DQ]], #{{.*}}, #[[$DS]]], {{.*}} outs(%{{.*}} : tensor<?x32x4xf32>)
// CHECK:           linalg.transpose ins(%{{.*}} : tensor<?x2x32x4xf32>) outs(%{{.*}} : tensor<?x32x2x4xf32>) permutation = [0, 2, 1, 3]
// CHECK:           scf.yield
// CHECK-NEXT:    } else {
// CHECK-NOT:       linalg.transpose
// CHECK:           "iree_linalg_ext.attention"
// CHECK:           }) {indexing_maps = {{.*}} -> tensor<?x32x2x4xf32>
// CHECK-NEXT:      scf.yield
// CHECK-COUNT-6:   } else {
// CHECK-NOT:       scf.if
// CHECK:         tensor.empty(%{{.*}}) : tensor<?x384x2x4xf32>
// CHECK-NEXT:    "iree_linalg_ext.attention"
// CHECK:         }) {indexing_maps = {{.*}} -> tensor<?x384x2x4xf32>
// CHECK:         }) {indexing_maps = {{.*}} -> tensor<?x512x2x4xf32>
// CHECK:         }) {indexing_maps = {{.*}} -> tensor<?x768x2x4xf32>
// CHECK:         }) {indexing_maps = {{.*}} -> tensor<?x1024x2x4xf32>
// CHECK:         }) {indexing_maps = {{.*}} -> tensor<?x?x2x4xf32>
// CHECK-NOT:     "iree_linalg_ext.attention"
// CHECK:         %[[SLAB:.*]] = tensor.concat dim(0) {{.*}} -> tensor<?x2x4xf32>
// CHECK:         "iree_linalg_ext.gather"(%[[SLAB]], {{.*}}) {dimension_map = array<i64: 0>} : (tensor<?x2x4xf32>, tensor<?xi64>, tensor<?x2x4xf32>) -> tensor<?x2x4xf32>
func.func @attention(%q: !ragged.tensor<?, [L], 2, 4, f32>, %k: !ragged.tensor<?, [L], 2, 4, f32>,
                     %v: !ragged.tensor<?, [L], 2, 4, f32>) -> !ragged.tensor<?, [L], 2, 4, f32> {
  %o = ragged.attention %q, %k, %v {scale = 0.5 : f64} : !ragged.tensor<?, [L], 2, 4, f32>
  return %o : !ragged.tensor<?, [L], 2, 4, f32>
}

// Causal attention masks with a static [S, S] lower triangle instead.
// FUSED-LABEL: func.func @causal
// CHECK-LABEL: func.func @causal
// CHECK:         %[[TRI:.*]] = linalg.generic {{.*}} outs({{.*}} : tensor<16x16xi1>)
// CHECK:           arith.cmpi ule
// CHECK:         "iree_linalg_ext.attention"({{.*}}, %[[TRI]], %{{.*}}) ({
func.func @causal(%q: !ragged.tensor<?, [L], 2, 4, f32>, %k: !ragged.tensor<?, [L], 2, 4, f32>,
                  %v: !ragged.tensor<?, [L], 2, 4, f32>) -> !ragged.tensor<?, [L], 2, 4, f32> {
  %o = ragged.attention %q, %k, %v {scale = 0.5 : f64, causal} : !ragged.tensor<?, [L], 2, 4, f32>
  return %o : !ragged.tensor<?, [L], 2, 4, f32>
}

// f64 (and dynamic heads or head size) keep the linalg buckets.
// CHECK-LABEL: func.func @double
// CHECK-NOT:     iree_linalg_ext
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} {{.*}} outs({{.*}} : tensor<?x2x?x?xf64>)
// CHECK-LABEL: func.func @dynamic_heads
// CHECK-NOT:     iree_linalg_ext
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} {{.*}} outs({{.*}} : tensor<?x?x?x?xf32>)
func.func @double(%q: !ragged.tensor<?, [L], 2, 4, f64>, %k: !ragged.tensor<?, [L], 2, 4, f64>,
                  %v: !ragged.tensor<?, [L], 2, 4, f64>) -> !ragged.tensor<?, [L], 2, 4, f64> {
  %o = ragged.attention %q, %k, %v : !ragged.tensor<?, [L], 2, 4, f64>
  return %o : !ragged.tensor<?, [L], 2, 4, f64>
}
func.func @dynamic_heads(%q: !ragged.tensor<?, [L], ?, 4, f32>, %k: !ragged.tensor<?, [L], ?, 4, f32>,
                         %v: !ragged.tensor<?, [L], ?, 4, f32>) -> !ragged.tensor<?, [L], ?, 4, f32> {
  %o = ragged.attention %q, %k, %v : !ragged.tensor<?, [L], ?, 4, f32>
  return %o : !ragged.tensor<?, [L], ?, 4, f32>
}

// q, k and v from one tensor keep the linalg gathers: one IREE gather
// feeding several operands of the fused attention fails IREE's codegen.
// CHECK-LABEL: func.func @shared
// CHECK:         "iree_linalg_ext.attention"
// CHECK-NOT:     "iree_linalg_ext.gather"
// CHECK:         return
func.func @shared(%x: !ragged.tensor<?, [L], 2, 4, f32>) -> !ragged.tensor<?, [L], 2, 4, f32> {
  %o = ragged.attention %x, %x, %x {scale = 0.5 : f64} : !ragged.tensor<?, [L], 2, 4, f32>
  return %o : !ragged.tensor<?, [L], 2, 4, f32>
}

// One head: the attention gets [n, S, d] blocks of [rows, d] views of the
// values and loops without a head (IREE would fold the unit head dim
// itself and mis-folds an attention whose operands repeat); q = k is one
// block, gathered once; the output rows expand back to [rows, 1, d]. The
// values are read behind barriers, so IREE cannot reshape their heads.
// CHECK-LABEL: func.func @one_head_shared
// CHECK-SAME:    %[[X:[a-z0-9]+]]: tensor<?x1x11xf32>, %{{.*}}: tensor<?xi64>, %[[V:[a-z0-9]+]]: tensor<?x1x11xf32>
// CHECK-DAG:     %[[XH:.*]] = "util.optimization_barrier"(%[[X]]) : (tensor<?x1x11xf32>) -> tensor<?x1x11xf32>
// CHECK-DAG:     %[[XT:.*]] = "flow.tensor.tie_shape"(%[[XH]], %{{.*}}) : (tensor<?x1x11xf32>, index) -> tensor<?x1x11xf32>
// CHECK-DAG:     %[[VH:.*]] = "util.optimization_barrier"(%[[V]]) : (tensor<?x1x11xf32>) -> tensor<?x1x11xf32>
// CHECK-DAG:     %[[VT:.*]] = "flow.tensor.tie_shape"(%[[VH]], %{{.*}}) : (tensor<?x1x11xf32>, index) -> tensor<?x1x11xf32>
// CHECK-DAG:     %[[XR:.*]] = tensor.collapse_shape %[[XT]] {{\[}}[0], [1, 2]] : tensor<?x1x11xf32> into tensor<?x11xf32>
// CHECK-DAG:     %[[VR:.*]] = tensor.collapse_shape %[[VT]] {{\[}}[0], [1, 2]] : tensor<?x1x11xf32> into tensor<?x11xf32>
// CHECK:         %[[XB:.*]] = linalg.generic {{.*}} outs({{.*}} : tensor<?x16x11xf32>)
// CHECK:           tensor.extract %[[XR]]
// CHECK:         %[[VB:.*]] = linalg.generic {{.*}} outs({{.*}} : tensor<?x16x11xf32>)
// CHECK:           tensor.extract %[[VR]]
// CHECK:         "iree_linalg_ext.attention"(%[[XB]], %[[XB]], %[[VB]], %{{.*}}, %{{.*}}, %{{.*}}) ({
// CHECK:         }) {indexing_maps = [#[[$Q1]], #[[$K1]], #[[$V1]], {{.*}}, #[[$O1]]]} : (tensor<?x16x11xf32>, tensor<?x16x11xf32>, tensor<?x16x11xf32>, f32, tensor<?x16xi1>, tensor<?x16x11xf32>) -> tensor<?x16x11xf32>
// CHECK:         %[[SLAB:.*]] = tensor.concat dim(0) {{.*}} -> tensor<?x11xf32>
// CHECK:         %[[ROWS:.*]] = linalg.generic {{.*}} outs({{.*}} : tensor<?x11xf32>)
// CHECK:           tensor.extract %[[SLAB]]
// CHECK:         tensor.expand_shape %[[ROWS]] {{\[}}[0], [1, 2]] {{.*}} : tensor<?x11xf32> into tensor<?x1x11xf32>
func.func @one_head_shared(%x: !ragged.tensor<?, [L], 1, 11, f32>,
                           %v: !ragged.tensor<?, [L], 1, 11, f32>) -> !ragged.tensor<?, [L], 1, 11, f32> {
  %o = ragged.attention %x, %x, %v {scale = 0.5 : f64} : !ragged.tensor<?, [L], 1, 11, f32>
  return %o : !ragged.tensor<?, [L], 1, 11, f32>
}

// An attention whose query is another attention's result reads the earlier
// slab directly: each bucket's gather composes its slots with the earlier
// attention's row index instead of gathering from that attention's gathered
// rows (IREE would fuse the two gathers into one dispatch it cannot compile).
// CHECK-LABEL: func.func @chained
// CHECK:         %[[SLAB:.*]] = tensor.concat dim(0)
// CHECK:         "iree_linalg_ext.gather"(%[[SLAB]], %[[BACK:[^,]*]], %{{.*}})
// CHECK:         tensor.extract %[[BACK]]
// CHECK:         "iree_linalg_ext.gather"(%[[SLAB]], %{{.*}}, %{{.*}}) {dimension_map = array<i64: 0>} : (tensor<?x2x4xf32>, tensor<?xi64>, tensor<?x2x4xf32>) -> tensor<?x2x4xf32>
// CHECK-NEXT:    tensor.expand_shape
func.func @chained(%q: !ragged.tensor<?, [L], 2, 4, f32>, %k: !ragged.tensor<?, [L], 2, 4, f32>,
                   %v: !ragged.tensor<?, [L], 2, 4, f32>) -> !ragged.tensor<?, [L], 2, 4, f32> {
  %a = ragged.attention %q, %k, %v {scale = 0.5 : f64} : !ragged.tensor<?, [L], 2, 4, f32>
  %o = ragged.attention %a, %k, %v {scale = 0.5 : f64} : !ragged.tensor<?, [L], 2, 4, f32>
  return %o : !ragged.tensor<?, [L], 2, 4, f32>
}

// The pass itself stays at the ragged level: the packed values and offsets
// of the operands in, ragged.pack of the output rows out; attention IREE's
// kernel does not take (here f64) is left for convert-ragged-to-linalg.
// RAGGED-LABEL: func.func @ragged_level
// RAGGED-SAME:    (%[[Q:.*]]: !ragged.tensor<?, [L], 2, 4, f32>, %[[D:.*]]: !ragged.tensor<?, [L], 2, 4, f64>)
// RAGGED-DAG:     %[[OFF:.*]] = ragged.offsets %[[Q]]["L"]
// RAGGED-DAG:     %[[QV:.*]] = ragged.values %[[Q]]
// RAGGED:         "iree_linalg_ext.attention"
// RAGGED:         tensor.concat
// RAGGED:         ragged.pack %{{.*}}[%[[OFF]]]
// RAGGED:         ragged.attention %[[D]], %[[D]], %[[D]]
// CHECK-LABEL: func.func @ragged_level
// CHECK:         "iree_linalg_ext.attention"
// CHECK:         return
func.func @ragged_level(%q: !ragged.tensor<?, [L], 2, 4, f32>, %d: !ragged.tensor<?, [L], 2, 4, f64>)
    -> (!ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f64>) {
  %o = ragged.attention %q, %q, %q {scale = 0.5 : f64} : !ragged.tensor<?, [L], 2, 4, f32>
  %e = ragged.attention %d, %d, %d {scale = 0.5 : f64} : !ragged.tensor<?, [L], 2, 4, f64>
  return %o, %e : !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f64>
}

// A training forward's attention also returns its lse:
// iree_linalg_ext.online_attention returns the unnormalised output with
// each query's running maximum (starting at the lowest finite f32) and sum,
// in base 2; out = acc / sum, lse = ln 2 max + ln sum. Bucket of 16 rows:
// RAGGED-LABEL: func.func @with_lse
// RAGGED-NOT:     ragged.attention
// RAGGED:         %[[ZERO:.+]] = arith.constant 0.000000e+00 : f32
// RAGGED:         %[[ACC:.+]] = linalg.fill ins(%[[ZERO]] : f32) outs(%{{.+}} : tensor<?x16x2x4xf32>)
// RAGGED:         %[[LOWEST:.+]] = arith.constant -3.40282347E+38 : f32
// RAGGED:         %[[MAX:.+]] = linalg.fill ins(%[[LOWEST]] : f32) outs(%{{.+}} : tensor<?x16x2xf32>)
// RAGGED:         %[[ZERO2:.+]] = arith.constant 0.000000e+00 : f32
// RAGGED:         %[[SUM:.+]] = linalg.fill ins(%[[ZERO2]] : f32) outs(%{{.+}} : tensor<?x16x2xf32>)
// RAGGED:         %[[ON:.+]]:3 = "iree_linalg_ext.online_attention"(%{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}}, %[[ACC]], %[[MAX]], %[[SUM]])
// RAGGED:         }) {indexing_maps = [#[[$Q]], #[[$K]], #[[$V]], #[[$SCALE]], #[[$MASK]], #[[$OUT]], #[[$STAT]], #[[$STAT]]]
// RAGGED:         linalg.generic {{.*}} ins(%[[ON]]#0, %[[ON]]#2 : tensor<?x16x2x4xf32>, tensor<?x16x2xf32>)
// RAGGED:           arith.divf
// RAGGED:         linalg.generic {{.*}} ins(%[[ON]]#1, %[[ON]]#2 : tensor<?x16x2xf32>, tensor<?x16x2xf32>) outs(%{{.+}} : tensor<?x16x2x1xf32>)
// RAGGED:           %[[LN2:.+]] = arith.constant 0.693147182 : f32
// RAGGED:           %[[MAX:.+]] = arith.mulf %{{.+}}, %[[LN2]]
// RAGGED:           %[[LOG:.+]] = math.log
// RAGGED:           arith.addf %[[MAX]], %[[LOG]]
// RAGGED:         ragged.pack {{.*}} -> !ragged.tensor<?, [L], 2, 4, f32>
// RAGGED:         ragged.pack {{.*}} -> !ragged.tensor<?, [L], 2, 1, f32>
// RAGGED-NOT:     util.optimization_barrier
// CHECK-LABEL: func.func @with_lse
// CHECK-NOT:     "iree_linalg_ext.attention"
// CHECK:         "iree_linalg_ext.online_attention"
// CHECK:         return
func.func @with_lse(%q: !ragged.tensor<?, [L], 2, 4, f32>)
    -> (!ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 1, f32>) {
  %o, %l = ragged.attention %q, %q, %q {scale = 0.5 : f64} : !ragged.tensor<?, [L], 2, 4, f32> lse !ragged.tensor<?, [L], 2, 1, f32>
  return %o, %l : !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 1, f32>
}

// When a gradient in the same function reads the output and lse, both go
// behind IREE's barrier: IREE would otherwise fuse the row gather that made
// them into the gradient's linalg gathers, which it cannot distribute.
// RAGGED-LABEL: func.func @lse_into_grad
// RAGGED:         "iree_linalg_ext.online_attention"
// RAGGED:         "util.optimization_barrier"
// RAGGED:         "util.optimization_barrier"
// RAGGED:         ragged.attention_grad
// CHECK-LABEL: func.func @lse_into_grad
// CHECK:         "iree_linalg_ext.online_attention"
// CHECK:         "util.optimization_barrier"
// CHECK:         return
func.func @lse_into_grad(%q: !ragged.tensor<?, [L], 2, 4, f32>, %g: !ragged.tensor<?, [L], 2, 4, f32>)
    -> (!ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>) {
  %o, %l = ragged.attention %q, %q, %q {scale = 0.5 : f64} : !ragged.tensor<?, [L], 2, 4, f32> lse !ragged.tensor<?, [L], 2, 1, f32>
  %dq, %dk, %dv = ragged.attention_grad %q, %q, %q, %g output(%o : !ragged.tensor<?, [L], 2, 4, f32>) lse(%l : !ragged.tensor<?, [L], 2, 1, f32>) {scale = 0.5 : f64} : !ragged.tensor<?, [L], 2, 4, f32>
  return %dq, %dk, %dv : !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>
}

// Nor does it drop weights: an attention with dropout is left for the
// linalg buckets as well.
// RAGGED-LABEL: func.func @with_dropout
// RAGGED-NOT:     iree_linalg_ext
// RAGGED:         ragged.attention {{.*}} dropout(
// CHECK-LABEL: func.func @with_dropout
// CHECK-NOT:     iree_linalg_ext.attention
// CHECK:         arith.cmpi uge
// CHECK:         return
func.func @with_dropout(%q: !ragged.tensor<?, [L], 2, 4, f32>, %seed: tensor<i64>) -> !ragged.tensor<?, [L], 2, 4, f32> {
  %o = ragged.attention %q, %q, %q dropout(%seed : tensor<i64>) {scale = 0.5 : f64, dropout = 0.1 : f64}
      : !ragged.tensor<?, [L], 2, 4, f32>
  return %o : !ragged.tensor<?, [L], 2, 4, f32>
}
