"""Elementwise ops: add, sub, mul, div, neg, pow, exp, log, sqrt, relu.

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
        y = ctx.xp.maximum(x, ctx.xp.zeros((), dtype=x.dtype, device=x.device))
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return grad * ctx.xp.astype(y > 0, grad.dtype)


def _check_pair(op: str, a: Any, b: Any) -> None:
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError(f"{op}: at least one operand must be a Tensor")
    sa, sb = tuple(getattr(a, "shape", ())), tuple(getattr(b, "shape", ()))
    if not all(m == n or 1 in (m, n) for m, n in zip(sa[::-1], sb[::-1], strict=False)):
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


def exp(x: Tensor) -> Tensor:
    return Exp.apply(x)


def log(x: Tensor) -> Tensor:
    return Log.apply(x)


def sqrt(x: Tensor) -> Tensor:
    return Sqrt.apply(x)


def relu(x: Tensor) -> Tensor:
    return ReLU.apply(x)
