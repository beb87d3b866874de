"""Layer normalisation over the last axis (Ba, Kiros & Hinton, 2016), fused.

x (..., D), gamma (D,), beta (D,) -> y (..., D); rows r = all leading positions (N of them).
    mu = mean(x),  var = mean((x - mu)^2)  (biased, as PyTorch),  rstd = 1 / sqrt(var + eps)
    x_hat = (x - mu) * rstd,  y = x_hat * gamma + beta
Backward, with g = dL/dy and g_hat = g * gamma (all means over the last axis):
    dx = rstd * (g_hat - mean(g_hat) - x_hat * mean(g_hat * x_hat))
    dgamma = sum over rows of g * x_hat,   dbeta = sum over rows of g
Speed: row sums are ``vecdot`` (3x faster than ``mean`` over the last axis on NumPy, and
single-threaded, so unlike a BLAS gemv it does not stall on a busy CPU), the mean against
a cached (D,) vector of 1/D, and rstd = sqrt(D / (sum((x - mu)^2) + D eps)) in three calls;
x_hat is made in place, and backward allocates two (N, D) arrays.
"""

from __future__ import annotations

import math

from .. import backend
from ..checks import is_real
from ..errors import ArgumentError, DTypeError, ShapeError
from ..function import Function
from ..tensor import Tensor


class LayerNorm(Function):
    """y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, x, gamma, beta, eps: float = 1e-5):
        xp = ctx.xp
        D = x.shape[-1]
        x2 = xp.reshape(x, (-1, D))  # (N, D)
        x_hat = x2 - xp.vecdot(x2, _mean_weights(xp, D, x.dtype, x.device))[:, None]  # x - mu
        rstd = xp.sqrt(D / (xp.vecdot(x_hat, x_hat) + D * eps))  # (N,) 1/sqrt(var + eps)
        x_hat *= rstd[:, None]
        y = x_hat * gamma
        y += beta
        ctx.save_for_backward(x_hat, rstd, gamma)
        return xp.reshape(y, x.shape)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        x_hat, rstd, gamma = ctx.saved
        N, D = x_hat.shape
        g = xp.reshape(grad, (N, D))  # (N, D)
        need_x, need_gamma, need_beta = ctx.needs_input_grad
        dx = dgamma = dbeta = None
        if need_beta:
            dbeta = xp.sum(g, axis=0)  # (D,)
        if need_x or need_gamma:
            gx = g * x_hat  # (N, D)
            if need_gamma:
                dgamma = xp.sum(gx, axis=0)  # (D,)
            if need_x:
                gamma_d = gamma * (1.0 / D)  # (D,) so that vecdot gives means
                mean_gx = xp.vecdot(gx, gamma_d)  # (N,)  mean(g_hat * x_hat)
                del gx
                dx = g * gamma  # (N, D)  g_hat
                dx -= xp.vecdot(g, gamma_d)[:, None]  # - mean(g_hat)
                dx -= x_hat * mean_gx[:, None]
                dx *= rstd[:, None]
                dx = xp.reshape(dx, grad.shape)
        return dx, dgamma, dbeta


_weights: dict[tuple, object] = {}


def _mean_weights(xp, D: int, dtype, device):
    """A (D,) vector of 1/D (cached per size, dtype and device): vecdot(x, it) = mean(x)."""
    key = (D, type(dtype), dtype, str(device))  # the type: dtypes of two libraries hash alike
    w = _weights.get(key)
    if w is None:
        w = _weights[key] = xp.full((D,), 1.0 / D, dtype=dtype, device=device)
    return w


def layer_norm(x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5) -> Tensor:
    """Normalise x (..., D) over its last axis, then scale by gamma (D,) and shift by beta (D,)."""
    if not (is_real(eps) and 0 <= eps < math.inf):  # 0 is allowed: lesson 04 shows why not
        raise ArgumentError(
            f"layer_norm: eps={eps!r} must be a finite number >= 0 (eps > 0 keeps 1 / sqrt(var "
            "+ eps) finite on a constant row); the usual is eps=1e-5"
        )
    D = x.shape[-1] if x.ndim else None
    for name, p in (("gamma", gamma), ("beta", beta)):
        if tuple(p.shape) != (D,):
            raise ShapeError(
                f"layer_norm: {name} has shape {tuple(p.shape)} but x has shape {tuple(x.shape)}; "
                f"{name} must have shape ({D},), the size of x's last (feature) axis"
            )
        if p.dtype != x.dtype and backend.dtype_name(p.dtype) != backend.dtype_name(x.dtype):
            raise DTypeError(
                f"layer_norm: {name} is {backend.dtype_name(p.dtype)} but x is "
                f"{backend.dtype_name(x.dtype)}; give the parameters x's dtype (model.to / astype)"
            )
    return LayerNorm.apply(x, gamma, beta, eps=float(eps))
