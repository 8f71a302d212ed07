// RUN: ragged-opt %s --convert-ragged-to-linalg="attention-buckets=3" | FileCheck %s --implicit-check-not=ragged.

// Attention by length buckets: bucket sizes ceil(maxL / 4), ceil(maxL / 2),
// maxL; each item's bucket and rank; then per bucket: its items, three
// gathers into dense [n, S, H, d] blocks, their lengths, the scores
// contraction over d, the masked max, sum and normalisation over the keys,
// and the weights x values contraction; finally each packed row is read back
// from its item's bucket through an scf.index_switch.
// CHECK-LABEL: func.func @attention
// CHECK-COUNT-3: arith.ceildivui
// CHECK:         %[[BUCKET:.*]] = linalg.generic {{.*}}iterator_types = ["parallel"]}
// CHECK:         %[[RANK:.*]] = linalg.generic {{.*}}iterator_types = ["parallel"]} ins(%[[BUCKET]]
// CHECK-COUNT-3: iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins({{.*}}) outs({{.*}} : tensor<?x2x?x?xf32>)
// CHECK:         %[[SEG:.*]] = linalg.generic {{.*}}iterator_types = ["parallel"]}
// CHECK:           scf.while
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel"]} ins(%[[SEG]]
// CHECK:           scf.index_switch
// CHECK:           case 0 {
// CHECK:           case 1 {
// CHECK:           default {
func.func @attention(%q: !ragged.tensor<?, [L], 2, 4, f32>, %k: !ragged.tensor<?, [L], 2, 4, f32>,
                     %v: !ragged.tensor<?, [L], 2, 4, f32>) -> !ragged.tensor<?, [L], 2, 4, f32> {
  %o = ragged.attention %q, %k, %v {scale = 0.5 : f64, causal} : !ragged.tensor<?, [L], 2, 4, f32>
  return %o : !ragged.tensor<?, [L], 2, 4, f32>
}
