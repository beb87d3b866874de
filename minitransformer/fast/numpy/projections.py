"""The twins of ``ops/projections.py`` for NumPy arrays: an attention layer's projections as
ONE product, and the attention reading its heads from that product's columns (off unless
``fast.enable()``; tested against the references in tests/fast/test_numpy_projections.py).

Projections: the reference's n products (a self-attention's q, k and v) as one, x [W_1 | W_2
| W_3], the weights put side by side first (a (D, 3D) copy, small next to the product);
backward: dx = g [W_1 | W_2 | W_3]^T, one product where the reference makes three and adds
them up, and dW = x^T g, one product whose column blocks are the three weights' gradients
(views; the engine copies each into the optimizer's buffer), db = 1^T g likewise.

PackedAttention: the reference with this package's attention twin (``attention.py``, no row
max where the scores allow) as its math; the heads are read where the product wrote them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...backend import host
from ...ops.projections import PackedAttention as _PackedAttention
from ...ops.projections import Projections as _Projections
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
    """Twin of ``ops.projections.PackedAttention``: the NumPy attention twin as its math."""

    dtypes = ScaledDotProductAttention.dtypes
    attention = ScaledDotProductAttention
