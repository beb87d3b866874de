"""Smooth ReLUs: GELU (exact and tanh), SiLU (swish): later Transformers' FFN activations.

Shapes: x (...) -> y (...), elementwise. Both are x times a soft gate in (0, 1) that opens
as x grows: near x for large x (like relu), near 0 for very negative x, smooth at 0.

    gelu(x) = x Φ(x),   Φ(x) = (1 + erf(x/√2)) / 2       Φ: the standard normal CDF
        dy/dx = Φ(x) + x φ(x),   φ(x) = e^(-x²/2) / √(2π)  φ: its density
    silu(x) = x σ(x),   σ(x) = 1 / (1 + e^-x)             (swish; the sigmoid of activations.py)
        dy/dx = σ(x) + x σ(x)(1 - σ(x)) = σ(x) (1 + x (1 - σ(x)))

    gelu_tanh(x) = x (1 + t) / 2,   t = tanh(u),   u = c (x + k x³),   c = √(2/π), k = 0.044715
        dy/dx = (1 + t) / 2 + x (1 - t²) c (1 + 3k x²) / 2     (tanh' = 1 - tanh²)

GELU is the exact one (PyTorch's ``gelu(approximate="none")``, Hugging Face's
``ACT2FN["gelu"]``); gelu_tanh is its tanh approximation, GPT-2's ``gelu_new`` (PyTorch's
``gelu(approximate="tanh")``), within 5e-4 of it. erf comes from ``backend.special``.
gelu_tanh's u uses x clipped to [-20, 20] (t is ±1 to the last bit beyond |x| = 10), so x³
never overflows float32 and y = x, dy/dx = 1 (or 0, 0) stay exact in the tails.
Forward saves x and the gate (Φ, σ, or t with gelu_tanh's clipped x); backward needs only
these (and GELU one exp, for φ).
Limits, kept finite for any x: as x -> +inf, y -> x and dy/dx -> 1; as x -> -inf, y -> 0
and dy/dx -> 0 (from below: all three dip below 0 for negative x before rising back to 0).
σ is computed from z = e^-|x|, which never overflows (as in ``activations.Sigmoid``).
"""

from __future__ import annotations

import math

from .. import backend
from ..function import Function
from ..tensor import Tensor
from .activations import stable_sigmoid
from .checks import floats

_SQRT_HALF = math.sqrt(0.5)  # 1/√2, as PyTorch multiplies (not divides) by it
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)  # c of gelu_tanh
_CUBIC = 0.044715  # k of gelu_tanh


class GELU(Function):
    """y = x Φ(x);  dx = g * (Φ(x) + x φ(x))."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, x):
        cdf = 0.5 * (1.0 + backend.erf(x * _SQRT_HALF))  # Φ(x)
        ctx.save_for_backward(x, cdf)
        return x * cdf

    @staticmethod
    def backward(ctx, grad):
        x, cdf = ctx.saved
        pdf = _INV_SQRT_2PI * ctx.xp.exp(-0.5 * (x * x))  # φ(x)
        return grad * (cdf + x * pdf)


class GELUTanh(Function):
    """y = x (1 + t) / 2, t = tanh(c (x + k x³));
    dx = g * ((1 + t) / 2 + x (1 - t²) c (1 + 3k x²) / 2)."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, x):
        xc = ctx.xp.clip(x, min=-20.0, max=20.0)  # t is ±1 beyond |x| = 10: x³ never overflows
        t = ctx.xp.tanh(_SQRT_2_OVER_PI * (xc + _CUBIC * (xc * xc * xc)))
        ctx.save_for_backward(x, xc, t)
        return 0.5 * x * (1.0 + t)

    @staticmethod
    def backward(ctx, grad):
        x, xc, t = ctx.saved
        du = _SQRT_2_OVER_PI * (1.0 + 3.0 * _CUBIC * (xc * xc))  # du/dx (of the clipped x)
        return grad * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du)


class SiLU(Function):
    """y = x σ(x);  dx = g * σ(x) (1 + x (1 - σ(x)))."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, x):
        sig = stable_sigmoid(ctx.xp, x)  # no overflow for any x
        ctx.save_for_backward(x, sig)
        return x * sig

    @staticmethod
    def backward(ctx, grad):
        x, sig = ctx.saved
        return grad * sig * (1 + x * (1 - sig))


def gelu(x: Tensor) -> Tensor:
    """Elementwise exact GELU, x Φ(x) (Φ the standard normal CDF); see the module docstring."""
    floats("gelu", x=x)
    return GELU.apply(x)


def gelu_tanh(x: Tensor) -> Tensor:
    """Elementwise GELU, tanh approximation: x (1 + tanh(√(2/π) (x + 0.044715 x³))) / 2,
    GPT-2's ``gelu_new``; see the module docstring."""
    floats("gelu_tanh", x=x)
    return GELUTanh.apply(x)


def silu(x: Tensor) -> Tensor:
    """Elementwise SiLU (swish), x σ(x) (σ the logistic sigmoid); see the module docstring."""
    floats("silu", x=x)
    return SiLU.apply(x)


def swish(x: Tensor) -> Tensor:
    """silu under its other name (Ramachandran et al. 2017; Hendrycks & Gimpel's SiLU, 2016),
    the one Marian's config uses; errors name ``swish``."""
    floats("swish", x=x)
    return SiLU.apply(x)
