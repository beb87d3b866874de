"""Elementwise functions of one tensor: exp, log, sqrt, relu.

Shapes: x (...) -> y (...). Each backward gives dL/dx = dL/dy * dy/dx elementwise.
exp, log and sqrt need a float tensor (their values and gradients are fractions).
The arithmetic (add, sub, mul, div, neg, pow) is in ``arithmetic.py``; its names are
importable from here too (``ops.elementwise.add``), as before the split.
Twins: ``fast/cupy/elementwise.py`` (ReLU's backward: one kernel), ``fast/numpy/elementwise.py``.
"""

from __future__ import annotations

from ..function import Function
from ..tensor import Tensor
from .arithmetic import add, div, mul, neg, pow, sub
from .checks import floats, not_a_tensor

__all__ = ["add", "div", "exp", "log", "mul", "neg", "pow", "relu", "sqrt", "sub"]


class Exp(Function):
    """y = e^x;  dx = g * y."""

    @staticmethod
    def forward(ctx, x):
        y = ctx.xp.exp(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return grad * y


class Log(Function):
    """y = ln x;  dx = g / x."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return ctx.xp.log(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved
        return grad / x


class Sqrt(Function):
    """y = sqrt(x);  dx = g / (2 y)."""

    @staticmethod
    def forward(ctx, x):
        y = ctx.xp.sqrt(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return grad / (2 * y)


class ReLU(Function):
    """y = max(x, 0);  dx = g where x > 0, else 0 (the subgradient 0 at x = 0)."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, x):
        y = ctx.xp.maximum(x, 0.0)  # a Python scalar keeps x's dtype (array API 2024.12)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        # y > 0 exactly where x > 0; a product, not where(): NumPy's where branches on each
        # element, and half of a ReLU's mask is False (measured 10x slower at (640, 256))
        return grad * ctx.xp.astype(y > 0, grad.dtype)


def exp(x: Tensor) -> Tensor:
    floats("exp", x=x)
    return Exp.apply(x)


def log(x: Tensor) -> Tensor:
    floats("log", x=x)
    return Log.apply(x)


def sqrt(x: Tensor) -> Tensor:
    floats("sqrt", x=x)
    return Sqrt.apply(x)


def relu(x: Tensor) -> Tensor:
    if not isinstance(x, Tensor):
        raise not_a_tensor("relu", "x", x)
    return ReLU.apply(x)
