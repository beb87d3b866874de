"""Fused CUDA kernels for CuPy arrays, each beside the reference it replaces (named after it)
and tested against it. See ``kernels/__init__.py``; the CUDA C is in ``kernels/cuda/*.cu``.

On a GPU every array call is a kernel launch (~12 µs of overhead), so the reference ops,
written as a dozen array calls each, are launch-bound at the model's sizes. Each function
below does a row reduction and its elementwise work in one launch (LayerNorm, softmax,
cross-entropy, attention's masked softmax), the same math in the same order as the reference,
returning what the reference returns in the same layout.

The kernels take float32 and float64 arrays (made C-contiguous first); anything else
(float16, an empty array, attention scores of more than 4 dimensions, a mask that is not
bool) runs the reference math with CuPy calls instead (``_*_reference``), so an op may call
these for every CuPy array. Switched off unless ``MT_CUDA_KERNELS=1`` (this module is then
registered for ``cupy.ndarray``): not yet verified on a GPU.

Floors: imports NumPy, ``cuda_source`` and (when present) CuPy; importable without CuPy.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import cuda_source

try:
    import cupy as cp
except ImportError:  # no CuPy: the module still imports (its names are checked on the CPU)
    cp = None

Array = Any  # cupy.ndarray

# kernel family -> its source file; the entry points are NAME_f32 and NAME_f64
KERNELS = {
    "layer_norm_forward": "layer_norm.cu",
    "layer_norm_backward_dx": "layer_norm.cu",
    "layer_norm_param_partials": "layer_norm.cu",
    "cross_entropy_forward": "cross_entropy.cu",
    "cross_entropy_backward": "cross_entropy.cu",
    "attention_softmax_forward": "attention_softmax.cu",
    "attention_softmax_backward": "attention_softmax.cu",
}
_SUFFIX = {np.dtype(np.float32): "_f32", np.dtype(np.float64): "_f64"}


def _kernel(name: str, dtype: Any) -> Any:
    """The RawKernel ``name`` for ``dtype`` (float32 or float64), built once."""
    return cuda_source.kernel(KERNELS[name], name + _SUFFIX[dtype])


def block_size(n: int) -> int:
    """Threads per block for a row of n elements: 128 up to 512 elements, 256 up to 4096,
    else 1024 (each thread then handles at most ~4 elements before the larger blocks)."""
    return 128 if n <= 512 else 256 if n <= 4096 else 1024


def _takes(*arrays: Array) -> bool:
    """True where the kernels take these arrays: one dtype, float32 or float64, not empty."""
    dt = arrays[0].dtype
    return dt in _SUFFIX and arrays[0].size > 0 and all(a.dtype == dt for a in arrays)


matmul = cp.matmul if cp is not None else None  # cuBLAS already: nothing to fuse
_NO_STRIDES = (np.int64(0),) * 4  # no mask: the kernel reads none


# ----------------------------------------------------------------------------- LayerNorm


def layer_norm_forward(
    x2: Array, gamma: Array, beta: Array, eps: float
) -> tuple[Array, Array, Array]:
    """Reference: ``LayerNorm.forward`` (ops/layernorm.py). x2 (N, D) -> y (N, D),
    x_hat (N, D), rstd (N, 1), in one launch (``layer_norm.cu``: each row scaled by its
    max |x|, two-pass variance)."""
    if not _takes(x2, gamma, beta):
        return _layer_norm_forward_reference(x2, gamma, beta, eps)
    N, D = x2.shape
    x2, gamma, beta = (cp.ascontiguousarray(a) for a in (x2, gamma, beta))
    y, x_hat = cp.empty_like(x2), cp.empty_like(x2)
    rstd = cp.empty((N, 1), dtype=x2.dtype)
    args = (x2, gamma, beta, x2.dtype.type(eps), np.int32(D), y, x_hat, rstd)
    _kernel("layer_norm_forward", x2.dtype)((N,), (block_size(D),), args)
    return y, x_hat, rstd


def layer_norm_backward(
    g: Array, x_hat: Array, rstd: Array, gamma: Array, needs: tuple[bool, ...]
) -> tuple[Array | None, Array | None, Array | None]:
    """Reference: ``LayerNorm.backward``. g (N, D) -> dx (N, D) (one launch, one block per
    row), dgamma (D,), dbeta (D,) (None where ``needs`` says no). dgamma and dbeta are
    deterministic column sums: one launch of partial sums over chunks of rows, then one
    CuPy sum over the chunks (skipped when there is one chunk)."""
    if not _takes(g, x_hat, rstd, gamma):
        return _layer_norm_backward_reference(g, x_hat, rstd, gamma, needs)
    need_x, need_gamma, need_beta = needs
    N, D = g.shape
    g, x_hat, rstd, gamma = (cp.ascontiguousarray(a) for a in (g, x_hat, rstd, gamma))
    dx = dgamma = dbeta = None
    if need_x:
        dx = cp.empty_like(g)
        args = (g, x_hat, rstd, gamma, np.int32(D), dx)
        _kernel("layer_norm_backward_dx", g.dtype)((N,), (block_size(D),), args)
    if need_gamma or need_beta:
        rows, chunks = param_chunks(N)
        part = cp.empty((2, chunks, D), dtype=g.dtype)  # [sum g x_hat, sum g] per chunk
        grid = ((D + 255) // 256, chunks)
        args = (g, x_hat, np.int32(N), np.int32(D), np.int32(rows), part)
        _kernel("layer_norm_param_partials", g.dtype)(grid, (256,), args)
        sums = part[:, 0] if chunks == 1 else cp.sum(part, axis=1)  # (2, D)
        dgamma = sums[0] if need_gamma else None
        dbeta = sums[1] if need_beta else None
    return dx, dgamma, dbeta


def param_chunks(N: int) -> tuple[int, int]:
    """(rows per chunk, chunks) for the column sums of N rows: at least 32 rows a chunk,
    at most 64 chunks (enough blocks to fill the GPU at the model's sizes)."""
    chunks = max(1, min(64, N // 32))
    rows = -(-N // chunks)
    return rows, -(-N // rows)


# ----------------------------------------------------------------------------- softmax


def softmax(x: Array, axis: int) -> Array:
    """Reference: ``Softmax.forward`` (ops/softmax.py): one launch of the attention softmax
    kernel (scale 1, no mask) over the last axis; other axes run the reference."""
    return _row_softmax(x, axis, log=False)


def log_softmax(x: Array, axis: int) -> Array:
    """Reference: ``LogSoftmax.forward``: (x - m) - log sum e^(x - m) in one launch."""
    return _row_softmax(x, axis, log=True)


def _row_softmax(x: Array, axis: int, log: bool) -> Array:
    if not (_takes(x) and axis in (-1, x.ndim - 1)):
        return _softmax_reference(x, axis, log)
    x = cp.ascontiguousarray(x)
    S = x.shape[-1]
    out = cp.empty_like(x)
    args = (x, None, *_NO_STRIDES, np.int32(1), np.int32(x.size // S), np.int32(S))
    args += (x.dtype.type(1.0), np.int32(log), out)
    _kernel("attention_softmax_forward", x.dtype)((x.size // S,), (block_size(S),), args)
    return out


# ----------------------------------------------------------------------------- attention


def mask_strides(
    shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int
) -> tuple[int, ...]:
    """The mask's element strides for the 4 dims of the scores (left-padded to 4): 0 on a
    broadcast (length-1 or missing) axis, so mask[i0, i1, i, c] is read in place."""
    pad = 4 - len(shape)  # the mask (bytes strides, as CuPy and NumPy give them) has <= 4 dims
    shape, strides = (1,) * pad + tuple(shape), (0,) * pad + tuple(strides)
    return tuple(0 if n == 1 else st // itemsize for n, st in zip(shape, strides, strict=True))


def attention_softmax_forward(s: Array, mask: Array | None, scale: float) -> Array:
    """Reference: the softmax of ``ScaledDotProductAttention.forward`` (ops/attention.py).
    s (..., T, S) = q k^T (unscaled), mask bool broadcastable to it (or None) ->
    P = softmax(scale s, masked -> -inf) over S (all-masked rows 0), in one launch.
    Scores of more than 4 dims or a non-bool mask run the reference."""
    bad_mask = mask is not None and (mask.dtype != np.bool_ or mask.ndim > s.ndim)
    if not _takes(s) or s.ndim > 4 or bad_mask:
        return _attention_softmax_reference(s, mask, scale)
    s = cp.ascontiguousarray(s)
    L0, L1, T, S = (1,) * (4 - s.ndim) + s.shape
    strides = _NO_STRIDES
    if mask is not None:
        ms = mask_strides(mask.shape, mask.strides, mask.itemsize)
        strides = tuple(np.int64(m) for m in ms)
    p = cp.empty_like(s)
    args = (s, mask, *strides, np.int32(L1), np.int32(T), np.int32(S))
    args += (s.dtype.type(scale), np.int32(0), p)
    _kernel("attention_softmax_forward", s.dtype)((L0 * L1 * T,), (block_size(S),), args)
    return p


def attention_softmax_backward(dp: Array, p: Array, scale: float) -> Array:
    """Reference: ``ScaledDotProductAttention.backward``'s softmax part. dP, P (..., T, S)
    -> scale * P * (dP - rowsum(dP * P)) (the gradient of the raw scores q k^T), in one
    launch; dq = dS k and dk = dS^T q need no further scaling."""
    if not _takes(dp, p):
        return _attention_softmax_backward_reference(dp, p, scale)
    dp, p = cp.ascontiguousarray(dp), cp.ascontiguousarray(p)
    S = p.shape[-1]
    ds = cp.empty_like(p)
    args = (dp, p, np.int32(S), p.dtype.type(scale), ds)
    _kernel("attention_softmax_backward", p.dtype)((p.size // S,), (block_size(S),), args)
    return ds


# ----------------------------------------------------------------------------- cross-entropy


def cross_entropy_forward(x: Array, t: Array, eps: float) -> tuple[Array, Array, Array]:
    """Reference: ``CrossEntropy.forward`` (ops/loss.py). x (N, V) logits, t (N,) ids in
    range -> loss (N,), e = e^(x - m) (N, V), s (N, 1) (0 -> 1), in one launch (one block
    per row: one read of the row for its max, one writing e and summing it)."""
    if not _takes(x):
        return _cross_entropy_forward_reference(x, t, eps)
    N, V = x.shape
    x, t = cp.ascontiguousarray(x), cp.ascontiguousarray(t, dtype=np.int64)
    loss, e = cp.empty((N,), dtype=x.dtype), cp.empty_like(x)
    s = cp.empty((N, 1), dtype=x.dtype)
    args = (x, t, x.dtype.type(eps), np.int32(V), loss, e, s)
    _kernel("cross_entropy_forward", x.dtype)((N,), (block_size(V),), args)
    return loss, e, s


def cross_entropy_backward(e: Array, s: Array, t: Array, w: Array, eps: float) -> Array:
    """Reference: ``CrossEntropy.backward``. dlogits = e (w / s) - w eps / V - w (1 - eps)
    at each row's target (N, V), in one launch. w is (N, 1), (1,) or 0-d (read with a row
    stride of 1 or 0)."""
    N, V = e.shape
    if not _takes(e, s) or w.size not in (1, N):
        return _cross_entropy_backward_reference(e, s, t, w, eps)
    e, s = cp.ascontiguousarray(e), cp.ascontiguousarray(s)
    t = cp.ascontiguousarray(t, dtype=np.int64)
    w = cp.ascontiguousarray(w, dtype=e.dtype)
    dx = cp.empty_like(e)
    args = (e, s, t, w, np.int32(0 if w.size == 1 else 1), e.dtype.type(eps), np.int32(V), dx)
    _kernel("cross_entropy_backward", e.dtype)((N,), (block_size(V),), args)
    return dx


# ----------------------------------------------------------------------------- the reference
# The references' math with CuPy calls, for what the kernels do not take (float16, empty
# arrays, scores of more than 4 dims): the same lines as the ops in minitransformer/ops.


def _layer_norm_forward_reference(x2, gamma, beta, eps):
    a = cp.max(cp.abs(x2), axis=-1, keepdims=True)
    a = cp.where(a > 0, a, 1.0).astype(x2.dtype, copy=False)
    xs = x2 / a
    xc = xs - cp.mean(xs, axis=-1, keepdims=True)
    var = cp.mean(xc * xc, axis=-1, keepdims=True)
    sd = cp.hypot(a * cp.sqrt(var), x2.dtype.type(math.sqrt(eps)))
    x_hat = xc * (a / sd)
    return x_hat * gamma + beta, x_hat, 1.0 / sd


def _layer_norm_backward_reference(g, x_hat, rstd, gamma, needs):
    need_x, need_gamma, need_beta = needs
    dbeta = cp.sum(g, axis=0) if need_beta else None
    dgamma = cp.sum(g * x_hat, axis=0) if need_gamma else None
    dx = None
    if need_x:
        g_hat = g * gamma
        mean_g = cp.mean(g_hat, axis=-1, keepdims=True)
        mean_gx = cp.mean(g_hat * x_hat, axis=-1, keepdims=True)
        dx = rstd * (g_hat - mean_g - x_hat * mean_gx)
    return dx, dgamma, dbeta


def _shifted(x, axis):
    m = cp.max(x, axis=axis, keepdims=True)
    return x - cp.where(cp.isfinite(m), m, 0.0).astype(x.dtype, copy=False)


def _safe_sum(e, axis):
    s = cp.sum(e, axis=axis, keepdims=True)
    return cp.where(s > 0, s, 1.0).astype(e.dtype, copy=False)


def _softmax_reference(x, axis, log):
    z = _shifted(x, axis)
    if log:
        return z - cp.log(_safe_sum(cp.exp(z), axis))
    e = cp.exp(z)
    return e / _safe_sum(e, axis)


def _attention_softmax_reference(s, mask, scale):
    s = s * scale
    if mask is not None:
        s = cp.where(mask, s, -math.inf).astype(s.dtype, copy=False)
    return _softmax_reference(s, -1, log=False)


def _attention_softmax_backward_reference(dp, p, scale):
    ds = dp - cp.sum(dp * p, axis=-1, keepdims=True)
    ds *= p
    ds *= scale
    return ds


def _cross_entropy_forward_reference(x, t, eps):
    z = _shifted(x, -1)
    e = cp.exp(z)
    s = _safe_sum(e, -1)
    log_s = cp.log(s)
    z_t = cp.take_along_axis(z, t[:, None], axis=-1)
    loss = (1.0 - eps) * (log_s - z_t)
    if eps:
        loss = loss + eps * (log_s - cp.sum(z / x.shape[-1], axis=-1, keepdims=True))
    return loss.reshape(-1), e, s


def _cross_entropy_backward_reference(e, s, t, w, eps):
    V = e.shape[-1]
    q = (t[:, None] == cp.arange(V)).astype(e.dtype)
    if eps:
        q = (1.0 - eps) * q + eps / V
    return (e / s - q) * w


# The training step's kernels (dropout, Adam, the gradient norm and the gather) live in a file
# of their own; this module is the one registered for cupy.ndarray, so it carries their names.
from .cupy_step import *  # noqa: E402, F403
