"""The twins of ``ops/projections.py`` for NumPy arrays: an attention layer's projections as
ONE product, and the attention reading its heads from that product's columns (off unless
``fast.enable()``; tested against the references in tests/fast/test_numpy_projections.py).

Projections: the reference's n products (a self-attention's q, k and v) as one, x [W_1 | W_2
| W_3], the weights put side by side first (a (D, 3D) copy, small next to the product);
backward: dx = g [W_1 | W_2 | W_3]^T, one product where the reference makes three and adds
them up, and dW = x^T g, one product whose column blocks are the three weights' gradients
(views; the engine copies each into the optimizer's buffer), db = 1^T g likewise.

PackedAttention: the reference with this package's attention twin (``attention.py``, no row
max where the scores allow) as its math; the heads are read where the product wrote them,
and their gradients written there (the attention twin's ``grad_out``): no concatenation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...backend import host
from ...ops.projections import PackedAttention as _PackedAttention
from ...ops.projections import Projections as _Projections
from ...ops.projections import head_view
from .attention import ScaledDotProductAttention

Array = np.ndarray
_ONES_ROW: dict[Any, Array] = {}  # dtype -> a row of ones, as long as the most rows seen


def _column_blocks(a: Array, widths: list[int]) -> list[Array]:
    """a (..., sum(widths)) cut into its column blocks (views), one per width."""
    blocks, start = [], 0
    for w in widths:
        blocks.append(a[..., start : start + w])
        start += w
    return blocks


class Projections(_Projections):
    """Twin of ``ops.projections.Projections``: one product each way (module doc)."""

    dtypes = None

    @staticmethod
    def forward(ctx, x, *params, parts: int):
        weights, biases = params[:parts], params[parts:]
        w = np.concatenate(weights, axis=1)  # (D, d_1 + ... + d_n)
        y = host.matmul(x, w)  # (..., d_1 + ... + d_n): one product
        if biases:
            y += np.concatenate(biases)
        ctx.save_for_backward(x, w)
        ctx.widths = [a.shape[1] for a in weights]
        return y

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved
        widths, needs = ctx.widths, ctx.needs_input_grad
        n = len(widths)
        d_in, d_out = x.shape[-1], grad.shape[-1]
        rows = grad.size // d_out if d_out else x.size // d_in if d_in else 0
        g2 = grad.reshape(rows, d_out)
        dx = host.matmul(grad, w.T) if needs[0] else None  # (..., D): one product
        dws = [None] * n
        if any(needs[1 : 1 + n]):
            dws = _column_blocks(host.matmul(x.reshape(rows, d_in).T, g2), widths)
        dbs: list[Any] = []
        if any(needs[1 + n :]):
            ones = _ONES_ROW.get(grad.dtype)  # a view of one cached row of ones
            if ones is None or ones.shape[0] < rows:
                ones = _ONES_ROW[grad.dtype] = np.ones(rows, dtype=grad.dtype)
            dbs = _column_blocks(host.matmul(ones[:rows], g2), widths)
        return (dx, *dws, *dbs)


class PackedAttention(_PackedAttention):
    """Twin of ``ops.projections.PackedAttention``: the NumPy attention twin as its math,
    its dq, dk and dv written into the packed gradient's columns, where forward read q, k
    and v (no concatenation); GQA's sums over each head's copies likewise."""

    dtypes = ScaledDotProductAttention.dtypes
    attention = ScaledDotProductAttention

    @staticmethod
    def backward(ctx, grad):
        inner, (h, h_kv), own_q = ctx.inner, ctx.heads, ctx.own_q
        if not ctx.needs_input_grad[0]:  # only q's gradient (cross-attention)
            inner.grad_out = (None, None, None)
            return None, ScaledDotProductAttention.backward(inner, grad)[0], None
        q, k, v = inner.saved  # (B, h, L, d) each: k and v repeated when GQA
        d_k, d_v = k.shape[-1], v.shape[-1]
        dy = np.empty(ctx.shape, dtype=grad.dtype)  # (B, L, C)
        at = h * d_k if own_q else 0  # where k's columns start
        q_cols = head_view(np, dy, 0, h, d_k) if own_q else None
        k_cols = head_view(np, dy, at, h_kv, d_k)
        v_cols = head_view(np, dy, at + h_kv * d_k, h_kv, d_v)
        shared = h_kv < h  # GQA: each key/value head's gradient sums its copies, below
        inner.grad_out = (q_cols, None if shared else k_cols, None if shared else v_cols)
        dq, dk, dv, _ = ScaledDotProductAttention.backward(inner, grad)
        if shared:
            B, _, S, _ = dk.shape
            np.sum(dk.reshape(B, h_kv, h // h_kv, S, d_k), axis=2, out=k_cols)
            np.sum(dv.reshape(B, h_kv, h // h_kv, S, d_v), axis=2, out=v_cols)
        return dy, (None if own_q else dq), None
