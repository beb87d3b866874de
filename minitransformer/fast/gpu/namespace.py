"""The lean CuPy namespace: CuPy's own functions, plus a small shim for the array-API names
CuPy 14 lacks or spells differently. Used on a GPU unless ``MT_CUDA_KERNELS=0``; there
``fast/__init__.py`` serves ``matmul`` and ``tensordot`` from ``fast/gpu/cublas.py`` instead
(cuBLAS called directly: CuPy's own products are refused inside a CUDA graph capture).

Why: ``array_api_compat.cupy`` wraps many functions (``zeros`` is four Python calls: the
``get_xp`` wrapper, the alias, its device check, then CuPy), and on a GPU every Python call
is time the GPU waits for its next launch. Here a name is CuPy's own object wherever CuPy 14
already matches the array API, and a one-call shim where it does not, so a CuPy call is one
Python call (two through a shim). Like the backend's NumPy namespace
(``backend/namespaces.py``), it is a copy of CuPy's module dict; CuPy itself is not modified.

Compared name by name with ``array_api_compat.cupy`` 1.16 against CuPy 14.2 (introspected
without a GPU):

- shimmed here, as compat does, with ``device=`` accepted and checked (None: the current
  GPU; a ``cupy.cuda.Device``: made on that GPU, under ``with device``; anything else:
  ValueError; compat accepts and ignores any device for CuPy): ``arange``, ``empty``,
  ``empty_like``, ``eye`` (``n_cols``), ``full``, ``full_like``, ``linspace``, ``ones``,
  ``ones_like``, ``zeros``, ``zeros_like``, ``asarray`` (``copy=`` as well);
- shimmed because CuPy's spelling differs: ``astype`` (``device=``; the ndarray method in
  one call), ``reshape`` (``shape`` and ``copy=``; the ndarray method in one call),
  ``clip`` (keywords ``min=``/``max=``; the result keeps x's dtype), ``take_along_axis``
  (``axis`` defaults to -1);
- missing in CuPy 14, shimmed: ``vecdot`` (``sum(conj(x1) * x2, axis)``, compat: a
  batched matmul), ``unstack``, ``linalg.vector_norm`` (in a copy of ``cupy.linalg``;
  ``linalg.matrix_transpose`` / ``vecdot`` / ``matmul`` / ``tensordot`` added there too);
- CuPy 14's own, checked to match: ``concat`` (= ``concatenate``, ``axis=None``
  flattens), ``permute_dims``, ``matrix_transpose``, ``isdtype`` (NumPy's, CuPy dtypes are
  NumPy dtypes), ``bool``, ``acos``... ``atanh``, ``atan2``, ``pow``, ``bitwise_*``,
  ``expand_dims``, ``stack``, ``broadcast_to``, ``take``, ``where``, ``matmul``,
  ``tensordot`` (compat passes ``axes=`` through to it), ``sum``,
  ``mean``, ``max``, ``min``, ``minimum``, ``argmax``, ``all``, ``any``, ``flip``
  (``axis=``), ``unique_*`` (namedtuples in CuPy 14), ``cumulative_sum``,
  ``cumulative_prod``, ``repeat`` (an int ``repeats`` and ``axis=``, as ``ops/projections.py``
  calls it; compat passes CuPy's own through); arrays have ``.mT`` and ``.device``;
- left as CuPy's, differing from compat, and not called by this library (see the test that
  greps ``xp.NAME``): ``sign`` (CuPy does not propagate NaN), ``ceil``/``floor``/``trunc``
  (float results for integer input), ``count_nonzero`` (no ``keepdims``), ``std``/``var``
  (no ``correction=``), ``sort``/``argsort`` (no ``descending``/``stable``), ``finfo``/
  ``iinfo`` of an array, ``__array_namespace_info__`` (absent), ``ndarray.to_device``
  (absent).

Floors: imports nothing but the standard library; CuPy is passed in (``lean_namespace(cupy)``),
so this module imports without CuPy and the tests run it on a stand-in.
"""

from __future__ import annotations

import types
from typing import Any

# ----------------------------------------------------------------------------- the shim


def _on(cp: Any, device: Any) -> Any:
    """The ``with`` block for ``device``: None is the current GPU, a ``cupy.cuda.Device``
    that GPU; anything else (a string such as "cpu", a strict Device) is a ValueError."""
    if device is None or isinstance(device, cp.cuda.Device):
        return device if device is not None else _NO_DEVICE
    raise ValueError(
        f"unsupported device for CuPy: {device!r}; pass a cupy.cuda.Device (for example "
        "x.device) or None for the current GPU"
    )


class _Current:
    """``with _NO_DEVICE:`` does nothing (stays on the current GPU)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NO_DEVICE = _Current()


def _make_shim(cp: Any) -> dict[str, Any]:
    """The shim functions, closing over the CuPy module ``cp``."""

    def arange(start, /, stop=None, step=1, *, dtype=None, device=None):
        if device is None:
            return cp.arange(start, stop, step, dtype=dtype)
        with _on(cp, device):
            return cp.arange(start, stop, step, dtype=dtype)

    def empty(shape, *, dtype=None, device=None):
        if device is None:
            return cp.empty(shape, dtype=dtype)
        with _on(cp, device):
            return cp.empty(shape, dtype=dtype)

    def zeros(shape, *, dtype=None, device=None):
        if device is None:
            return cp.zeros(shape, dtype=dtype)
        with _on(cp, device):
            return cp.zeros(shape, dtype=dtype)

    def ones(shape, *, dtype=None, device=None):
        if device is None:
            return cp.ones(shape, dtype=dtype)
        with _on(cp, device):
            return cp.ones(shape, dtype=dtype)

    def full(shape, fill_value, *, dtype=None, device=None):
        if device is None:
            return cp.full(shape, fill_value, dtype=dtype)
        with _on(cp, device):
            return cp.full(shape, fill_value, dtype=dtype)

    def eye(n_rows, n_cols=None, /, *, k=0, dtype=None, device=None):
        with _on(cp, device):
            return cp.eye(n_rows, n_cols, k=k, dtype=dtype)

    def linspace(start, stop, /, num, *, dtype=None, device=None, endpoint=True):
        with _on(cp, device):
            return cp.linspace(start, stop, num, dtype=dtype, endpoint=endpoint)

    def empty_like(x, /, *, dtype=None, device=None):
        if device is None:
            return cp.empty_like(x, dtype=dtype)
        with _on(cp, device):
            return cp.empty_like(x, dtype=dtype)

    def zeros_like(x, /, *, dtype=None, device=None):
        if device is None:
            return cp.zeros_like(x, dtype=dtype)
        with _on(cp, device):
            return cp.zeros_like(x, dtype=dtype)

    def ones_like(x, /, *, dtype=None, device=None):
        if device is None:
            return cp.ones_like(x, dtype=dtype)
        with _on(cp, device):
            return cp.ones_like(x, dtype=dtype)

    def full_like(x, /, fill_value, *, dtype=None, device=None):
        if device is None:
            return cp.full_like(x, fill_value, dtype=dtype)
        with _on(cp, device):
            return cp.full_like(x, fill_value, dtype=dtype)

    def asarray(obj, /, *, dtype=None, device=None, copy=None):
        with _on(cp, device):
            if copy is None:
                return cp.asarray(obj, dtype=dtype)
            out = cp.array(obj, dtype=dtype, copy=copy)
            if copy is False and out is not obj:
                raise ValueError("asarray: copy=False, but the data must be copied")
            return out

    def astype(x, dtype, /, *, copy=True, device=None):
        if device is None:
            return x.astype(dtype, copy=copy)
        with _on(cp, device):  # a copy onto that GPU
            return cp.array(x, dtype=dtype, copy=True)

    def reshape(x, /, shape, *, copy=None):
        if copy is None:
            return x.reshape(shape)
        if copy:
            return x.copy().reshape(shape)
        y = x.view()
        y.shape = shape  # raises when a view cannot have this shape
        return y

    def clip(x, /, min=None, max=None):
        if min is None and max is None:
            return x.copy()
        y = x.clip(min, max)
        return y if y.dtype == x.dtype else y.astype(x.dtype)

    def take_along_axis(x, indices, /, *, axis=-1):
        return cp.take_along_axis(x, indices, axis)

    def vecdot(x1, x2, /, *, axis=-1):
        if x1.shape[axis] != x2.shape[axis]:
            raise ValueError("vecdot: x1 and x2 must have the same size along the given axis")
        if x1.dtype.kind == "c":
            x1 = cp.conj(x1)
        return cp.sum(x1 * x2, axis=axis)

    def unstack(x, /, *, axis=0):
        if x.ndim == 0:
            raise ValueError("unstack: the input array must be at least 1-d")
        return tuple(cp.moveaxis(x, axis, 0))

    def vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
        # cupy.linalg.norm takes a 2-tuple axis (or a 2-D x with axis=None) as a MATRIX
        # norm: as compat does, the axes are first made one (ravel, or move and reshape)
        if axis is not None and not isinstance(axis, tuple):
            return cp.linalg.norm(x, ord=ord, axis=axis, keepdims=keepdims)
        if axis is None:
            axes = tuple(range(x.ndim))
            flat = x.ravel()
        else:
            axes = tuple(sorted(a % x.ndim for a in axis))
            rest = tuple(i for i in range(x.ndim) if i not in axes)
            n = 1
            for a in axes:
                n *= x.shape[a]
            flat = cp.reshape(cp.transpose(x, axes + rest), (n, *(x.shape[i] for i in rest)))
        out = cp.linalg.norm(flat, ord=ord, axis=0)
        if keepdims:
            out = out.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))
        return out

    return {k: v for k, v in locals().items() if k != "cp"}


# names served from the shim (the rest are CuPy's own objects)
SHIMMED = (
    "arange", "empty", "zeros", "ones", "full", "eye", "linspace", "empty_like",
    "zeros_like", "ones_like", "full_like", "asarray", "astype", "reshape", "clip",
    "take_along_axis", "vecdot", "unstack",
)  # fmt: skip


LINALG_SHIMMED = ("vector_norm", "vecdot")

# the array-API names this library calls (tests/fast/test_cupy_namespace.py greps them)
# that CuPy 14.2 serves as the standard spells them: checked one by one against the
# standard and array_api_compat.cupy (see the module doc); a new name goes here only so
CUPY_OWN = (
    "where", "matmul", "sum", "exp", "log", "sqrt", "sin", "cos", "tanh", "abs", "hypot",
    "maximum", "minimum", "isfinite", "isnan", "concat", "take", "stack", "permute_dims",
    "expand_dims", "broadcast_to", "max", "min", "mean", "argmax", "all", "any", "isdtype",
    "matrix_transpose", "tensordot", "cumulative_sum", "flip", "repeat",
    "bool", "float16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64",
)  # fmt: skip


def lean_namespace(cp: Any) -> types.ModuleType:
    """CuPy's namespace (a copy of its module dict) with the shim's names (``SHIMMED``) and
    a ``linalg`` that has ``vector_norm``. ``cp`` is the CuPy module (a stand-in in tests)."""
    shim = _make_shim(cp)
    ns = types.ModuleType("cupy", getattr(cp, "__doc__", None))
    ns.__dict__.update(
        {k: v for k, v in vars(cp).items() if k not in ("__getattr__", "__dir__", "__spec__")}
    )
    ns.__dict__.update({name: shim[name] for name in SHIMMED})
    linalg = types.ModuleType("cupy.linalg")
    linalg.__dict__.update(
        {k: v for k, v in vars(cp.linalg).items() if k not in ("__getattr__", "__spec__")}
    )
    linalg.vector_norm = shim["vector_norm"]
    linalg.vecdot = shim["vecdot"]
    for name in ("matmul", "matrix_transpose", "tensordot"):
        setattr(linalg, name, getattr(ns, name))
    ns.linalg = linalg
    ns.__getattr__ = lambda name: getattr(cp, name)  # lazy attributes (PEP 562)
    return ns
