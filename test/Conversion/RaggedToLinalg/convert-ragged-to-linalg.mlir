// RUN: ragged-opt %s --convert-ragged-to-linalg --split-input-file | FileCheck %s --implicit-check-not=ragged.

// The structure of the lowering of each structure op. A `!ragged.tensor`
// becomes its packed values followed by one int64 offsets partition per
// distinct symbol (in order of first appearance).

// Signatures: the nested type has two partitions, the square one a single
// one; a static batch gives static partitions.
// CHECK-LABEL: func.func @signature
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x8xf32>, %[[S:[^:]*]]: tensor<?xi64>, %[[T:[^:]*]]: tensor<?xi64>,
// CHECK-SAME:     %[[V2:[^:]*]]: tensor<?x4xf32>, %[[L:[^:]*]]: tensor<?xi64>,
// CHECK-SAME:     %[[V3:[^:]*]]: tensor<?x3xf32>, %[[H:[^:]*]]: tensor<17xi64>, %[[W:[^:]*]]: tensor<17xi64>)
// CHECK-SAME:    -> (tensor<?x8xf32>, tensor<?xi64>, tensor<?xi64>)
// CHECK-NEXT:    return %[[V]], %[[S]], %[[T]] : tensor<?x8xf32>, tensor<?xi64>, tensor<?xi64>
func.func @signature(%x: !ragged.tensor<?, [S], [T(S)], 8, f32>,
                     %y: !ragged.tensor<?, [L], [L], 4, f32>,
                     %z: !ragged.tensor<16, [H], [W], 3, f32>) -> !ragged.tensor<?, [S], [T(S)], 8, f32> {
  return %x : !ragged.tensor<?, [S], [T(S)], 8, f32>
}

// -----

// Calls and declarations are converted too.
// CHECK-LABEL: func.func private @callee
// CHECK-SAME:    (tensor<?x4xf32>, tensor<?xi64>) -> (tensor<?x4xf32>, tensor<?xi64>)
// CHECK-LABEL: func.func @call
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x4xf32>, %[[O:[^:]*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[R:.*]]:2 = call @callee(%[[V]], %[[O]])
// CHECK-SAME:      : (tensor<?x4xf32>, tensor<?xi64>) -> (tensor<?x4xf32>, tensor<?xi64>)
// CHECK-NEXT:    return %[[R]]#0, %[[R]]#1
func.func private @callee(!ragged.tensor<?, [L], 4, f32>) -> !ragged.tensor<?, [L], 4, f32>
func.func @call(%x: !ragged.tensor<?, [L], 4, f32>) -> !ragged.tensor<?, [L], 4, f32> {
  %y = func.call @callee(%x) : (!ragged.tensor<?, [L], 4, f32>) -> !ragged.tensor<?, [L], 4, f32>
  return %y : !ragged.tensor<?, [L], 4, f32>
}

// -----

// pack, values and offsets fold to the block arguments.
// CHECK-LABEL: func.func @pack_values_offsets
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x4xf32>, %[[O:[^:]*]]: tensor<?xi64>)
// CHECK-NEXT:    return %[[V]], %[[O]] : tensor<?x4xf32>, tensor<?xi64>
func.func @pack_values_offsets(%v: tensor<?x4xf32>, %o: tensor<?xi64>) -> (tensor<?x4xf32>, tensor<?xi64>) {
  %x = ragged.pack %v [%o] : tensor<?x4xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], 4, f32>
  %vals = ragged.values %x : !ragged.tensor<?, [L], 4, f32> -> tensor<?x4xf32>
  %offs = ragged.offsets %x["L"] : !ragged.tensor<?, [L], 4, f32> -> tensor<?xi64>
  return %vals, %offs : tensor<?x4xf32>, tensor<?xi64>
}

// -----

// Each symbol of a nested tensor reads its own partition.
// CHECK-LABEL: func.func @offsets_nested
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x8xf32>, %[[S:[^:]*]]: tensor<?xi64>, %[[T:[^:]*]]: tensor<?xi64>)
// CHECK-NEXT:    return %[[T]], %[[S]] : tensor<?xi64>, tensor<?xi64>
func.func @offsets_nested(%x: !ragged.tensor<?, [S], [T(S)], 8, f32>) -> (tensor<?xi64>, tensor<?xi64>) {
  %t = ragged.offsets %x["T"] : !ragged.tensor<?, [S], [T(S)], 8, f32> -> tensor<?xi64>
  %s = ragged.offsets %x["S"] : !ragged.tensor<?, [S], [T(S)], 8, f32> -> tensor<?xi64>
  return %t, %s : tensor<?xi64>, tensor<?xi64>
}

// -----

// Static and dynamic extents that differ from the converted types get a
// tensor.cast.
// CHECK-LABEL: func.func @pack_casts
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<100x4xf32>, %[[O:[^:]*]]: tensor<?xi64>)
// CHECK-NEXT:    %[[VC:.*]] = tensor.cast %[[V]] : tensor<100x4xf32> to tensor<?x4xf32>
// CHECK-NEXT:    %[[OC:.*]] = tensor.cast %[[O]] : tensor<?xi64> to tensor<17xi64>
// CHECK-NEXT:    return %[[VC]], %[[OC]] : tensor<?x4xf32>, tensor<17xi64>
func.func @pack_casts(%v: tensor<100x4xf32>, %o: tensor<?xi64>) -> (tensor<?x4xf32>, tensor<17xi64>) {
  %x = ragged.pack %v [%o] : tensor<100x4xf32>, tensor<?xi64> -> !ragged.tensor<16, [L], 4, f32>
  %vals = ragged.values %x : !ragged.tensor<16, [L], 4, f32> -> tensor<?x4xf32>
  %offs = ragged.offsets %x["L"] : !ragged.tensor<16, [L], 4, f32> -> tensor<17xi64>
  return %vals, %offs : tensor<?x4xf32>, tensor<17xi64>
}

// -----

// to_padded: the largest segment length is a reduction over the offsets,
// then one parallel generic over [B, max, 4] reads values[offsets[b] + l]
// under an scf.if, or yields the padding.
// CHECK-LABEL: func.func @to_padded
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x4xf32>, %[[O:[^:]*]]: tensor<?xi64>) -> tensor<?x?x4xf32>
// CHECK:         %[[B:.*]] = arith.subi %{{.*}}, %{{.*}} : index
// CHECK:         %[[LO:.*]] = tensor.extract_slice %[[O]][0] [%{{.*}}] [1]
// CHECK:         %[[HI:.*]] = tensor.extract_slice %[[O]][1] [%{{.*}}] [1]
// CHECK:         %[[MAX:.*]] = linalg.generic {{.*}}iterator_types = ["reduction"]} ins(%[[LO]], %[[HI]] : tensor<?xi64>, tensor<?xi64>)
// CHECK:           arith.subi
// CHECK:           arith.maxsi
// CHECK:         %[[MAXV:.*]] = tensor.extract %[[MAX]][] : tensor<i64>
// CHECK:         %[[MAXI:.*]] = arith.index_cast %[[MAXV]] : i64 to index
// CHECK:         %[[INIT:.*]] = tensor.empty(%[[B]], %[[MAXI]]) : tensor<?x?x4xf32>
// CHECK:         %[[PAD:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:         %[[R:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel"]} outs(%[[INIT]] : tensor<?x?x4xf32>)
// CHECK:           %[[I0:.*]] = linalg.index 0 : index
// CHECK:           %[[I1:.*]] = linalg.index 1 : index
// CHECK:           %[[I2:.*]] = linalg.index 2 : index
// CHECK:           tensor.extract %[[O]][%[[I0]]] : tensor<?xi64>
// CHECK:           %[[IN:.*]] = arith.cmpi ult, %[[I1]], %{{.*}} : index
// CHECK:           %[[VALID:.*]] = arith.andi %{{.*}}, %[[IN]] : i1
// CHECK:           %[[LIN:.*]] = arith.addi %{{.*}}, %[[I1]] : index
// CHECK-NEXT:      %[[ST:.*]] = tensor.extract %[[O]][%[[I0]]] : tensor<?xi64>
// CHECK-NEXT:      %[[STI:.*]] = arith.index_cast %[[ST]] : i64 to index
// CHECK-NEXT:      %[[ROW:.*]] = arith.addi %[[STI]], %[[LIN]] : index
// CHECK-NEXT:      %[[E:.*]] = scf.if %[[VALID]] -> (f32) {
// CHECK-NEXT:        %[[X:.*]] = tensor.extract %[[V]][%[[ROW]], %[[I2]]] : tensor<?x4xf32>
// CHECK-NEXT:        scf.yield %[[X]] : f32
// CHECK-NEXT:      } else {
// CHECK-NEXT:        scf.yield %[[PAD]] : f32
// CHECK-NEXT:      }
// CHECK-NEXT:      linalg.yield %[[E]] : f32
// CHECK-NEXT:    } -> tensor<?x?x4xf32>
// CHECK-NEXT:    return %[[R]] : tensor<?x?x4xf32>
func.func @to_padded(%x: !ragged.tensor<?, [L], 4, f32>) -> tensor<?x?x4xf32> {
  %p = ragged.to_padded %x padding(0.0 : f32) : !ragged.tensor<?, [L], 4, f32> -> tensor<?x?x4xf32>
  return %p : tensor<?x?x4xf32>
}

// -----

// Nested to_padded: one max reduction per level, then the generic walks down
// the levels (clamped reads, select of the next global index) before the
// guarded read.
// CHECK-LABEL: func.func @to_padded_nested
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x8xf32>, %[[S:[^:]*]]: tensor<?xi64>, %[[T:[^:]*]]: tensor<?xi64>) -> tensor<?x?x?x8xf32>
// CHECK:         linalg.generic {{.*}}iterator_types = ["reduction"]} ins(%{{.*}}, %{{.*}} : tensor<?xi64>, tensor<?xi64>)
// CHECK:         linalg.generic {{.*}}iterator_types = ["reduction"]} ins(%{{.*}}, %{{.*}} : tensor<?xi64>, tensor<?xi64>)
// CHECK:         %[[INIT:.*]] = tensor.empty(%{{.*}}, %{{.*}}, %{{.*}}) : tensor<?x?x?x8xf32>
// CHECK:         %[[PAD:.*]] = arith.constant -1.000000e+00 : f32
// CHECK:         %[[R:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel", "parallel", "parallel"]} outs(%[[INIT]] : tensor<?x?x?x8xf32>)
// CHECK:           %[[I3:.*]] = linalg.index 3 : index
// CHECK:           arith.minui
// CHECK:           tensor.extract %[[S]]
// CHECK:           %[[G:.*]] = arith.select %{{.*}}, %{{.*}}, %{{.*}} : index
// CHECK:           arith.minui %[[G]]
// CHECK:           tensor.extract %[[T]]
// CHECK:           %[[ROW:.*]] = arith.select %[[VALID:.*]], %{{.*}}, %{{.*}} : index
// CHECK:           %[[E:.*]] = scf.if %[[VALID]] -> (f32) {
// CHECK-NEXT:        %[[X:.*]] = tensor.extract %[[V]][%[[ROW]], %[[I3]]] : tensor<?x8xf32>
// CHECK-NEXT:        scf.yield %[[X]] : f32
// CHECK-NEXT:      } else {
// CHECK-NEXT:        scf.yield %[[PAD]] : f32
// CHECK-NEXT:      }
// CHECK-NEXT:      linalg.yield %[[E]] : f32
// CHECK:         return %[[R]] : tensor<?x?x?x8xf32>
func.func @to_padded_nested(%x: !ragged.tensor<?, [S], [T(S)], 8, f32>) -> tensor<?x?x?x8xf32> {
  %p = ragged.to_padded %x padding(-1.0 : f32) : !ragged.tensor<?, [S], [T(S)], 8, f32> -> tensor<?x?x?x8xf32>
  return %p : tensor<?x?x?x8xf32>
}

// -----

// from_padded: a reduction checks 0 <= lengths <= padded extent, a compare
// checks one length per padded item, and both feed a cf.assert; a prefix sum turns lengths into offsets; one parallel generic
// over the rows finds each row's item by binary search (scf.while) and reads
// the padded tensor.
// CHECK-LABEL: func.func @from_padded
// CHECK-SAME:    (%[[P:[^:]*]]: tensor<?x?x4xf32>, %[[LEN:[^:]*]]: tensor<?xi64>) -> (tensor<?x4xf32>, tensor<?xi64>)
// CHECK:         %[[EXT:.*]] = tensor.dim %[[P]], %{{.*}} : tensor<?x?x4xf32>
// CHECK:         %[[EXT64:.*]] = arith.index_cast %[[EXT]] : index to i64
// CHECK:         %[[FITS:.*]] = linalg.generic {{.*}}iterator_types = ["reduction"]} ins(%[[LEN]] : tensor<?xi64>) outs(%{{.*}} : tensor<i1>)
// CHECK-NEXT:    ^bb0(%[[IN:.*]]: i64, %[[ACC:.*]]: i1):
// CHECK:           arith.cmpi sge, %[[IN]], %{{.*}} : i64
// CHECK:           arith.cmpi sle, %[[IN]], %[[EXT64]] : i64
// CHECK:           linalg.yield %{{.*}} : i1
// CHECK:         %[[OK:.*]] = tensor.extract %[[FITS]][] : tensor<i1>
// CHECK:         %[[COUNT:.*]] = arith.cmpi eq
// CHECK:         %[[BOTH:.*]] = arith.andi %[[OK]], %[[COUNT]] : i1
// CHECK:         %[[COND:.*]] = arith.andi %{{.*}}, %[[BOTH]] : i1
// The offsets are a two-level scan of the lengths: sums of chunks of 64,
// their prefix, then each entry from its chunk's prefix.
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]} outs(%{{.*}} : tensor<?x1xi64>)
// CHECK:           scf.for
// CHECK:             tensor.extract %[[LEN]]
// CHECK:         linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]} outs(%{{.*}} : tensor<?x1xi64>)
// CHECK:         %[[OFFS:.*]] = linalg.generic {{.*}}iterator_types = ["parallel"]} outs(%{{.*}} : tensor<?xi64>)
// CHECK:           arith.divui
// CHECK:           scf.for
// CHECK:             tensor.extract %[[LEN]]
// CHECK:         cf.assert %[[COND]], "ragged.from_padded: lengths must have one entry per padded item and lie in [0, padded extent]"
// CHECK:         %[[INIT:.*]] = tensor.empty(%{{.*}}) : tensor<?x4xf32>
// CHECK:         %[[VALS:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]} outs(%[[INIT]] : tensor<?x4xf32>)
// CHECK:           %[[ROW:.*]] = linalg.index 0 : index
// CHECK:           %[[SEG:.*]]:2 = scf.while
// CHECK:             arith.cmpi ult
// CHECK:             scf.condition
// CHECK:           } do {
// CHECK:             tensor.extract %[[OFFS]]
// CHECK:             arith.cmpi sle, %{{.*}}, %[[ROW]] : index
// CHECK:             scf.yield
// CHECK:           arith.remui
// CHECK:           %[[COL:.*]] = linalg.index 1 : index
// CHECK:           %[[X:.*]] = tensor.extract %[[P]][%[[SEG]]#0, %{{.*}}, %[[COL]]] : tensor<?x?x4xf32>
// CHECK-NEXT:      linalg.yield %[[X]] : f32
// CHECK:         return %[[VALS]], %[[OFFS]] : tensor<?x4xf32>, tensor<?xi64>
func.func @from_padded(%p: tensor<?x?x4xf32>, %len: tensor<?xi64>) -> !ragged.tensor<?, [L], 4, f32> {
  %x = ragged.from_padded %p lengths(%len) : tensor<?x?x4xf32>, tensor<?xi64> -> !ragged.tensor<?, [L], 4, f32>
  return %x : !ragged.tensor<?, [L], 4, f32>
}

// -----

// from_padded with a dense dim of size 0 before the ragged dim: no item has
// rows, so the values are an empty tensor and nothing reads the padded input.
// CHECK-LABEL: func.func @from_padded_no_rows
// CHECK:         cf.assert %{{.*}}, "ragged.from_padded: lengths must have one entry per padded item and lie in [0, padded extent]"
// CHECK-NOT:     tensor.extract %arg0
// CHECK:         %[[INIT:.*]] = tensor.empty(%{{.*}}) : tensor<?xf32>
// CHECK-NEXT:    %[[OFFS:.*]] = tensor.cast %{{.*}} : tensor<?xi64> to tensor<5xi64>
// CHECK-NEXT:    return %[[INIT]], %[[OFFS]] : tensor<?xf32>, tensor<5xi64>
func.func @from_padded_no_rows(%p: tensor<4x0x?xf32>, %len: tensor<4xi64>) -> !ragged.tensor<4, 0, [L], f32> {
  %x = ragged.from_padded %p lengths(%len) : tensor<4x0x?xf32>, tensor<4xi64> -> !ragged.tensor<4, 0, [L], f32>
  return %x : !ragged.tensor<4, 0, [L], f32>
}

// -----

// mask: one parallel generic over [B, max] yielding "index < extent".
// CHECK-LABEL: func.func @mask
// CHECK-SAME:    (%[[V:[^:]*]]: tensor<?x4xf32>, %[[O:[^:]*]]: tensor<?xi64>) -> tensor<?x?xi1>
// CHECK:         linalg.generic {{.*}}iterator_types = ["reduction"]}
// CHECK:         %[[INIT:.*]] = tensor.empty(%{{.*}}, %{{.*}}) : tensor<?x?xi1>
// CHECK:         %[[M:.*]] = linalg.generic {{.*}}iterator_types = ["parallel", "parallel"]} outs(%[[INIT]] : tensor<?x?xi1>)
// CHECK-NEXT:    ^bb0(%{{.*}}: i1):
// CHECK:           %[[L:.*]] = linalg.index 1 : index
// CHECK:           %[[B:.*]] = linalg.index 0 : index
// CHECK:           tensor.extract %[[O]][%[[B]]] : tensor<?xi64>
// CHECK:           %[[LT:.*]] = arith.cmpi ult, %[[L]], %{{.*}} : index
// CHECK:           %[[VALID:.*]] = arith.andi %{{.*}}, %[[LT]] : i1
// CHECK:           linalg.yield %[[VALID]] : i1
// CHECK:         return %[[M]] : tensor<?x?xi1>
func.func @mask(%x: !ragged.tensor<?, [L], 4, f32>) -> tensor<?x?xi1> {
  %m = ragged.mask %x : !ragged.tensor<?, [L], 4, f32> -> tensor<?x?xi1>
  return %m : tensor<?x?xi1>
}

// -----

// match: sizes and contents of the partitions compared, then a cf.assert;
// the result is the source values with the reference partition.
// CHECK-LABEL: func.func @match
// CHECK-SAME:    (%[[YV:[^:]*]]: tensor<?x4xf32>, %[[YO:[^:]*]]: tensor<?xi64>, %[[XV:[^:]*]]: tensor<?x4xf32>, %[[XO:[^:]*]]: tensor<?xi64>)
// CHECK-SAME:    -> (tensor<?x4xf32>, tensor<?xi64>)
// CHECK:         %[[N:.*]] = tensor.dim %[[YO]]
// CHECK:         %[[M:.*]] = tensor.dim %[[XO]]
// CHECK:         %[[SAME:.*]] = arith.cmpi eq, %[[N]], %[[M]] : index
// CHECK:         %[[EQ:.*]] = linalg.generic {{.*}}iterator_types = ["reduction"]}
// CHECK:           arith.cmpi eq, %{{.*}}, %{{.*}} : i64
// CHECK:           linalg.yield %{{.*}} : i1
// CHECK:         %[[ALL:.*]] = tensor.extract %[[EQ]][] : tensor<i1>
// CHECK:         %[[BOTH:.*]] = arith.andi %[[SAME]], %[[ALL]] : i1
// CHECK:         %[[OK:.*]] = arith.andi %{{.*}}, %[[BOTH]] : i1
// CHECK-NEXT:    cf.assert %[[OK]], "ragged.match: the partitions of the two ragged tensors differ"
// CHECK-NEXT:    return %[[YV]], %[[XO]] : tensor<?x4xf32>, tensor<?xi64>
func.func @match(%y: !ragged.tensor<?, [M], 4, f32>, %x: !ragged.tensor<?, [L], 4, f32>) -> !ragged.tensor<?, [L], 4, f32> {
  %r = ragged.match %y to %x : !ragged.tensor<?, [M], 4, f32> to !ragged.tensor<?, [L], 4, f32> -> !ragged.tensor<?, [L], 4, f32>
  return %r : !ragged.tensor<?, [L], 4, f32>
}

// -----

// match of nested tensors: one comparison per partition, one cf.assert.
// CHECK-LABEL: func.func @match_nested
// CHECK-SAME:    (%[[YV:[^:]*]]: tensor<?xi32>, %{{[^:]*}}: tensor<?xi64>, %{{[^:]*}}: tensor<?xi64>,
// CHECK-SAME:     %{{[^:]*}}: tensor<?xf32>, %[[XS:[^:]*]]: tensor<?xi64>, %[[XT:[^:]*]]: tensor<?xi64>)
// CHECK-SAME:    -> (tensor<?xi32>, tensor<?xi64>, tensor<?xi64>)
// CHECK:         linalg.generic {{.*}}iterator_types = ["reduction"]}
// CHECK:         linalg.generic {{.*}}iterator_types = ["reduction"]}
// CHECK:         cf.assert %{{.*}}, "ragged.match: the partitions of the two ragged tensors differ"
// CHECK-NEXT:    return %[[YV]], %[[XS]], %[[XT]] : tensor<?xi32>, tensor<?xi64>, tensor<?xi64>
func.func @match_nested(%y: !ragged.tensor<?, [A], [B(A)], i32>, %x: !ragged.tensor<?, [S], [T(S)], f32>) -> !ragged.tensor<?, [S], [T(S)], i32> {
  %r = ragged.match %y to %x : !ragged.tensor<?, [A], [B(A)], i32> to !ragged.tensor<?, [S], [T(S)], f32> -> !ragged.tensor<?, [S], [T(S)], i32>
  return %r : !ragged.tensor<?, [S], [T(S)], i32>
}
