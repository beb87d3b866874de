"""A counting NumPy stand-in for CuPy: the project's CuPy paths run on the CPU.

    def test_something(on_standin):         # the fixture below (import it into the file)
        trainer = Trainer(TrainConfig(device="cuda:0", ...))   # arrays are the stand-in's
        ... on_standin.HAZARDS, on_standin.COUNT

What it emulates:

- ``cupy`` (``cupy.py``): NumPy arrays of a subclass the backend reads as CuPy's, every
  NumPy function, ufunc and array method, ``cupy.cuda`` (one device, streams, events, memory
  pools that count bytes, ``using_allocator``), ``RawModule``/``RawKernel`` and
  ``ElementwiseKernel``, whose kernels run as NumPy functions (``kernels.py``: what each
  ``.cu`` header says, not the GPU's bits). Every call is counted in ``COUNT`` by kind
  (``launch:`` would launch on CuPy, ``view:`` would not).
- CUDA graph capture: between ``begin_capture`` and ``end_capture`` nothing that writes into
  existing memory runs (a GPU runs no kernel while capturing); the calls are recorded and
  ``Graph.launch`` runs them again, in order, on the same arrays with the same Python
  values, so a per-step value passed by value is frozen as on a GPU, and one read from a
  device slot is read anew. What a real capture could not hold is listed in ``HAZARDS``:
  reads back to the host (``get``, ``item``, ``float``, ``bool``...), copies from the host,
  CuPy's own cuBLAS (``cupy.matmul``, ``tensordot``...).
- ``fast/gpu/cublas.py`` and ``cublaslt.py``: their ``matmul`` planned as on a GPU (the
  project's own plan code), the product by NumPy; LayerNorm's side-by-side gradient buffers
  by ``as_strided`` (the real one builds a CuPy array on a raw pointer).

What it does not emulate: timing, streams running concurrently, memory limits, the GPU's
rounding (fused multiply-adds, reduction trees: eager and replayed steps agree here because
they run the same NumPy code, which says nothing about the GPU's bits), CuPy's own
ufunc/kernel caches and compilation, several GPUs, NCCL. Array methods not listed in
``cupy.ndarray`` run NumPy's C code unseen (uncounted, and not replayed by a graph); the
project calls only the listed ones on CuPy arrays.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from . import cupy as standin_cupy


def _cupyx() -> types.ModuleType:
    """``cupyx``: ``scatter_add`` (in place) and ``empty_pinned``."""
    cupyx = types.ModuleType("cupyx")

    def scatter_add(a, slices, value):
        standin_cupy._launch("cupyx.scatter_add", np.add.at, (a, slices, value), inplace=True)

    cupyx.scatter_add = scatter_add
    cupyx.empty_pinned = lambda shape, dtype=float: np.empty(shape, dtype)
    return cupyx


def _cublas_matmul(a, b, cp=None, out=None):
    """``fast/gpu/cublas.matmul``: the project's plan, then the product by NumPy."""
    from minitransformer.fast.gpu import cublas

    cp = standin_cupy
    if a.dtype != b.dtype or a.dtype not in cublas._DTYPES:
        return cp.matmul(a, b, out=out)
    plan, a, b = cublas.planned(a, b, cp.ascontiguousarray)
    if plan is None:
        return cp.matmul(a, b, out=out)
    what = "cublas.gemm" if plan["batch"] == 1 else "cublas.gemmStridedBatched"
    if out is None:
        out = cp.empty(plan["out_shape"], dtype=a.dtype)
    return standin_cupy._launch(what, np.matmul, (a, b), {"out": out}, inplace=True, result=out)


def _cublaslt_matmul(a, b, epilogue, bias=None, out=None, cp=None):
    """``fast/gpu/cublaslt.matmul``: None (no algorithm) where the project's plan has none,
    else the product and its epilogue by NumPy (``lt_product``)."""
    from minitransformer.fast.gpu import cublas

    if a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype or a.dtype not in cublas._DTYPES:
        return None
    item = a.dtype.itemsize
    plan = cublas.plan(a.shape, tuple(s // item for s in a.strides), b.shape,
                       tuple(s // item for s in b.strides))  # fmt: skip
    if not isinstance(plan, dict):
        return None
    if out is None:
        out = standin_cupy.empty((a.shape[0], b.shape[1]), dtype=a.dtype)

    args = (a, b, epilogue, bias, out)
    standin_cupy._launch(f"cublasLt.{epilogue}", lt_product, args, inplace=True)
    return out


def lt_product(a, b, epilogue, bias=None, out=None):
    """cuBLASLt's product as documented, in NumPy: a @ b, the bias added (``BIAS``), or the
    bias gradient written into ``bias`` (``BGRADA``: our b's column sums, ``BGRADB``: our
    a's row sums); into ``out`` where given, returned."""
    from minitransformer.fast.gpu import cublaslt

    y = a @ b
    if epilogue == cublaslt.BIAS:
        y = y + bias
    elif epilogue == cublaslt.BGRADA:
        bias[...] = b.sum(axis=0)  # our b's column sums
    elif epilogue == cublaslt.BGRADB:
        bias[...] = a.sum(axis=1)  # our a's row sums
    if out is None:
        return y
    out[...] = y
    return out


def numpy_cublaslt(available: bool):
    """``fast/gpu/cublaslt.matmul`` for NumPy arrays, without the plan: ``lt_product``, or
    None (no cuBLASLt algorithm: the twin launches what the reference does) where not
    ``available``."""

    def matmul(a, b, epilogue, bias=None, out=None, cp=None):  # noqa: ARG001
        return lt_product(a, b, epilogue, bias, out) if available else None

    return matmul


def _side_by_side(dgamma, dbeta, like):
    """``fast/cupy/layernorm.side_by_side`` with ``as_strided`` for the raw pointer."""
    if dgamma is None or dbeta is None:
        return None
    D = like.shape[1]
    if dgamma.shape != (D,) or dbeta.shape != (D,) or dgamma.dtype != like.dtype:
        return None
    if dbeta.data.ptr != dgamma.data.ptr + D * like.itemsize:
        return None
    base = dgamma.view(np.ndarray)
    both = np.lib.stride_tricks.as_strided(base, (2, D), (D * like.itemsize, like.itemsize))
    return both.view(standin_cupy.ndarray)


def install(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """Make the stand-in this process's CuPy until ``monkeypatch.undo()`` and ``_refresh()``
    (the fixture ``on_standin`` does both): sys.modules, the backend's library registry, the
    fast tier's module-level ``cp``, cuBLAS/cuBLASLt and LayerNorm's pointer code; CuPy's
    namespace, twins and kernels chosen anew (``_refresh``). Returns the module (``COUNT``
    and ``HAZARDS`` cleared)."""
    import importlib
    import pkgutil

    from minitransformer.backend import devices
    from minitransformer.backend import random as backend_random
    from minitransformer.fast.gpu import cublas, cublaslt, cuda_source

    cp = standin_cupy
    cp.COUNT.clear()
    cp.HAZARDS.clear()
    monkeypatch.setitem(sys.modules, "cupy", cp)
    for name, module in (*cp.SUBMODULES.items(), ("cupyx", _cupyx())):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setitem(devices._LIBRARIES, cp.ndarray, "cupy")
    twins = importlib.import_module("minitransformer.fast.cupy")
    for info in pkgutil.iter_modules(twins.__path__):  # each twin's file holds CuPy as ``cp``
        module = importlib.import_module(f"{twins.__name__}.{info.name}")
        if hasattr(module, "cp"):
            monkeypatch.setattr(module, "cp", cp)
    monkeypatch.setattr(cublas, "matmul", _cublas_matmul)
    monkeypatch.setattr(cublaslt, "matmul", _cublaslt_matmul)
    monkeypatch.setattr(twins.layernorm, "side_by_side", _side_by_side)
    monkeypatch.setattr(cuda_source, "_TRUE", {})
    monkeypatch.setattr(twins.layernorm, "_ARRIVALS", {})
    monkeypatch.setattr(backend_random, "_generators", dict(backend_random._generators))
    monkeypatch.setattr(backend_random, "_base_seed", backend_random._base_seed)
    _refresh()
    return cp


@pytest.fixture
def on_standin(monkeypatch: pytest.MonkeyPatch):
    """The stand-in installed for one test (``install``), everything restored after it."""
    cp = install(monkeypatch)
    try:
        yield cp
    finally:
        monkeypatch.undo()
        _refresh()


def _refresh() -> None:
    """CuPy chosen anew at its next use (the stand-in once installed, the real one or none
    after): the cached module and kernels forgotten, the namespace and the stand-in's
    twins dropped (``fast`` registers them again at CuPy's next first use)."""
    from minitransformer import backend
    from minitransformer.backend import devices
    from minitransformer.fast.gpu import cuda_source
    from minitransformer.function import TWINS

    for cache in (devices.cupy_module, cuda_source._module, cuda_source.kernel,
                  cuda_source.elementwise):  # fmt: skip
        cache.cache_clear()
    backend.reset_cupy_namespace()
    for key in [k for k in TWINS if k[1] is standin_cupy.ndarray]:
        del TWINS[key]
