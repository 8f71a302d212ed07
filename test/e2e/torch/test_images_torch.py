"""Images of their own sizes through PyTorch: a NestedTensor of
``[C, H(b), W(b)]`` items (DanLing's layout) through ``nn.Conv2d``,
``nn.BatchNorm2d`` (eval), ``nn.GroupNorm``, ``F.instance_norm``, ``nn.MaxPool2d``, ``nn.AvgPool2d``,
``nn.AdaptiveAvgPool2d(1)`` and ``flatten``/``transpose`` to token sequences,
eagerly and under ``torch.compile(backend="ragged")`` with fallback off
(conftest). Models are written as users write them: a small CNN, a
torchvision-style ResNet basic block with a strided downsample, and a
NaViT-style patch-and-pack ViT. Each equals the same model run on every
image alone (float64 for the functional cases); nothing falls back, and new
image sizes compile nothing new.
"""

from __future__ import annotations

import functools

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402
from torch_helpers import ragged_compile  # noqa: E402

from ragged_mlir.torch import NestedTensor  # noqa: E402
from ragged_mlir.torch import backend as rb  # noqa: E402

torch.set_num_threads(2)

SIZES = {
    "random": [(9, 13), (4, 4), (16, 7), (5, 11)],
    "single": [(12, 10)],
    "one-large": [(3, 5), (48, 40), (2, 2)],
    "all-equal": [(8, 8)] * 3,
    "tiny": [(1, 1), (2, 1), (6, 5)],
    # At least one 4 x 4 patch per image, one image of 90 patches.
    "patches": [(4, 6), (40, 36), (8, 4)],
    # Images that differ in one side only: the constructor makes that side
    # alone ragged (layouts (2,) and (1,)), which the image ops convert.
    "same-height": [(8, 5), (8, 13), (8, 0), (8, 1)],
    "same-width": [(5, 7), (13, 7), (0, 7), (1, 7)],
}


def images(sizes, channels=3, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(channels, h, w, generator=g, dtype=torch.float64).to(dtype) for h, w in sizes]


#: Dynamo is reset by ``fresh_dynamo_no_grad`` before each test.
compiled = functools.partial(ragged_compile, fresh=False)

pytestmark = pytest.mark.usefixtures("fresh_dynamo_no_grad")


# --------------------------------------------------------------------------
# Functional calls, eager: the packed custom ops against each image alone
# --------------------------------------------------------------------------

FUNCTIONAL = {
    "conv_s2_p1_bias": lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
    "conv_same": lambda x, w, b: F.conv2d(x, w, padding="same"),
    "conv_dilated": lambda x, w, b: F.conv2d(x, w, b, stride=(1, 2), padding=(2, 0), dilation=(2, 1)),
    "conv_grouped": lambda x, w, b: F.conv2d(x, w[:, :1].contiguous(), padding=1, groups=3),
    "group_norm": lambda x, w, b: F.group_norm(x, 3, b[:3], b[3:]),
    "instance_norm": lambda x, w, b: F.instance_norm(x, weight=b[:3], bias=b[3:]),
    "max_pool_ceil": lambda x, w, b: F.max_pool2d(x, 2, 2, ceil_mode=True),
    "max_pool_s2_p1": lambda x, w, b: F.max_pool2d(x, 3, 2, 1),
    "avg_pool_excl": lambda x, w, b: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
    "avg_pool_ceil": lambda x, w, b: F.avg_pool2d(x, (3, 2), 2, 1, ceil_mode=True),
}


@pytest.mark.parametrize("case", list(FUNCTIONAL))
@pytest.mark.parametrize("sizes", list(SIZES))
def test_functional_matches_each_image(case, sizes):
    fn = FUNCTIONAL[case]
    imgs = images(SIZES[sizes], dtype=torch.float64)
    g = torch.Generator().manual_seed(1)
    w = torch.randn(6, 3, 3, 3, generator=g, dtype=torch.float64)
    b = torch.randn(6, generator=g, dtype=torch.float64)
    x = NestedTensor(*imgs)
    before = x.values.clone()
    out = fn(x, w, b)
    assert isinstance(out, NestedTensor)
    torch.testing.assert_close(x.values, before)
    for i, img in enumerate(imgs):
        try:
            want = fn(img[None], w, b)[0]
        except RuntimeError:  # an image smaller than the window: nothing comes out
            want = None
        except ValueError:  # one value per normalised group: PyTorch refuses, the variance is 0 here
            continue
        got = out[i]
        if want is None or 0 in want.shape:
            assert got.numel() == 0, f"image {i}"
            continue
        torch.testing.assert_close(got, want, msg=f"image {i} {tuple(img.shape)}")


class Functional(nn.Module):
    """Functional calls on a module's parameters (static shapes under
    dynamic=True; a weight passed as a graph input would make the channel
    count symbolic, which the backend refuses with a message)."""

    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(2)
        self.w = nn.Parameter(torch.randn(6, 3, 3, 3, generator=g))
        self.b = nn.Parameter(torch.randn(6, generator=g))
        self.norm = nn.GroupNorm(2, 6)

    def forward(self, x):
        y = self.norm(F.conv2d(x, self.w, self.b, stride=2, padding=1))
        y = F.avg_pool2d(F.relu(y), 2, ceil_mode=True)
        return F.max_pool2d(y, 3, 1, 1).flatten(2).transpose(1, 2).mean(dim=1)


def test_compiled_functional_matches_eager():
    fn = Functional()
    c = compiled(fn)
    for sizes in ("random", "one-large", "tiny"):
        imgs = images(SIZES[sizes])
        want = torch.cat([fn(img[None]) for img in imgs])
        torch.testing.assert_close(c(NestedTensor(*imgs)), want, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------------------
# Models as users write them
# --------------------------------------------------------------------------


class SmallCNN(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.avg = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.conv(x))))
        x = F.relu(self.conv2(x))
        return self.fc(torch.flatten(self.avg(x), 1))


class BasicBlock(nn.Module):
    """torchvision's ResNet basic block, with a strided 1x1 downsample."""

    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
            )

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class TinyResNet(nn.Module):
    def __init__(self, classes=4):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        self.layer1 = BasicBlock(8, 8)
        self.layer2 = BasicBlock(8, 16, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        return self.fc(x)


class PatchViT(nn.Module):
    """NaViT-style patch and pack: each image keeps its own number of
    patches; a transformer runs over each image's own tokens."""

    def __init__(self, patch=4, dim=32, heads=4, classes=3):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        self.encoder = nn.TransformerEncoderLayer(dim, heads, 64, dropout=0.0, batch_first=True)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        tokens = self.patch_embed(x).flatten(2).transpose(1, 2)  # [B, N(b), dim]
        tokens = self.encoder(tokens)
        return self.head(self.norm(tokens).mean(dim=1))


def _randomize_bn(model, seed=3):
    g = torch.Generator().manual_seed(seed)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(m.num_features, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return model.eval()


MODELS = {"cnn": SmallCNN, "resnet": TinyResNet, "vit": PatchViT}
MODEL_SIZES = {
    "cnn": ["random", "single", "one-large", "all-equal", "tiny", "lines", "columns"],
    "resnet": ["random", "one-large", "all-equal", "tiny", "lines", "columns"],
    # A patch grid of at least 1 x 1 per image.
    "vit": ["random", "patches", "all-equal", "patch-lines"],
}
#: Sizes of whole models only (no empty image, whose output torch refuses).
SIZES.update(
    lines=[(8, 5), (8, 13), (8, 1)], columns=[(5, 7), (13, 7), (1, 7)], **{"patch-lines": [(8, 4), (8, 20)]}
)


@pytest.mark.parametrize("name", list(MODELS))
def test_model_compiles_and_matches_each_image(name):
    torch.manual_seed(0)
    model = _randomize_bn(MODELS[name]())
    c = compiled(model)
    fallbacks = rb.stats["fallbacks"]
    layouts = set()
    compiled_after_first = 0
    for sizes in MODEL_SIZES[name]:
        imgs = images(SIZES[sizes], seed=len(sizes))
        want = torch.cat([model(img[None]) for img in imgs])
        x = NestedTensor(*imgs)
        eager = model(x)
        torch.testing.assert_close(eager, want, rtol=1e-4, atol=1e-5, msg=f"eager, {sizes}")
        got = c(x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=f"compiled, {sizes}")
        # Images of one size get DanLing's default layout (the channel dim
        # ragged), a graph of its own, and Dynamo specialises a batch of one;
        # otherwise new sizes compile nothing new.
        key = (x.ragged_dims, len(imgs) == 1)
        if key not in layouts:
            layouts.add(key)
            compiled_after_first = rb.stats["compiled"]
        assert rb.stats["compiled"] == compiled_after_first, f"{sizes} compiled again"
    assert rb.stats["fallbacks"] == fallbacks


def test_empty_image_pools_to_zero():
    model = _randomize_bn(SmallCNN())
    imgs = images([(6, 5), (3, 4)]) + [torch.zeros(3, 0, 7)]
    got = compiled(model)(NestedTensor(*imgs))
    want = torch.cat([model(img[None]) for img in imgs[:2]])
    torch.testing.assert_close(got[:2], want, rtol=1e-4, atol=1e-5)
    # No pixels: the average pool is 0, so the logits are the head's bias.
    torch.testing.assert_close(got[2], model.fc.bias)


def test_conv_channel_mismatch_names_the_cause():
    x = NestedTensor(*images([(4, 4), (3, 5)], channels=2))
    with pytest.raises(
        ValueError, match=r"conv2d: weight \(8, 3, 3, 3\) with groups=1 expects 3 input channels"
    ):
        nn.Conv2d(3, 8, 3)(x)


# --------------------------------------------------------------------------
# The front door: one graph without fullgraph, clear errors for bad batches
# --------------------------------------------------------------------------


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic", "default"])
@pytest.mark.parametrize("name", list(MODELS))
def test_model_is_one_graph_without_fullgraph(name, dynamic):
    """``torch.compile(model, backend="ragged")`` as users call it, with no
    Dynamo setting changed: a convolution's or a pool's output rows are a
    size only the device knows, and Dynamo would break the graph there
    (outside ``fullgraph=True``) unless the op's fake kernel says otherwise."""
    torch.manual_seed(0)
    model = _randomize_bn(MODELS[name]())
    c = torch.compile(model, backend="ragged", dynamic=dynamic)
    fallbacks = rb.stats["fallbacks"]
    counters = torch._dynamo.utils.counters
    counters.clear()
    for sizes in ("random", "patches" if name == "vit" else "one-large"):
        imgs = images(SIZES[sizes], seed=3)
        want = torch.cat([model(img[None]) for img in imgs])
        torch.testing.assert_close(c(NestedTensor(*imgs)), want, rtol=1e-4, atol=1e-5, msg=sizes)
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert rb.stats["fallbacks"] == fallbacks


def test_images_of_one_side_through_batch_norm():
    """BatchNorm in eval scales the channel dim of every layout (values
    ``[sum H, C, W]`` when only the heights differ), not the last one: with
    3 channels and a side of 3 a wrong dim would go unnoticed by shape."""
    bn = _randomize_bn(nn.Sequential(nn.BatchNorm2d(3)))
    for sizes, layout in (([(5, 3), (13, 3), (1, 3)], (1,)), ([(3, 5), (3, 13), (3, 1)], (2,))):
        imgs = images(sizes)
        x = NestedTensor(*imgs)
        assert x.ragged_dims == layout
        out = bn(x)
        for i, img in enumerate(imgs):
            torch.testing.assert_close(out[i], bn(img[None])[0], msg=f"{layout} image {i}")


CHANNEL_ERRORS = {
    # Images of one size: the channel dim is the ragged one.
    "one-size": ([(2, 8, 8), (4, 8, 8)], r"conv2d: expected images of 3 channels, got \[2, 4\]"),
    "one-size-3-and-4": ([(3, 8, 8), (4, 8, 8)], r"conv2d: expected images of 3 channels, got \[3, 4\]"),
    # Images of their own sizes: channels ragged beside a side.
    "own-sizes": (
        [(3, 8, 8), (4, 8, 9)],
        r"conv2d: the images of a batch need one channel count .*got \[3, 4\]",
    ),
}


@pytest.mark.parametrize("case", list(CHANNEL_ERRORS))
def test_channel_counts_that_differ_name_the_cause(case):
    shapes, message = CHANNEL_ERRORS[case]
    x = NestedTensor(*[torch.randn(*s) for s in shapes])
    with pytest.raises(ValueError, match=message):
        nn.Conv2d(3, 8, 3)(x)


@pytest.mark.parametrize("case", list(CHANNEL_ERRORS))
def test_channel_counts_that_differ_name_the_cause_compiled(case):
    """Under ``torch.compile`` the counts are device values: a ``ValueError``
    where the trace can tell (a ragged channel dim beside a side; a channel
    sum that is not B C), else a check on the device fails the call. Never
    a silent answer for 2 + 4 channels read as two images of 3."""
    shapes, _ = CHANNEL_ERRORS[case]
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    c = torch.compile(model, backend="ragged", dynamic=True)
    x = NestedTensor(*[torch.randn(*s) for s in shapes])
    error = RuntimeError if case == "one-size" else ValueError
    with pytest.raises(error, match="conv2d: .*channel"):
        c(x)
