"""[C, H(b), W(b)] images packed channels-last: convolution, pooling, normalisation at each image's own size."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from ...windows import keeps_extent
from .. import ops as _ops
from ..ops.rules import segment_ids as _segment_ids
from .common import _as_nested, _bind, _first_nt, _operand
from .layout import _is_compiling
from .per_item import _per_item_fn
from .registry import _fname, register
from .tensor import NestedTensor

# -- images: [C, H(b), W(b)] items, packed channels-last -------------------------------------


def _is_image(x: Any) -> bool:
    return isinstance(x, NestedTensor) and x._ragged == (1, 2) and x._item_rank() == 3


def _is_regular_image(x: Any) -> bool:
    """Images that all have one size: DanLing's default layout then makes the
    channel dim the ragged one (values ``[sum C(b), H, W]``)."""
    return isinstance(x, NestedTensor) and x._ragged == (0,) and x._item_rank() == 3


def _channel_counts(nt: NestedTensor) -> str:
    """The images' channel counts as the message of an error names them (the
    host's item shapes; under a trace only that they differ)."""
    if _is_compiling():
        return "counts that differ"
    return str(sorted({s[0] for s in nt._item_shapes()}))


def _regular_batch(nt: NestedTensor, channels: int, fname: str) -> torch.Tensor:
    """The dense ``[B, C, H, W]`` batch of images of one size.

    The channel counts are the offsets: eagerly they are checked on the host;
    a trace checks that their sum is ``B C`` (a guard) and that each is ``C``
    (a check on the device, which fails the call with the message)."""
    counts = nt.offsets[1:] - nt.offsets[:-1]
    expected = f"{fname}: expected images of {channels} channels"
    if not _is_compiling():
        if bool((counts != channels).any()):
            raise ValueError(f"{expected}, got {counts.tolist()}")
    elif nt.values.shape[0] != counts.shape[0] * channels:
        raise ValueError(f"{expected}, got {_channel_counts(nt)}")
    else:
        torch._assert_async((counts == channels).all(), f"{expected}; the batch's channel counts differ")
    return nt.values.reshape(-1, channels, *nt.values.shape[1:])


def _as_image(x: Any, fname: str) -> Any:
    """A NestedTensor of ``[C, H(b), W(b)]`` items in the image layout (ragged
    dims (1, 2), values ``[sum H W, C]`` channels-last), also when the
    images differ in one side only and the constructor made that side alone
    ragged: ``(1,)``, values ``[sum H, C, W]``, is a copy in another order;
    ``(2,)``, values ``[sum W, C, H]``, a gather of every image's pixels
    row by row. Images of one size (``(0,)``) and anything else pass as
    they are. A ragged channel dim next to a ragged side means the images'
    channel counts differ: a ``ValueError`` that names them."""
    if not isinstance(x, NestedTensor) or x._item_rank() != 3 or x._ragged in ((1, 2), (0,)):
        return x
    if 0 in x._ragged:
        raise ValueError(
            f"{fname}: the images of a batch need one channel count (their heights and widths may differ); "
            f"got {_channel_counts(x)}"
        )
    values, offsets = x.values, x.offsets
    rows, channels, side = values.shape
    steps = torch.arange(offsets.shape[0], device=offsets.device, dtype=torch.int64)
    pixels = values.permute(0, 2, 1).reshape(-1, channels)
    if x._ragged == (1,):  # [sum H, C, W]: rows in (h, w) order already
        heights, widths = offsets, steps * side
    else:  # [sum W, C, H]: pixel (w, h) of an image at row (W0 + w) H + h; gather it at (h, w)
        heights, widths = steps * side, offsets
        starts = offsets * side
        item = _segment_ids(starts, rows * side)
        width = (offsets[1:] - offsets[:-1])[item]
        local = torch.arange(rows * side, device=offsets.device) - starts[item]
        pixels = pixels[(offsets[item] + local % width) * side + local // width]
    return x._derive(pixels, ragged=(1, 2), offsets=offsets * side, partitions=[heights, widths], shapes=None)


def _compiled_training(*tensors: Any) -> bool:
    """A traced convolution whose gradient is needed: images of one size then
    take the packed path too, whose gradient compiles (the dense
    convolution's backward does not lower under dynamic shapes)."""
    return (
        _is_compiling()
        and torch.is_grad_enabled()
        and any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)
    )


def _from_regular(nt: NestedTensor, y: torch.Tensor, channels: int | None = None) -> NestedTensor:
    """Images of one size ``[B, C, Ho, Wo]`` as an image NestedTensor
    (channels-last values, ragged dims (1, 2)); ``channels``, where given,
    is C as a plain int (traced shapes may carry it as an expression)."""
    b, c, h, w = y.shape
    c = c if channels is None else channels
    steps = torch.arange(b + 1, device=y.device, dtype=torch.int64)
    values = y.permute(0, 2, 3, 1).reshape(-1, c)
    return nt._derive(
        values, ragged=(1, 2), offsets=steps * (h * w), partitions=[steps * h, steps * w], shapes=None
    )


def _pair(v: Any) -> list[int] | None:
    """An int or two ints as [H, W]; None when not of that form."""
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return [v, v]
    if (
        isinstance(v, (tuple, list))
        and len(v) == 2
        and all(isinstance(i, int) and not isinstance(i, bool) for i in v)
    ):
        return [int(i) for i in v]
    if isinstance(v, (tuple, list)) and len(v) == 1 and isinstance(v[0], int):
        return [int(v[0])] * 2
    return None


def _windowed(nt: NestedTensor, values: torch.Tensor, windows: list[tuple[int, int, int, int]], ceil: bool):
    """The image NestedTensor of ``values`` after a window per spatial dim
    (kernel, stride, padding, dilation): new height and width offsets (kept
    where the window keeps every extent), and row offsets."""
    parts = []
    for offsets, (k, s, p, d) in zip(nt.partitions, windows, strict=True):
        keeps = keeps_extent(k, s, p, d)
        parts.append(offsets if keeps else _ops.window_offsets(offsets, k, s, p, d, ceil))
    if parts[0] is nt.partitions[0] and parts[1] is nt.partitions[1]:
        return nt._derive(values, shapes=None)
    heights, widths = parts
    pixels = (heights[1:] - heights[:-1]) * (widths[1:] - widths[:-1])
    rows = torch.cat([heights.new_zeros(1), torch.cumsum(pixels, 0)])
    return nt._derive(values, ragged=(1, 2), offsets=rows, partitions=[heights, widths], shapes=None)


def _conv2d(func: Callable, args: tuple, kwargs: dict) -> Any:
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
    p = _bind(
        "conv2d", args, kwargs, names, {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1}
    )
    nt, weight, bias = _as_image(_as_nested(p["input"]), "conv2d"), p["weight"], p["bias"]
    stride, dilation = _pair(p["stride"]), _pair(p["dilation"])
    padding = p["padding"]
    if padding == "valid":
        padding = 0
    if padding == "same" and stride == [1, 1] and isinstance(weight, torch.Tensor) and dilation is not None:
        # Symmetric when the window's span is odd; PyTorch pads the extra on the far side otherwise.
        total = [dilation[i] * (weight.shape[2 + i] - 1) for i in range(2)]
        padding = [t // 2 for t in total] if all(t % 2 == 0 for t in total) else None
    padding = _pair(padding) if padding is not None and not isinstance(padding, str) else None
    plain = (
        isinstance(weight, torch.Tensor)
        and not isinstance(bias, NestedTensor)
        and weight.dim() == 4
        and None not in (stride, padding, dilation)
    )
    groups = int(p["groups"])
    if plain and _is_regular_image(nt):
        x = _regular_batch(nt, weight.shape[1] * groups, "conv2d")
        if not _compiled_training(x, weight, bias):
            return _from_regular(nt, F.conv2d(x, weight, bias, stride, padding, dilation, groups))
        nt = _from_regular(nt, x, weight.shape[1] * groups)
    if not (plain and _is_image(nt)):
        return _per_item_fn()(func, args, kwargs)
    channels = nt.values.shape[1]
    if weight.shape[1] * groups != channels:
        raise ValueError(
            f"conv2d: weight {tuple(weight.shape)} with groups={groups} expects {weight.shape[1] * groups} input "
            f"channels, got images of {channels}"
        )
    hwio = weight.permute(2, 3, 1, 0)
    h, w = nt.partitions
    out = torch.ops.ragged.conv2d(nt.values, h, w, hwio, bias, stride, padding, dilation, groups)
    return _windowed(
        nt, out, [(weight.shape[2 + i], stride[i], padding[i], dilation[i]) for i in range(2)], False
    )


def _pool2d(kind: str) -> Callable:
    def handler(func: Callable, args: tuple, kwargs: dict) -> Any:
        fname = "max_pool2d" if kind == "max" else "avg_pool2d"
        if kind == "max":
            names = ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")
            defaults = {
                "stride": None,
                "padding": 0,
                "dilation": 1,
                "ceil_mode": False,
                "return_indices": False,
            }
        else:
            names = (
                "input",
                "kernel_size",
                "stride",
                "padding",
                "ceil_mode",
                "count_include_pad",
                "divisor_override",
            )
            defaults = {"stride": None, "padding": 0, "ceil_mode": False, "count_include_pad": True}
            defaults["divisor_override"] = None
        p = _bind(fname, args, kwargs, names, defaults)
        nt = _as_image(_as_nested(p["input"]), fname)
        kernel = _pair(p["kernel_size"])
        stride = kernel if p["stride"] is None or p["stride"] == [] else _pair(p["stride"])
        padding = _pair(p["padding"])
        dilation = _pair(p.get("dilation", 1))
        plain = not p.get("return_indices") and p.get("divisor_override") is None
        if _is_regular_image(nt) and plain:
            # Images of one size: each channel pooled as a dense batch.
            return nt._derive(func(nt.values[:, None], *args[1:], **kwargs)[:, 0], shapes=None)
        if not (_is_image(nt) and plain and None not in (kernel, stride, padding, dilation)):
            return _per_item_fn()(func, args, kwargs)
        if any(2 * padding[i] > kernel[i] for i in range(2)):
            raise ValueError(f"{fname}: padding {padding} must be at most half the kernel {kernel}")
        ceil, include = bool(p["ceil_mode"]), bool(p.get("count_include_pad", False))
        h, w = nt.partitions
        out = torch.ops.ragged.pool2d(nt.values, h, w, kind, kernel, stride, padding, dilation, ceil, include)
        return _windowed(nt, out, [(kernel[i], stride[i], padding[i], dilation[i]) for i in range(2)], ceil)

    return handler


def _adaptive_avg_pool2d(func: Callable, args: tuple, kwargs: dict) -> Any:
    p = _bind("adaptive_avg_pool2d", args, kwargs, ("input", "output_size"), {})
    nt = _as_image(_as_nested(p["input"]), "adaptive_avg_pool2d")
    one = _pair(p["output_size"]) == [1, 1]
    if _is_regular_image(nt) and one:
        return nt.values.mean(dim=(1, 2)).reshape(nt.offsets.shape[0] - 1, -1, 1, 1)
    if not (_is_image(nt) and one):
        return _per_item_fn()(func, args, kwargs)
    # Every image pools to [C, 1, 1]: a dense [B, C, 1, 1] (an empty image gives 0).
    pooled = torch.ops.ragged.segment_reduce(nt.values, nt.offsets, "mean", 0.0)
    return pooled[:, :, None, None]


def _image_group_norm(nt: NestedTensor, groups: int, weight, bias, eps: float, fname: str) -> NestedTensor:
    """Each image's channels in ``groups`` groups, normalised over the
    group's channels and the image's real pixels (two passes: the mean, then
    the mean square deviation), then the per-channel affine."""
    rows, channels = nt.values.shape
    if channels % groups:
        raise ValueError(f"{fname}: {channels} channels do not split into {groups} groups")
    v = nt.values.reshape(rows, groups, channels // groups)
    ops = torch.ops.ragged

    def per_image_mean(t: torch.Tensor) -> torch.Tensor:  # [rows, groups] -> [rows, groups]
        return ops.segment_broadcast(ops.segment_reduce(t, nt.offsets, "mean", 0.0), t, nt.offsets)

    centred = v - per_image_mean(v.mean(-1))[..., None]
    var = per_image_mean((centred * centred).mean(-1))
    out = (centred * torch.rsqrt(var + eps)[..., None]).reshape(rows, channels)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return nt._derive(out)


def _group_norm(func: Callable, args: tuple, kwargs: dict) -> Any:
    names = ("input", "num_groups", "weight", "bias", "eps")
    p = _bind("group_norm", args, kwargs, names, {"weight": None, "bias": None, "eps": 1e-5})
    nt = _as_image(_as_nested(p["input"]), "group_norm")
    if _is_regular_image(nt) and p["weight"] is not None:
        x = _regular_batch(nt, p["weight"].shape[0], "group_norm")
        return _from_regular(nt, F.group_norm(x, p["num_groups"], p["weight"], p["bias"], p["eps"]))
    if not _is_image(nt):
        return _per_item_fn()(func, args, kwargs)
    return _image_group_norm(nt, int(p["num_groups"]), p["weight"], p["bias"], float(p["eps"]), "group_norm")


def _instance_norm(func: Callable, args: tuple, kwargs: dict) -> Any:
    names = ("input", "running_mean", "running_var", "weight", "bias", "use_input_stats", "momentum", "eps")
    defaults = {"running_mean": None, "running_var": None, "weight": None, "bias": None}
    defaults.update({"use_input_stats": True, "momentum": 0.1, "eps": 1e-5})
    p = _bind("instance_norm", args, kwargs, names, defaults)
    nt = _as_image(_as_nested(p["input"]), "instance_norm")
    known = p["weight"] if p["weight"] is not None else p["running_mean"]
    if _is_regular_image(nt) and (known is not None or not _is_compiling()):
        channels = known.shape[0] if known is not None else int(nt.offsets[1] - nt.offsets[0])
        x = _regular_batch(nt, channels, "instance_norm")
        rest = {k: p[k] for k in names[1:]}
        return _from_regular(nt, F.instance_norm(x, **rest))
    if not _is_image(nt):
        return _per_item_fn()(func, args, kwargs)
    if not p["use_input_stats"]:  # eval with running statistics: a scale and shift, as batch norm
        return _batch_norm(
            F.batch_norm, (nt, p["running_mean"], p["running_var"], p["weight"], p["bias"]), {}
        )
    if p["running_mean"] is not None:
        raise NotImplementedError("instance_norm: updating running statistics from NestedTensor images")
    channels = nt.values.shape[1]
    return _image_group_norm(nt, channels, p["weight"], p["bias"], float(p["eps"]), "instance_norm")


register(
    [F.conv2d], "image", _conv2d, "zero padding, or 'same' with an even window span; other cases run per item"
)
register([F.max_pool2d], "image", _pool2d("max"), "return_indices runs per item")
register([F.avg_pool2d], "image", _pool2d("mean"), "divisor_override runs per item")
register([F.group_norm], "image", _group_norm, "statistics over each image's real pixels")
register([F.instance_norm], "image", _instance_norm, "statistics over each image's real pixels")
register(
    [F.adaptive_avg_pool2d],
    "image",
    _adaptive_avg_pool2d,
    "output size 1: a dense [B, C, 1, 1]; other sizes run per item",
)


# Spatial functions on unbatched items ([C, H(b), W(b)] images, [C, L(b)] signals), like DanLing.
_SPATIAL = [
    getattr(F, name, None)
    for name in (
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
        "max_pool1d",
        "max_pool2d",
        "max_pool3d",
        "avg_pool1d",
        "avg_pool2d",
        "avg_pool3d",
        "lp_pool1d",
        "lp_pool2d",
        "lp_pool3d",
        "adaptive_max_pool1d",
        "adaptive_max_pool2d",
        "adaptive_max_pool3d",
        "adaptive_avg_pool1d",
        "adaptive_avg_pool2d",
        "adaptive_avg_pool3d",
        "max_unpool1d",
        "max_unpool2d",
        "max_unpool3d",
        "max_pool1d_with_indices",
        "max_pool2d_with_indices",
        "max_pool3d_with_indices",
        "adaptive_max_pool1d_with_indices",
        "adaptive_max_pool2d_with_indices",
        "adaptive_max_pool3d_with_indices",
        "fractional_max_pool2d",
        "fractional_max_pool3d",
        "pad",
        "pixel_shuffle",
        "pixel_unshuffle",
        "channel_shuffle",
        "unfold",
        "fold",
        "local_response_norm",
        "pairwise_distance",
        "pdist",
    )
]
_SPATIAL += [
    getattr(torch, n, None)
    for n in (
        "conv1d",
        "conv2d",
        "conv3d",
        "pixel_shuffle",
        "pixel_unshuffle",
        "channel_shuffle",
        "pairwise_distance",
        "pdist",
    )
]
register(_SPATIAL, "per-item", _per_item_fn(), "on every unbatched item (e.g. [C, H(b), W(b)] images)")


def _batched_per_item(func: Callable, args: tuple, kwargs: dict) -> Any:
    # interpolate has no unbatched form: each item gets a batch dim of 1.
    nt = _as_nested(args[0])
    if not isinstance(nt, NestedTensor):
        raise TypeError(f"{_fname(func)}: expected input to be a NestedTensor, got {type(nt).__name__}")
    return nt._per_item(lambda t: func(t[None], *args[1:], **kwargs)[0], _fname(func))


register([F.interpolate, getattr(F, "upsample", None)], "per-item", _batched_per_item)


def _batch_norm(func: Callable, args: tuple, kwargs: dict) -> Any:
    nt = _as_nested(args[0])
    if not isinstance(nt, NestedTensor) or nt._item_rank() < 1 or 0 in nt.ragged_dims:
        raise ValueError(
            "batch_norm: needs a NestedTensor whose channel dim (dim 1, the items' dim 0) is static, "
            f"e.g. [B, C, H(b), W(b)]; got ragged dims {getattr(nt, 'ragged_dims', None)}"
        )
    names = ("input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps")
    defaults = {"weight": None, "bias": None, "training": False, "momentum": 0.1, "eps": 1e-5}
    p = _bind("batch_norm", args, kwargs, names, defaults)
    values = nt.values
    # The channel dim is the values' dim 1 in every layout (the items' first
    # dim, static): [rows, C] for images, [rows, C, W] when only the heights
    # differ.
    along = (-1,) + (1,) * (values.dim() - 2)
    if not p["training"] and p["running_mean"] is not None and p["running_var"] is not None:
        # Inference: a per-channel scale and shift of the rows, written out so
        # that rows counted only at run time (after a strided convolution)
        # meet no size check.
        scale = torch.rsqrt(p["running_var"] + p["eps"])
        if p["weight"] is not None:
            scale = scale * p["weight"]
        shift = -p["running_mean"] * scale
        if p["bias"] is not None:
            shift = shift + p["bias"]
        return nt._derive(values * scale.reshape(along) + shift.reshape(along))
    # Training (or no running statistics): the statistics of a channel over
    # every real element, the packed rows being the batch, written out:
    # F.batch_norm and aten's batch norm check the element count (more than
    # one value per channel, none at all) on the row count, which after a
    # strided convolution or a pool is known only at run time, and so broke
    # the graph. Here the check is a run-time one under a trace, and a
    # ValueError eagerly.
    if p["training"]:
        per_channel = values.shape[0] * math.prod(values.shape[2:])
        message = "batch_norm: expected more than 1 value per channel when training, got 1 (one real pixel)"
        if not _is_compiling():
            if per_channel == 1:
                raise ValueError(message)
        else:
            torch._check(per_channel != 1, lambda: message)
    dims = [0, *range(2, values.dim())]
    var, mean = torch.var_mean(values, dims, correction=0)
    if p["training"] and p["running_mean"] is not None and p["running_var"] is not None:
        # As torch: the running variance is the unbiased one.
        m = p["momentum"]
        with torch.no_grad():
            p["running_mean"].mul_(1 - m).add_(mean.detach(), alpha=m)
            p["running_var"].mul_(1 - m).add_(torch.var(values.detach(), dims, correction=1), alpha=m)
    out = (values - mean.reshape(along)) * torch.rsqrt(var + p["eps"]).reshape(along)
    if p["weight"] is not None:
        out = out * p["weight"].reshape(along)
    if p["bias"] is not None:
        out = out + p["bias"].reshape(along)
    return nt._derive(out)


register([F.batch_norm], "per-token", _batch_norm, "statistics over the real elements of every channel")


def _take(func: Callable, args: tuple, kwargs: dict) -> Any:
    nt = _as_nested(args[0])
    index = args[1] if len(args) > 1 else kwargs["index"]
    if isinstance(index, NestedTensor):
        return _per_item_fn()(func, (nt, index), {})
    return torch.take(nt.values, index)  # DanLing: a plain index addresses the packed values


register([torch.take, torch.Tensor.take], "per-token", _take, "a dense index addresses the packed values")


def _masked_select(func: Callable, args: tuple, kwargs: dict) -> Any:
    nt, mask = _as_nested(args[0]), _as_nested(args[1] if len(args) > 1 else kwargs["mask"])
    return nt[mask]


register([torch.masked_select, torch.Tensor.masked_select], "per-item", _masked_select)


def _broadcast_tensors(func: Callable, args: tuple, kwargs: dict) -> Any:
    seq = [_as_nested(a) for a in args]
    ref = _first_nt(tuple(seq), {})
    out = []
    for a in seq:
        if isinstance(a, NestedTensor):
            ref._check_same_structure(a, "broadcast_tensors") if a is not ref else None
            out.append(a)
        else:
            out.append(ref._derive(_operand(ref, a, "broadcast_tensors").expand(ref.values.shape)))
    return tuple(out)


register([torch.broadcast_tensors], "per-token", _broadcast_tensors)
