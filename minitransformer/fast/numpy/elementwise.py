"""ReLU's twin for NumPy arrays: ``ops/elementwise.py``'s ``ReLU`` with its backward in
numba's one pass when the compiled kernels are on (``compiled.py``), else the reference's
three (the mask, its cast, the product); off unless ``fast.enable()``; tested against the
reference in tests/fast/test_numpy_compiled.py.
"""

from __future__ import annotations

from ...ops.elementwise import ReLU as _ReLU
from . import compiled


class ReLU(_ReLU):
    """Twin of ``ops.elementwise.ReLU``: the same forward; backward compiled where it can be."""

    dtypes = None

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        if grad.shape == y.shape and compiled.fits(grad, y):
            return compiled.relu_backward(grad, y)
        return _ReLU.backward(ctx, grad)
