"""The attention twin for CuPy arrays: ``ops/attention.py``'s masked softmax of the scores
and its backward in one launch each (``fast/cuda/attention_softmax.cu``, the scale applied
inside); the products are cuBLAS's (``fast/gpu/cublas.py``). Tested against the reference in
tests/fast/test_cuda_rows.py (a GPU). Importable without CuPy.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...ops.attention import ScaledDotProductAttention as _Attention
from ..gpu import cuda_source
from ..gpu.cuda_source import DTYPES, block_size
from ..gpu.cuda_source import launch_rows as _launch
from .softmax import NO_STRIDES

try:
    import cupy as cp
except ImportError:  # no CuPy: the module still imports (its names are checked on the CPU)
    cp = None

Array = Any  # cupy.ndarray


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
    strides = NO_STRIDES
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
