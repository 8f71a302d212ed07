"""Compiled calls on CPU reuse their host memory: a repeated call of a large
batch does not map (and fault in) its intermediates again, nor does a
training step whose large blocks IREE's worker threads allocate, results
stay right, and ``RAGGED_HOST_MEMORY=system`` leaves glibc's settings alone.

Each case runs in its own interpreter: the settings are per process."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc's malloc only"
)

# An FF block over 8192 tokens: its [8192, 2048] f32 intermediate (64 MiB)
# and its result are larger than glibc's largest heap-served block by
# default (32 MiB). Prints the minor page faults of the third call, the
# pages of the intermediate and the error against numpy in fp64.
_SCRIPT = textwrap.dedent(
    """
    import json, resource
    import numpy as np
    import ragged_mlir
    from ragged_mlir import RaggedArray
    from ragged_mlir.builders import Program, ragged, tensor

    prog = Program()

    @prog.func(x=ragged(None, "L", 64), w1=tensor(64, 2048), w2=tensor(2048, 64))
    def ff(x, w1, w2):
        return (x @ w1).relu() @ w2

    module = ragged_mlir.compile(prog)
    rng = np.random.default_rng(0)
    lengths = [4096, 0, 1, 4095]
    x = RaggedArray.from_list([rng.standard_normal((n, 64), dtype=np.float32) for n in lengths])
    w1 = rng.standard_normal((64, 2048), dtype=np.float32) / 8
    w2 = rng.standard_normal((2048, 64), dtype=np.float32) / 45
    before = x.values.copy()
    for _ in range(2):
        module.ff(x, w1, w2)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    y = module.ff(x, w1, w2)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    ref = np.maximum(x.values.astype(np.float64) @ w1, 0) @ w2
    print(json.dumps({
        "faults": faults,
        "pages": 8192 * 2048 * 4 // 4096,
        "err": float(np.abs(y.values - ref).max() / np.abs(ref).max()),
        "offsets": [int(o) for o in y.offsets],
        "input_kept": bool(np.array_equal(before, x.values)),
    }))
    """
)


# A training step of torch's encoder layer with one 3000-token item, its
# attention on IREE's codegen (cpu_kernels=False; the CPU kernels keep
# no pair tensors): the backward's attention gradient holds [2 heads, 3000,
# 3000] f32 pairs (69 MB), in work queued behind the forward's gradient,
# which IREE's worker threads allocate. Prints the minor page faults of the third step, the
# pages of one pair tensor, and the input gradient's error against the
# layer run in fp64 on each item alone.
_TRAIN_SCRIPT = textwrap.dedent(
    """
    import copy, json, resource
    import torch
    from torch import nn
    from ragged_mlir.torch import NestedTensor
    from ragged_mlir.torch import backend as rb

    torch.set_num_threads(2)
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    run = torch.compile(
        layer, backend="ragged", dynamic=True, fullgraph=True, options={"cpu_kernels": False}
    )
    g = torch.Generator().manual_seed(1)
    lengths = (3000, 5, 0, 40)
    xs = [torch.randn(n, 16, generator=g) for n in lengths]
    w = torch.randn(sum(lengths), 16, generator=g)

    def step():
        x = NestedTensor(xs, requires_grad=True)
        (run(x).values * w).sum().backward()
        return x.grad

    for _ in range(2):
        step()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    grad = step()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    ref = copy.deepcopy(layer).double()
    err = 0.0
    for got, x, wb in zip(grad.unbind(), xs, w.split(lengths)):
        if len(x):
            xd = x.double().requires_grad_()
            (ref(xd[None])[0] * wb.double()).sum().backward()
            err = max(err, float((got.double() - xd.grad).abs().max() / xd.grad.abs().max()))
    print(json.dumps({
        "faults": faults, "pages": 2 * 3000 * 3000 * 4 // 4096, "err": err, "fallbacks": rb.stats["fallbacks"],
    }))
    """
)


def _run(host_memory: str | None, script: str = _SCRIPT) -> dict:
    env = dict(os.environ)
    env.pop("RAGGED_HOST_MEMORY", None)
    if host_memory is not None:
        env["RAGGED_HOST_MEMORY"] = host_memory
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_repeated_call_reuses_host_memory():
    warm = _run(None)
    assert warm["err"] < 1e-5
    assert warm["offsets"] == [0, 4096, 4096, 4097, 8192]
    assert warm["input_kept"]
    # The intermediate alone is 16384 pages; a warm call maps almost none.
    assert warm["faults"] < warm["pages"] // 10, warm


def test_system_setting_leaves_malloc_alone():
    system = _run("system")
    assert system["err"] < 1e-5
    # glibc maps the intermediate afresh on every call.
    assert system["faults"] >= system["pages"], system


def test_training_step_reuses_host_memory_of_worker_threads():
    pytest.importorskip("torch_mlir")
    warm = _run(None, _TRAIN_SCRIPT)
    assert warm["fallbacks"] == 0
    assert warm["err"] < 1e-4, warm
    # One pair tensor alone is 17578 pages; a warm step maps almost none.
    assert warm["faults"] < warm["pages"] // 10, warm
    system = _run("system", _TRAIN_SCRIPT)
    assert system["err"] < 1e-4, system
    # glibc maps the workers' blocks afresh on every step.
    assert system["faults"] >= warm["pages"], system
