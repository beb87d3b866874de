"""Scaled dot-product attention in key blocks (FlashAttention's algorithm): O(T·b) memory.

q (..., T, d_k), k (..., S, d_k), v (..., S, d_v), mask bool broadcastable to (..., T, S)
(True = may attend)  ->  out (..., T, d_v), the same numbers as ``ops/attention.py``, but the
(T, S) score matrix is never formed: keys and values go in blocks j of b = ``block_size``
positions, S_j = q K_jᵀ / sqrt(d_k) (..., T, b), and an ONLINE softmax keeps per query row
a running max m, a running sum l and an unnormalised output acc:
    m' = max(m, rowmax S_j);  a = exp(m - m');  P~_j = exp(S_j - m')
    l' = a l + rowsum P~_j;   acc' = a acc + P~_j V_j
after the last block out = acc / l. Forward saves q, k, v, out and the row logsumexp
L = m + log l (..., T, 1), so P_j = exp(S_j - L) can be rebuilt block by block.
Backward (dO = dL/d(out)), one key block at a time, recomputing S_j and P_j:
    D = rowsum(dO * out)   (= rowsum(dP * P), since out = P V)
    dV_j = P_jᵀ dO;  dP_j = dO V_jᵀ;  dS_j = P_j * (dP_j - D)
    dQ = sum_j dS_j K_j / sqrt(d_k);  dK_j = dS_jᵀ q / sqrt(d_k)
Memory: O(T·b) for a block's scores instead of O(T·S). A query row whose keys are ALL
masked gets L = +inf, so P = exp(-inf) = 0: out and its gradients are exactly zero, as in
the plain op.
"""

from __future__ import annotations

import math
from typing import Any

from ..checks import positive_int
from ..errors import ArgumentError
from ..function import Function
from ..tensor import Tensor
from .attention import scaled_dot_product_attention as plain_attention
from .attention_checks import check_mask, check_qkv

INF = math.inf


def _scores(xp, qs, k, mask, j0: int, j1: int):
    """S_j = qs K[j0:j1]ᵀ (..., T, j1 - j0), masked entries -inf (qs = q / sqrt(d_k))."""
    s = xp.matmul(qs, k[..., j0:j1, :].mT)
    if mask is not None:
        whole = mask.ndim == 0 or mask.shape[-1] == 1  # broadcast over the keys
        s = xp.where(mask if whole else mask[..., j0:j1], s, -INF)
    return s


class BlockedAttention(Function):
    """out = softmax(q kᵀ / sqrt(d_k), masked) v, keys in blocks; saves out and L only."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, q, k, v, mask=None, block_size=64):
        xp = ctx.xp
        scale, S = 1.0 / math.sqrt(q.shape[-1]), k.shape[-2]
        qs = q * scale
        m = l = acc = None
        for j0 in range(0, S, block_size):
            j1 = min(j0 + block_size, S)
            s = _scores(xp, qs, k, mask, j0, j1)  # (..., T, b)
            m_new = xp.max(s, axis=-1, keepdims=True)  # (..., T, 1)
            if m is not None:
                m_new = xp.maximum(m, m_new)
            shift = xp.where(m_new == -INF, 0.0, m_new)  # all masked so far: shift by 0
            p = xp.exp(s - shift)  # (..., T, b); masked entries exp(-inf) = 0
            del s
            if m is None:
                l, acc = xp.sum(p, axis=-1, keepdims=True), xp.matmul(p, v[..., j0:j1, :])
            else:
                a = xp.exp(m - shift)  # rescales the old sums to the new max (0 if m = -inf)
                l = a * l + xp.sum(p, axis=-1, keepdims=True)
                acc = a * acc + xp.matmul(p, v[..., j0:j1, :])
            m = m_new
        empty = l == 0  # every key masked: out = 0, L = +inf (so backward's P is 0)
        out = acc / xp.where(empty, 1.0, l)
        lse = xp.where(empty, INF, m + xp.log(xp.where(empty, 1.0, l)))  # (..., T, 1)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.mask, ctx.scale, ctx.block_size = mask, scale, block_size
        return out

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        q, k, v, out, lse = ctx.saved
        mask, scale, b, S = ctx.mask, ctx.scale, ctx.block_size, k.shape[-2]
        qs = q * scale
        D = xp.sum(grad * out, axis=-1, keepdims=True)  # (..., T, 1)
        dq, dks, dvs = None, [], []
        for j0 in range(0, S, b):
            j1 = min(j0 + b, S)
            p = xp.exp(_scores(xp, qs, k, mask, j0, j1) - lse)  # P_j (..., T, b), recomputed
            dvs.append(xp.matmul(p.mT, grad))  # (..., b, d_v)
            ds = xp.matmul(grad, v[..., j0:j1, :].mT)  # dP_j
            ds -= D
            ds *= p  # dS_j
            part = xp.matmul(ds, k[..., j0:j1, :])  # (..., T, d_k)
            if dq is None:
                dq = part
            else:
                dq += part
            dks.append(xp.matmul(ds.mT, q) * scale)  # (..., b, d_k)
        dk = dks[0] if len(dks) == 1 else xp.concat(dks, axis=-2)
        dv = dvs[0] if len(dvs) == 1 else xp.concat(dvs, axis=-2)
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        return dq * scale if need_q else None, dk if need_k else None, dv if need_v else None, None


def check_block_size(where: str, block_size: Any) -> int:
    """block_size as an int >= 1 (keys per block); else ArgumentError with the fix."""
    return positive_int(
        where,
        "block_size",
        block_size,
        "the number of keys per block, e.g. block_size=64, or None for the plain op",
    )


def blocked_attention(q: Tensor, k: Tensor, v: Tensor, mask: Any = None, block_size: int = 64):
    """The plain op's softmax(q kᵀ / sqrt(d_k), masked) v, with keys in blocks of
    ``block_size``: peak memory O(T · block_size) instead of O(T · S); see the module doc."""
    check_qkv(q, k, v)
    block_size = check_block_size("blocked_attention", block_size)
    mask = check_mask(mask, (*q.shape[:-1], k.shape[-2]), q)
    return BlockedAttention.apply(q, k, v, mask, block_size=block_size)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Any = None,
    need_weights: bool = False,
    block_size: int | None = None,
) -> Tensor | tuple[Tensor, Any]:
    """softmax(q kᵀ / sqrt(d_k), masked) v. ``block_size=None``: the plain fused op (with
    need_weights, also P); an int: ``blocked_attention``, which never forms P."""
    if block_size is None:
        return plain_attention(q, k, v, mask=mask, need_weights=need_weights)
    check_block_size("scaled_dot_product_attention", block_size)
    if need_weights:
        raise ArgumentError(
            "scaled_dot_product_attention: need_weights=True asks for the (T, S) matrix P, "
            "which block_size never forms; pass block_size=None to get the weights"
        )
    return blocked_attention(q, k, v, mask=mask, block_size=block_size)
