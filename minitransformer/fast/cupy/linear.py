"""The Linear layer's twin for CuPy arrays: the reference's products (``ops/matmul.py``), with
the bias inside them, and the weight's and the bias's gradients written straight into the
optimizer's gradient buffer.

Forward: y = x W + b is one cuBLASLt product whose epilogue adds b (``fast/gpu/cublaslt.py``),
where the reference launches the product and then the add; without a bias (the tied output
projection, the model's largest product) y = x W is one cuBLAS GEMM over all rows
(``fast/gpu/cublas.py``: a transposed weight read in place), where the reference's
``matmul`` of a (B, T, D) stack would be a batch of B products. Backward: dW = x^T g and
db = the column sums of g are one cuBLASLt product whose epilogue sums g's columns into db,
where the reference launches the product and then a sum. Where cuBLASLt offers no algorithm
the twin launches what the reference launches.

Why: an optimizer keeps every gradient in one flat buffer (``optim/flatbuffer.py``); a
gradient that backward makes as a new array is then copied there, one launch per parameter
(64 of a tiny step's 85 parameters are a Linear's). The engine offers each parameter's
buffer for its first gradient (``grad_buffers.offered``); this twin's
backward computes dW with ``fast/gpu/cublas.py``'s product into it and db with CuPy's sum into
it (or both at once, above), so no copy follows. Where no buffer is offered (a second
gradient, no optimizer) it makes new arrays, as the reference does. Registered by
``fast/cupy/__init__.py``'s ``TWINS``; its wiring tested on the CPU in
tests/fast/test_cupy_wiring.py.
"""

from __future__ import annotations

import math
from typing import Any

from ...ops.matmul import Linear as _Linear
from ..gpu import cublas, cublaslt
from ..gpu.cuda_source import DTYPES
from ..grad_buffers import offered

try:
    import cupy as cp
except ImportError:  # a machine without CuPy: the names are still here, for tests
    cp = None

Array = Any  # cupy.ndarray


def _into(buffer: Any, like: Any) -> Any:
    """``buffer`` when it can take a result of ``like``'s dtype in place, else None."""
    if buffer is None or buffer.dtype != like.dtype or not buffer.flags.c_contiguous:
        return None
    return buffer


class Linear(_Linear):
    """Twin of ``ops.matmul.Linear``: y = x W + b and its backward (dx = g W^T, dW = x^T g
    or g^T x for a weight stored transposed, db = the column sums of g), as the reference
    computes them, the bias in the products' epilogues and the parameters' gradients written
    into the buffers the engine offers (module doc)."""

    dtypes = DTYPES

    @staticmethod
    def forward(ctx, x, weight, bias=None, transpose_weight=False):
        if bias is not None and not bias.flags.c_contiguous:
            return _Linear.forward(ctx, x, weight, bias, transpose_weight)
        x2 = cp.reshape(x, (math.prod(x.shape[:-1]), x.shape[-1]))  # (rows, d_in)
        w = weight.mT if transpose_weight else weight  # (d_in, d_out), a view: read in place
        if bias is None:  # (the tied output projection) one GEMM over all rows
            y = cublas.matmul(x2, w, cp)
        else:
            y = cublaslt.matmul(x2, w, cublaslt.BIAS, bias=bias, cp=cp)  # x W + b, one launch
            if y is None:  # no cuBLASLt algorithm here: the reference's two launches
                return _Linear.forward(ctx, x, weight, bias, transpose_weight)
        ctx.save_for_backward(x2, weight)  # the rows, made once (backward takes any shape)
        ctx.transposed = transpose_weight
        return cp.reshape(y, (*x.shape[:-1], w.shape[1]))

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        x, weight = ctx.saved
        needs = ctx.needs_input_grad
        outs = (*offered(ctx), None)  # x, weight[, bias], padded: no bias, no buffer
        x2 = xp.reshape(x, (-1, x.shape[-1]))  # (rows, d_in): x itself, or the reference's x
        g2 = xp.reshape(grad, (-1, grad.shape[-1]))  # (rows, d_out)
        dx = dw = db = None
        if needs[0]:
            w_t = weight if ctx.transposed else weight.mT  # (d_out, d_in)
            dx = xp.reshape(xp.matmul(g2, w_t), (*grad.shape[:-1], x.shape[-1]))
        need_db = len(needs) > 2 and needs[2]
        a, b = (g2.mT, x2) if ctx.transposed else (x2.mT, g2)
        if needs[1] and need_db:  # dW and db in one product: the epilogue sums g's columns
            db = _into(outs[2] if len(outs) > 2 else None, g2)
            db = cp.empty((g2.shape[1],), dtype=g2.dtype) if db is None else db
            epilogue = cublaslt.epilogue_for(False, grad_of="a" if ctx.transposed else "b")
            dw = cublaslt.matmul(a, b, epilogue, bias=db, out=_into(outs[1], weight), cp=cp)
            if dw is not None:
                return dx, dw, db
        if needs[1]:
            dw = cublas.matmul(a, b, cp, out=_into(outs[1], weight))
        if need_db:
            db = cp.sum(g2, axis=0, out=_into(outs[2] if len(outs) > 2 else None, g2))
        return dx, dw, db
