"""Shape ops: reshape and transpose/permute.

Neither changes a value; backward only routes g back to where each element came from:
reshape back, permute by the inverse permutation.
Slicing and concatenation are in ``indexing.py``, the attention heads' split/merge in
``heads.py``; their names are importable from here too (``ops.shape.concat``).
"""

from __future__ import annotations

from ..checks import is_int
from ..errors import ShapeError
from ..function import Function
from ..tensor import Tensor
from .heads import merge_heads, split_heads
from .indexing import concat, getitem

__all__ = ["concat", "getitem", "merge_heads", "permute", "reshape", "split_heads", "transpose"]


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


def reshape(x: Tensor, shape: tuple[int, ...]) -> Tensor:
    return Reshape.apply(x, shape=tuple(shape))


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
