"""``ragged.attention_grad`` end to end: dQ, dK and dV of ragged attention
against an independent fp64 reference, PyTorch's autograd through
``scaled_dot_product_attention`` run on each item alone.

Every length set of ``conftest.LENGTH_SETS`` (empty items, B = 1, one
300-long item, all-equal lengths, all items empty) and a random one, with
and without the causal mask, on several heads and on one head whose size is
no multiple of the vector width, under each bucket ladder (3 buckets, the
default; 1, every item padded to the longest; and the exact forward's
setting, 0, under which the gradient takes the default ladder). The
default configuration (3 buckets, several heads) compiles with the default
flags; the others without peeled vector remainders, which triples IREE's
compile time of these kernels and does not change their results.

Tolerances: the gradients sum over an item's keys and queries
(``n`` <= 300 terms) products of probabilities and of inputs of magnitude
<= 2, in fp32 against fp64: ``rtol=1e-4, atol=2e-5 * sqrt(n)``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from references import ref_attention_forward, ref_attention_grads

import ragged_mlir
from ragged_mlir import CompileOptions, RaggedArray


def _module(heads: int, d: int) -> str:
    t = f"!ragged.tensor<?, [L], {heads}, {d}, f32>"
    fns = []
    for name, attrs in (("grad", "scale = 0.35 : f64"), ("grad_causal", "scale = 0.35 : f64, causal")):
        fns.append(
            f"func.func @{name}(%q: {t}, %k: {t}, %v: {t}, %g: {t}) -> ({t}, {t}, {t}) {{\n"
            f"  %dq, %dk, %dv = ragged.attention_grad %q, %k, %v, %g {{{attrs}}} : {t}\n"
            f"  return %dq, %dk, %dv : {t}, {t}, {t}\n}}"
        )
    fns.append(
        f"func.func @self_grad(%x: {t}, %g: {t}) -> ({t}, {t}, {t}) {{\n"
        f"  %dq, %dk, %dv = ragged.attention_grad %x, %x, %x, %g {{scale = 0.35 : f64, causal}} : {t}\n"
        f"  return %dq, %dk, %dv : {t}, {t}, {t}\n}}"
    )
    return "\n".join(fns)


_CACHE: dict[tuple, object] = {}
_NO_PEEL = ("--iree-llvmcpu-vector-pproc-strategy=none",)


def _compiled(heads: int, d: int, buckets: int):
    key = (heads, d, buckets)
    if key not in _CACHE:
        flags = () if key == (2, 4, 3) else _NO_PEEL
        options = CompileOptions(attention_buckets=buckets, iree_attention=False, iree_flags=flags)
        _CACHE[key] = ragged_mlir.compile(_module(heads, d), options=options)
    return _CACHE[key]


def _check(outs, refs_per_item, lengths):
    tol = dict(rtol=1e-4, atol=2e-5 * math.sqrt(max([*lengths, 1])))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for which, out in zip(("dq", "dk", "dv"), outs, strict=True):
        np.testing.assert_array_equal(out.partitions[0], offsets)
        values = np.asarray(out.values)
        for b, refs in enumerate(refs_per_item):
            got = values[offsets[b] : offsets[b + 1]]
            np.testing.assert_allclose(
                got, refs[("dq", "dk", "dv").index(which)], err_msg=f"{which}, item {b}", **tol
            )


#: (heads, head size, buckets): the default ladder on both head shapes, the
#: other ladders on several heads.
CASES = {
    "h2d4-buckets3": (2, 4, 3),
    "h1d11-buckets3": (1, 11, 3),
    "h2d4-buckets1": (2, 4, 1),
    "h2d4-exact_forward": (2, 4, 0),
}


@pytest.mark.parametrize("heads,d,ladder", list(CASES.values()), ids=list(CASES.keys()))
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_attention_grad(ragged, rng, lengths, heads, d, ladder, causal):
    m = _compiled(heads, d, ladder)
    (q, qs), (k, ks), (v, vs), (g, gs) = (ragged(rng, lengths, (heads, d), -2, 2) for _ in range(4))
    outs = (m.grad_causal if causal else m.grad)(q, k, v, g)
    refs = [ref_attention_grads(*item, 0.35, causal) for item in zip(qs, ks, vs, gs, strict=True)]
    _check(outs, refs, lengths)


def test_self_attention_grad_is_per_operand(ragged, rng):
    """q, k and v the same tensor: three gradients, not their sum (the
    caller adds them), and one gather of the shared operand."""
    lengths = [5, 0, 9, 1]
    m = _compiled(2, 4, 3)
    (x, xs), (g, gs) = (ragged(rng, lengths, (2, 4), -2, 2) for _ in range(2))
    outs = m.self_grad(x, g)
    _check(outs, [ref_attention_grads(a, a, a, c, 0.35, True) for a, c in zip(xs, gs, strict=True)], lengths)


def test_attention_grad_is_per_item(ragged, rng):
    """Item b's gradients do not depend on the other items."""
    lengths = [3, 0, 12, 2]
    m = _compiled(2, 4, 3)
    batch = [ragged(rng, lengths, (2, 4), -2, 2) for _ in range(4)]
    full = m.grad_causal(*(x for x, _ in batch))
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for b in range(len(lengths)):
        one = m.grad_causal(*(RaggedArray.from_list([items[b]]) for _, items in batch))
        for f, o in zip(full, one, strict=True):
            np.testing.assert_allclose(
                np.asarray(f.values)[offsets[b] : offsets[b + 1]], o.values, rtol=1e-5, atol=1e-6
            )


def _saved_module(heads: int, d: int, causal: bool) -> str:
    """The forward with its lse, then the gradient from what it kept: both
    (output and lse), the output alone, the lse alone."""
    t = f"!ragged.tensor<?, [L], {heads}, {d}, f32>"
    tl = f"!ragged.tensor<?, [L], {heads}, 1, f32>"
    attrs = "scale = 0.35 : f64" + (", causal" if causal else "")
    fns = [
        f"func.func @forward(%q: {t}, %k: {t}, %v: {t}) -> ({t}, {tl}) {{\n"
        f"  %o, %l = ragged.attention %q, %k, %v {{{attrs}}} : {t} lse {tl}\n"
        f"  return %o, %l : {t}, {tl}\n}}"
    ]
    for name, kept in (
        ("both", f"output(%o : {t}) lse(%l : {tl})"),
        ("output", f"output(%o : {t})"),
        ("lse", f"lse(%l : {tl})"),
    ):
        fns.append(
            f"func.func @{name}(%q: {t}, %k: {t}, %v: {t}, %g: {t}) -> ({t}, {t}, {t}) {{\n"
            f"  %o, %l = ragged.attention %q, %k, %v {{{attrs}}} : {t} lse {tl}\n"
            f"  %dq, %dk, %dv = ragged.attention_grad %q, %k, %v, %g {kept} {{{attrs}}} : {t}\n"
            f"  return %dq, %dk, %dv : {t}, {t}, {t}\n}}"
        )
    return "\n".join(fns)


#: (heads, head size, buckets, causal, fused): the default ladder, the
#: exact forward's setting, under which an attention returning its lse takes
#: the default ladder too, and IREE's fused kernel (the forward's lse from
#: `iree_linalg_ext.online_attention` on the static ladder, several heads
#: and one).
SAVED_CASES = {
    "h2d4-buckets3-causal": (2, 4, 3, True, False),
    "h1d11-buckets3-full": (1, 11, 3, False, False),
    "h2d4-exact_forward-full": (2, 4, 0, False, False),
    "h2d4-fused-causal": (2, 4, 3, True, True),
    "h1d11-fused-full": (1, 11, 3, False, True),
}


def _saved_compiled(heads: int, d: int, buckets: int, causal: bool, fused: bool):
    key = ("saved", heads, d, buckets, causal, fused)
    if key not in _CACHE:
        options = CompileOptions(attention_buckets=buckets, iree_attention=fused, iree_flags=_NO_PEEL)
        _CACHE[key] = ragged_mlir.compile(_saved_module(heads, d, causal), options=options)
    return _CACHE[key]


@pytest.mark.parametrize(
    "heads,d,ladder,causal,fused", list(SAVED_CASES.values()), ids=list(SAVED_CASES.keys())
)
def test_forward_lse_and_saved_grads(ragged, rng, lengths, heads, d, ladder, causal, fused):
    """ragged.attention's lse result, and ragged.attention_grad from the
    forward's output and lse (together and each alone), against fp64."""
    m = _saved_compiled(heads, d, ladder, causal, fused)
    (q, qs), (k, ks), (v, vs), (g, gs) = (ragged(rng, lengths, (heads, d), -2, 2) for _ in range(4))
    before = [np.array(x.values) for x in (q, k, v, g)]
    out, lse = m.forward(q, k, v)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    tol = dict(rtol=1e-4, atol=2e-5 * math.sqrt(max([*lengths, 1])))
    for b, item in enumerate(zip(qs, ks, vs, strict=True)):
        ref_out, ref_lse = ref_attention_forward(*item, 0.35, causal)
        rows = slice(offsets[b], offsets[b + 1])
        np.testing.assert_allclose(np.asarray(out.values)[rows], ref_out, err_msg=f"output, item {b}", **tol)
        np.testing.assert_allclose(np.asarray(lse.values)[rows], ref_lse, err_msg=f"lse, item {b}", **tol)
    refs = [ref_attention_grads(*item, 0.35, causal) for item in zip(qs, ks, vs, gs, strict=True)]
    for fn in (m.both, m.output, m.lse):
        _check(fn(q, k, v, g), refs, lengths)
    for x, was in zip((q, k, v, g), before, strict=True):
        np.testing.assert_array_equal(x.values, was)
