"""The stand-in ``cupy`` module: NumPy arrays that the project reads as CuPy's, every call
counted, and CUDA graph capture emulated (see the package doc, ``__init__.py``).

Arrays are ``ndarray`` here, a NumPy subclass (``devices._LIBRARIES`` is told it is CuPy's
by ``install``). Each call that would launch on CuPy goes through ``record._launch``: counted
in ``COUNT`` as ``launch:<what>`` (``view:<what>`` for calls that launch nothing: views,
``empty``), run on NumPy, or recorded while a CUDA graph is captured (``record.py``).
``HAZARDS`` lists what a real capture could not hold (a read back to the host, a copy from
the host, CuPy's own cuBLAS), met while capturing. ``cupy.cuda``: ``cuda.py``; the kernels
of ``fast/cuda/*.cu``: ``kernels.py``.
"""

from __future__ import annotations

import builtins
import sys
import types

import numpy as _np

from . import kernels, record
from .cuda import _DEVICE0, Device, _Memory, cuda  # noqa: F401 - cupy.cuda
from .cuda import SUBMODULES as CUDA_SUBMODULES
from .record import COUNT, HAZARDS, _arrays, _hazard, _hold, _launch, _state, _unwrap, _wrap  # noqa: F401, E501

__version__ = "14.2.0-standin"


class ndarray(_np.ndarray):  # noqa: N801 - CuPy's name
    """CuPy's array, on NumPy (module doc)."""

    @property
    def device(self):
        return _DEVICE0

    @property
    def data(self):
        return _Memory(self)

    def __array_ufunc__(self, ufunc, method, *inputs, out=None, **kw):
        name = "ufunc." + ufunc.__name__ + ("" if method == "__call__" else "." + method)
        if ufunc is _np.matmul:
            _hazard("cupy.matmul (CuPy's own cuBLAS: refused under capture)")
        call = getattr(ufunc, method)
        if out is not None:
            kw["out"] = out
            result = out[0] if len(out) == 1 else out
            return _launch(name, call, inputs, kw, inplace=True, result=result)
        return _launch(name, call, inputs, kw, inplace=method == "at")

    def __array_function__(self, func, types_, args, kwargs):
        name, out = "np." + func.__name__, kwargs.get("out")
        if func.__name__ in _IN_PLACE or out is not None:
            return _launch(name, func, args, kwargs, inplace=True, result=out)
        return _launch(name, func, args, kwargs)

    def _method(self, name, *args, **kw):
        return _launch(name, getattr(_np.ndarray, name), (self, *args), kw)

    def reshape(self, *a, **k):
        return self._method("reshape", *a, **k)

    def astype(self, *a, **k):
        return self._method("astype", *a, **k)

    def copy(self, *a, **k):
        return self._method("copy", *a, **k)

    def ravel(self, *a, **k):
        return self._method("ravel", *a, **k)

    def flatten(self, *a, **k):
        return self._method("flatten", *a, **k)

    def argmax(self, *a, **k):
        return self._method("argmax", *a, **k)

    def argmin(self, *a, **k):
        return self._method("argmin", *a, **k)

    def take(self, *a, **k):
        return self._method("take", *a, **k)

    def dot(self, *a, **k):
        _hazard("cupy.dot (CuPy's own cuBLAS: refused under capture)")
        return self._method("dot", *a, **k)

    def fill(self, value):
        return _launch("fill", _np.ndarray.fill, (self, value), inplace=True)

    def __getitem__(self, key):
        base, k = self.view(_np.ndarray), _unwrap(key)
        r = base[k]
        if not isinstance(r, _np.ndarray):  # a full integer index: CuPy gives a 0-d view
            COUNT["view:getitem"] += _state.depth == 0
            return base[(*(k if isinstance(k, tuple) else (k,)), Ellipsis)].view(ndarray)
        if _np.may_share_memory(r, base):
            COUNT["view:getitem"] += _state.depth == 0
            return r.view(ndarray)
        if any(type(a) is _np.ndarray for a in _arrays(key)):
            _hazard("index from host (H2D)")
        return _launch("getitem(gather)", _np.ndarray.__getitem__, (self, key))

    def __setitem__(self, key, value):
        if _state.capture is not None and (type(value) is _np.ndarray or type(key) is _np.ndarray):
            _hazard("setitem from host (H2D)")
        _launch("setitem", _np.ndarray.__setitem__, (self, key, value), inplace=True)

    def get(self, stream=None, out=None, **kw):
        _hazard("get (D2H)")
        COUNT["launch:get(D2H)"] += 1
        r = _np.array(self.view(_np.ndarray))
        if out is not None:
            out[...] = r
            return out
        return r

    def set(self, arr, stream=None):
        _hazard("set (H2D)")
        _launch("set(H2D)", _np.copyto, (self, _np.asarray(arr)), inplace=True)

    def item(self):
        _hazard("item (D2H)")
        return self.view(_np.ndarray).item()

    def tolist(self):
        _hazard("tolist (D2H)")
        return self.view(_np.ndarray).tolist()

    def __bool__(self):
        _hazard("bool (D2H)")
        return builtins.bool(self.view(_np.ndarray))

    def __float__(self):
        _hazard("float (D2H)")
        return builtins.float(self.view(_np.ndarray))

    def __int__(self):
        _hazard("int (D2H)")
        return builtins.int(self.view(_np.ndarray))

    def __index__(self):
        _hazard("index (D2H)")
        return builtins.int(self.view(_np.ndarray))


ndarray.__module__ = "cupy"

_IN_PLACE = {"copyto", "put", "place", "putmask", "put_along_axis", "fill_diagonal"}
_FREE = {"isdtype", "result_type", "can_cast", "shape", "ndim", "size", "iscomplexobj"}
_ALLOCATE = {"empty", "empty_like"}  # no launch on CuPy (zeros here: reproducible)
_CUBLAS = {"matmul", "dot", "tensordot", "einsum", "inner", "outer", "vdot"}


def _function(name: str, f):
    """``cupy.<name>``: NumPy's function, counted, recorded inside a capture."""

    def call(*args, **kw):
        if name in _FREE:
            return f(*_unwrap(args), **_unwrap(kw))
        if name in _ALLOCATE:
            COUNT[f"view:{name}"] += 1
            f0 = _np.zeros if name == "empty" else _np.zeros_like
            r = _wrap(f0(*_unwrap(args), **_unwrap(kw)))
            _hold([r])
            return r
        if name in ("asarray", "array") and args and not isinstance(args[0], ndarray):
            _hazard(f"{name} from host (H2D)")
        if name in _CUBLAS:
            _hazard(f"cupy.{name} (CuPy's own cuBLAS: refused under capture)")
        if name in _IN_PLACE or kw.get("out") is not None:
            return _launch(name, f, args, kw, inplace=True, result=kw.get("out"))
        return _launch(name, f, args, kw)

    call.__name__ = name
    return call


_module = sys.modules[__name__]
for _name in dir(_np):
    _obj = getattr(_np, _name)
    if _name.startswith("_") or hasattr(_module, _name):
        continue
    if isinstance(_obj, type) or not callable(_obj):
        if not isinstance(_obj, type) or issubclass(_obj, _np.generic):
            setattr(_module, _name, _obj)
        continue
    setattr(_module, _name, _function(_name, _obj))
for _name in ("dtype", "finfo", "iinfo"):
    setattr(_module, _name, getattr(_np, _name))
bool_ = _np.bool_
bool = _np.bool_  # noqa: A001 - the array API's name
concat = _function("concat", _np.concatenate)

linalg = types.ModuleType("cupy.linalg")
for _name in dir(_np.linalg):
    if not _name.startswith("_") and callable(getattr(_np.linalg, _name)):
        setattr(linalg, _name, _function("linalg." + _name, getattr(_np.linalg, _name)))
fft = types.ModuleType("cupy.fft")


# ----------------------------------------------------------------------------- kernels


class RawKernel:
    """A kernel of ``fast/cuda/*.cu``, run by its NumPy twin in ``kernels.py``."""

    def __init__(self, name):
        self.name = name
        self.run = kernels.raw(name)

    def __call__(self, grid, block, args, **kw):
        return _launch("raw." + self.name, self.run, tuple(args), inplace=True)


class RawModule:
    def __init__(self, code=None, options=(), **kw):
        self.code = code

    def get_function(self, name):
        return RawKernel(name)


class ElementwiseKernel:
    """``cupy.ElementwiseKernel``, run by its NumPy twin in ``kernels.py`` (by name); an
    output not given is made like the first input array."""

    def __init__(self, in_params, out_params, operation, name="kernel", **kw):
        self.n_in = len([p for p in in_params.split(",") if p.strip()])
        self.name = name
        self.run = kernels.elementwise(name)

    def __call__(self, *args, **kw):
        if len(args) == self.n_in:
            first = next(a for a in args if isinstance(a, _np.ndarray))
            out = _np.zeros_like(first.view(_np.ndarray)).view(ndarray)
            _hold([out])
            args = (*args, out)
        _launch("ek." + self.name, self.run, args, inplace=True)
        return args[-1]


ReductionKernel = ElementwiseKernel


record.STANDIN_ARRAY = ndarray
_pool = cuda.MemoryPool()  # CuPy's default pool
get_default_memory_pool = lambda: _pool  # noqa: E731
get_default_pinned_memory_pool = lambda: _pool  # noqa: E731

# what ``install`` puts into sys.modules beside this module (as "cupy")
SUBMODULES = {**CUDA_SUBMODULES, "cupy.linalg": linalg, "cupy.fft": fft}
