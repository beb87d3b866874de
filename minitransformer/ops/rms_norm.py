"""Root-mean-square normalisation over the last axis (Zhang & Sennrich, 2019), fused.

x (..., D), gamma (D,) -> y (..., D); rows = all leading positions. LayerNorm without the
mean and without beta: each row is divided by its root mean square, then scaled.
    r = 1 / sqrt(mean(x^2) + eps),   x_hat = x r,   y = x_hat * gamma
Backward, with g = dL/dy and g_hat = g * gamma (means over the last axis). From
dr/dx_j = -r^3 x_j / D:
    dL/dx_j = r g_hat_j - r^3 x_j mean(g_hat x) = r (g_hat_j - x_hat_j mean(g_hat x_hat))
    dx = r (g_hat - x_hat mean(g_hat x_hat)),     dgamma = sum over rows of g * x_hat
As in ``layernorm.py``, x^2 would overflow float32 once |x| passes ~1.8e19, so each row is
first divided by its largest |x|, a: x/a lies in [-1, 1], m = mean((x/a)^2) in (0, 1], and
    sqrt(mean(x^2) + eps) = hypot(a sqrt(m), sqrt(eps)),   x_hat = (x/a) * a / sqrt(...)
never overflow for finite x. eps > 0 keeps an all-zero row finite (y = 0 there).
Llama, Mistral and Qwen normalise with this (eps 1e-6 or 1e-5); PyTorch's
``torch.nn.functional.rms_norm`` and transformers' ``LlamaRMSNorm`` compute the same y.
"""

from __future__ import annotations

import math

from ..checks import real
from ..errors import ShapeError
from ..function import Function
from ..tensor import Tensor
from .checks import floats, same_dtype


class RMSNorm(Function):
    """y = x / sqrt(mean(x^2) + eps) * gamma over the last axis; see the module docstring.

    Trusts its inputs (``rms_norm`` checks them): x (..., D) and gamma (D,) of one float
    dtype, eps > 0 a Python float."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, x, gamma, eps: float = 1e-5):
        xp = ctx.xp
        D = x.shape[-1]
        a = xp.linalg.vector_norm(x, axis=-1, keepdims=True, ord=math.inf)  # (..., 1): max |x|
        a = xp.where(a > 0, a, 1.0)  # an all-zero row: divide by 1
        xs = x / a  # (..., D), in [-1, 1]: no square below overflows
        mean_sq = xp.vecdot(xs, xs)[..., None] / D  # mean((x / a)^2) <= 1
        rms = xp.hypot(a * xp.sqrt(mean_sq), math.sqrt(eps))  # sqrt(mean(x^2) + eps)
        x_hat = xs * (a / rms)  # (..., D): x r
        ctx.save_for_backward(x_hat, 1.0 / rms, gamma)
        return x_hat * gamma

    @staticmethod
    def backward(ctx, grad):
        x_hat, r, gamma = ctx.saved
        need_x, need_gamma = ctx.needs_input_grad
        dx = dgamma = None
        if need_gamma:
            rows = tuple(range(grad.ndim - 1))
            dgamma = ctx.xp.sum(grad * x_hat, axis=rows)  # (D,)
        if need_x:
            g_hat = grad * gamma  # (..., D)
            mean_gx = ctx.xp.vecdot(g_hat, x_hat)[..., None] / grad.shape[-1]  # (..., 1)
            dx = r * (g_hat - x_hat * mean_gx)
        return dx, dgamma


def rms_norm(x: Tensor, gamma: Tensor, eps: float = 1e-5) -> Tensor:
    """Divide x (..., D) by the root mean square of its last axis, then scale by gamma (D,)."""
    floats("rms_norm", x=x, gamma=gamma)
    eps = real(
        "rms_norm", "eps", eps, 0.0, low_open=True,
        fix="eps > 0 keeps 1 / sqrt(mean(x^2) + eps) finite on a zero row; the usual is 1e-5 "
        "or Llama's 1e-6",
    )  # fmt: skip
    if x.ndim == 0 or x.shape[-1] == 0:
        raise ShapeError(
            f"rms_norm: x has shape {tuple(x.shape)}, with no last (feature) axis or one of "
            "length 0; it needs D >= 1 features to normalise over, e.g. x of shape (B, T, D)"
        )
    D = x.shape[-1]
    if tuple(gamma.shape) != (D,):
        raise ShapeError(
            f"rms_norm: gamma has shape {tuple(gamma.shape)} but x has shape {tuple(x.shape)}; "
            f"gamma must have shape ({D},), the size of x's last (feature) axis"
        )
    same_dtype("rms_norm", "gamma", gamma, x)
    return RMSNorm.apply(x, gamma, eps=eps)
