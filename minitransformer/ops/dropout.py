"""Inverted dropout (Srivastava et al., 2014), as the paper applies it with P_drop = 0.1.

x (...) -> y (...):  y = x * m / (1 - p),  m ~ Bernoulli(1 - p) elementwise (m = u >= p
for one uniform draw u on x's device: ``Generator.keep_mask``). Dividing by 1 - p at training
time keeps E[y] = x, so evaluation is the identity.  Backward: dx = g * m / (1 - p).
Speed: the mask is stored as bool (1 byte per element, 4x less than a float mask), and
forward and backward are two array calls each, ``where(m, x * scale, 0)``.
"""

from __future__ import annotations

from .. import backend
from ..checks import is_real
from ..errors import ArgumentError, DeviceError
from ..function import Function
from ..tensor import Tensor
from .checks import not_a_tensor


class Dropout(Function):
    """y = x * m / (1 - p) with a fresh Bernoulli(1 - p) mask m from ``generator``."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, x, p: float, generator: backend.Generator):
        keep = generator.keep_mask(tuple(x.shape), p)  # bool, P(True) = 1 - p
        ctx.save_for_backward(keep)
        ctx.scale = 1.0 / (1.0 - p)
        return ctx.xp.where(keep, x * ctx.scale, 0.0)  # two calls, one temporary

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved
        return ctx.xp.where(keep, grad * ctx.scale, 0.0)


def dropout(
    x: Tensor, p: float = 0.1, training: bool = True, generator: backend.Generator | None = None
) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p); in evaluation
    (training=False) or with p == 0, return x itself."""
    if type(x) is not Tensor and not isinstance(x, Tensor):
        raise not_a_tensor("dropout", "x", x)
    ok = is_real(p) and 0.0 <= p < 1.0
    if not ok:  # NaN fails 0 <= p, a string or None fails the type
        raise ArgumentError(
            f"dropout: p={p!r} is the probability of zeroing an element and must be in [0, 1); "
            "use p=0 (or training=False) for no dropout"
        )
    if not training or p == 0.0:
        return x
    if generator is not None and not isinstance(generator, backend.Generator):
        raise ArgumentError(
            f"dropout: generator must be a backend.Generator or None, got "
            f"{type(generator).__name__}; use mt.backend.Generator(seed, device=x.device)"
        )
    gen = generator or backend.default_generator(x.device)
    if gen.device != x.device:
        raise DeviceError(
            f"dropout: the generator lives on {gen.device} but x is on {x.device}; "
            f"use backend.Generator(seed, device={x.device!r})"
        )
    return Dropout.apply(x, p=float(p), generator=gen)
