"""The index rules the ragged ops share, in vectorised torch (no padding):
the segment of every row, a window's output extents, and attention dropout
(its arguments and which weights it keeps). The reference implementations,
the fake kernels, the backward formulas and NestedTensor all read them here.
"""

from __future__ import annotations

import torch


def segment_ids(offsets: torch.Tensor, rows: int) -> torch.Tensor:
    """The segment of every row: ``[rows]`` int64."""
    lengths = offsets[1:] - offsets[:-1]
    return torch.repeat_interleave(
        torch.arange(lengths.numel(), device=offsets.device), lengths, output_size=rows
    )


# --------------------------------------------------------------------------
# Images: [C, H(b), W(b)] items packed channels-last, values [sum H W, C],
# with the offsets of the heights and of the widths. The output extents of a
# window follow PyTorch's rule per image (0 for an empty image), computed on
# the device from the input's offsets (ragged.conv2d and ragged.pool2d
# define them the same way).
# --------------------------------------------------------------------------


def window_offsets(
    offsets: torch.Tensor, kernel: int, stride: int, padding: int, dilation: int = 1, ceil_mode: bool = False
) -> torch.Tensor:
    """The offsets of the output extents of a window along one spatial dim:
    :func:`ragged_mlir.windows.window_extent` per image, vectorised (a test
    holds the two together)."""
    x = offsets[1:] - offsets[:-1]
    span = x + (2 * padding - dilation * (kernel - 1) - 1)
    q = (
        -torch.div(-span, stride, rounding_mode="floor")
        if ceil_mode
        else torch.div(span, stride, rounding_mode="floor")
    )
    out = q + 1
    if ceil_mode:  # the last window starts inside the image or its leading padding
        out = torch.where(q * stride >= x + padding, q, out)
    out = torch.where(x == 0, torch.zeros_like(out), out.clamp(min=0))
    return torch.cat([offsets.new_zeros(1), torch.cumsum(out, 0)])


# --------------------------------------------------------------------------
# Attention dropout: a counter-based hash of (seed, item, head, query, key),
# so that the forward, the backward and the compiled kernels agree on every
# dropped weight without storing a mask.
# --------------------------------------------------------------------------

_U32 = 0xFFFFFFFF


def _mul32(x: torch.Tensor, k: int) -> torch.Tensor:
    """``x * k`` mod 2^32 for ``x`` in [0, 2^32) (int64, without overflow)."""
    lo, hi = k & 0xFFFF, k >> 16
    return (x * lo + (((x * hi) & 0xFFFF) << 16)) & _U32


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """MurmurHash3's 32-bit finaliser on int64 tensors holding uint32 values."""
    x = _mul32(x ^ (x >> 16), 0x85EBCA6B)
    x = _mul32(x ^ (x >> 13), 0xC2B2AE35)
    return x ^ (x >> 16)


def dropout_factors(
    seed: torch.Tensor, item: int, heads: int, length: int, p: float, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """The attention-dropout factors ``[heads, length, length]`` of item
    ``item``: ``1 / (1 - p)`` for the weights (query ``i``, key ``j``) that
    :func:`attention` with ``dropout_p=p`` and ``seed`` keeps, 0 for those it
    drops (the rule of ``ragged.attention``'s ``dropout``)."""
    s = int(seed)
    dev = seed.device
    h = torch.arange(heads, device=dev).view(-1, 1, 1)
    i = torch.arange(length, device=dev).view(1, -1, 1)
    j = torch.arange(length, device=dev).view(1, 1, -1)
    c = (_mul32(torch.tensor(item, device=dev), 0x9E3779B1) + _mul32(h, 0x85EBCA77)) & _U32
    c = (c + _mul32(i, 0xC2B2AE3D) + _mul32(j, 0x27D4EB2F)) & _U32
    u = _mix32(_mix32(c ^ (s & _U32)) ^ ((s >> 32) & _U32))
    threshold = min(round(p * 2.0**32), _U32)
    return (u >= threshold).to(dtype) / (1.0 - p)


def check_dropout(dropout_p: float, seed: torch.Tensor | None) -> bool:
    """Whether the attention drops; raises on a rate outside [0, 1) or a
    rate without a seed."""
    if not 0.0 <= dropout_p < 1.0:
        raise ValueError(f"attention: dropout_p must be in [0, 1), got {dropout_p}")
    if dropout_p > 0.0 and (seed is None or seed.dtype != torch.int64 or seed.dim() != 0):
        raise ValueError("attention: dropout_p > 0 needs a seed, a 0-dim int64 tensor")
    return dropout_p > 0.0
