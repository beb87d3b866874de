"""The gradient clipping's twins for CuPy arrays: ``optim/clip.py``'s ``clip_flat`` (the total
norm of the flat gradient buffer and its scaling) and ``step_ok`` (the training step's
finite flag), with no host read (``fast/cuda/grad_norm.cu``): the norm in two launches
(summed in double, in a fixed order: deterministic), the scaling in a third, the flag in
one. Tested on the CPU through a NumPy transcription of the kernels
(tests/fast/test_cuda_step.py) and against the reference on a GPU. Importable without CuPy.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...optim.clip import clip_flat as _clip_flat
from ..gpu import cuda_source
from ..gpu.cuda_source import BLOCK, DTYPES, elementwise_grid, true_on

try:
    import cupy as cp
except ImportError:  # a machine without CuPy: the names are still here, for tests
    cp = None

Array = Any  # cupy.ndarray

NORM_BLOCKS = 1024  # blocks of grad_sumsq_partial at most (its partial sums: 8 KiB)


def norm_grid(n: int) -> int:
    """Blocks of grad_sumsq_partial for n elements: ceil(n / BLOCK), 1..NORM_BLOCKS."""
    return max(1, min((n + BLOCK - 1) // BLOCK, NORM_BLOCKS))


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
    flag = true_on(loss) if prev is None else prev
    loss = cp.ascontiguousarray(loss, dtype=norm.dtype).reshape(())
    kernel = cuda_source.kernel_for("grad_norm.cu", "step_ok", norm.dtype)
    kernel((1,), (1,), (loss, cp.ascontiguousarray(norm), flag, ok))
    return ok


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


clip_flat.dtypes = step_ok.dtypes = DTYPES
