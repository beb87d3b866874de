"""ReLU's twin for CuPy arrays: ``ops/elementwise.py``'s ``ReLU`` with its backward, dx = g *
[y > 0], in one CuPy elementwise kernel, where the reference makes the mask, casts it and
multiplies (three launches): the same product (a NaN gradient stays NaN where the mask is 0,
as in the reference). Registered for cupy.ndarray by ``fast/cupy/__init__.py``'s ``TWINS``;
tested against the reference in tests/fast/test_cupy_elementwise.py (a GPU). Importable
without CuPy (the kernel is made on first use).
"""

from __future__ import annotations

from ...ops.elementwise import ReLU as _ReLU
from ..gpu.cuda_source import DTYPES, elementwise

# the kernel (``cuda_source.elementwise``: made on first use): dx = g * [y > 0] in g's type
RELU_BACKWARD = ("T g, T y", "T dx", "dx = g * (T)(y > (T)0)", "mt_relu_backward")


class ReLU(_ReLU):
    """Twin of ``ops.elementwise.ReLU``: forward is the reference's (one launch); backward
    is one kernel."""

    dtypes = DTYPES

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return elementwise(*RELU_BACKWARD)(grad, y)
