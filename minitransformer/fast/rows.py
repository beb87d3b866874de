"""The row ops' twins, written once for every array library: each library's module subclasses
them with its own kernels (``fast/numpy/``'s NumPy ones, ``fast/cupy/``'s CUDA ones).

A twin replaces only its reference's row math (``rows_forward`` / ``rows_backward``, which
``ops/layernorm.py`` and ``ops/loss.py`` call through ``ctx.fn``); the ignored rows and the
reduction stay the reference's. The kernels take rows as a 2-D (N, D) array: LayerNorm's
twin makes that view of x (..., D) itself (the reference needs none). The kernels are class
attributes, so the library's class says which kernels it runs, in two lines.
"""

from __future__ import annotations

from typing import Any, ClassVar

from ..ops.layernorm import LayerNorm
from ..ops.loss import CrossEntropy


class LayerNormRows(LayerNorm):
    """LayerNorm whose row math is ``forward_kernel(x2, gamma, beta, eps)`` -> (y, x_hat,
    rstd) and ``backward_kernel(g, x_hat, rstd, gamma, needs)`` -> (dx, dgamma, dbeta) on
    x2 (N, D), the rows of x (..., D); x_hat and rstd are kept as the kernel made them."""

    forward_kernel: ClassVar[Any]
    backward_kernel: ClassVar[Any]

    @classmethod
    def rows_forward(cls, xp, x, gamma, beta, eps: float):
        x2 = xp.reshape(x, (-1, x.shape[-1]))  # (N, D): one row per position
        y, x_hat, rstd = cls.forward_kernel(x2, gamma, beta, eps)
        return xp.reshape(y, x.shape), x_hat, rstd

    @classmethod
    def rows_backward(cls, xp, g, x_hat, rstd, gamma, needs):
        dx, dgamma, dbeta = cls.backward_kernel(
            xp.reshape(g, x_hat.shape), x_hat, rstd, gamma, needs
        )
        return (None if dx is None else xp.reshape(dx, g.shape)), dgamma, dbeta


class CrossEntropyRows(CrossEntropy):
    """CrossEntropy whose row math is ``forward_kernel(x, t, eps)`` -> (loss, e, s) and
    ``backward_kernel(e, s, t, w, eps)`` -> dlogits."""

    forward_kernel: ClassVar[Any]
    backward_kernel: ClassVar[Any]

    @classmethod
    def rows_forward(cls, xp, x, t, eps: float):
        return cls.forward_kernel(x, t, eps)

    @classmethod
    def rows_backward(cls, xp, e, s, t, w, eps: float):
        return cls.backward_kernel(e, s, t, w, eps)
