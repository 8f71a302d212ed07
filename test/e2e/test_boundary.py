"""The LLVM 22 <-> 24 boundary, crossed as MLIR text, and the coexistence of
ragged_mlir (LLVM 22), torch-mlir and IREE (LLVM 24) in one process.

If a pinned version moves and either direction breaks, these fail loudly.
"""

import numpy as np
import pytest

import ragged_mlir
from ragged_mlir import ir

torch = pytest.importorskip("torch")
fx = pytest.importorskip("torch_mlir.fx")
import iree.compiler  # noqa: E402
import iree.runtime  # noqa: E402


class TinyEncoder(torch.nn.Module):
    """Linear + LayerNorm + multi-head attention: a real model's dense parts."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.proj = torch.nn.Linear(d, d)
        self.norm = torch.nn.LayerNorm(d)
        self.attn = torch.nn.MultiheadAttention(d, heads, batch_first=True)

    def forward(self, x):
        h = self.norm(self.proj(x))
        return self.attn(h, h, h, need_weights=False)[0]


def test_torch_mlir_output_parses_and_verifies_in_our_mlir():
    torch.manual_seed(0)
    model = TinyEncoder().eval()
    x = torch.randn(2, 5, 32)
    module = fx.export_and_import(model, x, output_type="linalg-on-tensors")
    text = str(module)
    with ir.Context():
        ours = ir.Module.parse(text)
        ours.operation.verify()
        reprinted = str(ours)
    # And back: IREE compiles what our MLIR printed, and it matches torch.
    vmfb = iree.compiler.compile_str(
        reprinted, target_backends=["llvm-cpu"], extra_args=["--iree-llvmcpu-target-cpu=host"]
    )
    config = iree.runtime.Config("local-task")
    ctx = iree.runtime.SystemContext(config=config)
    ctx.add_vm_module(iree.runtime.VmModule.copy_buffer(config.vm_instance, vmfb))
    got = ctx.modules.module.main(x.numpy()).to_host()
    with torch.no_grad():
        want = model(x).numpy()
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_ragged_module_printed_by_us_runs_on_iree():
    text = """
    func.func @pool(%x: !ragged.tensor<?, [L], 4, f32>) -> tensor<?x4xf32> {
      %s = ragged.reduce <sum> %x : !ragged.tensor<?, [L], 4, f32> -> tensor<?x4xf32>
      return %s : tensor<?x4xf32>
    }"""
    options = ragged_mlir.CompileOptions()
    lowered = ragged_mlir.lower(text, options=options)
    # Pretty and generic forms both cross. The lowering builds IREE's tile
    # sizes and, on CPU, the kernel library's dispatches by name, so the
    # parsing context allows unregistered dialects, and iree-compile needs
    # the kernel objects' folder.
    with ir.Context() as ctx:
        ctx.allow_unregistered_dialects = True
        generic = ir.Module.parse(lowered).operation.get_asm(print_generic_op_form=True)
    objects = [f for f in options.flags() if f.startswith("--iree-hal-executable-object-search-path=")]
    for form in (lowered, generic):
        vmfb = iree.compiler.compile_str(
            form, target_backends=["llvm-cpu"], extra_args=["--iree-llvmcpu-target-cpu=host", *objects]
        )
        assert len(vmfb) > 0
    module = ragged_mlir.compile(text)
    items = [np.full((n, 4), n, np.float32) for n in (2, 0, 3)]
    got = module.pool(ragged_mlir.RaggedArray.from_list(items))
    np.testing.assert_array_equal(got, np.stack([x.sum(0) for x in items]))


def test_three_mlir_copies_in_one_process():
    # All three are imported above; use each once more after the others.
    with ir.Context():
        t = ir.Type.parse("!ragged.tensor<?, [S], [T(S)], 8, f32>")
        assert "T(S)" in str(t)
    import torch_mlir.ir as tir

    with tir.Context():
        assert str(tir.Type.parse("tensor<2xf32>")) == "tensor<2xf32>"
    assert iree.compiler.compile_str(
        "func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> { return %a : tensor<2xf32> }",
        target_backends=["llvm-cpu"],
    )
