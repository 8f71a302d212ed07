"""Which arguments of a lowered module IREE may write in place.

On CPU devices the runtime hands arrays to IREE without copying them
(:class:`~ragged_mlir.compiler.runtime.HostImporter`). IREE ties an op's destination
to its buffer when the destination is a function argument: a scatter into an
argument, or an insert into it, writes into the caller's array
(iree-org/iree#16168), even through a copy, which IREE folds away. The
arguments :func:`written_arguments` finds go in as copies instead.

The search is conservative: an argument counts as written when it reaches,
through views, copies and calls, any destination operand (the ``outs`` of a
linalg, ``tm_tensor`` or ``iree_linalg_ext`` op, the destination of an
insert, a loop's initial value), whether or not the op reads it.
"""

from __future__ import annotations

#: Ops whose result may share the operand's buffer.
_VIEWS = frozenset(
    {
        "tensor.bitcast",
        "tensor.cast",
        "tensor.collapse_shape",
        "tensor.expand_shape",
        "tensor.extract_slice",
        "tensor.reshape",
        "linalg.copy",
    }
)

#: Ops with one destination operand, by its position.
_DESTINATION = {
    "tensor.insert": 1,
    "tensor.insert_slice": 1,
    "tensor.parallel_insert_slice": 1,
    "bufferization.materialize_in_destination": 1,
}

#: Dialects whose ops take their destinations as the last operand segment.
_DESTINATION_STYLE = ("linalg.", "tm_tensor.", "iree_linalg_ext.")


def _name(op) -> str:
    return op.operation.name


def _is_copy(op) -> bool:
    """A ``linalg.generic`` that yields its only input unchanged."""
    if _name(op) != "linalg.generic" or len(op.operands) != 2:
        return False
    body = op.regions[0].blocks[0]
    ops = list(body.operations)
    return len(ops) == 1 and len(ops[0].operands) == 1 and ops[0].operands[0] == body.arguments[0]


def _is_destination(op, operand: int) -> bool:
    name = _name(op)
    if name in _DESTINATION:
        return operand == _DESTINATION[name]
    if name == "scf.for":
        return operand >= 3  # lower bound, upper bound, step, then the initial values
    if name == "scf.while":
        return True
    if name.startswith(_DESTINATION_STYLE) or name == "scf.forall":
        if "operandSegmentSizes" not in op.attributes:
            return False
        sizes = list(op.attributes["operandSegmentSizes"])
        return operand >= sum(sizes[:-1])
    return False


def written_arguments(module) -> dict[str, list[int]]:
    """For each public function of ``module`` (lowered), the indices of the
    arguments IREE may write in place."""
    funcs = {}
    for op in module.body.operations:
        if _name(op) == "func.func":
            funcs[op.attributes["sym_name"].value] = op
    memo: dict[tuple[str, int], bool] = {}

    def argument_written(fname: str, index: int) -> bool:
        key = (fname, index)
        if key not in memo:
            memo[key] = False  # a recursive call reaches nothing new
            fn = funcs.get(fname)
            if fn is None or not fn.regions[0].blocks:
                memo[key] = True  # an external callee may write anything
            else:
                memo[key] = reaches_destination(fn.regions[0].blocks[0].arguments[index])
        return memo[key]

    def reaches_destination(value) -> bool:
        stack, seen = [value], set()
        while stack:
            v = stack.pop()
            if v in seen:
                continue
            seen.add(v)
            for use in v.uses:
                op, k = use.owner, use.operand_number
                name = _name(op)
                if name in _VIEWS or _is_copy(op):
                    stack.extend(op.results)
                elif name == "func.call":
                    if argument_written(op.attributes["callee"].value, k):
                        return True
                elif _is_destination(op, k):
                    return True
        return False

    written = {}
    for fname, fn in funcs.items():
        private = "sym_visibility" in fn.attributes and fn.attributes["sym_visibility"].value == "private"
        if private or not fn.regions[0].blocks:
            continue
        args = fn.regions[0].blocks[0].arguments
        written[fname] = [i for i in range(len(args)) if argument_written(fname, i)]
    return written
