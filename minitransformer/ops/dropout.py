"""Inverted dropout (Srivastava et al., 2014), as the paper applies it with P_drop = 0.1.

x (...) -> y (...):  y = x * m / (1 - p),  m ~ Bernoulli(1 - p) elementwise (m = bits >=
p 2^32 for 32 random bits per element drawn on x's device: ``Generator.keep_mask``).
Dividing by 1 - p at training time keeps E[y] = x, so evaluation is the identity.
Backward: dx = g * m / (1 - p).
Speed: the mask is stored as bool (1 byte per element, 4x less than a float mask), and
forward and backward are two array calls each, ``where(m, x * scale, 0)``.

``dropout_add(x, r)`` = r + dropout(x), the residual connection around each sublayer
(``r + Dropout(Sublayer(r))``), as one op: dr = g, dx = g * m / (1 - p).

This is what runs. On a GPU the fast tier's twins (unless MT_CUDA_KERNELS=0) take one
kernel launch each, making the same mask's random bits from the
two keys of the draw (``Generator.dropout_keys``): they save the keys, not a mask. On the
CPU with the tier on (the CLI), the NumPy twins multiply by the same mask instead
of ``where`` (NumPy's ``where`` branches on every element of a random mask: ~4x slower).
Twins: ``fast/numpy/dropout.py``, ``fast/cupy/dropout.py`` (``fast/cuda/dropout.cu``).
"""

from __future__ import annotations

from typing import Any

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
        ctx.scale = 1.0 / (1.0 - p)
        keep = generator.keep_mask(tuple(x.shape), p)  # bool, P(True) = 1 - p
        ctx.save_for_backward(keep)
        return ctx.xp.where(keep, x * ctx.scale, 0.0)  # two calls, one temporary

    @staticmethod
    def backward(ctx, grad):
        (keep,) = ctx.saved
        return ctx.xp.where(keep, grad * ctx.scale, 0.0)


class DropoutAdd(Function):
    """y = r + x * m / (1 - p): dropout of x added to the residual r (one draw of m, as
    ``Dropout``). dr = g, dx = g * m / (1 - p). The residual comes first, so the graph
    is that of ``r + dropout(x)``."""

    @staticmethod
    def forward(ctx, r, x, p: float, generator: backend.Generator):
        ctx.scale = 1.0 / (1.0 - p)
        keep = generator.keep_mask(tuple(x.shape), p)
        ctx.save_for_backward(keep)
        return r + ctx.xp.where(keep, x * ctx.scale, 0.0)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[1]:
            return grad, None
        (keep,) = ctx.saved
        return grad, ctx.xp.where(keep, grad * ctx.scale, 0.0)


def _check(where: str, x: Tensor, p: float) -> None:
    """x a Tensor and p a probability in [0, 1), else ArgumentError naming ``where``."""
    if not isinstance(x, Tensor):
        raise not_a_tensor(where, "x", x)
    ok = is_real(p) and 0.0 <= p < 1.0
    if not ok:  # NaN fails 0 <= p, a string or None fails the type
        raise ArgumentError(
            f"{where}: p={p!r} is the probability of zeroing an element and must be in "
            "[0, 1); use p=0 (or training=False) for no dropout"
        )


def _generator(where: str, x: Tensor, generator: Any) -> backend.Generator:
    """``generator`` (or x's device's default one), checked to live on x's device."""
    if generator is not None and not isinstance(generator, backend.Generator):
        raise ArgumentError(
            f"{where}: generator must be a backend.Generator or None, got "
            f"{type(generator).__name__}; use mt.backend.Generator(seed, device=x.device)"
        )
    gen = generator or backend.default_generator(x.device)
    if gen.device != x.device:
        raise DeviceError(
            f"{where}: the generator lives on {gen.device} but x is on {x.device}; "
            f"use backend.Generator(seed, device={x.device!r})"
        )
    return gen


def dropout(
    x: Tensor, p: float = 0.1, training: bool = True, generator: backend.Generator | None = None
) -> Tensor:
    """Zero each element with probability p and scale the rest by 1/(1-p); in evaluation
    (training=False) or with p == 0, return x itself."""
    _check("dropout", x, p)
    if not training or p == 0.0:
        return x
    return Dropout.apply(x, p=float(p), generator=_generator("dropout", x, generator))


def dropout_add(
    x: Tensor,
    residual: Tensor,
    p: float = 0.1,
    training: bool = True,
    generator: backend.Generator | None = None,
) -> Tensor:
    """residual + dropout(x, p, training, generator) as one op (the same numbers and the
    same draw). ``residual`` must be a Tensor of x's shape, dtype and device. In evaluation
    or with p == 0: residual + x."""
    _check("dropout_add", x, p)
    if not isinstance(residual, Tensor):
        raise not_a_tensor("dropout_add", "residual", residual)
    same = residual.device == x.device and residual.shape == x.shape
    if not same or backend.dtype_name(residual.dtype) != backend.dtype_name(x.dtype):
        raise ArgumentError(
            f"dropout_add: residual must match x, got residual {residual.shape} "
            f"{backend.dtype_name(residual.dtype)} on {residual.device} and x {x.shape} "
            f"{backend.dtype_name(x.dtype)} on {x.device}; use residual + dropout(x) to broadcast"
        )
    if not training or p == 0.0:
        return residual + x
    gen = _generator("dropout_add", x, generator)
    return DropoutAdd.apply(residual, x, p=float(p), generator=gen)
