"""Arrays of any backend: their namespace, dtypes, creation, moves, and scatter-add.

Everything above the backend asks for the *namespace* of its input arrays
(``namespace(x)``) and calls the array-API functions on it (``xp.exp``, ``xp.matmul``,
...), so the same model code runs on NumPy, CuPy and the strict stand-in.

- NumPy (>= 2.1 is array-API compliant): NumPy's own functions, in a copy of its namespace
  whose ``matmul`` is ``host.matmul`` (NumPy's product, with the host's BLAS-thread policy
  once the CLI has tuned the host: the one place that policy applies, to every product),
  and whose ``reshape`` and ``sum`` reach NumPy's method and ufunc reduction in one Python
  call (``numpy.reshape`` and ``numpy.sum`` take three or four to get there; a training
  step calls them ~300 times).
- CuPy: ``array_api_compat.cupy``.
- the strict stand-in: ``array_api_strict``.

A faster tier (``minitransformer/fast``, above the ops) may install a leaner namespace of
the same functions for a library (``install_namespace``: CuPy's, on a GPU), and is told
when CuPy is first used (``on_first_use``). The backend itself reads no switch and imports
nothing above it.

Values enter the library here: ``asarray`` makes an array on a device, ``check_dtype`` and
``numeric_data`` validate what a user hands to ``mt.tensor`` (once, where it enters).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import host
from ..checks import short
from ..errors import DeviceError, DTypeError, ShapeError
from . import devices
from .devices import (
    cupy_module,
    device_of,
    library_of,
    native_device,
    normalize_device,
    strict_module,
)

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


def _sum(x: Any, /, *, axis: Any = None, dtype: Any = None, keepdims: bool = False) -> Any:
    """``numpy.sum``: ``add.reduce`` (what numpy.sum runs for an ndarray) in one call."""
    if type(x) is np.ndarray:
        return np.add.reduce(x, axis=axis, dtype=dtype, keepdims=keepdims)
    return np.sum(x, axis=axis, dtype=dtype, keepdims=keepdims)


def numpy_namespace() -> Any:
    """NumPy's namespace as the ops get it: NumPy's functions, ``matmul`` with the host's
    thread policy (``host.matmul``), ``reshape`` and ``sum`` in one call. A new module
    object: NumPy itself is not modified. Older NumPy (< 2.1) goes through
    ``array_api_compat``'s wrappers."""
    if np.lib.NumpyVersion(np.__version__) < "2.1.0":
        import array_api_compat.numpy

        return array_api_compat.numpy
    ns = types.ModuleType("numpy", np.__doc__)
    ns.__dict__.update(
        {k: v for k, v in vars(np).items() if k not in ("__getattr__", "__dir__", "__spec__")}
    )
    ns.matmul, ns.reshape, ns.sum = host.matmul, _reshape, _sum
    ns.__getattr__ = lambda name: getattr(np, name)  # names NumPy makes lazily (PEP 562)
    return ns


_numpy_ns: Any = numpy_namespace()  # what namespace() gives for NumPy arrays
_cupy_ns: Any = None  # CuPy's, chosen when CuPy is first used
_first_use: list[Callable[[Any], Any]] = []  # told when CuPy is first used (on_first_use)


def install_namespace(library: str, ns: Any | None) -> Any:
    """Serve ``ns`` as the namespace of ``library`` ("numpy" or "cupy") from now on; None:
    the plain one again (for CuPy: chosen anew at its next use). Returns the namespace it
    replaces. The fast tier installs its leaner namespaces (the same functions) this way."""
    global _numpy_ns, _cupy_ns
    if library == "numpy":
        old, _numpy_ns = _numpy_ns, ns if ns is not None else numpy_namespace()
        return old
    if library == "cupy":
        old, _cupy_ns = _cupy_ns, ns
        return old
    raise ValueError(f"install_namespace: library must be 'numpy' or 'cupy', got {library!r}")


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
            import array_api_compat.cupy as chosen
        _cupy_ns = chosen
    return _cupy_ns


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


# ----------------------------------------------------------------------------- dtypes


def resolve_dtype(xp: Any, dtype: Any) -> Any:
    """A dtype of namespace ``xp`` from a name ("float32") or a dtype object."""
    if dtype is None:
        return None
    if isinstance(dtype, str):
        return getattr(xp, dtype)
    if xp is np or getattr(xp, "__name__", "").endswith("numpy"):
        return np.dtype(dtype)
    name = getattr(dtype, "name", None) or str(dtype)
    return getattr(xp, name.split(".")[-1])


# (type, dtype) -> name: NumPy computes .name in Python; the type keeps dtypes of two
# libraries that hash alike (NumPy's and array-api-strict's float32) from being compared
_dtype_names: dict[Any, str] = {}


def dtype_name(dtype: Any) -> str:
    """'float32', 'int64', ... for the dtype of any backend."""
    key = (type(dtype), dtype)
    try:
        return _dtype_names[key]
    except (KeyError, TypeError):  # first sight of this dtype, or an unhashable one
        pass
    name = getattr(dtype, "name", None)
    if not isinstance(name, str):
        name = str(dtype).split(".")[-1].rstrip("'>")
    try:
        _dtype_names[key] = name
    except TypeError:
        pass
    return name


DTYPES = (
    "float16", "float32", "float64", "int8", "int16", "int32", "int64",
    "uint8", "uint16", "uint32", "uint64", "bool",
)  # fmt: skip


def check_dtype(where: str, dtype: Any) -> None:
    """A dtype name or object this library can hold (``DTYPES``), else DTypeError naming
    the choices."""
    if isinstance(dtype, str):
        name = dtype
    elif isinstance(dtype, type):  # float, np.float32, ...
        try:
            name = np.dtype(dtype).name
        except TypeError:
            name = None
    else:  # a dtype object of any backend
        name = dtype_name(dtype)
    if name not in DTYPES:
        raise DTypeError(
            f"{where}: dtype {dtype!r} is not a numeric dtype this library handles; use one of "
            f"{', '.join(DTYPES)} (float32 to train, float64 for gradient checks)"
        )


# ----------------------------------------------------------------------------- creation and moves


# what to do with data of each kind of dtype this library does not compute with
_NOT_NUMBERS_FIX = {
    "c": "complex numbers are not supported; pass the real part or the magnitude, e.g. "
    "np.real(z) or np.abs(z)",
    "U": "convert strings to ids with the task's vocabulary, e.g. vocab.tokenize(text)",
    "M": "convert dates and times to numbers first, e.g. x.astype('int64')",
    "V": "pass one numeric field of the record array, e.g. x['value']",
}
_OTHER_FIX = (
    "pass a number, nested lists of numbers, or an array of one of the dtypes " + ", ".join(DTYPES)
)


def _not_numbers(where: str, data: Any, name: str, kind: str) -> DTypeError:
    """The DTypeError for data that is not real numbers, naming the dtype and the fix."""
    fix = _NOT_NUMBERS_FIX.get({"S": "U", "m": "M"}.get(kind, kind), _OTHER_FIX)
    return DTypeError(
        f"{where}: data must be numbers (real floats, ints or bools), got "
        f"{type(data).__name__} {short(data, 40)} of dtype {name}; {fix}"
    )


def numeric_data(where: str, data: Any) -> Array:
    """``data`` as an array of real numbers, checked where it enters (``mt.tensor``,
    ``Tensor``): an array of any backend is returned as it is when its dtype is one of
    ``DTYPES``; Python numbers and nested lists become a NumPy array (``host_numbers``).
    Complex, object, string, date and record data get a DTypeError naming the dtype and
    the fix; ragged lists a ShapeError."""
    if not is_array(data):
        return host_numbers(where, data)
    name = dtype_name(data.dtype)
    if name not in DTYPES:
        kind = "c" if name.startswith("complex") else getattr(data.dtype, "kind", "O")
        raise _not_numbers(where, data, name, kind)
    return data


def host_numbers(where: str, data: Any) -> np.ndarray:
    """Python numbers / nested lists (or NumPy scalars) as a NumPy array of real numbers,
    else DTypeError (complex, strings, None, objects) or ShapeError (ragged lists)."""
    try:
        array = np.asarray(data)
    except ValueError:
        raise ShapeError(
            f"{where}: the nested lists are ragged (rows of different lengths); pad them to "
            "one length first (the padding id for token ids)"
        ) from None
    if array.dtype.name not in DTYPES:  # complex, str, object (None, ...), float128, dates
        raise _not_numbers(where, data, array.dtype.name, array.dtype.kind)
    return array


def host_array_with_default_dtype(data: Any) -> tuple[np.ndarray, str | None]:
    """Python data as a NumPy array plus PyTorch's default dtype for it (float32 for
    floats, int64 for integers, bool for booleans)."""
    probe = np.asarray(data)
    return probe, {"f": "float32", "i": "int64", "u": "int64", "b": "bool"}.get(probe.dtype.kind)


def asarray(data: Any, dtype: Any = None, device: str | None = None) -> Array:
    """Make an array of ``data`` on ``device`` (default: the default device)."""
    if device is None:  # nothing to normalize: the default device (a normalized name)
        return _asarray_on(data, dtype, devices.get_default_device())
    return _asarray_on(data, dtype, normalize_device(device))


def _asarray_on(data: Any, dtype: Any, device: str) -> Array:
    """``asarray`` on a normalized device name."""
    xp = _namespace_on(device)
    dt = resolve_dtype(xp, dtype)
    if is_array(data) and not isinstance(data, np.ndarray) and device_of(data) != device:
        data = to_numpy(data)  # across backends/devices, go through the host
    if device == "cpu":
        return np.asarray(data, dtype=dt)
    if device.startswith("cuda"):
        cp = cupy_module()
        with cp.cuda.Device(int(device.split(":")[1])):
            return cp.asarray(data, dtype=dt)
    if not is_array(data):
        data = np.asarray(data)
        if dt is None:
            dt = resolve_dtype(xp, data.dtype.name)
    return xp.asarray(data, dtype=dt, device=native_device(device))


def to_numpy(x: Array) -> np.ndarray:
    """Copy (or view, for NumPy) an array of any backend into a NumPy array on the host."""
    library = library_of(x)
    if library == "numpy":
        return np.asarray(x)
    if library == "cupy":
        return x.get()
    if library == "strict":
        xs = strict_module()
        return np.asarray(x.to_device(xs.Device("CPU_DEVICE")))
    raise DeviceError(f"cannot convert {type(x).__name__} to NumPy")


def to_device(x: Array, device: str) -> Array:
    """Move an array to ``device`` (a no-op when it is already there)."""
    return move(x, normalize_device(device))


def move(x: Array, device: str) -> Array:
    """``to_device`` for a device name ``normalize_device`` already gave (``Module.to`` and
    ``Optimizer.to`` normalize once, then move every array)."""
    if device_of(x) == device:
        return x
    return _asarray_on(to_numpy(x), None, device)


# ----------------------------------------------------------------------------- beyond the standard


def all_finite(x: Array) -> bool:
    """True when ``x`` holds no NaN or Inf (integer and bool arrays always do). Reads one
    bool back to the host: a device sync on a GPU, so never inside a training step."""
    if not dtype_name(x.dtype).startswith("float"):
        return True
    xp = namespace(x)
    return bool(xp.all(xp.isfinite(x)))


def scatter_add(table: Array, ids: Array, values: Array) -> Array:
    """table[ids[i]] += values[i] for every i, *repeats included*, in place; returns table.

    Shapes: table (V, D), ids (N,) int, values (N, D). This is the embedding gradient.
    NumPy sorts the ids and sums each run of equal ids with ``add.reduceat`` (much faster
    than ``np.add.at``). CuPy and the strict stand-in use the dense form
    ``one_hot(ids).T @ values`` (N x V floats for a moment, one matrix product): on a GPU it
    is deterministic, where ``cupyx.scatter_add`` (atomic adds, in no fixed order) gives
    other bits from run to run, and a resumed run would not repeat the one it continues.
    """
    if isinstance(table, np.ndarray):
        if ids.size == 0:
            return table
        order = np.argsort(ids, kind="stable")
        sorted_ids = ids[order]
        starts = np.flatnonzero(np.r_[True, sorted_ids[1:] != sorted_ids[:-1]])
        table[sorted_ids[starts]] += np.add.reduceat(values[order], starts, axis=0)
        return table
    xp = namespace(table)
    one_hot = xp.astype(
        ids[:, None] == xp.arange(table.shape[0], device=table.device)[None, :], values.dtype
    )  # (N, V)
    table += xp.matmul(one_hot.mT, values)
    return table
