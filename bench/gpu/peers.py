"""Torch peers of the GPU check: the PyTorch ways of computing the workloads
that ``bench/gpu/run.py`` times ragged-mlir's compiled modules against, on
the same device, and float64 references to check every result against.

The module imports only torch, numpy and the standard library, never
``ragged_mlir``: the runner uses it on GPU machines that have torch but no
build of this repository, and on the CPU for a smoke test.

Attention, softmax(scale q k^T [+ causal]) v per item over the item's own
rows, from packed q, k, v [N, H, d] and offsets [B + 1]
(:func:`attention_peers`):

  padded SDPA                   ``F.scaled_dot_product_attention`` on
                                [B, H, Lmax, d] zero-padded tensors with a
                                boolean key-padding mask (and the causal mask
                                combined with it): what most code does.
  padded flash SDPA (no mask)   the same padded tensors with no mask, on the
                                flash backend on CUDA: B * Lmax^2 work at the
                                card's best speed per FLOP. Its padded items
                                are wrong by design (their queries see the
                                padding); it is a speed reference.
  NJT SDPA                      jagged nested tensors [B, j, H, d] seen as
                                [B, H, j, d], the nested-tensor SDPA.
  FlexAttention packed          all rows as one sequence [1, H, N, d] with a
                                document BlockMask (same item, and causal),
                                ``flex_attention`` under ``torch.compile``.
  varlen_attn                   ``torch.nn.attention.varlen``'s flash
                                varlen kernel on packed rows and cu_seqlens,
                                where this torch has it.

Encoder, stacked post-LN BERT layers without biases and mean pooling
(:func:`encoder_peers`):

  padded eager          [B, Lmax, D], SDPA with a key-padding mask, masked
                        mean pooling.
  NJT eager             the same layer code on a jagged nested tensor.
  FlexAttention packed  the linears on packed rows, flex_attention with a
                        document BlockMask, the whole model compiled.
  varlen_attn packed    the linears on packed rows, varlen_attn.
  inductor padded       ``torch.compile`` of the padded eager model.

Training step, forward, cross-entropy loss and backward without the
optimizer, of ``nn.TransformerEncoderLayer`` layers, masked mean pooling and
a linear head, the model users write (:func:`training_peers`):

  padded eager          [B, Lmax, D] with ``src_key_padding_mask``.
  NJT eager             the layers written out on a jagged nested tensor.
  inductor padded       ``torch.compile`` of the padded model's forward,
                        backward through it.
  FlexAttention packed  the model's own parameters on packed rows,
                        flex_attention with a document BlockMask, the
                        forward compiled, backward through it.

Everything a peer needs (device tensors, masks, compiled functions) is made
before the peer is returned, and the peer has already run (compiled peers
are compiled then: compile time is not benchmark time), so ``Peer.run`` does only
the work being timed. A compiled peer compiles once per configuration (the
function, heads, layers, model sizes, dtype, device, causal) for dynamic
shapes, and the later batches of any B and lengths reuse that code: a compile
takes 10 to 60 s on a GPU, one per batch would not fit the runner's budget. A peer that this torch, device or dtype cannot run is
left out and named in the ``skipped`` dict with a one-line reason instead of
raising: the GPU machine's torch differs from the development one, and one
missing kernel must not cost the other numbers.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import inspect
import logging
import math
import re
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

try:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention
except ImportError:  # torch before 2.5
    create_block_mask = flex_attention = None

#: FlexAttention's BlockMask works on blocks of this many rows; the packed
#: sequence is padded to a multiple of it with rows of a document of their own.
FLEX_BLOCK = 128

#: The padded SDPA without a mask: right only where no item is padded.
NO_MASK_FLASH = "padded flash SDPA (no mask)"

#: The layer norms' epsilon (BERT's and torch's default).
LN_EPS = 1e-5


@dataclasses.dataclass
class Peer:
    """One torch way of computing a workload, ready to time.

    ``run()`` does the whole work on tensors already on the device and
    returns its output in the peer's own layout; ``packed(out)`` turns that
    output into the packed float64 numpy result the references give, for the
    runner's cross-checks (not timed)."""

    name: str
    run: Callable[[], Any]
    packed: Callable[[Any], np.ndarray]
    flops_note: str = ""
    #: The module a training peer trains (its grads after ``run()``), for
    #: checks; None for the other peers.
    model: Any = None


def torch_device(driver: str) -> str:
    """The torch device that runs next to an IREE driver: 'cuda' for the GPU
    drivers when torch sees a GPU, else 'cpu'."""
    if driver in ("cuda", "vulkan") and torch.cuda.is_available():
        return "cuda"
    return "cpu"


def sync(device: str) -> None:
    """Waits for the device's queued work (CUDA launches are asynchronous)."""
    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def gemm_peak_flops(device: str, dtype: str, n: int | None = None) -> float:
    """Measured FLOP/s of a square ``torch.matmul`` in ``dtype`` on
    ``device``: the roof the runner divides achieved FLOP/s by.

    n is 8192 on CUDA (big enough to reach the tensor cores' steady state)
    and 2048 on the CPU for float32; a CPU half-precision matmul has no fast
    kernel (about 40 s at 2048 on two cores), so the CPU uses 512 there.
    float32 runs with TF32 off, so it is the true fp32 peak; the global flag
    is put back afterwards. The result is 2 n^3 over the best of a few timed
    repetitions after warm-up."""
    tdt = _torch_dtype(dtype)
    cuda = str(device).startswith("cuda")
    if n is None:
        n = 8192 if cuda else (2048 if tdt == torch.float32 else 512)
    # On CUDA one repetition is several matmuls, so launch and timer overhead
    # do not count against a ~1 ms half-precision matmul.
    per_rep, reps = (10, 5) if cuda else (1, 3)
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(n, n, generator=gen).to(device=device, dtype=tdt)
    b = torch.randn(n, n, generator=gen).to(device=device, dtype=tdt)
    c = torch.empty(n, n, device=device, dtype=tdt)
    saved_tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        for _ in range(2 if cuda else 1):
            torch.matmul(a, b, out=c)
        sync(device)
        best = math.inf
        for _ in range(reps):
            start = time.perf_counter()
            for _ in range(per_rep):
                torch.matmul(a, b, out=c)
            sync(device)
            best = min(best, (time.perf_counter() - start) / per_rep)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved_tf32
    return 2.0 * n**3 / best


# ---------------------------------------------------------------------------
# float64 references
# ---------------------------------------------------------------------------


def _check_offsets(offsets, rows: int) -> np.ndarray:
    off = np.asarray(offsets, dtype=np.int64)
    if off.ndim != 1 or off.size < 1 or off[0] != 0 or np.any(np.diff(off) < 0) or off[-1] != rows:
        raise ValueError(f"offsets must rise from 0 to the {rows} packed rows, got {off.tolist()}")
    return off


def _softmax_attention_f64(q, k, v, scale: float, causal: bool) -> np.ndarray:
    """One item: q, k, v float64 [L, H, d] -> [L, H, d]."""
    qh, kh, vh = (a.transpose(1, 0, 2) for a in (q, k, v))
    s = scale * (qh @ kh.transpose(0, 2, 1))
    if causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    s -= s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p /= p.sum(axis=-1, keepdims=True)
    return (p @ vh).transpose(1, 0, 2)


def ref_attention_f64(q, k, v, offsets, scale: float, causal: bool = False) -> np.ndarray:
    """softmax(scale q k^T [+ causal]) v of each item alone, in float64:
    packed [N, H, d] in, packed float64 [N, H, d] out."""
    q, k, v = (np.asarray(a, dtype=np.float64) for a in (q, k, v))
    off = _check_offsets(offsets, q.shape[0])
    out = np.zeros(q.shape)
    for s, e in zip(off[:-1], off[1:], strict=True):
        if e > s:
            out[s:e] = _softmax_attention_f64(q[s:e], k[s:e], v[s:e], scale, causal)
    return out


def _layer_norm_f64(z, g, b) -> np.ndarray:
    mean = z.mean(axis=-1, keepdims=True)
    var = ((z - mean) ** 2).mean(axis=-1, keepdims=True)
    return (z - mean) / np.sqrt(var + LN_EPS) * g + b


def _gelu_f64(z) -> np.ndarray:
    """Exact gelu; numpy has no erf, torch's float64 one is exact enough."""
    erf = torch.special.erf(torch.from_numpy(z / math.sqrt(2.0))).numpy()
    return 0.5 * z * (1.0 + erf)


def ref_encoder_f64(x, offsets, layers, heads: int) -> tuple[np.ndarray, np.ndarray]:
    """The encoder of :func:`encoder_peers` in float64, each item's attention
    over its own rows: returns (y packed [N, D], pooled [B, D]), pooled the
    mean of each item's rows and 0 for an empty item."""
    y = np.array(x, dtype=np.float64)
    off = _check_offsets(offsets, y.shape[0])
    rows, dim = y.shape
    hd = dim // heads
    for layer in layers:
        wq, wk, wv, wo, g1, b1, w1, w2, g2, b2 = (np.asarray(p, dtype=np.float64) for p in layer)
        q, k, v = ((y @ w).reshape(rows, heads, hd) for w in (wq, wk, wv))
        a = np.zeros((rows, heads, hd))
        for s, e in zip(off[:-1], off[1:], strict=True):
            if e > s:
                a[s:e] = _softmax_attention_f64(q[s:e], k[s:e], v[s:e], hd**-0.5, False)
        h = _layer_norm_f64(a.reshape(rows, dim) @ wo + y, g1, b1)
        y = _layer_norm_f64(_gelu_f64(h @ w1) @ w2 + h, g2, b2)
    pooled = np.zeros((off.size - 1, dim))
    for i, (s, e) in enumerate(zip(off[:-1], off[1:], strict=True)):
        if e > s:
            pooled[i] = y[s:e].mean(axis=0)
    return y, pooled


# ---------------------------------------------------------------------------
# shared helpers
# ---------------------------------------------------------------------------

_DTYPES = {
    "f32": torch.float32,
    "float32": torch.float32,
    "f16": torch.float16,
    "float16": torch.float16,
    "bf16": torch.bfloat16,
    "bfloat16": torch.bfloat16,
}


def _torch_dtype(dtype) -> torch.dtype:
    """'f32' / 'f16' / 'bf16' (or a numpy or torch dtype) -> torch dtype."""
    if isinstance(dtype, torch.dtype):
        return dtype
    key = dtype if isinstance(dtype, str) else np.dtype(dtype).name
    if key not in _DTYPES:
        raise ValueError(f"unsupported dtype {dtype!r}")
    return _DTYPES[key]


def _reason(exc: BaseException) -> str:
    """One line naming an exception: its type and the first sentence of its
    message (torch's dispatcher errors go on for a paragraph)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else "(no message)"
    # The source location some ATen errors start with ("/__w/.../File.cpp:123: ").
    text = re.sub(r"^\S+\.(?:cpp|cu|h|py):\d+: ", "", text)
    end = text.find(". ")
    if end != -1:
        text = text[: end + 1]
    if len(text) > 200:
        text = text[:197] + "..."
    return f"{type(exc).__name__}: {text}"


class _Skip(Exception):
    """A peer known not to apply: its message is the skip reason as is."""

    def __str__(self) -> str:
        return self.args[0]


def _to_device(a, dtype: torch.dtype, device: str) -> torch.Tensor:
    """A copy on the device: the caller's array is never shared, so nothing a
    peer does can write into it."""
    return torch.from_numpy(np.array(a, copy=True)).to(device=device, dtype=dtype)


def _to_f64(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(device="cpu", dtype=torch.float64).numpy()


#: The compiled callables, one per configuration: what the traced code
#: depends on (the function, the model's sizes, dtype, device, causal), never
#: a batch's shape. The runner builds peers for many batches in one process;
#: each batch reuses its configuration's callable, whose code was compiled for
#: dynamic batch sizes by the first batch (see :func:`_compiled`).
_COMPILED: dict[tuple, Callable] = {}


def _compiled(key: tuple, make: Callable[[], Callable], dynamic: bool = True) -> Callable:
    """The compiled callable of configuration ``key``, ``torch.compile`` of
    ``make()`` with dynamic shapes on its first use (``dynamic=False``: a
    compile per batch shape, where dynamic shapes fail).

    Everything that differs between batches (weights, block masks, B, the
    padded lengths) must be an argument of ``make()``'s function, and every
    size that does not (heads, model and head dimensions) must be static: an
    int attribute of a module (:class:`_WithHeads`, a model's own), or a
    tensor dimension the caller marks with :func:`_static_dims`. Then a new
    batch runs the code compiled for the first one. (Two sizes that happen to be equal in the first batch share a
    symbol, and the first batch where they differ compiles once more, for
    good.)

    Dynamo keeps compiled code per Python code object, shared by the
    configurations; its default limit of 8 entries would make it silently
    run the function eagerly past it, so the limits are raised."""
    fn = _COMPILED.get(key)
    if fn is None:
        cfg = torch._dynamo.config
        for names, floor in (
            (("recompile_limit", "cache_size_limit"), 256),
            (("accumulated_recompile_limit", "accumulated_cache_size_limit"), 2048),
        ):
            name = next((n for n in names if hasattr(cfg, n)), None)
            if name is not None and getattr(cfg, name) < floor:
                setattr(cfg, name, floor)
        fn = _COMPILED[key] = torch.compile(make(), dynamic=dynamic)
    return fn


def _flex_dynamic(device: str) -> bool:
    """Whether a model with flex_attention inside compiles for dynamic
    shapes on ``device``. Not on the CPU: inductor's CPU flex template puts
    its block sizes into the mask code by replacing their size-variable
    names as text ("ks1" also inside "ks18"), and the C++ does not compile
    once a graph has a few symbolic sizes (the encoder's B besides the
    packed length and block counts). The bare flex_attention of the
    attention peer has only the latter two and compiles there."""
    return not str(device).startswith("cpu")


class _WithHeads(torch.nn.Module):
    """``fn(*args, heads)`` as a module, to compile: Dynamo makes a module's
    int attributes constants, where with dynamic shapes the ints among a
    function's arguments or in its closure become symbolic sizes (and share
    a symbol with any batch size of the same value)."""

    def __init__(self, fn, heads: int):
        super().__init__()
        self.fn = fn
        self.heads = heads

    def forward(self, *args):
        return self.fn(*args, self.heads)


def _static_dims(t: torch.Tensor, dims=None) -> torch.Tensor:
    """Marks t's dimensions ``dims`` (all if None) static for a compile with
    dynamic shapes: model sizes stay constants in the compiled code (heads
    and head_dim must, for flex_attention's kernels), and cannot share a
    symbol with a batch size of the same value."""
    for d in range(t.dim()) if dims is None else dims:
        torch._dynamo.mark_static(t, d)
    return t


class _Rows:
    """Where each packed row sits in the batch: its item and its position in
    the item, on the host and on the device, to pad and unpad tensors."""

    def __init__(self, offsets, rows: int, device: str):
        off = _check_offsets(offsets, rows)
        lengths = np.diff(off)
        self.offsets = off
        self.lengths = lengths
        self.batch = int(lengths.size)
        self.rows = rows
        self.max_len = int(lengths.max(initial=0))
        item = np.repeat(np.arange(self.batch), lengths)
        self.item = torch.from_numpy(item).to(device)
        self.pos = torch.from_numpy(np.arange(rows) - off[:-1][item]).to(device)
        self.device = device

    def pad(self, t: torch.Tensor) -> torch.Tensor:
        """[N, ...] -> [B, Lmax, ...], zeros past each item's end."""
        out = t.new_zeros((self.batch, self.max_len, *t.shape[1:]))
        out[self.item, self.pos] = t
        return out

    def unpad(self, t: torch.Tensor) -> torch.Tensor:
        """[B, Lmax, ...] -> the real rows, packed [N, ...]."""
        return t[self.item, self.pos]

    def key_valid(self) -> torch.Tensor:
        """[B, Lmax] bool: True at the item's real rows."""
        lengths = torch.from_numpy(self.lengths).to(self.device)
        return torch.arange(self.max_len, device=self.device)[None, :] < lengths[:, None]

    def nested(self, t: torch.Tensor) -> torch.Tensor:
        """A jagged nested tensor [B, j, ...] of the items' rows, as users
        build one from a list of per-item tensors."""
        items = [t[s:e] for s, e in zip(self.offsets[:-1], self.offsets[1:], strict=True)]
        return torch.nested.nested_tensor(items, layout=torch.jagged)

    def flex_len(self) -> int:
        """The packed length padded to whole BlockMask blocks, at least two:
        compiled code specializes a size of 1, so a one-block first batch
        would make the next batch compile again."""
        return max(2 * FLEX_BLOCK, -(-self.rows // FLEX_BLOCK) * FLEX_BLOCK)

    def flex_pad(self, t: torch.Tensor) -> torch.Tensor:
        """[N, ...] -> [flex_len, ...], zero rows after the real ones."""
        out = t.new_zeros((self.flex_len(), *t.shape[1:]))
        out[: self.rows] = t
        return out

    def flex_docs(self) -> torch.Tensor:
        """Document id of each row of the padded packed sequence: the item,
        and B for the padding rows, which so attend only to each other."""
        doc = torch.full((self.flex_len(),), self.batch, dtype=torch.int64, device=self.device)
        doc[: self.rows] = self.item
        return doc

    def inv_lengths(self, dtype: torch.dtype) -> torch.Tensor:
        """[B, 1] 1 / length, 1 for an empty item (whose sum is 0)."""
        inv = 1.0 / np.maximum(self.lengths, 1).astype(np.float64)
        return torch.from_numpy(inv).to(device=self.device, dtype=dtype)[:, None]


def _document_block_mask(rows: _Rows, causal: bool):
    """A BlockMask over the padded packed sequence: a query sees the keys of
    its own document (and, if causal, only those at or before it)."""
    if create_block_mask is None:
        raise _Skip(f"this torch ({torch.__version__}) has no FlexAttention")
    doc = rows.flex_docs()

    def same_doc(b, h, q_idx, kv_idx):
        return doc[q_idx] == doc[kv_idx]

    def same_doc_causal(b, h, q_idx, kv_idx):
        return (doc[q_idx] == doc[kv_idx]) & (q_idx >= kv_idx)

    n = rows.flex_len()
    mask_mod = same_doc_causal if causal else same_doc
    return create_block_mask(mask_mod, None, None, n, n, device=rows.device)


def _find_varlen_attn():
    """torch's varlen attention function, or None with the reason: its home
    moved between releases (``torch.nn.attention.varlen`` since 2.9)."""
    fn = getattr(torch.nn.attention, "varlen_attn", None)
    if fn is None:
        try:
            fn = importlib.import_module("torch.nn.attention.varlen").varlen_attn
        except (ImportError, AttributeError) as e:
            return None, f"this torch ({torch.__version__}) has no varlen_attn: {_reason(e)}"
    return fn, ""


def _varlen_call(scale: float | None, head_dim: int, causal: bool):
    """How to call varlen_attn for this scale and mask, from its signature:
    (keyword arguments, factor to pre-scale q by) or a reason to skip.
    Releases differ: causal is ``is_causal=True`` in the first ones and
    ``window_size=(-1, 0)`` later; ``scale`` came after the first one."""
    fn, why = _find_varlen_attn()
    if fn is None:
        return None, None, 1.0, why
    params = inspect.signature(fn).parameters
    kwargs: dict[str, Any] = {}
    if causal:
        if "window_size" in params:
            kwargs["window_size"] = (-1, 0)
        elif "is_causal" in params:
            kwargs["is_causal"] = True
        else:
            return None, None, 1.0, "varlen_attn has no causal option in this torch"
    q_factor = 1.0
    if scale is not None:
        if "scale" in params:
            kwargs["scale"] = scale
        else:
            # Its fixed scale is head_dim^-0.5: fold the difference into q.
            q_factor = scale * math.sqrt(head_dim)
    return fn, kwargs, q_factor, ""


def _add(peers: list[Peer], skipped: dict[str, str], name: str, build, device: str, note: str = ""):
    """Builds a peer (``build() -> (run, packed[, model])``) and runs it twice: the
    first run compiles what is compiled, the second shows it runs again
    without recompiling. A peer that fails here is skipped with the reason."""
    # Trial runs of kernels that turn out not to apply warn at length (SDPA
    # lists every backend's reason, as warnings and as log records); the
    # exception says enough.
    quiet = logging.getLogger("torch.nested")
    level = quiet.level
    quiet.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            built = build()
            run, packed = built[:2]
            model = built[2] if len(built) > 2 else None
            run()
            run()
            sync(device)
    except _Skip as e:
        skipped[name] = str(e)
        return
    except Exception as e:  # any failure means this torch cannot run it here
        skipped[name] = _reason(e)
        return
    finally:
        quiet.setLevel(level)
    peers.append(Peer(name, run, packed, note, model))


# ---------------------------------------------------------------------------
# attention
# ---------------------------------------------------------------------------


def attention_peers(
    q, k, v, offsets, *, scale: float, causal: bool = False, dtype, device: str, compile: bool = True
) -> tuple[list[Peer], dict[str, str]]:
    """The torch peers of ragged attention (see the module docstring).

    q, k, v: packed numpy [N, H, d]; offsets: [B + 1], offsets[-1] == N.
    dtype: 'f32', 'f16' or 'bf16' (or a numpy/torch dtype). compile=False
    runs FlexAttention eagerly (unfused, materializing the scores), to keep
    tests fast. Returns (peers, skipped); every peer's ``packed(out)`` is the
    float64 [N, H, d] result."""
    tdt = _torch_dtype(dtype)
    rows = _Rows(offsets, np.shape(q)[0], device)
    qt, kt, vt = (_to_device(a, tdt, device) for a in (q, k, v))
    head_dim = qt.shape[-1]
    peers: list[Peer] = []
    skipped: dict[str, str] = {}
    cuda = str(device).startswith("cuda")

    # [B, H, Lmax, d], contiguous: SDPA's fastest layout.
    padded = [rows.pad(t).transpose(1, 2).contiguous() for t in (qt, kt, vt)]

    def unpad_heads(out):
        return _to_f64(rows.unpad(out.transpose(1, 2)))

    def build_padded():
        mask = rows.key_valid()[:, None, None, :]
        if causal:
            lmax = rows.max_len
            mask = mask & torch.ones(lmax, lmax, dtype=torch.bool, device=device).tril()
        qp, kp, vp = padded

        def run():
            return F.scaled_dot_product_attention(qp, kp, vp, attn_mask=mask, scale=scale)

        return run, unpad_heads

    def build_flash():
        from torch.nn.attention import SDPBackend, sdpa_kernel

        qp, kp, vp = padded

        def run_cuda():
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(qp, kp, vp, is_causal=causal, scale=scale)

        def run_cpu():
            return F.scaled_dot_product_attention(qp, kp, vp, is_causal=causal, scale=scale)

        return (run_cuda if cuda else run_cpu), unpad_heads

    def build_njt():
        nq, nk, nv = (rows.nested(t).transpose(1, 2) for t in (qt, kt, vt))

        def run():
            return F.scaled_dot_product_attention(nq, nk, nv, is_causal=causal, scale=scale)

        return run, lambda out: _to_f64(out.transpose(1, 2).values())

    def build_flex():
        block_mask = _document_block_mask(rows, causal)
        # [1, H, n, d]: all items one after another as one sequence.
        fq, fk, fv = (
            _static_dims(rows.flex_pad(t).transpose(0, 1).unsqueeze(0).contiguous(), (1, 3))
            for t in (qt, kt, vt)
        )
        attend = flex_attention
        if compile:
            key = ("flex attention", causal, scale, tuple(qt.shape[1:]), tdt, str(device))
            attend = _compiled(key, lambda: flex_attention)

        def run():
            return attend(fq, fk, fv, block_mask=block_mask, scale=scale)

        return run, lambda out: _to_f64(out[0, :, : rows.rows].transpose(0, 1))

    def build_varlen():
        fn, kwargs, q_factor, why = _varlen_call(scale, head_dim, causal)
        if fn is None:
            raise _Skip(why)
        cu = torch.from_numpy(rows.offsets.astype(np.int32)).to(device)
        vq = qt * q_factor if q_factor != 1.0 else qt
        lmax = rows.max_len

        def run():
            return fn(vq, kt, vt, cu, cu, lmax, lmax, **kwargs)

        return run, _to_f64

    _add(peers, skipped, "padded SDPA", build_padded, device)
    _add(
        peers,
        skipped,
        NO_MASK_FLASH,
        build_flash,
        device,
        "B*Lmax^2 work, no mask: a speed reference, not a result",
    )
    if NO_MASK_FLASH in skipped and cuda:
        skipped[NO_MASK_FLASH] = f"flash backend, {tdt}: {skipped[NO_MASK_FLASH]}"
    _add(peers, skipped, "NJT SDPA", build_njt, device)
    if causal and "NJT SDPA" in skipped:
        skipped["NJT SDPA"] = f"is_causal=True: {skipped['NJT SDPA']}"
    _add(peers, skipped, "FlexAttention packed", build_flex, device)
    _add(peers, skipped, "varlen_attn", build_varlen, device)
    return peers, skipped


# ---------------------------------------------------------------------------
# encoder
# ---------------------------------------------------------------------------


def _split_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """[B, L, D] -> [B, heads, L, D / heads], as models write it."""
    return t.unflatten(2, (heads, t.shape[2] // heads)).transpose(1, 2)


def _merge_heads(t: torch.Tensor) -> torch.Tensor:
    """[B, heads, L, hd] -> [B, L, heads * hd]."""
    return t.transpose(1, 2).flatten(2)


def _encoder(x: torch.Tensor, params, attend) -> torch.Tensor:
    """The stacked post-LN layers on rows x [..., D]; ``attend(q, k, v)``
    maps the projections (same layout as x) to the heads-merged attention."""
    dim = x.shape[-1]
    for wq, wk, wv, wo, g1, b1, w1, w2, g2, b2 in params:
        a = attend(x @ wq, x @ wk, x @ wv)
        h = F.layer_norm(a @ wo + x, (dim,), g1, b1, eps=LN_EPS)
        x = F.layer_norm(F.gelu(h @ w1) @ w2 + h, (dim,), g2, b2, eps=LN_EPS)
    return x


def _padded_encoder(x, params, key_mask, valid, inv_len, heads: int):
    """x [B, Lmax, D] zero-padded; key_mask [B, 1, 1, Lmax]; valid
    [B, Lmax, 1]. Returns (y [B, Lmax, D], pooled [B, D])."""

    def attend(q, k, v):
        o = F.scaled_dot_product_attention(
            _split_heads(q, heads), _split_heads(k, heads), _split_heads(v, heads), attn_mask=key_mask
        )
        return _merge_heads(o)

    y = _encoder(x, params, attend)
    # where, not a product: the padding rows of an empty item see no key and
    # may hold NaN on some backends, which a product by 0 would keep.
    pooled = torch.where(valid, y, 0).sum(1) * inv_len
    return y, pooled


def _njt_encoder(x, params, inv_len, heads: int):
    """x a jagged nested tensor [B, j, D]. Returns (y [B, j, D], pooled)."""

    def attend(q, k, v):
        o = F.scaled_dot_product_attention(
            _split_heads(q, heads), _split_heads(k, heads), _split_heads(v, heads)
        )
        return _merge_heads(o)

    y = _encoder(x, params, attend)
    return y, y.sum(dim=1) * inv_len


def _packed_pool(y, row_item, inv_len):
    """Mean of each item's rows from packed y [rows, D], inv_len [B, 1];
    rows with item id B (padding) land in a row that is dropped. (B is
    inv_len's size, not an int argument: compiled code keeps it symbolic.)"""
    batch = inv_len.shape[0]
    sums = torch.zeros(batch + 1, y.shape[-1], device=y.device, dtype=y.dtype).index_add(0, row_item, y)
    return sums[:batch] * inv_len


def _flex_encoder(x, params, block_mask, row_item, inv_len, heads: int):
    """x [1, n, D]: every item's rows in one padded sequence. Returns
    (y [1, n, D], pooled [B, D])."""

    def attend(q, k, v):
        q, k, v = (_split_heads(t, heads) for t in (q, k, v))
        if q.device.type == "cpu":
            # Inductor's CPU flex template reads the heads' sizes off the
            # buffer under the view, the [n, D] projection, and fails.
            q, k, v = (t.contiguous() for t in (q, k, v))
        return _merge_heads(flex_attention(q, k, v, block_mask=block_mask))

    y = _encoder(x, params, attend)
    return y, _packed_pool(y[0], row_item, inv_len)


def encoder_peers(
    x, offsets, layers, *, heads: int, dtype, device: str, compile: bool = True
) -> tuple[list[Peer], dict[str, str]]:
    """The torch peers of the ragged encoder (see the module docstring).

    x: packed numpy [N, D]; layers: per layer [wq, wk, wv, wo, g1, b1, w1,
    w2, g2, b2] (numpy). Each peer's ``run()`` returns (y in its own layout,
    pooled [B, D] dense); ``packed(out)`` is y's real rows, float64 [N, D].
    compile=False runs FlexAttention eagerly and skips "inductor padded"."""
    tdt = _torch_dtype(dtype)
    rows = _Rows(offsets, np.shape(x)[0], device)
    xt = _to_device(x, tdt, device)
    # The weights change from batch to batch: arguments of the compiled
    # code, their sizes static.
    params = [[_static_dims(_to_device(p, tdt, device)) for p in layer] for layer in layers]
    dim = xt.shape[-1]
    # What the compiled encoders' code depends on, the same for every batch.
    config = (
        len(params),
        heads,
        tuple(tuple(p.shape) for p in params[0]) if params else (),
        tdt,
        str(device),
    )
    head_dim = dim // heads
    inv_len = rows.inv_lengths(tdt)
    peers: list[Peer] = []
    skipped: dict[str, str] = {}

    def padded_inputs():
        valid = rows.key_valid()
        return _static_dims(rows.pad(xt), (2,)), valid[:, None, None, :], valid[:, :, None]

    def unpad_y(out):
        return _to_f64(rows.unpad(out[0]))

    def build_padded():
        xp, key_mask, valid = padded_inputs()

        def run():
            return _padded_encoder(xp, params, key_mask, valid, inv_len, heads)

        return run, unpad_y

    def build_njt():
        xn = rows.nested(xt)

        def run():
            return _njt_encoder(xn, params, inv_len, heads)

        return run, lambda out: _to_f64(out[0].values())

    def build_flex():
        block_mask = _document_block_mask(rows, causal=False)
        xf = _static_dims(rows.flex_pad(xt).unsqueeze(0), (2,))
        row_item = rows.flex_docs()
        model = _WithHeads(_flex_encoder, heads)
        if compile:
            model = _compiled(("flex encoder", *config), lambda: model, _flex_dynamic(device))

        def run():
            return model(xf, params, block_mask, row_item, inv_len)

        return run, lambda out: _to_f64(out[0][0, : rows.rows])

    def build_varlen():
        fn, kwargs, _, why = _varlen_call(None, head_dim, False)
        if fn is None:
            raise _Skip(why)
        cu = torch.from_numpy(rows.offsets.astype(np.int32)).to(device)
        lmax = rows.max_len

        def attend(q, k, v):
            split = [t.unflatten(1, (heads, head_dim)) for t in (q, k, v)]
            return fn(*split, cu, cu, lmax, lmax, **kwargs).flatten(1)

        def run():
            y = _encoder(xt, params, attend)
            return y, _packed_pool(y, rows.item, inv_len)

        return run, lambda out: _to_f64(out[0])

    def build_inductor():
        if not compile:
            raise _Skip("compile=False")
        xp, key_mask, valid = padded_inputs()
        model = _compiled(("padded encoder", *config), lambda: _WithHeads(_padded_encoder, heads))

        def run():
            return model(xp, params, key_mask, valid, inv_len)

        return run, unpad_y

    _add(peers, skipped, "padded eager", build_padded, device)
    _add(peers, skipped, "NJT eager", build_njt, device)
    _add(peers, skipped, "FlexAttention packed", build_flex, device)
    _add(peers, skipped, "varlen_attn packed", build_varlen, device)
    _add(peers, skipped, "inductor padded", build_inductor, device)
    return peers, skipped


# ---------------------------------------------------------------------------
# training step
# ---------------------------------------------------------------------------


class Classifier(torch.nn.Module):
    """bench/train_step.py's ``Classifier`` with its sizes as arguments:
    ``nn.TransformerEncoderLayer`` x layers (post-LN, GELU, no dropout),
    mean pooling over each item's real rows, a linear head."""

    def __init__(self, d_model: int, heads: int, ff: int, layers: int, classes: int):
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(
                d_model, heads, ff, dropout=0.0, activation="gelu", batch_first=True
            )
            for _ in range(layers)
        )
        self.head = torch.nn.Linear(d_model, classes)

    def forward(self, x, padding):
        """x [B, Lmax, D] padded; padding [B, Lmax] bool, True past an
        item's end. Returns the logits [B, classes]."""
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=padding)
        keep = (~padding).unsqueeze(-1).to(x.dtype)
        return self.head((x * keep).sum(1) / keep.sum(1).clamp_min(1))


def training_model(*, d_model: int, heads: int, ff: int, layers: int, classes: int, seed: int = 0):
    """The float32 CPU model every training peer copies: torch's default
    initialization after ``torch.manual_seed(seed)``, in training mode."""
    torch.manual_seed(seed)
    return Classifier(d_model, heads, ff, layers, classes)


def training_inputs(lengths, *, d_model: int, classes: int, seed: int = 0):
    """(x packed float32 [N, D], offsets [B + 1] numpy, labels [B]) on the
    CPU: each item's rows ``randn(L_b, D)`` from a generator seeded with
    ``seed``, item after item; label b is b % classes."""
    lengths = [int(n) for n in lengths]
    if any(n < 0 for n in lengths):
        raise ValueError(f"lengths must be >= 0, got {lengths}")
    gen = torch.Generator().manual_seed(seed)
    items = [torch.randn(n, d_model, generator=gen) for n in lengths]
    x = torch.cat(items) if items else torch.zeros(0, d_model)
    offsets = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
    return x, offsets, torch.arange(len(lengths)) % classes


def ref_training_loss_f64(model: Classifier, x, offsets, labels) -> float:
    """The loss of :func:`training_peers`' step in float64 on the CPU: a
    ``.double()`` copy of ``model`` on the padded batch."""
    m = copy.deepcopy(model).to(device="cpu", dtype=torch.float64)
    rows = _Rows(offsets, x.shape[0], "cpu")
    with torch.no_grad():
        logits = m(rows.pad(x.to(device="cpu", dtype=torch.float64)), ~rows.key_valid())
        return float(F.cross_entropy(logits, labels.to("cpu")))


def _call_module(m: torch.nn.Module, *args):
    """``m(*args)``: compiled with the module as an argument, the code
    compiled for one instance serves every instance of the same structure."""
    return m(*args)


def _njt_classifier(m: Classifier, x):
    """``m`` on a jagged nested tensor [B, j, D], its layers written out as
    ``nn.TransformerEncoderLayer`` computes them (bench/train_step.py's
    ``nested_forward`` without dropout); mean pooling over each item."""
    for layer in m.layers:
        attn = layer.self_attn
        q, k, v = (
            F.linear(x, w, b).unflatten(-1, (attn.num_heads, attn.head_dim)).transpose(1, 2)
            for w, b in zip(attn.in_proj_weight.chunk(3), attn.in_proj_bias.chunk(3), strict=True)
        )
        a = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(-2)
        x = layer.norm1(x + attn.out_proj(a))
        x = layer.norm2(x + layer.linear2(F.gelu(layer.linear1(x))))
    return m.head(x.mean(dim=1))


def _flex_classifier(m: Classifier, x, block_mask, row_item, inv_len):
    """``m`` with its own parameters on x [1, n, D], every item's rows in
    one padded sequence, attention by flex_attention over ``block_mask``.
    Returns the logits [B, classes]."""
    for layer in m.layers:
        attn = layer.self_attn
        q, k, v = (
            _split_heads(F.linear(x, w, b), attn.num_heads)
            for w, b in zip(attn.in_proj_weight.chunk(3), attn.in_proj_bias.chunk(3), strict=True)
        )
        if q.device.type == "cpu":
            # As in _flex_encoder: inductor's CPU flex template wants its own buffers.
            q, k, v = (t.contiguous() for t in (q, k, v))
        a = _merge_heads(flex_attention(q, k, v, block_mask=block_mask))
        x = layer.norm1(x + attn.out_proj(a))
        x = layer.norm2(x + layer.linear2(F.gelu(layer.linear1(x))))
    return m.head(_packed_pool(x[0], row_item, inv_len))


def training_peers(
    lengths,
    *,
    d_model: int,
    heads: int,
    ff: int,
    layers: int,
    classes: int,
    dtype,
    device: str,
    compile: bool = True,
    seed: int = 0,
) -> tuple[list[Peer], dict[str, str]]:
    """The torch peers of one training step without the optimizer (see the
    module docstring): forward, ``F.cross_entropy`` against labels
    ``arange(B) % classes``, backward into ``.grad`` (set to None first).

    Model and inputs come from :func:`training_model` and
    :func:`training_inputs` (seeded with ``seed``), cast to ``dtype`` and
    moved to ``device``; every peer trains its own deep copy (``Peer.model``)
    of the same weights on the same rows. ``run()`` returns the loss, a 0-d
    tensor; ``packed(out)`` is it as float64 [1], the same for every peer up
    to rounding (:func:`ref_training_loss_f64` is the float64 one).
    compile=False runs FlexAttention eagerly and skips "inductor padded".

    An empty item pools to 0 (its logits are the head's bias) where the peer
    gets it right: the padded peers do on the CPU, but attention over no key
    may give NaN on other backends, and with every item empty
    ``nn.MultiheadAttention`` fails (the padded peers are then skipped).
    Callers pass lengths >= 1."""
    tdt = _torch_dtype(dtype)
    if d_model % heads:
        raise ValueError(f"d_model {d_model} is not a multiple of heads {heads}")
    x, offsets, labels = training_inputs(lengths, d_model=d_model, classes=classes, seed=seed)
    model = training_model(d_model=d_model, heads=heads, ff=ff, layers=layers, classes=classes, seed=seed).to(
        device=device, dtype=tdt
    )
    rows = _Rows(offsets, x.shape[0], device)
    xt = x.to(device=device, dtype=tdt)
    labels = labels.to(device)
    peers: list[Peer] = []
    skipped: dict[str, str] = {}

    def loss_of(out):
        return np.array([float(out)])

    def step(m: Classifier, forward):
        def run():
            m.zero_grad(set_to_none=True)
            loss = F.cross_entropy(forward(), labels)
            loss.backward()
            return loss.detach()

        return run

    def padded_inputs():
        return _static_dims(rows.pad(xt), (2,)), ~rows.key_valid()

    # What the compiled forwards' code depends on: the model's structure and
    # sizes, not its instance (each peer trains its own copy, an argument of
    # the compiled code) nor the batch.
    config = (d_model, heads, ff, layers, classes, tdt, str(device))

    def build_padded():
        m = copy.deepcopy(model)
        xp, padding = padded_inputs()
        return step(m, lambda: m(xp, padding)), loss_of, m

    def build_njt():
        m = copy.deepcopy(model)
        xn = rows.nested(xt)
        return step(m, lambda: _njt_classifier(m, xn)), loss_of, m

    def build_inductor():
        if not compile:
            raise _Skip("compile=False")
        m = copy.deepcopy(model)
        xp, padding = padded_inputs()
        compiled = _compiled(("padded classifier", *config), lambda: _call_module)
        return step(m, lambda: compiled(m, xp, padding)), loss_of, m

    def build_flex():
        block_mask = _document_block_mask(rows, causal=False)
        m = copy.deepcopy(model)
        xf = _static_dims(rows.flex_pad(xt).unsqueeze(0), (2,))
        row_item = rows.flex_docs()
        inv_len = rows.inv_lengths(tdt)
        forward = _flex_classifier
        if compile:
            forward = _compiled(("flex classifier", *config), lambda: _flex_classifier, _flex_dynamic(device))
        return step(m, lambda: forward(m, xf, block_mask, row_item, inv_len)), loss_of, m

    _add(peers, skipped, "padded eager", build_padded, device)
    _add(peers, skipped, "NJT eager", build_njt, device)
    _add(peers, skipped, "inductor padded", build_inductor, device)
    _add(peers, skipped, "FlexAttention packed", build_flex, device)
    return peers, skipped
