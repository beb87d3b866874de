"""Shape ops: reshape and transpose/permute.

Neither changes a value; backward only routes g back to where each element came from:
reshape back, permute by the inverse permutation.
Slicing and concatenation are in ``indexing.py``, the attention heads' split/merge in
``heads.py``; their names are importable from here too (``ops.shape.concat``).
"""

from __future__ import annotations

from ..checks import is_int
from ..errors import ArgumentError, ShapeError
from ..function import Function
from ..tensor import Tensor
from .checks import not_a_tensor
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
    """x with a new shape of the same number of elements (one -1 is inferred)."""
    if not isinstance(x, Tensor):
        raise not_a_tensor("reshape", "x", x)
    if not isinstance(shape, tuple | list) or not all(is_int(n) and n >= -1 for n in shape):
        raise ArgumentError(
            f"reshape: shape must be a tuple of ints >= 0 (one of them may be -1), got "
            f"{shape!r}; e.g. x.reshape((2, -1))"
        )
    return Reshape.apply(x, shape=tuple(shape))


def transpose(x: Tensor, axis1: int = -2, axis2: int = -1) -> Tensor:
    """Swap two axes (default: the last two)."""
    if not isinstance(x, Tensor):
        raise not_a_tensor("transpose", "x", x)
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
    """x with its axes in the order ``axes`` (a permutation of 0 .. ndim - 1)."""
    if not isinstance(x, Tensor):
        raise not_a_tensor("permute", "x", x)
    if not isinstance(axes, tuple | list) or not all(is_int(a) for a in axes):
        raise ArgumentError(f"permute: axes must be a tuple of ints, got {axes!r}")
    if len(axes) != x.ndim or not all(-x.ndim <= a < x.ndim for a in axes):
        raise ShapeError(
            f"permute: got axes {tuple(axes)} for a tensor of shape {x.shape}; give a "
            f"permutation of its {x.ndim} axes, e.g. {tuple(reversed(range(x.ndim)))}"
        )
    return Permute.apply(x, axes=tuple(axes))
