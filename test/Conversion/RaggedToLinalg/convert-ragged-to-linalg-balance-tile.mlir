// RUN: ragged-opt %s --convert-ragged-to-linalg="balance-tile=2" --canonicalize --cse --split-input-file | FileCheck %s --implicit-check-not=ragged.
// RUN: not ragged-opt %s --convert-ragged-to-linalg="balance-tile=65" --split-input-file 2>&1 | FileCheck %s --check-prefix=RANGE

// RANGE: balance-tile must be in [0, 64], got 65

// Segment reductions over row tiles (the default, 16 rows; 2 here). The
// tile tables: a scan of the tiles per segment (ceildiv of the segment's
// length), then one generic over a bound on the tile count (from the shapes
// alone) giving each tile's first row (binary search over the tile scan)
// and segment. The tile generic reads its bounds as two slices of the row
// table and each of its rows with tensor.extract (the first row read at the
// tile index, so it is uniform across the trailing dim); slots past the
// tile's end select the identity. The segment generic combines each
// segment's tiles [first, last) and selects `empty` for an empty segment.
// The tile generics carry `ragged.whole_rows`, for ragged-cpu-whole-rows.
// CHECK-DAG:   #[[$TILE:.*]] = affine_map<(d0, d1) -> (d0)>
// CHECK-DAG:   #[[$ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @sum
// CHECK-SAME:    (%[[V:.*]]: tensor<?x8xf32>, %[[O:.*]]: tensor<?xi64>) -> tensor<?x8xf32>
// CHECK:         linalg.generic
// CHECK:           scf.for
// CHECK:             tensor.extract %[[O]]
// CHECK:             tensor.extract %[[O]]
// CHECK:             arith.subi
// CHECK:             arith.ceildivsi
// CHECK:         linalg.generic
// CHECK:         %[[TOFF:.*]] = linalg.generic
// CHECK:           scf.for
// CHECK:             tensor.extract %[[O]]
// CHECK:             tensor.extract %[[O]]
// CHECK:             arith.subi
// CHECK:             arith.ceildivsi
// CHECK:         %[[FIRST:.*]] = tensor.extract_slice %[[TOFF]][0]
// CHECK:         %[[LAST:.*]] = tensor.extract_slice %[[TOFF]][1]
// CHECK:         %[[TABLES:.*]]:2 = linalg.generic
// CHECK:           scf.while
// CHECK:             tensor.extract %[[TOFF]]
// CHECK:           arith.minui
// CHECK:         %[[STARTS:.*]] = tensor.extract_slice %[[TABLES]]#0[0]
// CHECK:         %[[ENDS:.*]] = tensor.extract_slice %[[TABLES]]#0[1]
// CHECK:         %[[PART:.*]] = linalg.generic {indexing_maps = [#[[$TILE]], #[[$TILE]], #[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[STARTS]], %[[ENDS]] : tensor<?xi64>, tensor<?xi64>)
// CHECK-SAME:      attrs = {ragged.whole_rows}
// CHECK:           %[[ROW0:.*]] = tensor.extract %[[TABLES]]#0[%{{.*}}]
// CHECK:           tensor.extract %[[V]]
// CHECK:           arith.cmpi sgt
// CHECK:           tensor.extract %[[V]]
// CHECK:           arith.cmpi sgt
// CHECK-NOT:       tensor.extract %[[V]]
// CHECK:           arith.select
// CHECK:           arith.select
// CHECK:           arith.addf
// CHECK:         linalg.generic {indexing_maps = [#[[$TILE]], #[[$TILE]], #[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[FIRST]], %[[LAST]] :
// CHECK:           scf.for
// CHECK:             tensor.extract %[[PART]]
// CHECK:           arith.select
func.func @sum(%x: !ragged.tensor<?, [L], 8, f32>) -> tensor<?x8xf32> {
  %s = ragged.reduce <sum> %x : !ragged.tensor<?, [L], 8, f32> -> tensor<?x8xf32>
  return %s : tensor<?x8xf32>
}

// -----

// Softmax over row tiles: one tile generic gives each tile's max m and sum
// of exp(x - m) (two results); the segment max M combines the tiles' m; a
// second tile generic rescales each tile's sum by exp(m - M), reading M at
// the tile's segment; the segment generic sums those into
// lse = M + log(sum). The output generic is the same as without tiles.
// CHECK-LABEL: func.func @softmax
// CHECK-SAME:    (%[[V:.*]]: tensor<?x8xf32>, %[[O:.*]]: tensor<?xi64>)
// CHECK:         %[[TABLES:.*]]:2 = linalg.generic
// CHECK:         %[[STATS:.*]]:2 = linalg.generic {{.*}} ins(%[[STARTS:.*]], %[[ENDS:.*]] : tensor<?xi64>, tensor<?xi64>)
// CHECK-SAME:      attrs = {ragged.whole_rows}
// CHECK:           tensor.extract %[[V]]
// CHECK:           tensor.extract %[[V]]
// CHECK:           arith.maximumf
// CHECK:           math.exp
// CHECK:           math.exp
// CHECK:         %[[MAX:.*]] = linalg.generic
// CHECK:           scf.for
// CHECK:             tensor.extract %[[STATS]]#0
// CHECK:             arith.maximumf
// CHECK:         %[[SCALED:.*]] = linalg.generic {{.*}} ins(%[[STARTS]], %[[ENDS]], %[[STATS]]#0, %[[STATS]]#1 :
// CHECK-SAME:      attrs = {ragged.whole_rows}
// CHECK:           %[[SEG:.*]] = tensor.extract %[[TABLES]]#1
// CHECK:           tensor.extract %[[MAX]]
// CHECK:           math.exp
// CHECK:           arith.mulf
// CHECK:         %[[LSE:.*]] = linalg.generic
// CHECK:           scf.for
// CHECK:             tensor.extract %[[SCALED]]
// CHECK:             arith.addf
// CHECK:           tensor.extract %[[MAX]]
// CHECK:           math.log
// CHECK:         %[[R:.*]] = linalg.generic {{.*}} ins(%[[V]], %{{.*}} : tensor<?x8xf32>, tensor<?xi64>)
// CHECK-SAME:      attrs = {ragged.whole_rows}
// CHECK:           tensor.extract %[[LSE]]
// CHECK:           arith.subf
// CHECK:           math.exp
// CHECK:           arith.select
// CHECK:         return %[[R]], %[[O]]
func.func @softmax(%x: !ragged.tensor<?, [L], 8, f32>) -> !ragged.tensor<?, [L], 8, f32> {
  %y = ragged.softmax %x : !ragged.tensor<?, [L], 8, f32>
  return %y : !ragged.tensor<?, [L], 8, f32>
}
