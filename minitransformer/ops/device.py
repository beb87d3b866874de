"""Moves between devices and dtypes, as differentiable ops.

to_device: y = x on another device;  dx = g moved back to x's device.
astype:    y = x cast to a dtype;     dx = g cast back to x's dtype.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..function import Function
from ..tensor import Tensor
from .checks import not_a_tensor


class ToDevice(Function):
    @staticmethod
    def forward(ctx, x, device: str):
        ctx.source = backend.device_of(x)
        return backend.to_device(x, device)

    @staticmethod
    def backward(ctx, grad):
        return backend.to_device(grad, ctx.source)


class AsType(Function):
    @staticmethod
    def forward(ctx, x, dtype: Any):
        ctx.dtype = x.dtype
        return ctx.xp.astype(x, backend.resolve_dtype(ctx.xp, dtype))

    @staticmethod
    def backward(ctx, grad):
        return ctx.xp.astype(grad, ctx.dtype)


def to_device(x: Tensor, device: str) -> Tensor:
    """x on ``device``; the same Tensor when it is already there."""
    if not isinstance(x, Tensor):
        raise not_a_tensor("to_device", "x", x)
    if backend.normalize_device(device) == x.device:
        return x
    return ToDevice.apply(x, device=device)


def astype(x: Tensor, dtype: Any) -> Tensor:
    """x cast to ``dtype`` (a name such as "float32", or a dtype object)."""
    if not isinstance(x, Tensor):
        raise not_a_tensor("astype", "x", x)
    backend.check_dtype("astype", dtype)
    return AsType.apply(x, dtype=dtype)
