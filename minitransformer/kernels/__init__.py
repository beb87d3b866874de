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

Floors: this package imports only NumPy (and, on a GPU, CuPy) and ``host``; the backend,
the autograd core and the ops stand on it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import ModuleType

import numpy as np

from . import numpy as numpy_kernels

# array type -> the module of fast paths for it (CuPy's is registered when CuPy is first used)
_BY_TYPE: dict[type, ModuleType] = {np.ndarray: numpy_kernels}


def find(x: object) -> ModuleType | None:
    """The kernel module for ``x``'s array library, or None (use the reference math)."""
    return _BY_TYPE.get(type(x))


def register(array_type: type, module: ModuleType) -> None:
    """Use ``module``'s kernels for arrays of ``array_type`` (for example cupy.ndarray)."""
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
