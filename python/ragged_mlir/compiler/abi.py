"""What a compiled function takes and returns, in plain Python: the
signature of each public function (ragged, dense and scalar arguments with
their element types) and the names of the IREE parameters that frozen
arguments become."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .options import _NO_F64, Target


class CompileError(RuntimeError):
    """A compile failed; ``reproducer`` is the directory replaying it."""

    def __init__(self, message: str, reproducer: Path | None = None):
        super().__init__(message)
        self.reproducer = reproducer


# --------------------------------------------------------------------------

_NP_DTYPES = {
    "bf16": None,  # ml_dtypes.bfloat16, imported on first use
    "f16": np.float16,
    "f32": np.float32,
    "f64": np.float64,
    "i1": np.bool_,
    "i8": np.int8,
    "i16": np.int16,
    "i32": np.int32,
    "i64": np.int64,
}


def _describe(ty) -> dict:
    from ..dialects import ragged
    from ..ir import FloatType, IntegerType, RankedTensorType

    if ragged.RaggedTensorType.isinstance(ty):
        rt = ragged.RaggedTensorType(ty)
        dims = []
        for d in rt.dims:
            dims.append({"symbol": d.symbol, "parent": d.parent} if isinstance(d, ragged.Ragged) else d)
        return {
            "kind": "ragged",
            "type": str(ty),
            "batch": rt.batch_size,
            "dims": dims,
            "element": str(rt.element_type),
            "symbols": rt.distinct_symbols,
        }
    if isinstance(ty, RankedTensorType):
        t = ty
        shape = [None if t.is_dynamic_dim(i) else t.shape[i] for i in range(t.rank)]
        return {"kind": "tensor", "type": str(ty), "shape": shape, "element": str(t.element_type)}
    if isinstance(ty, (IntegerType, FloatType)):
        return {"kind": "scalar", "type": str(ty), "element": str(ty)}
    raise CompileError(f"unsupported function boundary type {ty}: use tensors, ragged tensors or scalars")


def _np_dtype(element: str):
    if element not in _NP_DTYPES:
        raise CompileError(f"element type {element} has no numpy counterpart at the function boundary")
    if element == "bf16":
        # numpy has no bfloat16; ml_dtypes (which iree-base-runtime
        # depends on) registers one that IREE's runtime exchanges.
        import ml_dtypes

        return ml_dtypes.bfloat16
    return _NP_DTYPES[element]


def _check_target_types(sigs: dict, target: Target) -> None:
    """Refuses a program whose functions take or return f64 on a target
    without f64, and element types with no numpy counterpart."""
    for name, sig in sigs.items():
        for kind, descs in (("argument", sig["inputs"]), ("result", sig["results"])):
            for i, desc in enumerate(descs):
                _np_dtype(desc["element"])
                if desc["element"] == "f64" and target in _NO_F64:
                    raise CompileError(
                        f"{name} {kind} {i}: {desc['type']} is f64, which {_NO_F64[target]} cannot compute "
                        f"(target {target.value}); use f32, or compile for llvm-cpu, cuda or rocm"
                    )


def _signatures(module) -> dict:
    from ..dialects import func

    sigs = {}
    for op in module.body.operations:
        if op.operation.name != "func.func":
            continue
        fn = func.FuncOp(op.operation) if not isinstance(op, func.FuncOp) else op
        if fn.is_external or (
            "sym_visibility" in fn.attributes and str(fn.attributes["sym_visibility"]) == '"private"'
        ):
            continue
        ftype = fn.type
        sigs[fn.name.value] = {
            "inputs": [_describe(t) for t in ftype.inputs],
            "results": [_describe(t) for t in ftype.results],
        }
    return sigs


#: The scope of the IREE parameters that frozen arguments become.
PARAMETER_SCOPE = "ragged"


def parameter_key(function: str, index: int) -> str:
    """The IREE parameter name of argument ``index`` of ``function`` when frozen."""
    return f"{function}.arg{index}"
