"""The attention twin for NumPy arrays: ``ops/attention.py``'s scaled dot-product attention
without the softmax's row max where no score can overflow e^s (off unless ``fast.enable()``;
tested against the reference in tests/fast/test_numpy_attention.py; its measured worth:
docs/measurements.md).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...backend import host
from ...ops.attention import ScaledDotProductAttention as _Attention

Array = np.ndarray

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
# ``ctx.grad_out`` (set by the packed attention, ``projections.py``), when there, names
# (B, H, L, d) views to write dq, dk and dv into instead (None: a new array).
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
        out_q, out_k, out_v = getattr(ctx, "grad_out", (None, None, None))  # or where to write
        dq = dk = dv = None
        if need_v:
            out_v = _heads_last(v, v.shape[-1], heads) if out_v is None else out_v
            dv = host.matmul(p.mT, grad, out=out_v)  # (..., S, d_v)
        if need_q or need_k:
            ds = host.matmul(grad, v.mT)  # dP (..., T, S), our own buffer
            ds -= _row_sums(ds * p)  # dP - rowsum(dP * P)
            ds *= p  # dS
            if need_q:
                out_q = _heads_last(q, q.shape[-1], heads) if out_q is None else out_q
                dq = host.matmul(ds, k, out=out_q)
                dq *= scale
            if need_k:
                out_k = _heads_last(k, k.shape[-1], heads) if out_k is None else out_k
                dk = host.matmul(ds.mT, q, out=out_k)
                dk *= scale
        return dq, dk, dv, None
