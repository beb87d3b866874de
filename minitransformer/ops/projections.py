"""An attention layer's projections as ONE op, and the attention that reads its heads there.

projections: x (..., D), weights W_1 .. W_n (D, d_i), biases b_1 .. b_n (d_i,) or none
    -> y (..., d_1 + ... + d_n) = [x W_1 + b_1 | ... | x W_n + b_n], the parts side by side
    with g_i = part i's columns of dL/dy:
    dx = sum_i g_i W_i^T;  dW_i = x^T g_i (over all rows);  db_i = the rows' sum of g_i
A self-attention's q, k and v (n = 3) or a cross-attention's k and v of the memory (n = 2):
the model keeps its three weights (w_q, w_k, w_v: what the checkpoints and imports name).
The math here is n products; a twin may do ONE product with the weights side by side.

packed attention: the heads read from y's columns, the attention's math on them
    self  (q=None): y (B, T, h d_k | h_kv d_k | h_kv d_v), the columns of q, k and v
    cross (q given): y (B, S, h_kv d_k | h_kv d_v), k and v; q (B, h, T, d_k) as it is
    each part (B, L, n d) -> (B, n, L, d), k and v repeated to h heads when h_kv < h (GQA),
    out = ScaledDotProductAttention(q, k, v, mask) (ops/attention.py)   -> (B, h, T, d_v)
    backward: that op's dq, dk, dv; dk and dv summed over each head's copies; the parts'
    gradients side by side again: dy = [dq | dk | dv] (or [dk | dv] and dq for q).
One op reading y, instead of three ops each reading a slice of it, so y gets ONE gradient
(three slices' gradients would each be a zero-padded copy of y, added up).
Twins: ``fast/numpy/projections.py``, ``fast/cupy/projections.py``.
"""

from __future__ import annotations

from ..function import Context, Function
from .attention import ScaledDotProductAttention
from .matmul import leading_axes


class Projections(Function):
    """y = [x W_1 + b_1 | ... | x W_n + b_n]: ``params`` are W_1 .. W_n, then b_1 .. b_n
    when there are biases (2n arrays) or nothing more (n). Trusts its inputs (the layer
    made the weights): x (..., D), W_i (D, d_i), b_i (d_i,)."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, x, *params, parts: int):
        xp = ctx.xp
        weights, biases = params[:parts], params[parts:]
        ctx.save_for_backward(x, *weights)
        ys = [xp.matmul(x, w) for w in weights]  # (..., d_i) each
        for y, b in zip(ys, biases, strict=False):
            y += b
        return xp.concat(ys, axis=-1)  # (..., d_1 + ... + d_n)

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        x, *weights = ctx.saved
        rows = leading_axes(grad.ndim)
        needs = ctx.needs_input_grad
        starts = [0]
        for w in weights:
            starts.append(starts[-1] + w.shape[1])
        gs = [grad[..., a:b] for a, b in zip(starts[:-1], starts[1:], strict=True)]  # g_i
        dx = None
        if needs[0]:
            dx = sum(xp.matmul(g, w.mT) for g, w in zip(gs, weights, strict=True))
        dws = [xp.tensordot(x, g, axes=(rows, rows)) if need else None
               for g, need in zip(gs, needs[1 : 1 + len(weights)], strict=True)]  # fmt: skip
        dbs = [xp.sum(g, axis=rows) if need else None
               for g, need in zip(gs, needs[1 + len(weights) :], strict=False)]  # fmt: skip
        return (dx, *dws, *dbs)


def head_view(xp, y, start: int, n: int, d: int):
    """Columns start .. start + n d of y (B, L, C) as n heads (B, n, L, d): a view."""
    B, L, _ = y.shape
    part = y[..., start : start + n * d]
    return xp.permute_dims(xp.reshape(part, (B, L, n, d)), (0, 2, 1, 3))


class PackedAttention(Function):
    """Scaled dot-product attention on the heads of a ``Projections`` output (module doc):
    ``packed_attention(y, q, mask, h=, h_kv=, d_k=)``, q None for self-attention. The
    attention's own math is ``attention`` (a twin may name its own); ``ctx.probs`` is P."""

    fresh_grads = True
    attention = ScaledDotProductAttention

    @staticmethod
    def forward(ctx, y, q=None, mask=None, *, h: int, h_kv: int, d_k: int):
        xp = ctx.xp
        own_q = q is None  # self-attention: q's columns come first
        at = h * d_k if own_q else 0  # where k's columns start
        if own_q:
            q = head_view(xp, y, 0, h, d_k)  # (B, h, T, d_k)
        d_v = (y.shape[-1] - at - h_kv * d_k) // h_kv
        k = head_view(xp, y, at, h_kv, d_k)  # (B, h_kv, S, d_k)
        v = head_view(xp, y, at + h_kv * d_k, h_kv, d_v)  # (B, h_kv, S, d_v)
        if h_kv < h:  # GQA: each key/value head serves h / h_kv query heads in a row
            k, v = (xp.repeat(a, h // h_kv, axis=1) for a in (k, v))
        need_y = ctx.needs_input_grad[0]
        need_q = need_y if own_q else ctx.needs_input_grad[1]
        inner = Context(ctx.fn.attention, xp, (need_q, need_y, need_y))
        out = ctx.fn.attention.forward(inner, q, k, v, mask)  # (B, h, T, d_v)
        ctx.inner, ctx.probs, ctx.own_q, ctx.heads = inner, inner.probs, own_q, (h, h_kv)
        ctx.shape = y.shape
        return out

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        (h, h_kv), own_q = ctx.heads, ctx.own_q
        dq, dk, dv, _ = ctx.fn.attention.backward(ctx.inner, grad)  # (B, h, L, d) each
        if h_kv < h and dk is not None:  # each key/value head: the sum over its copies
            B, _, S, _ = dk.shape
            dk, dv = (xp.sum(xp.reshape(a, (B, h_kv, h // h_kv, S, -1)), axis=2) for a in (dk, dv))
        dy = None
        if ctx.needs_input_grad[0]:
            parts = ([dq] if own_q else []) + [dk, dv]  # (B, n, L, d) each
            B, L = ctx.shape[:2]
            merged = [xp.reshape(xp.permute_dims(a, (0, 2, 1, 3)), (B, L, -1)) for a in parts]
            dy = xp.concat(merged, axis=-1)  # (B, L, C): y's columns, as forward read them
        return dy, (None if own_q else dq), None
