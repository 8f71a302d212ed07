// RUN: ragged-opt %s --split-input-file --convert-ragged-to-linalg="attention-buckets=3" | FileCheck %s --implicit-check-not=ragged.

// Attention by length buckets: bucket sizes sqrt(2) apart, ceil(maxL / 2),
// ceil(maxL / sqrt(2)) (in 2^-30 fixed point) and maxL; each item's bucket;
// a stable counting sort of the items by bucket in two levels (the items of
// each bucket per chunk of 64 items, their prefix over the chunks, whose
// last row is the bucket counts the host reads to size the blocks); the
// per-bucket tables (first slab row, first rank, size) computed on the
// device from those counts; each item's first output-slab row (its chunk's
// prefix plus a walk within the chunk), and the item at each rank (a
// binary search over the chunks' prefixes, then a walk). Then per bucket:
// one gather of its [n, S, H, d] blocks of q,
// k and v and its [n, S] key mask; the scores [n, H, S, S] as a contraction
// reading the blocks in place (loops item, head, query, key, head column);
// the masked max, exp and sum over the keys; weights x values as a second
// contraction back to [n, S, H, d] (the key loop innermost); the
// normalisation. The buckets' outputs, concatenated, are the output slab
// (IREE writes each attention's result in place there); finally each packed
// row is read back from it, flat ([rows, H * d]), its slab row read with
// tensor.extract from a table with one entry more than there are rows (an
// input would let IREE fuse the row search into every element), whose first
// `rows` entries are an input mapped by row: IREE then keeps the row dim
// apart.
// CHECK-DAG:   #[[$Q5:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d2, d1, d4)>
// CHECK-DAG:   #[[$K5:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d3, d1, d4)>
// CHECK-DAG:   #[[$S5:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d3)>
// CHECK-DAG:   #[[$W5:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d1, d2, d4)>
// CHECK-DAG:   #[[$V5:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d4, d1, d3)>
// CHECK-DAG:   #[[$O5:.*]] = affine_map<(d0, d1, d2, d3, d4) -> (d0, d2, d1, d3)>
// CHECK-LABEL: func.func @attention
// CHECK:         arith.muli %[[MAXL:.*]], %c536870912
// CHECK:         arith.ceildivui {{.*}}, %c1073741824
// CHECK:         arith.muli %[[MAXL]], %c759250125
// CHECK:         arith.ceildivui {{.*}}, %c1073741824
// CHECK-NOT:     arith.ceildivui
// CHECK:         %[[BUCKET:.*]] = linalg.generic {{.*}}iterator_types = ["parallel"]}
// CHECK:         %[[CHUNKS:.*]] = arith.ceildivui %{{.*}}, %c64
// CHECK:         %[[PER:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]} outs({{.*}} : tensor<?x3xi64>)
// CHECK:           scf.for
// CHECK:             tensor.extract %[[BUCKET]]
// CHECK:         %[[FIRST:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]} outs({{.*}} : tensor<?x3xi64>)
// CHECK:           scf.for
// CHECK:             tensor.extract %[[PER]]
// CHECK-COUNT-3: tensor.extract %[[FIRST]][%[[CHUNKS]], %{{.*}}]
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel"]} outs({{.*}} : tensor<3xi64>, tensor<3xi64>, tensor<3xi64>)
// CHECK-COUNT-3:   tensor.extract %[[FIRST]][%[[CHUNKS]], %{{.*}}]
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel"]} ins(%[[BUCKET]]
// CHECK:           scf.for
// CHECK:           tensor.extract %[[FIRST]]
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel"]} outs
// CHECK:           scf.while
// CHECK:             tensor.extract %[[FIRST]]
// CHECK:           scf.for
// CHECK:             tensor.extract %[[BUCKET]]
// CHECK:         %[[BLOCKS:.*]]:3 = linalg.generic {{.*}} outs({{.*}} : tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>)
// CHECK:         %[[MASK:.*]] = linalg.generic {{.*}} outs({{.*}} : tensor<?x?xi1>)
// CHECK:         %[[SCORES:.*]] = linalg.generic {indexing_maps = [#[[$Q5]], #[[$K5]], #[[$S5]]], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%[[BLOCKS]]#0, %[[BLOCKS]]#1 : tensor<?x?x2x4xf32>, tensor<?x?x2x4xf32>) outs({{.*}} : tensor<?x2x?x?xf32>)
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[SCORES]], %[[MASK]] : tensor<?x2x?x?xf32>, tensor<?x?xi1>)
// CHECK:           arith.cmpi ule
// CHECK:           arith.maximumf
// CHECK:         %[[W:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel"]} ins(%[[SCORES]], %[[MASK]]
// CHECK:           math.exp
// CHECK:         %[[SUMS:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "reduction"]} ins(%[[W]] : tensor<?x2x?x?xf32>)
// CHECK:         %[[OUT:.*]] = linalg.generic {indexing_maps = [#[[$W5]], #[[$V5]], #[[$O5]]], iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%[[W]], %[[BLOCKS]]#2 : tensor<?x2x?x?xf32>, tensor<?x?x2x4xf32>) outs({{.*}} : tensor<?x?x2x4xf32>)
// CHECK:         linalg.generic {{.*}} ins(%[[OUT]], %[[SUMS]] : tensor<?x?x2x4xf32>, tensor<?x2x?xf32>)
// CHECK:           arith.divf
// CHECK:         %[[FLAT0:.*]] = tensor.collapse_shape
// CHECK:         %[[FLAT1:.*]] = tensor.collapse_shape
// CHECK:         %[[FLAT2:.*]] = tensor.collapse_shape
// CHECK:         %[[SLAB:.*]] = tensor.concat dim(0) %[[FLAT0]], %[[FLAT1]], %[[FLAT2]] : (tensor<?x2x4xf32>, tensor<?x2x4xf32>, tensor<?x2x4xf32>) -> tensor<?x2x4xf32>
// CHECK:         %[[ROWS:.*]] = tensor.dim %arg0, %c0{{.*}} : tensor<?x2x4xf32>
// CHECK:         %[[ROWS1:.*]] = arith.addi %[[ROWS]], %c1
// CHECK:         %[[SLABROW:.*]] = linalg.generic {{.*}}iterator_types = ["parallel"]} outs({{.*}} : tensor<?xi64>)
// CHECK:           scf.while
// CHECK:         %[[ROWOPERAND:.*]] = tensor.extract_slice %[[SLABROW]][0] [%[[ROWS]]] [1]
// CHECK:         %[[FLATSLAB:.*]] = tensor.collapse_shape %[[SLAB]] {{\[\[}}0], [1, 2]] : tensor<?x2x4xf32> into tensor<?x8xf32>
// CHECK:         %[[FLATOUT:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]} ins(%[[ROWOPERAND]] : tensor<?xi64>) outs({{.*}} : tensor<?x8xf32>)
// CHECK:           tensor.extract %[[SLABROW]]
// CHECK:           tensor.extract %[[FLATSLAB]]
// CHECK:           arith.select
// CHECK:         tensor.expand_shape %[[FLATOUT]] {{\[\[}}0], [1, 2]] output_shape [%[[ROWS]], 2, 4]
// CHECK-NOT:     linalg.transpose
// CHECK-NOT:     linalg.batch_matmul
func.func @attention(%q: !ragged.tensor<?, [L], 2, 4, f32>, %k: !ragged.tensor<?, [L], 2, 4, f32>,
                     %v: !ragged.tensor<?, [L], 2, 4, f32>) -> !ragged.tensor<?, [L], 2, 4, f32> {
  %o = ragged.attention %q, %k, %v {scale = 0.5 : f64, causal} : !ragged.tensor<?, [L], 2, 4, f32>
  return %o : !ragged.tensor<?, [L], 2, 4, f32>
}

// -----

// A shared operand is gathered once, by a gather of its own: q = k = v gives
// one block per bucket, read by both contractions.
// CHECK-LABEL: func.func @self_attention
// CHECK:         %[[XB:.*]] = linalg.generic {{.*}} outs({{.*}} : tensor<?x?x2x4xf32>)
// CHECK-NEXT:    ^bb0
// CHECK-NOT:     outs({{.*}} : tensor<?x?x2x4xf32>)
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel", "reduction"]} ins(%[[XB]], %[[XB]] :
func.func @self_attention(%x: !ragged.tensor<?, [L], 2, 4, f32>) -> !ragged.tensor<?, [L], 2, 4, f32> {
  %o = ragged.attention %x, %x, %x {scale = 0.5 : f64} : !ragged.tensor<?, [L], 2, 4, f32>
  return %o : !ragged.tensor<?, [L], 2, 4, f32>
}

// -----

// The schedule depends on the offsets alone and is computed where they are
// defined, before the work that produces q, k and v: the host reads the
// bucket counts before it queues any of that work, rather than splitting it
// into a submission before the read and one after.
// CHECK-LABEL: func.func @schedule_first
// CHECK-COUNT-2: arith.ceildivui {{.*}}, %c1073741824
// CHECK:         linalg.generic {{.*}}outs({{.*}} : tensor<?x3xi64>)
// CHECK:         linalg.map { math.exp }
func.func @schedule_first(%values: tensor<?x2x4xf32>, %offsets: tensor<?xi64>) -> tensor<?x2x4xf32> {
  %c0 = arith.constant 0 : index
  %n = tensor.dim %values, %c0 : tensor<?x2x4xf32>
  %init = tensor.empty(%n) : tensor<?x2x4xf32>
  %e = linalg.map { math.exp } ins(%values : tensor<?x2x4xf32>) outs(%init : tensor<?x2x4xf32>)
  %x = ragged.pack %e[%offsets] : tensor<?x2x4xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], 2, 4, f32>
  %o = ragged.attention %x, %x, %x {scale = 0.5 : f64} : !ragged.tensor<?, [L], 2, 4, f32>
  %r = ragged.values %o : !ragged.tensor<?, [L], 2, 4, f32> -> tensor<?x2x4xf32>
  return %r : tensor<?x2x4xf32>
}
