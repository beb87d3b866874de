"""Matrix products of CuPy arrays through cuBLAS's C API: the GPU's ``xp.matmul`` when the
fast tier is on.

Why not ``cupy.matmul``:

1. With more than two axes it makes every operand C-contiguous first (a copy kernel for
   ``k.mT``, ``p.mT``, ``ds.mT``...), though cuBLAS reads a transposed matrix where it lies
   (its ``op`` flags).
2. CuPy's cuBLAS wrappers call ``cublasSetStream`` before every product, and refuse while
   the stream is being captured into a CUDA graph (cupy issue #6290), so a training step
   that multiplies matrices cannot be captured (``fast/gpu/cuda_graph.py``).

Here one cuBLAS handle per GPU (made once) gets CuPy's current stream only when it changes,
and a workspace of ours (cuBLAS asks for one under graph capture); each product is planned
from the operands' shapes and strides (``plan``, plain Python, tested on the CPU by
``run_plan`` in NumPy; remembered per shapes and strides, so a layout seen before costs one
lookup) and is one ``cublas?gemm`` or ``cublas?gemmStridedBatched`` call. ``tensordot``
over every leading axis (a weight's gradient) is one such product too.

Row-major to column-major. cuBLAS is column-major: it sees a row-major (r, c) matrix with
row stride s as its transpose, a (c, r) matrix with leading dimension s. So C = A B
(m, n) is asked for as C^T = B^T A^T, an (n, m) column-major product that lands in a
row-major C. A transposed view (strides (1, s)) is, read column-major, the matrix itself
with leading dimension s: its op is T instead of N. Batches: every operand's batch axes
(broadcast to the output's) must be one uniform stride (0 for a broadcast operand);
an operand that is not (permuted heads (B, H, L, d)) is made contiguous first, one copy.

Importable without CuPy: ``plan`` and ``run_plan`` are pure; the C library is loaded on
the first product.
"""

from __future__ import annotations

import ctypes
import functools
import math
from typing import Any

import numpy as np

__all__ = ["bind", "bind_tensordot", "load_library", "matmul", "plan", "plan_in_bytes",
           "planned", "run_plan", "tensordot", "workspace"]  # fmt: skip

OP_N, OP_T = 0, 1  # cublasOperation_t
INT32_MAX = 2**31 - 1
WORKSPACE_BYTES = 32 * 2**20  # cuBLAS's own recommendation for Hopper is 32 MiB


# ----------------------------------------------------------------------------- the plan


def _matrix(r: int, c: int, sr: int, sc: int) -> tuple[int, int] | None:
    """(op, ld) of a row-major (r, c) matrix with element strides (sr, sc), as cuBLAS must
    read it to get its transpose (c, r) column-major; None when neither layout fits."""
    if sc == 1 or c == 1:  # rows lie contiguous: column-major it is X^T, ld = row stride
        ld = sr if r > 1 else c
        if ld >= max(1, c):
            return OP_N, ld
    if sr == 1 or r == 1:  # columns lie contiguous (a transposed view): op T
        ld = sc if c > 1 else r
        if ld >= max(1, r):
            return OP_T, ld
    return None


def _batch_stride(shape: tuple[int, ...], strides: tuple[int, ...],
                  out_batch: tuple[int, ...]) -> int | None:  # fmt: skip
    """One stride S with element offset i * S for the i-th matrix (C order over
    ``out_batch``) of an operand whose batch axes are ``shape`` (``strides``), broadcast to
    ``out_batch``; None when there is no such S."""
    pad = len(out_batch) - len(shape)
    axes = [(n, 0 if (j < pad or shape[j - pad] == 1) else strides[j - pad])
            for j, n in enumerate(out_batch)]  # fmt: skip
    axes = [(n, s) for n, s in axes if n > 1]
    if not axes:
        return 0
    S, inner = axes[-1][1], 1
    for n, s in reversed(axes):
        if s != S * inner:
            return None
        inner *= n
    return S if S >= 0 else None


def _contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """True for C-contiguous element strides (a copy would not change the layout; an
    operand broadcast over some batch axes but not others stays a case for cupy.matmul)."""
    want = 1
    for n, s in zip(reversed(shape), reversed(strides), strict=True):
        if n > 1 and s != want:
            return False
        want *= n
    return True


# How many (shapes, strides) pairs ``plan`` and ``plan_in_bytes`` remember. A training step
# multiplies a few dozen distinct layouts per batch shape (tiny: 73 products, ~40 layouts);
# the bound keeps a run with many batch shapes from growing the cache without end.
PLAN_CACHE_SIZE = 4096


@functools.lru_cache(maxsize=PLAN_CACHE_SIZE)
def plan(a_shape: tuple[int, ...], a_strides: tuple[int, ...], b_shape: tuple[int, ...],
         b_strides: tuple[int, ...]) -> dict[str, Any] | str | None:  # fmt: skip
    """How cuBLAS computes a @ b for operands of these shapes and element strides.

    Pure, so remembered (``functools.lru_cache``, ``PLAN_CACHE_SIZE`` entries): the same
    arguments give the same dict object, which callers read and never change.

    A stack of rows times one matrix (a (..., m, k) whose matrices follow each other,
    times a (k, n)) is one GEMM over all the rows (``batch`` 1), as the reference folds it.

    Returns a dict of the call's arguments (``transa``, ``transb``, ``m``, ``n``, ``k``,
    ``lda``, ``ldb``, ``ldc``, ``stride_a``, ``stride_b``, ``stride_c``, ``batch``,
    ``out_shape``; cuBLAS's "A" is our b and its "B" our a, as the module doc says), or
    ``"a"`` / ``"b"``: make that operand contiguous first and plan again; or None: not a
    case for cuBLAS (an empty axis, a size past int32, fewer than two axes, batch axes
    broadcast in part)."""
    if len(a_shape) < 2 or len(b_shape) < 2:
        return None
    m, k = a_shape[-2:]
    k2, n = b_shape[-2:]
    if k != k2:
        return None
    try:
        out_batch = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    except ValueError:
        return None
    batch = math.prod(out_batch)
    if 0 in (m, n, k, batch) or max(m, n, k, batch) > INT32_MAX:
        return None
    ma = _matrix(m, k, a_strides[-2], a_strides[-1])
    sa = _batch_stride(a_shape[:-2], a_strides[:-2], out_batch)
    if ma is None or sa is None:
        return None if _contiguous(a_shape, a_strides) else "a"
    mb = _matrix(k, n, b_strides[-2], b_strides[-1])
    sb = _batch_stride(b_shape[:-2], b_strides[:-2], out_batch)
    if mb is None or sb is None:
        return None if _contiguous(b_shape, b_strides) else "b"
    if max(ma[1], mb[1]) > INT32_MAX:
        return None
    out_shape = (*out_batch, m, n)
    if batch > 1 and sb == 0 and ma[0] == OP_N and sa == m * ma[1] and batch * m <= INT32_MAX:
        # a stack of rows, each matrix's rows right after the last's, times ONE matrix
        # (x @ W): all batch * m rows are one (batch * m, k) matrix: one GEMM, not a batch
        m, batch, sa = batch * m, 1, 0
    # C^T (n, m) = op(B^T) (n, k) @ op(A^T) (k, m), column-major, ldc = n
    return dict(transa=mb[0], transb=ma[0], m=n, n=m, k=k, lda=mb[1], ldb=ma[1], ldc=n,
                stride_a=sb, stride_b=sa, stride_c=m * n, batch=batch,
                out_shape=out_shape)  # fmt: skip


@functools.lru_cache(maxsize=PLAN_CACHE_SIZE)
def plan_in_bytes(a_shape: tuple[int, ...], a_strides: tuple[int, ...],
                  b_shape: tuple[int, ...], b_strides: tuple[int, ...],
                  itemsize: int) -> dict[str, Any] | str | None:  # fmt: skip
    """``plan`` for strides in bytes, as arrays give them (``x.strides``), both operands of
    one ``itemsize``; remembered like ``plan``, so a product seen before costs one lookup."""
    return plan(a_shape, tuple(s // itemsize for s in a_strides), b_shape,
                tuple(s // itemsize for s in b_strides))  # fmt: skip


def planned(a: Any, b: Any, contiguous: Any) -> tuple[dict[str, Any] | None, Any, Any]:
    """``(plan, a, b)`` for arrays a and b, each operand the plan asks for made contiguous
    by ``contiguous`` (``cupy.ascontiguousarray``; NumPy's in the tests); the plan is None
    where cuBLAS is not asked (``plan``'s None)."""
    item = a.dtype.itemsize
    for _ in range(3):  # at most: a made contiguous, b made contiguous
        p = plan_in_bytes(a.shape, a.strides, b.shape, b.strides, item)
        if p == "a":
            a = contiguous(a)
        elif p == "b":
            b = contiguous(b)
        else:
            return p, a, b
    return None, a, b


def run_plan(p: dict[str, Any], a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Execute plan ``p`` as cuBLAS would, in NumPy: read each operand's memory through the
    plan's column-major (ld, stride, op) alone, and write C column-major (tests only)."""
    out = np.empty(p["out_shape"], dtype=np.result_type(a, b))
    item = out.itemsize

    def cm(x: np.ndarray, op: int, rows: int, cols: int, ld: int, stride: int) -> np.ndarray:
        r, c = (cols, rows) if op == OP_T else (rows, cols)  # the matrix as stored
        view = np.lib.stride_tricks.as_strided(
            x, shape=(p["batch"], r, c), strides=(stride * item, item, ld * item)
        )
        return view.transpose(0, 2, 1) if op == OP_T else view

    A = cm(b, p["transa"], p["m"], p["k"], p["lda"], p["stride_a"])  # (batch, n, k)
    B = cm(a, p["transb"], p["k"], p["n"], p["ldb"], p["stride_b"])  # (batch, k, m)
    C = np.matmul(A, B)  # (batch, n, m) column-major = (batch, m, n) row-major
    flat = out.reshape(p["batch"], p["n"], p["m"])  # cuBLAS's (m=n_ours, n=m_ours) ...
    flat[...] = C.transpose(0, 2, 1).reshape(flat.shape)  # ... written with ldc = n_ours
    return out


# ----------------------------------------------------------------------------- cuBLAS


class _Library:
    """libcublas, loaded once (the copy CuPy has loaded), with the prototypes used here."""

    def __init__(self) -> None:
        import cupy_backends.cuda.libs.cublas  # noqa: F401 - loads libcublas into the process

        self.lib = load_library()
        vp, i, ll, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_size_t
        L = self.lib
        L.cublasCreate_v2.argtypes = [ctypes.POINTER(vp)]
        L.cublasSetStream_v2.argtypes = [vp, vp]
        L.cublasSetWorkspace_v2.argtypes = [vp, vp, sz]
        gemm = [vp, i, i, i, i, i, vp, vp, i, vp, i, vp, vp, i]
        batched = [vp, i, i, i, i, i, vp, vp, i, ll, vp, i, ll, vp, vp, i, ll, i]
        for name, args in (("cublasSgemm_v2", gemm), ("cublasDgemm_v2", gemm),
                           ("cublasSgemmStridedBatched", batched),
                           ("cublasDgemmStridedBatched", batched)):  # fmt: skip
            getattr(L, name).argtypes = args
            getattr(L, name).restype = i
        for name in ("cublasCreate_v2", "cublasSetStream_v2", "cublasSetWorkspace_v2"):
            getattr(L, name).restype = i
        f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
        self.gemm = {f32: L.cublasSgemm_v2, f64: L.cublasDgemm_v2}
        self.batched = {
            np.dtype(np.float32): L.cublasSgemmStridedBatched,
            np.dtype(np.float64): L.cublasDgemmStridedBatched,
        }
        self.one = {
            np.dtype(np.float32): ctypes.c_float(1.0),
            np.dtype(np.float64): ctypes.c_double(1.0),
        }
        self.zero = {
            np.dtype(np.float32): ctypes.c_float(0.0),
            np.dtype(np.float64): ctypes.c_double(0.0),
        }
        self.handles: dict[int, list] = {}  # device id -> [handle, stream ptr, workspace]


def load_library(stem: str = "libcublas") -> ctypes.CDLL:
    """The library ``stem`` (libcublas, libcublasLt) that this process has loaded (CuPy's),
    by soname or from /proc/self/maps."""
    for name in (f"{stem}.so.13", f"{stem}.so.12", f"{stem}.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            for line in maps:
                path = line.split()[-1]
                if f"/{stem}.so" in path:
                    return ctypes.CDLL(path)
    except OSError:
        pass
    raise RuntimeError(f"{stem} is not loaded; is CuPy installed with its CUDA libraries?")


_LIB: _Library | None = None


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"cuBLAS: {what} returned status {status}")


def _handle(cp: Any) -> Any:
    """This device's handle, its stream set to CuPy's current stream (and our workspace
    with it: cublasSetStream resets the workspace to cuBLAS's default)."""
    global _LIB
    if _LIB is None:
        _LIB = _Library()
    dev = cp.cuda.runtime.getDevice()
    entry = _LIB.handles.get(dev)
    if entry is None:
        h = ctypes.c_void_p()
        _check(_LIB.lib.cublasCreate_v2(ctypes.byref(h)), "cublasCreate")
        workspace = cp.empty((WORKSPACE_BYTES,), dtype=cp.uint8)
        entry = _LIB.handles[dev] = [h, None, workspace]
    stream = cp.cuda.get_current_stream().ptr
    if entry[1] != stream:
        _check(_LIB.lib.cublasSetStream_v2(entry[0], stream), "cublasSetStream")
        ws = entry[2]
        _check(
            _LIB.lib.cublasSetWorkspace_v2(entry[0], ws.data.ptr, ws.nbytes), "cublasSetWorkspace"
        )
        entry[1] = stream
    return entry[0]


def workspace(cp: Any) -> Any:
    """This device's cuBLAS workspace (``WORKSPACE_BYTES``), which cuBLASLt's products share:
    they run on the same stream, one after another."""
    _handle(cp)
    return _LIB.handles[cp.cuda.runtime.getDevice()][2]


def matmul(a: Any, b: Any, cp: Any = None, out: Any = None) -> Any:
    """a @ b for CuPy arrays (NumPy's matmul semantics: batch axes broadcast), by one cuBLAS
    call (float32, float64); other dtypes and empty axes go to ``cupy.matmul``. ``out``: a
    C-contiguous array of the result's shape and dtype to write into (else a new one)."""
    if cp is None:
        import cupy as cp
    dt = a.dtype
    if dt != b.dtype or dt not in _DTYPES:
        return cp.matmul(a, b, out=out)
    p, a, b = planned(a, b, cp.ascontiguousarray)
    if p is None:
        return cp.matmul(a, b, out=out)
    if out is None:
        out = cp.empty(p["out_shape"], dtype=dt)
    elif out.shape != p["out_shape"] or out.dtype != dt or not out.flags.c_contiguous:
        raise ValueError(f"matmul: out must be C-contiguous {p['out_shape']} {dt}")
    h = _handle(cp)
    lib = _LIB
    one, zero = ctypes.byref(lib.one[dt]), ctypes.byref(lib.zero[dt])
    if p["batch"] == 1:
        status = lib.gemm[dt](h, p["transa"], p["transb"], p["m"], p["n"], p["k"], one,
                              b.data.ptr, p["lda"], a.data.ptr, p["ldb"], zero, out.data.ptr,
                              p["ldc"])  # fmt: skip
    else:
        status = lib.batched[dt](h, p["transa"], p["transb"], p["m"], p["n"], p["k"], one,
                                 b.data.ptr, p["lda"], p["stride_a"], a.data.ptr, p["ldb"],
                                 p["stride_b"], zero, out.data.ptr, p["ldc"], p["stride_c"],
                                 p["batch"])  # fmt: skip
    _check(status, "gemm")
    return out


_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def tensordot(a: Any, b: Any, cp: Any = None, axes: Any = 2) -> Any:
    """``cupy.tensordot(a, b, axes)``; contracting every leading axis of two arrays with the
    same leading shape (a weight's gradient: x^T g summed over all rows, as ``ops/matmul.py``
    asks for it) it is ONE 2-D product through ``matmul`` above, (k, rows) @ (rows, m), the
    transposed rows read in place: no CuPy cuBLAS call, so a CUDA graph can capture it.
    Other contractions are CuPy's own (which a capture refuses)."""
    if cp is None:
        import cupy as cp
    if type(axes) is tuple and len(axes) == 2 and a.ndim == b.ndim and a.ndim > 1:
        leading = tuple(range(a.ndim - 1))
        if axes[0] == leading and axes[1] == leading and a.shape[:-1] == b.shape[:-1]:
            rows = math.prod(a.shape[:-1])
            a2 = cp.reshape(a, (rows, a.shape[-1]))  # (rows, k): a view when contiguous
            b2 = cp.reshape(b, (rows, b.shape[-1]))  # (rows, m)
            return matmul(a2.T, b2, cp)  # (k, m)
    return cp.tensordot(a, b, axes=axes)


def bind(cp: Any) -> Any:
    """``matmul`` for the CuPy module ``cp``: the lean namespace's ``xp.matmul``."""

    def matmul_(a: Any, b: Any, /) -> Any:
        return matmul(a, b, cp)

    matmul_.__doc__ = matmul.__doc__
    return matmul_


def bind_tensordot(cp: Any) -> Any:
    """``tensordot`` for the CuPy module ``cp``: the lean namespace's ``xp.tensordot``."""

    def tensordot_(a: Any, b: Any, /, *, axes: Any = 2) -> Any:
        return tensordot(a, b, cp, axes)

    tensordot_.__doc__ = tensordot.__doc__
    return tensordot_
