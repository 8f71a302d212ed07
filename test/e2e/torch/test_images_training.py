"""Training on images of their own sizes: the gradients of ``ragged.conv2d``
and ``ragged.pool2d`` (gathers of each output pixel's window over the packed
pixels, then GEMMs and scatter-adds over real pixels only), compiled forward
and backward by the ragged backend (``fullgraph=True``, fallback off), equal
fp64 autograd on every image alone; a small CNN written as users write one
takes AdamW steps that match the same steps taken image by image."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torch_mlir")

import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

from ragged_mlir.torch import NestedTensor  # noqa: E402
from ragged_mlir.torch import backend as rb  # noqa: E402

#: Image sizes (H, W): random with images too small for some windows (their
#: output is empty), and all of one size (DanLing's regular layout). One
#: image alone is a step of the CNN test below.
SIZES = {
    "random": [(9, 13), (1, 1), (16, 7), (2, 1), (5, 11)],
    "all-equal": [(8, 8)] * 3,
}


def _conv(x, w, b):
    return F.conv2d(x, w, b, padding=1)


#: Window ops under test; pooling follows a convolution, as in a CNN (and so
#: that its channel count is static under dynamic shapes).
CASES = {
    "conv_dilated": lambda x, w, b: F.conv2d(x, w, b, stride=(1, 2), padding=(2, 0), dilation=(2, 1)),
    "conv_grouped": lambda x, w, b: F.conv2d(x, w[:, :1].contiguous(), padding=1, groups=3),
    "max_pool_ceil": lambda x, w, b: F.max_pool2d(_conv(x, w, b), 2, 2, ceil_mode=True),
    "max_pool_s2_p1": lambda x, w, b: F.max_pool2d(_conv(x, w, b), 3, 2, 1),
    "avg_pool_excl": lambda x, w, b: F.avg_pool2d(_conv(x, w, b), 3, 2, 1, count_include_pad=False),
    "avg_pool_ceil": lambda x, w, b: F.avg_pool2d(_conv(x, w, b), (3, 2), 2, 1, ceil_mode=True),
}


class Window(nn.Module):
    def __init__(self, fn):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.fn = fn
        self.weight = nn.Parameter(torch.randn(6, 3, 3, 3, generator=g, dtype=torch.float64))
        self.bias = nn.Parameter(torch.randn(6, generator=g, dtype=torch.float64))

    def forward(self, x):
        return self.fn(x, self.weight, self.bias)


def images(sizes, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(3, h, w, generator=g, dtype=torch.float64, requires_grad=True) for h, w in sizes]


def per_image_loss(model, image):
    """``model`` on one image; an image too small for a window gives no output."""
    try:
        return model(image[None]).square().sum()
    except RuntimeError:
        return 0 * image.sum()


@pytest.mark.parametrize("case", list(CASES))
def test_window_gradients_match_each_image(case):
    torch._dynamo.reset()
    model = Window(CASES[case])
    compiled = torch.compile(
        lambda x: model(x).values.square().sum(), backend="ragged", dynamic=True, fullgraph=True
    )
    before = rb.stats["fallbacks"]
    params = list(model.parameters())
    for sizes in SIZES.values():
        imgs = images(sizes)
        got = torch.autograd.grad(compiled(NestedTensor(imgs)), imgs + params, allow_unused=True)
        ref = sum((per_image_loss(model, i) for i in imgs), 0 * sum(p.sum() for p in params))
        want = torch.autograd.grad(ref, imgs + params, allow_unused=True)
        for g, w in zip(got, want, strict=True):
            torch.testing.assert_close(torch.zeros_like(w) if g is None else g, w, rtol=1e-9, atol=1e-9)
    assert rb.stats["fallbacks"] == before


class SmallCNN(nn.Module):
    """Conv-BN-free CNN as users write one: two convolutions, max pooling,
    global average pooling, a linear head."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2, ceil_mode=True),
            nn.Conv2d(8, 12, 3, stride=2, padding=1),
            nn.GELU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(12, 4)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def test_cnn_adamw_steps_match_per_image_training():
    torch._dynamo.reset()
    torch.manual_seed(0)
    ours = SmallCNN().double()
    ref = SmallCNN().double()
    ref.load_state_dict(ours.state_dict())
    compiled = torch.compile(ours, backend="ragged", dynamic=True, fullgraph=True)
    opt = torch.optim.AdamW(ours.parameters(), lr=1e-2)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    before = rb.stats["fallbacks"]
    g = torch.Generator().manual_seed(5)
    for step, sizes in enumerate([[(9, 13), (4, 4), (16, 7)], [(12, 10)], [(6, 6)] * 3]):
        imgs = [torch.randn(3, h, w, generator=g, dtype=torch.float64) for h, w in sizes]
        labels = torch.randint(0, 4, (len(imgs),), generator=g)
        opt.zero_grad()
        loss = F.cross_entropy(compiled(NestedTensor(imgs)), labels)
        loss.backward()
        opt.step()
        ref_opt.zero_grad()
        want = F.cross_entropy(torch.cat([ref(i[None]) for i in imgs]), labels)
        want.backward()
        ref_opt.step()
        torch.testing.assert_close(loss, want, rtol=1e-10, atol=1e-10, msg=f"loss at step {step}")
        for (name, p), q in zip(ours.named_parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p, q, rtol=1e-9, atol=1e-9, msg=f"{name} after step {step}")
    assert rb.stats["fallbacks"] == before


class SameConvs(nn.Module):
    """Convolutions that keep each image's extents (3x3 padding 1, a dilated
    5x3 with matching padding), whose input gradients are convolutions."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 6, (5, 3), padding=(4, 1), dilation=(2, 1), bias=False)

    def forward(self, x):
        return self.c2(F.relu(self.c1(x)))


def test_f32_input_gradients_run_on_the_kernel(tmp_path):
    """f32 on CPU: the forward convolutions and the input gradients of both
    run on the kernel library (a convolution with the weight flipped), equal
    fp64 autograd on every image alone to f32 accuracy."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = SameConvs()
    ref = SameConvs().double()
    ref.load_state_dict(model.state_dict())
    compiled = torch.compile(
        lambda x: model(x).values.square().sum(),
        backend="ragged",
        dynamic=True,
        fullgraph=True,
        options={"debug_dir": str(tmp_path)},
    )
    before = rb.stats["fallbacks"]
    for sizes in (SIZES["random"] + [(0, 4), (23, 17)], SIZES["all-equal"]):
        imgs = [i.detach().float().requires_grad_() for i in images(sizes)]
        got = torch.autograd.grad(compiled(NestedTensor(imgs)), imgs + list(model.parameters()))
        ref.zero_grad()
        ref_imgs = [i.detach().double().requires_grad_() for i in imgs]
        loss = sum(
            (ref(i[None]).square().sum() for i in ref_imgs if i.numel()), torch.zeros((), dtype=torch.float64)
        )
        want = torch.autograd.grad(loss, ref_imgs + list(ref.parameters()), allow_unused=True)
        for g, w in zip(got, want, strict=True):
            w = torch.zeros_like(g, dtype=torch.float64) if w is None else w
            scale = max(w.abs().max().item(), 1.0) if w.numel() else 1.0
            torch.testing.assert_close(g.double(), w, rtol=1e-4, atol=1e-5 * scale)
    assert rb.stats["fallbacks"] == before
    # Each backward graph (its inputs include the tangents) computes both
    # input gradients on the kernel.
    backward = [d for d in tmp_path.iterdir() if "tangents" in (d / "fx_graph.txt").read_text()]
    assert backward
    for d in backward:
        assert (d / "lowered.mlir").read_text().count("@ragged_kernels::@conv2d") == 2, d.name


class BatchNormCNN(nn.Module):
    """A CNN trained with BatchNorm as users write one: conv, BatchNorm in
    training mode, max pooling, then a convolution that keeps the pooled
    extents (its input gradient is a convolution whose rows are the
    pool's), global average pooling, a linear head."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.pool = nn.MaxPool2d(2)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        x = self.pool(F.relu(self.bn(self.conv1(x))))
        return self.head(F.adaptive_avg_pool2d(F.relu(self.conv2(x)), 1).flatten(1))


def batch_norm_reference(model, imgs):
    """fp64 logits of ``BatchNormCNN`` image by image, but with the
    statistics of the batch: every image's real pixels, as
    ``nn.BatchNorm2d`` in training mode takes them over a batch of one size;
    and the running statistics that step leaves (the unbiased variance)."""
    p = {k: v.detach().double().requires_grad_() for k, v in model.named_parameters()}
    feats = [F.conv2d(i[None], p["conv1.weight"], p["conv1.bias"], padding=1) for i in imgs]
    pixels = torch.cat([f.reshape(8, -1) for f in feats], dim=1)
    mean, var = pixels.mean(1), pixels.var(1, unbiased=False)
    logits = []
    for f in feats:
        f = (f - mean[:, None, None]) / torch.sqrt(var[:, None, None] + model.bn.eps)
        f = F.max_pool2d(F.relu(f * p["bn.weight"][:, None, None] + p["bn.bias"][:, None, None]), 2)
        f = F.relu(F.conv2d(f, p["conv2.weight"], p["conv2.bias"], padding=1))
        logits.append(F.linear(f.mean((2, 3)), p["head.weight"], p["head.bias"]))
    m = model.bn.momentum
    running = (
        (1 - m) * model.bn.running_mean.double() + m * mean.detach(),
        (1 - m) * model.bn.running_var.double() + m * pixels.detach().var(1, unbiased=True),
    )
    return torch.cat(logits), p, running


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
def test_batch_norm_training_is_one_graph(dtype):
    """BatchNorm in training mode compiles into the model's one graph (its
    statistics over the real pixels, its check of more than one value per
    channel at run time), without ``fullgraph=True``: the loss, every
    parameter's gradient and the running statistics equal fp64 on each
    image with the batch's statistics. Both once broke: BatchNorm's own
    size check broke the graph after every strided convolution or pool, and
    the input gradient of the convolution after a pool had rows of a size
    of its own, which refused the backward."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = BatchNormCNN().to(dtype).train()
    compiled = torch.compile(model, backend="ragged", options={"fallback": False})
    g = torch.Generator().manual_seed(7)
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    tol = {"rtol": 1e-9, "atol": 1e-9} if dtype == torch.float64 else {"rtol": 2e-4, "atol": 2e-5}
    for sizes in ([(9, 13), (4, 4), (16, 7)], [(6, 6)] * 3):
        imgs = [torch.randn(3, h, w, generator=g, dtype=torch.float64) for h, w in sizes]
        labels = torch.randint(0, 4, (len(imgs),), generator=g)
        logits, ref_params, (mean, var) = batch_norm_reference(model, imgs)
        F.cross_entropy(logits, labels).backward()
        model.zero_grad()
        loss = F.cross_entropy(compiled(NestedTensor([i.to(dtype) for i in imgs])), labels)
        loss.backward()
        torch.testing.assert_close(model.bn.running_mean.double(), mean, **tol)
        torch.testing.assert_close(model.bn.running_var.double(), var, **tol)
        for name, param in model.named_parameters():
            torch.testing.assert_close(param.grad.double(), ref_params[name].grad, **tol, msg=name)
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == breaks
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        model(NestedTensor([torch.randn(3, 1, 1, dtype=dtype)]))


class PoolThenGroupNorm(nn.Module):
    """conv -> strided max pool -> GroupNorm -> ReLU -> conv -> mean pool:
    the GroupNorm's input has a row count only the device knows."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.norm = nn.GroupNorm(2, 8)
        self.conv2 = nn.Conv2d(8, 4, 3, padding=1)

    def forward(self, x):
        x = self.conv2(torch.relu(self.norm(self.pool(self.conv1(x)))))
        return F.adaptive_avg_pool2d(x, 1).flatten(1)


def test_group_norm_after_a_strided_pool_trains():
    """A view of the pool's output, saved for the backward, is rebuilt on
    the host with its rows read off the result: the backward was refused
    ("its value u0 depends on u0, which no input size determines"). The
    loss gradients equal fp64 on each image, with no graph break."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = PoolThenGroupNorm()
    ref = PoolThenGroupNorm().double()
    ref.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="ragged", options={"fallback": False})
    breaks = sum(torch._dynamo.utils.counters["graph_break"].values())
    g = torch.Generator().manual_seed(3)
    for sizes in ([(9, 12), (16, 8), (7, 7)], [(2, 3), (10, 10)]):
        imgs = [torch.randn(3, h, w, generator=g, dtype=torch.float64) for h, w in sizes]
        model.zero_grad()
        ref.zero_grad()
        compiled(NestedTensor([i.float() for i in imgs])).square().sum().backward()
        sum(ref(i[None]).square().sum() for i in imgs).backward()
        for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p.grad.double(), q.grad, rtol=2e-4, atol=2e-5, msg=name)
    assert sum(torch._dynamo.utils.counters["graph_break"].values()) == breaks
