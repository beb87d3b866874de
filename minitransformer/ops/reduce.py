"""Reductions: sum, mean, max over an axis (or several, or all), with keepdims.

Shapes: x (...), y = x reduced over ``axis``. Backward spreads g back over the reduced
axes: for sum every element gets g; for mean g / n; for max only the arg-max positions
get g (ties share it equally, so the gradient stays a valid subgradient). A sum over an
empty axis is 0; a mean or a max over one is undefined and refused where the call enters.
"""

from __future__ import annotations

from typing import Any

from ..errors import ArgumentError
from ..function import Function
from ..tensor import Tensor
from .checks import axes, not_a_tensor


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
        ctx.axes, ctx.keepdims, ctx.shape = axis, keepdims, x.shape
        return ctx.xp.sum(x, axis=ctx.axes, keepdims=keepdims)

    @staticmethod
    def backward(ctx, grad):
        g = _expand(ctx.xp, grad, ctx.axes, ctx.keepdims)
        return ctx.xp.broadcast_to(g, ctx.shape)


class Mean(Function):
    """y = sum_axis x / n;  dx = g / n broadcast back (n = number of reduced elements)."""

    @staticmethod
    def forward(ctx, x, axis=None, keepdims=False):
        ctx.axes, ctx.keepdims, ctx.shape = axis, keepdims, x.shape
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
        ctx.axes, ctx.keepdims = axis, keepdims
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


def _reduction(op: str, x: Any, axis: Any, keepdims: Any, nonempty: bool) -> tuple:
    """The checked arguments of a reduction: x a Tensor, ``axis`` as a tuple of distinct
    axes (none of length 0 when ``nonempty``), ``keepdims`` a bool."""
    if not isinstance(x, Tensor):
        raise not_a_tensor(op, "x", x)
    if keepdims is not True and keepdims is not False:
        raise ArgumentError(f"{op}: keepdims must be True or False, got {keepdims!r}")
    return axes(op, axis, x.shape, nonempty=nonempty)


def sum(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """The sum over ``axis`` (an int, a tuple, or None for all); 0 over an empty axis."""
    return Sum.apply(x, axis=_reduction("sum", x, axis, keepdims, False), keepdims=keepdims)


def mean(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """The mean over ``axis``; an empty axis is refused (a mean of nothing is undefined)."""
    return Mean.apply(x, axis=_reduction("mean", x, axis, keepdims, True), keepdims=keepdims)


def max(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """The largest element over ``axis``; an empty axis is refused."""
    return Max.apply(x, axis=_reduction("max", x, axis, keepdims, True), keepdims=keepdims)
