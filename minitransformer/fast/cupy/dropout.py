"""Dropout's twins for CuPy arrays: ``ops/dropout.py``'s ``Dropout`` and ``DropoutAdd`` (the
residual add with it) in one launch each way (``fast/cuda/dropout.cu``), the mask made
inside the kernel from the two keys of the generator's draw (``Generator.dropout_keys``),
exactly ``Generator.keep_mask``'s bits: forward saves the keys, not a mask, and backward
makes the same mask again. Kernels take float32 and float64 (the twins' ``dtypes``: float16
runs the reference), made C-contiguous first (no copy when they are).

While a step is captured as a CUDA graph (``fast/gpu/cuda_graph.py``), the keys, which a
graph would freeze, come from a device slot that each replay refills (``dropout_keys``).
Tested on the CPU through NumPy transcriptions of the kernels (tests/fast/test_cuda_step.py)
and against the reference on a GPU. Importable without CuPy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...ops.dropout import Dropout as _Dropout
from ...ops.dropout import DropoutAdd as _DropoutAdd
from ..gpu import cuda_graph, cuda_source
from ..gpu.cuda_source import BLOCK, DTYPES, contiguous, elementwise_grid

try:
    import cupy as cp
except ImportError:  # a machine without CuPy: the names are still here, for tests
    cp = None

Array = Any  # cupy.ndarray


def dropout_keys(generator: Any, p: float) -> Any:
    """The next draw of ``generator`` for dropout with probability p: the host triple
    ``(k1, k2, threshold)`` (``Generator.dropout_keys``), or, while a step is captured, the
    recorder's ``(slot, threshold)`` with the keys in a device slot."""
    if cuda_graph.recorder is None:
        return generator.dropout_keys(p)
    return cuda_graph.recorder.dropout_keys(generator, p)


# keys = (k1, k2, threshold) from Generator.dropout_keys(p): element i (flat C order) is
# kept when lowbias32(lowbias32(i ^ k1) ^ k2) >= threshold, exactly Generator.keep_mask.
# Captured: keys = (slot, threshold), slot a device uint32 (2,) holding (k1, k2).


def _dropout_launch(name: str, x: Array, r: Array | None, keys: tuple, scale: float) -> Array:
    """One launch of dropout.cu's ``name`` (dropout_apply or dropout_add) over x (and r)."""
    x, r = contiguous(cp, x, r)  # a flag read where they already are (r: None, or the same)
    y = cp.empty(x.shape, dtype=x.dtype)
    n = x.size
    if len(keys) == 3:
        k1, k2, threshold = keys
        draw: tuple = (np.uint32(k1), np.uint32(k2))
    else:  # captured: the keys in a device slot
        slot, threshold = keys
        draw, name = (slot,), name + "_graph"
    tail = (np.uint64(n), *draw, np.uint32(threshold), x.dtype.type(scale))
    args = (x, y) + tail if r is None else (x, r, y) + tail
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


# ----------------------------------------------------------------------------- the twins


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
