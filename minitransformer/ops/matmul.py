"""Matrix products: matmul (batched, broadcasting) and linear (x W + b).

matmul: a (..., n, k) @ b (..., k, m) -> y (..., n, m)
        da = g @ b^T,  db = a^T @ g   (then summed over broadcast batch axes)
linear: x (..., d_in) @ W (d_in, d_out) + b (d_out,) -> y (..., d_out)
        dx = g W^T,  dW = x^T g (all rows),  db = sum of g over all rows

Speed: a stack of rows times one matrix is done as ONE 2-D product, (rows, k) @ (k, m):
one BLAS GEMM instead of a loop of small ones (lesson 02 measures 1.2-1.5x for long
sequences and 3-100x for many short ones, dW especially).
The weight is (d_in, d_out), as in the paper's "x W + b" (PyTorch stores W transposed).
Every product is ``xp.matmul`` (on NumPy the backend serves ``host.matmul``: the same
product, with a BLAS thread count chosen per product once the CLI has tuned the host).
"""

from __future__ import annotations

from .. import backend
from ..errors import DTypeError, ShapeError
from ..function import Function
from ..tensor import TENSOR_TYPES, Tensor
from .checks import same_dtype, tensors


class MatMul(Function):
    """y = a @ b with broadcasting over the leading (batch) axes."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, a, b):
        xp = ctx.xp
        mm = xp.matmul
        ctx.save_for_backward(a, b)
        if b.ndim == 2 and a.ndim > 2:  # rows @ one matrix: one 2-D GEMM
            y = mm(xp.reshape(a, (-1, a.shape[-1])), b)  # (rows, m)
            return xp.reshape(y, (*a.shape[:-1], b.shape[-1]))
        return mm(a, b)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        mm = xp.matmul
        a, b = ctx.saved
        da = db = None
        if b.ndim == 2 and a.ndim > 2:
            g2 = xp.reshape(grad, (-1, grad.shape[-1]))  # (rows, m)
            if ctx.needs_input_grad[0]:
                da = xp.reshape(mm(g2, b.mT), a.shape)
            if ctx.needs_input_grad[1]:
                db = mm(xp.reshape(a, (-1, a.shape[-1])).mT, g2)
            return da, db
        if ctx.needs_input_grad[0]:
            da = mm(grad, b.mT)
        if ctx.needs_input_grad[1]:
            db = mm(a.mT, grad)
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
        xp = ctx.xp
        mm = xp.matmul
        x2 = xp.reshape(x, (-1, x.shape[-1]))  # (rows, d_in)
        ctx.save_for_backward(x2, weight)
        ctx.x_shape, ctx.transposed = x.shape, transpose_weight
        w = weight.mT if transpose_weight else weight  # (d_in, d_out)
        y = mm(x2, w)  # (rows, d_out)
        if bias is not None:
            y += bias
        return xp.reshape(y, (*x.shape[:-1], w.shape[1]))

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        mm = xp.matmul
        x2, weight = ctx.saved
        g2 = xp.reshape(grad, (-1, grad.shape[-1]))  # (rows, d_out)
        dx = dw = db = None
        if ctx.needs_input_grad[0]:
            w_t = weight if ctx.transposed else weight.mT  # (d_out, d_in)
            dx = xp.reshape(mm(g2, w_t), ctx.x_shape)
        if ctx.needs_input_grad[1]:
            if ctx.transposed:
                dw = mm(g2.mT, x2)  # (d_out, d_in)
            else:
                dw = mm(x2.mT, g2)  # (d_in, d_out)
        if ctx.needs_input_grad[2:3] == (True,):  # a bias that needs its gradient
            db = xp.sum(g2, axis=0)
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
    ok = type(x) in TENSOR_TYPES and type(weight) in TENSOR_TYPES
    if not (ok and (bias is None or type(bias) in TENSOR_TYPES)):  # no call in the common case
        tensors("linear", x=x, weight=weight, **({} if bias is None else {"bias": bias}))
    d_in_axis, d_out_axis = (1, 0) if transpose_weight else (0, 1)
    xs, ws, xd = x.data.shape, weight.data.shape, x.data.dtype  # attribute reads: no calls
    if not xs or len(ws) != 2 or xs[-1] != ws[d_in_axis]:
        where = "weight.shape[1] (transpose_weight)" if transpose_weight else "weight.shape[0]"
        raise ShapeError(
            f"linear: input of shape {tuple(xs)} does not fit weight of shape {tuple(ws)}: "
            f"the input's last axis must be d_in = {where}"
        )
    if (type(xd), xd) not in backend.FLOAT_DTYPES and not backend.is_float_dtype(xd):
        raise DTypeError(
            f"linear: input has dtype {backend.dtype_name(xd)}, need a float dtype; "
            "token ids go through an Embedding first, other data through x.astype('float32')"
        )
    d_out = ws[d_out_axis]
    if bias is not None and tuple(bias.data.shape) != (d_out,):
        raise ShapeError(f"linear: bias has shape {tuple(bias.data.shape)}, need ({d_out},)")
    for name, p in (("weight", weight), ("bias", weight if bias is None else bias)):
        if type(p.data.dtype) is not type(xd) or p.data.dtype != xd:
            same_dtype("linear", name, p, x)  # == only within one library (the array API)
    if transpose_weight:
        return Linear.apply(x, weight, bias, transpose_weight=True)
    if bias is None:
        return Linear.apply(x, weight)
    return Linear.apply(x, weight, bias)
