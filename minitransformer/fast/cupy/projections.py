"""The twins of ``ops/projections.py`` for CuPy arrays: an attention layer's projections
with fewer launches, and the attention on the packed heads with this package's fused
softmax (``attention.py``). Tested against the references on the CPU with NumPy in CuPy's
place (tests/fast/test_numpy_projections.py) and on a GPU by ``pytest -m gpu``. Importable
without CuPy.

Launches, counted on a NumPy stand-in that counts CuPy's calls (a tiny step: 311 with the
separate products): Projections forward puts the weights side by side (one copy, and one
for the biases) and runs ONE product with the bias in cuBLASLt's epilogue: 3 launches, as
the Linear twin's three. Backward: dx = g [W_1 | W_2 | W_3]^T is ONE product where the
separate layers launch three and two adds; each weight's dW and db are one cuBLASLt
product reading its column block of g where it lies, written into the optimizer's buffer
(the Linear twin's way: one product of the packed dW would need a copy per parameter
afterwards). PackedAttention writes dq, dk and dv into the packed gradient's columns.
"""

from __future__ import annotations

from typing import Any

from ...ops.projections import PackedAttention as _PackedAttention
from ...ops.projections import Projections as _Projections
from ...ops.projections import head_view
from ..gpu import cublas, cublaslt
from ..gpu.cuda_source import DTYPES
from ..grad_buffers import offered
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


def _into(buffer: Any, shape: tuple[int, ...], like: Any) -> Any:
    """``buffer`` when it can take a result of ``shape`` in ``like``'s dtype, else None."""
    if buffer is None or buffer.shape != shape or buffer.dtype != like.dtype:
        return None
    return buffer if buffer.flags.c_contiguous else None


def _weight_grads(x2: Array, g: Array, need_w: bool, need_b: bool, w_out: Any, b_out: Any):
    """dW = x^T g (D, d) and db = the column sums of g (d,) of one part, written into the
    offered buffers where they fit: both in one cuBLASLt product (the bias-gradient
    epilogue), else cuBLAS's product and CuPy's sum (the Linear twin's way)."""
    D, d = x2.shape[1], g.shape[1]
    w_out, b_out = _into(w_out, (D, d), g), _into(b_out, (d,), g)
    if need_w and need_b:
        db = cp.empty((d,), dtype=g.dtype) if b_out is None else b_out
        epilogue = cublaslt.epilogue_for(False, grad_of="b")
        dw = cublaslt.matmul(x2.mT, g, epilogue, bias=db, out=w_out, cp=cp)
        if dw is not None:
            return dw, db
    dw = cublas.matmul(x2.mT, g, cp, out=w_out) if need_w else None
    db = cp.sum(g, axis=0, out=b_out) if need_b else None
    return dw, db


class Projections(_Projections):
    """Twin of ``ops.projections.Projections``: one product each way (module doc)."""

    dtypes = DTYPES

    @staticmethod
    def forward(ctx, x, *params, parts: int):
        weights, biases = params[:parts], params[parts:]
        w = cp.concatenate(weights, axis=1)  # (D, d_1 + ... + d_n)
        x2 = cp.reshape(x, (-1, x.shape[-1]))  # (rows, D)
        y = None
        if biases:  # x W + b in one launch (cuBLASLt's epilogue), else the add after it
            b = cp.concatenate(biases)
            y = cublaslt.matmul(x2, w, cublaslt.BIAS, bias=b, cp=cp)
            if y is None:
                y = cublas.matmul(x2, w, cp)
                y += b
        else:
            y = cublas.matmul(x2, w, cp)  # (rows, d_1 + ... + d_n): one product
        ctx.save_for_backward(x2, w)
        ctx.widths = [a.shape[1] for a in weights]
        return cp.reshape(y, (*x.shape[:-1], w.shape[1]))

    @staticmethod
    def backward(ctx, grad):
        x2, w = ctx.saved
        widths, needs = ctx.widths, ctx.needs_input_grad
        n = len(widths)
        outs = (*offered(ctx), *[None] * n)  # x, the weights, the biases (padded: none)
        g2 = cp.reshape(grad, (-1, grad.shape[-1]))  # (rows, d_1 + ... + d_n)
        dx = None
        if needs[0]:  # one product
            dx = cp.reshape(cublas.matmul(g2, w.mT, cp), (*grad.shape[:-1], w.shape[0]))
        dws: list[Any] = [None] * n
        dbs: list[Any] = [None] * n if len(needs) > 1 + n else []
        for i, g in enumerate(_column_blocks(g2, widths)):  # (rows, d_i), read in place
            need_w, need_b = needs[1 + i], bool(dbs) and needs[1 + n + i]
            dws[i], db = _weight_grads(x2, g, need_w, need_b, outs[1 + i], outs[1 + n + i])
            if dbs:
                dbs[i] = db
        return (dx, *dws, *dbs)


class PackedAttention(_PackedAttention):
    """Twin of ``ops.projections.PackedAttention``: the CuPy attention twin as its math, its
    dq, dk and dv copied into the packed gradient's columns (one launch each, where merging
    each and concatenating them takes four)."""

    dtypes = DTYPES
    attention = ScaledDotProductAttention

    @staticmethod
    def backward(ctx, grad):
        (h, h_kv), own_q = ctx.heads, ctx.own_q
        dq, dk, dv, _ = ScaledDotProductAttention.backward(ctx.inner, grad)  # (B, h, L, d)
        if not ctx.needs_input_grad[0]:  # only q's gradient (cross-attention)
            return None, dq, None
        B, _, S, d_k = dk.shape
        d_v = dv.shape[-1]
        if h_kv < h:  # GQA: each key/value head's gradient sums its copies
            dk = cp.sum(cp.reshape(dk, (B, h_kv, h // h_kv, S, d_k)), axis=2)
            dv = cp.sum(cp.reshape(dv, (B, h_kv, h // h_kv, S, d_v)), axis=2)
        dy = cp.empty(ctx.shape, dtype=grad.dtype)  # (B, L, C)
        at = h * d_k if own_q else 0  # where k's columns start
        if own_q:
            head_view(cp, dy, 0, h, d_k)[...] = dq
        head_view(cp, dy, at, h_kv, d_k)[...] = dk
        head_view(cp, dy, at + h_kv * d_k, h_kv, d_v)[...] = dv
        return dy, (None if own_q else dq), None
