// RUN: ragged-opt %s --convert-ragged-to-linalg="attention-buckets=3" | FileCheck %s --implicit-check-not=ragged.

// Attention by length buckets: bucket sizes ceil(maxL / 4), ceil(maxL / 2),
// maxL; each item's bucket and the bucket counts (read on the host: they
// size the blocks); each item's rank and first slab row, and the item at each
// rank; one generic computing every slab row's source row and key mask, one
// gather of q, k and v into slabs; then per bucket its [n, S, H, d] slice
// transposed to [n, H, S, d] for the scores' transposed batch matmul, the
// masked max, sum and normalisation over the keys, the weights x values batch
// matmul, and the transpose back into the output slab; finally each packed
// row is read back from the output slab.
// CHECK-LABEL: func.func @attention
// CHECK-COUNT-3: arith.ceildivui
// CHECK:         %[[BUCKET:.*]] = linalg.generic {{.*}}iterator_types = ["parallel"]}
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "reduction"]} ins(%[[BUCKET]] : tensor<?xi64>) outs({{.*}} : tensor<3xi64>)
// CHECK-COUNT-3: tensor.from_elements {{.*}} : tensor<3xi64>
// CHECK:         %[[RANK:.*]] = linalg.generic {{.*}}iterator_types = ["parallel"]} ins(%[[BUCKET]]
// CHECK:           scf.for
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel"]} ins(%[[BUCKET]], %[[RANK]]
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel"]} outs
// CHECK:           scf.for
// CHECK:         %[[ROWS:.*]]:2 = linalg.generic {{.*}}iterator_types = ["parallel"]} outs({{.*}} : tensor<?xi64>, tensor<?xi1>)
// CHECK:         %[[SLABS:.*]]:3 = linalg.generic {{.*}}ins(%[[ROWS]]#0 : tensor<?xi64>) outs({{.*}} : tensor<?x2x4xf32>, tensor<?x2x4xf32>, tensor<?x2x4xf32>)
// CHECK-COUNT-3: tensor.extract
// CHECK:         tensor.expand_shape {{.*}} {{\[}}[0, 1]] {{.*}} : tensor<?xi1> into tensor<?x?xi1>
// CHECK:         linalg.transpose ins({{.*}} : tensor<?x?x2x4xf32>) outs({{.*}} : tensor<?x2x?x4xf32>) permutation = [0, 2, 1, 3]
// CHECK:         linalg.batch_matmul indexing_maps = [#{{.*}}, #{{.*}}, #{{.*}}] ins({{.*}} : tensor<?x?x4xf32>, tensor<?x?x4xf32>) outs({{.*}} : tensor<?x?x?xf32>)
// CHECK-COUNT-3: iterator_types = ["parallel", "parallel", {{.*}}"]} ins({{.*}}) outs({{.*}} : tensor<?x?x{{.*}}xf32>)
// CHECK:         linalg.batch_matmul ins({{.*}} : tensor<?x?x?xf32>, tensor<?x?x4xf32>)
// CHECK:         linalg.transpose ins({{.*}} : tensor<?x2x?x4xf32>) outs({{.*}} : tensor<?x?x2x4xf32>) permutation = [0, 2, 1, 3]
// CHECK:         tensor.insert_slice
// CHECK:         %[[SLABROW:.*]] = linalg.generic {{.*}}iterator_types = ["parallel"]}
// CHECK:           scf.while
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel"]} ins(%[[SLABROW]] : tensor<?xi64>)
func.func @attention(%q: !ragged.tensor<?, [L], 2, 4, f32>, %k: !ragged.tensor<?, [L], 2, 4, f32>,
                     %v: !ragged.tensor<?, [L], 2, 4, f32>) -> !ragged.tensor<?, [L], 2, 4, f32> {
  %o = ragged.attention %q, %k, %v {scale = 0.5 : f64, causal} : !ragged.tensor<?, [L], 2, 4, f32>
  return %o : !ragged.tensor<?, [L], 2, 4, f32>
}
