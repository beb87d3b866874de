"""Two backward passes in one CuPy elementwise kernel each: ReLU's and the embedding's.

- ``ReLU`` (``ops/elementwise.py``): dx = g * [y > 0]. The reference makes the mask, casts
  it and multiplies: three launches; here one, the same product (a NaN gradient stays NaN
  where the mask is 0, as in the reference).
- ``Embedding`` (``ops/embedding.py``): dW = one_hot(ids)^T g, the dense form the backend
  uses on a GPU (deterministic, where atomic adds are not: ``backend.scatter_add``). The
  reference makes a zero table, an ``arange``, compares, casts, multiplies and adds: six
  launches, and a copy into the optimizer's buffer; here the one-hot matrix is one kernel
  and the product (``fast/cublas.py``) writes into the buffer the engine offers
  (``grad_buffers.offered``): two launches.

Registered for cupy.ndarray by ``fast/cupy.py``'s ``TWINS``. Importable without CuPy (the
kernels are made on first use).
"""

from __future__ import annotations

from ..ops.elementwise import ReLU as _ReLU
from ..ops.embedding import Embedding as _Embedding
from . import cublas
from .cuda_source import DTYPES, elementwise
from .grad_buffers import offered

try:
    import cupy as cp
except ImportError:  # a machine without CuPy: the names are still here, for tests
    cp = None

# the kernels (``cuda_source.elementwise``: made on first use): dx = g * [y > 0] in g's
# type; y[r, v] = [ids[r] == v] for the (N, V) output, the ids read raw
RELU_BACKWARD = ("T g, T y", "T dx", "dx = g * (T)(y > (T)0)", "mt_relu_backward")
ONE_HOT = ("raw I ids, int64 V", "T y", "y = (T)(ids[i / V] == (I)(i % V))", "mt_one_hot")


class ReLU(_ReLU):
    """Twin of ``ops.elementwise.ReLU``: forward is the reference's (one launch); backward
    is one kernel."""

    dtypes = DTYPES

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved
        return elementwise(*RELU_BACKWARD)(grad, y)


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
