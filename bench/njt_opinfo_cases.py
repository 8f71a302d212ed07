"""PyTorch's own NJT OpInfo samples through ``backend="ragged"``.

Shared by ``test/e2e/torch/test_njt_opinfo.py`` (a sample of each kind per
op, in the test command) and ``bench/njt_opinfo.py`` (every sample, with a
summary). The ops
are the common ones of encoder models: unary, binary with broadcasting,
reductions, normalization, views, linear and matmul (PyTorch 2.13's table
has no NJT samples for softmax, layer_norm, gelu or dropout; other tests
cover those through NestedTensor and NJT models). A case passes when
the compiled function returns what eager NJT returns (an NJT where eager
returns one) with nothing falling back.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator

import torch

__all__ = ["OPS", "Case", "cases", "check"]

#: OpInfo names (``torch.testing._internal.opinfo.definitions.nested``).
OPS = (
    "abs",
    "neg",
    "exp",
    "log",
    "sin",
    "sqrt",
    "rsqrt",
    "tanh",
    "sigmoid",
    "nn.functional.relu",
    "nn.functional.silu",
    "square",
    "add",
    "sub",
    "mul",
    "div.no_rounding_mode",
    "pow",
    "where",
    "sum",
    "mean",
    "amax",
    "maximum",
    "prod",
    "unflatten",
    "unsqueeze",
    "chunk",
    "nn.functional.rms_norm",
    "nn.functional.linear",
    "matmul",
    "bmm",
    "clone",
)


@dataclasses.dataclass
class Case:
    op: str
    index: int
    name: str
    kind: str
    args: tuple
    kwargs: dict
    fn: object


def cases(ops=OPS, per_kind: int | None = None, per_op: int | None = None) -> Iterator[Case]:
    """The f32 samples of ``ops``; with ``per_kind``, at most that many of
    each kind of sample (the text after the input's description, e.g.
    ``(NT, T) broadcasting 1 over ragged``), and with ``per_op`` at most that
    many per op."""
    from torch.testing._internal.opinfo.definitions.nested import njt_op_db

    by_name = {op.full_name: op for op in njt_op_db}
    for name in ops:
        op = by_name[name]
        seen: dict[str, int] = {}
        for i, s in enumerate(op.sample_inputs(device="cpu", dtype=torch.float32, requires_grad=False)):
            kind = s.name.split(": ", 1)[-1]
            if per_kind is not None and seen.get(kind, 0) >= per_kind:
                continue
            if per_op is not None and sum(seen.values()) >= per_op:
                break
            seen[kind] = seen.get(kind, 0) + 1
            yield Case(name, i, s.name, kind, (s.input, *s.args), dict(s.kwargs), op.op)


def _flat(x):
    return x if isinstance(x, (tuple, list)) else (x,)


def check(case: Case) -> bool:
    """Compiles the case with fallback off and compares it to eager NJT;
    raises on any difference. Returns False, without compiling, when eager
    itself raises (the sample does not run on this build), else True."""
    fn = case.fn

    def call(*args):
        return fn(*args, **case.kwargs)

    try:
        want = call(*case.args)
    except Exception:
        return False
    torch._dynamo.reset()
    got = torch.compile(call, backend="ragged", dynamic=True, options={"fallback": False})(*case.args)
    for g, w in zip(_flat(got), _flat(want), strict=True):
        if isinstance(w, torch.Tensor) and w.is_nested:
            assert isinstance(g, torch.Tensor) and g.is_nested, f"expected an NJT, got {type(g).__name__}"
            torch.testing.assert_close(g.offsets(), w.offsets())
            g, w = g.values(), w.values()
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4, equal_nan=True)
    return True
