"""Saturating activations: tanh and sigmoid, the squashing functions of recurrent cells.

Shapes: x (...) -> y (...), elementwise. Both are written in terms of their OUTPUT y, so
backward needs only y (saved in forward):

    tanh:     y = (e^x - e^-x) / (e^x + e^-x)    in (-1, 1);   dy/dx = 1 - y^2
    sigmoid:  y = 1 / (1 + e^-x)                  in (0, 1);    dy/dx = y (1 - y)

Both derivatives are at most 1 (tanh) and 1/4 (sigmoid) and vanish for large |x|: the
reason a gradient pushed back through many recurrent steps shrinks (lesson 12).
sigmoid is computed from z = e^-|x| (never overflows): y = 1/(1+z) for x >= 0 and
z/(1+z) for x < 0, the same function written two ways.
"""

from __future__ import annotations

from ..function import Function
from ..tensor import Tensor
from .checks import floats


def stable_sigmoid(xp, x):
    """σ(x) = 1 / (1 + e^-x) on a raw array, from z = e^-|x| in (0, 1] (no overflow for any
    x): 1/(1+z) for x >= 0 and z/(1+z) for x < 0. Sigmoid and SiLU (smooth_relu.py) use it."""
    z = xp.exp(-xp.abs(x))
    inv = 1 / (1 + z)
    return xp.where(x >= 0, inv, z * inv)


class Tanh(Function):
    """y = tanh(x);  dx = g * (1 - y^2)."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, x):
        y = ctx.xp.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return grad * (1 - y * y)


class Sigmoid(Function):
    """y = 1 / (1 + e^-x);  dx = g * y * (1 - y)."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, x):
        y = stable_sigmoid(ctx.xp, x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return grad * (y * (1 - y))


def tanh(x: Tensor) -> Tensor:
    """Elementwise hyperbolic tangent; see the module docstring."""
    floats("tanh", x=x)
    return Tanh.apply(x)


def sigmoid(x: Tensor) -> Tensor:
    """Elementwise logistic sigmoid 1 / (1 + e^-x); see the module docstring."""
    floats("sigmoid", x=x)
    return Sigmoid.apply(x)
