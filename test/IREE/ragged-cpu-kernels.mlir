// RUN: ragged-opt %s --allow-unregistered-dialect --ragged-cpu-kernels=isa=x86_64_v3 --cse | FileCheck %s --implicit-check-not="ragged.attention %q"
// RUN: ragged-opt %s --allow-unregistered-dialect --ragged-cpu-kernels=isa=arm_64 | FileCheck %s --check-prefix=ARM
// RUN: not ragged-opt %s --ragged-cpu-kernels 2>&1 | FileCheck %s --check-prefix=UNREGISTERED

// UNREGISTERED: error: ragged-cpu-kernels emits IREE's stream.executable and flow.dispatch, which this context does not know: allow unregistered dialects

// One executable for the module, linking the ISA's object; each export has
// a workgroup per 32 packed rows (every head) and calls its kernel on the
// bindings' memrefs.
// CHECK: "stream.executable"() ({
// CHECK:   "stream.executable.export"() ({
// CHECK:   ^bb0(%[[ROWS:.+]]: index, %{{.+}}: index):
// CHECK:     %[[X:.+]] = arith.ceildivui %[[ROWS]], %c32
// CHECK:     "stream.return"(%[[X]], %c1, %c1)
// CHECK:   }) {function_ref = @attention_fwd, sym_name = "attention_fwd", sym_visibility = "public"}
// The gradients' export has a workgroup per item and head.
// CHECK:   "stream.executable.export"() ({
// CHECK:   ^bb0(%[[ITEMS:.+]]: index, %[[H:.+]]: index):
// CHECK:     "stream.return"(%[[ITEMS]], %[[H]], %c1{{.*}})
// CHECK:   }) {function_ref = @attention_bwd, sym_name = "attention_bwd", sym_visibility = "public"}
// The segment softmax's too: a workgroup per item (its "heads" are 1).
// CHECK:   }) {function_ref = @segment_softmax, sym_name = "segment_softmax", sym_visibility = "public"}
// CHECK:   }) {function_ref = @segment_reduce, sym_name = "segment_reduce", sym_visibility = "public"}
// CHECK:   ^bb0(%[[PIXELS:.+]]: index, %{{.+}}: index):
// CHECK:     %[[BLOCKS:.+]] = arith.ceildivui %[[PIXELS]], %c64
// CHECK:     "stream.return"(%[[BLOCKS]], %c1{{.*}}, %c1{{.*}})
// CHECK:   }) {function_ref = @conv2d, sym_name = "conv2d", sym_visibility = "public"}
// CHECK:   }) {function_ref = @pool2d, sym_name = "pool2d", sym_visibility = "public"}
// CHECK:   func.func private @ragged_attention_fwd(memref<?xf32>, memref<?xf32>, memref<?xf32>, memref<?xi64>, memref<?xi64>, memref<?xf32>, memref<?xf32>, index, index, index, index, f32, index, index, i32, f32, index) attributes {hal.import.static}
// CHECK:   func.func @attention_fwd(%{{.+}}: !stream.binding, %{{.+}}: !stream.binding, %{{.+}}: !stream.binding, %{{.+}}: !stream.binding, %{{.+}}: !stream.binding, %{{.+}}: !stream.binding, %{{.+}}: !stream.binding,
// CHECK-COUNT-7: "stream.binding.subspan"
// CHECK:     "stream.dispatch.workgroup.id"() {dimension = 0 : index}
// CHECK:     call @ragged_attention_fwd(
// CHECK:   func.func private @ragged_attention_bwd(memref<?xf32>, memref<?xf32>, memref<?xf32>, memref<?xf32>, memref<?xf32>, memref<?xf32>, memref<?xf32>, memref<?xf32>, memref<?xi64>, memref<?xi64>, memref<?xf32>, memref<?xf32>, memref<?xf32>, index, index, index, index, f32, index, index, i32, f32, index, index) attributes {hal.import.static}
// CHECK:     "stream.dispatch.workgroup.id"() {dimension = 0 : index}
// CHECK:     "stream.dispatch.workgroup.id"() {dimension = 1 : index}
// CHECK:     call @ragged_attention_bwd(
// CHECK:   func.func private @ragged_segment_softmax(memref<?xf32>, memref<?xi64>, memref<?xi64>, memref<?xf32>, index, index, index, index, f32, index, index, i32, f32, index, index) attributes {hal.import.static}
// CHECK:     call @ragged_segment_softmax(
// CHECK:   func.func private @ragged_segment_reduce(memref<?xf32>, memref<?xi64>, memref<?xf32>, index, index, f32, index, index) attributes {hal.import.static}
// CHECK:     call @ragged_segment_reduce(
// The convolution's: a workgroup per 64 output pixels, twelve index scalars.
// CHECK:   func.func private @ragged_conv2d(memref<?xf32>, memref<?xf32>, memref<?xf32>, memref<?xi64>, memref<?xi64>, memref<?xi64>, memref<?xi64>, memref<?xi64>, memref<?xf32>, index, index, index, index, index, index, index, index, index, index, index, index, index) attributes {hal.import.static}
// CHECK:     call @ragged_conv2d(
// CHECK:   func.func private @ragged_pool2d(memref<?xf32>, memref<?xi64>, memref<?xi64>, memref<?xi64>, memref<?xi64>, memref<?xi64>, memref<?xf32>, index, index, index, index, index, index, index, index, index, index, index, index, index) attributes {hal.import.static}
// CHECK:     call @ragged_pool2d(
// CHECK: hal.executable.objects = #hal.executable.objects<{#hal.executable.target<"llvm-cpu", "embedded-elf-x86_64"> = [#hal.executable.object<{path = "ragged_kernels_x86_64_v3.o"}>]}>, sym_name = "ragged_kernels"
// CHECK-NOT: "stream.executable"

// ARM: #hal.executable.target<"llvm-cpu", "embedded-elf-arm_64"> = [#hal.executable.object<{path = "ragged_kernels_arm_64.o"}>]

// The packed values and offsets go straight to the dispatch, then the
// number of elements of every buffer (inputs, then results), then the
// kernel's scalars; the keys are
// transposed to [H, d, stride] (stride: rows + 64 rounded up to 1024, plus
// 16; zero tail); the flags are operands:
// scale, causal, dropout, threshold, keep.
// CHECK-LABEL: func.func @causal
// CHECK-DAG: %[[Q:.+]] = ragged.values %arg0
// CHECK-DAG: %[[K:.+]] = ragged.values %arg1
// CHECK-DAG: %[[V:.+]] = ragged.values %arg2
// CHECK-DAG: %[[OFF:.+]] = ragged.offsets %arg0["L"]
// CHECK: %[[T:.+]] = linalg.transpose ins(%[[K]] : tensor<?x2x4xf32>) outs(%{{.+}} : tensor<2x4x?xf32>) permutation = [1, 2, 0]
// CHECK: %[[KT:.+]] = tensor.pad %[[T]] low[0, 0, 0] high[0, 0, %{{.+}}]
// CHECK: %[[D:.+]]:2 = "flow.dispatch"(%{{.+}}, %{{.+}}, %[[Q]], %[[KT]], %[[V]], %[[OFF]], %[[OFF]], {{.*}}) {entry_points = [@ragged_kernels::@attention_fwd], operandSegmentSizes = array<i32: 2, 21, 5, 2>, tied_operands = [-1 : index, -1 : index]} : ({{.*}}) -> (tensor<?x2x4xf32>, tensor<?x2x1xf32>)
// CHECK: %[[O:.+]] = ragged.pack %[[D]]#0[%[[OFF]]]
// CHECK: return %[[O]]
func.func @causal(%q: !ragged.tensor<?, [L], 2, 4, f32>, %k: !ragged.tensor<?, [L], 2, 4, f32>, %v: !ragged.tensor<?, [L], 2, 4, f32>) -> !ragged.tensor<?, [L], 2, 4, f32> {
  %o = ragged.attention %q, %k, %v {scale = 0.5 : f64, causal} : !ragged.tensor<?, [L], 2, 4, f32>
  return %o : !ragged.tensor<?, [L], 2, 4, f32>
}

// Dropout passes the seed as [1] i64, the threshold round(p 2^32) and the
// kept weights' factor 1 / (1 - p); the lse is the dispatch's second result.
// CHECK-LABEL: func.func @dropout_lse
// CHECK: %[[SEED:.+]] = tensor.expand_shape %arg1 [] output_shape [1] : tensor<i64> into tensor<1xi64>
// CHECK-DAG: %[[THRESHOLD:.+]] = arith.constant 1073741824 : i32
// CHECK-DAG: %[[KEEP:.+]] = arith.constant 1.33333337 : f32
// CHECK: %[[D:.+]]:2 = "flow.dispatch"({{.*}}%[[SEED]], {{.*}}%[[THRESHOLD]], %[[KEEP]], {{.*}}) {entry_points = [@ragged_kernels::@attention_fwd]
// CHECK: %[[O:.+]] = ragged.pack %[[D]]#0
// CHECK: %[[LSE:.+]] = ragged.pack %[[D]]#1
// CHECK: return %[[O]], %[[LSE]]
func.func @dropout_lse(%q: !ragged.tensor<?, [L], 2, 4, f32>, %seed: tensor<i64>) -> (!ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 1, f32>) {
  %o, %lse = ragged.attention %q, %q, %q dropout(%seed : tensor<i64>) {scale = 0.5 : f64, dropout = 0.25 : f64} : !ragged.tensor<?, [L], 2, 4, f32> lse !ragged.tensor<?, [L], 2, 1, f32>
  return %o, %lse : !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 1, f32>
}

// f64, and a head size past the kernel's 256, are left alone.
// CHECK-LABEL: func.func @left_alone
// CHECK: ragged.attention %arg0, %arg0, %arg0 : !ragged.tensor<?, [L], 2, 4, f64>
// CHECK: ragged.attention %arg1, %arg1, %arg1 : !ragged.tensor<?, [L], 1, 320, f32>
func.func @left_alone(%a: !ragged.tensor<?, [L], 2, 4, f64>, %b: !ragged.tensor<?, [L], 1, 320, f32>) -> (!ragged.tensor<?, [L], 2, 4, f64>, !ragged.tensor<?, [L], 1, 320, f32>) {
  %x = ragged.attention %a, %a, %a : !ragged.tensor<?, [L], 2, 4, f64>
  %y = ragged.attention %b, %b, %b : !ragged.tensor<?, [L], 1, 320, f32>
  return %x, %y : !ragged.tensor<?, [L], 2, 4, f64>, !ragged.tensor<?, [L], 1, 320, f32>
}

// The gradient from the forward's output and lse: the lse ([H, stride]) and
// rowsum(dO o O) per row and head laid out like the statistics the kernel
// reads; dQ, dK and dV from one dispatch of attention_bwd (q, k, v,
// transposed q, dO, transposed dO, the statistics) whose workload is the
// items (offsets' size - 1) and the heads.
// CHECK-LABEL: func.func @grad_saved
// CHECK-DAG: %[[Q:.+]] = ragged.values %arg0
// CHECK-DAG: %[[K:.+]] = ragged.values %arg1
// CHECK-DAG: %[[V:.+]] = ragged.values %arg2
// CHECK-DAG: %[[G:.+]] = ragged.values %arg3
// CHECK-DAG: %[[O:.+]] = ragged.values %arg4
// CHECK-DAG: %[[LSE:.+]] = ragged.values %arg5
// CHECK: %[[LSE2:.+]] = tensor.collapse_shape %[[LSE]] {{\[}}[0], [1, 2]] : tensor<?x2x1xf32> into tensor<?x2xf32>
// CHECK: %[[LSET:.+]] = linalg.transpose ins(%[[LSE2]] : tensor<?x2xf32>) outs(%{{.+}} : tensor<2x?xf32>) permutation = [1, 0]
// CHECK: %[[LSEP:.+]] = tensor.pad %[[LSET]]
// CHECK: %[[DOTS:.+]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[G]], %[[O]] : tensor<?x2x4xf32>, tensor<?x2x4xf32>) outs(%{{.+}} : tensor<2x?xf32>)
// CHECK: %[[DOTSP:.+]] = tensor.pad %[[DOTS]]
// CHECK: %[[QT:.+]] = tensor.pad
// CHECK: %[[GT:.+]] = tensor.pad
// CHECK: %[[ITEMS:.+]] = arith.subi %{{.+}}, %c1
// CHECK: %[[BWD:.+]]:3 = "flow.dispatch"(%[[ITEMS]], %{{.+}}, %[[Q]], %[[K]], %[[V]], %[[QT]], %[[G]], %[[GT]], %[[LSEP]], %[[DOTSP]], {{.*}}) {entry_points = [@ragged_kernels::@attention_bwd]
// CHECK: %[[RQ:.+]] = ragged.pack %[[BWD]]#0
// CHECK: %[[RK:.+]] = ragged.pack %[[BWD]]#1
// CHECK: %[[RV:.+]] = ragged.pack %[[BWD]]#2
// CHECK: return %[[RQ]], %[[RK]], %[[RV]]
func.func @grad_saved(%q: !ragged.tensor<?, [L], 2, 4, f32>, %k: !ragged.tensor<?, [L], 2, 4, f32>, %v: !ragged.tensor<?, [L], 2, 4, f32>, %g: !ragged.tensor<?, [L], 2, 4, f32>, %o: !ragged.tensor<?, [L], 2, 4, f32>, %lse: !ragged.tensor<?, [L], 2, 1, f32>) -> (!ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>) {
  %dq, %dk, %dv = ragged.attention_grad %q, %k, %v, %g output(%o : !ragged.tensor<?, [L], 2, 4, f32>) lse(%lse : !ragged.tensor<?, [L], 2, 1, f32>) {scale = 0.5 : f64, causal} : !ragged.tensor<?, [L], 2, 4, f32>
  return %dq, %dk, %dv : !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>
}

// Without the saved output and lse, a forward dispatch computes them first.
// CHECK-LABEL: func.func @grad_recomputed
// CHECK: "flow.dispatch"({{.*}}) {entry_points = [@ragged_kernels::@attention_fwd]
// CHECK: "flow.dispatch"({{.*}}) {entry_points = [@ragged_kernels::@attention_bwd]
func.func @grad_recomputed(%q: !ragged.tensor<?, [L], 2, 4, f32>, %g: !ragged.tensor<?, [L], 2, 4, f32>) -> (!ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>) {
  %dq, %dk, %dv = ragged.attention_grad %q, %q, %q, %g {scale = 0.5 : f64} : !ragged.tensor<?, [L], 2, 4, f32>
  return %dq, %dk, %dv : !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>
}

// f16 and bf16 run on the same kernels in f32: q and v are widened by an
// elementwise generic, the keys by the generic that transposes them; the
// output and lse are rounded back.
// CHECK-LABEL: func.func @f16_lse
// CHECK-DAG: %[[Q:.+]] = ragged.values %arg0
// CHECK-DAG: %[[K:.+]] = ragged.values %arg1
// CHECK-DAG: %[[V:.+]] = ragged.values %arg2
// CHECK: %[[QW:.+]] = linalg.generic {{.*}} ins(%[[Q]] : tensor<?x2x4xf16>) outs(%{{.+}} : tensor<?x2x4xf32>)
// CHECK-NEXT: ^bb0(%[[IN:.+]]: f16, %{{.+}}: f32):
// CHECK-NEXT:   %[[E:.+]] = arith.extf %[[IN]] : f16 to f32
// CHECK-NEXT:   linalg.yield %[[E]] : f32
// CHECK: %[[T:.+]] = linalg.generic {{.*}} ins(%[[K]] : tensor<?x2x4xf16>) outs(%{{.+}} : tensor<2x4x?xf32>)
// CHECK: arith.extf
// CHECK: %[[KT:.+]] = tensor.pad %[[T]]
// CHECK: %[[VW:.+]] = linalg.generic {{.*}} ins(%[[V]] : tensor<?x2x4xf16>) outs(%{{.+}} : tensor<?x2x4xf32>)
// CHECK: %[[D:.+]]:2 = "flow.dispatch"(%{{.+}}, %{{.+}}, %[[QW]], %[[KT]], %[[VW]], {{.*}}) {entry_points = [@ragged_kernels::@attention_fwd]{{.*}} -> (tensor<?x2x4xf32>, tensor<?x2x1xf32>)
// CHECK: %[[ON:.+]] = linalg.generic {{.*}} ins(%[[D]]#0 : tensor<?x2x4xf32>) outs(%{{.+}} : tensor<?x2x4xf16>)
// CHECK: arith.truncf %{{.+}} : f32 to f16
// CHECK: %[[O:.+]] = ragged.pack %[[ON]]
// CHECK: %[[LN:.+]] = linalg.generic {{.*}} ins(%[[D]]#1 : tensor<?x2x1xf32>) outs(%{{.+}} : tensor<?x2x1xf16>)
// CHECK: arith.truncf %{{.+}} : f32 to f16
// CHECK: %[[LSE:.+]] = ragged.pack %[[LN]]
// CHECK: return %[[O]], %[[LSE]]
func.func @f16_lse(%q: !ragged.tensor<?, [L], 2, 4, f16>, %k: !ragged.tensor<?, [L], 2, 4, f16>, %v: !ragged.tensor<?, [L], 2, 4, f16>) -> (!ragged.tensor<?, [L], 2, 4, f16>, !ragged.tensor<?, [L], 2, 1, f16>) {
  %o, %lse = ragged.attention %q, %k, %v {scale = 0.5 : f64} : !ragged.tensor<?, [L], 2, 4, f16> lse !ragged.tensor<?, [L], 2, 1, f16>
  return %o, %lse : !ragged.tensor<?, [L], 2, 4, f16>, !ragged.tensor<?, [L], 2, 1, f16>
}

// The bf16 gradient: the saved lse is widened as it is transposed, the
// incoming gradient and saved output as rowsum(dO o O) reads them; the
// transposed q and dO are widened by their transposes; dQ, dK and dV are
// rounded back.
// CHECK-LABEL: func.func @bf16_grad_saved
// CHECK-DAG: %[[Q:.+]] = ragged.values %arg0
// CHECK-DAG: %[[G:.+]] = ragged.values %arg3
// CHECK-DAG: %[[O:.+]] = ragged.values %arg4
// CHECK-DAG: %[[LSE:.+]] = ragged.values %arg5
// CHECK: %[[LSE2:.+]] = tensor.collapse_shape %[[LSE]] {{\[}}[0], [1, 2]] : tensor<?x2x1xbf16> into tensor<?x2xbf16>
// CHECK: linalg.generic {{.*}} ins(%[[LSE2]] : tensor<?x2xbf16>) outs(%{{.+}} : tensor<2x?xf32>)
// CHECK: arith.extf %{{.+}} : bf16 to f32
// CHECK: %[[LSEP:.+]] = tensor.pad
// CHECK: %[[DOTS:.+]] = linalg.generic {{.*}} iterator_types = ["parallel", "parallel", "reduction"]} ins(%[[G]], %[[O]] : tensor<?x2x4xbf16>, tensor<?x2x4xbf16>) outs(%{{.+}} : tensor<2x?xf32>)
// CHECK-NEXT: ^bb0(%[[GI:.+]]: bf16, %[[OI:.+]]: bf16, %[[ACC:.+]]: f32):
// CHECK-NEXT:   %[[GE:.+]] = arith.extf %[[GI]] : bf16 to f32
// CHECK-NEXT:   %[[OE:.+]] = arith.extf %[[OI]] : bf16 to f32
// CHECK-NEXT:   %[[P:.+]] = arith.mulf %[[GE]], %[[OE]] : f32
// CHECK-NEXT:   arith.addf %[[ACC]], %[[P]] : f32
// CHECK: %[[DOTSP:.+]] = tensor.pad %[[DOTS]]
// CHECK: %[[QW:.+]] = linalg.generic {{.*}} ins(%[[Q]] : tensor<?x2x4xbf16>) outs(%{{.+}} : tensor<?x2x4xf32>)
// CHECK: %[[KW:.+]] = linalg.generic {{.*}} ins(%{{.+}} : tensor<?x2x4xbf16>) outs(%{{.+}} : tensor<?x2x4xf32>)
// CHECK: %[[VW:.+]] = linalg.generic {{.*}} ins(%{{.+}} : tensor<?x2x4xbf16>) outs(%{{.+}} : tensor<?x2x4xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[Q]] : tensor<?x2x4xbf16>) outs(%{{.+}} : tensor<2x4x?xf32>)
// CHECK: %[[QT:.+]] = tensor.pad
// CHECK: %[[GW:.+]] = linalg.generic {{.*}} ins(%[[G]] : tensor<?x2x4xbf16>) outs(%{{.+}} : tensor<?x2x4xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[G]] : tensor<?x2x4xbf16>) outs(%{{.+}} : tensor<2x4x?xf32>)
// CHECK: %[[GT:.+]] = tensor.pad
// CHECK: %[[BWD:.+]]:3 = "flow.dispatch"(%{{.+}}, %{{.+}}, %[[QW]], %[[KW]], %[[VW]], %[[QT]], %[[GW]], %[[GT]], %[[LSEP]], %[[DOTSP]], {{.*}}) {entry_points = [@ragged_kernels::@attention_bwd]{{.*}} -> (tensor<?x2x4xf32>, tensor<?x2x4xf32>, tensor<?x2x4xf32>)
// CHECK: linalg.generic {{.*}} ins(%[[BWD]]#0 : tensor<?x2x4xf32>) outs(%{{.+}} : tensor<?x2x4xbf16>)
// CHECK: arith.truncf %{{.+}} : f32 to bf16
// CHECK: linalg.generic {{.*}} ins(%[[BWD]]#1 : tensor<?x2x4xf32>) outs(%{{.+}} : tensor<?x2x4xbf16>)
// CHECK: linalg.generic {{.*}} ins(%[[BWD]]#2 : tensor<?x2x4xf32>) outs(%{{.+}} : tensor<?x2x4xbf16>)
func.func @bf16_grad_saved(%q: !ragged.tensor<?, [L], 2, 4, bf16>, %k: !ragged.tensor<?, [L], 2, 4, bf16>, %v: !ragged.tensor<?, [L], 2, 4, bf16>, %g: !ragged.tensor<?, [L], 2, 4, bf16>, %o: !ragged.tensor<?, [L], 2, 4, bf16>, %lse: !ragged.tensor<?, [L], 2, 1, bf16>) -> (!ragged.tensor<?, [L], 2, 4, bf16>, !ragged.tensor<?, [L], 2, 4, bf16>, !ragged.tensor<?, [L], 2, 4, bf16>) {
  %dq, %dk, %dv = ragged.attention_grad %q, %k, %v, %g output(%o : !ragged.tensor<?, [L], 2, 4, bf16>) lse(%lse : !ragged.tensor<?, [L], 2, 1, bf16>) {scale = 0.5 : f64, causal} : !ragged.tensor<?, [L], 2, 4, bf16>
  return %dq, %dk, %dv : !ragged.tensor<?, [L], 2, 4, bf16>, !ragged.tensor<?, [L], 2, 4, bf16>, !ragged.tensor<?, [L], 2, 4, bf16>
}

// A softmax over each item's rows: the values seen as [rows, 1, features],
// one dispatch, one workgroup per item.
// CHECK-LABEL: func.func @segment_softmax
// CHECK:   %[[V:.+]] = ragged.values %arg0 : !ragged.tensor<?, [L], 2, 5, f32> -> tensor<?x2x5xf32>
// CHECK:   %[[FLAT:.+]] = tensor.collapse_shape %[[V]] {{\[}}[0], [1, 2]] : tensor<?x2x5xf32> into tensor<?x10xf32>
// CHECK:   %[[VIEW:.+]] = tensor.expand_shape %[[FLAT]] {{\[}}[0], [1, 2]] output_shape [%{{.+}}, 1, 10] : tensor<?x10xf32> into tensor<?x1x10xf32>
// CHECK:   %[[OFF:.+]] = ragged.offsets %arg0["L"]
// CHECK:   %[[ITEMS:.+]] = arith.subi
// CHECK:   %[[OUT:.+]] = "flow.dispatch"(%[[ITEMS]], %{{.+}}, %[[VIEW]], %[[OFF]], %[[OFF]],
// CHECK-SAME: entry_points = [@ragged_kernels::@segment_softmax]
// CHECK-SAME: -> tensor<?x1x10xf32>
// CHECK:   %[[ROWS:.+]] = tensor.collapse_shape %[[OUT]] {{\[}}[0], [1, 2]] : tensor<?x1x10xf32> into tensor<?x10xf32>
// CHECK:   %[[BACK:.+]] = tensor.expand_shape %[[ROWS]] {{\[}}[0], [1, 2]] output_shape [%{{.+}}, 2, 5] : tensor<?x10xf32> into tensor<?x2x5xf32>
// CHECK:   ragged.pack %[[BACK]][%[[OFF]]]
func.func @segment_softmax(%x: !ragged.tensor<?, [L], 2, 5, f32>) -> !ragged.tensor<?, [L], 2, 5, f32> {
  %y = ragged.softmax %x : !ragged.tensor<?, [L], 2, 5, f32>
  return %y : !ragged.tensor<?, [L], 2, 5, f32>
}

// A reduction over each item's rows: the values seen as [rows, features],
// one workgroup per item; the scalars: features, the reduction (ReduceKind:
// max is 2), the value of an empty item. The result [B, f] is seen as the
// op's [B, D...].
// CHECK-LABEL: func.func @segment_max
// CHECK-DAG: %[[V:.+]] = ragged.values %arg0 : !ragged.tensor<?, [L], 2, 5, f32> -> tensor<?x2x5xf32>
// CHECK-DAG: %[[OFF:.+]] = ragged.offsets %arg0["L"]
// CHECK-DAG: %[[FLAT:.+]] = tensor.collapse_shape %[[V]] {{\[}}[0], [1, 2]] : tensor<?x2x5xf32> into tensor<?x10xf32>
// CHECK-DAG: %[[EMPTY:.+]] = arith.constant 0xFF800000 : f32
// CHECK-DAG: %[[ITEMS:.+]] = arith.subi
// CHECK:   %[[OUT:.+]] = "flow.dispatch"(%[[ITEMS]], %c1, %[[FLAT]], %[[OFF]], {{.*}}, %c10, %c2, %[[EMPTY]], {{.*}}) {entry_points = [@ragged_kernels::@segment_reduce]
// CHECK-SAME: -> tensor<?x10xf32>
// CHECK:   %[[R:.+]] = tensor.expand_shape %[[OUT]] {{\[}}[0], [1, 2]] output_shape [%[[ITEMS]], 2, 5] : tensor<?x10xf32> into tensor<?x2x5xf32>
// CHECK:   return %[[R]]
func.func @segment_max(%x: !ragged.tensor<?, [L], 2, 5, f32>) -> tensor<?x2x5xf32> {
  %y = ragged.reduce <max> %x empty(0xFF800000 : f32) : !ragged.tensor<?, [L], 2, 5, f32> -> tensor<?x2x5xf32>
  return %y : tensor<?x2x5xf32>
}

// Over attention scores a softmax group is one query's keys: left alone,
// as are f64 and a softmax over a dim nested in another.
// CHECK-LABEL: func.func @softmax_left_alone
// CHECK-COUNT-3: ragged.softmax
// CHECK-NOT: flow.dispatch
func.func @softmax_left_alone(%s: !ragged.tensor<?, [L], [L], 12, f32>, %d: !ragged.tensor<?, [L], 8, f64>, %n: !ragged.tensor<?, [S], [T(S)], 8, f32>) -> (!ragged.tensor<?, [L], [L], 12, f32>, !ragged.tensor<?, [L], 8, f64>, !ragged.tensor<?, [S], [T(S)], 8, f32>) {
  %a = ragged.softmax %s : !ragged.tensor<?, [L], [L], 12, f32>
  %b = ragged.softmax %d : !ragged.tensor<?, [L], 8, f64>
  %c = ragged.softmax %n : !ragged.tensor<?, [S], [T(S)], 8, f32>
  return %a, %b, %c : !ragged.tensor<?, [L], [L], 12, f32>, !ragged.tensor<?, [L], 8, f64>, !ragged.tensor<?, [S], [T(S)], 8, f32>
}

// A convolution reads the packed pixels, the weight and bias with their
// output channels padded with zeros to 16, the input's row offsets and
// extents and the output's row offsets and widths (the window rule on the
// device); the scalars: output pixels, Cin, Cout, padded Cout, the kernel,
// strides, padding, dilation. The result takes the output partitions.
// CHECK-LABEL: func.func @conv2d
// CHECK-DAG: %[[X:.+]] = ragged.values %arg0 : !ragged.tensor<?, [H], [W], 3, f32> -> tensor<?x3xf32>
// CHECK-DAG: %[[H:.+]] = ragged.offsets %arg0["H"]
// CHECK-DAG: %[[W:.+]] = ragged.offsets %arg0["W"]
// CHECK-DAG: %[[WT:.+]] = tensor.pad %arg1 low[0, 0, 0, 0] high[0, 0, 0, 12]
// CHECK-DAG: %[[B:.+]] = tensor.pad %arg2 low[0] high[12]
// CHECK: %[[Y:.+]] = "flow.dispatch"(%[[PIX:[^,]+]], %c1, %[[X]], %[[WT]], %[[B]], %[[INROWS:[^,]+]], %[[H]], %[[W]], %[[OUTROWS:[^,]+]], %[[WO:[^,]+]], {{.*}}, %[[PIX]], %c3, %c20, %c32, %c3, %c3, %c2, %c1, %c1, %c0, %c1, %c2, {{.*}}) {entry_points = [@ragged_kernels::@conv2d], operandSegmentSizes = array<i32: 2, 29, 6, 1>, tied_operands = [-1 : index]} : ({{.*}}) -> tensor<?x20xf32>
// CHECK: ragged.pack %[[Y]][%{{.+}}, %[[WO]]] : tensor<?x20xf32>, tensor<?xi64>, tensor<?xi64> -> !ragged.tensor<?, [Ho], [Wo], 20, f32>
func.func @conv2d(%x: !ragged.tensor<?, [H], [W], 3, f32>, %w: tensor<3x3x3x20xf32>, %b: tensor<20xf32>) -> !ragged.tensor<?, [Ho], [Wo], 20, f32> {
  %y = ragged.conv2d %x, %w, %b {strides = array<i64: 2, 1>, padding = array<i64: 1, 0>, dilation = array<i64: 1, 2>} : !ragged.tensor<?, [H], [W], 3, f32>, tensor<3x3x3x20xf32>, tensor<20xf32> -> !ragged.tensor<?, [Ho], [Wo], 20, f32>
  return %y : !ragged.tensor<?, [Ho], [Wo], 20, f32>
}

// Pooling reads the packed pixels and the same offsets; the scalars:
// output pixels, channels, the reduction (ReduceKind: mean is 1), whether
// a mean counts the padding, the window. ceil_mode is the output extents'.
// CHECK-LABEL: func.func @avg_pool
// CHECK-DAG: %[[X:.+]] = ragged.values %arg0 : !ragged.tensor<?, [H], [W], 5, f32> -> tensor<?x5xf32>
// CHECK-DAG: %[[H:.+]] = ragged.offsets %arg0["H"]
// CHECK-DAG: %[[W:.+]] = ragged.offsets %arg0["W"]
// CHECK: %[[Y:.+]] = "flow.dispatch"(%[[PIX:[^,]+]], %c1, %[[X]], %[[INROWS:[^,]+]], %[[H]], %[[W]], %[[OUTROWS:[^,]+]], %[[WO:[^,]+]], {{.*}}, %[[PIX]], %c5, %c1, %c1, %c3, %c3, %c2, %c2, %c1, %c1, %c1, %c1, {{.*}}) {entry_points = [@ragged_kernels::@pool2d], operandSegmentSizes = array<i32: 2, 25, 6, 1>, tied_operands = [-1 : index]} : ({{.*}}) -> tensor<?x5xf32>
// CHECK: ragged.pack %[[Y]][%{{.+}}, %[[WO]]] : tensor<?x5xf32>, tensor<?xi64>, tensor<?xi64> -> !ragged.tensor<?, [Ho], [Wo], 5, f32>
func.func @avg_pool(%x: !ragged.tensor<?, [H], [W], 5, f32>) -> !ragged.tensor<?, [Ho], [Wo], 5, f32> {
  %y = ragged.pool2d <mean> %x {kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, padding = array<i64: 1, 1>, ceil_mode, count_include_pad} : !ragged.tensor<?, [H], [W], 5, f32> -> !ragged.tensor<?, [Ho], [Wo], 5, f32>
  return %y : !ragged.tensor<?, [Ho], [Wo], 5, f32>
}

// Grouped or f64 convolutions and f64 pooling: codegen.
// CHECK-LABEL: func.func @conv2d_left_alone
// CHECK-COUNT-2: ragged.conv2d
// CHECK: ragged.pool2d
// CHECK-NOT: flow.dispatch
func.func @conv2d_left_alone(%x: !ragged.tensor<?, [H], [W], 4, f32>, %w: tensor<3x3x2x6xf32>, %d: !ragged.tensor<?, [H], [W], 4, f64>, %wd: tensor<1x1x4x2xf64>) -> (!ragged.tensor<?, [H], [W], 6, f32>, !ragged.tensor<?, [H], [W], 2, f64>, !ragged.tensor<?, [H], [W], 4, f64>) {
  %g = ragged.conv2d %x, %w {padding = array<i64: 1, 1>, groups = 2 : i64} : !ragged.tensor<?, [H], [W], 4, f32>, tensor<3x3x2x6xf32> -> !ragged.tensor<?, [H], [W], 6, f32>
  %f = ragged.conv2d %d, %wd : !ragged.tensor<?, [H], [W], 4, f64>, tensor<1x1x4x2xf64> -> !ragged.tensor<?, [H], [W], 2, f64>
  %p = ragged.pool2d <max> %d {kernel = array<i64: 3, 3>, padding = array<i64: 1, 1>} : !ragged.tensor<?, [H], [W], 4, f64> -> !ragged.tensor<?, [H], [W], 4, f64>
  return %g, %f, %p : !ragged.tensor<?, [H], [W], 6, f32>, !ragged.tensor<?, [H], [W], 2, f64>, !ragged.tensor<?, [H], [W], 4, f64>
}
