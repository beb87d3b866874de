"""The Linear layer's twin for NumPy arrays: ``ops/matmul.py``'s ``Linear`` with its backward's
dW and db written where the optimizer reads them (off unless ``fast.enable()``; tested
against the reference in tests/fast/test_numpy_linear.py; its measured worth:
docs/measurements.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...backend import host
from ...ops.matmul import Linear as _Linear
from ..grad_buffers import offered

Array = np.ndarray

# The Linear layer's backward: the reference's products, each parameter's gradient written
# where the optimizer reads it (``grad_buffers.offered``: the flat
# buffer's view of a parameter whose first gradient this is; the reference's dW and db are
# copied there, and 64 of a tiny step's 85 parameters are a Linear's), and db as one product
# with a row of ones (a GEMV, ~5 µs, where the column sum over 1,024 rows takes ~25 µs).
_ONES_ROW: dict[Any, Array] = {}  # dtype -> a row of ones, as long as the most rows seen


class Linear(_Linear):
    """Twin of ``ops.matmul.Linear``'s backward (the forward is the reference's): dx = g W^T,
    dW = x^T g (g^T x for a weight stored transposed) and db = 1^T g over all rows, dW and
    db written into the buffers the engine offers."""

    dtypes = None

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved
        needs = ctx.needs_input_grad
        outs = (*offered(ctx), None)  # x, weight[, bias], padded: no bias, no buffer
        d_in, d_out = x.shape[-1], grad.shape[-1]
        n = grad.size // d_out if d_out else x.size // d_in if d_in else 0  # rows
        g2 = grad.reshape(n, d_out)  # (rows, d_out)
        dx = dw = db = None
        if needs[0]:
            dx = host.matmul(grad, weight if ctx.transposed else weight.mT)  # (..., d_in)
        if needs[1]:
            x2 = x.reshape(n, d_in)
            a, b = (g2.T, x2) if ctx.transposed else (x2.T, g2)
            out = outs[1]  # the offered buffer, where the product fits (else None)
            fits = out is not None and out.shape == weight.shape and out.dtype == weight.dtype
            dw = host.matmul(a, b, out=out if fits else None)
        if len(needs) > 2 and needs[2]:
            ones = _ONES_ROW.get(grad.dtype)  # a view of one cached row of ones
            if ones is None or ones.shape[0] < n:
                ones = _ONES_ROW[grad.dtype] = np.ones(n, dtype=grad.dtype)
            out = outs[2]
            fits = out is not None and out.shape == (d_out,) and out.dtype == grad.dtype
            db = host.matmul(ones[:n], g2, out=out if fits else None)
        return dx, dw, db
