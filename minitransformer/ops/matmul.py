"""Matrix products: matmul (batched, broadcasting) and linear (x W + b).

matmul: a (..., n, k) @ b (..., k, m) -> y (..., n, m)
        da = g @ b^T,  db = a^T @ g   (then summed over broadcast batch axes)
linear: x (..., d_in) @ W (d_in, d_out) + b (d_out,) -> y (..., d_out)
        dx = g W^T,  dW = sum over rows r of x_r^T g_r,  db = sum over rows of g
A "row" is every leading position (all axes but the last): dW contracts x and g over all of
them at once, ``tensordot(x, g, axes=(rows, rows))``, and db sums g over them: no reshape.

Speed: a stack of rows times one matrix is ONE 2-D product, (rows, k) @ (k, m): one BLAS
GEMM instead of a loop of small ones (lesson 02 measures 1.2-1.5x for long sequences and
3-100x for many short ones, dW especially). The array libraries' ``matmul`` broadcasts a 2-D
weight over the leading axes; on NumPy the backend serves ``host.matmul`` and
``host.tensordot``, which fold the rows into that one GEMM and pick its BLAS threads once the
CLI has tuned the host.
The weight is (d_in, d_out), as in the paper's "x W + b" (PyTorch stores W transposed).
Twins: ``fast/numpy/linear.py`` (Linear's backward), ``fast/cupy/linear.py`` (cuBLASLt).
"""

from __future__ import annotations

from .. import backend
from ..errors import DTypeError, ShapeError
from ..function import Function
from ..tensor import Tensor
from .checks import same_dtype, tensors


def leading_axes(ndim: int) -> tuple[int, ...]:
    """(0, 1, ..., ndim - 2): every axis but the last, the axes that index the rows."""
    return tuple(range(ndim - 1))


class MatMul(Function):
    """y = a @ b with broadcasting over the leading (batch) axes."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return ctx.xp.matmul(a, b)  # a stack of rows @ one matrix: one GEMM (module doc)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        a, b = ctx.saved
        da = db = None
        if ctx.needs_input_grad[0]:
            da = xp.matmul(grad, b.mT)  # (..., n, k)
        if ctx.needs_input_grad[1]:
            if b.ndim == 2 and a.ndim > 2:  # one matrix for every row: sum over all rows
                rows = leading_axes(a.ndim)
                db = xp.tensordot(a, grad, axes=(rows, rows))  # (k, m)
            else:
                db = xp.matmul(a.mT, grad)  # (..., k, m); the engine sums broadcast axes
        return da, db


class Linear(Function):
    """y = x W + b, fused so the bias add and its gradient cost no extra graph nodes.

    ``transpose_weight=True`` computes y = x W^T + b with W stored (d_out, d_in): the tied
    output projection h E^T reads the embedding table E (V, D) as it is, and its gradient
    dE = g^T x comes out in E's own layout (no transposed (V, D) copy to add up).
    """

    fresh_grads = True

    @staticmethod
    def forward(ctx, x, weight, bias=None, transpose_weight=False):
        ctx.save_for_backward(x, weight)
        ctx.transposed = transpose_weight
        y = ctx.xp.matmul(x, weight.mT if transpose_weight else weight)  # (..., d_out)
        if bias is not None:
            y += bias
        return y

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        x, weight = ctx.saved
        rows = leading_axes(grad.ndim)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            dx = xp.matmul(grad, weight if ctx.transposed else weight.mT)  # (..., d_in)
        if ctx.needs_input_grad[1]:
            if ctx.transposed:
                dw = xp.tensordot(grad, x, axes=(rows, rows))  # (d_out, d_in): g^T x
            else:
                dw = xp.tensordot(x, grad, axes=(rows, rows))  # (d_in, d_out): x^T g
        if ctx.needs_input_grad[2:3] == (True,):  # a bias that needs its gradient
            db = xp.sum(grad, axis=rows)  # (d_out,)
        return dx, dw, db


def matmul(a: Tensor, b: Tensor) -> Tensor:
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
        tensors("matmul", a=a, b=b)
    if a.ndim < 2 or b.ndim < 2:
        raise ShapeError(
            f"matmul: both operands need at least 2 axes, got shapes {a.shape} and {b.shape}; "
            "reshape a vector v to (1, n) or (n, 1) first"
        )
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(
            f"matmul: shapes {a.shape} and {b.shape} do not fit: the last axis of the first "
            f"({a.shape[-1]}) must equal the second-to-last of the second ({b.shape[-2]})"
        )
    ba, bb = tuple(a.shape[:-2]), tuple(b.shape[:-2])
    if not all(m == n or 1 in (m, n) for m, n in zip(ba[::-1], bb[::-1], strict=False)):
        raise ShapeError(
            f"matmul: the batch axes of {a.shape} and {b.shape}, {ba} and {bb}, do not "
            "broadcast; they must be equal or 1 (e.g. (B, H, T, d) @ (B, H, d, S))"
        )
    return MatMul.apply(a, b)


def linear(
    x: Tensor, weight: Tensor, bias: Tensor | None = None, transpose_weight: bool = False
) -> Tensor:
    """x (..., d_in) @ weight (d_in, d_out) + bias (d_out,); with ``transpose_weight``,
    x @ weight^T for a weight stored (d_out, d_in) (PyTorch's layout; the tied output
    projection uses it with the embedding table)."""
    tensors("linear", x=x, weight=weight, **({} if bias is None else {"bias": bias}))
    d_in_axis, d_out_axis = (1, 0) if transpose_weight else (0, 1)
    if x.ndim == 0 or weight.ndim != 2 or x.shape[-1] != weight.shape[d_in_axis]:
        where = "weight.shape[1] (transpose_weight)" if transpose_weight else "weight.shape[0]"
        raise ShapeError(
            f"linear: input of shape {x.shape} does not fit weight of shape {weight.shape}: "
            f"the input's last axis must be d_in = {where}"
        )
    if not backend.is_float_dtype(x.dtype):
        raise DTypeError(
            f"linear: input has dtype {backend.dtype_name(x.dtype)}, need a float dtype; "
            "token ids go through an Embedding first, other data through x.astype('float32')"
        )
    d_out = weight.shape[d_out_axis]
    if bias is not None and bias.shape != (d_out,):
        raise ShapeError(f"linear: bias has shape {bias.shape}, need ({d_out},)")
    same_dtype("linear", "weight", weight, x)
    if bias is not None:
        same_dtype("linear", "bias", bias, x)
    if transpose_weight:
        return Linear.apply(x, weight, bias, transpose_weight=True)
    if bias is None:
        return Linear.apply(x, weight)
    return Linear.apply(x, weight, bias)
