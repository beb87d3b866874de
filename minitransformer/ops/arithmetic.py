"""Arithmetic ops: add, sub, mul, div, neg, pow.

Shapes: inputs broadcast NumPy-style; y has the broadcast shape. Each backward gives
dL/d(input) = dL/dy * dy/d(input) elementwise; the autograd engine then sums it over the
broadcast axes (unbroadcast) so it matches the input's shape.
"""

from __future__ import annotations

from typing import Any

from ..function import Function
from ..tensor import Tensor
from . import checks
from .checks import no_bool, not_a_tensor, operands


class Add(Function):
    """y = a + b;  da = g, db = g."""

    @staticmethod
    def forward(ctx, a, b):
        return a + b

    @staticmethod
    def backward(ctx, grad):
        return grad, grad


class Sub(Function):
    """y = a - b;  da = g, db = -g."""

    @staticmethod
    def forward(ctx, a, b):
        return a - b

    @staticmethod
    def backward(ctx, grad):
        return grad, (-grad if ctx.needs_input_grad[1] else None)


class Mul(Function):
    """y = a * b;  da = g * b, db = g * a."""

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, grad):
        a, b = ctx.saved
        da = grad * b if ctx.needs_input_grad[0] else None
        db = grad * a if ctx.needs_input_grad[1] else None
        return da, db


class Div(Function):
    """y = a / b;  da = g / b, db = -g * a / b^2 = -g * y / b."""

    @staticmethod
    def forward(ctx, a, b):
        y = a / b
        ctx.save_for_backward(b, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        b, y = ctx.saved
        da = grad / b if ctx.needs_input_grad[0] else None
        db = -grad * y / b if ctx.needs_input_grad[1] else None
        return da, db


class Neg(Function):
    """y = -x;  dx = -g."""

    @staticmethod
    def forward(ctx, x):
        return -x

    @staticmethod
    def backward(ctx, grad):
        return -grad


class Pow(Function):
    """y = x^p for a Python number p;  dx = g * p * x^(p-1)."""

    @staticmethod
    def forward(ctx, x, p: float):
        ctx.save_for_backward(x)
        ctx.p = p
        return x**p

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved
        return grad * ctx.p * x ** (ctx.p - 1)


def add(a: Any, b: Any) -> Tensor:
    operands("add", a, b)
    return Add.apply(a, b)


def sub(a: Any, b: Any) -> Tensor:
    operands("sub", a, b)
    no_bool("sub", "a", a)
    no_bool("sub", "b", b)
    return Sub.apply(a, b)


def mul(a: Any, b: Any) -> Tensor:
    operands("mul", a, b)
    return Mul.apply(a, b)


def div(a: Any, b: Any) -> Tensor:
    operands("div", a, b)
    return Div.apply(a, b)


def neg(x: Tensor) -> Tensor:
    if not isinstance(x, Tensor):
        raise not_a_tensor("neg", "x", x)
    no_bool("neg", "x", x)
    return Neg.apply(x)


def pow(x: Tensor, exponent: float) -> Tensor:  # noqa: A001 - the math name
    """x ** exponent for a real number ``exponent`` (a float tensor for negative or
    fractional exponents: integers have neither)."""
    return Pow.apply(x, p=checks.exponent("pow", x, exponent))
