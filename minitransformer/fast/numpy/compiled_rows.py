"""More of numba's kernels (``compiled.py`` switches them on with its own): the
cross-entropy's rows (``loss.py``) and dropout's apply-and-scale pass (``dropout.py``).
Plain Python functions until ``compiled.enable()`` compiles them; importing this module
imports no numba.

The cross-entropy's forward is two passes around NumPy's ``exp`` (whose SIMD kernel is 10x
faster than numba's scalar ``exp``: a one-pass kernel was 3x slower than the NumPy twin);
its backward is one pass with the NumPy twin's arithmetic in its order (no ``fastmath``),
so its values are the twin's to the bit. Dropout's pass is ``x * scale * keep`` (+ r) as the
twin's: a dropped NaN or Inf gives NaN, a dropped negative -0.0. The keep mask is the
generator's (``backend/random.py``), never made here.
"""

from __future__ import annotations

import numpy as np

Array = np.ndarray


def cross_entropy_forward(kernels: dict, x: Array, t: Array, eps: float):
    """``loss.cross_entropy_forward``: (loss (N,), e (N, V), s (N, 1)); x (N, V) fits,
    t (N,) intp ids in range."""
    N, V = x.shape
    f = x.dtype.type
    z = np.empty_like(x)
    loss, z_mean = np.empty((N,), dtype=x.dtype), np.empty((N,), dtype=x.dtype)
    m = np.maximum.reduce(x, axis=-1)  # (N,) NumPy's SIMD max; NaN where a row has one
    kernels["cross_entropy_shift"](x, m, t, f(1.0 / V), z, loss, z_mean)  # z = x - m
    np.exp(z, out=z)  # e = e^z (NumPy's SIMD exp)
    s = np.empty((N, 1), dtype=x.dtype)
    kernels["cross_entropy_sums"](z, z_mean, f(eps), f(1.0 - eps), s, loss)
    return loss, z, s


def cross_entropy_backward(kernels: dict, e: Array, s: Array, t: Array, w_rows: Array,
                           eps: float) -> Array:  # fmt: skip
    """``loss.cross_entropy_backward`` with w as one weight per row, w_rows (N,) of e's
    dtype: (e (w / s) - w eps / V) and - w (1 - eps) at each row's target, one pass."""
    f = e.dtype.type
    d = np.empty_like(e)
    kernels["cross_entropy_backward"](e, s, t, w_rows, f(eps / e.shape[1]), f(1.0 - eps),
                                      bool(eps), d)  # fmt: skip
    return d


def _cross_entropy_shift_rows(x, m, t, inv_v, z, loss, z_mean):  # numba: z = x - m (m = 0
    N, V = x.shape  # where the row's max is not finite, as the twin's), -z_t, mean(z)
    zero = x.dtype.type(0)  # not x * 0, which is NaN for an infinite x
    for i in range(N):
        m_i = m[i]
        if not np.isfinite(m_i):
            m_i = zero
        acc = zero
        for j in range(V):
            zj = x[i, j] - m_i
            z[i, j] = zj
            acc += zj * inv_v  # sum(z / V): no overflow where sum(z) would
        loss[i] = -z[i, t[i]]
        z_mean[i] = acc


def _cross_entropy_sum_rows(e, z_mean, eps, one_eps, s, loss):  # numba: s = sum(e) (0 -> 1)
    N, V = e.shape  # loss = (1 - eps)(log s - z_t) + eps (log s - mean(z))
    zero = e.dtype.type(0)
    for i in range(N):
        acc = zero
        for j in range(V):
            acc += e[i, j]
        if acc == 0:
            acc = acc + 1
        s[i, 0] = acc
        log_s = np.log(acc)
        row = loss[i] + log_s
        if eps:
            row = row * one_eps + eps * (log_s - z_mean[i])
        loss[i] = row


def _cross_entropy_backward_rows(e, s, t, w, eps_v, one_eps, smoothing, d):  # numba, exact
    N, V = e.shape  # the NumPy twin's operations, element by element, in its order
    for i in range(N):
        scale = w[i] / s[i, 0]
        off = w[i] * eps_v
        for j in range(V):
            if smoothing:
                d[i, j] = e[i, j] * scale - off
            else:
                d[i, j] = e[i, j] * scale
        d[i, t[i]] -= w[i] * one_eps


def dropout_apply(kernels: dict, x: Array, keep: Array, scale: float, r: Array | None = None):
    """x * scale * keep (+ r, when given) in one pass; x, keep (bool) and r one shape,
    C-contiguous, x and r one float dtype (``compiled.fits``)."""
    y = np.empty_like(x)
    f = x.dtype.type
    flat = (x.reshape(-1), keep.reshape(-1))
    if r is None:
        kernels["dropout"](*flat, f(scale), y.reshape(-1))
    else:
        kernels["dropout_add"](*flat, f(scale), r.reshape(-1), y.reshape(-1))
    return y


def _dropout_elements(x, keep, scale, y):  # numba, exact: (x * scale) * keep, as the twin
    zero, one = x.dtype.type(0), x.dtype.type(1)
    for i in range(x.shape[0]):
        y[i] = (x[i] * scale) * (one if keep[i] else zero)


def _dropout_add_elements(x, keep, scale, r, y):  # numba, exact: then + r, as the twin
    zero, one = x.dtype.type(0), x.dtype.type(1)
    for i in range(x.shape[0]):
        y[i] = (x[i] * scale) * (one if keep[i] else zero) + r[i]
