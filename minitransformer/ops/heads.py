"""The attention heads' split and merge: a reshape and a permute in one op each.

split_heads: x (B, L, H * d) -> (B, L, H, d) -> (B, H, L, d)   (head axis moved forward)
merge_heads: x (B, H, L, d) -> (B, L, H, d) -> (B, L, H * d)   (the inverse)
Neither changes a value; each one's backward is the other applied to g. One op instead of
a Reshape and a Permute halves the bookkeeping on every attention call.
"""

from __future__ import annotations

from ..checks import positive_int
from ..errors import ShapeError
from ..function import Function
from ..tensor import Tensor
from .checks import not_a_tensor


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


def split_heads(x: Tensor, h: int) -> Tensor:
    """(B, L, D) -> (B, H, L, D // h): the h heads of multi-head attention as an axis."""
    if not isinstance(x, Tensor):
        raise not_a_tensor("split_heads", "x", x)
    h = positive_int("split_heads", "h", h, "h is the number of heads, e.g. 8")
    if x.ndim != 3 or x.shape[-1] % h:
        raise ShapeError(
            f"split_heads: x has shape {tuple(x.shape)}; need (B, L, D) with D divisible by h = {h}"
        )
    return SplitHeads.apply(x, h=h)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, L, d) -> (B, L, H * d): the heads' outputs side by side again."""
    if not isinstance(x, Tensor):
        raise not_a_tensor("merge_heads", "x", x)
    if x.ndim != 4:
        raise ShapeError(f"merge_heads: x has shape {tuple(x.shape)}; need (B, H, L, d)")
    return MergeHeads.apply(x)
