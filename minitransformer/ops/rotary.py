"""Rotary position embedding, RoPE (Su et al., 2021): position as a rotation of q and k.

x (..., T, d), d even -> y (..., T, d); row t along axis -2 is at position p = offset + t.
The d features form d/2 pairs; pair i turns by the angle p theta_i,
    theta_i = base^(-2i/d),  i = 0 .. d/2-1,     angle[t, i] = (offset + t) theta_i
    (a, b) -> (a cos - b sin,  a sin + b cos)     (multiplying a + ib by e^(i angle))
Two layouts name which features pair up:
    "halves"       pair i = (x[..., i], x[..., i + d/2])   transformers' Llama ``rotate_half``
    "interleaved"  pair i = (x[..., 2i], x[..., 2i+1])     GPT-J, the RoFormer paper
Why it encodes relative position: q at position m and k at position n, each rotated, have
    <R(m) q, R(n) k> = <q, R(n - m) k>     (R(m)^T R(n) = R(n - m), rotations compose)
so attention scores see only m - n. No parameters; the norm of every pair is kept.
Backward: a rotation's Jacobian is the rotation, so the gradient turns back by -angle,
    (g_a, g_b) -> (g_a cos + g_b sin,  -g_a sin + g_b cos)   (the inverse rotation)
``rotary_cos_sin`` makes the (T, d/2) tables once per call (in float64, then x's dtype);
``Rotary`` rotates with them; ``rotary_embedding`` checks its arguments and does both.
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..checks import non_negative_int, real, short
from ..errors import ArgumentError, ShapeError
from ..function import Function
from ..tensor import Tensor
from .checks import floats

LAYOUTS = ("halves", "interleaved")
_EXACT_POSITIONS = 2**53  # float64 holds every whole number up to here


def rotary_cos_sin(xp, offset: int, T: int, d: int, base: float, dtype, device: Any = None):
    """cos and sin of angle[t, i] = (offset + t) base^(-2i/d): two (T, d/2) arrays of
    ``dtype`` on ``device`` (an array's ``.device``; None: the namespace's default).
    Computed in float64, then cast: positions in the thousands keep their angles exact."""
    half = xp.arange(d // 2, dtype=xp.float64, device=device)  # i
    theta = base ** (-2.0 * half / d)  # (d/2,)
    positions = xp.arange(T, dtype=xp.float64, device=device) + float(offset)  # (T,)
    angle = positions[:, None] * theta[None, :]  # (T, d/2)
    return xp.astype(xp.cos(angle), dtype), xp.astype(xp.sin(angle), dtype)


def rotate(xp, x, cos, sin, layout: str):
    """Each pair (a, b) of x's last axis -> (a cos - b sin, a sin + b cos); cos and sin
    (T, d/2) broadcast over x's leading axes. ``rotate(g, cos, -sin)`` turns back."""
    if layout == "halves":
        h = x.shape[-1] // 2
        a, b = x[..., :h], x[..., h:]
        return xp.concat((a * cos - b * sin, a * sin + b * cos), axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]  # "interleaved"
    pairs = xp.stack((a * cos - b * sin, a * sin + b * cos), axis=-1)  # (..., T, d/2, 2)
    return xp.reshape(pairs, x.shape)


class Rotary(Function):
    """y = x with each pair turned by its angle; dx = g turned back (the inverse rotation).

    Trusts its inputs (``rotary_embedding`` checks them): x (..., T, d) with d even, cos
    and sin raw arrays (T, d/2) of x's dtype on x's device (``rotary_cos_sin``), layout one
    of LAYOUTS. cos and sin take no gradient."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, x, cos, sin, layout: str = "halves"):
        ctx.save_for_backward(cos, sin)
        ctx.layout = layout
        return rotate(ctx.xp, x, cos, sin, layout)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved
        return rotate(ctx.xp, grad, cos, -sin, ctx.layout), None, None


def rotary_embedding(
    x: Tensor, offset: int = 0, base: float = 10000.0, layout: str = "halves"
) -> Tensor:
    """Rotate x (..., T, d) by position (RoPE): row t is at position offset + t, pair i
    turns by (offset + t) base^(-2i/d); ``layout`` "halves" (Llama) or "interleaved" (GPT-J)."""
    floats("rotary_embedding", x=x)
    offset = non_negative_int(
        "rotary_embedding", "offset", offset, "offset is the position of x's first row, e.g. 0"
    )
    base = real(
        "rotary_embedding", "base", base, 1.0, low_open=True,
        fix="base sets the slowest turn, base^(-(d-2)/d); the usual is 10000.0 (Llama 3: 500000.0)",
    )  # fmt: skip
    if not (isinstance(layout, str) and layout in LAYOUTS):
        raise ArgumentError(
            f"rotary_embedding: layout must be 'halves' (Llama's rotate_half) or "
            f"'interleaved' (GPT-J's pairs), got {short(layout, 40)}"
        )
    if x.ndim < 2 or x.shape[-1] < 2 or x.shape[-1] % 2:
        raise ShapeError(
            f"rotary_embedding: x has shape {tuple(x.shape)}; need (..., T, d) with d even "
            "(d/2 pairs to rotate), e.g. the heads (B, h, T, d_k) with d_k = 64"
        )
    T, d = x.shape[-2], x.shape[-1]
    if offset + T > _EXACT_POSITIONS:
        raise ArgumentError(
            f"rotary_embedding: offset={offset} puts positions past 2^53, where float64 "
            "positions are no longer exact; use an offset below 2^53 - T"
        )
    xp = backend.namespace(x.data)
    cos, sin = rotary_cos_sin(xp, offset, T, d, base, x.dtype, device=x.data.device)
    return Rotary.apply(x, cos, sin, layout=layout)
