"""Cross-entropy of logits against integer class ids: log-softmax + NLL in one Function.

Shapes: logits x (..., V), target t (...) int ids -> loss 0-d ("mean", "sum") or (...) ("none").
With p = softmax(x) over V, lse = log sum_c e^(x_c), and the label-smoothed target
    q_c = (1 - eps) [c = t] + eps / V          (eps = label_smoothing; the paper's 0.1)
one row's loss and its derivative are
    l = -sum_c q_c log p_c = (1 - eps) (lse - x_t) + eps (lse - mean_c x_c)
    dl/dx = p - q
Rows whose target is ``ignore_index`` give loss 0 and gradient 0; "mean" divides by the
number of the other rows (as PyTorch). If every row is ignored, "mean" is 0 with a zero
gradient (PyTorch gives NaN). Masked (-inf) logits are fine; with eps > 0 they make
mean_c x_c = -inf, so the loss is inf (as in PyTorch), while the gradient stays finite.
The Function is this math as written (lse from the row max m, as in softmax.py), and it
is what runs (see ``fast/`` for twins). Forward saves e = e^(x - m) and its row sums s
(p = e / s); backward never writes into them, so ``retain_graph=True`` allows a second
backward. What the inputs must look like is checked in ``loss_checks.py``.
Twins: ``fast/numpy/loss.py``, ``fast/cupy/loss.py`` (``fast/cuda/cross_entropy.cu``).
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..function import Function
from ..tensor import Tensor
from .loss_checks import check_ids, check_inputs
from .softmax import safe_sum, shifted


class CrossEntropy(Function):
    """loss = reduce_i [(1 - eps)(lse_i - x_i,t_i) + eps (lse_i - mean_c x_i,c)].

    The per-row math is ``rows_forward`` / ``rows_backward``, called through ``ctx.fn`` (this
    class, or a fast twin that replaces just those two)."""

    fresh_grads = True

    @staticmethod
    def rows_forward(xp, x, t, eps: float):
        """x (N, V) logits, t (N,) ids in range -> loss per row (N,), e = e^(x - m) (N, V),
        s = its row sums (N, 1) (0 -> 1)."""
        z = shifted(xp, x, -1)  # x - m: (N, V)
        e = xp.exp(z)
        s = safe_sum(xp, e, -1)  # (N, 1)
        log_s = xp.log(s)  # lse - m; shifted values keep float32 exact near +-1e4
        z_t = xp.take_along_axis(z, xp.expand_dims(t, axis=-1), axis=-1)  # (N, 1)
        loss = (1.0 - eps) * (log_s - z_t)  # (1 - eps)(lse - x_t)
        if eps:
            mean_z = xp.sum(z / x.shape[-1], axis=-1, keepdims=True)  # no overflow of sum(z)
            loss = loss + eps * (log_s - mean_z)
        return xp.reshape(loss, (-1,)), e, s

    @staticmethod
    def rows_backward(xp, e, s, t, w, eps: float):
        """dlogits = (p - q) w (N, V), p = e / s, q the smoothed one-hot of t; w (N, 1),
        (1,) or 0-d."""
        V, device = e.shape[-1], e.device
        at_target = xp.expand_dims(t, axis=-1) == xp.arange(V, device=device)  # (N, V) bool
        on = xp.asarray(1 - eps + eps / V, dtype=e.dtype, device=device)
        off = xp.asarray(eps / V, dtype=e.dtype, device=device)
        q = xp.where(at_target, on, off)  # the smoothed target (N, V): 1 - eps + eps/V at t
        dx = e / s  # p = softmax(x)
        dx -= q
        dx *= w
        return dx

    @staticmethod
    def forward(ctx, logits, target, label_smoothing=0.0, ignore_index=None, reduction="mean"):
        xp, eps = ctx.xp, label_smoothing
        x = xp.reshape(logits, (-1, logits.shape[-1]))  # (N, V)
        t = xp.reshape(target, (-1,))  # (N,)
        valid = None if ignore_index is None else t != ignore_index  # (N,) bool
        if valid is not None:
            t = xp.where(valid, t, 0)  # any id in range; its row is zeroed
        loss, e, s = ctx.fn.rows_forward(xp, x, t, eps)  # (N,), (N, V), (N, 1)
        if valid is None:
            count = float(max(loss.shape[0], 1))
        else:
            loss = xp.where(valid, loss, 0.0)
            count = xp.sum(xp.astype(valid, x.dtype), keepdims=True)  # (1,)
            count = xp.where(count > 0, count, 1.0)  # all ignored: 0 / 1
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(e, s, t, valid, count)  # softmax p = e / s
        ctx.eps, ctx.reduction, ctx.shape = eps, reduction, logits.shape
        if reduction == "none":
            return xp.reshape(loss, target.shape)
        total = xp.sum(loss, keepdims=True)  # (1,)
        if reduction == "mean":
            total /= count
        return xp.reshape(total, ())

    @staticmethod
    def backward(ctx, grad):
        xp = ctx.xp
        e, s, t, valid, count = ctx.saved
        if ctx.reduction == "none":
            w = xp.reshape(grad, (-1, 1))  # (N, 1)
        else:
            w = grad / count if ctx.reduction == "mean" else grad  # 0-d or (1,)
        if valid is not None:
            w = w * xp.expand_dims(xp.astype(valid, e.dtype), axis=-1)  # (N, 1): 0 if ignored
        dx = ctx.fn.rows_backward(xp, e, s, t, w, ctx.eps)  # (N, V)
        return xp.reshape(dx, ctx.shape), None


def cross_entropy(
    logits: Tensor,
    target: Any,
    label_smoothing: float = 0.0,
    ignore_index: int | None = None,
    reduction: str = "mean",
) -> Tensor:
    """Mean (or "sum", or per-position "none") cross-entropy of ``logits`` (..., V) against
    int ids ``target`` (...): a Tensor or a raw int array on the logits' device, or host
    ids (a list or NumPy array: checked on the host for free, then uploaded)."""
    t = check_inputs(logits, target, label_smoothing, ignore_index, reduction)
    check_ids(t, logits.shape[-1], ignore_index)  # free on the host, one sync on a GPU
    if backend.device_of(t) == "cpu" and logits.device != "cpu":
        t = backend.asarray(t, device=logits.device)  # checked host ids: upload
    eps = float(label_smoothing)
    return CrossEntropy.apply(
        logits, t, label_smoothing=eps, ignore_index=ignore_index, reduction=reduction
    )
