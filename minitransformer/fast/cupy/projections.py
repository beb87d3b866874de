"""The twins of ``ops/projections.py`` for CuPy arrays: an attention layer's projections as
ONE cuBLAS product each way, and the attention on the packed heads with this package's
fused softmax (``attention.py``). Tested against the references on the CPU with NumPy in
CuPy's place (tests/fast/test_numpy_projections.py) and on a GPU by ``pytest -m gpu``.
Importable without CuPy.

Projections forward: the weights side by side (one copy), x [W_1 | W_2 | W_3] (one product,
``fast/gpu/cublas.py``), the biases added in one launch: 4 launches where the reference's
three products and three bias adds take 6 (with cuBLASLt's bias epilogue, 3: the Linear
twin's). Backward: dx = g [W_1 | W_2 | W_3]^T is one product where the reference launches
three and two adds; dW = x^T g one product and db one column sum, whose column blocks are
the weights' gradients (the engine copies each into the optimizer's buffer).
"""

from __future__ import annotations

from typing import Any

from ...ops.projections import PackedAttention as _PackedAttention
from ...ops.projections import Projections as _Projections
from ..gpu import cublas
from ..gpu.cuda_source import DTYPES
from .attention import ScaledDotProductAttention

try:
    import cupy as cp
except ImportError:  # no CuPy: the module still imports (its names are checked on the CPU)
    cp = None

Array = Any  # cupy.ndarray


def _column_blocks(a: Array, widths: list[int]) -> list[Array]:
    """a (..., sum(widths)) cut into its column blocks (views), one per width."""
    blocks, start = [], 0
    for w in widths:
        blocks.append(a[..., start : start + w])
        start += w
    return blocks


class Projections(_Projections):
    """Twin of ``ops.projections.Projections``: one product each way (module doc)."""

    dtypes = DTYPES

    @staticmethod
    def forward(ctx, x, *params, parts: int):
        weights, biases = params[:parts], params[parts:]
        w = cp.concatenate(weights, axis=1)  # (D, d_1 + ... + d_n)
        x2 = cp.reshape(x, (-1, x.shape[-1]))  # (rows, D)
        y = cublas.matmul(x2, w, cp)  # (rows, d_1 + ... + d_n): one product
        if biases:
            y += cp.concatenate(biases)
        ctx.save_for_backward(x2, w)
        ctx.widths = [a.shape[1] for a in weights]
        return cp.reshape(y, (*x.shape[:-1], w.shape[1]))

    @staticmethod
    def backward(ctx, grad):
        x2, w = ctx.saved
        widths, needs = ctx.widths, ctx.needs_input_grad
        n = len(widths)
        g2 = cp.reshape(grad, (-1, grad.shape[-1]))  # (rows, d_1 + ... + d_n)
        dx = None
        if needs[0]:
            dx = cp.reshape(cublas.matmul(g2, w.mT, cp), (*grad.shape[:-1], w.shape[0]))
        dws = [None] * n
        if any(needs[1 : 1 + n]):
            dws = _column_blocks(cublas.matmul(x2.mT, g2, cp), widths)  # one product
        dbs: list[Any] = []
        if any(needs[1 + n :]):
            dbs = _column_blocks(cp.sum(g2, axis=0), widths)
        return (dx, *dws, *dbs)


class PackedAttention(_PackedAttention):
    """Twin of ``ops.projections.PackedAttention``: the CuPy attention twin as its math."""

    dtypes = DTYPES
    attention = ScaledDotProductAttention
