"""The training step's fused GPU kernels for CuPy arrays: dropout (with the residual add),
Adam over the flat buffer, and the gradient norm / clip / finite check with no host read.

Each function returns what the reference it replaces returns, like ``fast/numpy.py``; the
CUDA C is in ``fast/cuda/{dropout,adam,grad_norm}.cu`` (each file's header has the math and
the launch layout). ``fast/cupy.py`` registers them (its ``TWINS``) for cupy.ndarray (on by
default; ``MT_CUDA_KERNELS=0`` turns it off).

Kernels take float32 and float64 arrays (the twins' ``dtypes``: float16 runs the reference
math). Inputs are made C-contiguous
(``cupy.ascontiguousarray``: no copy when they are); the optimizer's buffers, which the
kernels write in place, are contiguous by construction (one flat buffer per group, or views
of its slices). Scalars go to the kernels with explicit
dtypes (``numpy.float32``, ``numpy.uint32``, ``numpy.uint64``).

Importable without CuPy (``cp`` is None then): the CPU tests read the launch layouts
(``elementwise_grid``, ``norm_grid``) to transcribe the kernels in NumPy.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..ops.dropout import Dropout as _Dropout
from ..ops.dropout import DropoutAdd as _DropoutAdd
from ..optim.clip import clip_flat as _clip_flat
from . import cuda_source
from .cuda_source import DTYPES

try:
    import cupy as cp
except ImportError:  # a machine without CuPy: the names are still here, for tests
    cp = None


__all__ = [
    "Dropout",
    "DropoutAdd",
    "adam_update",
    "clip_flat",
    "clip_grad_norm",
    "dropout_add_forward",
    "dropout_backward",
    "dropout_forward",
    "grad_norm",
    "step_ok",
]

Array = Any  # cupy.ndarray

BLOCK = 256  # threads per block, every kernel here
MAX_GRID = 65536  # blocks of the elementwise grid-stride loops (dropout, Adam, clip)
NORM_BLOCKS = 1024  # blocks of grad_sumsq_partial at most (its partial sums: 8 KiB)


def elementwise_grid(n: int) -> int:
    """Blocks for a grid-stride loop over n elements: ceil(n / BLOCK), 1..MAX_GRID."""
    return max(1, min((n + BLOCK - 1) // BLOCK, MAX_GRID))


def norm_grid(n: int) -> int:
    """Blocks of grad_sumsq_partial for n elements: ceil(n / BLOCK), 1..NORM_BLOCKS."""
    return max(1, min((n + BLOCK - 1) // BLOCK, NORM_BLOCKS))


_TRUE: dict[int, Array] = {}  # device id -> a 0-d True on it (the "no flag" flag)


def _true(like: Array) -> Array:
    """A 0-d bool True on ``like``'s device (made once per device)."""
    dev = like.device.id
    t = _TRUE.get(dev)
    if t is None:
        t = _TRUE[dev] = cp.ones((), dtype=cp.bool_)
    return t


# ----------------------------------------------------------------------------- capture
# While fast/cuda_graph.py captures a step, ``recorder`` is its Recorder: the per-step values
# a kernel would take by value (a dropout draw's keys, Adam's bias corrections), which a
# graph would freeze, are then read from device slots that each replay refills.
recorder: Any = None


def dropout_keys(generator: Any, p: float) -> Any:
    """The next draw of ``generator`` for dropout with probability p: the host triple
    ``(k1, k2, threshold)`` (``Generator.dropout_keys``), or, while a step is captured, the
    recorder's ``(slot, threshold)`` with the keys in a device slot."""
    if recorder is None:
        return generator.dropout_keys(p)
    return recorder.dropout_keys(generator, p)


# ----------------------------------------------------------------------------- dropout
# keys = (k1, k2, threshold) from Generator.dropout_keys(p): element i (flat C order) is
# kept when lowbias32(lowbias32(i ^ k1) ^ k2) >= threshold, exactly Generator.keep_mask.
# Captured: keys = (slot, threshold), slot a device uint32 (2,) holding (k1, k2).


def _dropout_launch(name: str, x: Array, r: Array | None, keys: tuple, scale: float) -> Array:
    """One launch of dropout.cu's ``name`` (dropout_apply or dropout_add) over x (and r)."""
    x = cp.ascontiguousarray(x)
    y = cp.empty(x.shape, dtype=x.dtype)
    n = x.size
    if len(keys) == 3:
        k1, k2, threshold = keys
        draw: tuple = (np.uint32(k1), np.uint32(k2))
    else:  # captured: the keys in a device slot
        slot, threshold = keys
        draw, name = (slot,), name + "_graph"
    tail = (np.uint64(n), *draw, np.uint32(threshold), x.dtype.type(scale))
    args = (x, y) + tail if r is None else (x, cp.ascontiguousarray(r), y) + tail
    kernel = cuda_source.kernel_for("dropout.cu", name, x.dtype)
    kernel((elementwise_grid(n),), (BLOCK,), args)
    return y


def dropout_forward(x: Array, keys: tuple[int, int, int], scale: float) -> Array:
    """Reference: ``Dropout.forward`` (ops/dropout.py). y = keep ? x * scale : 0 (x's
    shape), the mask made inside the kernel from ``keys`` (nothing stored)."""
    return _dropout_launch("dropout_apply", x, None, keys, scale)


def dropout_backward(g: Array, keys: tuple[int, int, int], scale: float) -> Array:
    """Reference: ``Dropout.backward``. dx = keep ? g * scale : 0 with the mask of the
    forward made again from the same ``keys``: the same kernel as forward, run on g."""
    return dropout_forward(g, keys, scale)


def dropout_add_forward(x: Array, r: Array, keys: tuple[int, int, int], scale: float) -> Array:
    """Reference: ``DropoutAdd.forward``. y = r + (keep ? x * scale : 0), one launch; r of
    x's shape and dtype (``dropout_add`` checks). (Backward: dr = g and dx =
    ``dropout_backward(g, keys, scale)``.)"""
    return _dropout_launch("dropout_add", x, r, keys, scale)


# ----------------------------------------------------------------------------- Adam


def adam_update(p: Array, g: Array, m: Array, v: Array, *, lr: float,
                betas: tuple[float, float], eps: float, weight_decay: float, t: int,
                ok: Any = None) -> None:  # fmt: skip
    """``optim.adam.adam_update`` in ONE launch (adam.cu): m, v, then p, in place, with
    ``fast.numpy.adam_update``'s order of operations. The bias corrections are host
    scalars: step_size = lr / (1 - β1^t) and sqrt(1 - β2^t). ``ok`` (a 0-d bool on the
    device, or None: always) is read inside the kernel: False changes nothing, and the host
    never reads it. p, g, m, v: one flat group's buffers (or views of their slices), of one
    dtype and contiguous, as the optimizer holds them."""
    flag = _true(p) if ok is None else ok if ok.dtype == cp.bool_ else ok.astype(cp.bool_)
    scalars = adam_scalars(p.dtype, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, t=t)
    name = "adam_update"
    if recorder is not None:  # captured: the two per-step scalars from a device slot
        scalars, name = (*scalars[:6], recorder.adam_slot(p.dtype)), "adam_update_graph"
    args = (p, g, m, v, np.uint64(p.size), flag, *scalars)
    kernel = cuda_source.kernel_for("adam.cu", name, p.dtype)
    kernel((elementwise_grid(p.size),), (BLOCK,), args)


def adam_scalars(dtype: Any, *, lr: float, betas: tuple[float, float], eps: float,
                 weight_decay: float, t: int) -> tuple:  # fmt: skip
    """adam.cu's scalar arguments, in its order, computed in double on the host and rounded
    to ``dtype`` (as NumPy rounds a Python float meeting a float32 array): b1, 1 - b1, b2,
    1 - b2, eps, weight_decay, -lr / (1 - b1^t), sqrt(1 - b2^t)."""
    b1, b2 = betas
    T = np.dtype(dtype).type
    return (T(b1), T(1 - b1), T(b2), T(1 - b2), T(eps), T(weight_decay),
            T(-(lr / (1 - b1**t))), T((1 - b2**t) ** 0.5))  # fmt: skip


# ----------------------------------------------------------------------------- norm and clip


def _norm_and_coef(grad: Array, max_norm: float) -> tuple[Array, Array]:
    """(norm, coef) of the flat buffer grad (n,) as 0-d arrays of its dtype: two launches
    (grad_sumsq_partial, grad_norm_finish)."""
    n, blocks = grad.size, norm_grid(grad.size)
    partial = cp.empty((blocks,), dtype=cp.float64)
    norm = cp.empty((), dtype=grad.dtype)
    coef = cp.empty((), dtype=grad.dtype)
    first = cuda_source.kernel_for("grad_norm.cu", "grad_sumsq_partial", grad.dtype)
    first((blocks,), (BLOCK,), (grad, np.uint64(n), partial))
    finish = cuda_source.kernel_for("grad_norm.cu", "grad_norm_finish", grad.dtype)
    finish((1,), (BLOCK,), (partial, np.uint32(blocks), grad.dtype.type(max_norm), norm, coef))
    return norm, coef


def grad_norm(grad: Array) -> Array:
    """Reference: ``optim.clip.total_norm([grad])``. sqrt(sum grad^2) of the flat gradient
    buffer (n,) as a 0-d array on the device (two launches; summed in double, in a fixed
    order: deterministic)."""
    return _norm_and_coef(grad, math.inf)[0]


def clip_grad_norm(grad: Array, max_norm: float) -> Array:
    """Reference: ``Optimizer.clip_grad_norm`` on one flat buffer (clip.py's total_norm and
    clip_coefficient). Returns the norm before clipping (0-d, on the device) and scales
    grad (n,) in place by min(1, max_norm / (norm + 1e-6)), by 1 where the norm is NaN or
    Inf. Three launches, no host read. grad: the optimizer's flat buffer (contiguous)."""
    norm, coef = _norm_and_coef(grad, max_norm)
    scale = cuda_source.kernel_for("grad_norm.cu", "grad_scale", grad.dtype)
    scale((elementwise_grid(grad.size),), (BLOCK,), (grad, np.uint64(grad.size), coef))
    return norm


def step_ok(loss: Array, norm: Array, prev: Array | None = None) -> Array:
    """isfinite(loss) & isfinite(norm) (& prev): the trainer's "apply this step" flag, a 0-d
    bool on the device, in one launch, in norm's dtype (the loss's, in a model of one
    dtype)."""
    ok = cp.empty((), dtype=cp.bool_)
    flag = _true(loss) if prev is None else prev
    loss = cp.ascontiguousarray(loss, dtype=norm.dtype).reshape(())
    kernel = cuda_source.kernel_for("grad_norm.cu", "step_ok", norm.dtype)
    kernel((1,), (1,), (loss, cp.ascontiguousarray(norm), flag, ok))
    return ok


# ----------------------------------------------------------------------------- the twins
# dropout's Functions (subclasses of their references) and the clip function, registered by
# ``fast/cupy.py``'s ``TWINS``


class Dropout(_Dropout):
    """Twin of ``ops.dropout.Dropout``: the kernel makes the mask from the draw's keys, in
    forward and again in backward (the keys are saved, not a mask)."""

    dtypes = DTYPES

    @staticmethod
    def forward(ctx, x, p: float, generator):
        ctx.scale, ctx.keys = 1.0 / (1.0 - p), dropout_keys(generator, p)
        return dropout_forward(x, ctx.keys, ctx.scale)

    @staticmethod
    def backward(ctx, grad):
        return dropout_backward(grad, ctx.keys, ctx.scale)


class DropoutAdd(_DropoutAdd):
    """Twin of ``ops.dropout.DropoutAdd``: r + dropout(x) in one launch."""

    dtypes = DTYPES

    @staticmethod
    def forward(ctx, r, x, p: float, generator):
        ctx.scale, ctx.keys = 1.0 / (1.0 - p), dropout_keys(generator, p)
        return dropout_add_forward(x, r, ctx.keys, ctx.scale)

    @staticmethod
    def backward(ctx, grad):
        if not ctx.needs_input_grad[1]:
            return grad, None
        return grad, dropout_backward(grad, ctx.keys, ctx.scale)


def clip_flat(grads: list[Array], max_norm: float) -> Array:
    """Twin of ``optim.clip.clip_flat`` for one flat buffer (the usual: one dtype): the norm
    in two launches, the scaling in a third, no host read (``grad_norm`` /
    ``clip_grad_norm``). Buffers of several dtypes take the reference."""
    if len(grads) != 1:
        return _clip_flat(grads, max_norm)
    (grad,) = grads
    if max_norm == math.inf:
        return grad_norm(grad)
    return clip_grad_norm(grad, max_norm)


clip_flat.dtypes = adam_update.dtypes = step_ok.dtypes = DTYPES
