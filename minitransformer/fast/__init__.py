"""The fast tier: measured twins of the reference ops, in one table, beside the ops.

Every op in ``minitransformer/ops`` and every optimizer update in ``minitransformer/optim`` is
the plain math the lessons teach, and that is what runs. A *twin* computes the same numbers
faster for one array library:

- a Function that subclasses the reference op it replaces (``fast.numpy.layernorm.LayerNorm``
  is a ``ops.layernorm.LayerNorm`` whose forward and backward call NumPy kernels), or
- a function with the signature of the plain function it replaces
  (``fast.numpy.adam.adam_update`` for ``optim.adam.adam_update``).

Each twin's file is named after its reference: ``fast/numpy/layernorm.py`` and
``fast/cupy/layernorm.py`` are the twins of ``ops/layernorm.py`` (whose docstring names them
on its "Twins:" line), as ``fast/cuda/layer_norm.cu`` holds the kernels of the second.
``fast/gpu/`` holds what the CuPy twins stand on (cuBLAS, the CUDA sources, the lean CuPy
namespace, CUDA graphs).

Twins are registered in ONE table, ``function.TWINS``, keyed by (reference, array type), and
chosen in one place: ``Function.run`` (for ops) and ``function.implementation`` (for the
optimizer's update, its clipping and the trainer's step flag). Each twin says which dtypes it
takes (``dtypes``; None: all). Print the table with ``python -m minitransformer.fast``.

Where it is on:

- **CPU (NumPy): off** unless switched on with ``enable()``. The CLI (``minitransformer
  train``, ``translate``...), ``bench`` and ``callcount`` switch it on for the process they
  own, like ``host.tune_host()``; ``--reference`` keeps the reference. A notebook runs the
  reference unless it calls ``fast.enable()`` (lesson 11 does, to time both).
- **GPU (CuPy): on** by default: the fused CUDA kernels (``fast/cupy/``, sources in
  ``cuda/*.cu``) and the lean CuPy namespace (``gpu/namespace.py``) are registered when
  CuPy is first used (``backend.on_first_use``). ``MT_CUDA_KERNELS=0``
  switches them off (the reference ops on ``array_api_compat.cupy``). Unset, empty or ``1``
  is on; any other value is a ValueError naming the fix.

``reference_only()`` switches every twin off for a block (the tests compare both ways; a
learner can time the difference).

Floors: this package stands above ``ops`` and ``optim`` (its twins subclass them); nothing
below imports it. ``minitransformer/__init__.py`` imports it, so CuPy's hook is in place.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import numpy as np

from .. import backend
from ..function import TWINS
from . import numpy as numpy_twins

SWITCH = "MT_CUDA_KERNELS"  # the one switch of the GPU kernels (see the module doc)

_numpy_on = False  # enable() / disable(): the NumPy twins
_reference_depth = 0  # inside reference_only(): no twin at all


def cuda_kernels_enabled() -> bool:
    """True unless ``MT_CUDA_KERNELS=0``: CuPy arrays take the fused CUDA kernels and the lean
    CuPy namespace (unset, ``""`` or ``"1"``). ``"0"``: off (the reference ops on
    array_api_compat's CuPy namespace). Read when CuPy is first used (and after
    ``backend.reset_cupy_namespace()``)."""
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


def _use_cupy(cupy_module: Any) -> Any:
    """The hook the backend calls when CuPy is first used: register ``fast/cupy/``'s twins for
    ``cupy.ndarray`` and return the lean CuPy namespace, when the switch is on (and no
    ``reference_only`` block is open); else remove them and return None (the plain one)."""
    array_type = cupy_module.ndarray
    for key in [k for k in TWINS if k[1] is array_type]:
        del TWINS[key]
    from .gpu import decode_graph  # decoding's CUDA graphs: "auto" with the kernels only

    decode_graph.install(kernels_on=not _reference_depth and cuda_kernels_enabled())
    if _reference_depth or not cuda_kernels_enabled():
        return None
    from . import cupy as cupy_twins
    from .gpu import cublas
    from .gpu.namespace import lean_namespace

    TWINS.update({(ref, array_type): twin for ref, twin in cupy_twins.TWINS.items()})
    ns = lean_namespace(cupy_module)
    ns.matmul = ns.linalg.matmul = cublas.bind(cupy_module)  # cuBLAS itself (gpu/cublas.py)
    ns.tensordot = ns.linalg.tensordot = cublas.bind_tensordot(cupy_module)  # dW: capturable
    return ns


backend.on_first_use(_use_cupy)


def _apply() -> None:
    """Make the table match ``_numpy_on`` and ``_reference_depth``; CuPy's twins and
    namespace are chosen again at its next use."""
    on = _numpy_on and not _reference_depth
    for ref, twin in numpy_twins.TWINS.items():
        if on:
            TWINS[(ref, np.ndarray)] = twin
        else:
            TWINS.pop((ref, np.ndarray), None)
    for key in [k for k in TWINS if k[1] is not np.ndarray]:
        del TWINS[key]
    backend.reset_cupy_namespace()


def enable() -> None:
    """Switch the NumPy twins on for this process."""
    global _numpy_on
    _numpy_on = True
    _apply()


def disable() -> None:
    """Switch the NumPy twins off: the reference runs on the CPU (the default)."""
    global _numpy_on
    _numpy_on = False
    _apply()


def enabled() -> bool:
    """Whether ``enable()`` is in force (outside any ``reference_only`` block)."""
    return _numpy_on and not _reference_depth


@contextlib.contextmanager
def reference_only() -> Iterator[None]:
    """Inside this block every op and update runs its reference math (no twin, on any
    device; CuPy's namespace is the plain one too)."""
    global _reference_depth
    _reference_depth += 1
    _apply()
    try:
        yield
    finally:
        _reference_depth -= 1
        _apply()


@contextlib.contextmanager
def switched_on() -> Iterator[None]:
    """Inside this block the NumPy twins are on (as after ``enable()``); afterwards, as
    before."""
    global _numpy_on
    before = _numpy_on
    enable()
    try:
        yield
    finally:
        _numpy_on = before
        _apply()


def _name(obj: Any) -> str:
    return f"{obj.__module__.removeprefix('minitransformer.')}.{obj.__qualname__}"


def table() -> list[dict[str, str]]:
    """Every twin there is, registered or not: reference, array library, twin, dtypes, and
    whether it is registered now ("on"). NumPy's, and CuPy's (``fast/cupy/`` imports without
    CuPy; its twins are registered at CuPy's first use)."""
    from . import cupy as cupy_twins

    rows = []
    for library, twins in (("numpy", numpy_twins.TWINS), ("cupy", cupy_twins.TWINS)):
        on = {ref for ref, kind in TWINS if (kind is np.ndarray) == (library == "numpy")}
        for ref, twin in twins.items():
            dtypes = twin.dtypes
            rows.append({
                "reference": _name(ref),
                "library": library,
                "twin": _name(twin),
                "dtypes": "all" if dtypes is None else ", ".join(sorted(map(str, dtypes))),
                "on": "yes" if ref in on else "no",
            })  # fmt: skip
    return rows


def describe(device: str = "cpu") -> str:
    """What runs on ``device`` now, in a few words: the reference ops or the twins in force
    (for a CUDA device, as ``MT_CUDA_KERNELS`` says; other devices have no twins)."""
    if device.startswith("cuda"):
        if _reference_depth or not cuda_kernels_enabled():
            return "reference ops (MT_CUDA_KERNELS=0)"
        return "fast tier: fused CUDA kernels (fast/cupy/), lean CuPy namespace"
    if device != "cpu" or not enabled():
        return "reference ops"
    names = ", ".join(ref.__name__ for ref in numpy_twins.TWINS)
    from .numpy import compiled  # imports no numba

    kernels = "; numba's compiled kernels" if compiled.enabled() else ""
    return f"fast tier: NumPy twins ({names}){kernels}"


__all__ = [
    "SWITCH",
    "cuda_kernels_enabled",
    "describe",
    "disable",
    "enable",
    "enabled",
    "reference_only",
    "switched_on",
    "table",
]
