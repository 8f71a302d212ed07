// RUN: ragged-opt %s --convert-ragged-to-linalg="balance-tile=16" | FileCheck %s --implicit-check-not=ragged.

// With balance-tile, a segment reduction works on (segment, 16-row tile)
// units: tiles per segment (ceildiv), their scan, each tile's first and end
// row (binary search over the tile offsets), a generic reducing a static
// 16-row dim per tile, then the per-segment combine over the segment's tiles.
// CHECK-LABEL: func.func @sum
// CHECK-SAME:    (%[[V:.*]]: tensor<?x8xf32>, %[[O:.*]]: tensor<?xi64>) -> tensor<?x8xf32>
// CHECK:         %[[COUNTS:.*]] = linalg.generic
// CHECK:           arith.ceildivsi
// CHECK:         %[[TOFF:.*]] = linalg.generic
// CHECK:           scf.for
// CHECK:         %[[START:.*]] = linalg.generic
// CHECK:           scf.while
// CHECK:         %[[END:.*]] = linalg.generic
// CHECK:           scf.while
// CHECK:           arith.minui
// CHECK:         %[[DOMAIN:.*]] = tensor.empty() : tensor<16xf32>
// CHECK:         %[[PART:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "reduction", "parallel"]} ins(%[[START]], %[[END]], %[[DOMAIN]] : tensor<?xi64>, tensor<?xi64>, tensor<16xf32>)
// CHECK:           arith.cmpi ult
// CHECK:           tensor.extract %[[V]]
// CHECK:           arith.addf
// CHECK:         %[[FIRST:.*]] = tensor.extract_slice %[[TOFF]][0]
// CHECK:         %[[LAST:.*]] = tensor.extract_slice %[[TOFF]][1]
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%{{.*}}, %{{.*}}, %[[FIRST]], %[[LAST]] :
// CHECK:           scf.for
// CHECK:             tensor.extract %[[PART]]
// CHECK:           arith.select
func.func @sum(%x: !ragged.tensor<?, [L], 8, f32>) -> tensor<?x8xf32> {
  %s = ragged.reduce <sum> %x : !ragged.tensor<?, [L], 8, f32> -> tensor<?x8xf32>
  return %s : tensor<?x8xf32>
}
