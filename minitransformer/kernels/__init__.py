"""Fast paths beside the reference ops: one module of kernels per array library.

Every op in ``minitransformer/ops`` is first the plain math the lessons teach, written with
array-API calls that run on every backend. Where a faster way to compute the same thing has
been measured for one library, it lives here, in that library's module (``numpy.py`` for
NumPy; ``cupy.py`` for CuPy's fused CUDA kernels), under the name of the reference it
replaces, and a test compares the two. An op asks for it in one visible place::

    fast = kernels.find(x)           # the kernel module for x's array library, or None
    if fast is not None:
        return fast.layer_norm_forward(x, gamma, beta, eps)
    ...                              # the reference math

``find`` is one dictionary lookup (no Python call beyond it), so asking costs nothing
measurable. ``reference_only()`` switches every fast path off for a block: the tests run
each op both ways and compare, and a learner can time the difference.

On a GPU: the fused CUDA kernels (``cupy.py``, sources in ``cuda/*.cu``) and the lean CuPy
namespace (``cupy_namespace.py``) are ON by default; the environment variable
``MT_CUDA_KERNELS=0`` switches them off (``cuda_kernels_enabled``), for the reference ops on
``array_api_compat``'s CuPy namespace. Unset, empty or ``1`` is on; any other value is a
ValueError naming the fix (a typo such as ``MT_CUDA_KERNELS=false`` should not silently run
the other path). The backend calls ``use_cupy(cupy)`` when it first gives out CuPy's
namespace (``backend.arrays``, before any op runs on a CuPy array); it registers ``cupy.py``
for ``cupy.ndarray`` when the switch is on (and unregisters it when off).

Floors: this package imports only NumPy (and, on a GPU, CuPy) and ``host``; the backend,
the autograd core and the ops stand on it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from types import ModuleType

import numpy as np

from . import numpy as numpy_kernels

# array type -> the module of fast paths for it (CuPy's is registered when CuPy is first used)
_BY_TYPE: dict[type, ModuleType] = {np.ndarray: numpy_kernels}


SWITCH = "MT_CUDA_KERNELS"  # the one switch of the GPU kernels (see the module doc)


def cuda_kernels_enabled() -> bool:
    """True unless ``MT_CUDA_KERNELS=0``: CuPy arrays take the fused CUDA kernels and the lean
    CuPy namespace (unset, ``""`` or ``"1"``). ``"0"``: off (the reference ops on
    array_api_compat's CuPy namespace). Read on every call (one dictionary lookup), so a
    test can flip it."""
    value = os.environ.get(SWITCH)
    if value is None or value == "1" or value == "":
        return True
    if value == "0":
        return False
    raise ValueError(
        f"environment variable {SWITCH}={value!r} is not understood: set {SWITCH}=0 to run "
        f"the reference ops on a GPU instead of the fused CUDA kernels, or {SWITCH}=1 (or "
        "unset it) for the fused kernels, the default"
    )


def use_cupy(cupy_module: ModuleType) -> bool:
    """Match the CuPy fast paths to the switch: register ``kernels.cupy`` for
    ``cupy_module.ndarray`` when ``cuda_kernels_enabled()``, remove it otherwise. Returns
    whether it is registered. ``kernels.cupy`` is imported here, on first use (it imports
    CuPy)."""
    array_type = cupy_module.ndarray
    if not cuda_kernels_enabled():
        _BY_TYPE.pop(array_type, None)
        return False
    from . import cupy as cupy_kernels

    register(array_type, cupy_kernels)
    return True


def find(x: object) -> ModuleType | None:
    """The kernel module for ``x``'s array library, or None (use the reference math). A
    module whose kernels take only some dtypes names them in ``DTYPES`` (CuPy's: float32 and
    float64); for an array of another dtype (float16) the op runs its reference math.
    ``DTYPES = None`` (NumPy's): every dtype. Attribute reads only: no call beyond the lookup."""
    fast = _BY_TYPE.get(type(x))
    if fast is None or fast.DTYPES is None or x.dtype in fast.DTYPES:
        return fast
    return None


def register(array_type: type, module: ModuleType) -> None:
    """Use ``module``'s kernels for arrays of ``array_type`` (for example cupy.ndarray).
    The module names the dtypes its kernels take in ``DTYPES`` (None: all), which ``find``
    reads."""
    if not hasattr(module, "DTYPES"):
        raise ValueError(
            f"kernels.register: {module!r} has no DTYPES; give it DTYPES = None (its kernels "
            "take every dtype) or a set of the dtypes they take"
        )
    _BY_TYPE[array_type] = module


@contextlib.contextmanager
def reference_only() -> Iterator[None]:
    """Inside this block every op runs its reference math (no fast path)."""
    saved = dict(_BY_TYPE)
    _BY_TYPE.clear()
    try:
        yield
    finally:
        _BY_TYPE.update(saved)
