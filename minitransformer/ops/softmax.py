"""Softmax and log-softmax along one axis, fused, with closed-form backward passes.

softmax:     y_i = e^(x_i - m) / sum_j e^(x_j - m)        m = max_j x_j (stability only)
             dx = y * (g - sum_j g_j y_j)                  (Jacobian diag(y) - y y^T, applied)
log_softmax: o_i = x_i - m - log sum_j e^(x_j - m)
             dx = g - softmax(x) * sum_j g_j

Shapes: x (..., n, ...) -> y of the same shape; ``axis`` picks the n axis (default -1).
Subtracting the row max keeps every exponent <= 0, so logits of +-1e4 neither overflow
nor lose the answer. Masked entries (-inf) get probability 0 and zero gradient.
A row that is entirely -inf (everything masked) is defined as: softmax -> all 0 (not NaN),
gradient 0; log_softmax -> all -inf, gradient dx = g (its softmax is taken as 0). Both
stay NaN-free in forward and backward. An axis of length 0 (no classes) is refused.
The Functions are this math as written, and they are what runs (see ``fast/`` for twins).
Twins: ``fast/cupy/softmax.py`` (forward; NumPy's twins measured 1.00 and were deleted).
"""

from __future__ import annotations

from .. import backend
from ..checks import is_int
from ..errors import DTypeError, ShapeError
from ..function import Function
from ..tensor import Tensor
from .checks import empty, not_a_tensor


def shifted(xp, x, axis: int):
    """x - m with m = max over ``axis`` (keepdims), m = 0 on rows whose max is not finite
    (an all -inf row stays -inf instead of becoming NaN = -inf - -inf)."""
    m = xp.max(x, axis=axis, keepdims=True)
    return x - xp.where(xp.isfinite(m), m, 0.0)


def safe_sum(xp, e, axis: int):
    """Sum of e over ``axis`` (keepdims) with 0 replaced by 1: an all-masked row divides
    by 1 (softmax 0) and its log is 0 (log_softmax -inf), never 0/0."""
    s = xp.sum(e, axis=axis, keepdims=True)
    return xp.where(s > 0, s, 1.0)


class Softmax(Function):
    """y = softmax(x) along ``axis``; dx = y * (g - <g, y>)."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, x, axis: int = -1):
        xp = ctx.xp
        e = xp.exp(shifted(xp, x, axis))  # e^(x - m)
        y = e / safe_sum(xp, e, axis)
        ctx.save_for_backward(y)
        ctx.axis = axis
        return y

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        (y,) = ctx.saved
        gy = xp.sum(grad * y, axis=ctx.axis, keepdims=True)  # <g, y>
        return y * (grad - gy)


class LogSoftmax(Function):
    """o = x - logsumexp(x) along ``axis``; dx = g - e^o * sum(g)."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, x, axis: int = -1):
        xp = ctx.xp
        z = shifted(xp, x, axis)  # x - m
        o = z - xp.log(safe_sum(xp, xp.exp(z), axis))
        ctx.save_for_backward(o)
        ctx.axis = axis
        return o

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        (o,) = ctx.saved
        return grad - xp.exp(o) * xp.sum(grad, axis=ctx.axis, keepdims=True)


def _check(op: str, x: Tensor, axis: int) -> int:
    if not isinstance(x, Tensor):
        raise not_a_tensor(op, "x", x)
    if not backend.dtype_name(x.dtype).startswith("float"):
        raise DTypeError(
            f"{op}: needs a floating-point tensor, got {backend.dtype_name(x.dtype)}; convert it "
            "first with x.astype('float32')"
        )
    bad_type = not is_int(axis)
    if bad_type or x.ndim == 0 or not -x.ndim <= axis < x.ndim:
        raise ShapeError(
            f"{op}: axis {axis} is out of range for a tensor of shape {x.shape}; "
            f"use an axis in [-{max(x.ndim, 1)}, {max(x.ndim, 1) - 1}]"
        )
    if x.shape[axis] == 0:  # a distribution over no classes: nothing sums to 1
        empty(op, x.shape, (axis % x.ndim,))
    return axis % x.ndim - x.ndim  # negative: vecdot in the standard wants it so


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """Probabilities along ``axis`` (rows sum to 1; all -inf rows give 0)."""
    return Softmax.apply(x, axis=_check("softmax", x, axis))


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """Log-probabilities along ``axis`` (all -inf rows give -inf)."""
    return LogSoftmax.apply(x, axis=_check("log_softmax", x, axis))
