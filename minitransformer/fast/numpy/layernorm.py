"""The LayerNorm twin for NumPy arrays: ``ops/layernorm.py``'s row math with fewer calls and
temporaries (off unless ``fast.enable()``; tested against the reference in
tests/fast/test_numpy.py; its measured worth: docs/measurements.md).

Each kernel is named after the part of the reference it replaces and returns what that part
returns, in the same layout, so the Function's other half (a backward after a fast forward,
or the reverse) works with either. No kernel writes into an array that a Function saved for
backward: a second backward (retain_graph=True) sees the saved arrays as forward left them.
They are faster by ufunc reductions (``np.add.reduce``: one C call, where ``xp.mean`` /
``xp.max`` are several Python calls), ``vecdot`` row sums, and writing into buffers they made
themselves (``out=``, ``-=``). With numba installed and ``compiled.enable()`` called, both
kernels hand float32/float64 rows to ``compiled.py``'s one-pass-per-row versions.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..rows import LayerNormRows
from . import compiled

Array = np.ndarray

_ONE_OVER_D: dict[tuple[int, Any], Array] = {}  # (D, dtype) -> (D,) vector of 1/D


def one_over(D: int, dtype: Any) -> Array:
    """The (D,) vector of 1/D (cached): ``vecdot`` with it is a row mean in one call."""
    w = _ONE_OVER_D.get((D, dtype))
    if w is None:
        w = _ONE_OVER_D[(D, dtype)] = np.full((D,), 1.0 / D, dtype=dtype)
    return w


def layer_norm_forward(
    x2: Array, gamma: Array, beta: Array, eps: float
) -> tuple[Array, Array, Array]:
    """Reference: ``LayerNorm.forward`` (ops/layernorm.py). x2 (N, D) -> y (N, D),
    x_hat (N, D), rstd (N, 1).

    Row means are ``vecdot`` against a cached (D,) vector of 1/D (3x faster than ``mean``
    over the last axis, and single-threaded, so unlike a BLAS gemv it does not stall on a
    busy CPU); rstd = sqrt(D / (sum((x - mu)^2) + D eps)) in three calls; x_hat is made in
    place in the buffer of x - mu.

    The sum of squares overflows for rows whose spread passes ~1.8e19 in float32 (and, with
    eps ~ 0, underflows for spreads below ~1e-19): those rows alone, found by one check on
    the (N,) sums, are redone by the reference's scaled math (``_layer_norm_rows_scaled``),
    so every finite row gets the reference's answer at no cost to ordinary rows."""
    if compiled.fits(x2, gamma, beta):  # numba's one pass per row, if on
        out = compiled.layer_norm_forward(x2, gamma, beta, eps)
        if out is not None:  # None: a row to redo, below
            return out
    D = x2.shape[1]
    w = one_over(D, x2.dtype)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):  # such rows are redone
        x_hat = x2 - np.vecdot(x2, w)[:, None]  # x - mu
        ss = np.vecdot(x_hat, x_hat)  # (N,) sums of squares
        rstd = np.sqrt(D / (ss + D * eps))[:, None]  # (N, 1)
        x_hat *= rstd
    tiny = _TINY.get(x2.dtype)
    if tiny is None:  # below this, squares of the typical element are subnormal
        info = np.finfo(x2.dtype)
        tiny = _TINY[x2.dtype] = float(info.smallest_normal / info.eps)
    redo = ~np.isfinite(ss)
    if eps < tiny:  # eps cannot hide an underflowed variance
        redo |= ss < D * tiny
    if np.logical_or.reduce(redo):
        rows = np.flatnonzero(redo)
        x_hat[rows], rstd[rows] = _layer_norm_rows_scaled(x2[rows], eps)
    y = x_hat * gamma
    y += beta
    return y, x_hat, rstd


_TINY: dict[Any, float] = {}  # dtype -> the smallest sum of squares kept to full precision


def _layer_norm_rows_scaled(x2: Array, eps: float) -> tuple[Array, Array]:
    """x_hat and rstd of the rows x2 (n, D), each divided by its largest |x| first: the
    reference math of ``LayerNorm.forward``, which never overflows or underflows."""
    a = np.max(np.abs(x2), axis=1, keepdims=True)  # (n, 1)
    a[~(a > 0)] = 1.0  # all-zero rows (and NaN ones, which stay NaN)
    xc = x2 / a
    xc -= np.mean(xc, axis=1, keepdims=True)  # (x - mu) / a
    sd = np.hypot(a * np.sqrt(np.mean(xc * xc, axis=1, keepdims=True)), np.sqrt(eps))
    with np.errstate(divide="ignore", invalid="ignore"):  # eps = 0 on a constant row: NaN
        xc *= a / sd
        return xc, 1.0 / sd


def layer_norm_backward(
    g: Array, x_hat: Array, rstd: Array, gamma: Array, needs: tuple[bool, ...]
) -> tuple[Array | None, Array | None, Array | None]:
    """Reference: ``LayerNorm.backward``. g (N, D) -> dx (N, D), dgamma (D,), dbeta (D,)
    (None where ``needs`` says no). g * x_hat is made once for dgamma and dx, the two row
    means are ``vecdot`` against gamma / D, and dx is built in one buffer."""
    need_x, need_gamma, need_beta = needs
    if all(needs) and compiled.fits(g, x_hat, rstd, gamma):  # numba, if on
        return compiled.layer_norm_backward(g, x_hat, rstd, gamma)
    dx = dgamma = dbeta = None
    if need_beta:
        dbeta = np.add.reduce(g, axis=0)  # (D,)
    if need_x or need_gamma:
        gx = g * x_hat  # (N, D)
        if need_gamma:
            dgamma = np.add.reduce(gx, axis=0)  # (D,)
        if need_x:
            gamma_d = gamma * (1.0 / g.shape[1])  # (D,) so that vecdot gives means
            mean_gx = np.vecdot(gx, gamma_d)[:, None]  # (N, 1)  mean(g_hat * x_hat)
            del gx
            dx = g * gamma  # (N, D)  g_hat
            dx -= np.vecdot(g, gamma_d)[:, None]  # - mean(g_hat)
            dx -= x_hat * mean_gx
            dx *= rstd
    return dx, dgamma, dbeta


class LayerNorm(LayerNormRows):
    """Twin of ``ops.layernorm.LayerNorm``'s row math, in the NumPy kernels above."""

    dtypes = None  # every dtype
    forward_kernel = staticmethod(layer_norm_forward)
    backward_kernel = staticmethod(layer_norm_backward)
