"""Workloads W1-W5 of bench/README.md and the variants (baselines and
ragged-mlir) that compute them, for bench/harness.py.

Every variant gets its input already in its own natural format (padded
tensor + mask, list of items, buckets, NJT, DanLing NestedTensor,
ragged_mlir NestedTensor), built outside the timed region, and leaves its
output in its natural format: what is timed is the computation a user of
that representation would run. Turning outputs into one comparable form
(packed ``[N, ...]`` rows or pooled ``[B, ...]``) for the error check happens
outside the timed region too.

Names of the variants (stable keys of the JSON lines), with the baseline
number bench/README.md gives them:

  padded            1  padded eager, HF-style additive mask (masked ops for W1/W2)
  padded_sdpa       2  padded eager SDPA with a boolean key-padding mask (W3-W5)
  bucketed          3  length-sorted buckets, each padded to its own max
  per_item          4  Python loop of the dense block over the items
  njt               5  PyTorch nested tensors (jagged layout), eager
  inductor_padded   6  torch.compile(inductor, dynamic=True) of the strong padded form
  inductor_njt      7  torch.compile(inductor, dynamic=True) of the NJT form
  inductor_frozen   6  inductor_padded with weights frozen (options={"freezing": True}), W4 only
  danling           8  DanLing NestedTensor, eager
  danling_compiled  8  the same under torch.compile(inductor, dynamic=True) (W4, W5; a failure is recorded)
  ragged_mlir       9  torch.compile(backend="ragged") on ragged_mlir.torch.NestedTensor
  ragged_mlir_padded 10 the same compiled model fed every item padded to the batch max
  ragged_mlir_equal    (diagnostic) the same model on all-equal lengths, same B and tokens
  ragged_mlir_scores   (diagnostic, W3/W4) ragged_mlir with attention_scores_max_rows=256:
                       IREE's codegen with materialised scores on buckets of 32-256 rows
                       (opt-in, docs/torch.md), against the default CPU attention kernel
  flex_packed      11  packed tokens and flex_attention with a document block mask
                       built once per batch, torch.compile'd: attention alone on
                       [1, H, N, HD] (W3), each layer on [N, D] (W4)
  ort_padded       12  ONNX Runtime, the Hugging Face model exported and fused for
                       BERT (samples/onnx_baseline.py), on the padded batch (W4, W5)
  ort_bucketed     12  the same session on the length-sorted buckets of baseline 3
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

D, HEADS, HD, FF, EPS = 384, 12, 32, 1536, 1e-12

#: Variants that are peers of ragged-mlir (baselines 1-8 of bench/README.md).
PEERS = (
    "padded",
    "padded_sdpa",
    "bucketed",
    "per_item",
    "njt",
    "inductor_padded",
    "inductor_njt",
    "danling",
    "danling_compiled",
    "inductor_frozen",
    "flex_packed",
    "ort_padded",
    "ort_bucketed",
)
OURS = "ragged_mlir"
DIAGNOSTIC = ("ragged_mlir_padded", "ragged_mlir_equal", "ragged_mlir_scores")
#: Backend options of the ragged_mlir_scores diagnostic.
SCORES_OPTIONS = {"attention_scores_max_rows": 256}
ORDER = PEERS + (OURS,) + DIAGNOSTIC
BASELINE_ID = {
    **{name: i + 1 for i, name in enumerate(PEERS[:8])},
    "danling_compiled": 8,
    "inductor_frozen": 6,
    "flex_packed": 11,
    "ort_padded": 12,
    "ort_bucketed": 12,
    OURS: 9,
    "ragged_mlir_padded": 10,
}
#: Number of length-sorted buckets of baseline 3.
BUCKETS = 4

try:  # DanLing is optional (pip install danling==0.4.8)
    from danling import NestedTensor as DanlingNT

    DANLING_REASON = None
except Exception as e:  # pragma: no cover - depends on the environment
    DanlingNT = None
    DANLING_REASON = f"not installed ({type(e).__name__}: {e})"

# The BERT on NestedTensors is a sample's model (samples/ragged_bert.py).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "samples"))
import onnx_baseline  # noqa: E402
from ragged_bert import BertConfig, RaggedBertModel  # noqa: E402

from ragged_mlir.torch import NestedTensor  # noqa: E402


@dataclasses.dataclass
class Variant:
    """One way of computing a case. ``run`` is what is timed; ``out`` maps its
    result to the comparable form (None: not comparable, e.g. the padded
    batch fed to the ragged model computes on padding)."""

    name: str
    run: Callable[[], Any] | None
    out: Callable[[Any], torch.Tensor] | None = None
    skip: str | None = None  # why it did not run
    compiled: str | None = None  # "ragged" / "inductor": first call may compile
    key: str | None = None  # the Compiled key (a failed first call is recorded under it)


def skipped(name: str, reason: str) -> Variant:
    return Variant(name, None, None, skip=reason)


# -- FLOP model ----------------------------------------------------------------


def layer_flops(lengths, d: int = D, ff: int = FF) -> float:
    """FLOPs(l) = 2(4d² + 2d·ff)·l + 4d·l² per encoder layer."""
    return float(sum(2 * (4 * d * d + 2 * d * ff) * int(n) + 4 * d * int(n) ** 2 for n in lengths))


def useful_flops(workload: str, lengths, layers: int = 1) -> float:
    """Work on the real tokens only (what ragged-mlir should cost)."""
    n = float(np.sum(lengths))
    if workload == "W1":
        return n * D
    if workload == "W2":
        return 2.0 * n * D * FF
    if workload == "W3":
        return float(sum(4 * D * int(n) ** 2 for n in lengths))
    return layers * layer_flops(lengths)


def useful_bytes(workload: str, lengths, op: str | None = None) -> float:
    """W1's memory traffic on the real tokens: the fp32 input read once and the
    output written once (a row per item for sum and max, every element for softmax)."""
    assert workload == "W1", workload
    n = float(np.sum(lengths))
    out = n if op == "softmax" else float(len(lengths))
    return 4.0 * D * (n + out)


def flop_ceiling(workload: str, lengths) -> float:
    """S* = padded FLOPs / ragged FLOPs. W1/W2 are per token (1/util), W3 is
    quadratic in the length, W4/W5 use the encoder-layer formula."""
    lengths = np.asarray(lengths)
    padded = np.full_like(lengths, lengths.max())
    return useful_flops(workload, padded) / useful_flops(workload, lengths)


# -- representations ---------------------------------------------------------


def pad(items: list[torch.Tensor], value: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, max L, ...] and the bool mask [B, max L] (True on real tokens)."""
    lmax = max(len(x) for x in items)
    out = items[0].new_full((len(items), lmax) + tuple(items[0].shape[1:]), value)
    mask = torch.zeros(len(items), lmax, dtype=torch.bool)
    for i, x in enumerate(items):
        out[i, : len(x)] = x
        mask[i, : len(x)] = True
    return out, mask


def buckets(items: list[torch.Tensor], n: int = BUCKETS):
    """Length-sorted buckets: (original indices, padded tensor, mask) each."""
    order = sorted(range(len(items)), key=lambda i: len(items[i]))
    size = math.ceil(len(items) / n)
    out = []
    for s in range(0, len(order), size):
        idx = order[s : s + size]
        xp, m = pad([items[i] for i in idx])
        out.append((idx, xp, m))
    return out


def from_buckets(bks, outs, per_token: bool) -> torch.Tensor:
    """Bucket outputs back to the original item order (comparable form)."""
    got = {}
    for (idx, _, m), o in zip(bks, outs, strict=True):
        for j, i in enumerate(idx):
            got[i] = o[j][m[j]] if per_token else o[j]
    rows = [got[i] for i in range(len(got))]
    return torch.cat(rows) if per_token else torch.stack(rows)


def njt(items: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.nested_tensor(items, layout=torch.jagged)


def njt_packed(t: torch.Tensor) -> torch.Tensor:
    return torch.cat([x for x in t.unbind()])


def danling(items):
    return DanlingNT(items) if DanlingNT is not None else None


def equal_lengths(lengths) -> np.ndarray:
    """Same batch size and total tokens, lengths as equal as integers allow
    (they differ by at most one)."""
    b, n = len(lengths), int(np.sum(lengths))
    return np.array([n // b + (1 if i < n % b else 0) for i in range(b)])


# -- the dense encoder layer on any representation -------------------------------


def _lin(p, name, x):
    return F.linear(x, p[name + ".weight"], p.get(name + ".bias"))


def _ln(p, name, x):
    return F.layer_norm(x, (D,), p[name + ".weight"], p[name + ".bias"], EPS)


def layer(p: dict, pre: str, x, attend: Callable):
    """One BERT layer (HF parameter names under ``pre``) on [..., L, D]; ``attend``
    maps q, k, v [..., L, D] to the attention output [..., L, D]."""
    q, k, v = (_lin(p, pre + f"attention.self.{n}", x) for n in ("query", "key", "value"))
    a = attend(q, k, v)
    x = _ln(p, pre + "attention.output.LayerNorm", _lin(p, pre + "attention.output.dense", a) + x)
    h = F.gelu(_lin(p, pre + "intermediate.dense", x))
    return _ln(p, pre + "output.LayerNorm", _lin(p, pre + "output.dense", h) + x)


def encoder(p: dict, layers: int, x, attend: Callable, prefix: str = ""):
    for i in range(layers):
        x = layer(p, f"{prefix}layer.{i}.", x, attend)
    return x


def attend_additive(add: torch.Tensor) -> Callable:
    """HF-style: scores + (1 - mask) * finfo.min, explicit softmax; add [B, 1, 1, L]."""

    def f(q, k, v):
        b, length, _ = q.shape
        q, k, v = (t.view(b, length, HEADS, HD).transpose(1, 2) for t in (q, k, v))
        s = q @ k.transpose(-1, -2) * HD**-0.5 + add
        return (s.softmax(-1) @ v).transpose(1, 2).reshape(b, length, D)

    return f


def attend_sdpa(mask4: torch.Tensor | None) -> Callable:
    """F.scaled_dot_product_attention with a boolean key-padding mask [B, 1, 1, L]."""

    def f(q, k, v):
        b, length, _ = q.shape
        q, k, v = (t.view(b, length, HEADS, HD).transpose(1, 2) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask4)
        return o.transpose(1, 2).reshape(b, length, D)

    return f


def attend_item(q, k, v):
    length = q.shape[0]
    q, k, v = (t.view(length, HEADS, HD).transpose(0, 1) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v).transpose(0, 1).reshape(length, D)


def attend_nested(q, k, v):
    """NJT and DanLing: [B, j, D] -> [B, H, j, HD] -> SDPA -> [B, j, D]."""
    q, k, v = (t.unflatten(-1, (HEADS, HD)).transpose(1, 2) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v).transpose(1, 2).flatten(-2)


def additive_mask(mask: torch.Tensor) -> torch.Tensor:
    return (~mask)[:, None, None, :].to(torch.float32) * torch.finfo(torch.float32).min


# -- encoder layers as modules: regional torch.compile (inductor baselines) ----------


class LayerModule(torch.nn.Module):
    """One BERT layer holding its weights as parameters (copied from ``p`` under
    ``pre``). The inductor baselines compile these per layer (PyTorch's
    "regional compilation" recipe): every instance shares one compiled graph,
    so W4 with 1 or 6 layers and W5 compile once."""

    def __init__(self, p: dict, pre: str):
        super().__init__()
        names = (
            "attention.self.query",
            "attention.self.key",
            "attention.self.value",
            "attention.output.dense",
            "intermediate.dense",
            "output.dense",
        )
        for n in names:
            w = p[pre + n + ".weight"]
            lin = torch.nn.Linear(w.shape[1], w.shape[0])
            lin.weight.data.copy_(w)
            lin.bias.data.copy_(p[pre + n + ".bias"])
            setattr(self, n.replace(".", "_"), lin)
        for n in ("attention.output.LayerNorm", "output.LayerNorm"):
            ln = torch.nn.LayerNorm(D, eps=EPS)
            ln.weight.data.copy_(p[pre + n + ".weight"])
            ln.bias.data.copy_(p[pre + n + ".bias"])
            setattr(self, n.replace(".", "_"), ln)
        self.requires_grad_(False)

    def block(self, x, attend):
        q, k, v = self.attention_self_query(x), self.attention_self_key(x), self.attention_self_value(x)
        x = self.attention_output_LayerNorm(self.attention_output_dense(attend(q, k, v)) + x)
        return self.output_LayerNorm(self.output_dense(F.gelu(self.intermediate_dense(x))) + x)


class PaddedLayer(LayerModule):
    def forward(self, x, m4):
        return self.block(x, attend_sdpa(m4))


class NestedLayer(LayerModule):
    def forward(self, x):
        return self.block(x, attend_nested)


class FlexLayer(LayerModule):
    """One layer on packed tokens [N, D]; attention is flex_attention with
    the batch's document block mask."""

    def forward(self, x, block):
        def attend(q, k, v):
            from torch.nn.attention.flex_attention import flex_attention

            n = q.shape[0]
            # contiguous(): inductor's CPU flex template reads the operands'
            # layout as a 4-D buffer and fails on a view of the projection.
            q, k, v = (t.view(1, n, HEADS, HD).transpose(1, 2).contiguous() for t in (q, k, v))
            return flex_attention(q, k, v, block_mask=block).transpose(1, 2).reshape(n, D)

        return self.block(x, attend)


def compiled_layers(cls, p: dict, layers: int, prefix: str = "", freezing: bool = False) -> list:
    mods = [cls(p, f"{prefix}layer.{i}.").eval() for i in range(layers)]
    for m in mods:
        # Freezing folds the weights into the graph, as ragged-mlir's frozen parameters do.
        m.compile(dynamic=True, options={"freezing": True} if freezing else None)
    return mods


# -- compiled callables, shared across datasets (compile once per workload) ----


class Compiled:
    """Lazily compiled callables of one workload: ragged (torch.compile backend
    "ragged") and inductor ones. Created once so that later datasets reuse
    them: the first call of the first dataset is the cold compile, the first
    call of every later dataset shows whether a new shape recompiles."""

    def __init__(self):
        self.fns: dict[str, Callable] = {}
        self.errors: dict[str, str] = {}

    def get(self, key: str, make: Callable[[], Callable]) -> Callable:
        if key not in self.fns:
            self.fns[key] = make()
        return self.fns[key]


def _guarded(name: str, fn: Callable, compiled: Compiled, key: str, out=None, kind="inductor") -> Variant:
    """A compiled variant that may fail at its first call (recorded, skipped)."""
    if key in compiled.errors:
        return skipped(name, compiled.errors[key])
    return Variant(name, fn, out, compiled=kind, key=key)


def ort_variants(comp: Compiled, make: Callable, first: torch.Tensor, mask: torch.Tensor, pooled: bool):
    """ONNX Runtime on the padded batch ``first`` ([B, L] token ids or [B, L, D]
    hidden states, ``mask`` [B, L] bool) and on its length-sorted buckets.
    ``make()`` builds the samples/onnx_baseline.OrtBert session (once per
    workload). Per-token outputs map to packed rows; ``pooled`` ones (W5's
    sentence embeddings, pooled inside the timed call) to [B, D]."""
    names = ("ort_padded", "ort_bucketed")
    why = onnx_baseline.unavailable() or comp.errors.get("ort")
    if why is None and "ort" not in comp.fns:
        try:
            comp.get("ort", make)
        except Exception as e:  # recorded as the skip reason, as a failed compile is
            why = comp.errors["ort"] = f"export or session failed: {type(e).__name__}: {e}"
    if why:
        return [skipped(n, why) for n in names]
    ort = comp.fns["ort"]
    f, mk = first.numpy(), mask.to(torch.int64).numpy()
    bks = onnx_baseline.length_sorted_buckets(f, mk)

    def call(f, mk):
        out = ort(f, mk)
        return onnx_baseline.sentence_embeddings(out, mk) if pooled else out

    def rows(outs):
        return torch.from_numpy(np.concatenate(outs) if not pooled else np.stack(outs))

    return [
        Variant(
            names[0],
            lambda: call(f, mk),
            lambda o: rows(onnx_baseline.unbucket([(range(len(f)), f, mk)], [o])),
        ),
        Variant(
            names[1],
            lambda: [call(bf, bm) for _, bf, bm in bks],
            lambda o: rows(onnx_baseline.unbucket(bks, o)),
        ),
    ]


def hf_bert(layers: int, p: dict):
    """A Hugging Face BertModel in the W4 shape (eager attention, the graph
    ORT's fusions match) whose encoder holds ``p`` (make_encoder's parameters)."""
    from transformers import BertConfig as HFConfig
    from transformers import BertModel

    cfg = HFConfig(
        hidden_size=D,
        num_hidden_layers=layers,
        num_attention_heads=HEADS,
        intermediate_size=FF,
        layer_norm_eps=EPS,
        attn_implementation="eager",
    )
    model = BertModel(cfg, add_pooling_layer=False).eval()
    model.encoder.load_state_dict(p)
    return model


# -- W1: segmented sum / max / softmax ------------------------------------------------


def w1_variants(
    op: str, items: list[torch.Tensor], eq_items, comp: Compiled
) -> tuple[list[Variant], Callable]:
    xp, m = pad(items)
    m3 = m[:, :, None]
    bks = buckets(items)
    nt_ = njt(items)
    dl = danling(items)
    per_token = op == "softmax"

    def padded_op(x, mask3):
        if op == "sum":
            return (x * mask3).sum(1)
        if op == "max":
            return x.masked_fill(~mask3, float("-inf")).amax(1)
        return x.masked_fill(~mask3, float("-inf")).softmax(1)

    def item_op(x):
        return {"sum": lambda: x.sum(0), "max": lambda: x.amax(0), "softmax": lambda: x.softmax(0)}[op]()

    def nested_op(x):
        return {"sum": lambda: x.sum(1), "max": lambda: x.amax(1), "softmax": lambda: x.softmax(1)}[op]()

    def ragged_op(x: NestedTensor):
        if op == "sum":
            return x.sum(dim=1)
        if op == "max":
            return x.amax(dim=1)
        return x.softmax(dim=1).values

    unpad = (lambda o: o[m]) if per_token else (lambda o: o)
    v = [
        Variant("padded", lambda: padded_op(xp, m3), unpad),
        Variant(
            "bucketed",
            lambda: [padded_op(b[1], b[2][:, :, None]) for b in bks],
            lambda outs: from_buckets(bks, outs, per_token),
        ),
        Variant(
            "per_item",
            lambda: [item_op(x) for x in items],
            (lambda o: torch.cat(o)) if per_token else torch.stack,
        ),
        Variant("njt", lambda: nested_op(nt_), njt_packed if per_token else (lambda o: o)),
    ]
    ind = comp.get("inductor_padded", lambda: torch.compile(padded_op, dynamic=True))
    v.append(_guarded("inductor_padded", lambda: ind(xp, m3), comp, "inductor_padded", unpad))
    indn = comp.get("inductor_njt", lambda: torch.compile(nested_op, dynamic=True))
    v.append(
        _guarded(
            "inductor_njt",
            lambda: indn(nt_),
            comp,
            "inductor_njt",
            njt_packed if per_token else (lambda o: o),
        )
    )
    if dl is None:
        v.append(skipped("danling", DANLING_REASON))
    else:
        v.append(
            Variant("danling", lambda: nested_op(dl), (lambda o: o.concat) if per_token else (lambda o: o))
        )
    rg = comp.get("ragged", lambda: torch.compile(ragged_op, backend="ragged", dynamic=True))
    x = NestedTensor(items)
    xpad = NestedTensor(list(xp.unbind()))
    xeq = NestedTensor(eq_items)
    v += [
        Variant("ragged_mlir", lambda: rg(x), lambda o: o, compiled="ragged", key="ragged"),
        # Sum over zero padding is exact; max/softmax see the padding: not comparable.
        Variant(
            "ragged_mlir_padded",
            lambda: rg(xpad),
            (lambda o: o) if op == "sum" else None,
            compiled="ragged",
            key="ragged",
        ),
        Variant("ragged_mlir_equal", lambda: rg(xeq), None, compiled="ragged", key="ragged"),
    ]

    def reference():
        r = [item_op(t.double()) for t in items]
        return torch.cat(r) if per_token else torch.stack(r)

    return v, reference


# -- W2: packed Linear ----------------------------------------------------------------


def w2_variants(items, eq_items, comp: Compiled, w: torch.Tensor):
    xp, m = pad(items)
    bks = buckets(items)
    nt_ = njt(items)
    dl = danling(items)

    def lin(x):
        return F.linear(x, w)

    v = [
        Variant("padded", lambda: lin(xp), lambda o: o[m]),
        Variant("bucketed", lambda: [lin(b[1]) for b in bks], lambda outs: from_buckets(bks, outs, True)),
        Variant("per_item", lambda: [lin(x) for x in items], torch.cat),
        Variant("njt", lambda: lin(nt_), njt_packed),
    ]

    def lin_module():
        mod = torch.nn.Linear(w.shape[1], w.shape[0], bias=False).requires_grad_(False)
        mod.weight.data.copy_(w)
        return torch.compile(mod, dynamic=True)

    ind = comp.get("inductor_padded", lin_module)
    v.append(_guarded("inductor_padded", lambda: ind(xp), comp, "inductor_padded", lambda o: o[m]))
    indn = comp.get("inductor_njt", lin_module)
    v.append(_guarded("inductor_njt", lambda: indn(nt_), comp, "inductor_njt", njt_packed))
    v.append(
        skipped("danling", DANLING_REASON)
        if dl is None
        else Variant("danling", lambda: lin(dl), lambda o: o.concat)
    )
    # No dynamic=True: the NestedTensor marks its own batch dims dynamic, and
    # the weight this closure captures keeps its static shape, which IREE
    # needs to data-tile the GEMM (under dynamic=True the GEMM's reduction
    # dim is symbolic; docs/torch.md).
    rg = comp.get("ragged", lambda: torch.compile(lambda x: F.linear(x, w).values, backend="ragged"))
    x, xpad, xeq = NestedTensor(items), NestedTensor(list(xp.unbind())), NestedTensor(eq_items)
    v += [
        Variant("ragged_mlir", lambda: rg(x), lambda o: o, compiled="ragged", key="ragged"),
        Variant(
            "ragged_mlir_padded",
            lambda: rg(xpad),
            lambda o: o.view(m.shape + o.shape[1:])[m],
            compiled="ragged",
            key="ragged",
        ),
        Variant("ragged_mlir_equal", lambda: rg(xeq), None, compiled="ragged", key="ragged"),
    ]
    w64 = w.double()
    return v, lambda: torch.cat([F.linear(t.double(), w64) for t in items])


# -- W3: ragged attention ----------------------------------------------------------------


def flex_document_mask(lengths, causal: bool = False):
    """FlexAttention's block mask of a document mask over the packed tokens
    of items of `lengths` (each token attends to its own item's tokens; with
    `causal`, to those at or before it), built once per batch; or a str, why
    it cannot be built here."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask
    except ImportError as e:
        return f"no flex_attention: {e}"
    lengths = torch.as_tensor([int(n) for n in lengths])
    doc = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    starts = torch.repeat_interleave(torch.cumsum(lengths, 0) - lengths, lengths)
    pos = torch.arange(int(doc.numel())) - starts

    def mask(b, h, q_idx, kv_idx):
        same = doc[q_idx] == doc[kv_idx]
        return same & (pos[kv_idx] <= pos[q_idx]) if causal else same

    n = int(doc.numel())
    return create_block_mask(mask, None, None, n, n, device="cpu")


def w3_variants(qkv_items, eq_qkv_items, comp: Compiled):
    """qkv_items: three lists of [l, HEADS, HD] items."""
    qi, ki, vi = qkv_items
    pads = [pad(t) for t in (qi, ki, vi)]
    m = pads[0][1]
    qp, kp, vp = (p[0].transpose(1, 2).contiguous() for p in pads)  # [B, H, L, HD]
    add = additive_mask(m)
    m4 = m[:, None, None, :]
    scale = HD**-0.5

    def hf(q, k, v, add):
        return ((q @ k.transpose(-1, -2)) * scale + add).softmax(-1) @ v

    def sdpa_mask(q, k, v, m4):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m4)

    unpad = lambda o: o.transpose(1, 2)[m]  # noqa: E731  [N, H, HD]
    bks = [buckets(t) for t in (qi, ki, vi)]
    bq = [(b[0], b[1].transpose(1, 2).contiguous(), b[2][:, None, None, :]) for b in bks[0]]
    bk = [b[1].transpose(1, 2).contiguous() for b in bks[1]]
    bv = [b[1].transpose(1, 2).contiguous() for b in bks[2]]

    def bucketed():
        return [sdpa_mask(q[1], k, v, q[2]) for q, k, v in zip(bq, bk, bv, strict=True)]

    def from_b(outs):
        return from_buckets(bks[0], [o.transpose(1, 2) for o in outs], True)

    item_t = [[x.transpose(0, 1) for x in t] for t in (qi, ki, vi)]  # [H, l, HD] views
    njts = [njt(t).transpose(1, 2) for t in (qi, ki, vi)]  # [B, H, j, HD]

    def nested_sdpa(q, k, v):
        return F.scaled_dot_product_attention(q, k, v)

    v = [
        Variant("padded", lambda: hf(qp, kp, vp, add), unpad),
        Variant("padded_sdpa", lambda: sdpa_mask(qp, kp, vp, m4), unpad),
        Variant("bucketed", bucketed, from_b),
        Variant(
            "per_item",
            lambda: [F.scaled_dot_product_attention(q, k, v) for q, k, v in zip(*item_t, strict=True)],
            lambda o: torch.cat([x.transpose(0, 1) for x in o]),
        ),
        Variant("njt", lambda: nested_sdpa(*njts), lambda o: njt_packed(o.transpose(1, 2))),
    ]
    ind = comp.get("inductor_padded", lambda: torch.compile(sdpa_mask, dynamic=True))
    v.append(_guarded("inductor_padded", lambda: ind(qp, kp, vp, m4), comp, "inductor_padded", unpad))
    # Packed tokens [1, H, N, HD] and a document mask, compiled: what PyTorch
    # recommends for variable lengths (forward only on CPU).
    block = flex_document_mask([len(x) for x in qi])
    if isinstance(block, str):
        v.append(skipped("flex_packed", block))
    else:
        from torch.nn.attention.flex_attention import flex_attention

        packed = [torch.cat(t).transpose(0, 1)[None].contiguous() for t in (qi, ki, vi)]
        flex = comp.get("flex_packed", lambda: torch.compile(flex_attention))
        v.append(
            _guarded(
                "flex_packed",
                lambda: flex(*packed, block_mask=block),
                comp,
                "flex_packed",
                lambda o: o[0].transpose(0, 1),
            )
        )
    indn = comp.get("inductor_njt", lambda: torch.compile(nested_sdpa, dynamic=True))
    v.append(
        _guarded(
            "inductor_njt", lambda: indn(*njts), comp, "inductor_njt", lambda o: njt_packed(o.transpose(1, 2))
        )
    )
    if DanlingNT is None:
        v.append(skipped("danling", DANLING_REASON))
    else:
        dls = [DanlingNT([x.transpose(0, 1) for x in t]) for t in (qi, ki, vi)]  # [B, H, L(b), HD]
        v.append(
            Variant(
                "danling",
                lambda: nested_sdpa(*dls),
                lambda o: torch.cat([x.transpose(0, 1) for x in o.unbind()]),
            )
        )

    def ragged_attn(q, k, v):
        # [B, L(b), H, HD] items -> torch's [B, H, L(b), HD] (the packed values do not move)
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).values

    rg = comp.get("ragged", lambda: torch.compile(ragged_attn, backend="ragged", dynamic=True))

    def ragged_attn_scores(q, k, v):  # a frame of its own: compiled with other options
        return ragged_attn(q, k, v)

    rgs = comp.get(
        "ragged_scores",
        lambda: torch.compile(ragged_attn_scores, backend="ragged", dynamic=True, options=SCORES_OPTIONS),
    )

    def shared(lists):
        # q, k and v share one offsets tensor, as when they come from one
        # projection (three separate offsets tensors add a runtime equality
        # assert to the graph).
        q = NestedTensor(lists[0])
        out = [q] + [NestedTensor.from_packed(torch.cat(t), q.offsets) for t in lists[1:]]
        # The head count and size are fixed in a model (its projections
        # produce them); dynamic=True would trace them as symbols too.
        for t in out:
            torch._dynamo.mark_static(t.values, 1)
            torch._dynamo.mark_static(t.values, 2)
        return out

    nts = shared([qi, ki, vi])
    ntp = shared([list(p[0].unbind()) for p in pads])
    nte = shared(eq_qkv_items)
    v += [
        Variant("ragged_mlir", lambda: rg(*nts), lambda o: o, compiled="ragged", key="ragged"),
        Variant("ragged_mlir_padded", lambda: rg(*ntp), None, compiled="ragged", key="ragged"),
        Variant("ragged_mlir_equal", lambda: rg(*nte), None, compiled="ragged", key="ragged"),
        Variant("ragged_mlir_scores", lambda: rgs(*nts), lambda o: o, compiled="ragged", key="ragged_scores"),
    ]

    def reference():
        return torch.cat(
            [
                F.scaled_dot_product_attention(*(t.double() for t in qkv)).transpose(0, 1)
                for qkv in zip(*item_t, strict=True)
            ]
        )

    return v, reference


# -- W4: encoder layers (random weights) -------------------------------------------------------


def make_encoder(layers: int, seed: int = 0):
    """bert.py's encoder (RaggedBertModel(...).encoder) with random weights, and
    its parameters as a plain dict for the baselines."""
    torch.manual_seed(seed)
    enc = RaggedBertModel(BertConfig(num_hidden_layers=layers)).encoder.eval()
    p = {k: t.detach() for k, t in enc.state_dict().items()}
    return enc, p


def w4_variants(layers: int, items, eq_items, comp: Compiled, enc, p):
    xp, m = pad(items)
    add = additive_mask(m)
    m4 = m[:, None, None, :]
    bks = [(idx, x, mk[:, None, None, :]) for idx, x, mk in buckets(items)]
    nt_ = njt(items)
    dl = danling(items)

    def padded_sdpa(x, m4):
        return encoder(p, layers, x, attend_sdpa(m4))

    def nested(x):
        return encoder(p, layers, x, attend_nested)

    v = [
        Variant("padded", lambda: encoder(p, layers, xp, attend_additive(add)), lambda o: o[m]),
        Variant("padded_sdpa", lambda: padded_sdpa(xp, m4), lambda o: o[m]),
        Variant(
            "bucketed",
            lambda: [padded_sdpa(x, mk) for _, x, mk in bks],
            lambda outs: from_buckets([(i, x, mk[:, 0, 0]) for i, x, mk in bks], outs, True),
        ),
        Variant("per_item", lambda: [encoder(p, layers, x, attend_item) for x in items], torch.cat),
        Variant("njt", lambda: nested(nt_), njt_packed),
    ]
    ind = comp.get("inductor_padded", lambda: compiled_layers(PaddedLayer, p, layers))
    indf = comp.get("inductor_frozen", lambda: compiled_layers(PaddedLayer, p, layers, freezing=True))
    indn = comp.get("inductor_njt", lambda: compiled_layers(NestedLayer, p, layers))

    def run_padded_layers(x, m4, mods=ind):
        for mod in mods:
            x = mod(x, m4)
        return x

    def run_nested_layers(x):
        for mod in indn:
            x = mod(x)
        return x

    v.append(
        _guarded(
            "inductor_padded", lambda: run_padded_layers(xp, m4), comp, "inductor_padded", lambda o: o[m]
        )
    )
    v.append(
        _guarded(
            "inductor_frozen",
            lambda: run_padded_layers(xp, m4, indf),
            comp,
            "inductor_frozen",
            lambda o: o[m],
        )
    )
    v.append(_guarded("inductor_njt", lambda: run_nested_layers(nt_), comp, "inductor_njt", njt_packed))
    block = flex_document_mask([len(x) for x in items])
    if isinstance(block, str):
        v.append(skipped("flex_packed", block))
    else:
        flex = comp.get("flex_packed", lambda: compiled_layers(FlexLayer, p, layers))
        packed = torch.cat(items)

        def run_flex_layers(x):
            for mod in flex:
                x = mod(x, block)
            return x

        v.append(_guarded("flex_packed", lambda: run_flex_layers(packed), comp, "flex_packed", lambda o: o))
    v += ort_variants(
        comp, lambda: onnx_baseline.OrtBert(hf_bert(layers, p), encoder_only=True), xp, m, False
    )
    if dl is None:
        v += [skipped("danling", DANLING_REASON), skipped("danling_compiled", DANLING_REASON)]
    else:
        v.append(Variant("danling", lambda: nested(dl), lambda o: o.concat))
        dlc = comp.get("danling_compiled", lambda: torch.compile(nested, dynamic=True))
        v.append(_guarded("danling_compiled", lambda: dlc(dl), comp, "danling_compiled", lambda o: o.concat))
    rg = comp.get("ragged", lambda: torch.compile(lambda x: enc(x).values, backend="ragged", dynamic=True))
    rgs = comp.get(
        "ragged_scores",
        lambda: torch.compile(
            lambda x: enc(x).values, backend="ragged", dynamic=True, options=SCORES_OPTIONS
        ),
    )
    x, xpad, xeq = NestedTensor(items), NestedTensor(list(xp.unbind())), NestedTensor(eq_items)
    v += [
        Variant("ragged_mlir", lambda: rg(x), lambda o: o, compiled="ragged", key="ragged"),
        Variant("ragged_mlir_padded", lambda: rg(xpad), None, compiled="ragged", key="ragged"),
        Variant("ragged_mlir_equal", lambda: rg(xeq), None, compiled="ragged", key="ragged"),
        Variant("ragged_mlir_scores", lambda: rgs(x), lambda o: o, compiled="ragged", key="ragged_scores"),
    ]
    p64 = {k: t.double() for k, t in p.items()}

    def reference():
        def attend64(q, k, v):
            length = q.shape[0]
            q, k, v = (t.view(length, HEADS, HD).transpose(0, 1) for t in (q, k, v))
            return F.scaled_dot_product_attention(q, k, v).transpose(0, 1).reshape(length, D)

        return torch.cat([encoder(p64, layers, t.double(), attend64) for t in items])

    return v, reference


# -- W5: MiniLM sentence embeddings (real weights) -----------------------------------------


def _embed(p, ids, positions):
    x = (
        F.embedding(ids, p["embeddings.word_embeddings.weight"])
        + F.embedding(positions, p["embeddings.position_embeddings.weight"])
        + p["embeddings.token_type_embeddings.weight"][0]
    )
    return _ln(p, "embeddings.LayerNorm", x)


def w5_variants(ids: list[torch.Tensor], eq_ids, comp: Compiled, model, p):
    """ids: int64 token ids per sentence ([CLS] ... [SEP]). ``model`` is
    bert.load_minilm()'s SentenceEncoder, ``p`` its state dict (HF names)."""
    layers = 0
    while f"encoder.layer.{layers}.attention.self.query.weight" in p:
        layers += 1
    idp, m = pad(ids)
    lmax = idp.shape[1]
    pos = torch.arange(lmax)[None].expand_as(idp)
    add = additive_mask(m)
    m4 = m[:, None, None, :]
    mf = m[..., None].to(torch.float32)

    def padded_form(ids_p, pos_p, attend, mf):
        x = encoder(p, layers, _embed(p, ids_p, pos_p), attend, "encoder.")
        return F.normalize((x * mf).sum(1) / mf.sum(1), dim=1)

    def padded_sdpa(ids_p, pos_p, m4, mf):
        return padded_form(ids_p, pos_p, attend_sdpa(m4), mf)

    bks = []
    for idx, t, mk in buckets(ids):
        bks.append(
            (
                idx,
                t,
                torch.arange(t.shape[1])[None].expand_as(t),
                mk[:, None, None, :],
                mk[..., None].to(torch.float32),
            )
        )
    item_pos = [torch.arange(len(t)) for t in ids]

    def item(t, ps):
        x = encoder(p, layers, _embed(p, t, ps), attend_item, "encoder.")
        return F.normalize(x.mean(0), dim=0)

    packed_ids, packed_pos = torch.cat(ids), torch.cat(item_pos)
    offsets = torch.tensor([0] + [len(t) for t in ids]).cumsum(0)

    def nested(packed_ids, packed_pos, offsets):
        x = torch.nested.nested_tensor_from_jagged(_embed(p, packed_ids, packed_pos), offsets)
        return F.normalize(encoder(p, layers, x, attend_nested, "encoder.").mean(dim=1), dim=1)

    v = [
        Variant("padded", lambda: padded_form(idp, pos, attend_additive(add), mf), lambda o: o),
        Variant("padded_sdpa", lambda: padded_sdpa(idp, pos, m4, mf), lambda o: o),
        Variant(
            "bucketed",
            lambda: [padded_sdpa(t, ps, mk, f) for _, t, ps, mk, f in bks],
            lambda outs: from_buckets([(b[0], None, None) for b in bks], outs, False),
        ),
        Variant("per_item", lambda: [item(t, ps) for t, ps in zip(ids, item_pos, strict=True)], torch.stack),
        Variant("njt", lambda: nested(packed_ids, packed_pos, offsets), lambda o: o),
    ]
    # Regional compilation of the encoder layers; embeddings and pooling
    # (under 1 % of the FLOPs) stay eager.
    ind = comp.get("inductor_padded", lambda: compiled_layers(PaddedLayer, p, layers, "encoder."))
    indn = comp.get("inductor_njt", lambda: compiled_layers(NestedLayer, p, layers, "encoder."))

    def inductor_padded():
        x = _embed(p, idp, pos)
        for mod in ind:
            x = mod(x, m4)
        return F.normalize((x * mf).sum(1) / mf.sum(1), dim=1)

    def inductor_njt():
        x = torch.nested.nested_tensor_from_jagged(_embed(p, packed_ids, packed_pos), offsets)
        for mod in indn:
            x = mod(x)
        return F.normalize(x.mean(dim=1), dim=1)

    v.append(_guarded("inductor_padded", inductor_padded, comp, "inductor_padded", lambda o: o))
    v.append(_guarded("inductor_njt", inductor_njt, comp, "inductor_njt", lambda o: o))

    def minilm_bert():
        from ragged_bert import minilm_path
        from transformers import BertModel

        return onnx_baseline.OrtBert(BertModel.from_pretrained(minilm_path(), attn_implementation="eager"))

    v += ort_variants(comp, minilm_bert, idp, m, True)
    if DanlingNT is None:
        v += [skipped("danling", DANLING_REASON), skipped("danling_compiled", DANLING_REASON)]
    else:
        dids, dpos = DanlingNT(ids), DanlingNT(item_pos)

        def dl_run():
            x = encoder(p, layers, _embed(p, dids, dpos), attend_nested, "encoder.")
            return F.normalize(x.mean(dim=1), dim=1)

        v.append(Variant("danling", dl_run, lambda o: o))
        dlc = comp.get("danling_compiled", lambda: torch.compile(dl_run, dynamic=True))
        v.append(_guarded("danling_compiled", dlc, comp, "danling_compiled", lambda o: o))
    rg = comp.get("ragged", lambda: torch.compile(model, backend="ragged", dynamic=True))
    nid, npos = NestedTensor(ids), NestedTensor(item_pos)
    pid, ppos = NestedTensor(list(idp.unbind())), NestedTensor(list(pos.unbind()))
    eid = NestedTensor(eq_ids)
    epos = NestedTensor([torch.arange(len(t)) for t in eq_ids])
    v += [
        Variant("ragged_mlir", lambda: rg(nid, npos), lambda o: o, compiled="ragged", key="ragged"),
        Variant("ragged_mlir_padded", lambda: rg(pid, ppos), None, compiled="ragged", key="ragged"),
        Variant("ragged_mlir_equal", lambda: rg(eid, epos), None, compiled="ragged", key="ragged"),
    ]
    p64 = {k: t.double() if t.is_floating_point() else t for k, t in p.items()}

    def reference():
        def attend64(q, k, v):
            length = q.shape[0]
            q, k, v = (t.view(length, HEADS, HD).transpose(0, 1) for t in (q, k, v))
            return F.scaled_dot_product_attention(q, k, v).transpose(0, 1).reshape(length, D)

        outs = []
        for t, ps in zip(ids, item_pos, strict=True):
            x = encoder(p64, layers, _embed(p64, t, ps), attend64, "encoder.")
            outs.append(F.normalize(x.mean(0), dim=0))
        return torch.stack(outs)

    return v, reference


def synthetic_ids(lengths, seed: int, vocab: int = 30522) -> list[torch.Tensor]:
    """Token ids for given lengths: [CLS] random word pieces [SEP]."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for n in lengths:
        n = max(int(n), 2)
        body = torch.randint(1000, vocab, (n - 2,), generator=g)
        out.append(torch.cat([torch.tensor([101]), body, torch.tensor([102])]))
    return out
