"""The embedding's twin for NumPy arrays: ``ops/embedding.py``'s ``Embedding`` with its
backward (the table's gradient, a scatter-add of the rows' gradients) in numba's one pass
when the compiled kernels are on (``compiled.py``), else the reference's (off unless
``fast.enable()``; tested against the reference in tests/fast/test_numpy_compiled.py).
"""

from __future__ import annotations

import numpy as np

from ...ops.embedding import Embedding as _Embedding
from . import compiled


class Embedding(_Embedding):
    """Twin of ``ops.embedding.Embedding``: the same forward; backward's scatter-add compiled
    where it can be (module doc)."""

    dtypes = None

    @staticmethod
    def backward(ctx, grad):
        (flat,) = ctx.saved
        V, D = ctx.weight_shape
        g = grad.reshape(-1, D)  # (N, D)
        if not ctx.needs_input_grad[1] or not compiled.fits(g):
            return _Embedding.backward(ctx, grad)
        return None, compiled.embedding_backward(flat.astype(np.intp, copy=False), g, V)
