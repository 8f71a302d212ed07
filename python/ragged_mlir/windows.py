"""The window rule of convolution and pooling on images of their own sizes,
written once for every Python client (the builders, the torch ops and
NestedTensor, the benchmarks); the dialect's verifier and lowering
(``keepsExtent`` and the extents of ``ragged.conv2d`` / ``ragged.pool2d``)
implement the same rule in C++, and the tests hold the two together.

A window of ``kernel`` taps ``dilation`` apart, moved by ``stride`` over an
extent ``x`` padded by ``padding`` on both sides, gives PyTorch's output
extent ``floor((x + 2 padding - dilation (kernel - 1) - 1) / stride) + 1``
(``ceil`` with ``ceil_mode``, the last window starting inside the image or
its leading padding), and 0 for an empty image.
"""

from __future__ import annotations

__all__ = ["keeps_extent", "keeps_extents", "window_extent", "window_symbol"]


def keeps_extent(kernel: int, stride: int, padding: int, dilation: int = 1) -> bool:
    """Whether the window maps every extent to itself (stride 1, "same"
    padding): the output shares the input's symbol."""
    return stride == 1 and 2 * padding == dilation * (kernel - 1)


def keeps_extents(kernel, stride, padding, dilation) -> bool:
    """Whether a 2-D window (one entry per side) keeps every image's height
    and width."""
    return all(keeps_extent(kernel[i], stride[i], padding[i], dilation[i]) for i in range(2))


def window_extent(
    x: int, kernel: int, stride: int, padding: int, dilation: int = 1, ceil: bool = False
) -> int:
    """The output extent of one image's extent ``x``."""
    if x == 0:
        return 0
    span = x + 2 * padding - dilation * (kernel - 1) - 1
    q = -(-span // stride) if ceil else span // stride
    if ceil and q * stride >= x + padding:
        return max(q, 0)
    return max(q + 1, 0)


def window_symbol(
    symbol: str, kernel: int, stride: int, padding: int, dilation: int = 1, ceil: bool = False
) -> str:
    """The symbol of an extent a window derives from ``symbol``'s, named by
    the rule's parameters: the extent depends on ``o = 2 padding - dilation
    (kernel - 1)`` and ``stride`` only (with ``ceil``, on the padding too).
    ``H`` -> ``H_s2`` for a 3x3 stride-2 conv with padding 1, a 1x1 stride-2
    one or a 3x3 stride-2 pool with padding 1; ``H_s1m2`` for a 3x3 conv
    without padding."""
    o = 2 * padding - dilation * (kernel - 1)
    name = f"{symbol}_s{stride}" + ("" if o == 0 else f"p{o}" if o > 0 else f"m{-o}")
    return name + (f"c{padding}" if ceil else "")
