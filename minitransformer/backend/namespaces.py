"""The array namespace of each library: what ``xp`` is inside every op.

Everything above the backend asks for the *namespace* of its input arrays
(``namespace(x)``) and calls the array-API functions on it (``xp.exp``, ``xp.matmul``,
...), so the same model code runs on NumPy, CuPy and the strict stand-in.

- NumPy (>= 2.1 is array-API compliant): NumPy's own functions, in a copy of its namespace
  whose ``matmul`` and ``tensordot`` are ``host``'s (NumPy's products, a stack of rows
  times one matrix folded into one GEMM, with the host's BLAS-thread policy once the CLI has
  tuned the host: the one place that policy applies, to every product),
  and whose ``reshape`` and ``sum`` reach NumPy's method and ufunc reduction in one Python
  call (``numpy.reshape`` and ``numpy.sum`` take three or four to get there; a training
  step calls them ~300 times).
- CuPy: ``array_api_compat.cupy``, in a copy whose ``matmul`` and ``tensordot`` fold a stack
  of rows times one matrix into one 2-D product (``fold_row_products``): CuPy's own
  ``matmul`` of a (B, T, D) stack by a (D, E) weight takes its broadcast path (pointer
  arrays, a copy of a transposed weight: about 7 more launches a Linear).
- the strict stand-in: ``array_api_strict``.

A faster tier (``minitransformer/fast``, above the ops) is told when CuPy is first used
(``on_first_use``) and may then hand back a leaner namespace of the same functions for it.
The backend itself reads no switch and imports nothing above it.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import DeviceError
from . import host
from .devices import cupy_module, device_of, library_of, normalize_device, strict_module

Array = Any  # an array of any supported backend (numpy.ndarray, cupy.ndarray, strict Array)

# ----------------------------------------------------------------------------- namespaces


def namespace(*arrays: Array) -> Any:
    """The array namespace of the given arrays (NumPy's, CuPy's or array_api_strict)."""
    for x in arrays:
        library = library_of(x)
        if library == "numpy":
            return _numpy_ns
        if library == "cupy":
            return _cupy_namespace()
        if library == "strict":
            return strict_module()
    return _numpy_ns


def _reshape(x: Any, /, shape: tuple[int, ...], *, copy: bool | None = None) -> Any:
    """``numpy.reshape``: the ndarray method in one call (the function for other cases)."""
    if copy is None and type(x) is np.ndarray:
        return x.reshape(shape)
    return np.reshape(x, shape, copy=copy)


def _permute_dims(x: Any, /, axes: tuple[int, ...]) -> Any:
    """``numpy.permute_dims``: the ndarray method in one call (the function for other cases)."""
    if type(x) is np.ndarray:
        return x.transpose(axes)
    return np.permute_dims(x, axes)


def _sum(x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    """``numpy.sum``: ``add.reduce`` (what numpy.sum runs for an ndarray) in one call."""
    if type(x) is np.ndarray:
        return np.add.reduce(x, axis=axis, dtype=dtype, keepdims=keepdims)
    return np.sum(x, axis=axis, dtype=dtype, keepdims=keepdims)


def _numpy_namespace() -> Any:
    """NumPy's namespace as the ops get it: NumPy's functions, ``matmul`` and ``tensordot``
    with the host's thread policy (``host``'s), ``reshape``, ``sum`` and ``permute_dims``
    in one call.
    A new module object: NumPy itself is not modified. Older NumPy (< 2.1) goes through
    ``array_api_compat``'s wrappers."""
    if np.lib.NumpyVersion(np.__version__) < "2.1.0":
        import array_api_compat.numpy

        return array_api_compat.numpy
    ns = types.ModuleType("numpy", np.__doc__)
    ns.__dict__.update(
        {k: v for k, v in vars(np).items() if k not in ("__getattr__", "__dir__", "__spec__")}
    )
    ns.matmul, ns.tensordot = host.matmul, host.tensordot
    ns.reshape, ns.sum, ns.permute_dims = _reshape, _sum, _permute_dims
    ns.__getattr__ = lambda name: getattr(np, name)  # names NumPy makes lazily (PEP 562)
    return ns


_numpy_ns: Any = _numpy_namespace()  # what namespace() gives for NumPy arrays
_cupy_ns: Any = None  # CuPy's, chosen when CuPy is first used
_first_use: list[Callable[[Any], Any]] = []  # told when CuPy is first used (on_first_use)


def on_first_use(hook: Callable[[Any], Any]) -> None:
    """Call ``hook(cupy)`` when CuPy's namespace is next chosen (its first use, or after
    ``reset_cupy_namespace``); a hook may return a namespace to serve instead of
    ``array_api_compat.cupy`` (None: the plain one). The fast tier registers its CUDA
    kernels this way, so nothing imports CuPy before a CuPy array exists."""
    if hook not in _first_use:
        _first_use.append(hook)


def _cupy_namespace() -> Any:
    """CuPy's namespace, chosen once, at its first use: a hook's (``on_first_use``) or
    ``array_api_compat.cupy``. ``reset_cupy_namespace()`` makes the next use choose anew."""
    global _cupy_ns
    if _cupy_ns is None:
        cp = cupy_module()
        chosen = None
        for hook in _first_use:
            chosen = hook(cp) or chosen
        if chosen is None:
            import array_api_compat.cupy as compat_cupy

            chosen = fold_row_products(compat_cupy)
        _cupy_ns = chosen
    return _cupy_ns


def fold_row_products(ns: Any) -> types.ModuleType:
    """A copy of the namespace module ``ns`` (``ns`` itself is not modified) whose ``matmul``
    and ``tensordot`` compute a stack of rows times one matrix as ONE 2-D product, as
    ``host.matmul`` and ``host.tensordot`` do for NumPy:

    - ``matmul(a, b)`` with a (..., n, k) and b (k, m): (rows, k) @ (k, m), reshaped back
      (a stack that is not contiguous is copied once by the reshape);
    - ``tensordot(a, b, axes=(rows, rows))`` over every leading axis of two arrays with
      the same leading shape (a weight's gradient x^T g): (k, rows) @ (rows, m).

    Every other case is ``ns``'s own function. Used for CuPy's plain namespace (the
    kernels off): CuPy's ``matmul`` would broadcast the matrix over the stack."""
    plain_matmul, plain_tensordot = ns.matmul, ns.tensordot

    def matmul(a: Any, b: Any, /) -> Any:
        if b.ndim != 2 or a.ndim <= 2:
            return plain_matmul(a, b)
        k, m = a.shape[-1], b.shape[-1]
        rows = math.prod(a.shape[:-1])
        y = plain_matmul(a.reshape(rows, k), b)  # (rows, m): one GEMM
        return y.reshape(*a.shape[:-1], m)

    def tensordot(a: Any, b: Any, /, *, axes: Any = 2) -> Any:
        if type(axes) is tuple and len(axes) == 2 and a.ndim == b.ndim and a.ndim > 1:
            leading = tuple(range(a.ndim - 1))
            same_rows = a.shape[:-1] == b.shape[:-1]
            if same_rows and axes[0] == leading and axes[1] == leading:
                rows = math.prod(a.shape[:-1])
                a2, b2 = a.reshape(rows, a.shape[-1]), b.reshape(rows, b.shape[-1])
                return plain_matmul(a2.T, b2)  # (k, m): one GEMM over all rows
        return plain_tensordot(a, b, axes=axes)

    folded = types.ModuleType(ns.__name__, getattr(ns, "__doc__", None))
    folded.__dict__.update(
        {k: v for k, v in vars(ns).items() if k not in ("__getattr__", "__dir__", "__spec__")}
    )
    folded.matmul, folded.tensordot = matmul, tensordot
    folded.__getattr__ = lambda name: getattr(ns, name)  # names made lazily (PEP 562)
    return folded


def reset_cupy_namespace() -> None:
    """Choose CuPy's namespace again at its next use (the hooks run again: after changing
    ``MT_CUDA_KERNELS`` in a running process, as the tests do)."""
    global _cupy_ns
    _cupy_ns = None


def common_namespace(op: str, arrays: list) -> Any:
    """The namespace of the arrays among ``arrays`` (an op's inputs: Python numbers and None
    combine with arrays on any device), or DeviceError naming ``op`` and two devices."""
    first = None
    for a in arrays:
        if type(a) is np.ndarray:  # NumPy: the CPU (the common case, checked without calls)
            if first is None:
                first = a
            elif type(first) is not np.ndarray:
                break
            continue
        if not is_array(a):
            continue
        if first is None:
            first = a
        elif type(a) is not type(first) or device_of(a) != device_of(first):
            break
    else:
        if type(first) is np.ndarray:
            return _numpy_ns
        return namespace(first) if first is not None else namespace()
    devices = [device_of(a) for a in arrays if is_array(a)]
    if len(set(devices)) == 1 and len({library_of(a) for a in arrays if is_array(a)}) == 1:
        return namespace(first)  # one library, one device: a subclass (np.memmap) among them
    raise DeviceError(
        f"{op}: inputs are on different devices, {devices[0]} and "
        f"{next(d for d in devices if d != devices[0])}; move them to one device first "
        "with .to(device)"
    )


def namespace_for_device(device: str) -> Any:
    """The namespace that creates arrays on ``device`` (any name ``normalize_device`` takes)."""
    if device == "cpu":  # the common case, already a normalized name
        return _numpy_ns
    return _namespace_on(normalize_device(device))


def _namespace_on(device: str) -> Any:
    """The namespace of a normalized device name."""
    if device == "cpu":
        return _numpy_ns
    if device.startswith("cuda"):
        return _cupy_namespace()  # cupy_module() first: the clear error without CuPy or a GPU
    return strict_module()


def is_array(x: Any) -> bool:
    """True for an array of any supported backend (not Python or NumPy scalars)."""
    if type(x) is np.ndarray:
        return True
    library = library_of(x)
    return library == "cupy" or library == "strict" or isinstance(x, np.ndarray)
