"""Device names and the array libraries behind them.

Devices are plain strings:

- ``"cpu"``              NumPy arrays.
- ``"cuda"``, ``"cuda:N"`` CuPy arrays on GPU N (CuPy is imported only when asked for);
  ``"gpu"`` is accepted for ``"cuda"`` (an error about it names it as written).
- ``"strict:NAME"``      arrays of ``array_api_strict`` on its fake device NAME
  (``CPU_DEVICE``, ``device1``, ``device2``). The tests use this as a stand-in for a GPU:
  it allows only the standard API and refuses to mix devices, so code that silently falls
  back to NumPy or forgets a ``device=`` fails there the way it would fail on CuPy.

This module turns what a user writes into one of these names (``normalize_device``: once,
where a device enters; inside the backend names are passed on as they are), tells the array
library of an array (``library_of``, the one way the library does so) and its device
(``device_of``), imports CuPy and array-api-strict on first use with
one clear sentence when they cannot work (``check_device``: all of it at once, where a
command takes its ``--device``), and waits for a GPU (``synchronize``).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np

from ..errors import DeviceError, install_hint

_default_device = "cpu"
ALIASES = {"gpu": "cuda"}
"""Other names a device is accepted by: a message about one names it as written."""


def set_default_device(device: str) -> None:
    """Set the device that creation functions use when none is given (CLI ``--device``)."""
    global _default_device
    _default_device = normalize_device(device)


def get_default_device() -> str:
    """The device creation functions use when none is given (``"cpu"`` unless set)."""
    return _default_device


def normalize_device(device: Any) -> str:
    """Turn "cpu" / "cuda" / "cuda:1" / "strict:device1" / a strict Device into a name."""
    if device is None:
        return _default_device
    if not isinstance(device, str):
        return device_of_array_device(device)
    name = device.strip()
    if name == "cpu":
        return "cpu"
    if name == "cuda" or name in ALIASES:
        return "cuda:0"
    if name.startswith("cuda:") and name[5:].isdigit():
        return name
    if name == "strict":
        return "strict:CPU_DEVICE"
    if name.startswith("strict:"):
        return name
    guess = _close_name(name)
    raise DeviceError(
        f"unknown device {device!r}: "
        + (f"did you mean {guess}? Use" if guess else "use")
        + " cpu, cuda (the first GPU) or cuda:N (GPU number N, from 0)"
    )


def _close_name(name: str) -> str | None:
    """The device a mistyped name most likely meant: another case (``GPU``, ``CPU``), a
    number without its colon (``gpu7``, ``cuda 1``); None when nothing is close."""
    match = re.fullmatch(r"(cpu|cuda|gpu)\s*:?\s*(\d*)", name.lower())
    if match is None:
        return None
    kind, number = match.groups()
    if kind == "cpu":
        return None if number else "cpu"
    return f"cuda:{number}" if number else "cuda"


def device_of_array_device(dev: Any) -> str:
    """Name of a backend's own device object (a strict Device, a cupy Device, 'cpu')."""
    text = repr(dev)
    if "array_api_strict.Device" in text:
        return "strict:" + text.split("'")[1]
    if dev == "cpu":
        return "cpu"
    if hasattr(dev, "id"):  # cupy.cuda.Device
        return f"cuda:{dev.id}"
    raise DeviceError(f"unknown device object {dev!r}")


@functools.cache
def cupy_module(shown: str = "device 'cuda'"):
    """CuPy, imported on first use, with one clear sentence when it cannot work; ``shown``
    names the device in it."""
    try:
        import cupy
    except ImportError:
        raise DeviceError(
            f"{shown} needs CuPy, which is not installed: {install_hint('gpu')} (CUDA 13; "
            f"{install_hint('gpu-cuda12')} for CUDA 12) on a machine with an NVIDIA GPU"
        ) from None
    try:
        available = cupy.cuda.is_available()
    except Exception:  # noqa: BLE001 - any driver problem means "no usable GPU"
        available = False
    if not available:
        raise DeviceError(
            f"{shown} was asked for, but CuPy finds no usable NVIDIA GPU/driver "
            "on this machine: use device='cpu', or run on a machine with a GPU"
        )
    return cupy


def check_device(device: str, flag: str | None = None) -> str:
    """``device`` normalized, and the library behind it imported now, not at the first array
    (CuPy and a GPU for cuda): a DeviceError names the device as it was written, with
    ``flag`` when given (``--device gpu (CUDA) needs CuPy ...``)."""
    name = normalize_device(device)
    written = str(device).strip()
    shown = f"{flag} {written}" if flag else f"device {written!r}"
    if written in ALIASES:
        shown += f" ({ALIASES[written].upper()})"
    if name.startswith("cuda"):
        cupy_module(shown)
    elif name.startswith("strict"):
        strict_module()
    return name


def strict_module():
    """array_api_strict (the test stand-in for a GPU), or DeviceError saying how to get it."""
    try:
        import array_api_strict
    except ImportError:
        raise DeviceError(
            "device 'strict:...' needs array-api-strict: pip install array-api-strict "
            "(it is in the 'dev' extra)"
        ) from None
    return array_api_strict


def native_device(device: str) -> Any:
    """The backend's own device object for a (normalized) device name."""
    if device == "cpu":
        return "cpu"
    if device.startswith("cuda"):
        return cupy_module().cuda.Device(int(device.split(":")[1]))
    return strict_module().Device(device.split(":", 1)[1])


_LIBRARIES: dict[type, str | None] = {}  # type -> its array library (library_of), once seen


def library_of(x: Any) -> str | None:
    """The array library of ``x``: "numpy" (arrays and NumPy scalars), "cupy", "strict"
    (array_api_strict's arrays and objects), or None. One dictionary lookup once the type has
    been seen: the one place the library tells a backend by its type."""
    kind = type(x)
    try:
        return _LIBRARIES[kind]
    except KeyError:
        pass
    mod = kind.__module__
    if issubclass(kind, np.ndarray | np.generic):
        library = "numpy"
    elif mod == "cupy" or mod.startswith("cupy."):
        library = "cupy"
    elif mod.startswith("array_api_strict"):
        library = "strict"
    else:
        library = None
    _LIBRARIES[kind] = library
    return library


def device_of(x: Any) -> str:
    """The device name of an array ("cpu", "cuda:0", "strict:device1")."""
    library = library_of(x)
    if library == "numpy":
        return "cpu"
    if library == "cupy":
        return f"cuda:{x.device.id}"
    if library == "strict":
        return device_of_array_device(x.device)
    raise DeviceError(f"not an array of a supported backend: {type(x).__name__}")


def cuda_available() -> bool:
    """True when CuPy is installed and sees a GPU (never raises)."""
    try:
        cupy_module()
        return True
    except DeviceError:
        return False


def make_current(device: str) -> None:
    """Make GPU ``device`` ("cuda:N") this process's current CUDA device; a no-op elsewhere.

    CuPy allocates and launches on the *current* device, and the fused kernels launch where
    the current device is, not where their arrays are: a model placed on ``cuda:1``
    (``Module.to``) makes ``cuda:1`` current, so its kernels run beside its memory."""
    device = normalize_device(device)
    if device.startswith("cuda"):
        native_device(device).use()


def synchronize(device: str) -> None:
    """Wait for queued GPU work (for honest timings); a no-op on the CPU."""
    device = normalize_device(device)
    if device.startswith("cuda"):
        cupy_module().cuda.Device(int(device.split(":")[1])).synchronize()
