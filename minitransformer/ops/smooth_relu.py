"""Smooth ReLUs: GELU and SiLU (swish), the feed-forward activations of later Transformers.

Shapes: x (...) -> y (...), elementwise. Both are x times a soft gate in (0, 1) that opens
as x grows: near x for large x (like relu), near 0 for very negative x, smooth at 0.

    gelu(x) = x Φ(x),   Φ(x) = (1 + erf(x/√2)) / 2       Φ: the standard normal CDF
        dy/dx = Φ(x) + x φ(x),   φ(x) = e^(-x²/2) / √(2π)  φ: its density
    silu(x) = x σ(x),   σ(x) = 1 / (1 + e^-x)             (swish; the sigmoid of activations.py)
        dy/dx = σ(x) + x σ(x)(1 - σ(x)) = σ(x) (1 + x (1 - σ(x)))

This GELU is the exact one (PyTorch's ``gelu(approximate="none")``, Hugging Face's
``ACT2FN["gelu"]``), not the tanh approximation. erf comes from ``backend.special``.
Forward saves x and the gate (Φ or σ); backward needs only these (and GELU one exp, for φ).
Limits, kept finite for any x: as x -> +inf, y -> x and dy/dx -> 1; as x -> -inf, y -> 0
and dy/dx -> 0 (from below: both dip below 0 for negative x before rising back to 0).
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


def silu(x: Tensor) -> Tensor:
    """Elementwise SiLU (swish), x σ(x) (σ the logistic sigmoid); see the module docstring."""
    floats("silu", x=x)
    return SiLU.apply(x)


def swish(x: Tensor) -> Tensor:
    """silu under its other name (Ramachandran et al. 2017; Hendrycks & Gimpel's SiLU, 2016),
    the one Marian's config uses; errors name ``swish``."""
    floats("swish", x=x)
    return SiLU.apply(x)
