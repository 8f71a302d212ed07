// RUN: ragged-opt %s --convert-ragged-to-linalg="attention-buckets=0 balance-tile=0" --split-input-file | FileCheck %s --implicit-check-not=ragged.

// The structure of the lowering of each compute op. Per-token ops become
// dense linalg on the packed values; per-item ops become a fixed number of
// linalg.generics whose bodies read the segment bounds from the offsets.
// Reductions and softmax here loop over each segment's rows (balance-tile=0);
// their default, row tiles, is in convert-ragged-to-linalg-balance-tile.mlir.

//===----------------------------------------------------------------------===//
// Per-token ops: unary, binary, matmul, layer_norm
//===----------------------------------------------------------------------===//

// One parallel generic over the packed values; the offsets pass through.
// CHECK-DAG:   #[[$ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @unary
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x8xf32>, %[[O:[^:]*]]: tensor<?xi64>)
// CHECK-SAME:    -> (tensor<?x8xf32>, tensor<?xi64>)
// CHECK:         %[[INIT:.*]] = tensor.empty(%{{.*}}) : tensor<?x8xf32>
// CHECK-NEXT:    %[[R:.*]] = linalg.generic {indexing_maps = [#[[$ID]], #[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[V]] : tensor<?x8xf32>) outs(%[[INIT]] : tensor<?x8xf32>)
// CHECK:           math.erf
// CHECK:           linalg.yield
// CHECK-NEXT:    } -> tensor<?x8xf32>
// CHECK-NEXT:    return %[[R]], %[[O]] : tensor<?x8xf32>, tensor<?xi64>
func.func @unary(%x: !ragged.tensor<?, [L], 8, f32>) -> !ragged.tensor<?, [L], 8, f32> {
  %y = ragged.unary <gelu> %x : !ragged.tensor<?, [L], 8, f32>
  return %y : !ragged.tensor<?, [L], 8, f32>
}

// -----

// A dense rhs is read through a minor-identity map (a rank-0 one through the
// empty map), a ragged rhs through the identity on its packed values.
// CHECK-DAG:   #[[$ID:.*]] = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-DAG:   #[[$MINOR:.*]] = affine_map<(d0, d1, d2) -> (d2)>
// CHECK-DAG:   #[[$SCALAR:.*]] = affine_map<(d0, d1, d2) -> ()>
// CHECK-LABEL: func.func @binary
// CHECK-SAME:    (%[[X:[^:]*]]: tensor<?x2x8xf32>, %[[XO:[^:]*]]: tensor<?xi64>, %[[B:[^:]*]]: tensor<8xf32>,
// CHECK-SAME:     %[[Y:[^:]*]]: tensor<?x2x8xf32>, %[[YO:[^:]*]]: tensor<?xi64>, %[[S:[^:]*]]: tensor<f32>)
// CHECK:         %[[A:.*]] = linalg.generic {indexing_maps = [#[[$ID]], #[[$MINOR]], #[[$ID]]], iterator_types = ["parallel", "parallel", "parallel"]}
// CHECK-SAME:      ins(%[[X]], %[[B]] : tensor<?x2x8xf32>, tensor<8xf32>)
// CHECK:           arith.addf
// CHECK:         %[[C:.*]] = linalg.generic {indexing_maps = [#[[$ID]], #[[$ID]], #[[$ID]]], iterator_types = ["parallel", "parallel", "parallel"]}
// CHECK-SAME:      ins(%[[A]], %[[Y]] : tensor<?x2x8xf32>, tensor<?x2x8xf32>)
// CHECK:           arith.mulf
// CHECK:         %[[D:.*]] = linalg.generic {indexing_maps = [#[[$ID]], #[[$SCALAR]], #[[$ID]]], iterator_types = ["parallel", "parallel", "parallel"]}
// CHECK-SAME:      ins(%[[C]], %[[S]] : tensor<?x2x8xf32>, tensor<f32>)
// CHECK:           arith.maximumf
// CHECK:         return %[[D]], %[[XO]] : tensor<?x2x8xf32>, tensor<?xi64>
func.func @binary(%x: !ragged.tensor<?, [L], 2, 8, f32>, %b: tensor<8xf32>,
                  %y: !ragged.tensor<?, [L], 2, 8, f32>, %s: tensor<f32>) -> !ragged.tensor<?, [L], 2, 8, f32> {
  %a = ragged.binary <add> %x, %b : !ragged.tensor<?, [L], 2, 8, f32>, tensor<8xf32>
  %c = ragged.binary <mul> %a, %y : !ragged.tensor<?, [L], 2, 8, f32>, !ragged.tensor<?, [L], 2, 8, f32>
  %d = ragged.binary <max> %c, %s : !ragged.tensor<?, [L], 2, 8, f32>, tensor<f32>
  return %d : !ragged.tensor<?, [L], 2, 8, f32>
}

// -----

// Rank-2 values: a zero-filled linalg.matmul [rows, K] x [K, N].
// CHECK-LABEL: func.func @matmul
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x8xf32>, %[[O:[^:]*]]: tensor<?xi64>, %[[W:[^:]*]]: tensor<8x3xf32>)
// CHECK-SAME:    -> (tensor<?x3xf32>, tensor<?xi64>)
// CHECK:         %[[ROWS:.*]] = tensor.dim %[[V]], %{{.*}} : tensor<?x8xf32>
// CHECK-NEXT:    %[[E:.*]] = tensor.empty(%[[ROWS]]) : tensor<?x3xf32>
// CHECK-NEXT:    %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-NEXT:    %[[F:.*]] = linalg.fill ins(%[[ZERO]] : f32) outs(%[[E]] : tensor<?x3xf32>)
// CHECK-NEXT:    %[[R:.*]] = linalg.matmul ins(%[[V]], %[[W]] : tensor<?x8xf32>, tensor<8x3xf32>) outs(%[[F]] : tensor<?x3xf32>)
// CHECK-NEXT:    return %[[R]], %[[O]] : tensor<?x3xf32>, tensor<?xi64>
func.func @matmul(%x: !ragged.tensor<?, [L], 8, f32>, %w: tensor<8x3xf32>) -> !ragged.tensor<?, [L], 3, f32> {
  %y = ragged.matmul %x, %w : !ragged.tensor<?, [L], 8, f32>, tensor<8x3xf32> -> !ragged.tensor<?, [L], 3, f32>
  return %y : !ragged.tensor<?, [L], 3, f32>
}

// -----

// A contraction extent of 0: the product is the zero fill, with no matmul.
// CHECK-LABEL: func.func @matmul_zero_k
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x0xf32>, %[[O:[^:]*]]: tensor<?xi64>, %[[W:[^:]*]]: tensor<0x3xf32>)
// CHECK:         %[[F:.*]] = linalg.fill
// CHECK-NOT:     linalg.matmul
// CHECK:         return %[[F]], %[[O]] : tensor<?x3xf32>, tensor<?xi64>
func.func @matmul_zero_k(%x: !ragged.tensor<?, [L], 0, f32>, %w: tensor<0x3xf32>) -> !ragged.tensor<?, [L], 3, f32> {
  %y = ragged.matmul %x, %w : !ragged.tensor<?, [L], 0, f32>, tensor<0x3xf32> -> !ragged.tensor<?, [L], 3, f32>
  return %y : !ragged.tensor<?, [L], 3, f32>
}

// -----

// Rank-3 values: a contraction generic over [rows, H, N, K].
// CHECK-DAG:   #[[$IN:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d3)>
// CHECK-DAG:   #[[$WT:.*]] = affine_map<(d0, d1, d2, d3) -> (d3, d2)>
// CHECK-DAG:   #[[$OUT:.*]] = affine_map<(d0, d1, d2, d3) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @matmul_rank3
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x2x8xf32>, %[[O:[^:]*]]: tensor<?xi64>, %[[W:[^:]*]]: tensor<8x3xf32>)
// CHECK:         %[[F:.*]] = linalg.fill
// CHECK-NEXT:    %[[R:.*]] = linalg.generic {indexing_maps = [#[[$IN]], #[[$WT]], #[[$OUT]]], iterator_types = ["parallel", "parallel", "parallel", "reduction"]}
// CHECK-SAME:      ins(%[[V]], %[[W]] : tensor<?x2x8xf32>, tensor<8x3xf32>) outs(%[[F]] : tensor<?x2x3xf32>)
// CHECK:           %[[P:.*]] = arith.mulf
// CHECK-NEXT:      %[[ACC:.*]] = arith.addf %{{.*}}, %[[P]]
// CHECK-NEXT:      linalg.yield %[[ACC]]
// CHECK:         return %[[R]], %[[O]] : tensor<?x2x3xf32>, tensor<?xi64>
func.func @matmul_rank3(%x: !ragged.tensor<?, [L], 2, 8, f32>, %w: tensor<8x3xf32>) -> !ragged.tensor<?, [L], 2, 3, f32> {
  %y = ragged.matmul %x, %w : !ragged.tensor<?, [L], 2, 8, f32>, tensor<8x3xf32> -> !ragged.tensor<?, [L], 2, 3, f32>
  return %y : !ragged.tensor<?, [L], 2, 3, f32>
}

// -----

// Two row reductions (sum, squared deviations) and one normalising generic;
// gamma and beta are read along the last dim.
// CHECK-DAG:   #[[$ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG:   #[[$ROW:.*]] = affine_map<(d0, d1) -> (d0)>
// CHECK-DAG:   #[[$COL:.*]] = affine_map<(d0, d1) -> (d1)>
// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x8xf32>, %[[O:[^:]*]]: tensor<?xi64>, %[[G:[^:]*]]: tensor<8xf32>, %[[B:[^:]*]]: tensor<8xf32>)
// CHECK:         %[[SUM:.*]] = linalg.generic {indexing_maps = [#[[$ID]], #[[$ROW]]], iterator_types = ["parallel", "reduction"]}
// CHECK-SAME:      ins(%[[V]] : tensor<?x8xf32>)
// CHECK:         %[[SQ:.*]] = linalg.generic {indexing_maps = [#[[$ID]], #[[$ROW]], #[[$ROW]]], iterator_types = ["parallel", "reduction"]}
// CHECK-SAME:      ins(%[[V]], %[[SUM]] : tensor<?x8xf32>, tensor<?xf32>)
// CHECK:         %[[EPS:.*]] = arith.constant 1.250000e-01 : f32
// CHECK:         %[[R:.*]] = linalg.generic {indexing_maps = [#[[$ID]], #[[$ROW]], #[[$ROW]], #[[$COL]], #[[$COL]], #[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[V]], %[[SUM]], %[[SQ]], %[[G]], %[[B]] : tensor<?x8xf32>, tensor<?xf32>, tensor<?xf32>, tensor<8xf32>, tensor<8xf32>)
// CHECK:           arith.addf %{{.*}}, %[[EPS]]
// CHECK-NEXT:      math.rsqrt
// CHECK:         return %[[R]], %[[O]] : tensor<?x8xf32>, tensor<?xi64>
func.func @layer_norm(%x: !ragged.tensor<?, [L], 8, f32>, %g: tensor<8xf32>, %b: tensor<8xf32>) -> !ragged.tensor<?, [L], 8, f32> {
  %y = ragged.layer_norm %x, %g, %b {epsilon = 0.125 : f64} : !ragged.tensor<?, [L], 8, f32>, tensor<8xf32>, tensor<8xf32>
  return %y : !ragged.tensor<?, [L], 8, f32>
}

// -----

//===----------------------------------------------------------------------===//
// ragged.reduce
//===----------------------------------------------------------------------===//

// One generic over [segments, D] fed by the segment starts and ends (two
// slices of the offsets); the body loops over the segment's rows and selects
// `empty` for an empty segment.
// CHECK-DAG:   #[[$SEG:.*]] = affine_map<(d0, d1) -> (d0)>
// CHECK-DAG:   #[[$ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @reduce_max
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x8xf32>, %[[O:[^:]*]]: tensor<?xi64>) -> tensor<?x8xf32>
// CHECK:         %[[EMPTY:.*]] = arith.constant -1.000000e+00 : f32
// CHECK:         %[[LO:.*]] = tensor.extract_slice %[[O]][0] [%[[N:.*]]] [1] : tensor<?xi64> to tensor<?xi64>
// CHECK-NEXT:    %[[HI:.*]] = tensor.extract_slice %[[O]][1] [%[[N]]] [1] : tensor<?xi64> to tensor<?xi64>
// CHECK:         %[[INIT:.*]] = tensor.empty(%{{.*}}) : tensor<?x8xf32>
// CHECK-NEXT:    %[[R:.*]] = linalg.generic {indexing_maps = [#[[$SEG]], #[[$SEG]], #[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[LO]], %[[HI]] : tensor<?xi64>, tensor<?xi64>) outs(%[[INIT]] : tensor<?x8xf32>)
// CHECK-NEXT:    ^bb0(%[[START:.*]]: i64, %[[END:.*]]: i64, %{{.*}}: f32):
// CHECK:           %[[NEGINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK:           %[[ACC:.*]] = scf.for %[[$ROW:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[A:.*]] = %[[NEGINF]]) -> (f32) {
// CHECK-NEXT:        %[[X:.*]] = tensor.extract %[[V]][%[[$ROW]], %{{.*}}] : tensor<?x8xf32>
// CHECK-NEXT:        %[[M:.*]] = arith.maximumf %[[A]], %[[X]] : f32
// CHECK-NEXT:        scf.yield %[[M]] : f32
// CHECK-NEXT:      }
// CHECK-NEXT:      %[[LEN:.*]] = arith.subi %[[END]], %[[START]] : i64
// CHECK:           %[[IS_EMPTY:.*]] = arith.cmpi eq, %[[LEN]], %{{.*}} : i64
// CHECK-NEXT:      %[[SEL:.*]] = arith.select %[[IS_EMPTY]], %[[EMPTY]], %[[ACC]] : f32
// CHECK-NEXT:      linalg.yield %[[SEL]] : f32
// CHECK:         return %[[R]] : tensor<?x8xf32>
func.func @reduce_max(%x: !ragged.tensor<?, [L], 8, f32>) -> tensor<?x8xf32> {
  %y = ragged.reduce <max> %x empty(-1.0 : f32) : !ragged.tensor<?, [L], 8, f32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// Mean: the sum divided by the length; a static batch gets a tensor.cast.
// CHECK-LABEL: func.func @reduce_mean_static
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x8xf32>, %[[O:[^:]*]]: tensor<5xi64>) -> tensor<4x8xf32>
// CHECK:         %[[EMPTY:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:         tensor.extract_slice %[[O]][0]
// CHECK-NEXT:    tensor.extract_slice %[[O]][1]
// CHECK:         %[[R:.*]] = linalg.generic
// CHECK:           %[[SUM:.*]] = scf.for
// CHECK:             arith.addf
// CHECK:           %[[LEN:.*]] = arith.subi
// CHECK-NEXT:      %[[LENF:.*]] = arith.sitofp %[[LEN]] : i64 to f32
// CHECK-NEXT:      %[[MEAN:.*]] = arith.divf %[[SUM]], %[[LENF]] : f32
// CHECK:           arith.select %{{.*}}, %[[EMPTY]], %[[MEAN]] : f32
// CHECK:         } -> tensor<?x8xf32>
// CHECK-NEXT:    %[[CAST:.*]] = tensor.cast %[[R]] : tensor<?x8xf32> to tensor<4x8xf32>
// CHECK-NEXT:    return %[[CAST]] : tensor<4x8xf32>
func.func @reduce_mean_static(%x: !ragged.tensor<4, [L], 8, f32>) -> tensor<4x8xf32> {
  %y = ragged.reduce <mean> %x : !ragged.tensor<4, [L], 8, f32> -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// A nested chain reduces over the segments of its innermost offsets; the
// result keeps the outer ones.
// CHECK-LABEL: func.func @reduce_nested
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x8xf32>, %[[S:[^:]*]]: tensor<?xi64>, %[[T:[^:]*]]: tensor<?xi64>)
// CHECK-SAME:    -> (tensor<?x8xf32>, tensor<?xi64>)
// CHECK:         %[[LO:.*]] = tensor.extract_slice %[[T]][0]
// CHECK-NEXT:    %[[HI:.*]] = tensor.extract_slice %[[T]][1]
// CHECK:         %[[R:.*]] = linalg.generic
// CHECK-SAME:      ins(%[[LO]], %[[HI]] : tensor<?xi64>, tensor<?xi64>)
// CHECK:           scf.for
// CHECK:             arith.minimumf
// CHECK:           arith.select
// CHECK:         return %[[R]], %[[S]] : tensor<?x8xf32>, tensor<?xi64>
func.func @reduce_nested(%x: !ragged.tensor<?, [S], [T(S)], 8, f32>) -> !ragged.tensor<?, [S], 8, f32> {
  %y = ragged.reduce <min> %x empty(0x7F800000 : f32) : !ragged.tensor<?, [S], [T(S)], 8, f32> -> !ragged.tensor<?, [S], 8, f32>
  return %y : !ragged.tensor<?, [S], 8, f32>
}

// -----

//===----------------------------------------------------------------------===//
// ragged.broadcast
//===----------------------------------------------------------------------===//

// Each row's segment, searched once per row (scf.while, one entry more
// than the rows), then one generic over the packed values that reads that
// row of the source with tensor.extract (a uniform row index: one
// contiguous copy per row). The row is clamped to the last one: IREE may
// evaluate the generic on the padding rows of a data-tiled GEMM's packing
// it is fused into. The table's first `rows` entries are also an operand
// read per row, which keeps IREE from collapsing (row, D) into one dim.
// The generic is marked `ragged.whole_rows` (for ragged-cpu-whole-rows).
// CHECK-LABEL: func.func @broadcast
// CHECK-SAME:    (%[[P:[^:]*]]: tensor<?x8xf32>, %[[V:[^:]*]]: tensor<?x8xf32>, %[[O:[^:]*]]: tensor<?xi64>)
// CHECK:         %[[$SEG:.*]] = linalg.generic {{.*}}iterator_types = ["parallel"]} outs({{.*}} : tensor<?xi64>)
// CHECK:           scf.while
// CHECK:         %[[HEAD:.*]] = tensor.extract_slice %[[$SEG]]
// CHECK:         %[[R:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]} ins(%[[HEAD]] : tensor<?xi64>) outs({{.*}} : tensor<?x8xf32>)
// CHECK-SAME:      attrs = {ragged.whole_rows}
// CHECK-NEXT:    ^bb0(%[[ENTRY:.*]]: i64, %{{.*}}: f32):
// CHECK:           arith.minui
// CHECK:           tensor.extract %[[$SEG]]
// CHECK:           %[[$ROW:.*]] = tensor.extract %[[P]]
// CHECK:           %[[OK:.*]] = arith.cmpi sge, %[[ENTRY]]
// CHECK:           arith.select %[[OK]], %[[$ROW]]
// CHECK:         return %[[R]], %[[O]] : tensor<?x8xf32>, tensor<?xi64>
func.func @broadcast(%p: tensor<?x8xf32>, %x: !ragged.tensor<?, [L], 8, f32>) -> !ragged.tensor<?, [L], 8, f32> {
  %b = ragged.broadcast %p like %x : tensor<?x8xf32>, !ragged.tensor<?, [L], 8, f32>
  return %b : !ragged.tensor<?, [L], 8, f32>
}

// -----

//===----------------------------------------------------------------------===//
// ragged.softmax
//===----------------------------------------------------------------------===//

// [B, L(b), D]: the groups are the segments. The max per [segment, D],
// then lse = max + log(sum(exp(x - max))), a table of each row's segment
// (binary search, scf.while; one entry longer than the rows), then one
// generic over every real element returning exp(x - lse). That generic also
// reads the table's first `rows` entries per row, so IREE keeps (row, D)
// apart; it is marked `ragged.whole_rows`.
// CHECK-DAG:   #[[$ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG:   #[[$ROW:.*]] = affine_map<(d0, d1) -> (d0)>
// CHECK-LABEL: func.func @softmax
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x8xf32>, %[[O:[^:]*]]: tensor<?xi64>)
// CHECK-SAME:    -> (tensor<?x8xf32>, tensor<?xi64>)
// CHECK:         %[[MAX:.*]] = linalg.generic {indexing_maps = [#[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      outs(%{{.*}} : tensor<?x8xf32>)
// CHECK:           tensor.extract %[[O]]
// CHECK:           scf.for
// CHECK:             arith.maximumf
// CHECK:         } -> tensor<?x8xf32>
// CHECK:         %[[LSE:.*]] = linalg.generic {indexing_maps = [#[[$ID]], #[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[MAX]] : tensor<?x8xf32>)
// CHECK-NEXT:    ^bb0(%[[M:.*]]: f32, %{{.*}}: f32):
// CHECK:           %[[SUM:.*]] = scf.for
// CHECK:             arith.subf
// CHECK-NEXT:        math.exp
// CHECK-NEXT:        arith.addf
// CHECK:           %[[LOG:.*]] = math.log %[[SUM]] : f32
// CHECK-NEXT:      arith.addf %[[M]], %[[LOG]] : f32
// CHECK:         } -> tensor<?x8xf32>
// CHECK:         %[[GROUP:.*]] = linalg.generic {{.*}}iterator_types = ["parallel"]} outs(%{{.*}} : tensor<?xi64>)
// CHECK:           scf.while
// CHECK:             tensor.extract %[[O]]
// CHECK:         %[[HEAD:.*]] = tensor.extract_slice %[[GROUP]][0] [%{{.*}}] [1] : tensor<?xi64> to tensor<?xi64>
// CHECK:         %[[R:.*]] = linalg.generic {indexing_maps = [#[[$ID]], #[[$ROW]], #[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[V]], %[[HEAD]] : tensor<?x8xf32>, tensor<?xi64>)
// CHECK-SAME:      attrs = {ragged.whole_rows}
// CHECK-NEXT:    ^bb0(%[[X:.*]]: f32, %[[ENTRY:.*]]: i64, %{{.*}}: f32):
// CHECK:           %[[G64:.*]] = tensor.extract %[[GROUP]]
// CHECK:           %[[$SEG:.*]] = arith.index_cast %[[G64]] : i64 to index
// CHECK:           %[[L:.*]] = tensor.extract %[[LSE]][%[[$SEG]], %{{.*}}] : tensor<?x8xf32>
// CHECK-NEXT:      %[[C:.*]] = arith.subf %[[X]], %[[L]] : f32
// CHECK-NEXT:      %[[E:.*]] = math.exp %[[C]] : f32
// CHECK:           %[[OK:.*]] = arith.cmpi sge, %[[ENTRY]], %{{.*}} : i64
// CHECK:           %[[Y:.*]] = arith.select %[[OK]], %[[E]], %{{.*}} : f32
// CHECK-NEXT:      linalg.yield %[[Y]] : f32
// CHECK:         return %[[R]], %[[O]] : tensor<?x8xf32>, tensor<?xi64>
func.func @softmax(%x: !ragged.tensor<?, [L], 8, f32>) -> !ragged.tensor<?, [L], 8, f32> {
  %y = ragged.softmax %x : !ragged.tensor<?, [L], 8, f32>
  return %y : !ragged.tensor<?, [L], 8, f32>
}

// -----

// Attention scores [B, L(b), L(b), H]: L(b) groups of L(b) rows per item.
// The row offsets (L^2 per item) and group counts (L per item) are prefix
// sums (two-level scans); one generic turns them into a table of group row offsets (finding
// each group's item by binary search), and the same generics as above
// follow over that table.
// CHECK-DAG:   #[[$ID1:.*]] = affine_map<(d0) -> (d0)>
// CHECK-DAG:   #[[$ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @softmax_scores
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x4xf32>, %[[O:[^:]*]]: tensor<?xi64>)
// CHECK-SAME:    -> (tensor<?x4xf32>, tensor<?xi64>)
// CHECK:         %[[SQ:.*]] = linalg.generic {indexing_maps = [#[[$ID1]]], iterator_types = ["parallel"]}
// CHECK:         linalg.generic {indexing_maps = [#[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK:           scf.for
// CHECK:             tensor.extract %[[SQ]]
// CHECK:         linalg.generic {indexing_maps = [#[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK:         %[[ROWS:.*]] = linalg.generic {indexing_maps = [#[[$ID1]]], iterator_types = ["parallel"]}
// CHECK:           scf.for
// CHECK:             tensor.extract %[[SQ]]
// CHECK:         %[[CNT:.*]] = linalg.generic {indexing_maps = [#[[$ID1]]], iterator_types = ["parallel"]}
// CHECK:         linalg.generic {indexing_maps = [#[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK:           scf.for
// CHECK:             tensor.extract %[[CNT]]
// CHECK:         linalg.generic {indexing_maps = [#[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK:         %[[GROUPS:.*]] = linalg.generic {indexing_maps = [#[[$ID1]]], iterator_types = ["parallel"]}
// CHECK:           scf.for
// CHECK:             tensor.extract %[[CNT]]
// CHECK:         %[[GROWS:.*]] = linalg.generic {indexing_maps = [#[[$ID1]]], iterator_types = ["parallel"]}
// CHECK:           scf.if
// CHECK:             scf.while
// CHECK:               tensor.extract %[[GROUPS]]
// CHECK:             tensor.extract %[[ROWS]]
// CHECK:         %[[MAX:.*]] = linalg.generic {indexing_maps = [#[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK:           tensor.extract %[[GROWS]]
// CHECK:           scf.for
// CHECK:             arith.maximumf
// CHECK:         } -> tensor<?x4xf32>
// CHECK:         %[[LSE:.*]] = linalg.generic {indexing_maps = [#[[$ID]], #[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[MAX]] : tensor<?x4xf32>)
// CHECK:           scf.for
// CHECK:             math.exp
// CHECK:           math.log
// CHECK:         } -> tensor<?x4xf32>
// CHECK:         %[[GROUP:.*]] = linalg.generic {indexing_maps = [#[[$ID1]]], iterator_types = ["parallel"]}
// CHECK:           scf.while
// CHECK:             tensor.extract %[[GROWS]]
// CHECK:         %[[HEAD:.*]] = tensor.extract_slice %[[GROUP]]
// CHECK:         %[[R:.*]] = linalg.generic {indexing_maps = [#[[$ID]], #{{.*}}, #[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[V]], %[[HEAD]] : tensor<?x4xf32>, tensor<?xi64>)
// CHECK-SAME:      attrs = {ragged.whole_rows}
// CHECK:           tensor.extract %[[GROUP]]
// CHECK:           tensor.extract %[[LSE]]
// CHECK-NEXT:      arith.subf
// CHECK-NEXT:      math.exp
// CHECK:           arith.select
// CHECK:         return %[[R]], %[[O]] : tensor<?x4xf32>, tensor<?xi64>
func.func @softmax_scores(%x: !ragged.tensor<?, [L], [L], 4, f32>) -> !ragged.tensor<?, [L], [L], 4, f32> {
  %y = ragged.softmax %x : !ragged.tensor<?, [L], [L], 4, f32>
  return %y : !ragged.tensor<?, [L], [L], 4, f32>
}

// -----

//===----------------------------------------------------------------------===//
// ragged.scores, ragged.apply, ragged.attention
//===----------------------------------------------------------------------===//

// Attention decomposes into scores, softmax and apply. Scores: one generic
// over [pairs, H] whose body finds the item (binary search), splits the pair
// index into query and key (divui, remui), takes the dot product in an
// scf.for, scales it and masks future keys with -inf.
// CHECK-DAG:   #[[$PAIR:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-DAG:   #[[$OUT:.*]] = affine_map<(d0, d1, d2) -> (d0, d1, d2)>
// CHECK-LABEL: func.func @attention
// CHECK-SAME:    (%[[Q:[^:]*]]: tensor<?x2x4xf32>, %[[QO:[^:]*]]: tensor<?xi64>,
// CHECK-SAME:     %[[K:[^:]*]]: tensor<?x2x4xf32>, %[[KO:[^:]*]]: tensor<?xi64>,
// CHECK-SAME:     %[[V:[^:]*]]: tensor<?x2x4xf32>, %[[VO:[^:]*]]: tensor<?xi64>)
// CHECK-SAME:    -> (tensor<?x2x4xf32>, tensor<?xi64>)
// Scores.
// CHECK:         %[[S:.*]] = linalg.generic {indexing_maps = [#[[$PAIR]]], iterator_types = ["parallel", "parallel"]} outs(%{{.*}} : tensor<?x2xf32>)
// CHECK:           scf.while
// CHECK:           %[[I:.*]] = arith.divui %[[LOCAL:[0-9]+]], %[[LEN:[0-9]+]] : index
// CHECK-NEXT:      %[[J:.*]] = arith.remui %[[LOCAL]], %[[LEN]] : index
// CHECK:           %[[DOT:.*]] = scf.for {{.*}} -> (f32)
// CHECK-NEXT:        tensor.extract %[[Q]]
// CHECK-NEXT:        tensor.extract %[[K]]
// CHECK-NEXT:        arith.mulf
// CHECK-NEXT:        arith.addf
// CHECK:           %[[SCALE:.*]] = arith.constant 5.000000e-01 : f32
// CHECK-NEXT:      %[[SC:.*]] = arith.mulf %[[DOT]], %[[SCALE]] : f32
// CHECK-NEXT:      %[[FUT:.*]] = arith.cmpi ugt, %[[J]], %[[I]] : index
// CHECK-NEXT:      %[[NINF:.*]] = arith.constant 0xFF800000 : f32
// CHECK-NEXT:      %[[MASKED:.*]] = arith.select %[[FUT]], %[[NINF]], %[[SC]] : f32
// CHECK-NEXT:      linalg.yield %[[MASKED]] : f32
// Softmax over the scores: max, log-sum-exp, the group of each row, exp.
// CHECK:         %[[MAX:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<?x2xf32>)
// CHECK:           arith.maximumf
// CHECK:         %[[LSE:.*]] = linalg.generic
// CHECK-SAME:      ins(%[[MAX]] : tensor<?x2xf32>)
// CHECK:           math.exp
// CHECK:           math.log
// CHECK:         linalg.generic {{.*}} outs(%{{.*}} : tensor<?xi64>)
// CHECK:           scf.while
// CHECK:         %[[P:.*]] = linalg.generic
// CHECK-SAME:      ins(%[[S]], %{{.*}} : tensor<?x2xf32>, tensor<?xi64>)
// CHECK-SAME:      attrs = {ragged.whole_rows}
// CHECK:           tensor.extract %[[LSE]]
// CHECK:           math.exp
// Apply: one generic over the output rows, an scf.for over the item's keys.
// CHECK:         %[[R:.*]] = linalg.generic {indexing_maps = [#[[$OUT]]], iterator_types = ["parallel", "parallel", "parallel"]}
// CHECK-SAME:      outs(%{{.*}} : tensor<?x2x4xf32>)
// CHECK:           scf.while
// CHECK:           scf.for
// CHECK-NEXT:        arith.addi
// CHECK-NEXT:        tensor.extract %[[P]]
// CHECK-NEXT:        arith.addi
// CHECK-NEXT:        tensor.extract %[[V]]
// CHECK-NEXT:        arith.mulf
// CHECK-NEXT:        arith.addf
// CHECK:         return %[[R]], %[[VO]] : tensor<?x2x4xf32>, tensor<?xi64>
func.func @attention(%q: !ragged.tensor<?, [L], 2, 4, f32>, %k: !ragged.tensor<?, [L], 2, 4, f32>,
                     %v: !ragged.tensor<?, [L], 2, 4, f32>) -> !ragged.tensor<?, [L], 2, 4, f32> {
  %o = ragged.attention %q, %k, %v {scale = 0.5 : f64, causal} : !ragged.tensor<?, [L], 2, 4, f32>
  return %o : !ragged.tensor<?, [L], 2, 4, f32>
}

// -----

// Without `causal` the scaled dot product is yielded as is; the scores keep
// the query offsets.
// CHECK-LABEL: func.func @scores
// CHECK-SAME:    (%[[Q:[^:]*]]: tensor<?x2x4xf32>, %[[QO:[^:]*]]: tensor<?xi64>,
// CHECK-SAME:     %[[K:[^:]*]]: tensor<?x2x4xf32>, %[[KO:[^:]*]]: tensor<?xi64>)
// CHECK-SAME:    -> (tensor<?x2xf32>, tensor<?xi64>)
// CHECK:         %[[S:.*]] = linalg.generic {{.*}} outs(%{{.*}} : tensor<?x2xf32>)
// CHECK:           %[[DOT:.*]] = scf.for {{.*}} -> (f32)
// CHECK:           %[[SC:.*]] = arith.mulf %[[DOT]], %{{.*}} : f32
// CHECK-NEXT:      linalg.yield %[[SC]] : f32
// CHECK:         return %[[S]], %[[QO]] : tensor<?x2xf32>, tensor<?xi64>
func.func @scores(%q: !ragged.tensor<?, [L], 2, 4, f32>, %k: !ragged.tensor<?, [L], 2, 4, f32>)
    -> !ragged.tensor<?, [L], [L], 2, f32> {
  %s = ragged.scores %q, %k : !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>
      -> !ragged.tensor<?, [L], [L], 2, f32>
  return %s : !ragged.tensor<?, [L], [L], 2, f32>
}

// -----

//===----------------------------------------------------------------------===//
// ragged.gather, ragged.concat, ragged.split
//===----------------------------------------------------------------------===//

// A range check over every id (a reduction to one i1, then cf.assert), then
// one generic over [tokens, D] reading the table at the id.
// CHECK-DAG:   #[[$ROW:.*]] = affine_map<(d0, d1) -> (d0)>
// CHECK-DAG:   #[[$ID:.*]] = affine_map<(d0, d1) -> (d0, d1)>
// CHECK-LABEL: func.func @gather
// CHECK-SAME:    (%[[T:[^:]*]]: tensor<10x8xf32>, %[[I:[^:]*]]: tensor<?xi64>, %[[O:[^:]*]]: tensor<?xi64>)
// CHECK-SAME:    -> (tensor<?x8xf32>, tensor<?xi64>)
// CHECK:         %[[OK:.*]] = linalg.generic {{.*}} iterator_types = ["reduction"]} ins(%[[I]] : tensor<?xi64>) outs(%{{.*}} : tensor<i1>)
// CHECK:           arith.cmpi sge
// CHECK-NEXT:      arith.cmpi slt
// CHECK:         %[[B:.*]] = tensor.extract %[[OK]][] : tensor<i1>
// CHECK-NEXT:    cf.assert %[[B]], "ragged.gather: an id lies outside [0, table rows)"
// CHECK:         %[[R:.*]] = linalg.generic {indexing_maps = [#[[$ROW]], #[[$ID]]], iterator_types = ["parallel", "parallel"]}
// CHECK-SAME:      ins(%[[I]] : tensor<?xi64>) outs(%{{.*}} : tensor<?x8xf32>)
// CHECK-NEXT:    ^bb0(%[[ROWID:.*]]: i64, %{{.*}}: f32):
// CHECK-NEXT:      %[[IDX:.*]] = arith.index_cast %[[ROWID]] : i64 to index
// CHECK-NEXT:      %[[$COL:.*]] = linalg.index 1 : index
// CHECK-NEXT:      %[[E:.*]] = tensor.extract %[[T]][%[[IDX]], %[[$COL]]] : tensor<10x8xf32>
// CHECK-NEXT:      linalg.yield %[[E]] : f32
// CHECK:         return %[[R]], %[[O]] : tensor<?x8xf32>, tensor<?xi64>
func.func @gather(%t: tensor<10x8xf32>, %ids: !ragged.tensor<?, [L], i64>) -> !ragged.tensor<?, [L], 8, f32> {
  %e = ragged.gather %t[%ids] : tensor<10x8xf32>, !ragged.tensor<?, [L], i64> -> !ragged.tensor<?, [L], 8, f32>
  return %e : !ragged.tensor<?, [L], 8, f32>
}

// -----

// Equal batch sizes are asserted; the offsets add up; each result row finds
// its item by binary search and reads from lhs or rhs (scf.if).
// CHECK-DAG:   #[[$ID1:.*]] = affine_map<(d0) -> (d0)>
// CHECK-LABEL: func.func @concat
// CHECK-SAME:    (%[[A:[^:]*]]: tensor<?x8xf32>, %[[AO:[^:]*]]: tensor<?xi64>, %[[B:[^:]*]]: tensor<?x8xf32>, %[[BO:[^:]*]]: tensor<?xi64>)
// CHECK-SAME:    -> (tensor<?x8xf32>, tensor<?xi64>)
// CHECK-DAG:     %[[NA:.*]] = tensor.dim %[[AO]], %{{.*}} : tensor<?xi64>
// CHECK-DAG:     %[[NB:.*]] = tensor.dim %[[BO]], %{{.*}} : tensor<?xi64>
// CHECK:         %[[SAME:.*]] = arith.cmpi eq, %[[NA]], %[[NB]] : index
// CHECK-NEXT:    cf.assert %[[SAME]], "ragged.concat: the operands' batch sizes differ"
// CHECK:         %[[OFF:.*]] = linalg.generic {indexing_maps = [#[[$ID1]], #[[$ID1]], #[[$ID1]]], iterator_types = ["parallel"]}
// CHECK-SAME:      ins(%[[AO]], %[[BO]] : tensor<?xi64>, tensor<?xi64>)
// CHECK:           arith.addi
// CHECK:         %[[R:.*]] = linalg.generic
// CHECK-SAME:      outs(%{{.*}} : tensor<?x8xf32>)
// CHECK:           scf.while
// CHECK:             tensor.extract %[[OFF]]
// CHECK:           scf.if
// CHECK:             tensor.extract %[[A]]
// CHECK:           } else {
// CHECK:             tensor.extract %[[B]]
// CHECK:         return %[[R]], %[[OFF]] : tensor<?x8xf32>, tensor<?xi64>
func.func @concat(%a: !ragged.tensor<?, [L1], 8, f32>, %b: !ragged.tensor<?, [L2], 8, f32>) -> !ragged.tensor<?, [L3], 8, f32> {
  %c = ragged.concat %a, %b : !ragged.tensor<?, [L1], 8, f32>, !ragged.tensor<?, [L2], 8, f32> -> !ragged.tensor<?, [L3], 8, f32>
  return %c : !ragged.tensor<?, [L3], 8, f32>
}

// -----

// One length per item and 0 <= lengths <= L(b) are asserted; the head and
// tail offsets are prefix sums of the lengths and of L(b) - lengths; each
// part is one generic locating its item by binary search.
// CHECK-LABEL: func.func @split
// CHECK-SAME:    (%[[X:[^:]*]]: tensor<?x8xf32>, %[[O:[^:]*]]: tensor<?xi64>, %[[N:[^:]*]]: tensor<?xi64>)
// CHECK-SAME:    -> (tensor<?x8xf32>, tensor<?xi64>, tensor<?x8xf32>, tensor<?xi64>)
// CHECK:         cf.assert %{{.*}}, "ragged.split: lengths must have one entry per item"
// CHECK:         %[[TAILLEN:.*]] = linalg.generic
// CHECK-SAME:      ins(%[[N]], %{{.*}}, %{{.*}} : tensor<?xi64>, tensor<?xi64>, tensor<?xi64>)
// CHECK:         %[[BOTH:.*]] = linalg.generic
// CHECK-SAME:      ins(%[[N]], %[[TAILLEN]] : tensor<?xi64>, tensor<?xi64>)
// CHECK:           arith.minsi
// CHECK:         linalg.generic {{.*}} iterator_types = ["reduction"]} ins(%[[BOTH]] : tensor<?xi64>)
// CHECK:           arith.cmpi sge
// CHECK:         cf.assert %{{.*}}, "ragged.split: lengths must lie in [0, L(b)]"
// CHECK:         linalg.generic
// CHECK:           scf.for
// CHECK:             tensor.extract %[[N]]
// CHECK:         linalg.generic
// CHECK:         %[[HO:.*]] = linalg.generic
// CHECK:           scf.for
// CHECK:             tensor.extract %[[N]]
// CHECK:         linalg.generic
// CHECK:           scf.for
// CHECK:             tensor.extract %[[TAILLEN]]
// CHECK:         linalg.generic
// CHECK:         %[[TO:.*]] = linalg.generic
// CHECK:           scf.for
// CHECK:             tensor.extract %[[TAILLEN]]
// CHECK:         %[[H:.*]] = linalg.generic
// CHECK-SAME:      outs(%{{.*}} : tensor<?x8xf32>)
// CHECK:           scf.while
// CHECK:             tensor.extract %[[HO]]
// CHECK:           tensor.extract %[[X]]
// CHECK:         %[[T:.*]] = linalg.generic
// CHECK-SAME:      outs(%{{.*}} : tensor<?x8xf32>)
// CHECK:           scf.while
// CHECK:             tensor.extract %[[TO]]
// CHECK:           tensor.extract %[[N]]
// CHECK:           tensor.extract %[[X]]
// CHECK:         return %[[H]], %[[HO]], %[[T]], %[[TO]] : tensor<?x8xf32>, tensor<?xi64>, tensor<?x8xf32>, tensor<?xi64>
func.func @split(%x: !ragged.tensor<?, [L], 8, f32>, %n: tensor<?xi64>)
    -> (!ragged.tensor<?, [P], 8, f32>, !ragged.tensor<?, [Q], 8, f32>) {
  %h, %t = ragged.split %x, %n : !ragged.tensor<?, [L], 8, f32>, tensor<?xi64>
      -> !ragged.tensor<?, [P], 8, f32>, !ragged.tensor<?, [Q], 8, f32>
  return %h, %t : !ragged.tensor<?, [P], 8, f32>, !ragged.tensor<?, [Q], 8, f32>
}

// -----

// A static batch on the operands and a dynamic one on the result: the
// offsets are cast to the converted partition types.
// CHECK-LABEL: func.func @concat_static_batch
// CHECK-SAME:    -> (tensor<?x8xf32>, tensor<?xi64>)
// CHECK:         cf.assert %{{.*}}, "ragged.concat: the operands' batch sizes differ"
// CHECK:         %[[OFFS:.*]] = linalg.generic
// CHECK:         %[[CAST:.*]] = tensor.cast %[[OFFS]] : tensor<5xi64> to tensor<?xi64>
// CHECK:         return %{{.*}}, %[[CAST]]
func.func @concat_static_batch(%a: !ragged.tensor<4, [L], 8, f32>, %b: !ragged.tensor<4, [M], 8, f32>) -> !ragged.tensor<?, [N], 8, f32> {
  %c = ragged.concat %a, %b : !ragged.tensor<4, [L], 8, f32>, !ragged.tensor<4, [M], 8, f32> -> !ragged.tensor<?, [N], 8, f32>
  return %c : !ragged.tensor<?, [N], 8, f32>
}

// -----

// CHECK-LABEL: func.func @split_static_batch
// CHECK-SAME:    -> (tensor<?x8xf32>, tensor<5xi64>, tensor<?x8xf32>, tensor<5xi64>)
// CHECK:         cf.assert %{{.*}}, "ragged.split: lengths must have one entry per item"
// CHECK:         cf.assert %{{.*}}, "ragged.split: lengths must lie in [0, L(b)]"
// CHECK-COUNT-2: tensor.cast %{{.*}} : tensor<?xi64> to tensor<5xi64>
func.func @split_static_batch(%x: !ragged.tensor<4, [L], 8, f32>, %l: tensor<?xi64>) -> (!ragged.tensor<4, [P], 8, f32>, !ragged.tensor<4, [Q], 8, f32>) {
  %h, %t = ragged.split %x, %l : !ragged.tensor<4, [L], 8, f32>, tensor<?xi64> -> !ragged.tensor<4, [P], 8, f32>, !ragged.tensor<4, [Q], 8, f32>
  return %h, %t : !ragged.tensor<4, [P], 8, f32>, !ragged.tensor<4, [Q], 8, f32>
}
