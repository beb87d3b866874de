"""Layer normalisation over the last axis (Ba, Kiros & Hinton, 2016), fused.

x (..., D), gamma (D,), beta (D,) -> y (..., D); rows r = all leading positions (N of them).
    mu = mean(x),  var = mean((x - mu)^2)  (biased, as PyTorch),  rstd = 1 / sqrt(var + eps)
    x_hat = (x - mu) * rstd,  y = x_hat * gamma + beta
Backward, with g = dL/dy and g_hat = g * gamma (all means over the last axis):
    dx = rstd * (g_hat - mean(g_hat) - x_hat * mean(g_hat * x_hat))
    dgamma = sum over rows of g * x_hat,   dbeta = sum over rows of g
Computed as written, (x - mu)^2 overflows float32 once |x - mu| passes ~1.8e19 (and float16
at 256), and var = inf gives y = 0 where the answer is about +-1. So each row is first
divided by its largest |x|, a (its infinity norm): x / a lies in [-1, 1], its variance v in
[0, 1], and
    sqrt(var + eps) = hypot(a sqrt(v), sqrt(eps)),   x_hat = (x/a - mean(x/a)) * a / sqrt(var + eps)
never overflow, for every finite x (float32: up to 3.4e38; tiny rows such as 1e-30 keep
their precision too, even with eps = 0). rstd = 1 / sqrt(var + eps) itself is below 1e-38
(subnormal, fewer bits) only when the row's spread passes ~1e38.
The Function below is this math as written, and it is what runs (the fast tier's twins,
``minitransformer/fast``, replace it only where switched on).
Twins: ``fast/numpy/layernorm.py``, ``fast/cupy/layernorm.py`` (``fast/cuda/layer_norm.cu``).
"""

from __future__ import annotations

import math

from ..checks import is_real
from ..errors import ArgumentError, ShapeError
from ..function import Function
from ..tensor import Tensor
from .checks import floats, same_dtype, tensors


class LayerNorm(Function):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis.

    The math of the rows (every leading position of x is a row of D) is ``rows_forward`` /
    ``rows_backward``, called through ``ctx.fn`` (this class, or a fast twin that replaces
    just those two)."""

    fresh_grads = True

    @staticmethod
    def rows_forward(xp, x, gamma, beta, eps: float):
        """x (..., D) -> y (..., D), x_hat (..., D), rstd (..., 1)."""
        D = x.shape[-1]
        a = xp.linalg.vector_norm(x, axis=-1, keepdims=True, ord=math.inf)  # (..., 1): max |x|
        a = xp.where(a > 0, a, 1.0)  # an all-zero row: divide by 1
        xs = x / a  # (..., D), in [-1, 1]: no square below overflows
        xc = xs - xp.mean(xs, axis=-1, keepdims=True)  # (x - mu) / a
        var = xp.vecdot(xc, xc)[..., None] / D  # mean of squares: var(x) / a^2, biased, <= 1
        sd = xp.hypot(a * xp.sqrt(var), math.sqrt(eps))  # sqrt(var(x) + eps): (..., 1)
        x_hat = xc * (a / sd)  # (..., D): (x - mu) * rstd, with a / sd of order 1
        return x_hat * gamma + beta, x_hat, 1.0 / sd

    @staticmethod
    def rows_backward(xp, g, x_hat, rstd, gamma, needs):
        """g (..., D) -> dx (..., D), dgamma (D,), dbeta (D,); None where ``needs`` says no.
        dgamma and dbeta sum over every row: all the leading axes."""
        need_x, need_gamma, need_beta = needs
        rows = tuple(range(g.ndim - 1))
        dx = dgamma = dbeta = None
        if need_beta:
            dbeta = xp.sum(g, axis=rows)  # (D,)
        if need_gamma:
            dgamma = xp.sum(g * x_hat, axis=rows)  # (D,)
        if need_x:
            g_hat = g * gamma  # (..., D)
            mean_g = xp.mean(g_hat, axis=-1, keepdims=True)  # (..., 1)
            mean_gx = xp.vecdot(g_hat, x_hat)[..., None] / g.shape[-1]  # (..., 1): a row dot
            dx = rstd * (g_hat - mean_g - x_hat * mean_gx)
        return dx, dgamma, dbeta

    @staticmethod
    def forward(ctx, x, gamma, beta, eps: float = 1e-5):
        y, x_hat, rstd = ctx.fn.rows_forward(ctx.xp, x, gamma, beta, eps)
        ctx.save_for_backward(x_hat, rstd, gamma)
        return y

    @staticmethod
    def backward(ctx, grad):
        x_hat, rstd, gamma = ctx.saved
        return ctx.fn.rows_backward(ctx.xp, grad, x_hat, rstd, gamma, ctx.needs_input_grad)


def layer_norm(x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5) -> Tensor:
    """Normalise x (..., D) over its last axis, then scale by gamma (D,) and shift by beta (D,)."""
    tensors("layer_norm", x=x, gamma=gamma, beta=beta)
    if not (is_real(eps) and 0 <= eps < math.inf):  # 0 is allowed: lesson 04 shows why not
        raise ArgumentError(
            f"layer_norm: eps={eps!r} must be a finite number >= 0 (eps > 0 keeps 1 / sqrt(var "
            "+ eps) finite on a constant row); the usual is eps=1e-5"
        )
    floats("layer_norm", x=x)
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ShapeError(
            f"layer_norm: x has shape {x.shape}, with no last (feature) axis or one of "
            "length 0; it needs D >= 1 features to normalise over, e.g. x of shape (B, T, D)"
        )
    D = x.shape[-1]
    for name, p in (("gamma", gamma), ("beta", beta)):
        if p.shape != (D,):
            raise ShapeError(
                f"layer_norm: {name} has shape {p.shape} but x has shape {x.shape}; "
                f"{name} must have shape ({D},), the size of x's last (feature) axis"
            )
        same_dtype("layer_norm", name, p, x)
    return LayerNorm.apply(x, gamma, beta, eps=float(eps))
