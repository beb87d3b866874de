"""The Linear layer's bias inside its product: cuBLASLt's epilogues, through its C API.

``linear``'s reference (``ops/matmul.py``) is two launches forward, y = x W then y += b, and
three backward: dx = g W^T, dW = x^T g, db = the column sums of g. cuBLASLt can do the bias
inside the product that is there anyway (one kernel each):

- forward, epilogue ``BIAS``: D = op(A) op(B) + bias, the bias (one per row of the
  column-major D) broadcast over its columns;
- backward, epilogue ``BGRADA`` / ``BGRADB``: D = op(A) op(B), and into the bias buffer the
  sums of op(A)'s rows / op(B)'s columns over the product's k axis.

Row-major to column-major as in ``fast/gpu/cublas.py`` (whose ``plan`` this reuses): C = a @ b
(m, n) is asked for as C^T = b^T a^T, so cuBLAS's A is our b and its B our a, and the rows
of its column-major D are our C's columns. So for y = x W + b the bias (d_out,) is one per
row of D: ``BIAS``. For the weight's gradient the bias gradient is the column sums of g
(d_out,), over the rows (the product's k): g is cuBLAS's A when it is our b
(dW = x^T g: ``BGRADA``) and its B when it is our a (dW^T layout, g^T x: ``BGRADB``).

``run_plan`` replays a plan in NumPy with those documented meanings, so the CPU tests check
this mapping (``tests/fast/test_cublaslt_plan.py``); a GPU test checks the library against
the reference. Where cuBLASLt offers no algorithm (a dtype, an alignment), ``matmul``
returns None and the caller does the reference's separate launches. Importable without
CuPy: the library is loaded on the first product.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from . import cublas

__all__ = ["BGRADA", "BGRADB", "BIAS", "DEFAULT", "epilogue_for", "matmul", "run_plan"]

DEFAULT, BIAS, BGRADA, BGRADB = 1, 4, 256, 512  # cublasLtEpilogue_t
_TRANSA, _TRANSB, _EPILOGUE, _BIAS_POINTER = 3, 4, 7, 8  # cublasLtMatmulDescAttributes_t
_MAX_WORKSPACE, _MIN_ALIGN = 1, (5, 6, 7, 8)  # preference attributes (A, B, C, D alignment)
_TYPES = {np.dtype(np.float32): (0, 68), np.dtype(np.float64): (1, 70)}  # cudaDataType, compute


def epilogue_for(bias: bool, grad_of: str | None) -> int:
    """The epilogue of a @ b: ``BIAS`` adds a bias over our columns; a bias gradient of our
    b (its column sums over k) is cuBLAS's ``BGRADA``, of our a (row sums over k) ``BGRADB``."""
    if bias:
        return BIAS
    return {None: DEFAULT, "b": BGRADA, "a": BGRADB}[grad_of]


def run_plan(p: dict[str, Any], a: np.ndarray, b: np.ndarray, epilogue: int,
             bias: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:  # fmt: skip
    """Execute ``p`` (a 2-D ``cublas.plan``) with ``epilogue`` in NumPy, as cuBLASLt documents
    it in column-major terms: returns (C, the bias gradient or None). Tests only."""
    out = cublas.run_plan(p, a, b)  # row-major (m_ours, n_ours) = column-major D (m, n)
    item = a.dtype.itemsize

    def op(x: np.ndarray, trans: int, rows: int, cols: int, ld: int) -> np.ndarray:
        r, c = (cols, rows) if trans == cublas.OP_T else (rows, cols)  # as stored
        view = np.lib.stride_tricks.as_strided(x, shape=(r, c), strides=(item, ld * item))
        return view.T if trans == cublas.OP_T else view  # op(X): (rows, cols)

    A = op(b, p["transa"], p["m"], p["k"], p["lda"])  # cuBLAS's A is our b: (m, k)
    B = op(a, p["transb"], p["k"], p["n"], p["ldb"])  # its B our a: (k, n)
    if epilogue == BIAS:  # one bias per row of D (m), over its columns
        return out + bias[None, :], None  # D's rows are our columns
    if epilogue == BGRADA:
        return out, A.sum(axis=1)  # (m,): over k
    if epilogue == BGRADB:
        return out, B.sum(axis=0)  # (n,): over k
    return out, None


# ----------------------------------------------------------------------------- cuBLASLt


class _Heuristic(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace", ctypes.c_size_t),
                ("state", ctypes.c_int), ("waves", ctypes.c_float),
                ("reserved", ctypes.c_int * 4)]  # fmt: skip


class _Library:
    """libcublasLt (the copy CuPy's libcublas loaded), with the prototypes used here."""

    def __init__(self) -> None:
        import cupy_backends.cuda.libs.cublas  # noqa: F401 - loads libcublas and libcublasLt

        self.lib = L = cublas.load_library("libcublasLt")
        vp, i, u64, i64, sz = (ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64,
                               ctypes.c_int64, ctypes.c_size_t)  # fmt: skip
        protos = {
            "cublasLtCreate": [ctypes.POINTER(vp)],
            "cublasLtMatmulDescCreate": [ctypes.POINTER(vp), i, i],
            "cublasLtMatmulDescSetAttribute": [vp, i, vp, sz],
            "cublasLtMatrixLayoutCreate": [ctypes.POINTER(vp), i, u64, u64, i64],
            "cublasLtMatmulPreferenceCreate": [ctypes.POINTER(vp)],
            "cublasLtMatmulPreferenceSetAttribute": [vp, i, vp, sz],
            "cublasLtMatmulAlgoGetHeuristic": [vp, vp, vp, vp, vp, vp, vp, i,
                                               ctypes.POINTER(_Heuristic), ctypes.POINTER(i)],
            "cublasLtMatmul": [vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, vp, sz, vp],
        }  # fmt: skip
        for name, args in protos.items():
            getattr(L, name).argtypes = args
            getattr(L, name).restype = i
        self.handles: dict[int, ctypes.c_void_p] = {}
        # (device, dtype, epilogue, shapes, strides, alignments) -> (desc, layouts, algo), or
        # None: not offered. Made once per key; a product seen before costs one lookup.
        self.plans: dict[tuple, Any] = {}
        c32, c64 = ctypes.c_float, ctypes.c_double
        self.scalars = {dt: (c32(1), c32(0)) if dt.itemsize == 4 else (c64(1), c64(0))
                        for dt in _TYPES}  # fmt: skip


_LIB: _Library | None = None
_UNSEEN = object()  # a key not in _Library.plans yet (None there means: no algorithm)


def _ok(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"cuBLASLt: {what} returned status {status}")


def _align(ptr: int) -> int:
    """The largest power of two up to 256 dividing ``ptr`` (what an algorithm may assume)."""
    return min(256, ptr & -ptr) if ptr else 256


def _set(setter: Any, obj: Any, attr: int, value: Any) -> None:
    _ok(setter(obj, attr, ctypes.byref(value), ctypes.sizeof(value)), f"set attribute {attr}")


def _make_plan(lib: _Library, handle: Any, p: dict, dt: np.dtype, epilogue: int,
               aligns: tuple[int, ...], bias_ptr: int) -> Any:  # fmt: skip
    """Descriptors and the heuristic's algorithm for one product, or None when cuBLASLt
    offers none (the caller then takes the separate launches)."""
    L, vp = lib.lib, ctypes.c_void_p
    data_type, compute = _TYPES[dt]
    desc = vp()
    _ok(L.cublasLtMatmulDescCreate(ctypes.byref(desc), compute, data_type), "MatmulDescCreate")
    s = L.cublasLtMatmulDescSetAttribute
    _set(s, desc, _TRANSA, ctypes.c_int32(p["transa"]))
    _set(s, desc, _TRANSB, ctypes.c_int32(p["transb"]))
    _set(s, desc, _EPILOGUE, ctypes.c_uint32(epilogue))
    if epilogue != DEFAULT:
        _set(s, desc, _BIAS_POINTER, ctypes.c_void_p(bias_ptr))  # its alignment counts
    stored = lambda t, r, c: (c, r) if t == cublas.OP_T else (r, c)  # noqa: E731
    shapes = (
        (*stored(p["transa"], p["m"], p["k"]), p["lda"]),
        (*stored(p["transb"], p["k"], p["n"]), p["ldb"]),
        (p["m"], p["n"], p["ldc"]),
    )
    layouts = []
    for rows, cols, ld in shapes:
        lay = vp()
        _ok(L.cublasLtMatrixLayoutCreate(ctypes.byref(lay), data_type, rows, cols, ld), "Layout")
        layouts.append(lay)
    pref = vp()
    _ok(L.cublasLtMatmulPreferenceCreate(ctypes.byref(pref)), "PreferenceCreate")
    ps = L.cublasLtMatmulPreferenceSetAttribute
    _set(ps, pref, _MAX_WORKSPACE, ctypes.c_uint64(cublas.WORKSPACE_BYTES))
    for attr, align in zip(_MIN_ALIGN, aligns, strict=True):
        _set(ps, pref, attr, ctypes.c_uint32(align))
    result, found = _Heuristic(), ctypes.c_int(0)
    la, lb, lc = layouts
    status = L.cublasLtMatmulAlgoGetHeuristic(
        handle, desc, la, lb, lc, lc, pref, 1, ctypes.byref(result), ctypes.byref(found)
    )
    if status != 0 or found.value < 1 or result.state != 0:
        return None
    return desc, la, lb, lc, result


def matmul(a: Any, b: Any, epilogue: int, bias: Any = None, out: Any = None, cp: Any = None) -> Any:
    """a @ b (2-D CuPy arrays of one float dtype) in one cuBLASLt call with ``epilogue``:
    ``BIAS`` adds ``bias`` (n,) to every row; ``BGRADA`` / ``BGRADB`` write b's column sums
    (n,) / a's row sums (m,) into ``bias`` (C-contiguous, a's dtype). ``out``: a C-contiguous
    (m, n) array to write into, else a new one. Returns the product, or None when cuBLASLt
    offers no algorithm here (or the operands are not 2-D float32/float64 cuBLAS layouts)."""
    dt = a.dtype
    if a.ndim != 2 or b.ndim != 2 or dt != b.dtype or dt not in _TYPES:
        return None
    a_shape, a_strides, b_shape, b_strides = a.shape, a.strides, b.shape, b.strides
    p = cublas.plan_in_bytes(a_shape, a_strides, b_shape, b_strides, dt.itemsize)  # remembered
    if not isinstance(p, dict):
        return None
    if cp is None:
        import cupy as cp
    global _LIB
    if _LIB is None:
        _LIB = _Library()
    lib = _LIB
    dev = cp.cuda.runtime.getDevice()
    handle = lib.handles.get(dev)
    if handle is None:
        handle = lib.handles[dev] = ctypes.c_void_p()
        _ok(lib.lib.cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
    if out is None:
        out = cp.empty(p["out_shape"], dtype=dt)
    bias_ptr = 0 if bias is None else bias.data.ptr
    aligns = (_align(b.data.ptr), _align(a.data.ptr), _align(out.data.ptr), _align(out.data.ptr))
    # the plan is a function of these (p is of the shapes, strides and dtype): one tuple
    key = (dev, dt, epilogue, a_shape, a_strides, b_shape, b_strides, aligns, _align(bias_ptr))
    plan = lib.plans.get(key, _UNSEEN)
    if plan is _UNSEEN:
        plan = lib.plans[key] = _make_plan(lib, handle, p, dt, epilogue, aligns, bias_ptr)
    if plan is None:
        return None
    desc, la, lb, lc, result = plan
    if epilogue != DEFAULT:
        _set(lib.lib.cublasLtMatmulDescSetAttribute, desc, _BIAS_POINTER,
             ctypes.c_void_p(bias_ptr))  # fmt: skip
    workspace = cublas.workspace(cp)
    one, zero = lib.scalars[dt]
    status = lib.lib.cublasLtMatmul(
        handle,
        desc,
        ctypes.byref(one),
        b.data.ptr,
        la,
        a.data.ptr,
        lb,
        ctypes.byref(zero),
        out.data.ptr,
        lc,
        out.data.ptr,
        lc,
        ctypes.byref(result.algo),
        workspace.data.ptr,
        workspace.nbytes,
        cp.cuda.get_current_stream().ptr,
    )
    _ok(status, "cublasLtMatmul")
    return out
