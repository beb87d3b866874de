"""Shape ops: reshape, transpose/permute, getitem (basic slicing), concat, and the
attention heads' split/merge (a reshape and a permute in one op).

None of these changes a value; backward only routes g back to where each element came
from: reshape back, permute by the inverse permutation, scatter the slice into zeros,
split the concatenation.
"""

from __future__ import annotations

from typing import Any

from ..checks import is_int
from ..errors import ShapeError
from ..function import Function
from ..tensor import Tensor


class Reshape(Function):
    """y = x with a new shape (same elements, row-major order);  dx = g reshaped back."""

    @staticmethod
    def forward(ctx, x, shape):
        ctx.shape = x.shape
        try:
            return ctx.xp.reshape(x, shape)
        except ValueError:
            raise ShapeError(
                f"reshape: cannot reshape an array of shape {tuple(x.shape)} "
                f"({x.size} elements) into {tuple(shape)}"
            ) from None

    @staticmethod
    def backward(ctx, grad):
        return ctx.xp.reshape(grad, ctx.shape)


class Permute(Function):
    """y = x with axes reordered: y.shape[i] = x.shape[axes[i]];  dx = g permuted back."""

    @staticmethod
    def forward(ctx, x, axes):
        if sorted(a % x.ndim for a in axes) != list(range(x.ndim)):
            raise ShapeError(f"permute: {tuple(axes)} is not a permutation of the {x.ndim} axes")
        ctx.axes = tuple(a % x.ndim for a in axes)
        return ctx.xp.permute_dims(x, ctx.axes)

    @staticmethod
    def backward(ctx, grad):
        inverse = [0] * len(ctx.axes)
        for i, a in enumerate(ctx.axes):
            inverse[a] = i
        return ctx.xp.permute_dims(grad, tuple(inverse))


class SplitHeads(Function):
    """(B, L, H * d) -> (B, H, L, d): reshape to (B, L, H, d), then swap axes 1 and 2.
    dx = g with axes 1 and 2 swapped back, reshaped to (B, L, H * d). One op instead of a
    Reshape and a Permute: half the bookkeeping on every attention call."""

    @staticmethod
    def forward(ctx, x, h):
        B, L, D = x.shape
        ctx.shape = x.shape
        return ctx.xp.permute_dims(ctx.xp.reshape(x, (B, L, h, D // h)), (0, 2, 1, 3))

    @staticmethod
    def backward(ctx, grad):
        return ctx.xp.reshape(ctx.xp.permute_dims(grad, (0, 2, 1, 3)), ctx.shape)


class MergeHeads(Function):
    """(B, H, L, d) -> (B, L, H * d), the inverse of SplitHeads; dx = SplitHeads of g."""

    @staticmethod
    def forward(ctx, x):
        B, H, L, d = x.shape
        ctx.shape = x.shape
        return ctx.xp.reshape(ctx.xp.permute_dims(x, (0, 2, 1, 3)), (B, L, H * d))

    @staticmethod
    def backward(ctx, grad):
        B, H, L, d = ctx.shape
        return ctx.xp.permute_dims(ctx.xp.reshape(grad, (B, L, H, d)), (0, 2, 1, 3))


class GetItem(Function):
    """y = x[index] for basic indexing (ints, slices, None, ...);  dx = zeros with g at index."""

    @staticmethod
    def forward(ctx, x, index):
        ctx.index, ctx.shape, ctx.dtype = index, x.shape, x.dtype
        return x[index]

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
    return all(p is None or p is Ellipsis or isinstance(p, int | slice) for p in parts)


def _full_index(index: Any, ndim: int) -> tuple:
    """x[0] means x[0, ...] in NumPy; the array API wants the ``...`` written out."""
    parts = index if isinstance(index, tuple) else (index,)
    if Ellipsis not in parts and sum(p is not None for p in parts) < ndim:
        parts = (*parts, Ellipsis)
    return parts


def reshape(x: Tensor, shape: tuple[int, ...]) -> Tensor:
    return Reshape.apply(x, shape=tuple(shape))


def split_heads(x: Tensor, h: int) -> Tensor:
    """(B, L, D) -> (B, H, L, D // h): the h heads of multi-head attention as an axis."""
    if x.ndim != 3 or x.shape[-1] % h:
        raise ShapeError(
            f"split_heads: x has shape {tuple(x.shape)}; need (B, L, D) with D divisible by h = {h}"
        )
    return SplitHeads.apply(x, h=h)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, L, d) -> (B, L, H * d): the heads' outputs side by side again."""
    if x.ndim != 4:
        raise ShapeError(f"merge_heads: x has shape {tuple(x.shape)}; need (B, H, L, d)")
    return MergeHeads.apply(x)


def transpose(x: Tensor, axis1: int = -2, axis2: int = -1) -> Tensor:
    """Swap two axes (default: the last two)."""
    for name, axis in (("axis1", axis1), ("axis2", axis2)):
        if not is_int(axis) or not -x.ndim <= axis < x.ndim:
            raise ShapeError(
                f"transpose: {name}={axis!r} is not an axis of a tensor of shape {x.shape}; "
                f"use an int in [-{max(x.ndim, 1)}, {max(x.ndim, 1) - 1}]"
            )
    axes = list(range(x.ndim))
    axes[axis1], axes[axis2] = axes[axis2], axes[axis1]
    return Permute.apply(x, axes=tuple(axes))


def permute(x: Tensor, axes: tuple[int, ...]) -> Tensor:
    if len(axes) != x.ndim:
        raise ShapeError(
            f"permute: got {len(axes)} axes {tuple(axes)} for a tensor of rank {x.ndim}"
        )
    return Permute.apply(x, axes=tuple(axes))


def getitem(x: Tensor, index: Any) -> Tensor:
    if not _is_basic(index):
        raise TypeError(
            f"indexing a Tensor supports ints, slices, None and ... only, got {index!r}; "
            "for lookups by an array of ids use F.embedding"
        )
    return GetItem.apply(x, index=_full_index(index, x.ndim))


def concat(xs: list[Tensor], axis: int = 0) -> Tensor:
    if not xs:
        raise ShapeError("concat: needs at least one tensor")
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
