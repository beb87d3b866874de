"""The LayerNorm twin for CuPy arrays: ``ops/layernorm.py``'s row math in CUDA kernels
(``fast/cuda/layer_norm.cu``), one launch forward, and backward's dgamma and dbeta summed
straight into the parameters' gradient buffers. Tested against the reference in
tests/fast/test_cuda_rows.py (a GPU) and its wiring on the CPU in
tests/fast/test_cupy_wiring.py. Importable without CuPy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..gpu import cuda_source
from ..gpu.cuda_source import DTYPES, block_size, contiguous
from ..gpu.cuda_source import launch_rows as _launch
from ..grad_buffers import offered
from ..rows import LayerNormRows

try:
    import cupy as cp
except ImportError:  # no CuPy: the module still imports (its names are checked on the CPU)
    cp = None

Array = Any  # cupy.ndarray


def layer_norm_forward(
    x2: Array, gamma: Array, beta: Array, eps: float
) -> tuple[Array, Array, Array]:
    """Reference: ``LayerNorm.forward`` (ops/layernorm.py). x2 (N, D) -> y (N, D),
    x_hat (N, D), rstd (N, 1), in one launch (``layer_norm.cu``: each row scaled by its
    max |x|, two-pass variance). gamma and beta have x2's dtype (``layer_norm`` checks)."""
    N, D = x2.shape
    x2, gamma, beta = contiguous(cp, x2, gamma, beta)
    y, x_hat = cp.empty_like(x2), cp.empty_like(x2)
    rstd = cp.empty((N, 1), dtype=x2.dtype)
    args = (x2, gamma, beta, x2.dtype.type(eps), np.int32(D), y, x_hat, rstd)
    _launch(
        cuda_source.kernel_for("layer_norm.cu", "layer_norm_forward", x2.dtype),
        N,
        block_size(D),
        args,
    )
    return y, x_hat, rstd


def layer_norm_backward(
    g: Array,
    x_hat: Array,
    rstd: Array,
    gamma: Array,
    needs: tuple[bool, ...],
    outs: tuple = (None, None, None),
) -> tuple[Array | None, Array | None, Array | None]:
    """Reference: ``LayerNorm.backward``. g (N, D) -> dx (N, D) (one launch, one block per
    row), dgamma (D,), dbeta (D,) (None where ``needs`` says no). dgamma and dbeta are
    deterministic column sums in one launch: partial sums over chunks of rows, added in a
    fixed order by the last block to finish (``layer_norm_param_sums``); over no rows, zeros.
    ``outs``: the parameters' gradient buffers (``grad_buffers.offered``); where
    gamma's and beta's lie side by side (an optimizer's flat buffer) the sums are written
    into both at once, and the buffers themselves are returned: no copy follows."""
    need_x, need_gamma, need_beta = needs
    N, D = g.shape
    g, x_hat, rstd, gamma = contiguous(cp, g, x_hat, rstd, gamma)
    dx = dgamma = dbeta = None
    if need_x:
        dx = cp.empty_like(g)
        args = (g, x_hat, rstd, gamma, np.int32(D), dx)
        kernel = cuda_source.kernel_for("layer_norm.cu", "layer_norm_backward_dx", g.dtype)
        _launch(kernel, N, block_size(D), args)
    if need_gamma or need_beta:
        if N == 0:  # sums over no rows
            sums = cp.zeros((2, D), dtype=g.dtype)
        else:
            rows, chunks = param_chunks(N)
            both = side_by_side(outs[1], outs[2], g) if need_gamma and need_beta else None
            sums = cp.empty((2, D), dtype=g.dtype) if both is None else both
            grid = ((D + 255) // 256, chunks)
            args = (g, x_hat, np.int32(N), np.int32(D), np.int32(rows))
            if chunks == 1:  # the one chunk's partial sums are the sums
                kernel = cuda_source.kernel_for(
                    "layer_norm.cu", "layer_norm_param_partials", g.dtype
                )
                kernel(grid, (256,), (*args, sums))
            else:  # partials, and the last block of each column block adds them: one launch
                part = cp.empty((2, chunks, D), dtype=g.dtype)
                kernel = cuda_source.kernel_for("layer_norm.cu", "layer_norm_param_sums", g.dtype)
                kernel(grid, (256,), (*args, part, _arrivals(grid[0]), sums))
            if both is not None:
                return dx, outs[1], outs[2]
        dgamma = sums[0] if need_gamma else None
        dbeta = sums[1] if need_beta else None
    return dx, dgamma, dbeta


# layer_norm_param_sums's counters, one per column block of 256 (D <= 256 * ARRIVALS_MIN
# for the first buffer: every model up to D = 65,536), per device: a list, largest last.
ARRIVALS_MIN = 256
_ARRIVALS: dict[int, list[Array]] = {}


def _arrivals(n: int) -> Array:
    """At least n zeroed uint32 counters on this device for ``layer_norm_param_sums`` (each
    launch leaves them at 0 again). Made once, at ``ARRIVALS_MIN`` or more; a wider D makes
    a larger buffer, and the smaller ones are KEPT, not freed: a CUDA graph captured with
    them holds their address, and would otherwise replay into memory handed to another
    array (the graph's launches read and reset these counters)."""
    dev = cp.cuda.runtime.getDevice()
    buffers = _ARRIVALS.setdefault(dev, [])
    if not buffers or buffers[-1].size < n:
        buffers.append(cp.zeros((max(n, ARRIVALS_MIN),), dtype=np.uint32))
    return buffers[-1]


def param_chunks(N: int) -> tuple[int, int]:
    """(rows per chunk, chunks) for the column sums of N rows: at least 32 rows a chunk,
    at most 64 chunks (enough blocks to fill the GPU at the model's sizes)."""
    chunks = max(1, min(64, N // 32))
    rows = -(-N // chunks)
    return rows, -(-N // rows)


def side_by_side(dgamma: Array | None, dbeta: Array | None, like: Array) -> Array | None:
    """A (2, D) array over the buffers ``dgamma`` and ``dbeta`` (D,) when beta's follows
    gamma's in memory (C-contiguous, ``like``'s dtype), else None."""
    if dgamma is None or dbeta is None:
        return None
    D = like.shape[1]
    if dgamma.shape != (D,) or dbeta.shape != (D,):
        return None
    if dgamma.dtype != like.dtype or dbeta.dtype != like.dtype:
        return None
    if dbeta.data.ptr != dgamma.data.ptr + D * like.itemsize:
        return None
    if not (dgamma.flags.c_contiguous and dbeta.flags.c_contiguous):
        return None
    return cp.ndarray((2, D), dtype=like.dtype, memptr=dgamma.data)


class LayerNorm(LayerNormRows):
    """Twin of ``ops.layernorm.LayerNorm``'s row math, in CUDA kernels; backward writes
    dgamma and dbeta into the gradient buffers the engine offers (``layer_norm_backward``)."""

    dtypes = DTYPES
    forward_kernel = staticmethod(layer_norm_forward)
    backward_kernel = staticmethod(layer_norm_backward)

    @staticmethod
    def backward(ctx, grad):
        x_hat, rstd, gamma = ctx.saved
        g = cp.reshape(grad, x_hat.shape)  # (N, D)
        outs = offered(ctx)
        dx, dgamma, dbeta = layer_norm_backward(g, x_hat, rstd, gamma, ctx.needs_input_grad, outs)
        return (None if dx is None else cp.reshape(dx, grad.shape)), dgamma, dbeta
