"""Causal linear attention's running sums (``ops/linear_attention.py``), in chunks of positions.

Causal query t reads C_t = C⁰ + sum_{s<=t} K_s v_sᵀ (d_k, d_v) and z_t = z⁰ + sum_{s<=t} K_s
(d_k): the recurrence C_t = C_{t-1} + K_t v_tᵀ of "Transformers are RNNs". The C_t are built
CHUNK positions at a time, each chunk starting from the previous chunk's last C, so only
(CHUNK, d_k, d_v) of them exist at once (and stay in cache): time O(T·d_k·d_v), memory
O(CHUNK·d_k·d_v + T·d). Backward runs the same chunks for dQ_t = C_t dn_t, then in reverse
for R_t = sum_{s>=t} Q_s dn_sᵀ, the sum behind dK and dv.
"""

from __future__ import annotations

CHUNK = 64  # positions per chunk: (64, 64, 64) float32 is 1 MiB


def running_sums(a, b, start, reverse=False):
    """S_t = start + sum_{s<=t} a_s b_sᵀ, (..., c, d_a, d_b) from a (..., c, d_a), b (..., c,
    d_b), start (..., d_a, d_b) or None; reverse: over s >= t. A loop over t, in place: NumPy's
    cumsum along an outer axis strides across memory and is several times slower."""
    S = a[..., :, None] * b[..., None, :]  # a_t b_tᵀ
    c = S.shape[-3]
    if start is not None:
        S[..., c - 1 if reverse else 0, :, :] += start
    for t in range(c - 2, -1, -1) if reverse else range(1, c):
        S[..., t, :, :] += S[..., t + 1 if reverse else t - 1, :, :]
    return S


def chunks(T, reverse=False):
    """The [a, b) ranges of CHUNK positions covering 0..T-1 (last to first when reverse)."""
    ranges = [(a, min(a + CHUNK, T)) for a in range(0, T, CHUNK)]
    return ranges[::-1] if reverse else ranges


def causal_forward(xp, Q, K, v, kv, z):
    """num_t = Q_tᵀ C_t (..., T, d_v), den_t = Q_t · z_t (..., T, 1), and the sums after the
    last position, kv (..., d_k, d_v) and z (..., d_k); Q, K, v the T positions, kv and z the
    sums before them (None: 0)."""
    zs = xp.cumulative_sum(K, axis=-2)
    if z is not None:
        zs = zs + z[..., None, :]
    nums = []
    for a, b in chunks(Q.shape[-2]):
        C = running_sums(K[..., a:b, :], v[..., a:b, :], kv)  # (..., b - a, d_k, d_v)
        nums.append(xp.matmul(Q[..., a:b, None, :], C)[..., 0, :])
        kv = C[..., -1, :, :]
    num = nums[0] if len(nums) == 1 else xp.concat(nums, axis=-2)
    return num, xp.sum(Q * zs, axis=-1, keepdims=True), kv, zs[..., -1, :]


def causal_backward(xp, Q, K, v, dn, dden, kv, z):
    """dQ (..., T, d_k), and dK (..., T, d_k), dv (..., T, d_v) of the T positions' keys, with
    R_0 = sum_t Q_t dn_tᵀ and r_0 = sum_t dden_t Q_t (what every earlier key gets); arguments
    as in ``causal_forward``, dn (..., T, d_v), dden (..., T, 1)."""
    T = Q.shape[-2]
    zs = xp.cumulative_sum(K, axis=-2)
    if z is not None:
        zs = zs + z[..., None, :]
    dQs = []
    for a, b in chunks(T):  # dQ_t = C_t dn_t + dden_t z_t
        C = running_sums(K[..., a:b, :], v[..., a:b, :], kv)
        dQs.append(xp.matmul(C, dn[..., a:b, :, None])[..., 0])
        kv = C[..., -1, :, :]
    dQ = (dQs[0] if T <= CHUNK else xp.concat(dQs, axis=-2)) + dden * zs
    r = xp.flip(xp.cumulative_sum(xp.flip(dden * Q, axis=-2), axis=-2), axis=-2)  # s >= t
    dKs, dvs, R = [], [], None
    for a, b in chunks(T, reverse=True):  # R_t = sum_{s>=t} Q_s dn_sᵀ
        R = running_sums(Q[..., a:b, :], dn[..., a:b, :], R, reverse=True)
        dKs.insert(0, xp.matmul(R, v[..., a:b, :, None])[..., 0])  # R_t v_t
        dvs.insert(0, xp.matmul(K[..., a:b, None, :], R)[..., 0, :])  # R_tᵀ K_t
        R = R[..., 0, :, :]
    dK = (dKs[0] if T <= CHUNK else xp.concat(dKs, axis=-2)) + r
    dv = dvs[0] if T <= CHUNK else xp.concat(dvs, axis=-2)
    return dQ, dK, dv, R, r[..., 0:1, :]
