// RUN: ragged-opt %s --convert-ragged-to-linalg="attention-buckets=3" | FileCheck %s --implicit-check-not=ragged.

// Attention by length buckets: bucket sizes ceil(maxL / 4), ceil(maxL / 2),
// maxL; each item's bucket and rank; then per bucket: its items, three
// gathers into dense [n, H, S, d] blocks viewed as [n * H, S, d], the scores
// as a transposed batch matmul, the masked max, sum and normalisation over
// the keys, and the weights x values batch matmul; finally each packed row is
// read back from its item's bucket through an scf.index_switch.
// CHECK-LABEL: func.func @attention
// CHECK-COUNT-3: arith.ceildivui
// CHECK:         %[[BUCKET:.*]] = linalg.generic {{.*}}iterator_types = ["parallel"]}
// CHECK:         %[[RANK:.*]] = linalg.generic {{.*}}iterator_types = ["parallel"]} ins(%[[BUCKET]]
// CHECK:         tensor.collapse_shape {{.*}} {{\[}}[0, 1], [2], [3]] : tensor<?x2x?x4xf32> into tensor<?x?x4xf32>
// CHECK:         linalg.batch_matmul indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}] ins({{.*}} : tensor<?x?x4xf32>, tensor<?x?x4xf32>) outs({{.*}} : tensor<?x?x?xf32>)
// CHECK-COUNT-3: iterator_types = ["parallel", "parallel", {{.*}}"]} ins({{.*}}) outs({{.*}} : tensor<?x?x{{.*}}xf32>)
// CHECK:         linalg.batch_matmul ins({{.*}} : tensor<?x?x?xf32>, tensor<?x?x4xf32>)
// CHECK:         tensor.expand_shape
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
