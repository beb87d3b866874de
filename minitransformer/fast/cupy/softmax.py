"""The softmax twins for CuPy arrays: ``ops/softmax.py``'s ``Softmax`` and ``LogSoftmax``
forward in one launch each (the attention softmax kernel, ``fast/cuda/attention_softmax.cu``,
with scale 1 and no mask); their backward is the reference's. Tested against the reference
in tests/fast/test_cuda_rows.py (a GPU). Importable without CuPy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...ops.softmax import LogSoftmax as _LogSoftmax
from ...ops.softmax import Softmax as _Softmax
from ..gpu import cuda_source
from ..gpu.cuda_source import DTYPES, block_size
from ..gpu.cuda_source import launch_rows as _launch

try:
    import cupy as cp
except ImportError:  # no CuPy: the module still imports (its names are checked on the CPU)
    cp = None

Array = Any  # cupy.ndarray

NO_STRIDES = (np.int64(0),) * 4  # no mask: the kernel reads none


def softmax(x: Array, axis: int) -> Array:
    """Reference: ``Softmax.forward`` (ops/softmax.py): one launch of the attention softmax
    kernel (scale 1, no mask) over the last axis (another axis is moved there and back)."""
    return _row_softmax(x, axis, log=False)


def log_softmax(x: Array, axis: int) -> Array:
    """Reference: ``LogSoftmax.forward``: (x - m) - log sum e^(x - m) in one launch."""
    return _row_softmax(x, axis, log=True)


def _row_softmax(x: Array, axis: int, log: bool) -> Array:
    if axis not in (-1, x.ndim - 1):  # the kernel's rows are the last axis
        return cp.moveaxis(_row_softmax(cp.moveaxis(x, axis, -1), -1, log), -1, axis)
    x = cp.ascontiguousarray(x)
    S = x.shape[-1]
    out = cp.empty_like(x)
    args = (x, None, *NO_STRIDES, np.int32(1), np.int32(x.size // S), np.int32(S))
    args += (x.dtype.type(1.0), np.int32(log), out)
    kernel = cuda_source.kernel_for("attention_softmax.cu", "attention_softmax_forward", x.dtype)
    _launch(kernel, x.size // S, block_size(S), args)
    return out


class Softmax(_Softmax):
    """Twin of ``ops.softmax.Softmax``'s forward (one launch); backward is the reference's."""

    dtypes = DTYPES

    @staticmethod
    def forward(ctx, x, axis: int = -1):
        y = softmax(x, axis)
        ctx.save_for_backward(y)
        ctx.axis = axis
        return y


class LogSoftmax(_LogSoftmax):
    """Twin of ``ops.softmax.LogSoftmax``'s forward (one launch)."""

    dtypes = DTYPES

    @staticmethod
    def forward(ctx, x, axis: int = -1):
        o = log_softmax(x, axis)
        ctx.save_for_backward(o)
        ctx.axis = axis
        return o
