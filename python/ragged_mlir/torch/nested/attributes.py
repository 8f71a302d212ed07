"""The torch.Tensor attributes of a NestedTensor that its packed values
answer (dtype, device, autograd state, layout and storage predicates): a
mixin of the class."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .layout import _check_bool

if TYPE_CHECKING:
    from .tensor import NestedTensor


class _Attributes:
    @property
    def dtype(self) -> torch.dtype:
        return self.values.dtype

    @dtype.setter
    def dtype(self, value: Any) -> None:
        raise AttributeError("NestedTensor.dtype is read-only; use .to(dtype) for a converted copy")

    @property
    def device(self) -> torch.device:
        return self.values.device

    @device.setter
    def device(self, value: Any) -> None:
        raise AttributeError("NestedTensor.device is read-only; use .to(device) for a moved copy")

    @property
    def requires_grad(self) -> bool:
        return self.values.requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool) -> None:
        self.values.requires_grad_(_check_bool(value, "requires_grad"))

    def requires_grad_(self, requires_grad: bool = True) -> NestedTensor:
        self.values.requires_grad_(requires_grad)
        return self

    @property
    def grad(self) -> NestedTensor | None:
        """The gradient of :attr:`values` with this structure (None before a backward)."""
        g = self.values.grad
        return None if g is None else self._derive(g)

    @property
    def grad_fn(self) -> Any:
        return self.values.grad_fn

    @property
    def is_leaf(self) -> bool:
        return self.values.is_leaf

    @property
    def layout(self) -> torch.layout:
        return self.values.layout

    @property
    def is_cuda(self) -> bool:
        return self.values.is_cuda

    @property
    def is_nested(self) -> bool:
        # False on purpose: torch modules (nn.MultiheadAttention) take other
        # code paths for torch's own nested tensors.
        return False

    def is_floating_point(self) -> bool:
        return self.values.is_floating_point()

    def is_complex(self) -> bool:
        return self.values.is_complex()

    def is_contiguous(self, memory_format: torch.memory_format = torch.contiguous_format) -> bool:
        return self.values.is_contiguous(memory_format=memory_format)

    def is_pinned(self) -> bool:
        return self.values.is_pinned()

    def element_size(self) -> int:
        return self.values.element_size()
