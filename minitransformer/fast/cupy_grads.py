"""The Linear layer's twin for CuPy arrays: the reference's products (``ops/matmul.py``), with
the weight's and the bias's gradients written straight into the optimizer's gradient buffer.

Why: an optimizer keeps every gradient in one flat buffer (``optim/flatbuffer.py``); a
gradient that backward makes as a new array is then copied there, one launch per parameter
(64 of a tiny step's 85 parameters are a Linear's). The engine offers each parameter's
buffer for its first gradient (``Function.writes_grads``, ``ctx.grad_out``); this twin's
backward computes dW with ``fast/cublas.py``'s product into it and db with CuPy's sum into
it, so no copy follows. Where no buffer is offered (a second gradient, no optimizer) it
makes new arrays, as the reference does. Registered by ``fast/cupy.py``'s ``TWINS``.
"""

from __future__ import annotations

from typing import Any

from ..ops.matmul import Linear as _Linear
from . import cublas, cuda_source

try:
    import cupy as cp
except ImportError:  # a machine without CuPy: the names are still here, for tests
    cp = None

DTYPES = frozenset(cuda_source.SUFFIX)  # float32, float64, as fast/cupy.py's twins


def _into(buffer: Any, like: Any) -> Any:
    """``buffer`` when it can take a result of ``like``'s dtype in place, else None."""
    if buffer is None or buffer.dtype != like.dtype or not buffer.flags.c_contiguous:
        return None
    return buffer


class Linear(_Linear):
    """Twin of ``ops.matmul.Linear``: forward is the reference's; backward writes dW and db
    into the buffers the engine offers (module doc). dW = x^T g (or g^T x for a weight
    stored transposed) and db = the column sums of g, as the reference computes them."""

    dtypes = DTYPES
    writes_grads = True

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        x2, weight = ctx.saved
        needs = ctx.needs_input_grad
        outs = ctx.grad_out or (None, None, None)
        g2 = xp.reshape(grad, (-1, grad.shape[-1]))  # (rows, d_out)
        dx = dw = db = None
        if needs[0]:
            w_t = weight if ctx.transposed else weight.mT  # (d_out, d_in)
            dx = xp.reshape(xp.matmul(g2, w_t), ctx.x_shape)
        if needs[1]:
            a, b = (g2.mT, x2) if ctx.transposed else (x2.mT, g2)
            dw = cublas.matmul(a, b, cp, out=_into(outs[1], weight))
        if len(needs) > 2 and needs[2]:
            db = cp.sum(g2, axis=0, out=_into(outs[2] if len(outs) > 2 else None, g2))
        return dx, dw, db
