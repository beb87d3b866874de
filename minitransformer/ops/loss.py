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
Forward needs no (N, V) one-hot: x_t comes from take_along_axis, mean_c x_c from a
reduction. Backward writes dlogits = (p - q) * w INTO the softmax buffer it saved
(w = g / count for "mean", g for "sum", g_i for "none"; 0 on ignored rows), so one graph
can go backward through it only once (retain_graph=True cannot reuse it).
"""

from __future__ import annotations

from typing import Any

from .. import backend
from ..checks import is_int, is_real
from ..errors import ArgumentError, DTypeError, ShapeError, TokenIdError
from ..function import Function
from ..tensor import Tensor
from .softmax import exp_inplace, safe_sum, shifted


class CrossEntropy(Function):
    """loss = reduce_i [(1 - eps)(lse_i - x_i,t_i) + eps (lse_i - mean_c x_i,c)]."""

    fresh_grads = True

    @staticmethod
    def forward(ctx, logits, target, label_smoothing=0.0, ignore_index=None, reduction="mean"):
        xp, eps = ctx.xp, label_smoothing
        x = xp.reshape(logits, (-1, logits.shape[-1]))  # (N, V)
        t = xp.reshape(target, (-1,))  # (N,)
        valid = None if ignore_index is None else t != ignore_index  # (N,) bool
        if valid is not None:
            t = xp.where(valid, t, 0)  # any id in range; its row is zeroed
        e, _ = shifted(xp, x, -1)  # z = x - m: (N, V), our own buffer
        loss = -xp.take_along_axis(e, xp.expand_dims(t, axis=-1), axis=-1)  # -z_t: (N, 1)
        z_mean = xp.mean(e, axis=-1, keepdims=True) if eps else None  # (N, 1)
        e = exp_inplace(xp, e)  # e^z
        s = safe_sum(xp, e, -1)  # (N, 1)
        log_s = xp.log(s)  # lse - m; shifted values keep float32 exact near +-1e4
        loss += log_s  # lse - x_t
        if eps:
            loss *= 1.0 - eps
            loss += eps * (log_s - z_mean)
        loss = xp.reshape(loss, (-1,))  # (N,)
        if valid is None:
            count = float(max(loss.shape[0], 1))
        else:
            loss = xp.where(valid, loss, 0.0)
            count = xp.sum(xp.astype(valid, x.dtype), keepdims=True)  # (1,)
            count = xp.where(count > 0, count, 1.0)  # all ignored: 0 / 1
        if ctx.needs_input_grad[0]:
            e /= s  # p = softmax(x), kept for backward
            ctx.save_for_backward(e, t, valid, count)
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
        if not ctx.saved:
            raise RuntimeError(
                "cross_entropy: backward already ran through this loss, and it reused its "
                "saved softmax buffer for the gradient; compute the loss again to go backward "
                "again (retain_graph=True cannot keep this op's buffer)"
            )
        p, t, valid, count = ctx.saved
        ctx.saved = ()
        if ctx.reduction == "none":
            w = xp.reshape(grad, (-1, 1))  # (N, 1)
        else:
            w = grad / count if ctx.reduction == "mean" else grad  # 0-d or (1,)
        if valid is not None:
            w = w * xp.expand_dims(xp.astype(valid, p.dtype), axis=-1)  # (N, 1)
        p *= w  # p w
        if ctx.eps:
            p -= w * (ctx.eps / p.shape[-1])  # - w eps / V on every class
        _sub_at_target(xp, p, t, w * (1.0 - ctx.eps))  # - w (1 - eps) at the target
        return xp.reshape(p, ctx.shape), None


def _sub_at_target(xp, p, t, c) -> None:
    """p[i, t_i] -= c_i in place (c: (N, 1), (1,) or 0-d)."""
    rows = xp.arange(p.shape[0], device=p.device)
    try:  # NumPy, CuPy: integer-array __setitem__ touches only N elements
        p[rows, t] -= xp.reshape(c, (-1,))
    except IndexError:  # the strict standard has no integer-array __setitem__: dense mask
        hit = xp.astype(
            xp.expand_dims(t, axis=-1) == xp.arange(p.shape[1], device=p.device), p.dtype
        )
        hit *= c  # (N, V)
        p -= hit


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
    if not isinstance(logits, Tensor) or logits.ndim == 0:
        raise ShapeError("cross_entropy: logits must be a Tensor of shape (..., V)")
    if not backend.dtype_name(logits.dtype).startswith("float"):
        raise DTypeError(f"cross_entropy: logits must be float, got {logits.dtype}")
    if reduction not in ("mean", "sum", "none"):
        raise ArgumentError(f"cross_entropy: reduction={reduction!r}; use 'mean', 'sum' or 'none'")
    ls = label_smoothing
    if not (is_real(ls) and 0.0 <= ls <= 1.0):
        raise ArgumentError(
            f"cross_entropy: label_smoothing={ls!r} must be a number in [0, 1]; the paper "
            "uses 0.1, and 0 turns smoothing off"
        )
    if ignore_index is not None and not is_int(ignore_index):
        raise ArgumentError(
            f"cross_entropy: ignore_index must be an int id (the padding id) or None, got "
            f"{ignore_index!r}"
        )
    t = target.data if isinstance(target, Tensor) else target
    if not backend.is_array(t):
        t = backend.asarray(t, device="cpu")
    name = backend.dtype_name(t.dtype)
    if not name.startswith(("int", "uint")):
        raise DTypeError(
            f"cross_entropy: target must hold integer class ids, got dtype {name}; "
            "convert it with target.astype('int64') (ids, not one-hot or probabilities)"
        )
    if tuple(t.shape) != logits.shape[:-1]:
        raise ShapeError(
            f"cross_entropy: target has shape {tuple(t.shape)}, but logits of shape "
            f"{logits.shape} need target shape {logits.shape[:-1]} (one id per row of V "
            "logits); reshape both the same way, e.g. logits (B*T, V) with target (B*T,)"
        )
    _check_ids(t, logits.shape[-1], ignore_index)  # free on the host, one sync on a GPU
    if backend.device_of(t) == "cpu" and logits.device != "cpu":
        t = backend.asarray(t, device=logits.device)  # checked host ids: upload
    eps = float(label_smoothing)
    return CrossEntropy.apply(
        logits, t, label_smoothing=eps, ignore_index=ignore_index, reduction=reduction
    )


def _check_ids(t: Any, V: int, ignore_index: int | None) -> None:
    xp = backend.namespace(t)
    bad = (t < 0) | (t >= V)
    if ignore_index is not None:
        bad = bad & (t != ignore_index)
    if bool(xp.any(bad)):  # one host sync; the message is built only on failure
        flat = backend.to_numpy(bad).reshape(-1)
        i = int(flat.argmax())
        value = int(backend.to_numpy(t).reshape(-1)[i])
        where = []
        for n in reversed(t.shape):  # flat index -> position in target
            i, r = divmod(i, n)
            where.insert(0, r)
        ignore = "" if ignore_index is None else f" and is not ignore_index={ignore_index}"
        raise TokenIdError(
            f"cross_entropy: target id {value} is outside [0, {V}) for logits with "
            f"V = {V} classes{ignore} (first at position {tuple(where)}); check the vocabulary "
            "size of the output layer, or pass ignore_index= for padding ids"
        )
