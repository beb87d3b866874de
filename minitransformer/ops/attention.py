"""Scaled dot-product attention (Vaswani et al., 2017, eq. 1), fused.

q (..., T, d_k), k (..., S, d_k), v (..., S, d_v), mask bool broadcastable to (..., T, S)
(True = may attend; e.g. (B,1,1,S) padding, (1,1,T,T) causal)  ->  out (..., T, d_v)
    S_ = q k^T / sqrt(d_k), masked entries -> -inf;  P = softmax(S_) over keys;  out = P v
Backward, with dO = dL/d(out):
    dV = P^T dO;  dP = dO V^T;  dS = P * (dP - rowsum(dP * P));
    dQ = dS K / sqrt(d_k);  dK = dS^T Q / sqrt(d_k)
A query row whose keys are ALL masked has P = 0 (not NaN): its output and the gradients
flowing through it are exactly zero.
The Function is this math as written, and it is what runs; on a GPU the fast tier's twin
(on by default; ``MT_CUDA_KERNELS=0`` turns it off) runs the softmax and its backward as one
launch each; on the CPU with the tier on (as the CLI runs), its twin skips the row max where
no score can overflow e^s.
What the inputs must look like is checked in ``attention_checks.py``.
Twins: ``fast/numpy/attention.py``, ``fast/cupy/attention.py`` (``attention_softmax.cu``).
"""

from __future__ import annotations

import math
from typing import Any

from ..function import Function
from ..tensor import Tensor
from .attention_checks import check_mask, check_qkv


class ScaledDotProductAttention(Function):
    """out = softmax(q k^T / sqrt(d_k) + mask) v; ctx.probs holds P (..., T, S)."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, q, k, v, mask=None):
        xp = ctx.xp
        scale = 1.0 / math.sqrt(q.shape[-1])
        s = xp.matmul(q * scale, k.mT)  # (..., T, S)
        if mask is not None:
            s = xp.where(mask, s, -math.inf)
        m = xp.max(s, axis=-1, keepdims=True)  # (..., T, 1)
        if mask is not None:  # fully masked row: max is -inf; shift by 0 instead of NaN
            m = xp.where(m == -math.inf, 0.0, m)
        p = xp.exp(s - m)  # (..., T, S)
        denom = xp.sum(p, axis=-1, keepdims=True)  # (..., T, 1)
        if mask is not None:  # 0/0 for a fully masked row -> 0/1 = 0
            denom = xp.where(denom == 0, 1.0, denom)
        p /= denom  # (..., T, S): P, each row summing to 1 (or 0 where fully masked)
        ctx.save_for_backward(q, k, v)
        ctx.probs, ctx.scale = p, scale
        return xp.matmul(p, v)  # (..., T, d_v)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        q, k, v = ctx.saved
        p, scale = ctx.probs, ctx.scale
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        dq = dk = dv = None
        if need_v:
            dv = xp.matmul(p.mT, grad)  # (..., S, d_v)
        if need_q or need_k:
            dp = xp.matmul(grad, v.mT)  # (..., T, S)
            ds = p * (dp - xp.vecdot(dp, p)[..., None])  # rowsum(dP * P) is a dot product
            if need_q:
                dq = xp.matmul(ds, k)  # (..., T, d_k)
                dq *= scale
            if need_k:
                dk = xp.matmul(ds.mT, q)  # (..., S, d_k)
                dk *= scale
        return dq, dk, dv, None


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Any = None, need_weights: bool = False
) -> Tensor | tuple[Tensor, Any]:
    """softmax(q k^T / sqrt(d_k), masked) v; with need_weights, also P (a raw array).

    Checks its inputs here, once; ``nn.MultiHeadAttention`` checks its own and runs
    ``ScaledDotProductAttention`` directly."""
    check_qkv(q, k, v)
    mask = check_mask(mask, (*q.shape[:-1], k.shape[-2]), q)
    out, ctx = ScaledDotProductAttention.run(q, k, v, mask)
    return (out, ctx.probs) if need_weights else out
