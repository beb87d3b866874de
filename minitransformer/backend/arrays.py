"""Arrays of any backend: dtypes, creation, moves, and scatter-add.

Values enter the library here: ``asarray`` makes an array on a device, ``check_dtype`` and
``numeric_data`` validate what a user hands to ``mt.tensor`` (once, where it enters). The
namespace of an array (``xp``) is ``namespaces.py``'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

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
from .namespaces import Array, _namespace_on, is_array, namespace

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


def is_float_dtype(dtype: Any) -> bool:
    """True for a real floating dtype of any backend."""
    return dtype_name(dtype).startswith("float")


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
