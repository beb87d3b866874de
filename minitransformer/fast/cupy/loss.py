"""The cross-entropy's twin for CuPy arrays: the row kernels (``fast/cuda/cross_entropy.cu``)
and, for "mean" and "sum", the reduction around them in two launches more.

``ops/loss.py`` computes a mean over the rows kept (target != ignore_index) as array calls:
the mask, the ids made safe, the row math, the masked losses, the count (cast, sum, guard
against 0), the sum and the division: about a dozen launches forward, and three for the
row weights of backward (w = grad / count, 0 on an ignored row). Here:

- ``safe_ids``: an ignored row's id replaced by 0 (any id in range), one elementwise kernel;
- ``cross_entropy_forward``: the rows' losses, e = e^(x - m) and s (one launch);
- ``cross_entropy_total``: total and divisor in one block (``cross_entropy.cu``;
  deterministic); divisor = max(count, 1) for "mean", 1 for "sum";
- backward: ``row_weights`` (one elementwise kernel), then ``cross_entropy_backward``.

The same math in the same order within a row; the sum over rows is one block's fixed-order
tree instead of CuPy's reduction, so the loss may differ from the reference's in its last
bits. Registered for cupy.ndarray by ``fast/cupy/__init__.py``'s ``TWINS``. Importable
without CuPy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...ops.loss import CrossEntropy as _CrossEntropy
from ..gpu import cuda_source
from ..gpu.cuda_source import DTYPES, block_size, elementwise, launch_rows
from ..rows import CrossEntropyRows

try:
    import cupy as cp
except ImportError:  # no CuPy: the module still imports (its names are checked on the CPU)
    cp = None

Array = Any  # cupy.ndarray
# the elementwise kernels (``cuda_source.elementwise``): an ignored row's id -> 0; a row's
# weight w = g / divisor, 0 where the row is ignored
SAFE_IDS = ("I t, I ignore", "I out", "out = t == ignore ? (I)0 : t", "mt_safe_ids")
ROW_WEIGHTS = ("raw T g, raw T divisor, I t, I ignore", "T w",
               "w = t == ignore ? (T)0 : g[0] / divisor[0]", "mt_row_weights")  # fmt: skip


def safe_ids(t: Array, ignore: int) -> Array:
    """t (N,) int64 with each ``ignore`` replaced by 0: one launch."""
    return elementwise(*SAFE_IDS)(t, t.dtype.type(ignore))


def cross_entropy_total(loss: Array, t: Array, ignore: int, mean: bool) -> tuple[Array, Array]:
    """Reference: ``CrossEntropy.forward``'s reduction. (total (1,), divisor (1,)) of the
    rows' ``loss`` (N,) over the rows whose id in ``t`` (N,) int64 is not ``ignore``:
    total = sum / divisor, divisor = max(count, 1) for "mean", 1 for "sum". One launch."""
    total, divisor = cp.empty((1,), dtype=loss.dtype), cp.empty((1,), dtype=loss.dtype)
    args = (loss, t, np.int64(ignore), np.int32(loss.shape[0]), np.int32(mean), total, divisor)
    kernel = cuda_source.kernel_for("cross_entropy.cu", "cross_entropy_total", loss.dtype)
    kernel((1,), (256,), args)
    return total, divisor


def row_weights(grad: Array, divisor: Array, t: Array, ignore: int) -> Array:
    """Each row's weight in backward, (N, 1): grad / divisor, 0 on a row whose id is
    ``ignore``; grad is the 0-d incoming gradient. One launch."""
    w = cp.empty((t.shape[0],), dtype=divisor.dtype)
    grad = cp.asarray(grad, dtype=divisor.dtype)  # no copy in a training step (the same)
    elementwise(*ROW_WEIGHTS)(grad, divisor, t, t.dtype.type(ignore), w)
    return cp.reshape(w, (-1, 1))


def cross_entropy_forward(x: Array, t: Array, eps: float) -> tuple[Array, Array, Array]:
    """Reference: ``CrossEntropy.forward`` (ops/loss.py). x (N, V) logits, t (N,) ids in
    range -> loss (N,), e = e^(x - m) (N, V), s (N, 1) (0 -> 1), in one launch (one block
    per row: one read of the row for its max, one writing e and summing it)."""
    N, V = x.shape
    x, t = cp.ascontiguousarray(x), cp.ascontiguousarray(t, dtype=np.int64)
    loss, e = cp.empty((N,), dtype=x.dtype), cp.empty_like(x)
    s = cp.empty((N, 1), dtype=x.dtype)
    args = (x, t, x.dtype.type(eps), np.int32(V), loss, e, s)
    launch_rows(
        cuda_source.kernel_for("cross_entropy.cu", "cross_entropy_forward", x.dtype),
        N,
        block_size(V),
        args,
    )
    return loss, e, s


def cross_entropy_backward(e: Array, s: Array, t: Array, w: Array, eps: float) -> Array:
    """Reference: ``CrossEntropy.backward``. dlogits = e (w / s) - w eps / V - w (1 - eps)
    at each row's target (N, V), in one launch. w is (N, 1), (1,) or 0-d (read with a row
    stride of 1 or 0)."""
    N, V = e.shape
    e, s = cp.ascontiguousarray(e), cp.ascontiguousarray(s)
    t = cp.ascontiguousarray(t, dtype=np.int64)
    w = cp.ascontiguousarray(w, dtype=e.dtype)
    dx = cp.empty_like(e)
    args = (e, s, t, w, np.int32(0 if w.size == 1 else 1), e.dtype.type(eps), np.int32(V), dx)
    launch_rows(
        cuda_source.kernel_for("cross_entropy.cu", "cross_entropy_backward", e.dtype),
        N,
        block_size(V),
        args,
    )
    return dx


class CrossEntropy(CrossEntropyRows):
    """Twin of ``ops.loss.CrossEntropy``: the row math in CUDA kernels, and for "mean" and
    "sum" the ignored rows, the count and the total in two more launches forward and one
    backward (module doc); "none" is the reference's, with the row kernels."""

    dtypes = DTYPES
    forward_kernel = staticmethod(cross_entropy_forward)
    backward_kernel = staticmethod(cross_entropy_backward)

    @staticmethod
    def forward(ctx, logits, target, label_smoothing=0.0, ignore_index=None, reduction="mean"):
        if reduction == "none":
            return _CrossEntropy.forward(
                ctx, logits, target, label_smoothing, ignore_index, reduction
            )
        x = cp.reshape(logits, (-1, logits.shape[-1]))  # (N, V)
        t = cp.ascontiguousarray(cp.reshape(target, (-1,)), dtype=np.int64)  # (N,)
        ignore = -1 if ignore_index is None else int(ignore_index)  # ids are >= 0: none
        safe = t if ignore_index is None else safe_ids(t, ignore)
        loss, e, s = cross_entropy_forward(x, safe, label_smoothing)
        total, divisor = cross_entropy_total(loss, t, ignore, reduction == "mean")
        if ctx.needs_input_grad[0]:
            ctx.save_for_backward(e, s, safe, t, divisor)
        ctx.eps, ctx.ignore, ctx.reduction, ctx.shape = (
            label_smoothing,
            ignore,
            reduction,
            logits.shape,
        )
        return cp.reshape(total, ())

    @staticmethod
    def backward(ctx, grad):
        if ctx.reduction == "none":
            return _CrossEntropy.backward(ctx, grad)
        e, s, safe, t, divisor = ctx.saved
        w = row_weights(grad, divisor, t, ctx.ignore)  # (N, 1)
        dx = cross_entropy_backward(e, s, safe, w, ctx.eps)
        return cp.reshape(dx, ctx.shape), None
