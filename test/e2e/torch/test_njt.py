"""PyTorch jagged NestedTensors (NJT) under ``torch.compile``:
``ragged_mlir.torch.rewrites.njt_patterns.rewrite_njt_patterns``.

Each model takes an NJT (``torch.nested.nested_tensor(..., layout=torch.jagged)``)
and is compiled with a test backend (AOTAutograd) that applies
``rewrite_njt_patterns`` to the forward graph and runs the rewritten graph
eagerly. Every call also runs an untouched copy of the graph and requires the
two to agree (NaNs in the same places), so each rewrite is checked for
equivalence on real data; the result is also compared per item with an
independent float64 reference (plain torch on each item's dense tensor) or,
where NJT's own semantics are the point (padding values), with eager NJT.

Length sets: a random batch, B = 1, one 300-long item among short ones,
all-equal lengths and empty items mixed in. NJT does allow empty items
(``nested_tensor`` with a ``[0, D]`` component); a batch of only empty items
works for sum/mean but not for max/min/softmax, which PyTorch itself rejects
("reducing over zero-size dimension"), so that set is only used for sum/mean.

SDPA: on CPU, NJT ``scaled_dot_product_attention`` takes PyTorch's MATH path,
which breaks the graph (``.item()`` and a strided NestedTensor), so there is
nothing to rewrite. On CUDA, NJT SDPA becomes ``_flash_attention_forward`` or
``_efficient_attention_forward`` (varlen, ``cu_seqlens = offsets``); these
graphs are produced here on CPU by selecting those backends while tracing
(``capture_njt_sdpa`` for the memory-efficient one, a monkeypatch for flash);
the kernels have no CPU implementation, so those graphs are only checked
against the float64 reference.

There is deliberately no ``__init__.py`` here (see test_nested_tensor.py).
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch._dynamo.backends.common import aot_autograd  # noqa: E402

from ragged_mlir.torch.rewrites.njt_patterns import capture_njt_sdpa, rewrite_njt_patterns  # noqa: E402

D = 8
H, HD = 2, 4  # heads, head dim: H * HD == D
SUM = dict(rtol=1e-5, atol=1e-4)
EXP = dict(rtol=1e-4, atol=1e-4)

LENGTHS = {
    "random": [int(n) for n in np.random.default_rng(7).integers(1, 12, size=6)],
    "batch1": [7],
    "one_long": [1, 2, 300, 1],
    "all_equal": [4] * 6,
    "empty_mixed": [3, 0, 5, 0],
}
ALL_EMPTY = {"all_empty": [0, 0, 0]}
NONEMPTY = {k: v for k, v in LENGTHS.items() if k != "empty_mixed"}

_NOT_ON_CPU = {"aten._flash_attention_forward.default", "aten._efficient_attention_forward.default"}


# -- helpers -----------------------------------------------------------------------


@pytest.fixture
def gen(request) -> torch.Generator:
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


def make_njt(gen, lens, trailing=(D,), dtype=torch.float32):
    items = [torch.randn((n, *trailing), generator=gen, dtype=torch.float64).to(dtype) for n in lens]
    return torch.nested.nested_tensor(items, layout=torch.jagged)


class RewriteBackend:
    """AOTAutograd backend: copy the graph, rewrite it, run the rewritten
    graph and (when it can run on CPU) the copy, and require equal results."""

    def __init__(self, fuse_mean: bool = False, **tol):
        self.fuse_mean = fuse_mean
        self.tol = tol or dict(rtol=1e-5, atol=1e-5)
        self.rewrites: list[str] = []  # patterns turned into ragged ops
        self.conversions: list[str] = []  # leftover pads / unpads as ragged ops
        self.refused: list = []
        self.codes: list[str] = []
        self.compared = 0
        self.backend = aot_autograd(fw_compiler=self.compile)

    def compile(self, gm: torch.fx.GraphModule, example_inputs):
        graph = torch.fx.Graph()
        graph.output(graph.graph_copy(gm.graph, {}))
        original = torch.fx.GraphModule(gm, graph)
        runnable = not any(str(n.target) in _NOT_ON_CPU for n in graph.nodes)
        for r in rewrite_njt_patterns(gm, fuse_mean=self.fuse_mean, explain=self.refused):
            generic = r.endswith(("-> ragged.to_padded", "-> ragged.from_padded"))
            (self.conversions if generic else self.rewrites).append(r)
        self.codes.append(gm.code)

        def run(*args):
            out = gm(*args)
            if runnable:
                ref = original(*args)
                assert len(out) == len(ref)
                for a, b in zip(out, ref, strict=False):
                    if isinstance(a, torch.Tensor):
                        torch.testing.assert_close(a, b, equal_nan=True, **self.tol)
                self.compared += 1
            return out

        return run

    def __call__(self, gm, example_inputs):
        return self.backend(gm, example_inputs)


def compiled(fn, backend: RewriteBackend, fullgraph: bool = True):
    torch._dynamo.reset()
    return torch.compile(fn, backend=backend, fullgraph=fullgraph)


def close(actual, expected, **tol):
    torch.testing.assert_close(
        actual.to(torch.float64), expected.to(torch.float64), equal_nan=True, **(tol or SUM)
    )


def check_pooled(out, x, ref_fn, **tol):
    """``out [B, ...]`` against ``ref_fn(item in float64)`` per item."""
    items = x.unbind()
    assert out.shape[0] == len(items)
    for i, item in enumerate(items):
        close(out[i], ref_fn(item.to(torch.float64)), **tol)


def check_nested(out, x, ref_fn, **tol):
    assert out.is_nested
    got, items = out.unbind(), x.unbind()
    assert len(got) == len(items)
    for a, item in zip(got, items, strict=False):
        close(a, ref_fn(item.to(torch.float64)), **tol)


def assert_no_padding_left(backend: RewriteBackend):
    for code in backend.codes:
        assert "_jagged_to_padded_dense_forward" not in code, code
        assert "_padded_dense_to_jagged_forward" not in code, code


# -- reductions over the ragged dim -----------------------------------------------------


def _sum(t):
    return t.sum(0)


def _mean(t):
    return t.sum(0) / t.shape[0]  # 0/0 = NaN for an empty item, like NJT


@pytest.mark.parametrize("lens", list({**LENGTHS, **ALL_EMPTY}.values()), ids=list({**LENGTHS, **ALL_EMPTY}))
@pytest.mark.parametrize("keepdim", [False, True])
def test_sum(gen, lens, keepdim):
    x = make_njt(gen, lens)
    be = RewriteBackend(**SUM)
    with torch.no_grad():
        out = compiled(lambda x: x.sum(dim=1, keepdim=keepdim), be)(x)
    assert len(be.rewrites) == 1 and "segment_reduce(sum)" in be.rewrites[0]
    assert_no_padding_left(be)
    assert be.compared == 1
    assert out.shape == ((len(lens), 1, D) if keepdim else (len(lens), D))
    check_pooled(out.reshape(len(lens), D), x, _sum)


@pytest.mark.parametrize("lens", list({**LENGTHS, **ALL_EMPTY}.values()), ids=list({**LENGTHS, **ALL_EMPTY}))
@pytest.mark.parametrize("fuse_mean", [False, True], ids=["sum_div", "fused"])
def test_mean(gen, lens, fuse_mean):
    x = make_njt(gen, lens)
    be = RewriteBackend(fuse_mean=fuse_mean, **SUM)
    with torch.no_grad():
        out = compiled(lambda x: x.mean(dim=1), be)(x)
    kind = "mean" if fuse_mean else "sum"
    assert len(be.rewrites) == 1 and f"segment_reduce({kind})" in be.rewrites[0], be.rewrites
    assert_no_padding_left(be)
    assert be.compared == 1
    check_pooled(out, x, _mean)
    if 0 in lens:
        assert torch.isnan(out[lens.index(0)]).all()


@pytest.mark.parametrize("lens", list(LENGTHS.values()), ids=list(LENGTHS))
@pytest.mark.parametrize(
    "op",
    ["amax", "amin", "max_values", "min_values"],
)
def test_max_min(gen, lens, op):
    x = make_njt(gen, lens)
    fn = {
        "amax": lambda x: x.amax(dim=1),
        "amin": lambda x: x.amin(dim=1),
        "max_values": lambda x: x.max(dim=1).values,
        "min_values": lambda x: x.min(dim=1)[0],
    }[op]
    is_max = op.startswith(("amax", "max"))
    be = RewriteBackend()
    with torch.no_grad():
        out = compiled(fn, be)(x)
    assert len(be.rewrites) == 1 and f"segment_reduce({'max' if is_max else 'min'})" in be.rewrites[0]
    assert_no_padding_left(be)
    assert be.compared == 1
    pad = torch.finfo(torch.float32).min if is_max else torch.finfo(torch.float32).max
    for i, item in enumerate(x.unbind()):
        if item.shape[0] == 0:  # NJT: the padding value
            assert (out[i] == pad).all()
        else:
            close(out[i], item.amax(0) if is_max else item.amin(0), rtol=0, atol=0)


def test_max_with_indices(gen):
    """``max.dim``'s values are rewritten, its indices keep the padded op."""
    x = make_njt(gen, LENGTHS["random"])
    be = RewriteBackend()
    with torch.no_grad():
        values, indices = compiled(lambda x: tuple(x.max(dim=1)), be)(x)
    assert len(be.rewrites) == 1
    assert be.compared == 1
    for i, item in enumerate(x.unbind()):
        close(values[i], item.amax(0), rtol=0, atol=0)
        torch.testing.assert_close(indices[i], item.argmax(0))


@pytest.mark.parametrize("op", ["amax", "amin"])
def test_max_min_infinite_items(op):
    """An item of only -inf (+inf for min) shorter than the padded length:
    NJT's padded reduction gives the padding value (finfo.min / max), not
    -inf; the rewrite keeps that (where(len < L, clamp(seg, pad), seg))."""
    inf = -math.inf if op == "amax" else math.inf
    items = [
        torch.full((2, D), inf),
        torch.randn(5, D),
        torch.full((5, D), inf),
        torch.tensor([[math.nan] * D]),
    ]
    x = torch.nested.nested_tensor(items, layout=torch.jagged)
    fn = (lambda x: x.amax(dim=1)) if op == "amax" else (lambda x: x.amin(dim=1))
    be = RewriteBackend()
    with torch.no_grad():
        out = compiled(fn, be)(x)
        eager = fn(x)
    assert len(be.rewrites) == 1 and be.compared == 1
    torch.testing.assert_close(out, eager, equal_nan=True, rtol=0, atol=0)
    pad = torch.finfo(torch.float32).min if op == "amax" else torch.finfo(torch.float32).max
    assert (out[0] == pad).all()  # short item of infinities: the padding value
    assert (out[2] == inf).all()  # full-length item: the true extremum
    assert torch.isnan(out[3]).all()


@pytest.mark.parametrize("lens", list(LENGTHS.values()), ids=list(LENGTHS))
@pytest.mark.parametrize("op", ["sum", "mean", "amax"])
def test_reduce_4d(gen, lens, op):
    """``[B, j, H, d]``: NJT flattens to ``[rows, H*d]`` before padding and
    unflattens after; the rewrite reduces the flat values and views back."""
    x = make_njt(gen, lens)
    fn = {
        "sum": lambda x: x.unflatten(-1, (H, HD)).sum(dim=1),
        "mean": lambda x: x.unflatten(-1, (H, HD)).mean(dim=1),
        "amax": lambda x: x.unflatten(-1, (H, HD)).amax(dim=1),
    }[op]
    be = RewriteBackend(fuse_mean=True, **SUM)
    with torch.no_grad():
        out = compiled(fn, be)(x)
    assert len(be.rewrites) == 1, be.rewrites
    assert_no_padding_left(be)
    assert out.shape == (len(lens), H, HD)
    for i, item in enumerate(x.unbind()):
        t = item.to(torch.float64).unflatten(-1, (H, HD))
        if op == "amax":
            if t.shape[0]:
                close(out[i], t.amax(0), rtol=0, atol=0)
        else:
            close(out[i], _sum(t) if op == "sum" else _mean(t))


# -- softmax over the ragged dim ---------------------------------------------------------


def _softmax0(t):
    e = torch.exp(t - t.max(0, keepdim=True).values) if t.shape[0] else t
    return e / e.sum(0, keepdim=True)


@pytest.mark.parametrize("lens", list(LENGTHS.values()), ids=list(LENGTHS))
@pytest.mark.parametrize("shape", ["3d", "4d"])
def test_softmax(gen, lens, shape):
    x = make_njt(gen, lens)
    if shape == "3d":
        fn = lambda x: x.softmax(dim=1)  # noqa: E731
    else:
        fn = lambda x: x.unflatten(-1, (H, HD)).softmax(dim=1)  # noqa: E731
    be = RewriteBackend(**EXP)
    with torch.no_grad():
        out = compiled(fn, be)(x)
    assert len(be.rewrites) == 1 and "segment_softmax" in be.rewrites[0]
    assert_no_padding_left(be)
    assert be.compared == 1
    if shape == "3d":
        check_nested(out, x, _softmax0, **EXP)
    else:
        check_nested(out, x, lambda t: _softmax0(t.unflatten(-1, (H, HD))), **EXP)


def test_softmax_special_values():
    """-inf entries get 0, a column of only -inf gives NaN, like NJT."""
    a = torch.randn(4, D)
    a[1] = -math.inf
    b = torch.full((2, D), -math.inf)
    c = torch.randn(6, D)
    x = torch.nested.nested_tensor([a, b, c], layout=torch.jagged)
    be = RewriteBackend(**EXP)
    with torch.no_grad():
        out = compiled(lambda x: x.softmax(dim=1), be)(x)
        eager = x.softmax(dim=1)
    assert len(be.rewrites) == 1 and be.compared == 1
    torch.testing.assert_close(out.values(), eager.values(), equal_nan=True, **EXP)
    assert (out.unbind()[0][1] == 0).all()
    assert torch.isnan(out.unbind()[1]).all()


# -- attention -------------------------------------------------------------------------


def _attention_ref(x, causal, scale, k_fn, v_fn):
    q = x.to(torch.float64).unflatten(-1, (H, HD)).transpose(0, 1)  # [H, n, d]
    k, v = k_fn(q), v_fn(q)
    n = q.shape[1]
    if n == 0:
        return x.to(torch.float64)
    s = (q @ k.transpose(-1, -2)) * (scale if scale is not None else 1 / math.sqrt(HD))
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), -math.inf)
    p = torch.softmax(s, -1)
    return (p @ v).transpose(0, 1).flatten(-2)


def _sdpa_model(causal, scale):
    def fn(x):
        q = x.unflatten(-1, (H, HD)).transpose(1, 2)
        out = F.scaled_dot_product_attention(q, q * 0.5, q + 1.0, is_causal=causal, scale=scale)
        return out.transpose(1, 2).flatten(-2)

    return fn


@pytest.mark.parametrize("lens", list(LENGTHS.values()), ids=list(LENGTHS))
@pytest.mark.parametrize(
    "causal,scale", [(False, None), (True, None), (False, 0.3)], ids=["plain", "causal", "scale"]
)
def test_sdpa_efficient(gen, lens, causal, scale):
    """NJT SDPA as on CUDA's memory-efficient path, via capture_njt_sdpa."""
    x = make_njt(gen, lens)
    be = RewriteBackend()
    with torch.no_grad(), capture_njt_sdpa():
        out = compiled(_sdpa_model(causal, scale), be)(x)
    assert len(be.rewrites) == 1 and "ragged.attention" in be.rewrites[0], be.rewrites
    assert f"causal={causal}" in be.rewrites[0]
    want_scale = scale if scale is not None else 1 / math.sqrt(HD)
    assert f"scale={want_scale:g}" in be.rewrites[0]
    assert all("_efficient_attention_forward" not in c for c in be.codes)
    check_nested(
        out, x, lambda t: _attention_ref(t, causal, scale, lambda q: q * 0.5, lambda q: q + 1.0), **EXP
    )


@pytest.mark.parametrize("lens", list(NONEMPTY.values()), ids=list(NONEMPTY))
@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_flash(gen, lens, causal, monkeypatch):
    """NJT SDPA as on CUDA's flash path (selected while tracing)."""
    import torch.nested._internal.sdpa as nsdpa
    from torch.nn.attention import SDPBackend

    original = nsdpa._select_sdp_backend
    monkeypatch.setattr(
        nsdpa,
        "_select_sdp_backend",
        lambda *a: SDPBackend.FLASH_ATTENTION if torch.compiler.is_compiling() else original(*a),
    )
    x = make_njt(gen, lens, trailing=(2 * 8,))  # head dim 8: no flash padding of the head dim
    heads, hd = 2, 8

    def fn(x):
        q = x.unflatten(-1, (heads, hd)).transpose(1, 2)
        return (
            F.scaled_dot_product_attention(q, q * 0.5, q + 1.0, is_causal=causal).transpose(1, 2).flatten(-2)
        )

    be = RewriteBackend()
    with torch.no_grad():
        out = compiled(fn, be)(x)
    assert len(be.rewrites) == 1 and "_flash_attention_forward" in be.rewrites[0], be.rewrites
    assert all("_flash_attention_forward" not in c for c in be.codes)

    def ref(t):
        q = t.unflatten(-1, (heads, hd)).transpose(0, 1)
        o = F.scaled_dot_product_attention(q, q * 0.5, q + 1.0, is_causal=causal)
        return o.transpose(0, 1).flatten(-2)

    check_nested(out, x, ref, **EXP)


def test_sdpa_capture_leaves_eager_and_grad_alone(gen):
    """capture_njt_sdpa changes nothing outside tracing, nor with grad."""
    x = make_njt(gen, [3, 5, 2])
    fn = _sdpa_model(False, None)
    with torch.no_grad():
        expected = fn(x)
        with capture_njt_sdpa():
            eager = fn(x)  # MATH path, as without the context
    torch.testing.assert_close(eager.values(), expected.values())
    lin = nn.Linear(D, D)
    be = RewriteBackend()
    with capture_njt_sdpa():
        out = compiled(lambda x: fn(lin(x)), be, fullgraph=False)(x)  # requires grad: graph break, eager SDPA
    assert not any("attention" in r for r in be.rewrites)
    with torch.no_grad():
        torch.testing.assert_close(out.values(), fn(lin(x)).values(), **EXP)


# -- what is left alone -----------------------------------------------------------------


def test_per_token_model_untouched(gen):
    """Linear / GELU / LayerNorm / residual on NJT: values-only ops, no pattern."""
    torch.manual_seed(0)
    lin, ln = nn.Linear(D, D).double(), nn.LayerNorm(D).double()
    model = lambda x: ln(F.gelu(lin(x)) + x)  # noqa: E731
    x = make_njt(gen, LENGTHS["random"], dtype=torch.float64)
    be = RewriteBackend()
    with torch.no_grad():
        out = compiled(model, be)(x)
        check_nested(out, x, model, rtol=1e-12, atol=1e-12)
    assert be.rewrites == [] and be.compared == 1


@pytest.mark.parametrize(
    "name",
    ["pad1_sum", "pad_sum_dim2", "pad_softmax_dim2", "pad0_softmax", "pad0_amax"],
)
def test_other_paddings_and_dims(gen, name):
    """Explicit ``to_padded_tensor`` with other padding values or dims: a sum
    over padding 1, a reduction or softmax over a non-ragged dim and a
    softmax over zero padding are refused; a max over zero padding is still
    an exact rewrite (the clamp by the padding value for short items)."""
    from torch.nested._internal.nested_tensor import nested_from_padded

    x = make_njt(gen, LENGTHS["empty_mixed"])
    fn = {
        "pad1_sum": lambda x: torch.nested.to_padded_tensor(x, 1.0).sum(dim=1),
        "pad_sum_dim2": lambda x: torch.nested.to_padded_tensor(x, 0.0).sum(dim=2),
        "pad_softmax_dim2": lambda x: torch.nested.to_padded_tensor(x, -math.inf).softmax(dim=2),
        "pad0_softmax": lambda x: nested_from_padded(
            torch.nested.to_padded_tensor(x, 0.0).softmax(dim=1), x.offsets(), sum_S=x.values().shape[0]
        ),
        "pad0_amax": lambda x: torch.nested.to_padded_tensor(x, 0.0).amax(dim=1),
    }[name]
    be = RewriteBackend()
    with torch.no_grad():
        out = compiled(fn, be, fullgraph=False)(x)
        expected = fn(x)
    if out.is_nested:
        out, expected = out.values(), expected.values()
    torch.testing.assert_close(out, expected, equal_nan=True)
    assert be.compared >= 1
    if name == "pad0_amax":
        assert len(be.rewrites) == 1
    else:
        assert be.rewrites == [], be.rewrites
        if name != "pad_softmax_dim2":  # that one has no candidate at all
            assert be.refused, name  # the candidate was seen and refused
        # The padding itself still becomes ragged.to_padded.
        assert any(c.endswith("-> ragged.to_padded") for c in be.conversions), be.conversions


def test_explain_reports_refusals(gen):
    x = make_njt(gen, LENGTHS["random"])
    explain: list = []

    def backend(gm, example_inputs):
        def fw(g, _):
            rewrite_njt_patterns(g, explain=explain)
            return g.forward

        return aot_autograd(fw_compiler=fw)(gm, example_inputs)

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(lambda x: torch.nested.to_padded_tensor(x, 1.0).sum(dim=1), backend=backend)(x)
    assert any("padding 1.0" in reason for _, reason in explain), explain


# -- the ragged backend -------------------------------------------------------------------


class PerToken(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(D, D)
        self.norm = nn.LayerNorm(D)

    def forward(self, x):
        return self.norm(F.gelu(self.lin(x)))


def test_ragged_backend_per_token(gen):
    pytest.importorskip("torch_mlir")
    import ragged_mlir.torch  # noqa: F401  (registers backend="ragged")

    torch.manual_seed(0)
    model = PerToken()
    x = make_njt(gen, LENGTHS["random"])
    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(model, backend="ragged", options={"fallback": False})(x)
        expected = model(x)
    assert out.is_nested
    for a, e in zip(out.unbind(), expected.unbind(), strict=False):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)


class _Pool(nn.Module):
    def __init__(self, how):
        super().__init__()
        self.how = how

    def forward(self, x):
        if self.how == "mean":
            return x.mean(dim=1)
        if self.how == "amax":
            return x.amax(dim=1)
        return x.softmax(dim=1)


@pytest.mark.parametrize("how", ["mean", "amax", "softmax"])
def test_ragged_backend_compiles_njt_patterns(gen, how):
    """Through backend="ragged" with no fallback: the rewritten ragged ops
    are compiled, and the results match eager NJT."""
    pytest.importorskip("torch_mlir")
    import ragged_mlir.torch  # noqa: F401
    from ragged_mlir.torch import backend as rb

    model = _Pool(how)
    x = make_njt(gen, LENGTHS["random"])
    torch._dynamo.reset()
    compiled_before = rb.stats["compiled"]
    with torch.no_grad():
        out = torch.compile(model, backend="ragged", options={"fallback": False})(x)
        expected = model(x)
    assert rb.stats["compiled"] == compiled_before + 1
    if how == "softmax":
        for a, e in zip(out.unbind(), expected.unbind(), strict=False):
            torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-6)
    else:
        torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-6)
