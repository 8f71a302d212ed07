"""The CPU convolution and pooling (``kernels/conv.c``, ``kernels/pool.c``),
reached from ``ragged.conv2d`` (f32, groups 1) and ``ragged.pool2d`` (f32)
by ``ragged-cpu-kernels``, the CPU default with the attention
kernels (``CompileOptions.cpu_kernels``).

Against PyTorch's ``F.conv2d`` in float64 on every image alone: random
sizes, empty images (0 x W and H x 0), one image, one large image among
small ones (a workgroup's 64 pixels then span several images and rows),
all of one size, images smaller than the window; the kernel's shapes: a
7x7/2 stem on 3 channels, 3x3 with 130 input channels (two chunks of 128),
output channels that fill four vectors and leave a tail (70), fewer than a
vector (1, 17), 1x1/2, dilation and asymmetric padding, with and without a
bias. Pooling: test_images' cases (max, mean with and without the padding
counted, ceil mode, dilation, min, sum) on 4 channels and on 20 (a vector
and a tail), and a max over NaN and infinities. The AVX2 object runs where
the host has AVX2 and FMA. Every module is checked to lower its groups-1
convolutions and its pools, and only those, to the kernels; IREE's codegen
stays behind ``cpu_kernels=False``.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_images import POOLS, SIZES, Conv, Pool, Window, batch, check, conv_reference, pool_reference

import ragged_mlir
from ragged_mlir import CompileOptions, RaggedArray
from ragged_mlir.compiler.options import _host_cpu_flags

pytest.importorskip("torch")  # the references

CONVS = [
    Conv("stem7x7_s2", Window((7, 7), (2, 2), (3, 3)), 3, 17, bias=True),
    Conv("wide3x3", Window((3, 3), padding=(1, 1)), 130, 70),
    Conv("one_out", Window((3, 3), (1, 2), (0, 1)), 5, 1, bias=True),
    Conv("pointwise_s2", Window((1, 1), (2, 2)), 16, 64),
    Conv("dilated", Window((3, 2), (2, 1), (2, 1), (2, 3)), 4, 33),
    Conv("grouped", Window((3, 3), padding=(1, 1)), 4, 6, groups=2, bias=True),
]
#: test_images' batches, and one large image among small ones.
KERNEL_SIZES = {**SIZES, "large_among_small": [(3, 2), (61, 47), (0, 4), (9, 1), (2, 2)]}


#: test_images' pools, and each again on 20 channels.
WIDE_POOLS = [Pool(p.name + "_c20", p.kind, p.window, 20, p.count_include_pad) for p in POOLS]


def _module() -> str:
    return "\n".join(op.func() for op in CONVS + POOLS + WIDE_POOLS)


@pytest.fixture(scope="module")
def conv_module():
    """``conv_module(cpu=None, kernel=True)``, compiled once each."""
    cache: dict = {}

    def get(cpu: str | None = None, kernel: bool = True):
        if (cpu, kernel) not in cache:
            options = CompileOptions(cpu=cpu, cpu_kernels=kernel)
            lowered = ragged_mlir.lower(_module(), options=options)
            on_kernel = sum(op.groups == 1 for op in CONVS) if kernel else 0
            assert lowered.count("@ragged_kernels::@conv2d") == on_kernel
            assert lowered.count("@ragged_kernels::@pool2d") == (len(POOLS) * 2 if kernel else 0)
            cache[cpu, kernel] = ragged_mlir.compile(_module(), options=options)
        return cache[cpu, kernel]

    return get


def _run(module, rng, sizes, op: Conv):
    w = op.window
    imgs = batch(rng, sizes, op.cin)
    weight = rng.uniform(-1, 1, (*w.kernel, op.cin // op.groups, op.cout)).astype(np.float32)
    bias = rng.uniform(-1, 1, op.cout).astype(np.float32)
    x = RaggedArray.from_images(imgs)
    before = (x.values.copy(), weight.copy(), bias.copy())
    out = getattr(module, op.name)(*((x, weight, bias) if op.bias else (x, weight)))
    for kept, now in zip(before, (x.values, weight, bias), strict=True):
        np.testing.assert_array_equal(kept, now)
    check(out, imgs, w, *conv_reference(op, weight, bias))


def _run_pool(module, rng, sizes, op: Pool, values=None):
    imgs = batch(rng, sizes, op.c) if values is None else values
    x = RaggedArray.from_images(imgs)
    before = x.values.copy()
    out = getattr(module, op.name)(x)
    np.testing.assert_array_equal(x.values, before)
    check(out, imgs, op.window, pool_reference(op), dict(rtol=1e-5, atol=1e-5))


@pytest.mark.parametrize("sizes", list(KERNEL_SIZES))
@pytest.mark.parametrize("op", POOLS + WIDE_POOLS, ids=[p.name for p in POOLS + WIDE_POOLS])
def test_pool_kernel_matches_each_image(conv_module, rng, sizes, op):
    _run_pool(conv_module(), rng, KERNEL_SIZES[sizes], op)


def test_max_pool_kernel_propagates_nan(conv_module, rng):
    """A NaN in a window is the max, as in PyTorch; infinities stay."""
    op = next(p for p in WIDE_POOLS if p.name == "max3x3_s2_c20")
    imgs = batch(rng, [(6, 7), (3, 3)], 20)
    imgs[0][2, 3, 5] = np.nan
    imgs[0][0, 0, 17] = np.inf
    imgs[1][1, 1, :] = -np.inf
    _run_pool(conv_module(), rng, None, op, values=imgs)


@pytest.mark.parametrize("sizes", list(KERNEL_SIZES))
@pytest.mark.parametrize("op", CONVS, ids=[c.name for c in CONVS])
def test_conv_kernel_matches_each_image(conv_module, rng, sizes, op):
    _run(conv_module(), rng, KERNEL_SIZES[sizes], op)


@pytest.mark.skipif(
    not {"avx2", "fma"} <= _host_cpu_flags(), reason="the AVX2 object needs a host with AVX2 and FMA"
)
@pytest.mark.parametrize("op", CONVS, ids=[c.name for c in CONVS])
def test_conv_kernel_avx2(conv_module, rng, op):
    assert CompileOptions(cpu="haswell").kernel_isa == "x86_64_v3"
    for sizes in ("random", "large_among_small"):
        _run(conv_module("haswell"), rng, KERNEL_SIZES[sizes], op)


@pytest.mark.skipif(
    not {"avx2", "fma"} <= _host_cpu_flags(), reason="the AVX2 object needs a host with AVX2 and FMA"
)
@pytest.mark.parametrize("op", POOLS + WIDE_POOLS, ids=[p.name for p in POOLS + WIDE_POOLS])
def test_pool_kernel_avx2(conv_module, rng, op):
    _run_pool(conv_module("haswell"), rng, KERNEL_SIZES["large_among_small"], op)


@pytest.mark.parametrize("op", CONVS[:2], ids=[c.name for c in CONVS[:2]])
def test_codegen_behind_the_flag(conv_module, rng, op):
    _run(conv_module(kernel=False), rng, KERNEL_SIZES["large_among_small"], op)


def test_wide_inputs_stay_on_codegen():
    """More input channels than the kernel's zero row covers: codegen."""
    wide = Conv("wide", Window((1, 1)), 4100, 8)
    lowered = ragged_mlir.lower(wide.func(), options=CompileOptions(cpu_kernels=True))
    assert "@ragged_kernels::@conv2d" not in lowered
