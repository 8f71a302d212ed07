"""Per item, eagerly: linear algebra, order statistics and search on each item (refused under ``torch.compile``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .common import _as_nested, _first_nt
from .layout import _is_compiling
from .registry import _fname, register
from .tensor import NestedTensor

# -- per item (eager): linear algebra, order statistics, search ------------------------------------


def _per_item_fn(
    dims: tuple[tuple[str, int], ...] = (), reduces: bool = False, whole: bool = True
) -> Callable:
    """Functions applied to every item on the host (DanLing's per-element
    fallback): NestedTensor arguments are taken item by item, dense ones as
    they are; the logical dims named by ``dims`` (name, position) become item
    dims. Results are NestedTensors of the per-item results; when ``reduces``
    and the call reduced every ragged dim, a dense ``[B, ...]`` tensor; when
    ``reduces`` and ``whole`` and no dim is given, the function of all the
    elements."""

    def handler(func: Callable, args: tuple, kwargs: dict) -> Any:
        fname = _fname(func)
        args = [_as_nested(a) for a in args]
        kwargs = {k: _as_nested(v) for k, v in kwargs.items()}
        ref = _first_nt(tuple(args), kwargs)
        nts = [a for a in list(args) + list(kwargs.values()) if isinstance(a, NestedTensor)]
        for other in nts:
            if len(other) != len(ref):
                raise ValueError(
                    f"{fname}: NestedTensor arguments have different batch sizes ({len(ref)} and {len(other)})"
                )
        touched: list[int] = []
        for name, pos in dims:
            where = "kw" if name in kwargs else ("pos" if pos < len(args) else None)
            if where is None:
                continue
            value = kwargs[name] if where == "kw" else args[pos]
            if value is None:
                continue
            many = isinstance(value, (tuple, list))
            items = [ref._item_dim(d, fname) for d in (value if many else [value])]
            if None in items:
                raise ValueError(f"{fname}: {name}={value} is the batch dim of the NestedTensor")
            touched += items  # type: ignore[arg-type]
            new = tuple(items) if many else items[0]
            if where == "kw":
                kwargs[name] = new
            else:
                args[pos] = new
        if reduces and whole and not touched:
            # No dim: over every element, like torch on a dense tensor.
            a2 = [a.values if isinstance(a, NestedTensor) else a for a in args]
            k2 = {k: (v.values if isinstance(v, NestedTensor) else v) for k, v in kwargs.items()}
            return func(*a2, **k2)
        if _is_compiling():
            raise NotImplementedError(
                f"{fname}: runs item by item on the host and is not traceable; call it outside torch.compile"
            )
        outs = []
        for b in range(len(ref)):
            a2 = [a._item(b) if isinstance(a, NestedTensor) else a for a in args]
            k2 = {k: (v._item(b) if isinstance(v, NestedTensor) else v) for k, v in kwargs.items()}
            outs.append(func(*a2, **k2))
        dense = reduces and bool(ref.ragged_dims) and all(r in touched for r in ref.ragged_dims)
        if not outs:
            return ref._empty()
        if isinstance(outs[0], tuple):
            fields = [_collect(ref, [o[i] for o in outs], dense) for i in range(len(outs[0]))]
            return tuple(fields) if type(outs[0]) is tuple else type(outs[0])(fields)
        return _collect(ref, outs, dense)

    return handler


def _collect(ref: NestedTensor, outs: list, dense: bool) -> Any:
    if not all(isinstance(o, torch.Tensor) for o in outs):
        return outs
    if dense and all(o.shape == outs[0].shape for o in outs):
        return torch.stack(outs)
    return type(ref)(outs, **ref._state())


_PER_ITEM_PLAIN = [
    torch.det,
    torch.logdet,
    torch.slogdet,
    torch.inverse,
    torch.trace,
    torch.triu,
    torch.tril,
    torch.diag,
    torch.diagflat,
    torch.matrix_power,
    torch.matrix_exp,
    torch.mv,
    torch.dot,
    torch.vdot,
    torch.inner,
    torch.outer,
    torch.ger,
    torch.kron,
    torch.nonzero,
    torch.searchsorted,
    torch.bucketize,
    torch.linalg.det,
    torch.linalg.slogdet,
    torch.linalg.inv,
    torch.linalg.solve,
    torch.linalg.cholesky,
    torch.linalg.qr,
    torch.linalg.svd,
    torch.linalg.svdvals,
    torch.linalg.eigh,
    torch.linalg.eigvalsh,
    torch.linalg.pinv,
    torch.linalg.matrix_exp,
    torch.linalg.matrix_power,
]
for _f in list(_PER_ITEM_PLAIN):
    _m = getattr(torch.Tensor, getattr(_f, "__name__", ""), None)
    if _m is not None and not getattr(_f, "__module__", "").startswith("torch.linalg"):
        _PER_ITEM_PLAIN.append(_m)
register(_PER_ITEM_PLAIN, "per-item", _per_item_fn())
register([torch.diagonal, torch.Tensor.diagonal], "per-item", _per_item_fn((("dim1", 2), ("dim2", 3))))
register([torch.rot90, torch.Tensor.rot90], "per-item", _per_item_fn((("dims", 2),)))
register([torch.gather, torch.Tensor.gather], "per-item", _per_item_fn((("dim", 1),)))
register([torch.take_along_dim, torch.Tensor.take_along_dim], "per-item", _per_item_fn((("dim", 2),)))
register(
    [torch.linalg.norm, torch.linalg.matrix_norm],
    "per-item",
    _per_item_fn((("dim", 2),), reduces=True, whole=False),
)
for _f, _spec in (
    ("kthvalue", (("dim", 2),)),
    ("median", (("dim", 1),)),
    ("nanmedian", (("dim", 1),)),
    ("mode", (("dim", 1),)),
    ("quantile", (("dim", 2),)),
    ("nanquantile", (("dim", 2),)),
    ("aminmax", (("dim", 99),)),
    ("var_mean", (("dim", 1),)),
    ("std_mean", (("dim", 1),)),
):
    _fns = [getattr(torch, _f, None), getattr(torch.Tensor, _f, None)]
    register(_fns, "per-item", _per_item_fn(_spec, reduces=True))
