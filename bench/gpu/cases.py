"""What the GPU check runs, written down on the CPU machine: one program per
op family (as builders or MLIR text), the batches it runs on, and float64
numpy references computed item by item.

Only :mod:`prepare` imports this module (it needs ``ragged_mlir``); the
runner on the GPU machine reads what ``prepare`` wrote and nothing else.

Op families (f32, and f16 where the family has an f16 path):

- ``elementwise``: ``tanh(gelu(x) * y - x)`` on ``[B, L(b), 384]``;
- ``matmul``: ``x @ w``, ``w [384, 256]``;
- ``reduce_sum`` / ``reduce_mean`` / ``reduce_max``: over the ragged dim;
- ``softmax``: over the ragged dim;
- ``layer_norm``;
- ``attention`` / ``attention_causal``: 12 heads x 32;
- ``attention_grad`` / ``attention_grad_causal``: ``ragged.attention_grad``;
- ``conv2d`` / ``conv2d_s2``: 3x3 convolutions with a bias on images of
  their own sizes (stride 1 padding 1, stride 2 padding 1);
- ``max_pool`` / ``avg_pool``: 2x2/2 max, 3x3/1 padding 1 mean;
- ``nested_sum`` / ``nested_softmax``: documents -> sentences -> tokens,
  a sum over each sentence's tokens and a softmax over them;
- ``encoder_layer``: a post-LN BERT layer (d 384, 12 heads, FF 1536) and its
  mean-pooled output.

The timed programs are :func:`attention_program` (W3) and
:func:`encoder_program` with one or six layers (W4).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from inputs import encoder_weights, weight

from ragged_mlir import RaggedArray
from ragged_mlir.builders import Program, attention, ragged, tensor

F64 = np.float64
D, FF, HEADS, HD, N_OUT = 384, 1536, 12, 32, 256
CIN, COUT = 4, 8
NESTED_D = 64

#: Token batches: edge cases, a random one and real MNLI lengths.
TOKEN_SETS = {
    "empty_mixed": [3, 0, 5, 0],
    "batch1": [7],
    "one_long": [1, 2, 300, 1],
    "all_equal": [4] * 8,
    "all_empty": [0, 0, 0],
}

#: Image batches (height, width): an empty image among others, one image,
#: one large image among small ones, all of one size.
IMAGE_SETS = {
    "with_empty": [(5, 7), (0, 4), (9, 3), (2, 2)],
    "one_image": [(11, 6)],
    "one_large": [(3, 2), (64, 48), (2, 5)],
    "all_equal": [(8, 8)] * 4,
}

#: Document batches: sentences per document (token counts drawn per set).
NESTED_SETS = {
    "mixed": [2, 0, 3, 1],
    "one_doc": [4],
    "one_long": [1, 1, 12],
    "all_equal": [2] * 4,
}


def token_sets(seed: int, quick: bool = False) -> dict[str, list[int]]:
    """Every token batch (``quick``: the edge cases alone)."""
    if quick:
        return dict(TOKEN_SETS)
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 49, size=12)
    lens[rng.random(12) < 0.2] = 0
    return {**TOKEN_SETS, "random": [int(x) for x in lens]}


# --------------------------------------------------------------------------
# Programs
# --------------------------------------------------------------------------


def encoder_program(d=D, heads=HEADS, ff=FF, dtype="f32", batch=None, name="encoder_layer", layers=1):
    """``layers`` post-LN BERT encoder layers without biases, each with its
    own weights (``wq, wk, wv, wo, g1, b1, w1, w2, g2, b2`` per layer, in
    that order): returns (y, mean-pooled y)."""
    hd = d // heads
    prog = Program()
    w = lambda *s: tensor(*s, dtype=dtype)  # noqa: E731
    shapes = [(d, d)] * 4 + [(d,), (d,), (d, ff), (ff, d), (d,), (d,)]
    names = ["wq", "wk", "wv", "wo", "g1", "b1", "w1", "w2", "g2", "b2"]

    def one(x, wq, wk, wv, wo, g1, b1, w1, w2, g2, b2):
        q, k, v = ((x @ m).reshape(heads, hd) for m in (wq, wk, wv))
        a = (attention(q, k, v, scale=hd**-0.5)).reshape(d)
        h = ((a @ wo) + x).layer_norm(g1, b1)
        return (((h @ w1).gelu() @ w2) + h).layer_norm(g2, b2)

    def model(x, *params):
        for i in range(layers):
            x = one(x, *params[10 * i : 10 * i + 10])
        return x, x.reduce("mean")

    specs = [("x", ragged(batch, "L", d, dtype=dtype))]
    for i in range(layers):
        suffix = "" if layers == 1 else str(i)
        specs += [(f"{n}{suffix}", w(*s)) for n, s in zip(names, shapes, strict=True)]
    prog.define(name, specs, model)
    return prog


def _one_function(name: str, specs: dict, body) -> Program:
    """A program of one function ``name``, its parameters typed by ``specs``."""
    body.__name__ = name
    prog = Program()
    prog.func(**specs)(body)
    return prog


def attention_program(heads=HEADS, hd=HD, dtype="f32", name="w3_attention") -> Program:
    spec = ragged(None, "L", heads, hd, dtype=dtype)
    return _one_function(
        name, {"q": spec, "k": spec, "v": spec}, lambda q, k, v: attention(q, k, v, scale=hd**-0.5)
    )


def attention_grad_text(name: str, dtype: str, causal: bool) -> str:
    t = f"!ragged.tensor<?, [L], {HEADS}, {HD}, {dtype}>"
    attrs = f"{{scale = {HD**-0.5!r} : f64{', causal' if causal else ''}}}"
    return (
        f"func.func @{name}(%q: {t}, %k: {t}, %v: {t}, %g: {t}) -> ({t}, {t}, {t}) {{\n"
        f"  %dq, %dk, %dv = ragged.attention_grad %q, %k, %v, %g {attrs} : {t}\n"
        f"  return %dq, %dk, %dv : {t}, {t}, {t}\n}}\n"
    )


def _nested_text(name: str, dtype: str, op: str) -> str:
    n = f"!ragged.tensor<?, [S], [T(S)], {NESTED_D}, {dtype}>"
    if op == "sum":
        s = f"!ragged.tensor<?, [S], {NESTED_D}, {dtype}>"
        body = f"%y = ragged.reduce <sum> %x : {n} -> {s}"
    else:
        s = n
        body = f"%y = ragged.softmax %x : {n}"
    return f"func.func @{name}(%x: {n}) -> {s} {{\n  {body}\n  return %y : {s}\n}}\n"


def _token_program(case: str, dtype: str) -> Program:
    tok = {"x": ragged(None, "L", D, dtype=dtype)}
    att = {n: ragged(None, "L", HEADS, HD, dtype=dtype) for n in "qkv"}
    bodies = {
        "elementwise": (
            {**tok, "y": ragged(None, "L", D, dtype=dtype)},
            lambda x, y: ((x.gelu() * y) - x).tanh(),
        ),
        "reduce_sum": (tok, lambda x: x.reduce("sum")),
        "reduce_mean": (tok, lambda x: x.reduce("mean")),
        "reduce_max": (tok, lambda x: x.reduce("max", empty=float("-inf"))),
        "softmax": (tok, lambda x: x.softmax()),
        "matmul": ({**tok, "w": tensor(D, N_OUT, dtype=dtype)}, lambda x, w: x @ w),
        "layer_norm": (
            {**tok, "g": tensor(D, dtype=dtype), "b": tensor(D, dtype=dtype)},
            lambda x, g, b: x.layer_norm(g, b),
        ),
        "attention": (att, lambda q, k, v: attention(q, k, v, scale=HD**-0.5)),
        "attention_causal": (att, lambda q, k, v: attention(q, k, v, scale=HD**-0.5, causal=True)),
    }
    return _one_function(case, *bodies[case])


def _image_program(case: str, dtype: str) -> Program:
    img = {"x": ragged(None, "H", "W", CIN, dtype=dtype)}
    conv = {**img, "w": tensor(3, 3, CIN, COUT, dtype=dtype), "b": tensor(COUT, dtype=dtype)}
    bodies = {
        "conv2d": (conv, lambda x, w, b: x.conv2d(w, b, stride=1, padding=1)),
        "conv2d_s2": (conv, lambda x, w, b: x.conv2d(w, b, stride=2, padding=1)),
        "max_pool": (img, lambda x: x.max_pool2d(2)),
        "avg_pool": (img, lambda x: x.avg_pool2d(3, stride=1, padding=1)),
    }
    return _one_function(case, *bodies[case])


# --------------------------------------------------------------------------
# float64 references, item by item
# --------------------------------------------------------------------------

_erf = np.vectorize(math.erf, otypes=[F64])


def ref_gelu(x):
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))) if x.size else x.copy()


def ref_softmax(x, axis):
    if x.shape[axis] == 0:
        return x.copy()
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def ref_layer_norm(x, g, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(-1, keepdims=True) + eps) * g + b


def _probs(q, k, scale, causal):
    n = q.shape[0]
    s = np.einsum("ihd,jhd->hij", q, k) * scale
    if causal:
        s = np.where(np.triu(np.ones((n, n), bool), 1)[None], -np.inf, s)
    return ref_softmax(s, -1)


def ref_attention(q, k, v, scale, causal=False):
    """q, k, v: [n, H, d] -> [n, H, d]."""
    if q.shape[0] == 0:
        return q.copy()
    return np.einsum("hij,jhd->ihd", _probs(q, k, scale, causal), v)


def ref_attention_grad(q, k, v, g, scale, causal=False):
    """(dq, dk, dv) of ``ref_attention`` given the output gradient ``g``."""
    if q.shape[0] == 0:
        return q.copy(), k.copy(), v.copy()
    p = _probs(q, k, scale, causal)  # [h, i, j]
    dv = np.einsum("hij,ihd->jhd", p, g)
    dp = np.einsum("ihd,jhd->hij", g, v)
    ds = p * (dp - (p * dp).sum(-1, keepdims=True))
    dq = scale * np.einsum("hij,jhd->ihd", ds, k)
    dk = scale * np.einsum("hij,ihd->jhd", ds, q)
    return dq, dk, dv


def ref_encoder(x, wq, wk, wv, wo, g1, b1, w1, w2, g2, b2, heads=HEADS):
    n, d = x.shape
    hd = d // heads
    q, k, v = ((x @ m).reshape(n, heads, hd) for m in (wq, wk, wv))
    a = ref_attention(q, k, v, hd**-0.5).reshape(n, d)
    h = ref_layer_norm(a @ wo + x, g1, b1)
    y = ref_layer_norm(ref_gelu(h @ w1) @ w2 + h, g2, b2)
    return y, (y.mean(0) if n else np.zeros(d))


def _extent(size: int, k: int, stride: int, pad: int) -> int:
    return max(0, (size + 2 * pad - k) // stride + 1)


def _windows(img, k, stride, pad, fill):
    """[H', W', k, k, C] windows of a padded [H, W, C] image."""
    h, w, c = img.shape
    ho, wo = _extent(h, k, stride, pad), _extent(w, k, stride, pad)
    padded = np.full((h + 2 * pad, w + 2 * pad, c), fill, F64)
    padded[pad : pad + h, pad : pad + w] = img
    out = np.empty((ho, wo, k, k, c), F64)
    for i in range(k):
        for j in range(k):
            out[:, :, i, j] = padded[i : i + stride * ho : stride, j : j + stride * wo : stride][:ho, :wo]
    return out


def ref_conv2d(img, weight, bias, stride, pad):
    """HWIO ``weight`` on one [H, W, Cin] image -> [H', W', Cout]."""
    return np.einsum("yxijc,ijco->yxo", _windows(img, weight.shape[0], stride, pad, 0.0), weight) + bias


def ref_pool(img, kind, k, stride, pad):
    win = _windows(img, k, stride, pad, -np.inf if kind == "max" else 0.0)
    return win.max(axis=(2, 3)) if kind == "max" else win.sum(axis=(2, 3)) / (k * k)


# --------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One op family in one dtype: its program (builders or MLIR text), its
    function's name, its batches and ``make(batch, draw) -> (args,
    references)``. ``draw`` is an :class:`inputs.Draws` (the case's dtype):
    every float input comes from it, so that the runner draws it again. The
    references are one per result: a RaggedArray of float64 values or a
    float64 array."""

    name: str
    family: str
    dtype: str
    program: object
    function: str
    sets: dict
    make: Callable
    tolerance: tuple[float, float]


def _up(a):
    return np.asarray(a, F64)


def _offsets(lengths) -> np.ndarray:
    o = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=o[1:])
    return o


def _packed(draw, lengths, trailing, lo=-1.0, hi=1.0):
    """(a RaggedArray drawn as one packed array, its items as float64)."""
    o = _offsets(lengths)
    values = draw((int(o[-1]), *trailing), lo, hi)
    return RaggedArray(values, [o]), [_up(values[o[b] : o[b + 1]]) for b in range(len(lengths))]


def _token_make(case: str):
    def make(lengths, draw):
        if case.startswith("attention"):
            causal = case.endswith("causal")
            trailing = (HEADS, HD)
            (q, qs), (k, ks), (v, vs) = (
                _packed(draw, lengths, trailing, lo, hi) for lo, hi in [(-2, 2)] * 2 + [(-1, 1)]
            )
            if case.startswith("attention_grad"):
                g, gs = _packed(draw, lengths, trailing)
                grads = [
                    ref_attention_grad(*its, HD**-0.5, causal) for its in zip(qs, ks, vs, gs, strict=True)
                ]
                refs = [RaggedArray.from_list([r[i] for r in grads], F64, trailing) for i in range(3)]
                return [q, k, v, g], refs
            ref = [ref_attention(*its, HD**-0.5, causal) for its in zip(qs, ks, vs, strict=True)]
            return [q, k, v], [RaggedArray.from_list(ref, F64, trailing)]
        x, xs = _packed(draw, lengths, (D,))
        ragged_ref = lambda items, width=D: RaggedArray.from_list(items, F64, (width,))  # noqa: E731
        if case == "elementwise":
            y, ys = _packed(draw, lengths, (D,))
            return [x, y], [ragged_ref([np.tanh(ref_gelu(a) * b - a) for a, b in zip(xs, ys, strict=True)])]
        if case == "reduce_sum":
            return [x], [np.stack([it.sum(0) for it in xs]) if xs else np.zeros((0, D))]
        if case == "reduce_mean":
            return [x], [np.stack([it.mean(0) if len(it) else np.zeros(D) for it in xs])]
        if case == "reduce_max":
            return [x], [np.stack([it.max(0) if len(it) else np.full(D, -np.inf) for it in xs])]
        if case == "softmax":
            return [x], [ragged_ref([ref_softmax(it, 0) for it in xs])]
        if case == "matmul":
            w = weight(draw, (D, N_OUT), D)
            return [x, w], [ragged_ref([it @ _up(w) for it in xs], N_OUT)]
        if case == "layer_norm":
            g, b = draw((D,), 0.5, 1.5), draw((D,), -0.5, 0.5)
            return [x, g, b], [ragged_ref([ref_layer_norm(it, _up(g), _up(b)) for it in xs])]
        raise KeyError(case)

    return make


def _encoder_make(lengths, draw):
    x, xs = _packed(draw, lengths, (D,))
    (params,) = encoder_weights(draw, 1, D, FF)
    refs = [ref_encoder(it, *map(_up, params)) for it in xs]
    pooled = np.stack([r[1] for r in refs]) if refs else np.zeros((0, D))
    return [x, *params], [RaggedArray.from_list([r[0] for r in refs], F64, (D,)), pooled]


def _image_make(case: str):
    def make(sizes, draw):
        h = _offsets([s[0] for s in sizes])
        w = _offsets([s[1] for s in sizes])
        rows = _offsets([a * b for a, b in sizes])
        values = draw((int(rows[-1]), CIN))
        imgs = [_up(values[rows[i] : rows[i + 1]]).reshape(a, b, CIN) for i, (a, b) in enumerate(sizes)]
        args = [RaggedArray(values, [h, w], layout=((0,), (1,)))]
        if case.startswith("conv2d"):
            kernel = weight(draw, (3, 3, CIN, COUT), 9 * CIN)
            bias = draw((COUT,), -0.5, 0.5)
            stride = 2 if case.endswith("s2") else 1
            ref = [ref_conv2d(i, _up(kernel), _up(bias), stride, 1) for i in imgs]
            args += [kernel, bias]
        elif case == "max_pool":
            ref = [ref_pool(i, "max", 2, 2, 0) for i in imgs]
        else:
            ref = [ref_pool(i, "mean", 3, 1, 1) for i in imgs]
        return args, [RaggedArray.from_images(ref, F64)]

    return make


def _nested_make(op: str):
    def make(sentences, draw):
        counts = [[(3 * b + 5 * j) % 9 for j in range(n)] for b, n in enumerate(sentences)]
        if any(counts):  # one empty sentence whenever there is any
            next(c for c in counts if c)[0] = 0
        outer = _offsets(sentences)
        inner = _offsets([t for c in counts for t in c])
        values = draw((int(inner[-1]), NESTED_D), -2, 2)
        docs, k = [], 0
        for c in counts:
            docs.append([_up(values[inner[k + j] : inner[k + j + 1]]) for j in range(len(c))])
            k += len(c)
        arg = RaggedArray(values, [outer, inner])
        if op == "sum":
            sums = [np.stack([s.sum(0) for s in d]) if d else np.zeros((0, NESTED_D)) for d in docs]
            return [arg], [RaggedArray.from_list(sums, F64, (NESTED_D,))]
        ref = [[ref_softmax(s, 0) for s in d] for d in docs]
        return [arg], [RaggedArray.from_nested(ref, F64, (NESTED_D,))]

    return make


TOKEN_CASES = [
    "elementwise",
    "matmul",
    "reduce_sum",
    "reduce_mean",
    "reduce_max",
    "softmax",
    "layer_norm",
    "attention",
    "attention_causal",
]
IMAGE_CASES = ["conv2d", "conv2d_s2", "max_pool", "avg_pool"]
#: Families with an f16 path (the others' f16 lowering is not a claim of ours yet).
F16_FAMILIES = {
    "elementwise",
    "matmul",
    "softmax",
    "layer_norm",
    "attention",
    "attention_grad",
    "conv2d",
    "pool",
    "encoder_layer",
}


def tolerance(case: str, dtype: str) -> tuple[float, float]:
    """(rtol, atol relative to max(1, max |ref|)) for |got - ref|."""
    if dtype == "f16":
        return 3e-2, 3e-2
    if case in ("reduce_max", "max_pool"):
        return 0.0, 0.0
    if case == "encoder_layer" or case.startswith("attention_grad"):
        return 1e-3, 1e-3
    return 1e-4, 1e-4


def all_cases(seed: int = 0, quick: bool = False, dtypes=("f32", "f16"), only=None) -> list[Case]:
    """Every numerics case in ``dtypes`` (``only``: these f32 names and
    their f16 twins); ``quick``: the edge-case batches alone."""
    tokens = token_sets(seed, quick)
    out = []
    for dtype in dtypes:

        def add(name, family, program, sets, make):
            if dtype == "f16" and family not in F16_FAMILIES:
                return
            full = name if dtype == "f32" else f"{name}_f16"
            if only and name not in only:
                return
            out.append(Case(full, family, dtype, program, name, sets, make, tolerance(name, dtype)))

        for c in TOKEN_CASES:
            family = "attention" if c.startswith("attention") else ("reduce" if c.startswith("reduce") else c)
            add(c, family, _token_program(c, dtype), tokens, _token_make(c))
        for c in ("attention_grad", "attention_grad_causal"):
            add(
                c,
                "attention_grad",
                attention_grad_text(c, dtype, c.endswith("causal")),
                tokens,
                _token_make(c),
            )
        for c in IMAGE_CASES:
            family = "conv2d" if c.startswith("conv") else "pool"
            add(c, family, _image_program(c, dtype), IMAGE_SETS, _image_make(c))
        add(
            "nested_sum", "nested", _nested_text("nested_sum", dtype, "sum"), NESTED_SETS, _nested_make("sum")
        )
        add(
            "nested_softmax",
            "nested",
            _nested_text("nested_softmax", dtype, "softmax"),
            NESTED_SETS,
            _nested_make("softmax"),
        )
        add("encoder_layer", "encoder_layer", encoder_program(dtype=dtype), tokens, _encoder_make)
    return out
