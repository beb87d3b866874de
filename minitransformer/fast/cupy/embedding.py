"""The embedding's twin for CuPy arrays: ``ops/embedding.py``'s ``Embedding`` with its
backward, dW = one_hot(ids)^T g, the dense form the backend uses on a GPU (deterministic,
where atomic adds are not: ``backend.scatter_add``), in two launches: the one-hot matrix in
one CuPy elementwise kernel and the product (``fast/gpu/cublas.py``) written into the
buffer the engine offers (``grad_buffers.offered``). The reference makes a zero table, an
``arange``, compares, casts, multiplies and adds: six launches, and a copy into the
optimizer's buffer. Registered for cupy.ndarray by ``fast/cupy/__init__.py``'s ``TWINS``;
tested against the reference in tests/fast/test_cupy_elementwise.py (a GPU). Importable
without CuPy (the kernel is made on first use).
"""

from __future__ import annotations

from ...ops.embedding import Embedding as _Embedding
from ..gpu import cublas
from ..gpu.cuda_source import elementwise
from ..grad_buffers import offered

try:
    import cupy as cp
except ImportError:  # a machine without CuPy: the names are still here, for tests
    cp = None

# the kernel (``cuda_source.elementwise``: made on first use): y[r, v] = [ids[r] == v] for
# the (N, V) output, the ids read raw
ONE_HOT = ("raw I ids, int64 V", "T y", "y = (T)(ids[i / V] == (I)(i % V))", "mt_one_hot")


class Embedding(_Embedding):
    """Twin of ``ops.embedding.Embedding``: forward is the reference's gather; backward is
    one one-hot kernel and one product into the weight's gradient buffer (module doc)."""

    dtypes = None  # keyed by the ids (integers); the table's dtype is any float

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[1]:
            return None, None
        (flat,) = ctx.saved
        V, D = ctx.weight_shape
        g = cp.reshape(grad, (-1, D))  # (N, D)
        one_hot = cp.empty((flat.shape[0], V), dtype=g.dtype)
        elementwise(*ONE_HOT)(flat, V, one_hot)  # (N, V)
        out = offered(ctx)[1]
        if out is not None and (out.dtype != g.dtype or not out.flags.c_contiguous):
            out = None
        return None, cublas.matmul(one_hot.mT, g, cp, out=out)  # (V, D)
