"""Linear attention (Katharopoulos et al. 2020, "Transformers are RNNs"): O(T·d²), no (T, S).

q (..., T, d_k), k (..., S, d_k), v (..., S, d_v), mask a key padding mask bool (..., 1, S)
(True = key may be read)  ->  out (..., T, d_v). With Q_i = phi(q_i) and K_j = m_j phi(k_j)
(phi = elu + 1 > 0, ``ops/feature_map.py``; a masked key has K_j = 0):
    out_i = Q_iᵀ C_i / (Q_i · z_i),   C_i = sum_j K_j v_jᵀ (d_k, d_v),   z_i = sum_j K_j (d_k)
No softmax, no scale. Non-causal: C and z sum over every key (C = Kᵀ v, one product).
Causal: query i sits at position p = i + o, o = S - T (the queries are the LAST T positions;
T <= S), and reads j <= p: C_i = C⁰ + sum_{t<=i} K_{o+t} v_{o+t}ᵀ, a running (prefix) sum
over the T query positions on top of C⁰ = the first o keys' sum (likewise z), built in chunks
(``ops/linear_attention_sums.py``). Time O(T·d_k·d_v), never a (T, S) array. A row with
nothing to read (denominator 0) gives out 0 and gradient 0.

Backward, g_i = dL/d(out_i), n_i = Q_iᵀ C_i, den_i = Q_i · z_i, out_i = n_i / den_i:
    dn_i = g_i / den_i;   dden_i = -(g_i · out_i) / den_i            (both 0 where den_i = 0)
    dQ_i = C_i dn_i + dden_i z_i;   dq = dQ * phi'(q),  phi'(x) = 1 (x > 0), e^x otherwise
    R_j = sum_{i reads j} Q_i dn_iᵀ (d_k, d_v);   r_j = sum_{i reads j} dden_i Q_i (d_k)
    dK_j = R_j v_j + r_j,  dk = m * dK * phi'(k);   dv_j = R_jᵀ K_j
Non-causal: every query reads every key, so R = Qᵀ dn and r are single sums. Causal: key
j is read by the queries with p >= j, a REVERSE cumsum over the queries (for j < o: all of
them, R_0). The C_i are recomputed in backward, chunk by chunk, rather than kept.
"""

from __future__ import annotations

from typing import Any

from ..checks import flag
from ..function import Function
from ..tensor import Tensor
from .attention_checks import check_key_mask, check_qkv, check_queries_last
from .feature_map import FEATURE_MAPS, check_feature_map
from .linear_attention_sums import causal_backward, causal_forward


def masked_keys(xp, K, mask):
    """K with the masked keys' rows set to 0; mask (..., 1, S) (or fewer axes) -> (..., S, 1)."""
    if mask is None:
        return K
    m = mask[..., 0, :, None] if mask.ndim >= 2 else mask[..., None]
    return xp.where(m, K, 0.0)


class LinearAttention(Function):
    """out_i = phi(q_i)ᵀ C_i / (phi(q_i) · z_i) (see the module doc); causal by running sums."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, q, k, v, mask=None, causal=False, feature_map="elu1"):
        xp, (phi, _) = ctx.xp, FEATURE_MAPS[feature_map]
        Q, K = phi(xp, q), masked_keys(xp, phi(xp, k), mask)
        if causal:  # the first o = S - T keys are read by every query: their sums start C
            o, kv, z = _early_sums(xp, K, v, q.shape[-2])
            num, den, _, _ = causal_forward(xp, Q, K[..., o:, :], v[..., o:, :], kv, z)
        else:
            kv, z = xp.matmul(K.mT, v), xp.sum(K, axis=-2, keepdims=True)  # (..., 1, d_k)
            num, den = xp.matmul(Q, kv), xp.sum(Q * z, axis=-1, keepdims=True)
            ctx.sums = kv, z
        empty = den == 0  # nothing to read: out 0
        den = xp.where(empty, 1.0, den)
        out = num / den
        ctx.save_for_backward(q, k, v, Q, K, out, den, empty)
        ctx.mask, ctx.causal, ctx.feature_map = mask, causal, feature_map
        return out

    @staticmethod
    def backward(ctx, grad):
        xp, (_, dphi) = ctx.xp, FEATURE_MAPS[ctx.feature_map]
        q, k, v, Q, K, out, den, empty = ctx.saved
        dn = xp.where(empty, 0.0, grad / den)  # (..., T, d_v)
        dden = -xp.sum(dn * out, axis=-1, keepdims=True)  # (..., T, 1)
        if ctx.causal:
            o, kv, z = _early_sums(xp, K, v, q.shape[-2])
            dQ, dK, dv, R0, r0 = causal_backward(
                xp, Q, K[..., o:, :], v[..., o:, :], dn, dden, kv, z
            )
            if o > 0:  # the keys before the first query: read by every query (R_0, r_0)
                dK = xp.concat([xp.matmul(v[..., :o, :], R0.mT) + r0, dK], axis=-2)
                dv = xp.concat([xp.matmul(K[..., :o, :], R0), dv], axis=-2)
        else:
            kv, z = ctx.sums
            dQ = xp.matmul(dn, kv.mT) + dden * z
            R = xp.matmul(Q.mT, dn)  # (..., d_k, d_v)
            r = xp.sum(dden * Q, axis=-2, keepdims=True)  # (..., 1, d_k)
            dK, dv = xp.matmul(v, R.mT) + r, xp.matmul(K, R)
        need_q, need_k, need_v = ctx.needs_input_grad[:3]
        dq = dQ * dphi(xp, q, Q) if need_q else None
        dk = masked_keys(xp, dK * dphi(xp, k, K), ctx.mask) if need_k else None  # K: 0 if masked
        return dq, dk, dv if need_v else None, None


def _early_sums(xp, K, v, T):
    """o = S - T and the sums of the first o keys, kv (..., d_k, d_v) and z (..., d_k) (None
    when o = 0): what every causal query reads before its own part of the keys."""
    o = K.shape[-2] - T
    if o == 0:
        return 0, None, None
    return o, xp.matmul(K[..., :o, :].mT, v[..., :o, :]), xp.sum(K[..., :o, :], axis=-2)


def linear_attention(
    q: Tensor, k: Tensor, v: Tensor, causal: bool = False, mask: Any = None,
    feature_map: str = "elu1",
) -> Tensor:  # fmt: skip
    """out_i = phi(q_i)ᵀ sum_j phi(k_j) v_jᵀ / (phi(q_i) · sum_j phi(k_j)), over every key or
    (causal) over j <= i + S - T, never forming (T, S): O(T·d²); see the module doc."""
    where = "linear_attention"
    check_qkv(q, k, v, where=where)
    causal = flag(where, "causal", causal)
    feature_map = check_feature_map(where, feature_map)
    mask = check_key_mask(where, mask, q, k)
    if causal:  # query i sits at i + S - T and reads the keys up to there
        check_queries_last(where, q, k)
    return LinearAttention.apply(q, k, v, mask, causal=causal, feature_map=feature_map)
