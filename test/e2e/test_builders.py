"""The builders: ops reachable from Python, errors at the call that made
the mistake, and reshape to and from one element per row (numerics of
every op are in test_ops_numerics.py and test_fuzz.py)."""

from __future__ import annotations

import numpy as np
import pytest

import ragged_mlir
from ragged_mlir import RaggedArray
from ragged_mlir.builders import (
    Program,
    apply,
    concat,
    from_padded,
    match,
    pack,
    ragged,
    scores,
    split,
    tensor,
)


def test_every_structure_op_from_the_builders():
    prog = Program()

    def body(x, y, ids, p, n):
        v, o = x.values(), x.offsets("L")
        packed = pack(v, [o], ragged(None, "M", 4))
        same = match(y, x)
        back = from_padded(p, [n], "P", 4)
        h, t = split(x, n, ("A", "B"))
        return packed, same + x, back, concat(t, h, "C"), ids.to_padded(-1), x.mask()

    prog.define(
        "f",
        [
            ("x", ragged(None, "L", 4)),
            ("y", ragged(None, "K", 4)),
            ("ids", ragged(None, "S", "T(S)", dtype="i64")),
            ("p", tensor(None, None, 4)),
            ("n", tensor(None, dtype="i64")),
        ],
        body,
    )
    text = prog.module_text()
    for op in ("values", "offsets", "pack", "match", "from_padded", "split", "concat", "to_padded", "mask"):
        assert f"ragged.{op}" in text, op
    assert "padding(-1 : i64)" in text


def test_scores_and_apply():
    prog = Program()

    @prog.func(q=ragged(None, "L", 2, 4), v=ragged(None, "L", 2, 3))
    def f(q, v):
        return apply(scores(q, q, 0.5, causal=True).softmax(), v)

    module = ragged_mlir.compile(prog, options=ragged_mlir.CompileOptions(attention_buckets=0))
    rng = np.random.default_rng(0)
    qs = [rng.standard_normal((n, 2, 4)).astype(np.float32) for n in (3, 0, 2)]
    vs = [rng.standard_normal((n, 2, 3)).astype(np.float32) for n in (3, 0, 2)]
    out = module.f(RaggedArray.from_list(qs), RaggedArray.from_list(vs))
    for b, (q, v) in enumerate(zip(qs, vs, strict=True)):
        q, v = q.astype(np.float64), v.astype(np.float64)
        s = 0.5 * np.einsum("ihd,jhd->hij", q, q)
        s = np.where(np.tril(np.ones(s.shape[1:], bool)), s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True)) if s.size else s
        p = p / p.sum(-1, keepdims=True) if s.size else p
        want = np.einsum("hij,jhd->ihd", p, v)
        got = out.values[out.offsets[b] : out.offsets[b + 1]]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"item {b}")


@pytest.mark.parametrize("dims,back", [((1, 1), ()), ((1,), ())])
def test_reshape_one_element_per_row(dims, back):
    prog = Program()

    @prog.func(x=ragged(None, "L"))
    def f(x):
        y = x.reshape(*dims)
        return y, y.reshape(*back)

    module = ragged_mlir.compile(prog)
    x = RaggedArray.from_list(
        [np.arange(3, dtype=np.float32), np.zeros(0, np.float32), np.ones(2, np.float32)]
    )
    y, z = module.f(x)
    assert y.values.shape == (5, *dims)
    np.testing.assert_array_equal(y.values.reshape(-1), x.values)
    np.testing.assert_array_equal(z.values, x.values)


def _define(body, **inputs):
    Program().define("f", list(inputs.items()), body)


def test_errors_name_the_problem_at_the_call():
    with pytest.raises(ValueError, match=r"weight has 4 rows but the source's last dim is 8"):
        _define(lambda x, w: x @ w, x=ragged(None, "L", 8), w=tensor(4, 4))
    with pytest.raises(ValueError, match=r"empty: reduce 'max' needs the value of an empty segment"):
        _define(lambda x: x.reduce("max"), x=ragged(None, "L", 8))
    with pytest.raises(ValueError, match=r"kind: expected one of .*got 'prod'"):
        _define(lambda x: x.reduce("prod"), x=ragged(None, "L", 8))
    with pytest.raises(ValueError, match=r"symbol: expected one of \['L'\].*got 'T'"):
        _define(lambda x: x.offsets("T"), x=ragged(None, "L", 8))
    with pytest.raises(TypeError, match=r"weight: expected a TensorValue, got RaggedValue"):
        _define(lambda x: x @ x, x=ragged(None, "L", 8))
    with pytest.raises(ValueError, match=r"padding: expected an integer for element type i64, got 0.5"):
        _define(lambda x: x.to_padded(0.5), x=ragged(None, "L", dtype="i64"))
    with pytest.raises(ValueError, match=r"spec: dtype f16 does not match the values' element type f32"):
        _define(
            lambda x: pack(x.values(), [x.offsets("L")], ragged(None, "M", 8, dtype="f16")),
            x=ragged(None, "L", 8),
        )
    with pytest.raises(ValueError, match=r"dims: expected 2 item dims for padded"):
        _define(lambda p, n: from_padded(p, [n], "L"), p=tensor(None, None, 4), n=tensor(None, dtype="i64"))
    with pytest.raises(
        ValueError, match=r"symbols of .* do not correspond one to one|must have the same dims"
    ):
        _define(lambda x, y: match(x, y), x=ragged(None, "L", 8), y=ragged(None, "K", 4))
    with pytest.raises(ValueError, match=r"dims: \(3,\) do not hold the 8 elements"):
        _define(lambda x: x.reshape(3), x=ragged(None, "L", 8))


def test_define_checks_name_and_specs():
    prog = Program()
    prog.define("f", [("x", ragged(None, "L", 2))], lambda x: x.exp())
    with pytest.raises(ValueError, match=r"name: the module already has a function 'f'"):
        prog.define("f", [("x", ragged(None, "L", 2))], lambda x: x.exp())
    with pytest.raises(ValueError, match=r"name: expected an identifier, got '1f'"):
        prog.define("1f", [("x", ragged(None, "L", 2))], lambda x: x.exp())
    with pytest.raises(TypeError, match=r"inputs\['x'\]: expected a ragged\(...\) or tensor\(...\) spec"):
        prog.define("g", [("x", 3)], lambda x: x)
    # A failed definition leaves no half-built function behind.
    with pytest.raises(ValueError):
        prog.define("h", [("x", ragged(None, "L", 2))], lambda x: x.reduce("min"))
    assert "@h" not in prog.module_text() and "@f" in prog.module_text()
