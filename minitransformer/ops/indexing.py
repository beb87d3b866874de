"""Indexing ops: getitem (basic slicing) and concat.

getitem: y = x[index] for ints, slices, None and ``...``;  dx = zeros with g scattered
         into the slice it came from.
concat:  y = [x_1, x_2, ...] joined along an axis;  dx_i = the slice of g that x_i filled.
"""

from __future__ import annotations

from typing import Any

from ..checks import is_int, short
from ..errors import ArgumentError, ShapeError
from ..function import Function
from ..tensor import Tensor
from .checks import not_a_tensor


class GetItem(Function):
    """y = x[index] for basic indexing (ints, slices, None, ...);  dx = zeros with g at index."""

    @staticmethod
    def forward(ctx, x, index):
        ctx.index, ctx.shape, ctx.dtype = index, x.shape, x.dtype
        try:
            return x[index]
        except IndexError:  # an int past the end of its axis, or too many indices
            raise ShapeError(
                f"getitem: index {index!r} is out of range for a tensor of shape "
                f"{tuple(x.shape)}; an int index i on an axis of length n needs -n <= i < n"
            ) from None

    @staticmethod
    def backward(ctx, grad):
        dx = ctx.xp.zeros(ctx.shape, dtype=ctx.dtype, device=grad.device)
        index = tuple(p for p in ctx.index if p is not None)  # None only added size-1 axes
        dx[index] = ctx.xp.reshape(grad, dx[index].shape)
        return dx


class Concat(Function):
    """y = [x_1, x_2, ...] joined along ``axis``;  dx_i = the slice of g that x_i filled."""

    @staticmethod
    def forward(ctx, *xs, axis=0):
        ctx.axis = axis % xs[0].ndim
        ctx.sizes = [x.shape[ctx.axis] for x in xs]
        return ctx.xp.concat(xs, axis=ctx.axis)

    @staticmethod
    def backward(ctx, grad):
        grads, start = [], 0
        for size, needed in zip(ctx.sizes, ctx.needs_input_grad, strict=True):
            index = (slice(None),) * ctx.axis + (slice(start, start + size), ...)
            grads.append(grad[index] if needed else None)
            start += size
        return tuple(grads)


def _is_basic(index: Any) -> bool:
    parts = index if isinstance(index, tuple) else (index,)
    return all(
        p is None
        or p is Ellipsis
        or type(p) is slice
        or (isinstance(p, int) and type(p) is not bool)
        for p in parts
    )


def _full_index(index: Any, ndim: int) -> tuple:
    """x[0] means x[0, ...] in NumPy; the array API wants the ``...`` written out."""
    parts = index if isinstance(index, tuple) else (index,)
    if Ellipsis not in parts and sum(p is not None for p in parts) < ndim:
        parts = (*parts, Ellipsis)
    return parts


def getitem(x: Tensor, index: Any) -> Tensor:
    if not isinstance(x, Tensor):
        raise not_a_tensor("getitem", "x", x)
    if not _is_basic(index):
        raise ArgumentError(
            f"indexing a Tensor supports ints, slices, None and ... only, got {index!r}; "
            "for lookups by an array of ids use F.embedding"
        )
    return GetItem.apply(x, index=_full_index(index, x.ndim))


def concat(xs: list[Tensor], axis: int = 0) -> Tensor:
    """The tensors of ``xs`` joined along ``axis``; they agree on every other axis."""
    if not isinstance(xs, list | tuple) or not xs:
        raise ArgumentError(f"concat: xs must be a non-empty list of Tensors, got {short(xs)}")
    for i, x in enumerate(xs):
        if not isinstance(x, Tensor):
            raise not_a_tensor("concat", f"xs[{i}]", x)
    if not is_int(axis) or xs[0].ndim == 0 or not -xs[0].ndim <= axis < xs[0].ndim:
        raise ShapeError(
            f"concat: axis {axis!r} is not an axis of tensors of shape {xs[0].shape}; use an "
            f"int in [-{max(xs[0].ndim, 1)}, {max(xs[0].ndim, 1) - 1}]"
        )
    ndims = {x.ndim for x in xs}
    if len(ndims) != 1:
        raise ShapeError(
            f"concat: all tensors need the same rank, got shapes {[x.shape for x in xs]}"
        )
    ax = axis % xs[0].ndim
    rest = {tuple(n for i, n in enumerate(x.shape) if i != ax) for x in xs}
    if len(rest) != 1:
        raise ShapeError(
            f"concat: shapes {[x.shape for x in xs]} differ outside axis {axis}; "
            "only the concatenation axis may differ"
        )
    return Concat.apply(*xs, axis=axis)
