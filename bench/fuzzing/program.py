"""The fuzzer's own description of a program: types, nodes, functions.

A :class:`Function` is a list of :class:`Node` s in definition order (its
arguments are ``arg`` nodes, placed where the generator first needed them)
and a list of outputs. The same description drives three consumers that
never look at each other: :func:`emit` writes it with the public builders
(:mod:`ragged_mlir.builders`), :mod:`fuzzing.reference` evaluates it per item
in float64, and :mod:`fuzzing.generator` creates it.

Types carry concrete sizes where the MLIR type says ``?``: a :class:`Dyn`
dense dim has one size for the whole program (so the generator only
combines values whose sizes agree at run time), a :class:`Run` dim is
sized when inputs are drawn (the batch, a padded extent, a row count).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

import numpy as np

from ragged_mlir import builders

__all__ = [
    "FLOATS",
    "NP_DTYPES",
    "Dyn",
    "Function",
    "Node",
    "RType",
    "Ref",
    "Run",
    "Sym",
    "TType",
    "emit",
    "module_text",
]

FLOATS = ("f16", "f32", "f64")
NP_DTYPES = {
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "i32": np.int32,
    "i64": np.int64,
    "i1": np.bool_,
}


@dataclass(frozen=True)
class Sym:
    """A ragged dim: extent ``name(b)``, or ``name(b, i)`` nested in ``parent``."""

    name: str
    parent: str | None = None

    def __str__(self) -> str:
        return f"[{self.name}({self.parent})]" if self.parent else f"[{self.name}]"


@dataclass(frozen=True)
class Dyn:
    """A dynamic dense dim (``?``) whose size is ``size`` in every call."""

    size: int

    def __str__(self) -> str:
        return f"?{self.size}"


@dataclass(frozen=True)
class Run:
    """A dynamic dim of a dense argument sized when inputs are drawn:
    ``batch``, ``batch+1``, ``extent`` (a padded extent) or ``rows``."""

    kind: str

    def __str__(self) -> str:
        return f"?{self.kind}"


Dim = int | Dyn | Sym | Run
Ref = tuple[int, int]  # (node index, result index)


def _spec_dim(d: Dim) -> int | str | None:
    if isinstance(d, Sym):
        return f"{d.name}({d.parent})" if d.parent else d.name
    return d if isinstance(d, int) else None


@dataclass(frozen=True)
class RType:
    """``!ragged.tensor<batch, dims..., dtype>``."""

    batch: int | None
    dims: tuple[Dim, ...]
    dtype: str

    @property
    def symbols(self) -> list[str]:
        return [d.name for d in self.dims if isinstance(d, Sym)]

    @property
    def distinct(self) -> list[str]:
        """Distinct symbols in order of first appearance (one partition each)."""
        return list(dict.fromkeys(self.symbols))

    def parent(self, symbol: str) -> str | None:
        return next(d.parent for d in self.dims if isinstance(d, Sym) and d.name == symbol)

    @property
    def last_ragged(self) -> int:
        return max(i for i, d in enumerate(self.dims) if isinstance(d, Sym))

    @property
    def trailing(self) -> tuple[Dim, ...]:
        """Dense dims after the last ragged dim (the rows' shape)."""
        return self.dims[self.last_ragged + 1 :]

    @property
    def nested(self) -> bool:
        return any(isinstance(d, Sym) and d.parent for d in self.dims)

    @property
    def is_seq(self) -> bool:
        """``[B, L(b), dense...]``: one ragged dim, first, not nested."""
        return isinstance(self.dims[0], Sym) and len(self.symbols) == 1 and not self.nested

    @property
    def is_chain(self) -> bool:
        """``[B, S(b), T(b, s), ..., dense...]``: nested ragged dims first, each
        in the one before."""
        syms = [d for d in self.dims if isinstance(d, Sym)]
        if len(syms) < 2 or self.last_ragged + 1 != len(syms):
            return False
        return all(s.parent == (syms[i - 1].name if i else None) for i, s in enumerate(syms))

    def with_(self, **changes) -> RType:
        return replace(self, **changes)

    def spec(self):
        return builders.ragged(self.batch, *[_spec_dim(d) for d in self.dims], dtype=self.dtype)

    def __str__(self) -> str:
        batch = "?" if self.batch is None else str(self.batch)
        dims = ", ".join(
            str(d) if isinstance(d, Sym) else ("?" if not isinstance(d, int) else str(d)) for d in self.dims
        )
        return f"!ragged.tensor<{batch}, {dims}, {self.dtype}>"


@dataclass(frozen=True)
class TType:
    """``tensor<shape x dtype>``."""

    shape: tuple[Dim, ...]
    dtype: str

    @property
    def static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def spec(self):
        return builders.tensor(*[_spec_dim(d) for d in self.shape], dtype=self.dtype)

    def __str__(self) -> str:
        dims = "x".join("?" if not isinstance(d, int) else str(d) for d in self.shape)
        return f"tensor<{dims}{'x' if dims else ''}{self.dtype}>"


Type = RType | TType


@dataclass
class Node:
    """One op (or an ``arg``): operands are refs to earlier nodes' results.

    ``attrs`` holds the op's attributes and, for ``arg`` nodes, how inputs
    are drawn (``role`` and its parameters, see :mod:`fuzzing.reference`)."""

    op: str
    operands: tuple[Ref, ...]
    attrs: dict
    types: tuple[Type, ...]


@dataclass
class Function:
    name: str
    nodes: list[Node] = field(default_factory=list)
    outputs: list[Ref] = field(default_factory=list)
    #: Positions (among the arguments) of dense arguments compiled as IREE parameters.
    frozen: tuple[int, ...] = ()

    def add(self, op: str, operands: Iterable[Ref], attrs: dict, *types: Type) -> list[Ref]:
        self.nodes.append(Node(op, tuple(operands), dict(attrs), tuple(types)))
        k = len(self.nodes) - 1
        return [(k, i) for i in range(len(types))]

    def type_of(self, ref: Ref) -> Type:
        return self.nodes[ref[0]].types[ref[1]]

    @property
    def arg_nodes(self) -> list[int]:
        return [i for i, n in enumerate(self.nodes) if n.op == "arg"]

    def lowered_index(self, position: int) -> int:
        """Index of argument ``position`` after lowering (a ragged argument
        becomes its values and one offsets tensor per distinct symbol)."""
        at = 0
        for k in self.arg_nodes[:position]:
            t = self.nodes[k].types[0]
            at += 1 + len(t.distinct) if isinstance(t, RType) else 1
        return at

    def describe(self) -> str:
        """A readable listing: one line per node."""
        lines = [f"function {self.name}"]
        for i, n in enumerate(self.nodes):
            ops = ", ".join(f"%{k}" + (f"#{j}" if j else "") for k, j in n.operands)
            attrs = ", ".join(f"{k}={v}" for k, v in n.attrs.items())
            types = ", ".join(str(t) for t in n.types)
            lines.append(f"  %{i} = {n.op}({ops}) {{{attrs}}} : {types}")
        outs = ", ".join(f"%{k}" + (f"#{j}" if j else "") for k, j in self.outputs)
        lines.append(f"  return {outs}")
        if self.frozen:
            lines.append(f"  frozen arguments: {list(self.frozen)}")
        return "\n".join(lines)


# --------------------------------------------------------------------------
# Emission with the public builders
# --------------------------------------------------------------------------

_BINARY = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "max": lambda a, b: a.maximum(b),
    "min": lambda a, b: a.minimum(b),
}


def _emit_node(node: Node, args: list):
    """The builder calls of one node; returns its results as a list."""
    a = node.attrs
    op = node.op
    x = args[0] if args else None
    if op == "unary":
        return [getattr(x, a["fn"])()]
    if op == "binary":
        return [_BINARY[a["fn"]](x, args[1])]
    if op == "matmul":
        return [x @ args[1]]
    if op == "layer_norm":
        return [x.layer_norm(args[1], args[2], epsilon=a["epsilon"])]
    if op == "reduce":
        return [x.reduce(a["kind"], a.get("empty"))]
    if op == "softmax":
        return [x.softmax()]
    if op == "reshape":
        return [x.reshape(*a["dims"])]
    if op == "to_padded":
        return [x.to_padded(a["padding"])]
    if op == "mask":
        return [x.mask()]
    if op == "values":
        return [x.values()]
    if op == "offsets":
        return [x.offsets(a["symbol"])]
    if op == "pack":
        return [builders.pack(x, args[1:], node.types[0].spec())]
    if op == "from_padded":
        t = node.types[0]
        return [builders.from_padded(x, args[1:], *[_spec_dim(d) for d in t.dims])]
    if op == "match":
        return [builders.match(x, args[1])]
    if op == "scores":
        return [builders.scores(x, args[1], a["scale"], a["causal"])]
    if op == "apply":
        return [builders.apply(x, args[1])]
    if op == "attention":
        return [builders.attention(x, args[1], args[2], a["scale"], a["causal"])]
    if op == "gather":
        return [builders.gather(x, args[1])]
    if op == "concat":
        return [builders.concat(x, args[1], node.types[0].symbols[0])]
    if op == "split":
        return list(builders.split(x, args[1], (node.types[0].symbols[0], node.types[1].symbols[0])))
    raise ValueError(f"node.op: unknown op {op!r}")


def emit(functions: Iterable[Function], program: builders.Program | None = None) -> builders.Program:
    """Adds every function to ``program`` (a new one by default) with the builders."""
    program = program or builders.Program()
    for fn in functions:
        arg_nodes = fn.arg_nodes
        inputs = [(f"a{i}", fn.nodes[k].types[0].spec()) for i, k in enumerate(arg_nodes)]

        def body(*values, fn=fn, arg_nodes=arg_nodes):
            env: dict[Ref, object] = {(k, 0): v for k, v in zip(arg_nodes, values, strict=True)}
            for k, node in enumerate(fn.nodes):
                if node.op == "arg":
                    continue
                outs = _emit_node(node, [env[r] for r in node.operands])
                for j, v in enumerate(outs):
                    env[(k, j)] = v
            return tuple(env[r] for r in fn.outputs)

        program.define(fn.name, inputs, body)
    return program


def module_text(functions: Iterable[Function]) -> str:
    return emit(functions).module_text()
