"""Local attention (the paper's Table 1, "restricted" self-attention): O(T·w·d), no (T, S).

q (..., T, d_k), k (..., S, d_k), v (..., S, d_v), mask a key padding mask bool (..., 1, S)
(True = key may be read)  ->  out (..., T, d_v). Key j sits at position j, query i at
p = i + S - T (the queries are the LAST T positions; T <= S, as in cached decoding) and
reads the keys j with |p - j| <= w (causal: p - w <= j <= p), w = ``window``:
    S_pj = q_p · k_j / sqrt(d_k) on those keys;  P = softmax over them;  out_p = sum_j P_pj v_j
the numbers of the plain op under the equivalent band mask. Blocks make it cheap: queries go
in blocks of b = w positions, and block c reads only the keys of its own block and its two
neighbours (3b keys: every |p - j| <= w lies there), so the scores are (..., T/b, b, 3b),
masked by one (b, 3b) band pattern (p - j = t - u + b for row t and key slot u), the key
padding mask and the ends of the sequence (zeros past either end, never read).
Backward, dO = dL/d(out), in the same blocks (P kept, O(T·3b); q, k, v blocks gathered again):
    dV = Pᵀ dO;  dP = dO Vᵀ;  dS = P * (dP - rowsum(dP * P));
    dQ = dS K / sqrt(d_k);  dK = dSᵀ Q / sqrt(d_k)
each key's dK, dV summed over the (up to 3) blocks that read it. A query with no readable key
gets P = 0: out and its gradients are 0, as in the plain op. CHUNK queries at a time (their
scores stay in the CPU's cache: time grows as T). ``Band`` & co.: strided_attention.py's too.
"""

from __future__ import annotations

import math
from typing import Any

from ..checks import flag, positive_int
from ..function import Function
from ..tensor import Tensor
from .attention_checks import check_key_mask, check_qkv, check_queries_last

INF = math.inf
CHUNK = 1024  # queries per chunk


def key_flags(xp, mask, S: int, device: Any):
    """The key padding mask (..., 1, S) (None: all keys) as (..., S, 1) flags (a view)."""
    flags = xp.ones((1,), dtype=xp.bool, device=device) if mask is None else mask
    flags = flags[..., 0, :] if flags.ndim >= 2 else xp.reshape(flags, (-1,))  # no query axis
    return xp.broadcast_to(flags[..., None], (*flags.shape[:-1], S, 1))


def softmax_rows(xp, s):
    """softmax over the last axis; a row whose entries are all -inf gives 0, not NaN."""
    m = xp.max(s, axis=-1, keepdims=True)
    p = xp.exp(s - xp.where(m == -INF, 0.0, m))  # no readable key: shift by 0, not -inf
    total = xp.sum(p, axis=-1, keepdims=True)
    return p / xp.where(total == 0, 1.0, total)


class Band:
    """n queries at positions p0 ... p0 + n - 1 in blocks for the band |p - j| <= window:
    block c (``rows`` queries) reads the 3b keys at first + c·b ..., first = p0 - b."""

    def __init__(self, xp, p0: int, n: int, S: int, window: int, device: Any):
        self.xp, self.n, self.S, self.device = xp, n, S, device
        self.window = min(window, S - 1)  # a wider window reads the same keys
        self.b = max(1, self.window)  # keys per block
        self.rows = min(self.b, n)  # queries per block (n < b: one block of n)
        self.blocks = math.ceil(n / self.rows)
        self.first = p0 - self.b  # position of block 0's first key
        self.read = (max(self.first, 0), min(self.first + (self.blocks + 2) * self.b, S))

    def queries(self, x):
        """(..., n, f) -> (..., blocks, rows, f), zero rows past the last query."""
        xp, n = self.xp, self.blocks * self.rows
        out = xp.zeros((*x.shape[:-2], n, x.shape[-1]), dtype=x.dtype, device=self.device)
        out[..., : self.n, :] = x
        return xp.reshape(out, (*x.shape[:-2], self.blocks, self.rows, x.shape[-1]))

    def queries_back(self, x):
        """(..., blocks, rows, f) -> (..., n, f): the inverse of ``queries``."""
        *lead, blocks, rows, f = x.shape  # no -1: a batch of 0 has nothing to infer it from
        return self.xp.reshape(x, (*lead, blocks * rows, f))[..., : self.n, :]

    def keys(self, x):
        """(..., S, f) keys -> (..., blocks, 3b, f): block c's keys, zeros past either end."""
        xp, b, n, (lo, hi) = self.xp, self.b, self.blocks, self.read
        lead, f = x.shape[:-2], x.shape[-1]
        strip = xp.zeros((*lead, (n + 2) * b, f), dtype=x.dtype, device=self.device)
        strip[..., lo - self.first : hi - self.first, :] = x[..., lo:hi, :]
        strip = xp.reshape(strip, (*lead, n + 2, b, f))  # key block c sits at strip block c + 1
        return xp.concat([strip[..., i : n + i, :, :] for i in range(3)], axis=-2)  # c-1, c, c+1

    def keys_back(self, g, out):
        """Adds (..., blocks, 3b, f) gradients into ``out`` (..., S, f), over reading blocks."""
        xp, b, n, (lo, hi) = self.xp, self.b, self.blocks, self.read
        lead, f = g.shape[:-3], g.shape[-1]
        strip = xp.zeros((*lead, n + 2, b, f), dtype=g.dtype, device=self.device)
        for i in range(3):  # the left neighbour's, the own block's and the right neighbour's
            strip[..., i : n + i, :, :] += g[..., i * b : (i + 1) * b, :]
        strip = xp.reshape(strip, (*lead, (n + 2) * b, f))
        out[..., lo:hi, :] += strip[..., lo - self.first : hi - self.first, :]

    def allowed(self, flags, causal: bool):
        """(..., blocks, rows, 3b) bool: the band pattern & the key exists & it may be read."""
        xp, w = self.xp, self.window
        t, u = xp.arange(self.rows, device=self.device), xp.arange(3 * self.b, device=self.device)
        gap = t[:, None] - u[None, :] + self.b  # p - j, the same in every block: (rows, 3b)
        pattern = (gap <= w) & (gap >= (0 if causal else -w))
        readable = self.keys(flags)[..., 0]  # (..., blocks, 3b); False past either end
        return pattern & readable[..., None, :]


class LocalAttention(Function):
    """out = softmax(q kᵀ / sqrt(d_k) on |p - j| <= window) v, in query blocks."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, q, k, v, mask=None, window=1, causal=False):
        xp, (T, S), dev = ctx.xp, (q.shape[-2], k.shape[-2]), q.device
        flags, scale = key_flags(xp, mask, S, dev), 1.0 / math.sqrt(q.shape[-1])
        outs, ctx.chunks = [], []
        for i0 in range(0, T, CHUNK):  # the scores of CHUNK queries stay in the cache
            i1 = min(i0 + CHUNK, T)
            band = Band(xp, S - T + i0, i1 - i0, S, window, dev)
            qb, kb, vb = band.queries(q[..., i0:i1, :] * scale), band.keys(k), band.keys(v)
            s = xp.where(band.allowed(flags, causal), qb @ kb.mT, -INF)
            p = softmax_rows(xp, s)  # (..., blocks, rows, 3b)
            outs.append(band.queries_back(p @ vb))
            ctx.chunks.append((i0, i1, band, p))  # O(T·3b) kept; qb, kb, vb gathered again
        ctx.save_for_backward(q, k, v)
        ctx.scale = scale
        return xp.concat(outs, axis=-2)

    @staticmethod
    def backward(ctx, grad):
        (q, k, v), xp, dqs = ctx.saved, ctx.xp, []
        dk, dv = xp.zeros_like(k), xp.zeros_like(v)
        for i0, i1, band, p in ctx.chunks:
            qb, kb, vb = band.queries(q[..., i0:i1, :] * ctx.scale), band.keys(k), band.keys(v)
            g = band.queries(grad[..., i0:i1, :])  # (..., blocks, rows, d_v)
            band.keys_back(p.mT @ g, dv)  # dV = Pᵀ dO
            dp = g @ vb.mT
            ds = p * (dp - xp.sum(dp * p, axis=-1, keepdims=True))
            dqs.append(band.queries_back(ds @ kb) * ctx.scale)
            band.keys_back(ds.mT @ qb, dk)  # qb holds q / sqrt(d_k)
        return xp.concat(dqs, axis=-2), dk, dv, None


def check_args(where: str, q: Tensor, k: Tensor, v: Tensor, causal: Any, mask: Any):
    """q, k, v (T <= S), causal and the key padding mask: (causal, mask as a raw array)."""
    check_qkv(q, k, v, where=where)
    causal = flag(where, "causal", causal)
    check_queries_last(where, q, k)
    return causal, check_key_mask(where, mask, q, k)


def local_attention(
    q: Tensor, k: Tensor, v: Tensor, window: int, causal: bool = False, mask: Any = None
) -> Tensor:
    """softmax(q kᵀ / sqrt(d_k)) v over the keys within ``window`` positions of each query
    (causal: the window before it), never forming (T, S): O(T·window·d); see the module doc."""
    window = positive_int("local_attention", "window", window, "the keys each side, e.g. 64")
    causal, mask = check_args("local_attention", q, k, v, causal, mask)
    return LocalAttention.apply(q, k, v, mask, window=window, causal=causal)
