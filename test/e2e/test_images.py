"""ragged.conv2d and ragged.pool2d on batches of images of their own sizes.

Every case runs the compiled op on IREE and compares each image with
PyTorch's ``F.conv2d`` / ``F.max_pool2d`` / ``F.avg_pool2d`` in float64 on
that image alone. The output extents (the result's partitions) are checked
against the ops' documented rule, which must also agree with the shape
PyTorch gives; images PyTorch refuses (empty, or smaller than the window)
must come out empty. Batches: random sizes, an empty image (0 x W and
H x 0) among others, a single image, one large image among small ones, all
of one size, and images smaller than the kernel.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pytest

from ragged_mlir import RaggedArray

torch = pytest.importorskip("torch")
F = torch.nn.functional

F32 = np.float32
IMG = "!ragged.tensor<?, [H], [W], {c}, f32>"
OUT = "!ragged.tensor<?, [{h}], [{w}], {c}, f32>"

SIZES = {
    "random": [(5, 7), (3, 2), (8, 8), (1, 4), (6, 1)],
    "empty": [(4, 5), (0, 3), (2, 0), (3, 3)],
    "single": [(7, 6)],
    "one_large": [(2, 3), (37, 29), (1, 1)],
    "all_equal": [(5, 5)] * 4,
    "tiny": [(1, 1), (2, 1), (1, 2), (6, 5)],
}


@dataclass(frozen=True)
class Window:
    kernel: tuple[int, int]
    stride: tuple[int, int] = (1, 1)
    padding: tuple[int, int] = (0, 0)
    dilation: tuple[int, int] = (1, 1)
    ceil: bool = False

    def keeps(self, i: int) -> bool:
        return self.stride[i] == 1 and 2 * self.padding[i] == self.dilation[i] * (self.kernel[i] - 1)

    def extent(self, x: int, i: int) -> int:
        """The documented rule: PyTorch's output size, 0 for an empty image."""
        if x == 0:
            return 0
        k, s, p, d = self.kernel[i], self.stride[i], self.padding[i], self.dilation[i]
        span = x + 2 * p - d * (k - 1) - 1
        out = (math.ceil(span / s) if self.ceil else span // s) + 1
        if self.ceil and (out - 1) * s >= x + p:
            out -= 1
        return max(out, 0)

    def attrs(self) -> str:
        a = [f"strides = array<i64: {self.stride[0]}, {self.stride[1]}>"]
        a.append(f"padding = array<i64: {self.padding[0]}, {self.padding[1]}>")
        a.append(f"dilation = array<i64: {self.dilation[0]}, {self.dilation[1]}>")
        if self.ceil:
            a.append("ceil_mode")
        return ", ".join(a)

    def out_type(self, c: int) -> str:
        return OUT.format(h="H" if self.keeps(0) else "Ho", w="W" if self.keeps(1) else "Wo", c=c)


@dataclass(frozen=True)
class Conv:
    name: str
    window: Window
    cin: int
    cout: int
    groups: int = 1
    bias: bool = False

    def func(self) -> str:
        w = self.window
        wt = f"tensor<{w.kernel[0]}x{w.kernel[1]}x{self.cin // self.groups}x{self.cout}xf32>"
        src, out = IMG.format(c=self.cin), w.out_type(self.cout)
        args = f"%x: {src}, %w: {wt}" + (f", %b: tensor<{self.cout}xf32>" if self.bias else "")
        operands = "%x, %w" + (", %b" if self.bias else "")
        types = f"{src}, {wt}" + (f", tensor<{self.cout}xf32>" if self.bias else "")
        return f"""
func.func @{self.name}({args}) -> {out} {{
  %y = ragged.conv2d {operands} {{{w.attrs()}, groups = {self.groups} : i64}} : {types} -> {out}
  return %y : {out}
}}"""


@dataclass(frozen=True)
class Pool:
    name: str
    kind: str
    window: Window
    c: int = 4
    count_include_pad: bool = False

    def func(self) -> str:
        w = self.window
        src, out = IMG.format(c=self.c), w.out_type(self.c)
        attrs = f"kernel = array<i64: {w.kernel[0]}, {w.kernel[1]}>, {w.attrs()}"
        if self.count_include_pad:
            attrs += ", count_include_pad"
        return f"""
func.func @{self.name}(%x: {src}) -> {out} {{
  %y = ragged.pool2d <{self.kind}> %x {{{attrs}}} : {src} -> {out}
  return %y : {out}
}}"""


CONVS = [
    Conv("conv3x3_same", Window((3, 3), padding=(1, 1)), 3, 8),
    Conv("conv3x3_s2_bias", Window((3, 3), (2, 2), (1, 1)), 4, 6, bias=True),
    Conv("conv1x1_s2", Window((1, 1), (2, 2)), 4, 8),
    Conv("conv7x7_s2_stem", Window((7, 7), (2, 2), (3, 3)), 3, 4, bias=True),
    Conv("conv_dilated_rect", Window((2, 3), (1, 2), (1, 0), (2, 1)), 2, 3),
    Conv("conv_grouped", Window((3, 3), padding=(1, 1)), 4, 6, groups=2, bias=True),
    Conv("conv_valid", Window((3, 2)), 3, 5),
]
POOLS = [
    Pool("max3x3_s2", "max", Window((3, 3), (2, 2), (1, 1))),
    Pool("max2x2_ceil", "max", Window((2, 2), (2, 2), ceil=True)),
    Pool("max_dilated", "max", Window((2, 2), (1, 1), (1, 0), (2, 2))),
    Pool("avg3x3_s2_incl", "mean", Window((3, 3), (2, 2), (1, 1)), count_include_pad=True),
    Pool("avg3x3_s2_excl", "mean", Window((3, 3), (2, 2), (1, 1))),
    Pool("avg3x2_ceil_incl", "mean", Window((3, 2), (2, 2), (1, 1), ceil=True), count_include_pad=True),
    Pool("avg3x3_same", "mean", Window((3, 3), padding=(1, 1))),
    Pool("min2x2", "min", Window((2, 2), (2, 2))),
    Pool("sum3x3", "sum", Window((3, 3), (2, 1), (1, 1))),
]


@pytest.fixture(scope="module")
def images(compiled):
    return compiled("\n".join(op.func() for op in CONVS + POOLS))


@pytest.fixture(params=list(SIZES), ids=list(SIZES))
def sizes(request):
    return SIZES[request.param]


def batch(rng, sizes, c):
    return [rng.uniform(-1, 1, (h, w, c)).astype(F32) for h, w in sizes]


def offsets_of(extents) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(extents, dtype=np.int64)]).astype(np.int64)


def torch_window(fn, img: np.ndarray, window: Window, out_hw) -> np.ndarray:
    """``fn`` on one [H, W, C] image in float64, as [Ho, Wo, C]; an image the
    rule sends to nothing must be one PyTorch refuses or shrinks to nothing."""
    if 0 in out_hw:
        if img.shape[0] and img.shape[1]:
            try:
                got = fn(torch.from_numpy(img.astype(np.float64)).permute(2, 0, 1)[None])
                assert 0 in got.shape[2:], f"PyTorch gives {tuple(got.shape)} where the rule gives {out_hw}"
            except RuntimeError:
                pass
        return np.zeros((*out_hw, 0))
    t = torch.from_numpy(img.astype(np.float64)).permute(2, 0, 1)[None]
    out = fn(t)[0].permute(1, 2, 0).numpy()
    assert out.shape[:2] == out_hw, f"PyTorch gives {out.shape[:2]} where the rule gives {out_hw}"
    return out


def check(result: RaggedArray, imgs, window: Window, reference, tol):
    hs = [window.extent(i.shape[0], 0) for i in imgs]
    ws = [window.extent(i.shape[1], 1) for i in imgs]
    heights, widths = result.partitions
    np.testing.assert_array_equal(heights, offsets_of(hs), err_msg="output heights")
    np.testing.assert_array_equal(widths, offsets_of(ws), err_msg="output widths")
    rows = offsets_of([h * w for h, w in zip(hs, ws, strict=True)])
    assert result.values.shape[0] == rows[-1]
    for b, img in enumerate(imgs):
        want = torch_window(reference, img, window, (hs[b], ws[b]))
        got = result.values[rows[b] : rows[b + 1]]
        if want.size == 0:
            assert got.shape[0] == 0, f"image {b}: expected no output pixels"
            continue
        np.testing.assert_allclose(got.reshape(want.shape), want, err_msg=f"image {b} {img.shape}", **tol)


@pytest.mark.parametrize("op", CONVS, ids=[c.name for c in CONVS])
def test_conv2d(images, rng, sizes, op: Conv):
    w = op.window
    imgs = batch(rng, sizes, op.cin)
    weight = rng.uniform(-1, 1, (*w.kernel, op.cin // op.groups, op.cout)).astype(F32)
    bias = rng.uniform(-1, 1, op.cout).astype(F32)
    x = RaggedArray.from_images(imgs)
    before = (x.values.copy(), [p.copy() for p in x.partitions], weight.copy())
    args = (x, weight, bias) if op.bias else (x, weight)
    out = getattr(images, op.name)(*args)
    np.testing.assert_array_equal(x.values, before[0])
    np.testing.assert_array_equal(weight, before[2])
    check(out, imgs, w, *conv_reference(op, weight, bias))


def conv_reference(op: Conv, weight: np.ndarray, bias: np.ndarray):
    """PyTorch's convolution of one image tensor ``[1, C, H, W]`` in fp64 as
    ``op`` convolves (HWIO ``weight``; ``bias`` where ``op`` has one), and
    the tolerance of an f32 result summing ``KH KW Cin / groups`` terms."""
    w = op.window
    w64 = torch.from_numpy(weight.astype(np.float64)).permute(3, 2, 0, 1)
    b64 = torch.from_numpy(bias.astype(np.float64)) if op.bias else None

    def ref(t):
        return F.conv2d(t, w64, b64, w.stride, w.padding, w.dilation, op.groups)

    k = w.kernel[0] * w.kernel[1] * op.cin // op.groups
    return ref, dict(rtol=1e-5, atol=2e-6 * k)


def pool_reference(op: Pool):
    """PyTorch's pooling of one image tensor ``[1, C, H, W]`` as ``op`` pools."""
    w = op.window

    def ref(t):
        if op.kind == "max":
            return F.max_pool2d(t, w.kernel, w.stride, w.padding, w.dilation, ceil_mode=w.ceil)
        if op.kind == "min":
            return -F.max_pool2d(-t, w.kernel, w.stride, w.padding, w.dilation, ceil_mode=w.ceil)
        if op.kind == "sum":
            return F.avg_pool2d(t, w.kernel, w.stride, w.padding, ceil_mode=w.ceil, divisor_override=1)
        return F.avg_pool2d(
            t, w.kernel, w.stride, w.padding, ceil_mode=w.ceil, count_include_pad=op.count_include_pad
        )

    return ref


@pytest.mark.parametrize("op", POOLS, ids=[p.name for p in POOLS])
def test_pool2d(images, rng, sizes, op: Pool):
    imgs = batch(rng, sizes, op.c)
    out = getattr(images, op.name)(RaggedArray.from_images(imgs))
    check(out, imgs, op.window, pool_reference(op), dict(rtol=1e-5, atol=1e-5))


# --------------------------------------------------------------------------
# A small CNN written with the builders: stem, max pool, a ResNet basic
# block with a strided 1x1 downsample, global average pooling (flatten +
# mean) and a linear head, against the same network per image in PyTorch.
# --------------------------------------------------------------------------


def cnn_params(rng, c=3, width=8, classes=5):
    def u(*shape, scale=0.5):
        return rng.uniform(-scale, scale, shape).astype(F32)

    return {
        "stem": u(3, 3, c, width),
        "stem_b": u(width),
        "bn_scale": u(width, scale=1.0) + 1.5,
        "bn_shift": u(width),
        "c1": u(3, 3, width, 2 * width, scale=0.2),
        "c2": u(3, 3, 2 * width, 2 * width, scale=0.2),
        "down": u(1, 1, width, 2 * width),
        "head": u(2 * width, classes),
    }


def cnn_program(c=3, width=8, classes=5):
    from ragged_mlir.builders import Program, ragged, tensor

    prog = Program()

    @prog.func(
        x=ragged(None, "H", "W", c),
        stem=tensor(3, 3, c, width),
        stem_b=tensor(width),
        bn_scale=tensor(width),
        bn_shift=tensor(width),
        c1=tensor(3, 3, width, 2 * width),
        c2=tensor(3, 3, 2 * width, 2 * width),
        down=tensor(1, 1, width, 2 * width),
        head=tensor(2 * width, classes),
    )
    def cnn(x, stem, stem_b, bn_scale, bn_shift, c1, c2, down, head):
        y = (x.conv2d(stem, stem_b, padding=1) * bn_scale + bn_shift).relu()
        y = y.max_pool2d(3, stride=2, padding=1)
        z = y.conv2d(c1, stride=2, padding=1).relu().conv2d(c2, padding=1)
        y = (z + y.conv2d(down, stride=2)).relu()
        # The head per pixel, then the mean: the linear head of the pooled
        # features (dense @ dense has no builder).
        return y, (y.flatten() @ head).reduce("mean")

    return prog


def cnn_reference(img: np.ndarray, p: dict):
    """One [H, W, C] image through the network in float64: (feature map, logits)."""
    t = lambda a: torch.from_numpy(a.astype(np.float64))  # noqa: E731
    hwio = lambda a: t(a).permute(3, 2, 0, 1)  # noqa: E731
    x = t(img).permute(2, 0, 1)[None]
    y = F.conv2d(x, hwio(p["stem"]), t(p["stem_b"]), padding=1)
    y = F.relu(y * t(p["bn_scale"])[:, None, None] + t(p["bn_shift"])[:, None, None])
    y = F.max_pool2d(y, 3, 2, 1)
    z = F.conv2d(F.relu(F.conv2d(y, hwio(p["c1"]), stride=2, padding=1)), hwio(p["c2"]), padding=1)
    y = F.relu(z + F.conv2d(y, hwio(p["down"]), stride=2))
    logits = y.mean(dim=(2, 3))[0] @ t(p["head"])
    return y[0].permute(1, 2, 0).numpy(), logits.numpy()


@pytest.fixture(scope="module")
def cnn(compiled):
    return compiled(cnn_program().module_text())


CNN_SIZES = {
    "random": [(9, 13), (4, 4), (16, 7), (1, 1), (5, 11)],
    "single": [(12, 10)],
    "one_large": [(3, 5), (64, 48), (2, 2)],
    "all_equal": [(8, 8)] * 3,
    "empty": [(6, 5), (0, 4), (3, 0), (2, 3)],
}


@pytest.mark.parametrize("name", list(CNN_SIZES))
def test_cnn_matches_per_image(cnn, rng, name):
    sizes = CNN_SIZES[name]
    imgs = batch(rng, sizes, 3)
    params = cnn_params(rng)
    feats, logits = cnn.cnn(RaggedArray.from_images(imgs), *params.values())
    assert logits.shape == (len(imgs), 5)
    starts = offsets_of([h * w for h, w in zip(feats.lengths(0), feats.lengths(1), strict=True)])
    for b, img in enumerate(imgs):
        if 0 in img.shape[:2]:
            # An empty image has no pixels; its mean is ragged.reduce's
            # empty value, 0.
            assert starts[b + 1] == starts[b]
            np.testing.assert_array_equal(logits[b], 0.0)
            continue
        want_feat, want_logits = cnn_reference(img, params)
        got = feats.values[starts[b] : starts[b + 1]].reshape(want_feat.shape)
        np.testing.assert_allclose(got, want_feat, rtol=1e-4, atol=1e-4, err_msg=f"image {b} {img.shape}")
        np.testing.assert_allclose(logits[b], want_logits, rtol=1e-4, atol=1e-4, err_msg=f"image {b}")


def test_cnn_types_follow_the_extent_rule():
    """The builders name a derived extent after its rule: the strided 3x3
    conv and the 1x1 downsample agree, so the residual add verifies."""
    text = cnn_program().module_text()
    assert "!ragged.tensor<?, [H_s2_s2], [W_s2_s2], 16, f32>" in text
    assert "ragged.flatten" in text


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda x, img, w: x.conv2d(w), r"conv2d: needs images \[B, H\(b\), W\(b\), C\]"),
        (lambda x, img, w: img.max_pool2d((2, 2, 2)), r"kernel: expected an int or two ints \(H, W\)"),
        (lambda x, img, w: img.avg_pool2d(2, stride="2"), r"stride: expected an int or two ints"),
        (lambda x, img, w: x.flatten(), r"flatten: needs two or more leading ragged dims"),
        (lambda x, img, w: img.conv2d(x), r"weight: expected a TensorValue"),
    ],
)
def test_builder_errors(build, message):
    from ragged_mlir.builders import Program, ragged, tensor

    prog = Program()
    with pytest.raises((ValueError, TypeError), match=message):

        @prog.func(x=ragged(None, "L", 4), img=ragged(None, "H", "W", 4), w=tensor(3, 3, 4, 8))
        def f(x, img, w):
            return build(x, img, w)


def test_builder_error_dynamic_weight():
    from ragged_mlir.builders import Program, ragged, tensor

    prog = Program()
    with pytest.raises(ValueError, match=r"weight: expected a static \[KH, KW, Cin / groups, Cout\] tensor"):

        @prog.func(img=ragged(None, "H", "W", 4), w=tensor(None, 3, 4, 8))
        def f(img, w):
            return img.conv2d(w)


def test_window_offsets_follow_the_window_rule():
    """The torch op's vectorised extents are ragged_mlir.windows.window_extent
    per image, over every kernel, stride, padding, dilation and ceil mode
    (and 0 for an empty image)."""
    torch = pytest.importorskip("torch")
    from ragged_mlir.torch.ops import window_offsets
    from ragged_mlir.windows import keeps_extent, window_extent

    extents = [0, 1, 2, 3, 5, 7, 8, 13]
    offsets = torch.tensor([0, *np.cumsum(extents).tolist()], dtype=torch.int64)
    for k, s, p, d, ceil in itertools.product(
        (1, 2, 3, 5, 7), (1, 2, 3), (0, 1, 2, 3), (1, 2), (False, True)
    ):
        if 2 * p > d * (k - 1) + 1 or (ceil and 2 * p > k):
            continue  # PyTorch refuses padding over half the window
        got = window_offsets(offsets, k, s, p, d, ceil)
        want = np.cumsum([0] + [window_extent(x, k, s, p, d, ceil) for x in extents])
        assert got.tolist() == want.tolist(), (k, s, p, d, ceil)
        if keeps_extent(k, s, p, d):
            assert want.tolist() == offsets.tolist()
