"""Grouped-query attention's key/value heads, repeated for the query heads (Ainslie et al., 2023).

repeat_heads: x (B, h_kv, S, d) -> (B, h_kv * g, S, d), g = groups; output head j*g + r is
input head j (r = 0 .. g-1): each of the h_kv key/value heads serves g query heads in a row.
    y[:, j*g + r] = x[:, j]            (= repeat(x, g, axis=1), transformers' ``repeat_kv``)
Backward: input head j fed g output heads, so its gradient is the sum of theirs,
    dx[:, j] = sum over r of g_y[:, j*g + r]    = g_y.reshape(B, h_kv, g, S, d).sum(axis=2)
g = 1 is the paper's multi-head attention (a copy), h_kv = 1 multi-query attention. The KV
cache keeps the h_kv heads; only the attention itself sees the repeated ones.
"""

from __future__ import annotations

from ..checks import positive_int
from ..errors import ShapeError
from ..function import Function
from ..tensor import Tensor
from .checks import not_a_tensor


class RepeatHeads(Function):
    """(B, h_kv, S, d) -> (B, h_kv * groups, S, d): a new axis after the heads, broadcast
    to ``groups``, merged into the head axis. dx = g summed over each head's copies.
    Trusts its inputs (``repeat_heads`` checks them): x of rank 4, groups an int >= 1."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, x, groups: int):
        B, h_kv, S, d = x.shape
        ctx.groups = groups
        one = ctx.xp.reshape(x, (B, h_kv, 1, S, d))  # a new axis after the heads
        copies = ctx.xp.broadcast_to(one, (B, h_kv, groups, S, d))
        return ctx.xp.reshape(copies, (B, h_kv * groups, S, d))

    @staticmethod
    def backward(ctx, grad):
        B, h, S, d = grad.shape
        g = ctx.groups
        return ctx.xp.sum(ctx.xp.reshape(grad, (B, h // g, g, S, d)), axis=2)


def repeat_heads(x: Tensor, groups: int) -> Tensor:
    """(B, h_kv, S, d) -> (B, h_kv * groups, S, d): each key/value head repeated ``groups``
    times in a row, so h_kv heads serve h = h_kv * groups query heads."""
    if not isinstance(x, Tensor):
        raise not_a_tensor("repeat_heads", "x", x)
    groups = positive_int(
        "repeat_heads", "groups", groups, "groups is h // h_kv, the query heads per key head"
    )
    if x.ndim != 4:
        raise ShapeError(
            f"repeat_heads: x has shape {tuple(x.shape)}; need (B, h_kv, S, d), the key or "
            "value heads after split_heads"
        )
    return RepeatHeads.apply(x, groups=groups)
