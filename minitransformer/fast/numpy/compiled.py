"""Kernels compiled by numba, an optional extra of the NumPy twins (``pip install numba``):
LayerNorm's forward and backward as one pass over each row, where the NumPy kernels
(``layernorm.py``) make five or six passes over the whole array, and Adam's update as one
pass over the flat buffer, where ``adam.py`` makes thirteen; the embedding's gradient as one
pass over the ids (``embedding.py``), where NumPy sorts them and sums runs; ReLU's backward
as one pass (``elementwise.py``), where the reference makes three; and, written in
``compiled_rows.py``, the cross-entropy's rows (``loss.py``) and dropout's apply-and-scale
pass (``dropout.py``).

No kernel runs on more than one thread: ``parallel=True`` (prange over rows, numba's OpenMP
layer) was measured in the training step and dropped. With OpenMP's default spinning it
fought OpenBLAS's spinning thread (tiny step 9x slower); with OMP_WAIT_POLICY=PASSIVE it
gained nothing (small 1.01x, IQR 0.98-1.03), though alone LayerNorm's kernels and Adam's
ran 1.7-2x faster on two threads.

Off unless ``enable()`` is called (the ``minitransformer`` command does, for the process it
owns, with the NumPy twins; the benchmark's workers too; each kernel is compiled at its first
use, about 0.7 s, and kept in numba's cache for later processes);
importing this module imports no numba and changes nothing. Where numba is missing,
``enable()`` says so and nothing changes. The kernels take C-contiguous float32 and float64
rows; anything else, and rows whose sum of squares overflows or underflows, go through the
NumPy kernels (which redo such rows with the reference's scaled math). The sums are
reassociated (numba's ``fastmath`` without its no-NaN and no-Inf assumptions), so results
differ from the NumPy kernels in the last bits; tested against them and the reference in
tests/fast/test_numpy_compiled.py.

Measured on this 2-core machine, thread CPU time per call (medians of 300, one thread,
float32, other jobs running): forward (1024, 64) 127 -> 54 µs, (1024, 128) 261 -> 116 µs;
backward 195 -> 64 µs and 355 -> 101 µs.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import numpy as np

from . import compiled_rows

Array = np.ndarray
FASTMATH = {"reassoc", "nsz", "contract", "arcp"}  # not "nnan"/"ninf": NaN and Inf stay exact
# error_model="numpy": a division by zero gives Inf or NaN, as NumPy's, not an exception
_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
_kernels: dict[str, Any] = {}  # name -> the compiled function, once enable() has run


def available() -> bool:
    """Whether numba can be imported (without importing it)."""
    return importlib.util.find_spec("numba") is not None


def enabled() -> bool:
    """Whether the compiled kernels are on (``enable()``)."""
    return bool(_kernels)


def enable() -> bool:
    """Switch the compiled kernels on for this process; False (and nothing changes) where
    numba is not installed. Each kernel compiles at its first call."""
    if _kernels:
        return True
    if not available():
        return False
    from numba import njit

    # cache=True: each kernel is compiled once per machine, kept beside this module in
    # __pycache__ (or numba's user cache where that is not writable), as Python keeps .pyc
    compile_ = njit(fastmath=FASTMATH, error_model="numpy", cache=True)
    exact = njit(error_model="numpy", cache=True)  # no sums: the NumPy kernels' order
    _kernels["layer_norm_forward"] = compile_(_layer_norm_forward_rows)
    _kernels["layer_norm_backward"] = compile_(_layer_norm_backward_rows)
    _kernels["adam"] = exact(_adam_elements)
    _kernels["scatter_add"] = exact(_scatter_add_rows)
    _kernels["relu_backward"] = exact(_relu_backward_elements)
    rows = compiled_rows  # the cross-entropy's rows and dropout's pass
    _kernels["cross_entropy_shift"] = compile_(rows._cross_entropy_shift_rows)
    _kernels["cross_entropy_sums"] = compile_(rows._cross_entropy_sum_rows)
    _kernels["cross_entropy_backward"] = exact(rows._cross_entropy_backward_rows)
    _kernels["dropout"] = exact(rows._dropout_elements)
    _kernels["dropout_add"] = exact(rows._dropout_add_elements)
    return True


def disable() -> None:
    """Switch the compiled kernels off (the NumPy kernels run again)."""
    _kernels.clear()


def fits(*arrays: Array) -> bool:
    """Whether the kernels take these arrays: on, C-contiguous, not empty, one dtype of
    float32/64."""
    dtype = arrays[0].dtype
    return (
        bool(_kernels)
        and dtype in _DTYPES
        and all(a.dtype == dtype and a.flags.c_contiguous and a.size for a in arrays)
    )


def layer_norm_forward(x2: Array, gamma: Array, beta: Array, eps: float):
    """``layernorm.layer_norm_forward`` in one pass per row: (y, x_hat, rstd), or None where
    a row's sum of squares is not a normal finite number (the caller's NumPy kernel then
    redoes the rows that need it). x2 (N, D); ``fits(x2, gamma, beta)`` holds."""
    N, D = x2.shape
    y, x_hat = np.empty_like(x2), np.empty_like(x2)
    rstd, ss = np.empty((N, 1), dtype=x2.dtype), np.empty((N,), dtype=x2.dtype)
    _kernels["layer_norm_forward"](x2, gamma, beta, x2.dtype.type(eps), y, x_hat, rstd, ss)
    info = np.finfo(x2.dtype)
    smallest = D * float(info.smallest_normal / info.eps)  # as the NumPy kernel's check
    if not (np.isfinite(ss).all() and (eps >= smallest / D or (ss >= smallest).all())):
        return None
    return y, x_hat, rstd


def layer_norm_backward(g: Array, x_hat: Array, rstd: Array, gamma: Array):
    """``layernorm.layer_norm_backward`` with every gradient needed, in one pass per row:
    (dx, dgamma, dbeta). ``fits(g, x_hat, rstd, gamma)`` holds."""
    D = g.shape[1]
    dx = np.empty_like(g)
    dgamma, dbeta = np.empty((D,), dtype=g.dtype), np.empty((D,), dtype=g.dtype)
    _kernels["layer_norm_backward"](g, x_hat, rstd, gamma, dx, dgamma, dbeta)
    return dx, dgamma, dbeta


def _layer_norm_forward_rows(x, gamma, beta, eps, y, x_hat, rstd, ss_out):  # numba: one row
    N, D = x.shape  # at a time: mean, centred values and their squares, then scale
    inv_d = x.dtype.type(1.0) / D
    for i in range(N):
        s = x[i, 0] * 0
        for j in range(D):
            s += x[i, j]
        mu = s * inv_d
        ss = x[i, 0] * 0
        for j in range(D):
            d = x[i, j] - mu
            x_hat[i, j] = d
            ss += d * d
        ss_out[i] = ss
        r = np.sqrt(D / (ss + D * eps))  # rstd = sqrt(D / (sum((x - mu)^2) + D eps))
        rstd[i, 0] = r
        for j in range(D):
            h = x_hat[i, j] * r
            x_hat[i, j] = h
            y[i, j] = h * gamma[j] + beta[j]


def _layer_norm_backward_rows(g, x_hat, rstd, gamma, dx, dgamma, dbeta):  # numba
    N, D = g.shape  # dx = rstd (g gamma - mean(g gamma) - x_hat mean(g gamma x_hat))
    inv_d = g.dtype.type(1.0) / D
    for j in range(D):
        dgamma[j] = 0
        dbeta[j] = 0
    for i in range(N):
        mean_g = g[i, 0] * 0
        mean_gx = g[i, 0] * 0
        for j in range(D):
            g_hat = g[i, j] * gamma[j]
            mean_g += g_hat
            mean_gx += g_hat * x_hat[i, j]
            dgamma[j] += g[i, j] * x_hat[i, j]
            dbeta[j] += g[i, j]
        mean_g *= inv_d
        mean_gx *= inv_d
        r = rstd[i, 0]
        for j in range(D):
            dx[i, j] = (g[i, j] * gamma[j] - mean_g - x_hat[i, j] * mean_gx) * r


def adam_update(p: Array, g: Array, m: Array, v: Array, hyper: tuple) -> None:
    """``adam.adam_update``'s arithmetic, element by element in one pass (each element's
    operations those of the NumPy twin's passes, in the same order). p, g, m, v flat and
    ``fits``; hyper = (betas, eps, weight_decay, lr, t)."""
    (b1, b2), eps, weight_decay, lr, t = hyper
    f = p.dtype.type  # the arithmetic in p's dtype, as NumPy's with Python scalars
    bias2, step = f((1 - b2**t) ** 0.5), f(-(lr / (1 - b1**t)))
    _kernels["adam"](p, g, m, v, f(b1), f(1 - b1), f(b2), f(1 - b2), bias2, f(eps),
                     f(weight_decay), step)  # fmt: skip


def _adam_elements(p, g, m, v, b1, one_b1, b2, one_b2, bias2, eps, weight_decay, step):
    for i in range(p.shape[0]):  # numba: m, v, then p, as adam.py's passes do
        gi = g[i]
        if weight_decay:
            gi = gi + weight_decay * p[i]
        m[i] = m[i] * b1 + gi * one_b1
        v[i] = v[i] * b2 + (gi * gi) * one_b2
        p[i] += m[i] / (np.sqrt(v[i]) / bias2 + eps) * step


def embedding_backward(ids: Array, g: Array, V: int) -> Array:
    """The embedding table's gradient (V, D): row ids[i] of zeros plus g[i] for each i in
    order (``backend.scatter_add``'s sums, in the order its stable sort keeps), one pass.
    ids (N,) ints in [0, V) (the forward checked them), g (N, D); ``fits(g)`` holds."""
    table = np.zeros((V, g.shape[1]), dtype=g.dtype)
    _kernels["scatter_add"](table, ids, g)
    return table


def relu_backward(grad: Array, y: Array) -> Array:
    """dx = g where y > 0, else 0 (ReLU's backward from its output), one pass."""
    dx = np.empty_like(grad)
    _kernels["relu_backward"](grad.reshape(-1), y.reshape(-1), dx.reshape(-1))
    return dx


def _scatter_add_rows(table, ids, g):  # numba: table[ids[i]] += g[i], i in order
    for i in range(ids.shape[0]):
        row = table[ids[i]]
        for j in range(g.shape[1]):
            row[j] += g[i, j]


def _relu_backward_elements(g, y, dx):  # numba
    zero = g.dtype.type(0)
    for i in range(g.shape[0]):
        dx[i] = g[i] if y[i] > 0 else zero


def cross_entropy_forward(x: Array, t: Array, eps: float) -> tuple[Array, Array, Array]:
    """``loss.cross_entropy_forward`` (compiled_rows.py): x (N, V) fits, t (N,) intp."""
    return compiled_rows.cross_entropy_forward(_kernels, x, t, eps)


def cross_entropy_backward(e: Array, s: Array, t: Array, w_rows: Array, eps: float) -> Array:
    """``loss.cross_entropy_backward`` with w_rows (N,), one weight per row (compiled_rows)."""
    return compiled_rows.cross_entropy_backward(_kernels, e, s, t, w_rows, eps)


def dropout_apply(x: Array, keep: Array, scale: float, r: Array | None = None) -> Array:
    """x * scale * keep (+ r) in one pass (compiled_rows.py); ``fits(x)`` (and r), keep
    bool and C-contiguous, all one shape."""
    return compiled_rows.dropout_apply(_kernels, x, keep, scale, r)
