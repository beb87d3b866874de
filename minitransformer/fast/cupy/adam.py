"""Adam's twin for CuPy arrays: ``optim/adam.py``'s ``adam_update`` over the optimizer's flat
buffer in ONE launch (``fast/cuda/adam.cu``), the skip flag read on the device. Tested on
the CPU through a NumPy transcription of the kernel (tests/fast/test_cuda_step.py: exactly
``fast/numpy/adam.py``'s numbers) and against the reference on a GPU. Importable without
CuPy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..gpu import cuda_graph, cuda_source
from ..gpu.cuda_source import BLOCK, DTYPES, elementwise_grid, true_on

try:
    import cupy as cp
except ImportError:  # a machine without CuPy: the names are still here, for tests
    cp = None

Array = Any  # cupy.ndarray


def adam_update(p: Array, g: Array, m: Array, v: Array, *, lr: float,
                betas: tuple[float, float], eps: float, weight_decay: float, t: int,
                ok: Any = None) -> None:  # fmt: skip
    """``optim.adam.adam_update`` in ONE launch (adam.cu): m, v, then p, in place, with
    ``fast/numpy/adam.py``'s order of operations. The bias corrections are host
    scalars: step_size = lr / (1 - β1^t) and sqrt(1 - β2^t). ``ok`` (a 0-d bool on the
    device, or None: always) is read inside the kernel: False changes nothing, and the host
    never reads it. p, g, m, v: one flat group's buffers (or views of their slices), of one
    dtype and contiguous, as the optimizer holds them."""
    flag = true_on(p) if ok is None else ok if ok.dtype == cp.bool_ else ok.astype(cp.bool_)
    scalars = adam_scalars(p.dtype, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, t=t)
    name = "adam_update"
    if cuda_graph.recorder is not None:  # captured: the two per-step scalars from a slot
        slot = cuda_graph.recorder.adam_slot(p, adam_scalars)
        scalars, name = (*scalars[:6], slot), "adam_update_graph"
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


adam_update.dtypes = DTYPES
