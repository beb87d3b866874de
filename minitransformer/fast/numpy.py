"""The fast tier for NumPy arrays on the CPU: twins of reference ops, each measured, each
tested against its reference (tests/fast/test_numpy.py). Off unless ``fast.enable()``.

What is fast here is mostly *fewer Python calls and fewer temporaries*: at the model sizes
of the lessons a step's time on a CPU is interpreter time and memory traffic as much as
arithmetic. ``TWINS`` lists what this module registers (``fast/__init__.py`` installs it).

Each twin earns its place, measured (a training step of the translate task as the CLI runs
it, CPU time per step, interleaved rounds, one Xeon core; the step's time without that twin
over the whole tier's, tiny / small): LayerNorm 1.075 / 1.058, CrossEntropy 1.043 / 1.029,
adam_update 1.014 / 1.035; the whole tier against the reference ops 1.15 / 1.13.
ScaledDotProductAttention, Linear (backward) and Dropout with DropoutAdd, added later,
measured on the benchmark's own tiny and small steps (``bench``'s fixed batch, CPU time of
both cores, 8 interleaved rounds, 2-vCPU Xeon; the dropout twins with dropout 0.1 at both
sizes): 1.13 / 1.03, 1.035 / 1.017 and 1.048 / 1.033; the attention twin's heads-last
outputs (below) on their own 1.021 / 1.029. NumPy twins of softmax and
log-softmax measured 1.00 (neither runs in a training step) and were deleted; the one-call
``reshape`` and ``sum`` (1.01, ~1,000 fewer Python calls a step) are no math and moved to
the backend's NumPy namespace, where every op gets them.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..backend import host
from ..ops.attention import ScaledDotProductAttention as _Attention
from ..ops.layernorm import LayerNorm as _LayerNorm
from ..ops.loss import CrossEntropy as _CrossEntropy
from ..ops.matmul import Linear as _Linear
from ..optim.adam import adam_update as _adam_update
from .numpy_dropout import TWINS as _DROPOUT_TWINS
from .grad_buffers import offered
from .rows import CrossEntropyRows, LayerNormRows

Array = np.ndarray

# ----------------------------------------------------------------------------- ops
# Each kernel below is named after the reference it replaces (in minitransformer/ops/) and
# returns what that reference returns, in the same layout, so the Function's other half (a
# backward after a fast forward, or the reverse) works with either. None of them writes into
# an array that a Function saved for backward: a second backward (retain_graph=True) sees
# the saved arrays as forward left them. Where they are faster it is by ufunc reductions
# (``np.add.reduce``: one C call, where ``xp.mean`` / ``xp.max`` are several Python calls),
# ``vecdot`` row sums, and writing into buffers they made themselves (``out=``, ``-=``).

_ONE_OVER_D: dict[tuple[int, Any], Array] = {}  # (D, dtype) -> (D,) vector of 1/D


def _one_over(D: int, dtype: Any) -> Array:
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
    D = x2.shape[1]
    w = _one_over(D, x2.dtype)
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
    N, V = x.shape
    z = _shifted(x, -1)  # (N, V), our own buffer
    loss = -z[np.arange(N), t]  # -z_t: (N,)
    z_mean = np.vecdot(z, _one_over(V, z.dtype)) if eps else None  # (N,) sum of z / V: no
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
    d = e * (w / s)  # p w
    if eps:
        d -= w * (eps / e.shape[-1])  # - w eps / V on every class
    d[np.arange(e.shape[0]), t] -= (w * (1.0 - eps)).reshape(-1)  # - w (1 - eps) at t
    return d


# Attention's softmax without its row max. Softmax is shift-invariant: the reference shifts
# each row by its max only so that e^s cannot overflow. Where every score lies in
# [-SAFE_SCORE, SAFE_SCORE] (two whole-array reductions tell, ~4 µs each at tiny), e^s lies
# in [1.6e-28, 6.2e27], well inside float32's normal range, and the twin takes e^s as it is:
# NumPy's max over a short last axis is its slowest reduction (~350 µs for a tiny step's
# (64, 4, 16, 16) scores, 5x a sum). Row sums are a product with a column of ones (one GEMV,
# ~10 µs, where the sum over the last axis takes ~75 µs), the mask a product with e^s (masked
# entries 0), and dS is made in the buffer of dP. Scores outside the range (or NaN) go
# through the reference. For the heads of multi-head attention, (B, H, T, d) arrays of one
# batch shape, out, dq, dk and dv are written heads-last in memory ((B, T, H, d), seen
# through a transposed view): the head merge, and the head split's backward, then reshape
# them without a copy (24 copies of a (B, T, D) array a tiny step; ~3 µs more per product).
SAFE_SCORE = 64.0
_ONES: dict[tuple[int, Any], Array] = {}  # (S, dtype) -> (S, 1) column of ones


def _row_sums(x: Array) -> Array:
    """x (..., S) -> (..., 1): each row's sum, as one product with a cached column of ones."""
    key = (x.shape[-1], x.dtype)
    ones = _ONES.get(key)
    if ones is None:
        ones = _ONES[key] = np.ones((x.shape[-1], 1), dtype=x.dtype)
    return host.matmul(x, ones)


def _heads_last(like: Array, last: int, heads: bool) -> Array | None:
    """With ``heads``: an empty (B, H, T, last) array whose memory is (B, T, H, last) (a
    transposed view) for ``like`` (B, H, T, ...); else None (the product makes its own)."""
    if not heads:
        return None
    B, H, T = like.shape[:3]
    return np.empty((B, T, H, last), dtype=like.dtype).transpose(0, 2, 1, 3)


class ScaledDotProductAttention(_Attention):
    """Twin of ``ops.attention.ScaledDotProductAttention``: the same P and out, without the
    row max where the scores allow (above); the same ``ctx`` (q, k, v saved, ``ctx.probs``,
    ``ctx.scale``), so either backward follows either forward. float32 and float64 (e^64
    overflows float16)."""

    dtypes = frozenset({np.dtype(np.float32), np.dtype(np.float64)})

    @staticmethod
    def forward(ctx, q, k, v, mask=None):
        scale = 1.0 / math.sqrt(q.shape[-1])
        s = host.matmul(q * scale, k.mT)  # (..., T, S)
        if not s.size or not (
            -SAFE_SCORE <= np.minimum.reduce(s, axis=None)
            and np.maximum.reduce(s, axis=None) <= SAFE_SCORE
        ):  # out of range or NaN (NaN fails both): the reference, with its row max
            ctx.heads = False
            return _Attention.forward(ctx, q, k, v, mask)
        p = np.exp(s, out=s)  # e^s, finite and > 0
        if mask is not None:
            p *= mask  # masked entries 0
        denom = _row_sums(p)  # (..., T, 1)
        if mask is not None:
            denom[denom == 0] = 1.0  # a fully masked row: 0 / 1 = 0, as the reference
        p /= denom
        ctx.save_for_backward(q, k, v)
        ctx.probs, ctx.scale = p, scale
        ctx.heads = q.ndim == 4 and q.shape[:2] == k.shape[:2] == v.shape[:2]  # (B, H) each
        return host.matmul(p, v, out=_heads_last(p, v.shape[-1], ctx.heads))  # (..., T, d_v)

    @staticmethod
    def backward(ctx, grad):
        q, k, v = ctx.saved
        p, scale = ctx.probs, ctx.scale
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        heads = ctx.heads
        dq = dk = dv = None
        if need_v:
            dv = host.matmul(p.mT, grad, out=_heads_last(v, v.shape[-1], heads))  # (..., S, d_v)
        if need_q or need_k:
            ds = host.matmul(grad, v.mT)  # dP (..., T, S), our own buffer
            ds -= _row_sums(ds * p)  # dP - rowsum(dP * P)
            ds *= p  # dS
            if need_q:
                dq = host.matmul(ds, k, out=_heads_last(q, q.shape[-1], heads))
                dq *= scale
            if need_k:
                dk = host.matmul(ds.mT, q, out=_heads_last(k, k.shape[-1], heads))
                dk *= scale
        return dq, dk, dv, None


# The Linear layer's backward: the reference's products, each parameter's gradient written
# where the optimizer reads it (``grad_buffers.offered``: the flat
# buffer's view of a parameter whose first gradient this is; the reference's dW and db are
# copied there, and 64 of a tiny step's 85 parameters are a Linear's), and db as one product
# with a row of ones (a GEMV, ~5 µs, where the column sum over 1,024 rows takes ~25 µs).
_ONES_ROW: dict[Any, Array] = {}  # dtype -> a row of ones, as long as the most rows seen


class Linear(_Linear):
    """Twin of ``ops.matmul.Linear``'s backward (the forward is the reference's): dx = g W^T,
    dW = x^T g (g^T x for a weight stored transposed) and db = 1^T g over all rows, dW and
    db written into the buffers the engine offers."""

    dtypes = None

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved
        needs = ctx.needs_input_grad
        outs = (*offered(ctx), None)  # x, weight[, bias], padded: no bias, no buffer
        d_in, d_out = x.shape[-1], grad.shape[-1]
        n = grad.size // d_out if d_out else x.size // d_in if d_in else 0  # rows
        g2 = grad.reshape(n, d_out)  # (rows, d_out)
        dx = dw = db = None
        if needs[0]:
            dx = host.matmul(grad, weight if ctx.transposed else weight.mT)  # (..., d_in)
        if needs[1]:
            x2 = x.reshape(n, d_in)
            a, b = (g2.T, x2) if ctx.transposed else (x2.T, g2)
            out = outs[1]  # the offered buffer, where the product fits (else None)
            fits = out is not None and out.shape == weight.shape and out.dtype == weight.dtype
            dw = host.matmul(a, b, out=out if fits else None)
        if len(needs) > 2 and needs[2]:
            ones = _ONES_ROW.get(grad.dtype)  # a view of one cached row of ones
            if ones is None or ones.shape[0] < n:
                ones = _ONES_ROW[grad.dtype] = np.ones(n, dtype=grad.dtype)
            out = outs[2]
            fits = out is not None and out.shape == (d_out,) and out.dtype == grad.dtype
            db = host.matmul(ones[:n], g2, out=out if fits else None)
        return dx, dw, db


# ----------------------------------------------------------------------------- optimizer
# Adam's update with one reused temporary (SGD's update is a few in-place operations
# already: no twin), a flat buffer's worth in chunks that stay in cache.
ADAM_CHUNK = 1 << 17  # elements a pass: p, g, m, v and the temporary, 512 KiB each (float32),
# stay in cache through the update's 13 passes; 1M float32 parameters measured 3.06 ms in one
# piece, 1.77 ms in chunks of 2^17 (2^16: 1.78, 2^14: 2.07, 2^18: 2.07; 2-vCPU Xeon, 4 MiB L2)


def adam_update(p: Array, g: Array, m: Array, v: Array, *, lr: float,
                betas: tuple[float, float], eps: float, weight_decay: float, t: int,
                ok: Any = None) -> None:  # fmt: skip
    """``optim.adam.adam_update`` fused with ``out=``: the same update (m, v, then p, in
    place) with ONE temporary, reused for (1-β1) g, (1-β2) g², the denominator and the step;
    the reference makes about eight. Flat (1-D) arrays longer than ``ADAM_CHUNK`` are
    updated a chunk at a time (each element's arithmetic is the same). ``ok`` False (read on
    the host, free on NumPy) changes nothing."""
    if ok is not None and not ok:
        return
    n = p.shape[0] if p.ndim == g.ndim == m.ndim == v.ndim == 1 else 0
    hyper = (betas, eps, weight_decay, lr, t)
    if n <= ADAM_CHUNK:  # small, or not flat: one piece
        _adam_pass(p, g, m, v, np.empty_like(p), *hyper)
        return
    buf = np.empty(ADAM_CHUNK, dtype=p.dtype)
    for i in range(0, n, ADAM_CHUNK):
        j = i + ADAM_CHUNK
        _adam_pass(p[i:j], g[i:j], m[i:j], v[i:j], buf[: min(j, n) - i], *hyper)


def _adam_pass(p: Array, g: Array, m: Array, v: Array, buf: Array, betas: tuple[float, float],
               eps: float, weight_decay: float, lr: float, t: int) -> None:  # fmt: skip
    """Adam's update of p, m, v in place, ``buf`` (p's shape) the one temporary."""
    b1, b2 = betas
    if weight_decay:
        g = g + weight_decay * p
    np.multiply(g, 1 - b1, out=buf)
    m *= b1
    m += buf  # m = β1 m + (1-β1) g
    np.multiply(g, g, out=buf)
    buf *= 1 - b2
    v *= b2
    v += buf  # v = β2 v + (1-β2) g²
    np.sqrt(v, out=buf)
    buf /= (1 - b2**t) ** 0.5
    buf += eps  # √v/√(1-β2^t) + ε
    np.divide(m, buf, out=buf)
    buf *= -(lr / (1 - b1**t))
    p += buf


# ----------------------------------------------------------------------------- the twins
# Whole replacement Functions, each a subclass of its reference whose forward and backward
# call the kernels above (``Function.run`` records the twin in ``ctx.fn``, so backward
# follows forward). ``dtypes = None``: they take every dtype.


class LayerNorm(LayerNormRows):
    """Twin of ``ops.layernorm.LayerNorm``'s row math, in NumPy kernels."""

    dtypes = None
    forward_kernel = staticmethod(layer_norm_forward)
    backward_kernel = staticmethod(layer_norm_backward)


class CrossEntropy(CrossEntropyRows):
    """Twin of ``ops.loss.CrossEntropy``'s row math, in NumPy kernels."""

    dtypes = None
    forward_kernel = staticmethod(cross_entropy_forward)
    backward_kernel = staticmethod(cross_entropy_backward)


adam_update.dtypes = None

# reference -> twin: what ``fast.enable()`` registers for numpy.ndarray
TWINS = {
    **_DROPOUT_TWINS,  # fast/numpy_dropout.py's
    _Linear: Linear,
    _Attention: ScaledDotProductAttention,
    _LayerNorm: LayerNorm,
    _CrossEntropy: CrossEntropy,
    _adam_update: adam_update,
}
