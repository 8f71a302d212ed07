// RUN: ragged-opt %s -split-input-file -verify-diagnostics

// One case per verifier rule of the compute ops. Result-type rules that an
// AllTypesMatch trait checks first are written in the generic form.

// unary: only float element types.
func.func @unary_int(%x: !ragged.tensor<?, [L], 8, i32>) {
  // expected-error @+1 {{'ragged.unary' op needs a float element type, got 'i32'}}
  %y = ragged.unary <exp> %x : !ragged.tensor<?, [L], 8, i32>
  return
}

// -----

// unary: the result has the source type (generic form; the trait checks it).
func.func @unary_result(%x: !ragged.tensor<?, [L], 8, f32>) {
  // expected-error @+1 {{'ragged.unary' op failed to verify that all of {source, result} have same type}}
  %y = "ragged.unary"(%x) <{fn = #ragged.unary_fn<exp>}> : (!ragged.tensor<?, [L], 8, f32>) -> !ragged.tensor<?, [M], 8, f32>
  return
}

// -----

// binary: only float element types.
func.func @binary_int(%x: !ragged.tensor<?, [L], 8, i32>, %b: tensor<8xi32>) {
  // expected-error @+1 {{'ragged.binary' op needs a float element type, got 'i32'}}
  %y = ragged.binary <add> %x, %b : !ragged.tensor<?, [L], 8, i32>, tensor<8xi32>
  return
}

// -----

// binary: a ragged rhs needs the same symbols as lhs.
func.func @binary_ragged_rhs(%x: !ragged.tensor<?, [L], 8, f32>, %b: !ragged.tensor<?, [M], 8, f32>) {
  // expected-error @+1 {{'ragged.binary' op a ragged rhs (same symbols, so same partitions) must be '!ragged.tensor<?, [L], 8, f32>', got '!ragged.tensor<?, [M], 8, f32>'}}
  %y = ragged.binary <add> %x, %b : !ragged.tensor<?, [L], 8, f32>, !ragged.tensor<?, [M], 8, f32>
  return
}

// -----

// binary: a dense rhs has at most as many dims as the trailing dense dims.
func.func @binary_rank(%x: !ragged.tensor<?, [L], 8, f32>, %b: tensor<4x8xf32>) {
  // expected-error @+1 {{'ragged.binary' op a dense rhs broadcasts against the trailing dense dims (1), so its rank must be at most 1, got 2}}
  %y = ragged.binary <add> %x, %b : !ragged.tensor<?, [L], 8, f32>, tensor<4x8xf32>
  return
}

// -----

// binary: a dense rhs is a suffix of the trailing dims.
func.func @binary_dim(%x: !ragged.tensor<?, [L], 2, 8, f32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{'ragged.binary' op rhs dim 0 is 4 but broadcasts against 8}}
  %y = ragged.binary <add> %x, %b : !ragged.tensor<?, [L], 2, 8, f32>, tensor<4xf32>
  return
}

// -----

func.func @binary_dim2(%x: !ragged.tensor<?, [L], 2, 8, f32>, %b: tensor<3x8xf32>) {
  // expected-error @+1 {{'ragged.binary' op rhs dim 0 is 3 but broadcasts against 2}}
  %y = ragged.binary <add> %x, %b : !ragged.tensor<?, [L], 2, 8, f32>, tensor<3x8xf32>
  return
}

// -----

// binary: a dense rhs has the element type of lhs.
func.func @binary_elem(%x: !ragged.tensor<?, [L], 8, f32>, %b: tensor<8xf16>) {
  // expected-error @+1 {{'ragged.binary' op rhs element type 'f16' does not match 'f32'}}
  %y = ragged.binary <add> %x, %b : !ragged.tensor<?, [L], 8, f32>, tensor<8xf16>
  return
}

// -----

// binary: rhs is a ragged or a ranked tensor.
func.func @binary_vector(%x: !ragged.tensor<?, [L], 8, f32>, %b: vector<8xf32>) {
  // expected-error @+1 {{'ragged.binary' op rhs must be a ragged or ranked tensor, got 'vector<8xf32>'}}
  %y = ragged.binary <add> %x, %b : !ragged.tensor<?, [L], 8, f32>, vector<8xf32>
  return
}

// -----

func.func @binary_unranked(%x: !ragged.tensor<?, [L], 8, f32>, %b: tensor<*xf32>) {
  // expected-error @+1 {{'ragged.binary' op rhs must be a ragged or ranked tensor, got 'tensor<*xf32>'}}
  %y = ragged.binary <add> %x, %b : !ragged.tensor<?, [L], 8, f32>, tensor<*xf32>
  return
}

// -----

// binary: the result has the type of lhs (generic form).
func.func @binary_result(%x: !ragged.tensor<?, [L], 8, f32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'ragged.binary' op failed to verify that all of {lhs, result} have same type}}
  %y = "ragged.binary"(%x, %b) <{fn = #ragged.binary_fn<add>}> : (!ragged.tensor<?, [L], 8, f32>, tensor<8xf32>) -> !ragged.tensor<?, [L], 4, f32>
  return
}

// -----

// matmul: the weight has one row per element of the last dim.
func.func @matmul_rows(%x: !ragged.tensor<?, [L], 8, f32>, %w: tensor<4x3xf32>) {
  // expected-error @+1 {{'ragged.matmul' op weight has 4 rows but the source's last dim is 8}}
  %y = ragged.matmul %x, %w : !ragged.tensor<?, [L], 8, f32>, tensor<4x3xf32> -> !ragged.tensor<?, [L], 3, f32>
  return
}

// -----

func.func @matmul_elem(%x: !ragged.tensor<?, [L], 8, f32>, %w: tensor<8x3xf16>) {
  // expected-error @+1 {{'ragged.matmul' op weight element type 'f16' does not match 'f32'}}
  %y = ragged.matmul %x, %w : !ragged.tensor<?, [L], 8, f32>, tensor<8x3xf16> -> !ragged.tensor<?, [L], 3, f32>
  return
}

// -----

// matmul: the contracted dim is a trailing dense dim.
func.func @matmul_no_dense(%x: !ragged.tensor<?, 8, [L], f32>, %w: tensor<8x3xf32>) {
  // expected-error @+1 {{'ragged.matmul' op needs a dense last dim after the ragged dims, got '!ragged.tensor<?, 8, [L], f32>'}}
  %y = ragged.matmul %x, %w : !ragged.tensor<?, 8, [L], f32>, tensor<8x3xf32> -> !ragged.tensor<?, 3, [L], f32>
  return
}

// -----

// matmul: the result replaces the last dim by the weight columns.
func.func @matmul_result(%x: !ragged.tensor<?, [L], 8, f32>, %w: tensor<8x3xf32>) {
  // expected-error @+2 {{'ragged.matmul' op inferred type(s) '!ragged.tensor<?, [L], 3, f32>' are incompatible with return type(s) of operation '!ragged.tensor<?, [L], 8, f32>'}}
  // expected-error @+1 {{'ragged.matmul' op failed to infer returned types}}
  %y = ragged.matmul %x, %w : !ragged.tensor<?, [L], 8, f32>, tensor<8x3xf32> -> !ragged.tensor<?, [L], 8, f32>
  return
}

// -----

func.func @matmul_weight_rank(%x: !ragged.tensor<?, [L], 8, f32>, %w: tensor<8xf32>) {
  // expected-error @+1 {{'ragged.matmul' op operand #1 must be 2D tensor of floating-point or signless integer values, but got 'tensor<8xf32>'}}
  %y = ragged.matmul %x, %w : !ragged.tensor<?, [L], 8, f32>, tensor<8xf32> -> !ragged.tensor<?, [L], 8, f32>
  return
}

// -----

// reduce: only float element types.
func.func @reduce_int(%x: !ragged.tensor<?, [L], 8, i32>) {
  // expected-error @+1 {{'ragged.reduce' op needs a float element type, got 'i32'}}
  %y = ragged.reduce <sum> %x : !ragged.tensor<?, [L], 8, i32> -> tensor<?x8xi32>
  return
}

// -----

// reduce: two independent ragged dims are neither a sequence nor a chain.
func.func @reduce_two_symbols(%x: !ragged.tensor<?, [H], [W], 3, f32>) {
  // expected-error @+1 {{'ragged.reduce' op reduces over the innermost ragged dim of [B, L(b), dense...] or of a nested chain [B, S(b), T(b, s), dense...]; got '!ragged.tensor<?, [H], [W], 3, f32>'}}
  %y = ragged.reduce <sum> %x : !ragged.tensor<?, [H], [W], 3, f32> -> tensor<?x?x3xf32>
  return
}

// -----

// reduce: a dense dim before the ragged one.
func.func @reduce_dense_before(%x: !ragged.tensor<?, 4, [L], f32>) {
  // expected-error @+1 {{'ragged.reduce' op reduces over the innermost ragged dim of [B, L(b), dense...] or of a nested chain [B, S(b), T(b, s), dense...]; got '!ragged.tensor<?, 4, [L], f32>'}}
  %y = ragged.reduce <sum> %x : !ragged.tensor<?, 4, [L], f32> -> tensor<?x4xf32>
  return
}

// -----

// reduce: a dense dim between the levels of a chain.
func.func @reduce_dense_between(%x: !ragged.tensor<?, [S], 4, [T(S)], f32>) {
  // expected-error @+1 {{'ragged.reduce' op reduces over the innermost ragged dim of [B, L(b), dense...] or of a nested chain [B, S(b), T(b, s), dense...]; got '!ragged.tensor<?, [S], 4, [T(S)], f32>'}}
  %y = ragged.reduce <sum> %x : !ragged.tensor<?, [S], 4, [T(S)], f32> -> !ragged.tensor<?, [S], 4, f32>
  return
}

// -----

// reduce: one symbol used twice is not a chain.
func.func @reduce_square(%x: !ragged.tensor<?, [L], [L], 4, f32>) {
  // expected-error @+1 {{'ragged.reduce' op reduces over the innermost ragged dim of [B, L(b), dense...] or of a nested chain [B, S(b), T(b, s), dense...]; got '!ragged.tensor<?, [L], [L], 4, f32>'}}
  %y = ragged.reduce <sum> %x : !ragged.tensor<?, [L], [L], 4, f32> -> !ragged.tensor<?, [L], 4, f32>
  return
}

// -----

// reduce: two levels nested in the same parent are not a chain.
func.func @reduce_siblings(%x: !ragged.tensor<?, [S], [T(S)], [U(S)], f32>) {
  // expected-error @+1 {{'ragged.reduce' op reduces over the innermost ragged dim of [B, L(b), dense...] or of a nested chain [B, S(b), T(b, s), dense...]; got '!ragged.tensor<?, [S], [T(S)], [U(S)], f32>'}}
  %y = ragged.reduce <sum> %x : !ragged.tensor<?, [S], [T(S)], [U(S)], f32> -> !ragged.tensor<?, [S], [T(S)], f32>
  return
}

// -----

// reduce: max and min need `empty`.
func.func @reduce_max_no_empty(%x: !ragged.tensor<?, [L], 8, f32>) {
  // expected-error @+1 {{'ragged.reduce' op max needs an explicit `empty` value for empty segments (e.g. -inf)}}
  %y = ragged.reduce <max> %x : !ragged.tensor<?, [L], 8, f32> -> tensor<?x8xf32>
  return
}

// -----

func.func @reduce_min_no_empty(%x: !ragged.tensor<?, [L], 8, f32>) {
  // expected-error @+1 {{'ragged.reduce' op min needs an explicit `empty` value for empty segments (e.g. -inf)}}
  %y = ragged.reduce <min> %x : !ragged.tensor<?, [L], 8, f32> -> tensor<?x8xf32>
  return
}

// -----

// reduce: `empty` has the element type.
func.func @reduce_empty_type(%x: !ragged.tensor<?, [L], 8, f32>) {
  // expected-error @+1 {{'ragged.reduce' op empty value type 'f16' does not match 'f32'}}
  %y = ragged.reduce <max> %x empty(0.0 : f16) : !ragged.tensor<?, [L], 8, f32> -> tensor<?x8xf32>
  return
}

// -----

func.func @reduce_empty_int(%x: !ragged.tensor<?, [L], 8, f32>) {
  // expected-error @+1 {{'ragged.reduce' op empty value type 'i32' does not match 'f32'}}
  %y = ragged.reduce <sum> %x empty(0 : i32) : !ragged.tensor<?, [L], 8, f32> -> tensor<?x8xf32>
  return
}

// -----

// reduce: the result drops the reduced dim: dense [B, D] for a sequence...
func.func @reduce_result(%x: !ragged.tensor<?, [L], 8, f32>) {
  // expected-error @+2 {{'ragged.reduce' op inferred type(s) 'tensor<?x8xf32>' are incompatible with return type(s) of operation 'tensor<?x?x8xf32>'}}
  // expected-error @+1 {{'ragged.reduce' op failed to infer returned types}}
  %y = ragged.reduce <sum> %x : !ragged.tensor<?, [L], 8, f32> -> tensor<?x?x8xf32>
  return
}

// -----

// ... ragged for a chain ...
func.func @reduce_result_nested(%x: !ragged.tensor<?, [S], [T(S)], 8, f32>) {
  // expected-error @+2 {{'ragged.reduce' op inferred type(s) '!ragged.tensor<?, [S], 8, f32>' are incompatible with return type(s) of operation 'tensor<?x?x8xf32>'}}
  // expected-error @+1 {{'ragged.reduce' op failed to infer returned types}}
  %y = ragged.reduce <sum> %x : !ragged.tensor<?, [S], [T(S)], 8, f32> -> tensor<?x?x8xf32>
  return
}

// -----

// ... with the static batch of the source.
func.func @reduce_result_static(%x: !ragged.tensor<4, [L], 8, f32>) {
  // expected-error @+2 {{'ragged.reduce' op inferred type(s) 'tensor<4x8xf32>' are incompatible with return type(s) of operation 'tensor<?x8xf32>'}}
  // expected-error @+1 {{'ragged.reduce' op failed to infer returned types}}
  %y = ragged.reduce <sum> %x : !ragged.tensor<4, [L], 8, f32> -> tensor<?x8xf32>
  return
}

// -----

// softmax: only float element types.
func.func @softmax_int(%x: !ragged.tensor<?, [L], 8, i32>) {
  // expected-error @+1 {{'ragged.softmax' op needs a float element type, got 'i32'}}
  %y = ragged.softmax %x : !ragged.tensor<?, [L], 8, i32>
  return
}

// -----

// softmax: the result has the source type (generic form).
func.func @softmax_result(%x: !ragged.tensor<?, [L], 8, f32>) {
  // expected-error @+1 {{'ragged.softmax' op failed to verify that all of {source, result} have same type}}
  %y = "ragged.softmax"(%x) : (!ragged.tensor<?, [L], 8, f32>) -> !ragged.tensor<?, [L], 8, f16>
  return
}

// -----

// layer_norm: only float element types.
func.func @ln_int(%x: !ragged.tensor<?, [L], 8, i32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{'ragged.layer_norm' op needs a float element type, got 'i32'}}
  %y = ragged.layer_norm %x, %g, %g : !ragged.tensor<?, [L], 8, i32>, tensor<8xf32>, tensor<8xf32>
  return
}

// -----

// layer_norm: normalises over a trailing dense dim.
func.func @ln_no_dense(%x: !ragged.tensor<?, [L], f32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{'ragged.layer_norm' op needs a dense last dim after the ragged dims, got '!ragged.tensor<?, [L], f32>'}}
  %y = ragged.layer_norm %x, %g, %g : !ragged.tensor<?, [L], f32>, tensor<8xf32>, tensor<8xf32>
  return
}

// -----

// layer_norm: gamma and beta have the size of the normalised dim.
func.func @ln_gamma(%x: !ragged.tensor<?, [L], 8, f32>, %g: tensor<4xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'ragged.layer_norm' op gamma has 4 entries but the normalised dim is 8}}
  %y = ragged.layer_norm %x, %g, %b : !ragged.tensor<?, [L], 8, f32>, tensor<4xf32>, tensor<8xf32>
  return
}

// -----

func.func @ln_beta(%x: !ragged.tensor<?, [L], 8, f32>, %g: tensor<8xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{'ragged.layer_norm' op beta has 4 entries but the normalised dim is 8}}
  %y = ragged.layer_norm %x, %g, %b : !ragged.tensor<?, [L], 8, f32>, tensor<8xf32>, tensor<4xf32>
  return
}

// -----

func.func @ln_gamma_elem(%x: !ragged.tensor<?, [L], 8, f32>, %g: tensor<8xf16>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'ragged.layer_norm' op gamma element type 'f16' does not match 'f32'}}
  %y = ragged.layer_norm %x, %g, %b : !ragged.tensor<?, [L], 8, f32>, tensor<8xf16>, tensor<8xf32>
  return
}

// -----

// layer_norm: the result has the source type (generic form).
func.func @ln_result(%x: !ragged.tensor<?, [L], 8, f32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{'ragged.layer_norm' op failed to verify that all of {source, result} have same type}}
  %y = "ragged.layer_norm"(%x, %g, %g) : (!ragged.tensor<?, [L], 8, f32>, tensor<8xf32>, tensor<8xf32>) -> !ragged.tensor<?, [M], 8, f32>
  return
}

// -----

func.func @ln_gamma_rank(%x: !ragged.tensor<?, [L], 8, f32>, %g: tensor<1x8xf32>) {
  // expected-error @+1 {{'ragged.layer_norm' op operand #1 must be 1D tensor of floating-point values, but got 'tensor<1x8xf32>'}}
  %y = ragged.layer_norm %x, %g, %g : !ragged.tensor<?, [L], 8, f32>, tensor<1x8xf32>, tensor<1x8xf32>
  return
}

// -----

// scores: query is [B, L(b), heads, head_dim].
func.func @scores_layout(%q: !ragged.tensor<?, [L], 32, f32>) {
  // expected-error @+1 {{'ragged.scores' op query must be [B, L(b), heads, head_dim], got '!ragged.tensor<?, [L], 32, f32>'}}
  %s = ragged.scores %q, %q : !ragged.tensor<?, [L], 32, f32>, !ragged.tensor<?, [L], 32, f32> -> !ragged.tensor<?, [L], [L], 32, f32>
  return
}

// -----

func.func @scores_nested(%q: !ragged.tensor<?, [S], [T(S)], 2, 4, f32>) {
  // expected-error @+1 {{'ragged.scores' op query must be [B, L(b), heads, head_dim], got '!ragged.tensor<?, [S], [T(S)], 2, 4, f32>'}}
  %s = ragged.scores %q, %q : !ragged.tensor<?, [S], [T(S)], 2, 4, f32>, !ragged.tensor<?, [S], [T(S)], 2, 4, f32> -> !ragged.tensor<?, [T], [T], 2, f32>
  return
}

// -----

func.func @scores_int(%q: !ragged.tensor<?, [L], 2, 4, i32>) {
  // expected-error @+1 {{'ragged.scores' op needs a float element type, got 'i32'}}
  %s = ragged.scores %q, %q : !ragged.tensor<?, [L], 2, 4, i32>, !ragged.tensor<?, [L], 2, 4, i32> -> !ragged.tensor<?, [L], [L], 2, i32>
  return
}

// -----

// scores: key has the type of query.
func.func @scores_key(%q: !ragged.tensor<?, [L], 2, 4, f32>, %k: !ragged.tensor<?, [M], 2, 4, f32>) {
  // expected-error @+1 {{'ragged.scores' op key type must be '!ragged.tensor<?, [L], 2, 4, f32>', got '!ragged.tensor<?, [M], 2, 4, f32>'}}
  %s = ragged.scores %q, %k : !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [M], 2, 4, f32> -> !ragged.tensor<?, [L], [L], 2, f32>
  return
}

// -----

// scores: the result is [B, L(b), L(b), heads].
func.func @scores_result(%q: !ragged.tensor<?, [L], 2, 4, f32>) {
  // expected-error @+2 {{'ragged.scores' op inferred type(s) '!ragged.tensor<?, [L], [L], 2, f32>' are incompatible with return type(s) of operation '!ragged.tensor<?, [L], [L], 4, f32>'}}
  // expected-error @+1 {{'ragged.scores' op failed to infer returned types}}
  %s = ragged.scores %q, %q : !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32> -> !ragged.tensor<?, [L], [L], 4, f32>
  return
}

// -----

// scores: the result keeps a static batch.
func.func @scores_static_batch(%q: !ragged.tensor<4, [L], 2, 4, f32>) {
  // expected-error @+2 {{'ragged.scores' op inferred type(s) '!ragged.tensor<4, [L], [L], 2, f32>' are incompatible with return type(s) of operation '!ragged.tensor<?, [L], [L], 2, f32>'}}
  // expected-error @+1 {{'ragged.scores' op failed to infer returned types}}
  %s = ragged.scores %q, %q : !ragged.tensor<4, [L], 2, 4, f32>, !ragged.tensor<4, [L], 2, 4, f32> -> !ragged.tensor<?, [L], [L], 2, f32>
  return
}

// -----

// apply: values are [B, L(b), heads, head_dim].
func.func @apply_layout(%w: !ragged.tensor<?, [L], [L], f32>, %v: !ragged.tensor<?, [L], 4, f32>) {
  // expected-error @+1 {{'ragged.apply' op values must be [B, L(b), heads, head_dim], got '!ragged.tensor<?, [L], 4, f32>'}}
  %o = ragged.apply %w, %v : !ragged.tensor<?, [L], [L], f32>, !ragged.tensor<?, [L], 4, f32> -> !ragged.tensor<?, [L], 4, f32>
  return
}

// -----

// apply: weights are [B, L(b), L(b), heads] for the symbol of values.
func.func @apply_weights(%w: !ragged.tensor<?, [M], [M], 2, f32>, %v: !ragged.tensor<?, [L], 2, 4, f32>) {
  // expected-error @+1 {{'ragged.apply' op weights type must be '!ragged.tensor<?, [L], [L], 2, f32>', got '!ragged.tensor<?, [M], [M], 2, f32>'}}
  %o = ragged.apply %w, %v : !ragged.tensor<?, [M], [M], 2, f32>, !ragged.tensor<?, [L], 2, 4, f32> -> !ragged.tensor<?, [L], 2, 4, f32>
  return
}

// -----

// apply: only float element types.
func.func @apply_int(%w: !ragged.tensor<?, [L], [L], 2, i32>, %v: !ragged.tensor<?, [L], 2, 4, i32>) {
  // expected-error @+1 {{'ragged.apply' op needs a float element type, got 'i32'}}
  %o = ragged.apply %w, %v : !ragged.tensor<?, [L], [L], 2, i32>, !ragged.tensor<?, [L], 2, 4, i32> -> !ragged.tensor<?, [L], 2, 4, i32>
  return
}

// -----

// apply: the result has the type of values.
func.func @apply_result(%w: !ragged.tensor<?, [L], [L], 2, f32>, %v: !ragged.tensor<?, [L], 2, 4, f32>) {
  // expected-error @+2 {{'ragged.apply' op inferred type(s) '!ragged.tensor<?, [L], 2, 4, f32>' are incompatible with return type(s) of operation '!ragged.tensor<?, [L], 2, 8, f32>'}}
  // expected-error @+1 {{'ragged.apply' op failed to infer returned types}}
  %o = ragged.apply %w, %v : !ragged.tensor<?, [L], [L], 2, f32>, !ragged.tensor<?, [L], 2, 4, f32> -> !ragged.tensor<?, [L], 2, 8, f32>
  return
}

// -----

// attention: [B, L(b), heads, head_dim].
func.func @attention_layout(%q: !ragged.tensor<?, [L], 8, f32>) {
  // expected-error @+1 {{'ragged.attention' op query must be [B, L(b), heads, head_dim], got '!ragged.tensor<?, [L], 8, f32>'}}
  %o = ragged.attention %q, %q, %q : !ragged.tensor<?, [L], 8, f32>
  return
}

// -----

func.func @attention_int(%q: !ragged.tensor<?, [L], 2, 4, i32>) {
  // expected-error @+1 {{'ragged.attention' op needs a float element type, got 'i32'}}
  %o = ragged.attention %q, %q, %q : !ragged.tensor<?, [L], 2, 4, i32>
  return
}

// -----

// attention: key and value have the type of query (generic form; the trait checks it).
func.func @attention_key(%q: !ragged.tensor<?, [L], 2, 4, f32>, %k: !ragged.tensor<?, [M], 2, 4, f32>) {
  // expected-error @+1 {{'ragged.attention' op failed to verify that all of {query, key, value, result} have same type}}
  %o = "ragged.attention"(%q, %k, %q) : (!ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [M], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>) -> !ragged.tensor<?, [L], 2, 4, f32>
  return
}

// -----

// broadcast: the source is what ragged.reduce gives for `like`.
func.func @broadcast_source(%p: tensor<?x4xf32>, %x: !ragged.tensor<?, [L], 8, f32>) {
  // expected-error @+1 {{'ragged.broadcast' op source type must be 'tensor<?x8xf32>', got 'tensor<?x4xf32>'}}
  %b = ragged.broadcast %p like %x : tensor<?x4xf32>, !ragged.tensor<?, [L], 8, f32>
  return
}

// -----

// broadcast: one ragged dim, first.
func.func @broadcast_nested(%p: tensor<?x8xf32>, %x: !ragged.tensor<?, [S], [T(S)], 8, f32>) {
  // expected-error @+1 {{'ragged.broadcast' op broadcasts over the ragged dim of [B, L(b), dense...]; got '!ragged.tensor<?, [S], [T(S)], 8, f32>'}}
  %b = ragged.broadcast %p like %x : tensor<?x8xf32>, !ragged.tensor<?, [S], [T(S)], 8, f32>
  return
}

// -----

// attention: a dropout rate needs a seed, a seed a rate, and the rate is below 1.
func.func @attention_dropout_seed(%q: !ragged.tensor<?, [L], 2, 4, f32>) {
  // expected-error @+1 {{'ragged.attention' op dropout 1.000000e-01 needs a seed: dropout(%seed : tensor<i64>)}}
  %o = ragged.attention %q, %q, %q {dropout = 0.1 : f64} : !ragged.tensor<?, [L], 2, 4, f32>
  return
}

// -----

func.func @attention_dropout_rate(%q: !ragged.tensor<?, [L], 2, 4, f32>, %s: tensor<i64>) {
  // expected-error @+1 {{'ragged.attention' op has a seed but no dropout rate (dropout = p with 0 < p < 1)}}
  %o = ragged.attention %q, %q, %q dropout(%s : tensor<i64>) : !ragged.tensor<?, [L], 2, 4, f32>
  return
}

// -----

func.func @attention_grad_dropout_one(%q: !ragged.tensor<?, [L], 2, 4, f32>, %s: tensor<i64>) {
  // expected-error @+1 {{'ragged.attention_grad' op dropout must be in [0, 1), got 1.000000e+00}}
  %dq, %dk, %dv = ragged.attention_grad %q, %q, %q, %q dropout(%s : tensor<i64>) {dropout = 1.0 : f64}
      : !ragged.tensor<?, [L], 2, 4, f32>
  return
}

// -----

func.func @attention_dropout_seed_type(%q: !ragged.tensor<?, [L], 2, 4, f32>, %s: tensor<i32>) {
  // expected-error @+1 {{'ragged.attention' op operand #3 must be 0D tensor of 64-bit signless integer values}}
  %o = ragged.attention %q, %q, %q dropout(%s : tensor<i32>) {dropout = 0.1 : f64} : !ragged.tensor<?, [L], 2, 4, f32>
  return
}

// -----

// attention_grad: [B, L(b), heads, head_dim].
func.func @attention_grad_layout(%q: !ragged.tensor<?, [L], 8, f32>) {
  // expected-error @+1 {{'ragged.attention_grad' op query must be [B, L(b), heads, head_dim], got '!ragged.tensor<?, [L], 8, f32>'}}
  %dq, %dk, %dv = ragged.attention_grad %q, %q, %q, %q : !ragged.tensor<?, [L], 8, f32>
  return
}

// -----

// attention_grad: the gradient of the output has the query's type (its partition too).
func.func @attention_grad_partition(%q: !ragged.tensor<?, [L], 2, 4, f32>, %g: !ragged.tensor<?, [M], 2, 4, f32>) {
  // expected-error @+1 {{'ragged.attention_grad' op failed to verify that all of {query, key, value, grad, query_grad, key_grad, value_grad} have same type}}
  %dq, %dk, %dv = "ragged.attention_grad"(%q, %q, %q, %g) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 0>} : (!ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [M], 2, 4, f32>) -> (!ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>, !ragged.tensor<?, [L], 2, 4, f32>)
  return
}

// -----

// attention_grad: the forward's output has the query's type.
func.func @attention_grad_output(%q: !ragged.tensor<?, [L], 2, 4, f32>, %o: !ragged.tensor<?, [L], 2, 8, f32>) {
  // expected-error @+1 {{'ragged.attention_grad' op output type must be '!ragged.tensor<?, [L], 2, 4, f32>', got '!ragged.tensor<?, [L], 2, 8, f32>'}}
  %dq, %dk, %dv = ragged.attention_grad %q, %q, %q, %q output(%o : !ragged.tensor<?, [L], 2, 8, f32>) : !ragged.tensor<?, [L], 2, 4, f32>
  return
}

// -----

// attention_grad: lse holds one value per query row and head.
func.func @attention_grad_lse(%q: !ragged.tensor<?, [L], 2, 4, f32>, %l: !ragged.tensor<?, [L], 2, f32>) {
  // expected-error @+1 {{'ragged.attention_grad' op lse type must be '!ragged.tensor<?, [L], 2, 1, f32>', got '!ragged.tensor<?, [L], 2, f32>'}}
  %dq, %dk, %dv = ragged.attention_grad %q, %q, %q, %q lse(%l : !ragged.tensor<?, [L], 2, f32>) : !ragged.tensor<?, [L], 2, 4, f32>
  return
}

// -----

// attention: its lse result holds one value per query row and head.
func.func @attention_lse(%q: !ragged.tensor<?, [L], 2, 4, f32>) {
  // expected-error @+1 {{'ragged.attention' op lse type must be '!ragged.tensor<?, [L], 2, 1, f32>', got '!ragged.tensor<?, [L], 2, 4, f32>'}}
  %o, %l = ragged.attention %q, %q, %q : !ragged.tensor<?, [L], 2, 4, f32> lse !ragged.tensor<?, [L], 2, 4, f32>
  return
}

// -----

// gather: ids are i64...
func.func @gather_ids(%t: tensor<10x8xf32>, %ids: !ragged.tensor<?, [L], i32>) {
  // expected-error @+1 {{'ragged.gather' op ids must be i64, got 'i32'}}
  %e = ragged.gather %t[%ids] : tensor<10x8xf32>, !ragged.tensor<?, [L], i32> -> !ragged.tensor<?, [L], 8, f32>
  return
}

// -----

// ... one per position ...
func.func @gather_trailing(%t: tensor<10x8xf32>, %ids: !ragged.tensor<?, [L], 2, i64>) {
  // expected-error @+2 {{'ragged.gather' op ids must end with a ragged dim (one id per position), got '!ragged.tensor<?, [L], 2, i64>'}}
  // expected-error @+1 {{'ragged.gather' op failed to infer returned types}}
  %e = ragged.gather %t[%ids] : tensor<10x8xf32>, !ragged.tensor<?, [L], 2, i64> -> !ragged.tensor<?, [L], 2, 8, f32>
  return
}

// -----

// ... and the result is [B, L(b), D] of the table element type.
func.func @gather_result(%t: tensor<10x8xf32>, %ids: !ragged.tensor<?, [L], i64>) {
  // expected-error @+2 {{'ragged.gather' op inferred type(s) '!ragged.tensor<?, [L], 8, f32>' are incompatible with return type(s) of operation '!ragged.tensor<?, [L], 8, f16>'}}
  // expected-error @+1 {{'ragged.gather' op failed to infer returned types}}
  %e = ragged.gather %t[%ids] : tensor<10x8xf32>, !ragged.tensor<?, [L], i64> -> !ragged.tensor<?, [L], 8, f16>
  return
}

// -----

func.func @gather_result_dim(%t: tensor<10x8xf32>, %ids: !ragged.tensor<?, [L], i64>) {
  // expected-error @+2 {{'ragged.gather' op inferred type(s) '!ragged.tensor<?, [L], 8, f32>' are incompatible with return type(s) of operation '!ragged.tensor<?, [L], 4, f32>'}}
  // expected-error @+1 {{'ragged.gather' op failed to infer returned types}}
  %e = ragged.gather %t[%ids] : tensor<10x8xf32>, !ragged.tensor<?, [L], i64> -> !ragged.tensor<?, [L], 4, f32>
  return
}

// -----

// gather: the table is 2-D.
func.func @gather_table_rank(%t: tensor<8xf32>, %ids: !ragged.tensor<?, [L], i64>) {
  // expected-error @+1 {{'ragged.gather' op operand #0 must be 2D tensor of any type values, but got 'tensor<8xf32>'}}
  %e = ragged.gather %t[%ids] : tensor<8xf32>, !ragged.tensor<?, [L], i64> -> !ragged.tensor<?, [L], 8, f32>
  return
}

// -----

// concat: the result symbol differs from both operands'.
func.func @concat_not_fresh(%a: !ragged.tensor<?, [L1], 8, f32>, %b: !ragged.tensor<?, [L2], 8, f32>) {
  // expected-error @+1 {{'ragged.concat' op result symbol 'L1' must be fresh: its extents differ from the operands'}}
  %c = ragged.concat %a, %b : !ragged.tensor<?, [L1], 8, f32>, !ragged.tensor<?, [L2], 8, f32> -> !ragged.tensor<?, [L1], 8, f32>
  return
}

// -----

func.func @concat_not_fresh_rhs(%a: !ragged.tensor<?, [L1], 8, f32>, %b: !ragged.tensor<?, [L2], 8, f32>) {
  // expected-error @+1 {{'ragged.concat' op result symbol 'L2' must be fresh: its extents differ from the operands'}}
  %c = ragged.concat %a, %b : !ragged.tensor<?, [L1], 8, f32>, !ragged.tensor<?, [L2], 8, f32> -> !ragged.tensor<?, [L2], 8, f32>
  return
}

// -----

// concat: dense dims, element type and batch agree.
func.func @concat_dims(%a: !ragged.tensor<?, [L1], 8, f32>, %b: !ragged.tensor<?, [L2], 4, f32>) {
  // expected-error @+1 {{'ragged.concat' op '!ragged.tensor<?, [L3], 8, f32>' and '!ragged.tensor<?, [L2], 4, f32>' must agree in batch, dense dims and element type}}
  %c = ragged.concat %a, %b : !ragged.tensor<?, [L1], 8, f32>, !ragged.tensor<?, [L2], 4, f32> -> !ragged.tensor<?, [L3], 8, f32>
  return
}

// -----

func.func @concat_elem(%a: !ragged.tensor<?, [L1], 8, f32>, %b: !ragged.tensor<?, [L2], 8, f32>) {
  // expected-error @+1 {{'ragged.concat' op '!ragged.tensor<?, [L3], 8, f16>' and '!ragged.tensor<?, [L1], 8, f32>' must agree in batch, dense dims and element type}}
  %c = ragged.concat %a, %b : !ragged.tensor<?, [L1], 8, f32>, !ragged.tensor<?, [L2], 8, f32> -> !ragged.tensor<?, [L3], 8, f16>
  return
}

// -----

func.func @concat_batch(%a: !ragged.tensor<4, [L1], 8, f32>, %b: !ragged.tensor<?, [L2], 8, f32>) {
  // expected-error @+1 {{'ragged.concat' op '!ragged.tensor<5, [L3], 8, f32>' and '!ragged.tensor<4, [L1], 8, f32>' must agree in batch, dense dims and element type}}
  %c = ragged.concat %a, %b : !ragged.tensor<4, [L1], 8, f32>, !ragged.tensor<?, [L2], 8, f32> -> !ragged.tensor<5, [L3], 8, f32>
  return
}

// -----

// concat: single-level sequences only.
func.func @concat_layout(%a: !ragged.tensor<?, [S], [T(S)], 8, f32>, %b: !ragged.tensor<?, [L2], 8, f32>) {
  // expected-error @+1 {{'ragged.concat' op works on [B, L(b), dense...] tensors, got '!ragged.tensor<?, [S], [T(S)], 8, f32>'}}
  %c = ragged.concat %a, %b : !ragged.tensor<?, [S], [T(S)], 8, f32>, !ragged.tensor<?, [L2], 8, f32> -> !ragged.tensor<?, [L3], 8, f32>
  return
}

// -----

// split: head and tail have different symbols...
func.func @split_same(%x: !ragged.tensor<?, [L], 8, f32>, %n: tensor<?xi64>) {
  // expected-error @+1 {{'ragged.split' op head and tail need different symbols}}
  %h, %t = ragged.split %x, %n : !ragged.tensor<?, [L], 8, f32>, tensor<?xi64> -> !ragged.tensor<?, [P], 8, f32>, !ragged.tensor<?, [P], 8, f32>
  return
}

// -----

// ... both different from the source's.
func.func @split_not_fresh(%x: !ragged.tensor<?, [L], 8, f32>, %n: tensor<?xi64>) {
  // expected-error @+1 {{'ragged.split' op result symbol 'L' must be fresh: its extents differ from the operands'}}
  %h, %t = ragged.split %x, %n : !ragged.tensor<?, [L], 8, f32>, tensor<?xi64> -> !ragged.tensor<?, [L], 8, f32>, !ragged.tensor<?, [Q], 8, f32>
  return
}

// -----

func.func @split_not_fresh_tail(%x: !ragged.tensor<?, [L], 8, f32>, %n: tensor<?xi64>) {
  // expected-error @+1 {{'ragged.split' op result symbol 'L' must be fresh: its extents differ from the operands'}}
  %h, %t = ragged.split %x, %n : !ragged.tensor<?, [L], 8, f32>, tensor<?xi64> -> !ragged.tensor<?, [P], 8, f32>, !ragged.tensor<?, [L], 8, f32>
  return
}

// -----

// split: dense dims agree.
func.func @split_dims(%x: !ragged.tensor<?, [L], 8, f32>, %n: tensor<?xi64>) {
  // expected-error @+1 {{'ragged.split' op '!ragged.tensor<?, [Q], 4, f32>' and '!ragged.tensor<?, [L], 8, f32>' must agree in batch, dense dims and element type}}
  %h, %t = ragged.split %x, %n : !ragged.tensor<?, [L], 8, f32>, tensor<?xi64> -> !ragged.tensor<?, [P], 8, f32>, !ragged.tensor<?, [Q], 4, f32>
  return
}

// -----

// split: lengths are i64.
func.func @split_lengths_type(%x: !ragged.tensor<?, [L], 8, f32>, %n: tensor<?xi32>) {
  // expected-error @+1 {{'ragged.split' op operand #1 must be 1D tensor of 64-bit signless integer values, but got 'tensor<?xi32>'}}
  %h, %t = ragged.split %x, %n : !ragged.tensor<?, [L], 8, f32>, tensor<?xi32> -> !ragged.tensor<?, [P], 8, f32>, !ragged.tensor<?, [Q], 8, f32>
  return
}

// -----

// split: single-level sequences whose first item dim is ragged.
func.func @split_layout(%x: !ragged.tensor<?, 2, [L], f32>, %n: tensor<?xi64>) {
  // expected-error @+1 {{'ragged.split' op works on [B, L(b), dense...] tensors, got '!ragged.tensor<?, 2, [L], f32>'}}
  %h, %t = ragged.split %x, %n : !ragged.tensor<?, 2, [L], f32>, tensor<?xi64> -> !ragged.tensor<?, 2, [P], f32>, !ragged.tensor<?, 2, [Q], f32>
  return
}

// -----

func.func @gather_complex_table(%t: tensor<10x8xcomplex<f32>>, %ids: !ragged.tensor<?, [L], i64>) {
  // expected-error @+1 {{'ragged.gather' op table element type must be an integer, index or float type, got 'complex<f32>'}}
  %e = ragged.gather %t[%ids] : tensor<10x8xcomplex<f32>>, !ragged.tensor<?, [L], i64> -> !ragged.tensor<?, [L], 8, f32>
  return
}

// -----

func.func @matmul_integer(%x: !ragged.tensor<?, [L], 8, i32>, %w: tensor<8x3xi32>) {
  // expected-error @+1 {{'ragged.matmul' op needs a float element type, got 'i32'}}
  %y = ragged.matmul %x, %w : !ragged.tensor<?, [L], 8, i32>, tensor<8x3xi32> -> !ragged.tensor<?, [L], 3, i32>
  return
}

// -----

func.func @concat_batches_differ(%a: !ragged.tensor<4, [L], 8, f32>, %b: !ragged.tensor<5, [M], 8, f32>) {
  // expected-error @+1 {{'ragged.concat' op batch sizes of '!ragged.tensor<4, [L], 8, f32>' and '!ragged.tensor<5, [M], 8, f32>' differ}}
  %c = ragged.concat %a, %b : !ragged.tensor<4, [L], 8, f32>, !ragged.tensor<5, [M], 8, f32> -> !ragged.tensor<?, [N], 8, f32>
  return
}

// -----

func.func @split_lengths_count(%x: !ragged.tensor<4, [L], 8, f32>, %l: tensor<7xi64>) {
  // expected-error @+1 {{'ragged.split' op lengths must have one entry per item (4), got 7}}
  %h, %t = ragged.split %x, %l : !ragged.tensor<4, [L], 8, f32>, tensor<7xi64> -> !ragged.tensor<4, [P], 8, f32>, !ragged.tensor<4, [Q], 8, f32>
  return
}
