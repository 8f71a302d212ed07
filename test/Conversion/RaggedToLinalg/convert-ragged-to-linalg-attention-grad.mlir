// RUN: ragged-opt %s --split-input-file --convert-ragged-to-linalg="attention-buckets=2" | FileCheck %s --implicit-check-not=ragged.
// RUN: ragged-opt %s --split-input-file --convert-ragged-to-linalg="attention-buckets=0" | FileCheck %s --check-prefix=EXACT --implicit-check-not=ragged.

// The gradient of attention by the forward's length buckets: the same
// schedule, then per bucket one gather of the four [n, S, H, d] blocks (q,
// k, v and the output's gradient) and the [n, S] mask of real slots; the
// scores, masked softmax and probabilities recomputed (P is 0 on padded
// query slots); dV = Pᵀ dO (P read transposed through its map: no
// transpose is materialised); dP = dO Vᵀ; the row sums of P dP; dS =
// scale P (dP - rowsum); dQ = dS K and dK = dSᵀ Q. Each gradient's blocks
// are concatenated into its slab, and one gather with three results reads
// every packed row back from the three slabs.
// CHECK-DAG:   #[[$Q5:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d2, d1, d4)>
// CHECK-DAG:   #[[$K5:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d1, d4)>
// CHECK-DAG:   #[[$S5:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
// CHECK-DAG:   #[[$W5:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
// CHECK-DAG:   #[[$WT5:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d4, d2)>
// CHECK-DAG:   #[[$V5:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d1, d3)>
// CHECK-DAG:   #[[$O5:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d2, d1, d3)>
// CHECK-LABEL: func.func @attention_grad
// CHECK-COUNT-1: arith.ceildivui
// CHECK:         %[[B:.*]]:4 = linalg.generic {{.*}} outs({{.*}} : tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>)
// CHECK:         %[[MASK:.*]] = linalg.generic {{.*}} outs({{.*}} : tensor<?x?xi1>)
// CHECK:         %[[SC:.*]] = linalg.generic {indexing_maps = [#[[$Q5]], #[[$K5]], #[[$S5]]], {{.*}} ins(%[[B]]#0, %[[B]]#1 :
// CHECK:           arith.maximumf
// CHECK:           math.exp
// CHECK:         %[[P:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins({{.*}}, %[[MASK]] :
// CHECK:           arith.divf
// CHECK:           arith.select
// CHECK:         %[[DV:.*]] = linalg.generic {indexing_maps = [#[[$WT5]], #[[$V5]], #[[$O5]]], {{.*}} ins(%[[P]], %[[B]]#3 :
// CHECK:         %[[DP:.*]] = linalg.generic {indexing_maps = [#[[$Q5]], #[[$K5]], #[[$S5]]], {{.*}} ins(%[[B]]#3, %[[B]]#2 :
// CHECK:         %[[ROW:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[P]], %[[DP]] :
// CHECK:         %[[DS:.*]] = linalg.generic {{.*}} ins(%[[P]], %[[DP]], %[[ROW]] :
// CHECK:           arith.subf
// CHECK:           arith.mulf
// CHECK:           arith.mulf
// CHECK:         %[[DQ:.*]] = linalg.generic {indexing_maps = [#[[$W5]], #[[$V5]], #[[$O5]]], {{.*}} ins(%[[DS]], %[[B]]#1 :
// CHECK:         %[[DK:.*]] = linalg.generic {indexing_maps = [#[[$WT5]], #[[$V5]], #[[$O5]]], {{.*}} ins(%[[DS]], %[[B]]#0 :
// CHECK:         linalg.generic {{.*}} outs({{.*}} : tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>)
// CHECK-COUNT-3: tensor.concat dim(0)
// CHECK:         %[[OUT:.*]]:3 = linalg.generic {{.*}} outs({{.*}} : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>)
// CHECK-DAG:     %[[DQROWS:.*]] = tensor.expand_shape %[[OUT]]#0
// CHECK-DAG:     %[[DKROWS:.*]] = tensor.expand_shape %[[OUT]]#1
// CHECK-DAG:     %[[DVROWS:.*]] = tensor.expand_shape %[[OUT]]#2
// CHECK:         return %[[DQROWS]], %{{.*}}, %[[DKROWS]], %{{.*}}, %[[DVROWS]], %{{.*}} :
// With attention-buckets=0 the forward is exact, the gradient takes the
// default ladder (16 buckets: 15 sizes computed, and max L).
// EXACT-LABEL: func.func @attention_grad
// EXACT-COUNT-15: arith.ceildivui {{.*}}, %c1073741824
// EXACT-NOT:     arith.ceildivui {{.*}}, %c1073741824
// EXACT-COUNT-3: tensor.concat dim(0)
func.func @attention_grad(%q: !ragged.tensor<?, [L], 2, 4, f32>, %k: !ragged.tensor<?, [L], 2, 4, f32>,
                          %v: !ragged.tensor<?, [L], 2, 4, f32>, %g: !ragged.tensor<?, [L], 2, 4, f32>)
    -> (!ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>) {
  %dq, %dk, %dv = ragged.attention_grad %q, %k, %v, %g {scale = 0.5 : f64, causal} : !ragged.tensor<?, [L], 2, 4, f32>
  return %dq, %dk, %dv : !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>
}

// -----

// q, k and v the same tensor: one gather of it and one of the gradient.
// CHECK-LABEL: func.func @self_attention_grad
// CHECK:         %[[XB:.*]] = linalg.generic {{.*}} outs({{.*}} : tensor<?x?x2x4xf32>)
// CHECK-NEXT:    ^bb0
// CHECK:         %[[GB:.*]] = linalg.generic {{.*}} outs({{.*}} : tensor<?x?x2x4xf32>)
// CHECK-NEXT:    ^bb0
// CHECK:         linalg.generic {{.*}} ins(%[[XB]], %[[XB]] :
func.func @self_attention_grad(%x: !ragged.tensor<?, [L], 2, 4, f32>, %g: !ragged.tensor<?, [L], 2, 4, f32>)
    -> (!ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>) {
  %dq, %dk, %dv = ragged.attention_grad %x, %x, %x, %g {scale = 0.5 : f64} : !ragged.tensor<?, [L], 2, 4, f32>
  return %dq, %dk, %dv : !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>
}

// -----

// A training forward returns its lse (max + log(sum) per query slot, its
// own [n, S, H, 1] block, slab and gather back), and the gradient takes
// the forward's output and lse as blocks too (the lse gathered on its own,
// being of another shape). P is then an elementwise consumer of the scores,
// exp(scale s - lse) with no reduction over keys, and rowsum(P dP) is
// rowsum(dO O), a reduction over the head size.
// CHECK-LABEL: func.func @attention_saved
// CHECK:         math.log
// CHECK:         tensor.concat dim(0) {{.*}} -> tensor<?x2x1xf32>
// CHECK:         linalg.generic {{.*}} outs({{.*}} : tensor<?x2xf32>)
// CHECK:         %[[B:.*]]:5 = linalg.generic {{.*}} outs({{.*}} : tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>)
// CHECK:         %[[L:.*]] = linalg.generic {{.*}} outs({{.*}} : tensor<?x?x2x1xf32>)
// CHECK:         %[[SC:.*]] = linalg.generic {{.*}} ins(%[[B]]#0, %[[B]]#1 : {{.*}}) outs({{.*}} : tensor<?x2x?x?xf32>)
// CHECK-NOT:       arith.maximumf
// CHECK:         %[[P:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%[[SC]], %{{.*}}, %{{.*}}, %[[L]] :
// CHECK:           arith.subf
// CHECK:           math.exp
// CHECK:           arith.select
// CHECK:         linalg.generic {{.*}} ins(%[[P]], %[[B]]#3 :
// CHECK:         %[[DP:.*]] = linalg.generic {{.*}} ins(%[[B]]#3, %[[B]]#2 :
// CHECK:         %[[ROW:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[B]]#3, %[[B]]#4 :
// CHECK:         linalg.generic {{.*}} ins(%[[P]], %[[DP]], %[[ROW]] :
// CHECK-COUNT-3: tensor.concat dim(0)
// With attention-buckets=0 the forward that returns its lse runs by buckets
// (the default ladder) all the same.
// EXACT-LABEL: func.func @attention_saved
// EXACT:         math.log
// EXACT:         tensor.concat dim(0) {{.*}} -> tensor<?x2x1xf32>
func.func @attention_saved(%q: !ragged.tensor<?, [L], 2, 4, f32>, %k: !ragged.tensor<?, [L], 2, 4, f32>,
                           %v: !ragged.tensor<?, [L], 2, 4, f32>, %g: !ragged.tensor<?, [L], 2, 4, f32>)
    -> (!ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>) {
  %o, %l = ragged.attention %q, %k, %v {scale = 0.5 : f64, causal}
      : !ragged.tensor<?, [L], 2, 4, f32> lse !ragged.tensor<?, [L], 2, 1, f32>
  %dq, %dk, %dv = ragged.attention_grad %q, %k, %v, %g output(%o : !ragged.tensor<?, [L], 2, 4, f32>)
      lse(%l : !ragged.tensor<?, [L], 2, 1, f32>) {scale = 0.5 : f64, causal} : !ragged.tensor<?, [L], 2, 4, f32>
  return %dq, %dk, %dv : !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>
}

// -----

// Dropout, forward: the seed's halves are read once; per bucket, the item of
// each block; the weights exp(logit - max) are summed undropped, then times
// each pair's factor (MurmurHash3's finaliser twice over item, head, query
// and key, xor the seed's low then high half; kept when at least
// p 2^32 = 2^30: 1 / (1 - p), else 0) before the product with V.
// CHECK-LABEL: func.func @attention_dropout
// CHECK:         %[[S:.*]] = tensor.extract %arg{{[0-9]+}}[] : tensor<i64>
// CHECK:         %[[LO:.*]] = arith.trunci %[[S]] : i64 to i32
// CHECK:         %[[HI0:.*]] = arith.shrui %[[S]], %{{.*}} : i64
// CHECK:         %[[HI:.*]] = arith.trunci %[[HI0]] : i64 to i32
// CHECK:         linalg.generic {{.*}} outs({{.*}} : tensor<?x?xi1>)
// CHECK:         %[[ITEMS:.*]] = linalg.generic {{.*}} outs({{.*}} : tensor<?xi64>)
// CHECK:         %[[W:.*]] = linalg.generic {{.*}} ins({{.*}} : tensor<?x2x?x?xf32>, tensor<?x?xi1>, tensor<?x2x?xf32>)
// CHECK:           math.exp
// CHECK:         %[[SUMS:.*]] = linalg.generic {{.*}} ins(%[[W]] : tensor<?x2x?x?xf32>)
// CHECK:         %[[D:.*]] = linalg.generic {{.*}} ins(%[[W]], %[[ITEMS]] : tensor<?x2x?x?xf32>, tensor<?xi64>)
// CHECK:           arith.xori %{{.*}}, %[[LO]] : i32
// CHECK:           arith.xori %{{.*}}, %[[HI]] : i32
// CHECK:           %[[KEPT:.*]] = arith.cmpi uge, %{{.*}}, %c1073741824_i32 : i32
// CHECK:           %[[F:.*]] = arith.select %[[KEPT]], %cst{{.*}}, %cst{{.*}} : f32
// CHECK:           arith.mulf %in, %[[F]] : f32
// CHECK:         %[[PV:.*]] = linalg.generic {{.*}} ins(%[[D]], %{{.*}} :
// CHECK:         linalg.generic {{.*}} ins(%[[PV]], %[[SUMS]] :
// CHECK:           arith.divf
// With attention-buckets=0 an attention that drops runs by buckets too (the
// default ladder).
// EXACT-LABEL: func.func @attention_dropout
// EXACT-COUNT-15: arith.ceildivui {{.*}}, %c1073741824
// EXACT:         arith.cmpi uge
func.func @attention_dropout(%q: !ragged.tensor<?, [L], 2, 4, f32>, %seed: tensor<i64>) -> !ragged.tensor<?, [L], 2, 4, f32> {
  %o = ragged.attention %q, %q, %q dropout(%seed : tensor<i64>) {dropout = 0.25 : f64} : !ragged.tensor<?, [L], 2, 4, f32>
  return %o : !ragged.tensor<?, [L], 2, 4, f32>
}

// -----

// Dropout, gradient: P recomputed, PD = P times the same factors; dV = PDᵀ
// dO; the row sums of PD dP; dS = scale (PD dP - P rowsum).
// CHECK-LABEL: func.func @attention_grad_dropout
// CHECK:         tensor.extract %arg{{[0-9]+}}[] : tensor<i64>
// CHECK:         linalg.generic {{.*}} outs({{.*}} : tensor<?x?xi1>)
// CHECK:         %[[ITEMS:.*]] = linalg.generic {{.*}} outs({{.*}} : tensor<?xi64>)
// CHECK:         %[[P:.*]] = linalg.generic {{.*}} ins({{.*}} : tensor<?x2x?x?xf32>, tensor<?x2x?xf32>, tensor<?x?xi1>)
// CHECK:           arith.divf
// CHECK:         %[[PD:.*]] = linalg.generic {{.*}} ins(%[[P]], %[[ITEMS]] : tensor<?x2x?x?xf32>, tensor<?xi64>)
// CHECK:           arith.cmpi uge
// CHECK:         %[[DV:.*]] = linalg.generic {{.*}} ins(%[[PD]], %{{.*}} :
// CHECK:         %[[DP:.*]] = linalg.generic {{.*}} ins(%{{.*}}, %{{.*}} : tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>)
// CHECK:         %[[ROW:.*]] = linalg.generic {{.*}} ins(%[[PD]], %[[DP]] :
// CHECK:         %[[DS:.*]] = linalg.generic {{.*}} ins(%[[P]], %[[PD]], %[[DP]], %[[ROW]] :
// CHECK:           arith.mulf
// CHECK:           arith.mulf
// CHECK:           arith.subf
// CHECK:           arith.mulf
func.func @attention_grad_dropout(%q: !ragged.tensor<?, [L], 2, 4, f32>, %g: !ragged.tensor<?, [L], 2, 4, f32>,
                                  %seed: tensor<i64>) -> !ragged.tensor<?, [L], 2, 4, f32> {
  %dq, %dk, %dv = ragged.attention_grad %q, %q, %q, %g dropout(%seed : tensor<i64>) {dropout = 0.25 : f64}
      : !ragged.tensor<?, [L], 2, 4, f32>
  return %dv : !ragged.tensor<?, [L], 2, 4, f32>
}
