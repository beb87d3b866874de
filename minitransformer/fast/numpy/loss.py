"""The cross-entropy's twin for NumPy arrays: ``ops/loss.py``'s row math in one reused (N, V)
buffer and no one-hot (off unless ``fast.enable()``; tested against the reference in
tests/fast/test_numpy.py; its measured worth: docs/measurements.md). The kernels return what
the reference's ``rows_forward`` / ``rows_backward`` return, and never write into what
forward saved (retain_graph=True allows a second backward). With numba installed and
``compiled.enable()`` called, float32/float64 rows go to ``compiled_rows.py``'s kernels: two
passes around NumPy's exp forward, one pass backward (tested in
tests/fast/test_numpy_compiled_kernels.py).
"""

from __future__ import annotations

import numpy as np

from ..rows import CrossEntropyRows
from . import compiled
from .layernorm import one_over

Array = np.ndarray


def _shifted(x: Array, axis: int) -> Array:
    """x - max over ``axis`` (0 on rows whose max is not finite), as a new array."""
    m = np.maximum.reduce(x, axis=axis, keepdims=True)
    m[~np.isfinite(m)] = 0.0
    return x - m


def cross_entropy_forward(x: Array, t: Array, eps: float) -> tuple[Array, Array, Array]:
    """Reference: ``CrossEntropy.forward`` (ops/loss.py). x (N, V) logits, t (N,) ids in
    range -> loss per row (N,), e = e^(x - m) (N, V), s = its row sums (N, 1) (0 -> 1).

    One (N, V) buffer is z = x - m, then e^z (``out=``); x_t is read by integer indexing
    (N elements) and mean_c x_c by one ufunc reduction."""
    if compiled.fits(x):  # numba's passes over the rows, if on (compiled_rows)
        return compiled.cross_entropy_forward(x, np.ascontiguousarray(t, dtype=np.intp), eps)
    N, V = x.shape
    z = _shifted(x, -1)  # (N, V), our own buffer
    loss = -z[np.arange(N), t]  # -z_t: (N,)
    z_mean = np.vecdot(z, one_over(V, z.dtype)) if eps else None  # (N,) sum of z / V: no
    # overflow where the sum of z would (logits spread over ~3e38 / V)
    np.exp(z, out=z)  # e^z
    s = np.add.reduce(z, axis=-1, keepdims=True)  # (N, 1)
    s[s == 0] = 1.0
    log_s = np.log(s[:, 0])  # lse - m
    loss += log_s  # lse - x_t
    if eps:
        loss *= 1.0 - eps
        loss += eps * (log_s - z_mean)
    return loss, z, s


def cross_entropy_backward(e: Array, s: Array, t: Array, w: Array, eps: float) -> Array:
    """Reference: ``CrossEntropy.backward``. dlogits = (p - q) w (N, V) with p = e / s,
    made in one new array: e (w / s) (the division by s costs no (N, V) pass), then w eps / V
    off every class and w (1 - eps) off each row's target by integer indexing (no (N, V)
    one-hot q). w is (N, 1), (1,) or 0-d. e and s are not written (retain_graph)."""
    if w.dtype == e.dtype and compiled.fits(e, s):  # numba's one pass, if on
        w_rows = np.ascontiguousarray(np.broadcast_to(w, (e.shape[0], 1))).reshape(-1)
        t = np.ascontiguousarray(t, dtype=np.intp)
        return compiled.cross_entropy_backward(e, s, t, w_rows, eps)
    d = e * (w / s)  # p w
    if eps:
        d -= w * (eps / e.shape[-1])  # - w eps / V on every class
    d[np.arange(e.shape[0]), t] -= (w * (1.0 - eps)).reshape(-1)  # - w (1 - eps) at t
    return d


class CrossEntropy(CrossEntropyRows):
    """Twin of ``ops.loss.CrossEntropy``'s row math, in the NumPy kernels above."""

    dtypes = None  # every dtype
    forward_kernel = staticmethod(cross_entropy_forward)
    backward_kernel = staticmethod(cross_entropy_backward)
