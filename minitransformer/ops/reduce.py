"""Reductions: sum, mean, max over an axis (or several, or all), with keepdims.

Shapes: x (...), y = x reduced over ``axis``. Backward spreads g back over the reduced
axes: for sum every element gets g; for mean g / n; for max only the arg-max positions
get g (ties share it equally, so the gradient stays a valid subgradient).
"""

from __future__ import annotations

from typing import Any

from ..errors import ShapeError
from ..function import Function
from ..tensor import Tensor


def _axes(axis: Any, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    for a in axes:
        if not -ndim <= a < ndim:
            raise ShapeError(
                f"reduction axis {a} is out of range for an array of rank {ndim}; "
                f"use an axis in [-{ndim}, {ndim - 1}] (or axis=None for all)"
            )
    return tuple(a % ndim for a in axes)


def _expand(xp, g, axes: tuple[int, ...], keepdims: bool):
    """Put back the reduced axes as size-1 axes so g broadcasts against x."""
    if keepdims:
        return g
    shape = list(g.shape)
    for a in sorted(axes):
        shape.insert(a, 1)
    return xp.reshape(g, tuple(shape))


class Sum(Function):
    """y = sum_axis x;  dx = g broadcast back over the summed axes."""

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        ctx.axes, ctx.keepdims, ctx.shape = _axes(axis, x.ndim), keepdims, x.shape
        return ctx.xp.sum(x, axis=ctx.axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, grad):
        g = _expand(ctx.xp, grad, ctx.axes, ctx.keepdims)
        return ctx.xp.broadcast_to(g, ctx.shape)


class Mean(Function):
    """y = sum_axis x / n;  dx = g / n broadcast back (n = number of reduced elements)."""

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        ctx.axes, ctx.keepdims, ctx.shape = _axes(axis, x.ndim), keepdims, x.shape
        ctx.n = 1
        for a in ctx.axes:
            ctx.n *= x.shape[a]
        return ctx.xp.mean(x, axis=ctx.axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, grad):
        g = _expand(ctx.xp, grad, ctx.axes, ctx.keepdims) / ctx.n
        return ctx.xp.broadcast_to(g, ctx.shape)


class Max(Function):
    """y = max_axis x;  dx = g * [x == y] / (number of ties)."""

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        xp = ctx.xp
        ctx.axes, ctx.keepdims = _axes(axis, x.ndim), keepdims
        y = xp.max(x, axis=ctx.axes, keepdims=True)
        ctx.save_for_backward(x, y)
        return (
            y
            if keepdims
            else xp.reshape(y, tuple(n for i, n in enumerate(x.shape) if i not in ctx.axes))
        )

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        x, y = ctx.saved
        hit = xp.astype(x == y, x.dtype)
        ties = xp.sum(hit, axis=ctx.axes, keepdims=True)
        return hit * (_expand(xp, grad, ctx.axes, ctx.keepdims) / ties)


def sum(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return Sum.apply(x, axis=axis, keepdims=keepdims)


def mean(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    return Mean.apply(x, axis=axis, keepdims=keepdims)


def max(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return Max.apply(x, axis=axis, keepdims=keepdims)
