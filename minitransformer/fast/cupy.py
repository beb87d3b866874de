"""The fast tier for CuPy arrays: fused CUDA kernels, each a twin of the reference it
replaces and tested against it (tests/fast/test_cuda_rows.py, test_cuda_step.py on a GPU);
the CUDA C is in ``fast/cuda/*.cu``.

On a GPU every array call is a kernel launch (~12 µs of overhead), so the reference ops,
written as a dozen array calls each, are launch-bound at the model's sizes. Each kernel
below does a row reduction and its elementwise work in one launch (LayerNorm, softmax,
cross-entropy, attention's masked softmax), the same math in the same order as the reference,
returning what the reference returns in the same layout; the training step's kernels
(dropout, Adam, the gradient norm and the step flag) are in ``cupy_step.py``. ``TWINS``, at
the end, lists the replacement Functions and functions registered for ``cupy.ndarray``.

The kernels take float32 and float64 arrays (``DTYPES``: the twins say so in ``dtypes``, so
float16 runs the reference math), made C-contiguous first. The rest is reshaping, not
math: attention scores of more than 4 dimensions have their leading axes folded into one,
a softmax over another axis than the last is moved there and back, and a launch over no
rows is skipped. On by default on a GPU; ``MT_CUDA_KERNELS=0`` switches it off
(``fast/__init__.py``). Tested on a GPU by ``pytest -m gpu`` with the switch off and on
(``python -m minitransformer.tools.gpucheck``).

Importable without CuPy (``cp`` is None then): its names are checked on the CPU.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ops.attention import ScaledDotProductAttention as _Attention
from ..ops.dropout import Dropout as _Dropout
from ..ops.dropout import DropoutAdd as _DropoutAdd
from ..ops.layernorm import LayerNorm as _LayerNorm
from ..ops.loss import CrossEntropy as _CrossEntropy
from ..ops.softmax import LogSoftmax as _LogSoftmax
from ..ops.softmax import Softmax as _Softmax
from ..optim.adam import adam_update as _adam_update
from ..optim.clip import clip_flat as _clip_flat
from ..optim.clip import step_ok as _step_ok
from . import cuda_source, cupy_elementwise, cupy_grads, cupy_step
from .cuda_source import DTYPES, block_size
from .cuda_source import launch_rows as _launch
from .grad_buffers import offered
from .cupy_loss import CrossEntropy, cross_entropy_backward, cross_entropy_forward  # noqa: F401
from .cupy_step import Dropout, DropoutAdd, clip_flat
from .rows import LayerNormRows

try:
    import cupy as cp
except ImportError:  # no CuPy: the module still imports (its names are checked on the CPU)
    cp = None

Array = Any  # cupy.ndarray


_NO_STRIDES = (np.int64(0),) * 4  # no mask: the kernel reads none


# ----------------------------------------------------------------------------- LayerNorm


def layer_norm_forward(
    x2: Array, gamma: Array, beta: Array, eps: float
) -> tuple[Array, Array, Array]:
    """Reference: ``LayerNorm.forward`` (ops/layernorm.py). x2 (N, D) -> y (N, D),
    x_hat (N, D), rstd (N, 1), in one launch (``layer_norm.cu``: each row scaled by its
    max |x|, two-pass variance). gamma and beta have x2's dtype (``layer_norm`` checks)."""
    N, D = x2.shape
    x2, gamma, beta = (cp.ascontiguousarray(a) for a in (x2, gamma, beta))
    y, x_hat = cp.empty_like(x2), cp.empty_like(x2)
    rstd = cp.empty((N, 1), dtype=x2.dtype)
    args = (x2, gamma, beta, x2.dtype.type(eps), np.int32(D), y, x_hat, rstd)
    _launch(
        cuda_source.kernel_for("layer_norm.cu", "layer_norm_forward", x2.dtype),
        N,
        block_size(D),
        args,
    )
    return y, x_hat, rstd


def layer_norm_backward(
    g: Array,
    x_hat: Array,
    rstd: Array,
    gamma: Array,
    needs: tuple[bool, ...],
    outs: tuple = (None, None, None),
) -> tuple[Array | None, Array | None, Array | None]:
    """Reference: ``LayerNorm.backward``. g (N, D) -> dx (N, D) (one launch, one block per
    row), dgamma (D,), dbeta (D,) (None where ``needs`` says no). dgamma and dbeta are
    deterministic column sums in one launch: partial sums over chunks of rows, added in a
    fixed order by the last block to finish (``layer_norm_param_sums``); over no rows, zeros.
    ``outs``: the parameters' gradient buffers (``grad_buffers.offered``); where
    gamma's and beta's lie side by side (an optimizer's flat buffer) the sums are written
    into both at once, and the buffers themselves are returned: no copy follows."""
    need_x, need_gamma, need_beta = needs
    N, D = g.shape
    g, x_hat, rstd, gamma = (cp.ascontiguousarray(a) for a in (g, x_hat, rstd, gamma))
    dx = dgamma = dbeta = None
    if need_x:
        dx = cp.empty_like(g)
        args = (g, x_hat, rstd, gamma, np.int32(D), dx)
        kernel = cuda_source.kernel_for("layer_norm.cu", "layer_norm_backward_dx", g.dtype)
        _launch(kernel, N, block_size(D), args)
    if need_gamma or need_beta:
        if N == 0:  # sums over no rows
            sums = cp.zeros((2, D), dtype=g.dtype)
        else:
            rows, chunks = param_chunks(N)
            both = (
                cupy_grads.side_by_side(outs[1], outs[2], g) if need_gamma and need_beta else None
            )
            sums = cp.empty((2, D), dtype=g.dtype) if both is None else both
            grid = ((D + 255) // 256, chunks)
            args = (g, x_hat, np.int32(N), np.int32(D), np.int32(rows))
            if chunks == 1:  # the one chunk's partial sums are the sums
                kernel = cuda_source.kernel_for(
                    "layer_norm.cu", "layer_norm_param_partials", g.dtype
                )
                kernel(grid, (256,), (*args, sums))
            else:  # partials, and the last block of each column block adds them: one launch
                part = cp.empty((2, chunks, D), dtype=g.dtype)
                kernel = cuda_source.kernel_for("layer_norm.cu", "layer_norm_param_sums", g.dtype)
                kernel(grid, (256,), (*args, part, _arrivals(grid[0]), sums))
            if both is not None:
                return dx, outs[1], outs[2]
        dgamma = sums[0] if need_gamma else None
        dbeta = sums[1] if need_beta else None
    return dx, dgamma, dbeta


_ARRIVALS: dict[int, Array] = {}  # device -> layer_norm_param_sums's counters (zeros)


def _arrivals(n: int) -> Array:
    """At least n zeroed uint32 counters on this device for ``layer_norm_param_sums`` (each
    launch leaves them at 0 again), made once."""
    dev = cp.cuda.runtime.getDevice()
    if dev not in _ARRIVALS or _ARRIVALS[dev].size < n:
        _ARRIVALS[dev] = cp.zeros((max(n, 64),), dtype=np.uint32)
    return _ARRIVALS[dev]


def param_chunks(N: int) -> tuple[int, int]:
    """(rows per chunk, chunks) for the column sums of N rows: at least 32 rows a chunk,
    at most 64 chunks (enough blocks to fill the GPU at the model's sizes)."""
    chunks = max(1, min(64, N // 32))
    rows = -(-N // chunks)
    return rows, -(-N // rows)


# ----------------------------------------------------------------------------- softmax


def softmax(x: Array, axis: int) -> Array:
    """Reference: ``Softmax.forward`` (ops/softmax.py): one launch of the attention softmax
    kernel (scale 1, no mask) over the last axis (another axis is moved there and back)."""
    return _row_softmax(x, axis, log=False)


def log_softmax(x: Array, axis: int) -> Array:
    """Reference: ``LogSoftmax.forward``: (x - m) - log sum e^(x - m) in one launch."""
    return _row_softmax(x, axis, log=True)


def _row_softmax(x: Array, axis: int, log: bool) -> Array:
    if axis not in (-1, x.ndim - 1):  # the kernel's rows are the last axis
        return cp.moveaxis(_row_softmax(cp.moveaxis(x, axis, -1), -1, log), -1, axis)
    x = cp.ascontiguousarray(x)
    S = x.shape[-1]
    out = cp.empty_like(x)
    args = (x, None, *_NO_STRIDES, np.int32(1), np.int32(x.size // S), np.int32(S))
    args += (x.dtype.type(1.0), np.int32(log), out)
    kernel = cuda_source.kernel_for("attention_softmax.cu", "attention_softmax_forward", x.dtype)
    _launch(kernel, x.size // S, block_size(S), args)
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
    Scores of more than 4 dims have their leading axes folded into one (the mask then
    made full size: it can no longer be read through strides)."""
    if s.ndim > 4:
        shape = s.shape
        if mask is not None:
            mask = cp.broadcast_to(mask, shape).reshape(-1, *shape[-2:])  # a copy
        return attention_softmax_forward(s.reshape(-1, *shape[-2:]), mask, scale).reshape(shape)
    if mask is not None and mask.dtype != np.bool_:
        mask = mask != 0  # the kernel reads bytes as bools (ops pass bool masks already)
    s = cp.ascontiguousarray(s)
    L0, L1, T, S = (1,) * (4 - s.ndim) + s.shape
    strides = _NO_STRIDES
    if mask is not None:
        ms = mask_strides(mask.shape, mask.strides, mask.itemsize)
        strides = tuple(np.int64(m) for m in ms)
    p = cp.empty_like(s)
    args = (s, mask, *strides, np.int32(L1), np.int32(T), np.int32(S))
    args += (s.dtype.type(scale), np.int32(0), p)
    kernel = cuda_source.kernel_for("attention_softmax.cu", "attention_softmax_forward", s.dtype)
    _launch(kernel, L0 * L1 * T, block_size(S), args)
    return p


def attention_softmax_backward(dp: Array, p: Array, scale: float) -> Array:
    """Reference: ``ScaledDotProductAttention.backward``'s softmax part. dP, P (..., T, S)
    -> scale * P * (dP - rowsum(dP * P)) (the gradient of the raw scores q k^T), in one
    launch; dq = dS k and dk = dS^T q need no further scaling. In dP's dtype (P is cast
    to it where q, k, v had different dtypes), as the reference computes in dP's buffer."""
    dp, p = cp.ascontiguousarray(dp), cp.ascontiguousarray(p, dtype=dp.dtype)
    S = p.shape[-1]
    ds = cp.empty_like(p)
    args = (dp, p, np.int32(S), p.dtype.type(scale), ds)
    kernel = cuda_source.kernel_for("attention_softmax.cu", "attention_softmax_backward", p.dtype)
    _launch(kernel, p.size // S, block_size(S), args)
    return ds


# ----------------------------------------------------------------------------- the twins
# Whole replacement Functions, each a subclass of its reference (``Function.run`` records the
# twin in ``ctx.fn``, so backward follows forward), and the optimizer's functions.


class LayerNorm(LayerNormRows):
    """Twin of ``ops.layernorm.LayerNorm``'s row math, in CUDA kernels; backward writes
    dgamma and dbeta into the gradient buffers the engine offers (``layer_norm_backward``)."""

    dtypes = DTYPES
    forward_kernel = staticmethod(layer_norm_forward)
    backward_kernel = staticmethod(layer_norm_backward)

    @staticmethod
    def backward(ctx, grad):
        x_hat, rstd, gamma = ctx.saved
        g = cp.reshape(grad, x_hat.shape)  # (N, D)
        outs = offered(ctx)
        dx, dgamma, dbeta = layer_norm_backward(g, x_hat, rstd, gamma, ctx.needs_input_grad, outs)
        return (None if dx is None else cp.reshape(dx, grad.shape)), dgamma, dbeta


class Softmax(_Softmax):
    """Twin of ``ops.softmax.Softmax``'s forward (one launch); backward is the reference's."""

    dtypes = DTYPES

    @staticmethod
    def forward(ctx, x, axis: int = -1):
        y = softmax(x, axis)
        ctx.save_for_backward(y)
        ctx.axis = axis
        return y


class LogSoftmax(_LogSoftmax):
    """Twin of ``ops.softmax.LogSoftmax``'s forward (one launch)."""

    dtypes = DTYPES

    @staticmethod
    def forward(ctx, x, axis: int = -1):
        o = log_softmax(x, axis)
        ctx.save_for_backward(o)
        ctx.axis = axis
        return o


class ScaledDotProductAttention(_Attention):
    """Twin of ``ops.attention.ScaledDotProductAttention``: the masked softmax of the scores
    and its backward are one launch each (the scale applied inside: q k^T and dS unscaled).
    q, k, v (the heads, permuted views) and the incoming gradient are made contiguous once:
    cuBLAS reads a batch of matrices at one stride, so each product would copy them again."""

    dtypes = DTYPES

    @staticmethod
    def forward(ctx, q, k, v, mask=None):
        xp, scale = ctx.xp, 1.0 / math.sqrt(q.shape[-1])
        q, k, v = (cp.ascontiguousarray(a) for a in (q, k, v))  # no copy when they are
        p = attention_softmax_forward(xp.matmul(q, k.mT), mask, scale)  # (..., T, S)
        ctx.save_for_backward(q, k, v)
        ctx.probs, ctx.scale = p, scale
        return xp.matmul(p, v)

    @staticmethod
    def backward(ctx, grad):
        xp, (q, k, v) = ctx.xp, ctx.saved
        grad = cp.ascontiguousarray(grad)
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        dq = dk = None
        dv = xp.matmul(ctx.probs.mT, grad) if need_v else None
        if need_q or need_k:
            ds = attention_softmax_backward(xp.matmul(grad, v.mT), ctx.probs, ctx.scale)
            dq = xp.matmul(ds, k) if need_q else None  # ds is scale * dS already
            dk = xp.matmul(ds.mT, q) if need_k else None
        return dq, dk, dv, None


# reference -> twin: what ``fast`` registers for cupy.ndarray when CuPy is first used
TWINS = {
    cupy_grads._Linear: cupy_grads.Linear,
    _LayerNorm: LayerNorm,
    _Softmax: Softmax,
    _LogSoftmax: LogSoftmax,
    _CrossEntropy: CrossEntropy,
    _Attention: ScaledDotProductAttention,
    _Dropout: Dropout,
    cupy_elementwise._ReLU: cupy_elementwise.ReLU,
    cupy_elementwise._Embedding: cupy_elementwise.Embedding,
    _DropoutAdd: DropoutAdd,
    _adam_update: cupy_step.adam_update,
    _clip_flat: clip_flat,
    _step_ok: cupy_step.step_ok,
}
