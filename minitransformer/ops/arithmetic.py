"""Arithmetic ops: add, sub, mul, div, neg, pow.

Shapes: inputs broadcast NumPy-style; y has the broadcast shape. Each backward gives
dL/d(input) = dL/dy * dy/d(input) elementwise; the autograd engine then sums it over the
broadcast axes (unbroadcast) so it matches the input's shape.
"""

from __future__ import annotations

from typing import Any

from ..errors import ShapeError
from ..function import Function
from ..tensor import Tensor


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


def _check_pair(op: str, a: Any, b: Any) -> None:
    """One operand is a Tensor, and the two shapes broadcast (equal shapes: nothing to do)."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError(f"{op}: at least one operand must be a Tensor")
    sa, sb = tuple(getattr(a, "shape", ())), tuple(getattr(b, "shape", ()))
    if sa != sb and not all(
        m == n or 1 in (m, n) for m, n in zip(sa[::-1], sb[::-1], strict=False)
    ):
        raise ShapeError(
            f"{op}: shapes {sa} and {sb} do not broadcast: aligned from the right, each pair "
            "of axes must be equal or one of them 1; reshape one operand (e.g. x[:, None])"
        )


def add(a: Any, b: Any) -> Tensor:
    _check_pair("add", a, b)
    return Add.apply(a, b)


def sub(a: Any, b: Any) -> Tensor:
    _check_pair("sub", a, b)
    return Sub.apply(a, b)


def mul(a: Any, b: Any) -> Tensor:
    _check_pair("mul", a, b)
    return Mul.apply(a, b)


def div(a: Any, b: Any) -> Tensor:
    _check_pair("div", a, b)
    return Div.apply(a, b)


def neg(x: Tensor) -> Tensor:
    return Neg.apply(x)


def pow(x: Tensor, exponent: float) -> Tensor:  # noqa: A001 - the math name
    if isinstance(exponent, Tensor):
        raise TypeError("pow: the exponent must be a Python number, not a Tensor")
    return Pow.apply(x, p=exponent)
