"""Strided attention (Child et al. 2019, Sparse Transformers): O(T·(s + S/s)·d), no (T, S).

q (..., T, d_k), k (..., S, d_k), v (..., S, d_v), mask a key padding mask bool (..., 1, S)
(True = key may be read)  ->  out (..., T, d_v). Query i sits at p = i + S - T (the LAST T
positions; T <= S) and reads the keys j with, s = ``stride``,
    |p - j| < s  (the band)   or   (p - j) % s == 0  (the column)      (causal: and j <= p)
with ONE softmax over them: S_pj = q_p · k_j / sqrt(d_k), P = softmax, out_p = sum_j P_pj v_j,
the numbers of the plain op under the equivalent mask. Built from two parts:
- the band: ``local_attention``'s blocks with window s - 1, scores (..., T/b, b, 3b);
- the column: the keys j ≡ p (mod s) other than j = p (the band holds that one, so it counts
  once). Queries of one residue r share their keys j = r, r + s, r + 2s, ...: with
  R = min(s, T) query slots, slot r holds the queries i = r, r + R, r + 2R, ... (all of
  residue (S - T + r) mod s) and gathers its nc = ceil(S/s) keys; the scores are
  (..., R, T/R, nc), the key at m = (p - j)/s strides read when m != 0 (causal: m > 0).
Both parts' scores are laid out per query, concatenated to (..., T, 3b + nc) and go through
one softmax; P splits back into the two layouts for out = P_band V_band + P_col V_col.
Backward, with dO = dL/d(out), the plain op's formulas on the concatenated rows:
    dP = [dO V_bandᵀ, dO V_colᵀ];  dS = P * (dP - rowsum(dP * P));
    dQ = (dS_band K_band + dS_col K_col) / sqrt(d_k);  dK = dSᵀ Q / sqrt(d_k);  dV = Pᵀ dO
each key's dK, dV summed over the band blocks and the column slot that read it (a key sits in
at most one slot). A query with no readable key gets out 0 and gradient 0, as the plain op.
"""

from __future__ import annotations

import math
from typing import Any

from ..checks import positive_int
from ..function import Function
from ..tensor import Tensor
from .local_attention import INF, Band, check_args, key_flags, softmax_rows


class Columns:
    """The column layout: R = min(s, T) query slots, each with its nc keys j ≡ p (mod s)."""

    def __init__(self, xp, T: int, S: int, stride: int, device: Any):
        self.xp, self.T, self.S, self.s, self.device = xp, T, S, stride, device
        self.R, self.nc = min(stride, T), math.ceil(S / stride)
        self.rows = math.ceil(T / self.R)  # queries per slot
        r = xp.reshape(xp.arange(self.R, device=device), (-1, 1, 1))
        a = xp.reshape(xp.arange(self.rows, device=device), (1, -1, 1))
        c = xp.reshape(xp.arange(self.nc, device=device), (1, 1, -1))
        first = S - T + r  # position of slot r's first query
        self.index = (first % stride + c * stride)[:, 0, :]  # (R, nc): key j of slot r, column c
        self.strides = first // stride + a - c  # (R, rows, nc): m = (p - j) / s

    def queries(self, x):
        """(..., T, f) -> (..., R, rows, f): query i = a·R + r at slot r, row a (zeros after T)."""
        xp, lead, f = self.xp, x.shape[:-2], x.shape[-1]
        out = xp.zeros((*lead, self.rows * self.R, f), dtype=x.dtype, device=self.device)
        out[..., : self.T, :] = x
        return swap(xp, xp.reshape(out, (*lead, self.rows, self.R, f)))

    def queries_back(self, x):
        """(..., R, rows, f) -> (..., T, f): the inverse of ``queries``."""
        x = swap(self.xp, x)  # (..., rows, R, f)
        *lead, rows, slots, f = x.shape  # no -1: a batch of 0 has nothing to infer it from
        return self.xp.reshape(x, (*lead, rows * slots, f))[..., : self.T, :]

    def keys(self, x):
        """(..., S, f) -> (..., R, nc, f): slot r's keys (past S: key S - 1, never read)."""
        index = self.xp.reshape(self.xp.minimum(self.index, self.S - 1), (-1,))
        out = self.xp.take(x, index, axis=x.ndim - 2)
        return self.xp.reshape(out, (*x.shape[:-2], self.R, self.nc, x.shape[-1]))

    def keys_back(self, g):
        """(..., R, nc, f) gradients -> (..., S, f): key j takes its slot's row (0 if none)."""
        xp, s, lead, f = self.xp, self.s, g.shape[:-3], g.shape[-1]
        j = xp.arange(self.S, device=self.device)
        r = (j - (self.S - self.T)) % s  # the slot whose residue is j's, if r < R
        slot = xp.where(r < self.R, r * self.nc + j // s, self.R * self.nc)
        zero = xp.zeros((*lead, 1, f), dtype=g.dtype, device=self.device)
        rows = xp.concat([xp.reshape(g, (*lead, self.R * self.nc, f)), zero], axis=-2)
        return xp.take(rows, slot, axis=rows.ndim - 2)

    def allowed(self, flags, causal: bool):
        """(..., R, rows, nc) bool: m != 0 (causal: m > 0) & the key exists & may be read."""
        pattern = self.strides > 0 if causal else self.strides != 0
        readable = self.keys(flags)[..., 0] & (self.index < self.S)  # (..., R, nc)
        return pattern & readable[..., None, :]


def swap(xp, x):
    """Swap the axes -3 and -2."""
    axes = list(range(x.ndim))
    axes[-3], axes[-2] = axes[-2], axes[-3]
    return xp.permute_dims(x, tuple(axes))


class StridedAttention(Function):
    """out = softmax(q kᵀ / sqrt(d_k) on the band and the column) v, one softmax per query."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, q, k, v, mask=None, stride=1, causal=False):
        xp, (T, S), dev = ctx.xp, (q.shape[-2], k.shape[-2]), q.device
        band, cols = Band(xp, S - T, T, S, stride - 1, dev), Columns(xp, T, S, stride, dev)
        flags, scale = key_flags(xp, mask, S, dev), 1.0 / math.sqrt(q.shape[-1])
        qb, kb, vb = band.queries(q * scale), band.keys(k), band.keys(v)
        qc, kc, vc = cols.queries(q * scale), cols.keys(k), cols.keys(v)
        s_band = xp.where(band.allowed(flags, causal), qb @ kb.mT, -INF)  # (..., T/b, b, 3b)
        s_cols = xp.where(cols.allowed(flags, causal), qc @ kc.mT, -INF)  # (..., R, T/R, nc)
        s = xp.concat([band.queries_back(s_band), cols.queries_back(s_cols)], axis=-1)
        p = softmax_rows(xp, s)  # (..., T, 3b + nc): one softmax over both parts
        w = 3 * band.b
        pb, pc = band.queries(p[..., :w]), cols.queries(p[..., w:])
        ctx.save_for_backward(qb, kb, vb, qc, kc, vc, p, pb, pc)
        ctx.band, ctx.cols, ctx.scale = band, cols, scale  # the layouts, kept for backward
        return band.queries_back(pb @ vb) + cols.queries_back(pc @ vc)

    @staticmethod
    def backward(ctx, grad):
        xp, band, cols, w = ctx.xp, ctx.band, ctx.cols, 3 * ctx.band.b
        qb, kb, vb, qc, kc, vc, p, pb, pc = ctx.saved
        gb, gc = band.queries(grad), cols.queries(grad)
        dp = xp.concat([band.queries_back(gb @ vb.mT), cols.queries_back(gc @ vc.mT)], axis=-1)
        ds = p * (dp - xp.sum(dp * p, axis=-1, keepdims=True))  # (..., T, 3b + nc)
        dsb, dsc = band.queries(ds[..., :w]), cols.queries(ds[..., w:])
        dq = (band.queries_back(dsb @ kb) + cols.queries_back(dsc @ kc)) * ctx.scale
        dk = cols.keys_back(dsc.mT @ qc)  # qc, qb hold q / sqrt(d_k)
        band.keys_back(dsb.mT @ qb, dk)
        dv = cols.keys_back(pc.mT @ gc)
        band.keys_back(pb.mT @ gb, dv)
        return dq, dk, dv, None


def strided_attention(
    q: Tensor, k: Tensor, v: Tensor, stride: int, causal: bool = False, mask: Any = None
) -> Tensor:
    """softmax(q kᵀ / sqrt(d_k)) v over the keys j with |p - j| < stride or (p - j) a
    multiple of stride (causal: j <= p), never forming (T, S); see the module doc."""
    where, fix = "strided_attention", "the band's width and the column step, e.g. 64"
    stride = positive_int(where, "stride", stride, fix)
    causal, mask = check_args(where, q, k, v, causal, mask)
    return StridedAttention.apply(q, k, v, mask, stride=stride, causal=causal)
