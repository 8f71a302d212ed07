"""Element types at the standalone API: every float op in f64, f16 and bf16,
structure ops on integers and booleans, and dtype errors.

f64 is computed in f64 (IREE would demote it to f32 by default, then refuse
the caller's f64 buffers); its tanh and erf (gelu) are expanded by
``ragged-expand-math``. bf16 arrays are ``ml_dtypes.bfloat16`` (numpy has
none; iree-base-runtime depends on ml_dtypes).

References are fp64 numpy per item, computed from the inputs as rounded to
the tested dtype. Tolerances scale with the dtype's machine epsilon
(``EPS``; observed errors stay within a quarter of them): elementwise ops
``rtol = atol = 2 eps`` (one rounding in the narrow type; IREE's f16 and
bf16 math runs in f32), twice that for exp-heavy ops, and ops that sum
``n`` terms (inputs of magnitude <= 1, at most 17 terms) add
``atol = 2 eps sqrt(n - 1)``; f64 at least ``1e-14``.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

import ragged_mlir
from ragged_mlir import CompileError, CompileOptions, RaggedArray

F64 = np.float64
NP = {"f64": np.float64, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
EPS = {"f64": 2.0**-52, "f16": 2.0**-10, "bf16": 2.0**-7}
#: Empty items, one item, equal lengths and a longer one, all in one batch.
LENGTHS = [3, 0, 17, 1, 5, 5]

UNARY = {
    "neg": lambda x: -x,
    "exp": np.exp,
    "log": np.log,
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0),
    "gelu": lambda x: 0.5 * x * (1.0 + np.vectorize(math.erf, otypes=[F64])(x / math.sqrt(2.0))),
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "abs": np.abs,
    "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
}
POSITIVE = {"log", "sqrt", "rsqrt"}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum}


def _module(dt: str) -> str:
    s = f"!ragged.tensor<?, [L], 8, {dt}>"
    h = f"!ragged.tensor<?, [L], 2, 4, {dt}>"
    fns = [
        f"func.func @u_{fn}(%x: {s}) -> {s} {{\n  %y = ragged.unary <{fn}> %x : {s}\n  return %y : {s}\n}}"
        for fn in UNARY
    ]
    fns += [
        f"func.func @b_{fn}(%x: {s}, %y: {s}) -> {s} {{\n"
        f"  %z = ragged.binary <{fn}> %x, %y : {s}, {s}\n  return %z : {s}\n}}"
        for fn in BINARY
    ]
    fns.append(
        f"func.func @b_bias(%x: {s}, %b: tensor<8x{dt}>) -> {s} {{\n"
        f"  %z = ragged.binary <add> %x, %b : {s}, tensor<8x{dt}>\n  return %z : {s}\n}}"
    )
    fns.append(
        f"func.func @mm(%x: {s}, %w: tensor<8x3x{dt}>) -> !ragged.tensor<?, [L], 3, {dt}> {{\n"
        f"  %y = ragged.matmul %x, %w : {s}, tensor<8x3x{dt}> -> !ragged.tensor<?, [L], 3, {dt}>\n"
        f"  return %y : !ragged.tensor<?, [L], 3, {dt}>\n}}"
    )
    for kind in ("sum", "mean", "max"):
        empty = " empty(0.0 : " + dt + ")" if kind == "max" else ""
        fns.append(
            f"func.func @r_{kind}(%x: {s}) -> tensor<?x8x{dt}> {{\n"
            f"  %y = ragged.reduce <{kind}> %x{empty} : {s} -> tensor<?x8x{dt}>\n  return %y : tensor<?x8x{dt}>\n}}"
        )
    fns.append(
        f"func.func @softmax(%x: {s}) -> {s} {{\n  %y = ragged.softmax %x : {s}\n  return %y : {s}\n}}"
    )
    fns.append(
        f"func.func @ln(%x: {s}, %g: tensor<8x{dt}>, %b: tensor<8x{dt}>) -> {s} {{\n"
        f"  %y = ragged.layer_norm %x, %g, %b {{epsilon = 1.0e-5 : f64}} : {s}, tensor<8x{dt}>, tensor<8x{dt}>\n"
        f"  return %y : {s}\n}}"
    )
    fns.append(
        f"func.func @att(%q: {h}, %k: {h}, %v: {h}) -> {h} {{\n"
        f"  %o = ragged.attention %q, %k, %v {{scale = 0.5 : f64, causal}} : {h}\n  return %o : {h}\n}}"
    )
    fns.append(
        f"func.func @pad(%x: {s}) -> tensor<?x?x8x{dt}> {{\n"
        f"  %p = ragged.to_padded %x padding(-1.0 : {dt}) : {s} -> tensor<?x?x8x{dt}>\n"
        f"  return %p : tensor<?x?x8x{dt}>\n}}"
    )
    return "\n".join(fns) + "\n"


@pytest.fixture(scope="module")
def by_dtype():
    cache: dict = {}

    def get(dt: str):
        if dt not in cache:
            cache[dt] = ragged_mlir.compile(_module(dt))
        return cache[dt]

    return get


def _items(rng, dt, trailing, low=-1.0, high=1.0, lengths=LENGTHS):
    """Items in the tested dtype, and the same values in f64."""
    items = [rng.uniform(low, high, (n, *trailing)).astype(NP[dt]) for n in lengths]
    return RaggedArray.from_list(items), [x.astype(F64) for x in items]


def _close(got_items, want_items, dt, terms=1, exp_heavy=False):
    eps = EPS[dt]
    rtol = 2 * eps * (2 if exp_heavy else 1)
    atol = rtol + 2 * eps * math.sqrt(terms - 1)
    if dt == "f64":
        rtol, atol = max(rtol, 1e-14), max(atol, 1e-14)
    assert len(got_items) == len(want_items)
    for b, (got, want) in enumerate(zip(got_items, want_items, strict=True)):
        assert got.shape == want.shape, (b, got.shape, want.shape)
        np.testing.assert_allclose(got.astype(F64), want, rtol=rtol, atol=atol, err_msg=f"item {b} ({dt})")


DTYPES = ["f64", "f16", "bf16"]


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("fn", list(UNARY))
def test_unary(by_dtype, rng, dt, fn):
    low, high = (0.25, 3.0) if fn in POSITIVE else (-3.0, 3.0)
    x, xs = _items(rng, dt, (8,), low, high)
    out = getattr(by_dtype(dt), f"u_{fn}")(x)
    assert out.values.dtype == NP[dt]
    _close(out.to_list(), [UNARY[fn](a) for a in xs], dt, exp_heavy=fn in {"exp", "tanh", "gelu", "sigmoid"})


def test_f64_tanh_and_gelu_keep_f64_precision(by_dtype):
    """Near 0, past the expansions' switch points and in the tails, to
    within a few f64 ulps (f32 would be off by 1e-8)."""
    module = by_dtype("f64")
    grid = np.concatenate(
        [np.geomspace(1e-300, 40.0, 400), [0.0, 0.5, 1.9999999, 2.0, 2.0000001, 2.0 * math.sqrt(2)]]
    )
    row = np.concatenate([grid, -grid])
    x = RaggedArray.from_list([np.resize(row, (row.size // 8 + 1) * 8).reshape(-1, 8)])
    xs = x.values.astype(F64)
    np.testing.assert_allclose(module.u_tanh(x).values, np.tanh(xs), rtol=4e-16 * 8, atol=0)
    np.testing.assert_allclose(module.u_gelu(x).values, UNARY["gelu"](xs), rtol=1e-14, atol=1e-300)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("fn", list(BINARY))
def test_binary(by_dtype, rng, dt, fn):
    x, xs = _items(rng, dt, (8,))
    y_items = [(rng.uniform(0.5, 2.0, a.shape) * rng.choice([-1, 1], a.shape)).astype(NP[dt]) for a in xs]
    out = getattr(by_dtype(dt), f"b_{fn}")(x, RaggedArray.from_list(y_items))
    _close(out.to_list(), [BINARY[fn](a, c.astype(F64)) for a, c in zip(xs, y_items, strict=True)], dt)


@pytest.mark.parametrize("dt", DTYPES)
def test_bias_and_matmul(by_dtype, rng, dt):
    module = by_dtype(dt)
    x, xs = _items(rng, dt, (8,))
    b = rng.uniform(-1, 1, 8).astype(NP[dt])
    _close(module.b_bias(x, b).to_list(), [a + b.astype(F64) for a in xs], dt)
    w = rng.uniform(-1, 1, (8, 3)).astype(NP[dt])
    _close(module.mm(x, w).to_list(), [a @ w.astype(F64) for a in xs], dt, terms=8)


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("kind", ["sum", "mean", "max"])
def test_reduce(by_dtype, rng, dt, kind):
    x, xs = _items(rng, dt, (8,))
    out = getattr(by_dtype(dt), f"r_{kind}")(x)
    assert out.dtype == NP[dt] and out.shape == (len(LENGTHS), 8)
    ref = {
        "sum": lambda a: a.sum(0),
        "mean": lambda a: a.mean(0) if len(a) else np.zeros(8),
        "max": lambda a: a.max(0) if len(a) else np.zeros(8),
    }[kind]
    _close(list(out), [ref(a) for a in xs], dt, terms=max(LENGTHS))


@pytest.mark.parametrize("dt", DTYPES)
def test_softmax_and_layer_norm(by_dtype, rng, dt):
    module = by_dtype(dt)
    x, xs = _items(rng, dt, (8,), -2, 2)
    ref = []
    for a in xs:
        e = np.exp(a - a.max(0, keepdims=True)) if len(a) else a
        ref.append(e / e.sum(0, keepdims=True) if len(a) else a)
    _close(module.softmax(x).to_list(), ref, dt, terms=max(LENGTHS), exp_heavy=True)
    g, b = (rng.uniform(0.5, 1.5, 8).astype(NP[dt]) for _ in range(2))
    ref = [
        (a - a.mean(1, keepdims=True)) / np.sqrt(a.var(1, keepdims=True) + 1e-5) * g.astype(F64) + b
        for a in xs
    ]
    # Normalised values divide by a standard deviation of 8 terms.
    _close(module.ln(x, g, b).to_list(), ref, dt, terms=8 * 4)


@pytest.mark.parametrize("dt", DTYPES)
def test_attention(by_dtype, rng, dt):
    (q, qs), (k, ks), (v, vs) = (_items(rng, dt, (2, 4)) for _ in range(3))
    ref = []
    for a, c, e in zip(qs, ks, vs, strict=True):
        s = np.einsum("ihe,jhe->hij", a, c) * 0.5
        s = np.where(np.tril(np.ones(s.shape[1:], bool)), s, -np.inf)
        s = s - s.max(-1, keepdims=True) if s.size else s
        p = np.exp(s)
        p = p / p.sum(-1, keepdims=True)
        ref.append(np.einsum("hij,jhe->ihe", p, e))
    _close(by_dtype(dt).att(q, k, v).to_list(), ref, dt, terms=max(LENGTHS), exp_heavy=True)


@pytest.mark.parametrize("dt", DTYPES)
def test_to_padded(by_dtype, rng, dt):
    x, xs = _items(rng, dt, (8,))
    out = by_dtype(dt).pad(x)
    assert out.dtype == NP[dt]
    want = np.full((len(LENGTHS), max(LENGTHS), 8), -1.0)
    for b, a in enumerate(xs):
        want[b, : len(a)] = a
    np.testing.assert_array_equal(out.astype(F64), want)


INTS = """
func.func @gather(%t: tensor<10x4xi32>, %ids: !ragged.tensor<?, [L], i64>) -> !ragged.tensor<?, [L], 4, i32> {
  %e = ragged.gather %t[%ids] : tensor<10x4xi32>, !ragged.tensor<?, [L], i64> -> !ragged.tensor<?, [L], 4, i32>
  return %e : !ragged.tensor<?, [L], 4, i32>
}
func.func @pad_i64(%x: !ragged.tensor<?, [L], i64>) -> tensor<?x?xi64> {
  %p = ragged.to_padded %x padding(7 : i64) : !ragged.tensor<?, [L], i64> -> tensor<?x?xi64>
  return %p : tensor<?x?xi64>
}
func.func @cat_bool(%a: !ragged.tensor<?, [L], 2, i1>, %b: !ragged.tensor<?, [M], 2, i1>)
    -> !ragged.tensor<?, [N], 2, i1> {
  %c = ragged.concat %a, %b : !ragged.tensor<?, [L], 2, i1>, !ragged.tensor<?, [M], 2, i1>
      -> !ragged.tensor<?, [N], 2, i1>
  return %c : !ragged.tensor<?, [N], 2, i1>
}
func.func @split_i32(%a: !ragged.tensor<?, [L], 3, i32>, %l: tensor<?xi64>)
    -> (!ragged.tensor<?, [P], 3, i32>, !ragged.tensor<?, [Q], 3, i32>) {
  %h, %t = ragged.split %a, %l : !ragged.tensor<?, [L], 3, i32>, tensor<?xi64>
      -> !ragged.tensor<?, [P], 3, i32>, !ragged.tensor<?, [Q], 3, i32>
  return %h, %t : !ragged.tensor<?, [P], 3, i32>, !ragged.tensor<?, [Q], 3, i32>
}
"""


def test_integer_and_bool_structure_ops(rng):
    """Ops that move values (gather, to_padded, concat, split) on i32, i64
    and i1, bit-exact."""
    module = ragged_mlir.compile(INTS)
    table = rng.integers(-(2**31), 2**31 - 1, (10, 4)).astype(np.int32)
    ids = [rng.integers(0, 10, n).astype(np.int64) for n in LENGTHS]
    out = module.gather(table, RaggedArray.from_list(ids))
    assert out.values.dtype == np.int32
    for got, i in zip(out.to_list(), ids, strict=True):
        np.testing.assert_array_equal(got, table[i])
    big = [rng.integers(-(2**62), 2**62, n).astype(np.int64) for n in LENGTHS]
    padded = module.pad_i64(RaggedArray.from_list(big))
    for b, a in enumerate(big):
        np.testing.assert_array_equal(padded[b, : len(a)], a)
        assert (padded[b, len(a) :] == 7).all()
    a_items = [rng.random((n, 2)) < 0.5 for n in LENGTHS]
    b_items = [rng.random((n, 2)) < 0.5 for n in reversed(LENGTHS)]
    cat = module.cat_bool(RaggedArray.from_list(a_items), RaggedArray.from_list(b_items))
    assert cat.values.dtype == np.bool_
    for got, a, c in zip(cat.to_list(), a_items, b_items, strict=True):
        np.testing.assert_array_equal(got, np.concatenate([a, c]))
    items = [rng.integers(-100, 100, (n, 3)).astype(np.int32) for n in LENGTHS]
    cut = np.array([min(n, 2) for n in LENGTHS], np.int64)
    head, tail = module.split_i32(RaggedArray.from_list(items), cut)
    for h, t, x, c in zip(head.to_list(), tail.to_list(), items, cut, strict=True):
        np.testing.assert_array_equal(h, x[:c])
        np.testing.assert_array_equal(t, x[c:])


def test_wrong_dtype_names_the_argument(by_dtype, rng):
    module = by_dtype("f64")
    x32 = RaggedArray.from_list([np.ones((2, 8), np.float32)])
    with pytest.raises(TypeError, match=r"argument 0: expected values of dtype float64 .* got float32"):
        module.u_neg(x32)
    x, _ = _items(rng, "f64", (8,))
    with pytest.raises(TypeError, match=r"argument 1: expected dtype float64 .* got float32"):
        module.b_bias(x, np.ones(8, np.float32))
    with pytest.raises(TypeError, match=r"argument 1: expected values of dtype bfloat16 .* got float16"):
        by_dtype("bf16").b_add(
            *[RaggedArray.from_list([np.ones((1, 8), d)]) for d in (ml_dtypes.bfloat16, np.float16)]
        )


@pytest.mark.parametrize("bad", [np.complex64, np.uint8, object])
def test_ragged_array_rejects_unsupported_dtypes(bad):
    with pytest.raises(TypeError, match=r"values: expected values of dtype float16, bfloat16, .* got"):
        RaggedArray(np.zeros((3, 2), bad), [0, 1, 3])
    with pytest.raises(TypeError, match=r"items\[1\]: expected values of dtype"):
        RaggedArray.from_list([np.zeros((1, 2), np.float32), np.zeros((2, 2), bad)])


@pytest.mark.parametrize("target", ["vulkan-spirv", "metal-spirv"])
def test_f64_refused_where_the_target_has_none(target):
    s = "!ragged.tensor<?, [L], 8, f64>"
    text = f"func.func @neg(%x: {s}) -> {s} {{\n  %y = ragged.unary <neg> %x : {s}\n  return %y : {s}\n}}"
    with pytest.raises(
        CompileError, match=rf"neg argument 0: .* is f64, which .* cannot compute \(target {target}\)"
    ):
        ragged_mlir.compile(text, options=CompileOptions(target=target))
