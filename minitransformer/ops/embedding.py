"""Token embedding: look up one row of a table per token id.

ids (...) integer in [0, V), weight (V, D) -> y (..., D) with y[i] = weight[ids[i]]
Backward: dweight[v] = sum of g[i] over every position i with ids[i] == v (a scatter-add;
repeated ids accumulate); ids get no gradient.
Twins: ``fast/cupy/embedding.py`` (one-hot kernel, one product), ``fast/numpy/embedding.py``.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..errors import DTypeError, ShapeError, TokenIdError
from ..function import Function
from ..tensor import Tensor
from .checks import floats


class Embedding(Function):
    """y = weight[ids]: a gather of rows; dweight = scatter-add of g into zeros (V, D)."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, ids, weight):
        xp = ctx.xp
        flat = xp.reshape(ids, (-1,))  # (N,)
        ctx.save_for_backward(flat)
        ctx.weight_shape = tuple(weight.shape)
        y = xp.take(weight, flat, axis=0)  # (N, D)
        return xp.reshape(y, (*ids.shape, weight.shape[1]))  # (..., D)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[1]:
            return None, None
        xp = ctx.xp
        (flat,) = ctx.saved
        V, D = ctx.weight_shape
        table = xp.zeros((V, D), dtype=grad.dtype, device=grad.device)
        g = xp.reshape(grad, (-1, D))  # (N, D)
        return None, backend.scatter_add(table, flat, g)


def embedding(ids: Any, weight: Tensor, validate: bool = True) -> Tensor:
    """Rows of ``weight`` (V, D) for integer ``ids`` of any shape: (...) -> (..., D).

    ``validate=False`` skips the range check of the ids (free for host arrays, one device
    sync on a GPU) for callers that have checked them already (the Transformer does)."""
    floats("embedding", weight=weight)  # a table of vectors (the gradient is float)
    if weight.ndim != 2:
        raise ShapeError(
            f"embedding: weight has shape {tuple(weight.shape)}, need 2 axes (V, D): "
            "one row of D numbers per token id"
        )
    data = ids.data if isinstance(ids, Tensor) else ids
    if not backend.is_array(data):  # host ids: numbers, checked, then on weight's device
        data = backend.asarray(backend.numeric_data("embedding: ids", data), device=weight.device)
    xp = backend.namespace(data)
    if not xp.isdtype(data.dtype, "integral"):
        name = backend.dtype_name(data.dtype)
        raise DTypeError(
            f"embedding: token ids have dtype {name}, need an integer dtype; "
            "convert them with ids.astype(int64)"
        )
    V = weight.shape[0]
    if validate and data.size and (int(xp.min(data)) < 0 or int(xp.max(data)) >= V):
        host = backend.to_numpy(data)
        bad = host[(host < 0) | (host >= V)]
        raise TokenIdError(
            f"embedding: token ids must be in [0, {V}) for a table of V={V} rows; got "
            f"{bad.size} out of range (smallest offending id {int(bad.min())}, largest "
            f"{int(bad.max())}); check the vocabulary size and the tokenizer"
        )
    return Embedding.apply(data, weight)
